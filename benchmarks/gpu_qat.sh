#!/usr/bin/env bash
# benchmarks/qat_int4.sh on the GPU machine, in one call: plain vs --qat-bits 4 LoRA runs of
# MiniLM, each (and the base) quantized to int4 g64, all scored on held-out pairs. Returns
# $OUT/qat-results.tgz (reports) and $OUT/qat-models.tgz (the int4 model dirs, for the public set here).
#
#   carry [".gpu/minilm-fp16", ".gpu/whl", ".gpu/qat"]   (.gpu/qat/pairs.jsonl.gz: 40,000 train + 2,500 val
#   pairs of the multi-language corpus, seed 0)
#   bash benchmarks/gpu_qat.sh .gpu/minilm-fp16 .gpu/qat/pairs.jsonl.gz [STEPS]
set -uo pipefail
model=${1:?usage: bash benchmarks/gpu_qat.sh MODEL PAIRS [STEPS]} pairs=${2:?} steps=${3:-300}
OUT=${OUT:-/tmp/gpu-qat-out}
W=/tmp/qat-run
py=${PY:-python3}
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SUPERGREP_HOME=/tmp/sg-home
mkdir -p "$OUT" "$W"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  $py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  git rev-parse HEAD 2>/dev/null; echo "steps $steps"; } > "$W/env.txt" 2>&1
s=$(date +%s)
timeout --kill-after=10 "${CAP_S:-540}" bash benchmarks/qat_int4.sh "$model" "$pairs" "$W" "$steps" "${VAL:-2000}" \
  > "$W/log.txt" 2>&1
echo "qat_int4: rc=$? $(( $(date +%s) - s ))s" | tee -a "$W/env.txt"
tail -20 "$W/log.txt"
du -sh "$W"/* 2>/dev/null
tar -C "$W" -czf "$OUT/qat-results.tgz" --exclude='*-q4' --exclude='plain' --exclude='qat4' .
tar -C "$W" -czf "$OUT/qat-models.tgz" $(cd "$W" && ls -d *-q4 2>/dev/null)
ls -la "$OUT"
