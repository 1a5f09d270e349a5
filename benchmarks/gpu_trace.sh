#!/usr/bin/env bash
# Where the compiled xtr-base step's time goes, and what CUDA graphs change (one GPU, one call):
# benchmarks/step_trace.py over VARIANTS (each: warm-up incl. compilation, then an unprofiled
# and a profiled pass over the same batches), everything packed into $OUT/trace.tgz (the device
# returns at most 8 files).
#
#   carry [".gpu/minilm-fp16", ".gpu/whl"];  bash benchmarks/gpu_trace.sh .gpu/minilm-fp16
set -uo pipefail
model=${1:?usage: bash benchmarks/gpu_trace.sh MINILM_DIR}
OUT=${OUT:-/tmp/gpu-trace-out}
py=${PY:-python3}
W=$OUT/trace
mkdir -p "$W"
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
V=${V:-bf16+compile,bf16+cudagraphs+pad=64,bf16+cudagraphs+packing,bf16+compile+pad=64}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  $py -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  git rev-parse HEAD 2>/dev/null; echo "variants $V"; } > "$W/env.txt" 2>&1
cat "$W/env.txt"
# one process per variant (a crash loses one variant; CUDA graphs after a profiled variant crashed)
export PYTHONFAULTHANDLER=1
t0=$(date +%s)
for v in ${V//,/ }; do
  left=$(( ${CAP_S:-480} - ($(date +%s) - t0) ))
  [ "$left" -gt 30 ] || { echo "$v: skipped, no time left" | tee -a "$W/env.txt"; continue; }
  s=$(date +%s)
  timeout --kill-after=10 "$left" $py benchmarks/step_trace.py --model-path "$model" --workload "${WL:-xtr-base}" \
    --variants "$v" --warmup "${WARM:-20}" --steps "${STEPS:-8}" ${CHROME:---chrome} --out "$W" >> "$W/log.txt" 2>&1
  echo "$v: rc=$? $(( $(date +%s) - s ))s" | tee -a "$W/env.txt"
done
grep -v "^USDT\|Warning\|warn(" "$W/log.txt" | tail -60
tar -C "$OUT" -czf "$OUT/trace.tgz" trace && rm -rf "$W"
ls -la "$OUT"
