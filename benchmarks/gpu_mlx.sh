#!/usr/bin/env bash
# MLX's CUDA build against torch on one NVIDIA GPU: benchmarks/mlx_vs_torch.py (training
# samples/s, encoding docs/s, a matmul) plus an encoding parity check, JSON into $OUT.
#
# The GPU machine has no network, Python 3.12, torch 2.11+cu130 with the CUDA 13 nvidia-* wheels
# (cuBLAS 13, cuDNN 9, NVRTC 13, cuFFT, cuSOLVER, NCCL: what mlx-cuda-13 needs), transformers
# and numpy. MLX travels as two wheels: mlx (0.8 MB) and mlx-cuda-13 (86 MiB, over one call's
# 64 MiB carry), the latter split in two parts carried by two calls to the same warm machine.
# Never install mlx[cpu] beside it (both ship mlx/lib/libmlx.so).
#
#   # 1. here, with network (once): wheels into .gpu/mlx-cuda/{a,b} (git-ignored via .git/info/exclude)
#   bash benchmarks/gpu_mlx.sh fetch
#   # 2. device call 1, carry [".gpu/mlx-cuda/a"] (44 MiB):
#   bash benchmarks/gpu_mlx.sh stage .gpu/mlx-cuda/a
#   # 3. device call 2 on the same warm machine, carry [".gpu/mlx-cuda/b"] (42 MiB):
#   bash benchmarks/gpu_mlx.sh run .gpu/mlx-cuda/b            # -> $OUT/*.json, at most about 9 minutes (timeout_s 600)
#
# `run` installs into /tmp/mlx-site (nothing system-wide), links the torch environment's nvidia/
# libraries where libmlx.so's RPATH looks for them, checks that MLX sees the GPU, then runs each
# configuration below (BENCH_ARGS adds flags to all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
MLX_VERSION=${MLX_VERSION:-0.32.4}
CUDA_WHEEL=mlx_cuda_13-${MLX_VERSION}-py3-none-manylinux_2_35_x86_64.whl
STAGE=/tmp/mlx-wheel
SITE=/tmp/mlx-site
OUT=${OUT:-/tmp/out}

case "${1:-}" in
fetch)
  dir=${2:-.gpu/mlx-cuda}
  mkdir -p "$dir/a" "$dir/b" "$dir/full"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$dir/full" "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION"
  (cd "$dir/full" && sha256sum "$CUDA_WHEEL" > SHA256SUMS && split -b 44M -d "$CUDA_WHEEL" "$CUDA_WHEEL.part")
  mv "$dir/full/$CUDA_WHEEL.part00" "$dir/a/"
  mv "$dir/full/$CUDA_WHEEL.part01" "$dir/full/SHA256SUMS" "$dir/b/"
  cp "$dir/full/mlx-$MLX_VERSION-"*.whl "$dir/b/"
  du -sh "$dir/a" "$dir/b"
  ;;
stage)
  mkdir -p "$STAGE"
  cp "${2:?stage DIR}"/*.part* "$STAGE/"
  ls -la "$STAGE"
  ;;
run)
  dir=${2:?run DIR}
  shift 2
  mkdir -p "$STAGE"
  cp "$dir"/* "$STAGE/"
  [ -f "$STAGE/$CUDA_WHEEL.part00" ] || { echo "part00 is missing: run 'stage' first on this machine" >&2; exit 2; }
  (cd "$STAGE" && cat "$CUDA_WHEEL".part* > "$CUDA_WHEEL" && sha256sum -c SHA256SUMS)
  if python3 -c "import mlx.core" 2>/dev/null; then
    echo "an MLX is already importable here; refusing to install a second one (libmlx.so clash)" >&2
    exit 2
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$STAGE/$CUDA_WHEEL" "$STAGE"/mlx-"$MLX_VERSION"-*.whl
  nv=$(python3 -c "import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))")
  ln -sfn "$nv/nvidia" "$SITE/nvidia"  # libmlx.so's RPATH: $ORIGIN/../../nvidia/{cu13,cublas,cudnn,...}/lib
  # NVRTC (MLX's JIT kernels) needs the CUDA runtime headers: site/nvidia/... or CUDA_HOME.
  [ -n "${CUDA_HOME:-}" ] || [ ! -d /usr/local/cuda/include ] || export CUDA_HOME=/usr/local/cuda
  export PYTHONPATH="$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SUPERGREP_HOME=/tmp/sg HF_HUB_OFFLINE=1
  mkdir -p "$OUT"
  python3 - <<'EOF' | tee "$OUT/mlx-gpu-env.json"
import json, mlx.core as mx, torch
print(json.dumps({"mlx": mx.__version__, "mlx_gpu": mx.is_available(mx.gpu), "mlx_device": str(mx.default_device()),
                  "mlx_device_info": {k: v for k, v in mx.device_info().items() if isinstance(v, (int, str))},
                  "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}))
EOF
  # Encoding parity on the GPU (bf16 both): the same random MiniLM-shaped model, 64 stdlib docs.
  python3 - <<'EOF' | tee "$OUT/mlx-gpu-parity.json"
import json, sys, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, "benchmarks")
from mlx_vs_torch import mine_stdlib, random_bert
from supergrep.corpus.documents import load_pairs
from supergrep.encoder import Encoder, resolve_model
tmp = Path(tempfile.mkdtemp())
pairs = mine_stdlib(tmp / "pairs.jsonl")
model = random_bert(tmp / "m", "minilm", pairs)
docs = [p.document() for p in load_pairs(pairs)][:64]
out = {}
for b in ("torch", "mlx"):
    enc = Encoder(resolve_model(model), backend=b, device="cuda")
    out[b] = enc.encode_documents(docs)
    dtype = enc.backend.dtype
a, m = np.concatenate(out["torch"]), np.concatenate(out["mlx"])
cos = (a * m).sum(-1)
print(json.dumps({"docs": len(docs), "tokens": int(len(a)), "dtype": str(dtype), "mean_token_cosine": float(cos.mean()),
                  "min_token_cosine": float(cos.min()), "corr": float(np.corrcoef(a.ravel(), m.ravel())[0, 1]),
                  "max_abs_err": float(np.abs(a - m).max())}))
EOF
  common=(--device cuda --precision bf16 --steps 20 --warmup 3 --encode 2000 --matmul 4096 --rounds 1 ${BENCH_ARGS:-})
  timeout 180 python3 benchmarks/mlx_vs_torch.py --random-model minilm --batch-size 64 --document-max-tokens 256 \
    --query-max-tokens 32 "${common[@]}" "$@" --out "$OUT/mlx-vs-torch-gpu-minilm.json" || echo "minilm run failed ($?)"
  timeout 240 python3 benchmarks/mlx_vs_torch.py --random-model bert-base --batch-size 32 --document-max-tokens 256 \
    --query-max-tokens 32 "${common[@]}" "$@" --out "$OUT/mlx-vs-torch-gpu-bert-base.json" || echo "bert-base run failed ($?)"
  ls -la "$OUT"
  ;;
*)
  sed -n '2,21p' "$0"
  exit 2
  ;;
esac
