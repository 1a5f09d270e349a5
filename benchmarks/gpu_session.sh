#!/usr/bin/env bash
# The GPU runs of one session on one 4-GPU machine (nvidia-h200-x4), in three device calls that
# follow each other while the machine stays warm; each packs what it made into one tarball
# ($OUT/<part>.tgz: the device returns at most 8 files).
#
#   call 1, carry [".gpu/mlx-cuda/a"]:               bash benchmarks/gpu_session.sh dist
#       stages MLX's CUDA wheel part 1, then data-parallel scaling 1/2/4 GPUs (gpu_distributed.sh)
#   call 2, carry [".gpu/mlx-cuda/b"]:               bash benchmarks/gpu_session.sh stage-b
#   call 3, carry [".gpu/minilm-fp16", ".gpu/whl"]:  bash benchmarks/gpu_session.sh bench-mlx
#       gpu_bench.sh on GPU 0 and gpu_mlx.sh on GPU 1 at the same time (separate GPUs; 64 cores)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
pack() { (cd "$OUT" && tar czf "$1.tgz" --exclude='*.tgz' . && find . -mindepth 1 ! -name '*.tgz' -delete); ls -la "$OUT"; }
case "${1:-}" in
dist)
  mkdir -p /tmp/mlx-wheel && cp .gpu/mlx-cuda/a/*.part* /tmp/mlx-wheel/
  OUT=$OUT/dist DEADLINE_S=${DEADLINE_S:-300} bash benchmarks/gpu_distributed.sh
  cat "$OUT/dist/gpu-distributed.json" 2>/dev/null | head -c 3000
  pack dist
  ;;
stage-b)
  mkdir -p /tmp/mlx-wheel /tmp/mlxb && cp .gpu/mlx-cuda/b/* /tmp/mlx-wheel/ && cp .gpu/mlx-cuda/b/* /tmp/mlxb/
  ls -la /tmp/mlx-wheel
  ;;
bench-mlx)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site
  mkdir -p "$OUT/bench" "$OUT/mlx"
  (CUDA_VISIBLE_DEVICES=1 OUT=$OUT/mlx timeout 560 bash benchmarks/gpu_mlx.sh run /tmp/mlxb > "$OUT/mlx/log.txt" 2>&1;
   echo "mlx rc=$?" >> "$OUT/mlx/log.txt") &
  CUDA_VISIBLE_DEVICES=0 OUT=$OUT/bench bash benchmarks/gpu_bench.sh "$PWD/.gpu/minilm-fp16" 420
  wait
  tail -30 "$OUT/mlx/log.txt"
  pack bench-mlx
  ;;
*) sed -n '2,11p' "$0"; exit 2 ;;
esac
