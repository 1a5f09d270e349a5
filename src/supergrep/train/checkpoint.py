"""Checkpoints: written atomically, the last K kept, each one also a loadable model.

A checkpoint directory ``<output_dir>/step_0000100/`` holds:

    supergrep_model.json         base model reference + adapter + projection + settings, so
                                 ``--model-path <checkpoint>`` searches with it directly
    adapter_config.json          LoRA config (PEFT format)
    adapter_model.safetensors    LoRA A/B weights (PEFT key names)
    projection/                  the trained head: config.json + model.safetensors (linear.weight)
    trainer_state.safetensors    every trainable tensor, optimizer moments, RNG states
    trainer_state.json           step, data position (epoch, batch index), backend meta
    run_config.json              the full TrainConfig of the run

Everything is written into ``.step_0000100.tmp`` first, fsynced, then renamed: a crash leaves
either the complete checkpoint or none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from supergrep.backends.adapters import ADAPTER_WEIGHTS, LoRAConfig
from supergrep.encoder.spec import SPEC_FILE, EncoderSettings
from supergrep.errors import TrainingError

STEP_DIR = re.compile(r"^step_(\d{7,})$")


def checkpoint_dirs(output_dir: Path) -> list[Path]:
    """Complete checkpoints under ``output_dir``, oldest first."""
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def _fsync_tree(path: Path) -> None:
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    for d in [path, *[p for p in path.rglob("*") if p.is_dir()]]:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _save_tensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))


def _load_tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def write_projection(directory: Path, weight: np.ndarray) -> None:
    """A bias-free Dense layer in the sentence-transformers layout (what ``_dense`` reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    out_f, in_f = weight.shape
    (directory / "config.json").write_text(json.dumps({
        "in_features": int(in_f), "out_features": int(out_f), "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity",
    }, indent=2) + "\n")
    _save_tensors(directory / "model.safetensors", {"linear.weight": weight.astype(np.float32)})


@dataclass
class CheckpointState:
    path: Path
    step: int
    epoch: int
    index: int
    tensors: dict[str, np.ndarray]
    meta: dict
    run_config: dict


def save_checkpoint(output_dir: Path, step: int, *, epoch: int, index: int, base_ref: str, name: str,
                    model_type: str, settings: EncoderSettings, lora: LoRAConfig,
                    adapter: dict[str, np.ndarray], projection: np.ndarray, replaces_base_dense: bool,
                    tensors: dict[str, np.ndarray], meta: dict, run_config: dict, keep_last: int,
                    metrics: dict | None = None) -> Path:
    """Write checkpoint ``step`` atomically and delete all but the newest ``keep_last``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    final = output_dir / f"step_{step:07d}"
    tmp = output_dir / f".step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    lora.write(tmp, model_type, base_ref)
    _save_tensors(tmp / ADAPTER_WEIGHTS, adapter)
    write_projection(tmp / "projection", projection)
    (tmp / SPEC_FILE).write_text(json.dumps({
        "name": name,
        "base": base_ref,
        "adapter": ".",
        "projection": "projection",
        "replace_base_dense": replaces_base_dense,
        "settings": settings.to_dict(),
        "trained": {"step": step, "metrics": metrics or {}},
    }, indent=2) + "\n")
    _save_tensors(tmp / "trainer_state.safetensors", tensors)
    (tmp / "trainer_state.json").write_text(json.dumps(
        {"step": step, "epoch": epoch, "index": index, "meta": meta}, indent=2) + "\n")
    (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2) + "\n")
    _fsync_tree(tmp)
    if final.exists():  # a re-run of the same step (after a resume): replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    fd = os.open(output_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    for old in checkpoint_dirs(output_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path) -> CheckpointState:
    """Read a checkpoint written by ``save_checkpoint``."""
    try:
        state = json.loads((path / "trainer_state.json").read_text())
        run_config = json.loads((path / "run_config.json").read_text())
        tensors = _load_tensors(path / "trainer_state.safetensors")
    except FileNotFoundError as exc:
        raise TrainingError(f"{path} is not a complete checkpoint ({Path(exc.filename).name} is missing)") from None
    except (ValueError, OSError) as exc:
        raise TrainingError(f"{path}: damaged checkpoint ({exc}); resume from an older one") from None
    return CheckpointState(path, int(state["step"]), int(state["epoch"]), int(state["index"]), tensors,
                           state.get("meta", {}), run_config)


def clean_temporaries(output_dir: Path) -> None:
    """Remove half-written checkpoints a killed run left behind."""
    if output_dir.is_dir():
        for p in output_dir.glob(".step_*.tmp"):
            shutil.rmtree(p, ignore_errors=True)
