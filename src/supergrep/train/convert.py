"""Move a training checkpoint between the torch and MLX trainers (``supergrep convert``).

Both trainers write the same checkpoint format (safetensors + JSON, PEFT adapter names, the
same ``param.*`` / ``optim.*`` tensor names), so converting is verifying and rewriting the trainer
state for the other framework, never re-deriving weights:

1. every LoRA projection is counted three ways, whatever order the keys come in: the adapter
   file's A/B pairs, the trainer state's ``param.model.<path>.lora_A/B`` and the Linear layers
   the adapter's ``target_modules`` select in the base model (read from the weight files'
   headers, no framework); the three sets must be equal and the adapter's values must equal the
   trainer state's (the seeds' converter silently merged 14 of 24 projections);
2. the projection head and each tensor's AdamW moments are checked for shape;
3. the framework's RNG state is dropped (it cannot be carried over: torch reseeds from
   (seed, step) when it finds none, MLX always derives its randomness that way), ``meta.backend``
   and ``run_config.backend`` are set to the target;
4. the new checkpoint is written beside the old one as a temporary directory, fsynced, renamed.

A resumed run continues with the same weights, moments and data position; after a conversion
its numbers differ from an unconverted run only by the frameworks' rounding and dropout masks.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from supergrep.backends.adapters import ADAPTER_WEIGHTS, LoRAConfig, matches, module_paths
from supergrep.encoder.spec import ModelSpec, resolve_model
from supergrep.errors import ModelError, TrainingError, UsageError
from supergrep.train import checkpoint as ckpt

BACKENDS = ("torch", "mlx")
T5_TYPES = ("t5", "mt5", "umt5")
_BASE_PREFIXES = ("bert.", "roberta.", "mpnet.", "electra.", "distilbert.")
# 2-D weights that are not Linear layers.
_NOT_LINEAR = ("embeddings.", "embed_tokens", "shared", "relative_attention_bias", "pooler.")


@dataclass
class ConvertReport:
    output: Path
    source: str
    target: str
    projections: int
    trainable_tensors: int
    dropped: list[str] = field(default_factory=list)


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes from a safetensors header (8-byte length + JSON), no data read."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def base_linear_paths(spec: ModelSpec) -> list[str]:
    """Module paths of the base's Linear layers, as the trainers name them (task-model prefixes
    stripped; for T5 only the encoder stack), from the weight files' headers (tested equal to
    the lists torch and MLX build for BERT, RoBERTa, MPNet and T5).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    files = sorted(spec.transformer_path.glob("model*.safetensors"))
    if files:
        for f in files:
            shapes.update(safetensors_shapes(f))
    else:
        try:
            from supergrep.backends.torch_backend import load_state_dict
        except ImportError:
            raise ModelError(f"{spec.transformer_path} holds only pytorch_model.bin, which needs torch to be "
                             f"read; install torch or save the base as model.safetensors") from None
        for f in sorted(spec.transformer_path.glob("pytorch_model*.bin")):
            shapes.update({k: tuple(v.shape) for k, v in load_state_dict(f).items()})
    paths = set()
    for key, shape in shapes.items():
        if len(shape) != 2 or not key.endswith(".weight"):
            continue
        name = key[: -len(".weight")]
        name = next((name[len(p):] for p in _BASE_PREFIXES if name.startswith(p)), name)
        if spec.model_type in T5_TYPES and not name.startswith("encoder."):
            continue  # the decoder of a full T5 checkpoint is never loaded
        if any(part in name for part in _NOT_LINEAR) or name.startswith("pooler"):
            continue
        paths.add(name)
    return sorted(paths)


def _lora_params(tensors: dict, suffix: str) -> set[str]:
    head, tail = "param.model.", f".{suffix}"
    return {k[len(head) : -len(tail)] for k in tensors if k.startswith(head) and k.endswith(tail)}


def verify_checkpoint(path: Path) -> tuple[ckpt.CheckpointState, int]:
    """Check a checkpoint's adapter, trainer state and base agree; returns (state, projections).

    Raises:
        TrainingError: naming what does not match (nothing is written by the caller then).
    """
    from safetensors.numpy import load_file

    state = ckpt.load_checkpoint(path)
    spec = resolve_model(path)
    lora = LoRAConfig.read(path)
    adapter = load_file(str(path / ADAPTER_WEIGHTS))
    in_adapter = set(module_paths(list(adapter)))  # every A has its B
    a_params, b_params = _lora_params(state.tensors, "lora_A"), _lora_params(state.tensors, "lora_B")
    targets = lora.targets_for(spec.model_type)
    in_base = {n for n in base_linear_paths(spec) if matches(n, targets)}
    problems = []
    if a_params != b_params:
        problems.append(f"trainer state has unpaired LoRA A/B for {sorted(a_params ^ b_params)[:3]}")
    if in_adapter != a_params:
        problems.append(f"adapter and trainer state disagree on {sorted(in_adapter ^ a_params)[:3]}")
    if in_adapter != in_base:
        problems.append(f"the adapter has {len(in_adapter)} projections but its target_modules select "
                        f"{len(in_base)} layers of the base (differing: {sorted(in_adapter ^ in_base)[:3]})")
    for name in sorted(in_adapter & a_params):
        for part in ("A", "B"):
            a = adapter[f"base_model.model.{name}.lora_{part}.weight"]
            t = state.tensors[f"param.model.{name}.lora_{part}"]
            if a.shape != t.shape or not np.array_equal(a, t):
                problems.append(f"{name}.lora_{part}: the adapter file and the trainer state hold different values")
    params = [k[len("param."):] for k in state.tensors if k.startswith("param.")]
    proj = [p for p in params if p.startswith("proj.")]
    if not proj:
        problems.append("the trainer state has no projection head (param.proj.*)")
    for p in params:
        shape = state.tensors[f"param.{p}"].shape
        for key in ("exp_avg", "exp_avg_sq"):
            m = state.tensors.get(f"optim.{p}.{key}")
            if m is not None and m.shape != shape:
                problems.append(f"optim.{p}.{key} has shape {m.shape}, the parameter {shape}")
    if problems:
        raise TrainingError(f"{path}: " + "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""))
    return state, len(in_adapter)


def convert_checkpoint(checkpoint: Path, output: Path, to: str, force: bool = False) -> ConvertReport:
    """Write ``output``: ``checkpoint`` verified and rewritten for the ``to`` trainer."""
    if to not in BACKENDS:
        raise UsageError(f"--to must be one of {', '.join(BACKENDS)} (or merged), not {to!r}")
    checkpoint, output = Path(checkpoint), Path(output)
    if output.exists() and any(output.iterdir()) and not force:
        raise UsageError(f"{output} exists and is not empty; pass --force to overwrite it")
    if output.resolve() == checkpoint.resolve():
        raise UsageError("write the converted checkpoint to another directory (-o)")
    state, projections = verify_checkpoint(checkpoint)
    source = state.meta.get("backend", "torch")
    dropped = sorted(k for k in state.tensors if k.startswith("rng."))
    tensors = {k: v for k, v in state.tensors.items() if k not in dropped}
    meta = {k: v for k, v in state.meta.items() if not (k == "scaler" and to != "torch")}
    meta.update(backend=to, steps_taken=int(state.meta.get("steps_taken", state.step)), converted_from=source)
    run_config = {**state.run_config, "backend": to}

    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint, tmp)
    ckpt._save_tensors(tmp / "trainer_state.safetensors", tensors)
    (tmp / "trainer_state.json").write_text(json.dumps(
        {"step": state.step, "epoch": state.epoch, "index": state.index, "meta": meta}, indent=2) + "\n")
    (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2) + "\n")
    ckpt._fsync_tree(tmp)
    if output.exists():
        shutil.rmtree(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, output)
    n_params = sum(1 for k in tensors if k.startswith("param."))
    return ConvertReport(output, source, to, projections, n_params, dropped)
