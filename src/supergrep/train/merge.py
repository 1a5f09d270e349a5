"""Fold a checkpoint's LoRA adapter into its base and write a plain model directory.

The output is at once a Hugging Face model directory (``config.json``, ``model.safetensors``,
the tokenizer files), with the projection(s) as ``1_Dense/``, ``2_Dense/``... beside it (the
layout XTR uses), and a supergrep model (``supergrep_model.json`` with ``"base": "."`` and the
encoder settings), so ``--model-path OUT`` reads it with the same settings as the checkpoint.

Every adapted projection is counted: the number merged must equal the number of adapter
weight pairs in the checkpoint *and* the number of Linear layers its ``target_modules`` select
in the base, or nothing is written (the seeds' converter merged 14 of 24 and said nothing).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from supergrep.backends.adapters import ADAPTER_WEIGHTS, LoRAConfig, matches, module_paths
from supergrep.encoder.spec import SPEC_FILE, VECTOR_FILES, resolve_model
from supergrep.errors import ModelError, UsageError

TOKENIZER_FILES = tuple(f for f in VECTOR_FILES if f != "config.json")


@dataclass
class MergeReport:
    output: Path
    merged: int
    adapter_pairs: int
    targets_in_base: int
    dense_layers: int


def _fold_torch(spec, lora: LoRAConfig, state: dict):
    """(merged, Linear layers targeted in the base, save(directory)) through torch."""
    import torch

    from supergrep.backends.torch_backend import load_transformer
    from supergrep.backends.torch_lora import merge_adapter_weights

    model = load_transformer(spec, torch.float32)
    targets = lora.targets_for(spec.model_type)
    in_base = [n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and not n.startswith("pooler") and matches(n, targets)]
    merged = merge_adapter_weights(model, lora, {k: torch.from_numpy(np.array(v)) for k, v in state.items()})
    return merged, len(in_base), lambda directory: model.save_pretrained(str(directory), safe_serialization=True)


def _fold_mlx(spec, lora: LoRAConfig, state: dict):
    try:
        from supergrep.backends.mlx_lora import merge_into_base
    except ImportError as exc:
        raise UsageError(f"merging with --backend mlx needs MLX ({exc}); pip install 'supergrep[mlx]'") from None
    return merge_into_base(spec, lora, state)


def merge_checkpoint(checkpoint: Path, output: Path, force: bool = False, backend: str = "torch") -> MergeReport:
    """Write ``output`` = checkpoint's base + adapter (folded) + projection + settings.

    Args:
        backend: "torch" or "mlx": which framework loads the base and folds the adapter (both
            write the same Hugging Face layout and names).
    """
    from safetensors.numpy import load_file

    spec = resolve_model(checkpoint)
    if spec.adapter is None:
        raise UsageError(f"{checkpoint} has no LoRA adapter to merge (is it a training checkpoint?)")
    output = Path(output)
    if output.exists() and any(output.iterdir()) and not force:
        raise UsageError(f"{output} exists and is not empty; pass --force to overwrite it")
    lora = LoRAConfig.read(spec.adapter)
    state = load_file(str(spec.adapter / ADAPTER_WEIGHTS))
    pairs = len(module_paths(list(state)))
    folders = {"torch": _fold_torch, "mlx": _fold_mlx}
    if backend not in folders:
        raise UsageError(f"unknown merge backend '{backend}'; use torch or mlx")
    merged, in_base, save = folders[backend](spec, lora, state)
    if not (merged == pairs == in_base):
        raise ModelError(f"merged {merged} projections, but the adapter has {pairs} and its target_modules "
                         f"select {in_base} layers of the base; refusing to write a partial merge")

    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save(tmp)
    for name in TOKENIZER_FILES:
        src = spec.transformer_path / name
        if src.is_file():
            shutil.copy2(src, tmp / name)
    for i, d in enumerate(spec.dense, start=1):  # projections are not adapted: copied as they are
        target = tmp / f"{i}_Dense"
        target.mkdir()
        for f in d.path.iterdir():
            if f.is_file():
                shutil.copy2(f, target / f.name)
    (tmp / SPEC_FILE).write_text(json.dumps({
        "name": spec.name,
        "base": ".",
        "settings": spec.settings.to_dict(),
        "merged_from": {"checkpoint": str(Path(checkpoint).resolve()), "projections_merged": merged,
                        "lora": lora.to_dict(), "backend": backend},
    }, indent=2) + "\n")
    if output.exists():
        shutil.rmtree(output)
    os.replace(tmp, output)
    return MergeReport(output, merged, pairs, in_base, len(spec.dense))
