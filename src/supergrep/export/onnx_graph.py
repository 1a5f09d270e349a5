"""`supergrep export onnx`: a model directory the onnxruntime backend runs, torch-free.

The graph is what ``Backend.forward`` computes: ``input_ids`` and ``attention_mask`` (int64,
``(batch, length)``, both axes dynamic) -> ``vectors`` (float32 ``(batch, length, dim)``, unit
rows): transformer, projection(s) and L2 normalisation. It is traced from the torch backend's
own modules (a LoRA checkpoint is folded, a `supergrep quantize` directory dequantized), with
eager attention, so onnxruntime's transformer optimizer can fuse attention, LayerNorm and
GELU (``--no-optimize`` keeps a plain ONNX graph;
the fused one uses onnxruntime's contrib ops). ``int8=True`` then quantizes it dynamically
(``onnxruntime.quantization.quantize_dynamic``: int8 weights per tensor, activations quantized
per batch at run time), which is the fast CPU path (docs/deployment.md).

The directory holds ``model.onnx``, ``config.json``, the tokenizer (``tokenizer.json`` as the
source's fast tokenizer saves it) and ``supergrep_model.json`` with the encoder settings, the
special-token ids (so search needs only ``tokenizers`` + ``onnxruntime``, not transformers or
torch), the source model's fingerprint and the parity measured against it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from supergrep import __version__
from supergrep.encoder.spec import SPEC_FILE, VECTOR_FILES, ModelSpec, resolve_model, write_config
from supergrep.errors import ModelError, UsageError

log = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
# Bumped whenever the export changes what it writes, so cached exports are redone.
# 2: LayerNorm and GELU left unfused (see _optimize).
EXPORT_RECIPE = 2
OPSET = 17
# Architectures whose attention onnxruntime's "bert" optimizer fuses (others export unfused).
_BERT_LIKE = {"bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra", "mpnet"}
# The additive mask value of BERT's original code: exp(-10000) is 0 in float32 and it stays
# finite in float16 (Core ML), where float32's min would overflow.
MASK_VALUE = -10000.0


@dataclass
class ExportReport:
    output: Path
    bytes_before: int
    bytes_after: int
    int8: bool
    optimized: bool
    mask: str  # "4d" (additive, built in the graph) or "2d" (the model's own mask code)
    parity: object | None = None
    notes: list[str] = field(default_factory=list)


def _need(module: str, extra: str = "export"):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{module} is not installed; pip install 'supergrep[{extra}]'") from None


def token_vectors_module(spec: ModelSpec, mask: str = "auto"):
    """A torch module ``(input_ids, attention_mask) -> unit token vectors`` for tracing, with
    eager attention; returns (module, mask mode). ``mask="auto"`` tries the model's own mask
    code first (its traced pattern is what onnxruntime's attention fusion recognises), then a
    4-D additive mask, and keeps the first whose outputs match the backend's own forward."""
    import numpy as np
    import torch

    from supergrep.backends.torch_backend import TorchBackend

    backend = TorchBackend(spec, device="cpu")
    rng = np.random.default_rng(0)
    ids = rng.integers(5, min(1000, _vocab_size(spec)), size=(2, 12)).astype(np.int64)
    am = np.ones_like(ids)
    am[1, 7:] = 0
    want = backend.forward(ids, am)  # (2, 12, dim), the reference (its own attention kernels)
    model, head = backend.model, backend.head
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation("eager")
        except (ValueError, AttributeError) as exc:  # pragma: no cover - model specific
            log.info("eager attention not available (%s); tracing the default kernels", exc)

    class TokenVectors(torch.nn.Module):
        def __init__(self, use_4d: bool):
            super().__init__()
            self.model, self.head, self.use_4d = model, head, use_4d

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            if self.use_4d:
                # (batch, 1, 1, length): 0 where attended, MASK_VALUE at padding.
                m = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * MASK_VALUE
            else:
                m = attention_mask
            hidden = self.model(input_ids=input_ids, attention_mask=m).last_hidden_state  # (B, L, H)
            vecs = self.head(hidden).float()  # (B, L, dim)
            return torch.nn.functional.normalize(vecs, p=2, dim=-1)

    keep = am.astype(bool)
    for mode in (["2d", "4d"] if mask == "auto" else [mask]):
        module = TokenVectors(mode == "4d").eval()
        try:
            with torch.inference_mode():
                got = module(torch.from_numpy(ids), torch.from_numpy(am)).numpy()
        except Exception as exc:  # noqa: BLE001 - a model that rejects 4-D masks
            log.info("%s mask rejected (%s)", mode, exc)
            continue
        if np.abs(got[keep] - want[keep]).max() < 1e-4:
            return module, mode
        log.info("%s mask changes the vectors; not used", mode)
    raise ModelError(f"{spec.path}: cannot trace this model for export (its outputs change with eager "
                     f"attention); use the torch backend")


def _vocab_size(spec: ModelSpec) -> int:
    cfg = json.loads((spec.transformer_path / "config.json").read_text())
    return int(cfg.get("vocab_size") or 1000)


def _copy_tokenizer(spec: ModelSpec, directory: Path) -> dict | None:
    """Copy the tokenizer files; save the fast tokenizer as tokenizer.json and return the
    special-token ids the torch-free loader needs (None when there is no fast tokenizer)."""
    from supergrep.encoder.tokenize import RoleTokenizer

    for name in VECTOR_FILES:
        src = spec.transformer_path / name
        if src.is_file():
            shutil.copy2(src, directory / name)
    write_config(spec, directory)  # a layer-dropped model's count of layers
    rt = RoleTokenizer(spec)
    tok = rt.tok
    fast = getattr(tok, "backend_tokenizer", None)
    if fast is None:
        return None
    fast.save(str(directory / "tokenizer.json"))
    return {
        "unk_token": tok.unk_token, "unk_id": tok.unk_token_id, "pad_id": tok.pad_token_id,
        "eos_id": tok.eos_token_id, "mask_id": tok.mask_token_id,
        "added_vocab": {str(k): int(v) for k, v in tok.get_added_vocab().items()},
    }


def _optimize(path: Path, spec: ModelSpec) -> bool:
    """Fuse attention / LayerNorm / GELU with onnxruntime's transformer optimizer (in place)."""
    if spec.model_type not in _BERT_LIKE:
        return False
    _need("onnxruntime")
    from onnxruntime.transformers import optimizer

    cfg = json.loads((spec.transformer_path / "config.json").read_text())
    heads, hidden = int(cfg.get("num_attention_heads", 0)), int(cfg.get("hidden_size", 0))
    if not heads or not hidden:
        return False
    from onnxruntime.transformers.fusion_options import FusionOptions

    # Attention and the embedding LayerNorm fused; the residual + LayerNorm (SkipLayerNormalization)
    # and bias + GELU (BiasGelu) not: onnxruntime 1.32's CPU kernels for those two are slower than
    # the plain ops they replace (SkipLayerNormalization 8.6 ms vs Add + LayerNormalization 2.5 ms
    # at (32, 256, 384) on 2 cores), and leaving both out made minilm-l3's int8 forward 1.21-1.26x
    # faster with the same vectors (docs/deployment.md, "Unfused LayerNorm and GELU").
    # OnnxBackend also disables the session's own SkipLayerNormFusion, which would redo it.
    fo = FusionOptions("bert")
    fo.enable_skip_layer_norm = fo.enable_bias_skip_layer_norm = fo.enable_bias_gelu = False
    opt = optimizer.optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden,
                                   opt_level=0, optimization_options=fo)
    fused = opt.get_fused_operator_statistics()
    log.info("onnxruntime fusions: %s", {k: v for k, v in fused.items() if v})
    opt.save_model_to_file(str(path))
    return bool(fused.get("Attention") or fused.get("EmbedLayerNormalization"))


def module_name(node_name: str) -> str:
    """The torch module a traced MatMul came from, in torch's dotted naming.

    >>> module_name("/model/encoder/layer.5/output/dense/MatMul")
    'encoder.layer.5.output.dense'
    """
    parts = [p for p in node_name.split("/") if p]
    if parts and parts[0] == "model":
        parts = parts[1:]
    if parts and parts[-1].startswith("MatMul"):
        parts = parts[:-1]
    return ".".join(parts)


# MatMuls kept float by `--int8` unless a --layers rule says 8: the FFN output projections,
# whose input (the GELU output) has outliers that per-tensor activation quantization crushes.
# MiniLM on the public set: all-int8 loses 3.2 points of semantic and 1.3 of hybrid MRR (mean
# token cosine 0.987); with these float, +1.0 semantic and -0.9 hybrid (0.993), for 3.5 MB more
# (docs/deployment.md).
DEFAULT_FLOAT_LAYERS = ("encoder.layer.*.output.dense", "encoder.block.*.layer.*.DenseReluDense.wo")


def _quantize_int8(src: Path, dst: Path, rules: list | None = None) -> list[str]:
    """Dynamic int8 with per-channel weight scales (per-tensor scales cost MiniLM 0.06 of mean
    token cosine, per-channel 0.012). Each MatMul is int8 unless DEFAULT_FLOAT_LAYERS or the
    ``rules`` (LayerRules with bits 0 or 8, the last match wins) say float. Returns the names
    of the nodes kept float."""
    onnx = _need("onnx")
    _need("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from supergrep.export.quantized import LayerRule

    model = onnx.load(str(src))
    names = [n.name for n in model.graph.node if n.op_type == "MatMul" and module_name(n.name)]
    del model
    rules = rules or []
    for r in rules:
        if not any(r.matches(module_name(n)) for n in names):
            raise UsageError(f"--layers {r.pattern}={r.bits} matches no quantizable MatMul of the graph "
                             f"(names look like encoder.layer.0.output.dense)")
    keep = []
    for n in names:
        bits = 8
        for r in [LayerRule(p, 0) for p in DEFAULT_FLOAT_LAYERS] + rules:
            if r.matches(module_name(n)):
                bits = r.bits
        if bits == 0:
            keep.append(n)
    logging.disable(logging.WARNING)  # its generic "consider pre-processing" advice, on the root logger
    try:
        _dynamic(quantize_dynamic, QuantType, onnx, src, dst, keep)
    finally:
        logging.disable(logging.NOTSET)
    _float_weights_as_fp16(onnx, dst)
    return keep


def _float_weights_as_fp16(onnx, path: Path) -> int:
    """Store the weights of the MatMuls left float as float16, each behind a Cast to float32.

    onnxruntime folds the Cast once when the session starts (constant folding), so inference
    runs the same float32 MatMul; the file loses 2 bytes per weight (MiniLM's int8 export: 33.4
    -> 26.3 MB) for a float16 rounding of those weights (relative error <= 2**-11). Returns the
    number of weights converted."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    casts = []
    for node in model.graph.node:
        init = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
        if init is None or init.data_type != TensorProto.FLOAT:
            continue
        half = numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), f"{init.name}_fp16")
        model.graph.initializer.remove(init)
        model.graph.initializer.append(half)
        del inits[init.name]
        casts.append(helper.make_node("Cast", [half.name], [init.name], to=TensorProto.FLOAT, name=f"{init.name}_cast"))
    for node in reversed(casts):  # before their users: the graph stays topologically sorted
        model.graph.node.insert(0, node)
    onnx.save(model, str(path))
    return len(casts)


def _dynamic(quantize_dynamic, QuantType, onnx, src: Path, dst: Path, keep: list[str]) -> None:  # noqa: N803
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                     nodes_to_exclude=keep, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def export_onnx(model_dir: Path | str, output: Path | str, int8: bool = False, optimize: bool = True,
                force: bool = False, check: bool = True, name: str | None = None,
                layer_rules: list | None = None) -> ExportReport:
    """Export ``model_dir`` to an ONNX model directory at ``output``.

    Args:
        model_dir: Any model directory the torch backend loads (plain, LoRA checkpoint,
            merged, or `supergrep quantize` output: exported with its dequantized weights).
        output: The new model directory (``--model-path`` with ``--backend onnx``).
        int8: Quantize the graph dynamically to int8 (onnxruntime).
        layer_rules: With ``int8``, LayerRules (``PATTERN=0`` keeps float, ``PATTERN=8``
            quantizes) applied after DEFAULT_FLOAT_LAYERS.
        optimize: Fuse with onnxruntime's transformer optimizer (BERT-like models).
        force: Overwrite a non-empty ``output``.
        check: Measure parity with the source and record whether indexes may be shared.
        name: Model name to record (default: source name + form).

    Raises:
        UsageError: missing packages, a non-empty output, an input that is already ONNX.
    """
    torch = _need("torch")
    _need("onnx")
    _need("onnxruntime")
    from supergrep.export.quantized import model_bytes

    spec = resolve_model(model_dir)
    if spec.onnx_file is not None:
        raise UsageError(f"{model_dir} is already an ONNX export; export the float model directory instead")
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not force:
        raise UsageError(f"{output} exists and is not empty; pass --force to overwrite it")
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if layer_rules and not int8:
            raise UsageError("--layers only applies with --int8")
        if any(r.bits not in (0, 8) for r in layer_rules or []):
            raise UsageError("with --int8, --layers takes PATTERN=0 (keep float) or PATTERN=8")
        report = _export_into(spec, tmp, output, int8, optimize, check, name, torch, layer_rules or [])
        report.bytes_before = model_bytes(spec)
        if output.exists():
            shutil.rmtree(output) if output.is_dir() else output.unlink()
        os.replace(tmp, output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.bytes_after = (output / ONNX_FILE).stat().st_size
    return report


def _export_into(spec: ModelSpec, tmp: Path, output: Path, int8: bool, optimize: bool, check: bool,
                 name: str | None, torch, layer_rules: list) -> ExportReport:
    import warnings

    module, mask = token_vectors_module(spec)
    graph = tmp / ONNX_FILE
    ids = torch.randint(5, min(1000, _vocab_size(spec)), (2, 16))
    am = torch.ones_like(ids)
    am[1, 10:] = 0  # a padded row, so no mask branch is traced away
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python branches
        torch.onnx.export(
            module, (ids, am), str(graph), input_names=["input_ids", "attention_mask"],
            output_names=["vectors"], opset_version=OPSET, dynamo=False,
            dynamic_axes={"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
                          "vectors": {0: "batch", 1: "length"}},
        )
    optimized = _optimize(graph, spec) if optimize else False
    kept: list[str] = []
    if int8:
        q = tmp / "model.int8.onnx"
        kept = _quantize_int8(graph, q, layer_rules)
        os.replace(q, graph)
    for extra in tmp.glob("*.data"):  # no external data: the graph is one file
        extra.unlink()
    tok_meta = _copy_tokenizer(spec, tmp)
    form = "onnx-int8" if int8 else "onnx-fp32"
    meta = {
        "name": name or f"{spec.name}-{form}",
        "base": ".",
        "form": form,
        "settings": spec.settings.to_dict(),
        "onnx": {"file": ONNX_FILE, "dim": spec.dim, "opset": OPSET, "recipe": EXPORT_RECIPE, "int8": int8, "optimized": optimized,
                 "mask": mask, "inputs": ["input_ids", "attention_mask"], "outputs": ["vectors"],
                 "float_layers": [module_name(n) for n in kept]},
        "source": {"name": spec.name, "path": str(spec.path), "fingerprint": spec.fingerprint(),
                   "form": spec.form, "compatible": False},
        "supergrep_version": __version__,
    }
    if tok_meta is not None:
        meta["tokenizer"] = tok_meta
    (tmp / SPEC_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    report = ExportReport(output, 0, 0, int8, optimized, mask)
    if check:
        from supergrep.encoder.encoder import Encoder
        from supergrep.export.parity import compare

        ref = Encoder(spec, backend="torch", device="cpu")
        got = Encoder(resolve_model(tmp), backend="onnx", device="cpu")
        if tok_meta is not None:
            texts = ["def f(x):\n    return x", "[CLS] odd  spacing\tand ünïcode", ""]
            if got.tokenizer(texts, "document") != ref.tokenizer(texts, "document"):
                raise ModelError(f"{spec.path}: the exported tokenizer gives other token ids than the "
                                 f"source's; export is not possible for this tokenizer")
        report.parity = compare(ref, got)
        meta["source"]["compatible"] = report.parity.compatible
        meta["parity"] = report.parity.to_dict()
        (tmp / SPEC_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return report


def cached_export_dir(spec: ModelSpec, int8: bool = True, rules: list[str] | None = None) -> Path:
    """Where ``cached_export`` keeps the ONNX form of ``spec`` (keyed by its fingerprint, the
    export recipe and the int8 ``--layers`` rules)."""
    import hashlib

    from supergrep.config import supergrep_home

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec.name)
    form = "onnx-int8" if int8 else "onnx-fp32"
    if int8 and rules:
        form += "-l" + hashlib.sha256("\n".join(rules).encode()).hexdigest()[:6]
    return supergrep_home() / "models" / f"{safe}-{form}-r{EXPORT_RECIPE}-{spec.fingerprint()[:12]}"


def cached_export(spec: ModelSpec, int8: bool = True, rules: list[str] | None = None) -> Path:
    """The ONNX form of ``spec`` under ``$SUPERGREP_HOME/models``, exported on first use;
    ``rules`` are int8 `--layers` rules (``PATTERN=BITS``)."""
    from supergrep.export.quantized import LayerRule

    target = cached_export_dir(spec, int8, rules)
    if (target / SPEC_FILE).is_file():
        return target
    log.warning("exporting %s to ONNX%s once, into %s", spec.name, " int8" if int8 else "", target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        export_onnx(spec.path, target, int8=int8, force=True, name=spec.name + ("-onnx-int8" if int8 else "-onnx"),
                    layer_rules=[LayerRule.parse(r) for r in rules or []] if int8 else None)
    except OSError:
        if not (target / SPEC_FILE).is_file():  # another process finishing first is fine
            raise
    return target
