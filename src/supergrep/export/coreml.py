"""`supergrep export coreml`: an ML Program package (``.mlpackage``) for Apple devices.

The converted program computes what ``Backend.forward`` does: ``input_ids`` and
``attention_mask`` (int32, ``(batch, length)``, both ranges flexible) -> ``vectors``
(float32, ``(batch, length, dim)``, unit rows), projection and normalisation included. It is
traced from the torch backend's modules with eager attention and an additive 4-D mask
(transformers' own mask code uses ops coremltools cannot convert). Conversion runs anywhere
coremltools installs; prediction needs macOS. The encoder settings, the special-token ids and
the source model's fingerprint are in the package's user metadata (``supergrep.*`` keys) and
``tokenizer.json`` is written beside the package as ``<name>.tokenizer.json``.
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from supergrep import __version__
from supergrep.encoder.spec import resolve_model
from supergrep.errors import ModelError, UsageError

log = logging.getLogger(__name__)


@dataclass
class CoreMLReport:
    output: Path
    bytes_after: int
    max_batch: int
    max_length: int
    precision: str


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def import_coremltools():
    """coremltools, without its import-time chatter (untested-torch-version warnings, and on
    Linux one line per missing macOS runtime proxy), or a one-line UsageError."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    try:
        import coremltools
    except ImportError:
        raise UsageError("coremltools is not installed; pip install 'supergrep[export]'") from None
    return coremltools


def export_coreml(model_dir: Path | str, output: Path | str, max_batch: int = 64, max_length: int = 0,
                  precision: str = "float16", force: bool = False) -> CoreMLReport:
    """Convert ``model_dir`` to a Core ML ML Program at ``output`` (``*.mlpackage``).

    Args:
        max_batch: Largest batch the package accepts (the batch axis is a range 1..max_batch).
        max_length: Longest input (default: the model's document_max_tokens).
        precision: "float16" (what the Neural Engine runs) or "float32".
    """
    if precision not in ("float16", "float32"):
        raise UsageError(f"--precision must be float16 or float32, not {precision!r}")
    output = Path(output)
    if output.suffix != ".mlpackage":
        raise UsageError(f"{output}: a Core ML ML Program is a directory named *.mlpackage")
    if output.exists() and not force:
        raise UsageError(f"{output} exists; pass --force to overwrite it")
    spec = resolve_model(model_dir)
    if spec.onnx_file is not None:
        raise UsageError(f"{model_dir} is an ONNX export; convert the float model directory instead")
    ct = import_coremltools()
    import numpy as np
    import torch

    from supergrep.export.onnx_graph import _copy_tokenizer, _vocab_size, token_vectors_module

    max_length = max_length or max(spec.settings.document_max_tokens, spec.settings.query_max_tokens)
    module, _ = token_vectors_module(spec, mask="4d")
    ids = torch.randint(5, min(1000, _vocab_size(spec)), (2, 16))
    am = torch.ones_like(ids)
    am[1, 10:] = 0
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, (ids, am), strict=False)
    batch = ct.RangeDim(lower_bound=1, upper_bound=max_batch, default=1)
    length = ct.RangeDim(lower_bound=1, upper_bound=max_length, default=min(16, max_length))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mlmodel = ct.convert(
                traced,
                inputs=[ct.TensorType(name="input_ids", shape=(batch, length), dtype=np.int32),
                        ct.TensorType(name="attention_mask", shape=(batch, length), dtype=np.int32)],
                outputs=[ct.TensorType(name="vectors", dtype=np.float32)],
                convert_to="mlprogram",
                minimum_deployment_target=ct.target.macOS13,
                compute_precision=ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32,
            )
    except Exception as exc:  # noqa: BLE001 - coremltools raises many kinds for unsupported ops
        line = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"coremltools cannot convert {spec.path} ({line})") from None
    tmp_tok = output.parent / f".{output.stem}.tokenizer.tmp"
    shutil.rmtree(tmp_tok, ignore_errors=True)
    tmp_tok.mkdir(parents=True)
    try:
        tok_meta = _copy_tokenizer(spec, tmp_tok)
        mlmodel.short_description = f"supergrep token vectors: {spec.name} (dim {spec.dim})"
        mlmodel.version = __version__
        meta = mlmodel.user_defined_metadata
        meta["supergrep.settings"] = json.dumps(spec.settings.to_dict())
        meta["supergrep.dim"] = str(spec.dim)
        meta["supergrep.source"] = json.dumps({"name": spec.name, "fingerprint": spec.fingerprint(),
                                               "form": spec.form})
        if tok_meta is not None:
            meta["supergrep.tokenizer"] = json.dumps(tok_meta)
        if output.exists():
            shutil.rmtree(output)
        mlmodel.save(str(output))
        if (tmp_tok / "tokenizer.json").is_file():
            shutil.copy2(tmp_tok / "tokenizer.json", output.with_name(f"{output.stem}.tokenizer.json"))
    finally:
        shutil.rmtree(tmp_tok, ignore_errors=True)
    return CoreMLReport(output, _dir_bytes(output), max_batch, max_length, precision)
