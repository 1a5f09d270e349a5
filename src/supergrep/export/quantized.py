"""`supergrep quantize`: group-wise int8/int4 weights in a model directory `--model-path` loads.

What is quantized: every ``nn.Linear`` of the transformer and (unless ``embeddings=False``) its
``nn.Embedding`` tables, with per-layer overrides by pattern; the word embeddings are half of
MiniLM's weights, so leaving them in float would cap the int8 model at ~62% of fp32. The
projection head (``N_Dense``) stays float: it is small and every vector passes through it.
LayerNorms and biases stay float32. The pooler is dropped (token vectors never use it).

The directory written is a supergrep model (``supergrep_model.json`` with ``"base": "."`` and a
``quantization`` record), a Hugging Face ``config.json`` + tokenizer files, the quantized
weights in ``model.quantized.safetensors`` (format: ``supergrep.backends.quant``) and the
projection(s) as ``1_Dense/``... The torch backend dequantizes at load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from supergrep import __version__
from supergrep.backends.quant import QUANT_FILE, QuantParams, quantize
from supergrep.encoder.spec import SPEC_FILE, VECTOR_FILES, ModelSpec, resolve_model, write_config
from supergrep.errors import UsageError

TOKENIZER_FILES = tuple(f for f in VECTOR_FILES if f != "config.json")


def glob_regex(pattern: str) -> re.Pattern:
    """A glob over dotted module names: ``*`` is one name component, ``**`` any run of them.

    >>> bool(glob_regex("encoder.layer.*.output.dense").fullmatch("encoder.layer.3.output.dense"))
    True
    >>> bool(glob_regex("encoder.layer.*.output.dense").fullmatch("encoder.layer.3.attention.output.dense"))
    False
    >>> bool(glob_regex("encoder.**.dense").fullmatch("encoder.layer.3.attention.output.dense"))
    True
    """
    out = []
    for i, part in enumerate(pattern.split("**")):
        if i:
            out.append(".*")
        out.append("".join("[^.]*" if c == "*" else "[^.]" if c == "?" else re.escape(c) for c in part))
    return re.compile("".join(out))


@dataclass(frozen=True)
class LayerRule:
    """``PATTERN=BITS``: a glob over dotted module names (``encoder.layer.*.output.dense``; ``*``
    is one name component, ``**`` any number), or a regular expression after ``re:`` (searched
    anywhere in the name); BITS 0 keeps float."""

    pattern: str
    bits: int

    @classmethod
    def parse(cls, text: str) -> LayerRule:
        """``"PATTERN=BITS"`` -> rule; a one-line UsageError for anything else.

        >>> LayerRule.parse("encoder.layer.0.*=4")
        LayerRule(pattern='encoder.layer.0.*', bits=4)
        """
        pattern, sep, bits = text.rpartition("=")
        if not sep or not pattern:
            raise UsageError(f"--layers expects PATTERN=BITS (e.g. 'encoder.layer.0.*=8'), got {text!r}")
        if bits not in ("0", "4", "8"):
            raise UsageError(f"--layers {text}: BITS must be 0 (keep float), 4 or 8, not {bits!r}")
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as exc:
                raise UsageError(f"--layers {text}: bad regular expression ({exc})") from None
        return cls(pattern, int(bits))

    def matches(self, name: str) -> bool:
        if self.pattern.startswith("re:"):
            return re.search(self.pattern[3:], name) is not None
        return glob_regex(self.pattern).fullmatch(name) is not None


@dataclass
class QuantizeReport:
    output: Path
    bytes_before: int
    bytes_after: int
    quantized: dict[int, int] = field(default_factory=dict)  # bits -> number of tensors
    kept_float: int = 0  # Linear/Embedding weights left in float (BITS 0)
    parity: object | None = None  # export.parity.ParityReport

    @property
    def ratio(self) -> float:
        return self.bytes_after / self.bytes_before if self.bytes_before else 0.0


def model_bytes(spec: ModelSpec) -> int:
    """Bytes of a model's weight files (transformer, projections, adapter)."""
    return sum(f.stat().st_size for f in spec.weight_files())


def _plan(model, bits: int, embeddings: bool, rules: list[LayerRule]) -> dict[str, int]:
    """Module name -> bits (0: float) for every Linear / Embedding of the transformer."""
    import torch

    plan: dict[str, int] = {}
    for name, module in model.named_modules():
        if name.startswith("pooler") or ".pooler" in name:
            continue
        if isinstance(module, torch.nn.Linear):
            plan[name] = bits
        elif isinstance(module, torch.nn.Embedding):
            plan[name] = bits if embeddings else 0
    for rule in rules:
        hit = [n for n in plan if rule.matches(n)]
        if not hit:
            some = ", ".join(list(plan)[:3])
            raise UsageError(f"--layers {rule.pattern}={rule.bits} matches no Linear or Embedding layer "
                             f"(names look like: {some}, ...)")
        for n in hit:
            plan[n] = rule.bits
    return plan


def quantize_model(model_dir: Path | str, output: Path | str, bits: int = 8, group_size: int = 64,
                   symmetric: bool = True, rules: list[LayerRule] | None = None, embeddings: bool = True,
                   force: bool = False, check: bool = True) -> QuantizeReport:
    """Write a group-wise quantized copy of ``model_dir`` to ``output``.

    Args:
        model_dir: Any model directory supergrep reads (a LoRA checkpoint is folded first).
        output: The new model directory.
        bits: 8 or 4, for every Linear (and Embedding) not overridden by ``rules``.
        group_size: Input columns per scale (an even number; a narrower tensor gets one
            group per row).
        symmetric: Scales only (True) or scales + zero points.
        rules: Per-layer overrides, applied in order (the last matching rule wins).
        embeddings: Quantize the embedding tables too.
        force: Overwrite a non-empty ``output``.
        check: Compare the result's vectors with the float model's (``export.parity``) and
            record whether they may share indexes.

    Raises:
        UsageError: bad bits / group size / pattern, a non-empty output, an ONNX or already
            quantized input.
    """
    import numpy as np
    import torch
    from safetensors.numpy import save_file

    from supergrep.backends.torch_backend import load_encoder

    if bits not in (4, 8):
        raise UsageError(f"--bits must be 8 or 4, not {bits}")
    if group_size <= 0 or group_size % 2:
        raise UsageError(f"--group-size must be a positive even number, not {group_size}")
    spec = resolve_model(model_dir)
    if spec.onnx_file is not None:
        raise UsageError(f"{model_dir} is an ONNX export; quantize the float model directory instead")
    if spec.quantization is not None:
        raise UsageError(f"{model_dir} is already quantized ({spec.form}); quantize the float model instead")
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not force:
        raise UsageError(f"{output} exists and is not empty; pass --force to overwrite it")

    model = load_encoder(spec, torch.float32)  # the adapter (if any) folded in
    plan = _plan(model, bits, embeddings, rules or [])
    state = model.state_dict()
    first_name: dict[int, str] = {}
    aliases: dict[str, str] = {}
    tensors: dict[str, np.ndarray] = {}
    record: dict[str, dict] = {}
    counts: dict[int, int] = {}
    for key, value in state.items():
        if key.startswith("pooler.") or ".pooler." in key:
            continue
        ptr = value.data_ptr()
        if ptr in first_name and value.shape == state[first_name[ptr]].shape:
            aliases[key] = first_name[ptr]  # tied weights (T5's shared embedding) stored once
            continue
        first_name[ptr] = key
        arr = value.detach().float().cpu().numpy()
        module = key.rsplit(".", 1)[0]
        b = plan.get(module, 0) if key.endswith(".weight") and arr.ndim == 2 else 0
        if b:
            cols = arr.shape[1]  # narrower than a group: one group per row, not a padded one
            p = QuantParams(b, min(group_size, cols + cols % 2), symmetric)
            for part, v in quantize(arr, p).items():
                tensors[f"{key}.{part}"] = v
            record[key] = {"shape": list(arr.shape), **p.to_dict()}
            counts[b] = counts.get(b, 0) + 1
        else:
            tensors[key] = np.ascontiguousarray(arr)
    kept = sum(1 for m, b in plan.items() if b == 0)

    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / QUANT_FILE), metadata={"format": "supergrep-groupwise-1"})
    write_config(spec, tmp)  # a layer-dropped model's count of layers
    for name in TOKENIZER_FILES:
        src = spec.transformer_path / name
        if src.is_file():
            shutil.copy2(src, tmp / name)
    for i, d in enumerate(spec.dense, start=1):  # projections stay float
        (tmp / f"{i}_Dense").mkdir()
        for f in d.path.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f"{i}_Dense" / f.name)
    form = f"q{bits}g{group_size}" + ("" if symmetric else "a")
    meta = {
        "name": f"{spec.name}-{form}",
        "base": ".",
        "form": form,
        "settings": spec.settings.to_dict(),
        "quantization": {
            "file": QUANT_FILE, "bits": bits, "group_size": group_size, "symmetric": symmetric,
            "embeddings": embeddings, "layers": [f"{r.pattern}={r.bits}" for r in rules or []],
            "tensors": record, "aliases": aliases,
        },
        "source": {"name": spec.name, "path": str(spec.path), "fingerprint": spec.fingerprint(),
                   "form": spec.form, "compatible": False},
        "supergrep_version": __version__,
    }
    _write_meta(tmp, meta)
    report = QuantizeReport(output, model_bytes(spec), 0, counts, kept)
    if check:
        report.parity = _check(spec, tmp, meta)
    if output.exists():
        shutil.rmtree(output) if output.is_dir() else output.unlink()
    os.replace(tmp, output)
    report.bytes_after = model_bytes(resolve_model(output))
    return report


def _write_meta(directory: Path, meta: dict) -> None:
    (directory / SPEC_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def _check(source: ModelSpec, directory: Path, meta: dict):
    """Parity against the float model; marks the directory compatible when close enough."""
    from supergrep.encoder.encoder import Encoder
    from supergrep.export.parity import compare

    ref = Encoder(source, backend="torch", device="cpu")
    got = Encoder(resolve_model(directory), backend="torch", device="cpu")
    report = compare(ref, got)
    meta["source"]["compatible"] = report.compatible
    meta["parity"] = report.to_dict()
    _write_meta(directory, meta)
    return report


