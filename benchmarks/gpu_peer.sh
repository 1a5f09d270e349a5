#!/usr/bin/env bash
# Ours vs the sentence-transformers peer on one GPU, one device call (~5 min on an H100):
# `bench train` on the xtr-base workload (batch 48, mined-code document lengths), the peer
# starting from our weights (seed-aligned head and LoRA A, bench/peer.py), the same batches,
# STEPS timed steps after WARM; then the loss curves side by side (benchmarks/peer_losses.py).
#
#   carry [".gpu/minilm-fp16", ".gpu/whl"];  bash benchmarks/gpu_peer.sh .gpu/minilm-fp16
#   SMOKE=1 PY=.venv/bin/python bash benchmarks/gpu_peer.sh MINILM_DIR     # toy size, on a CPU
set -uo pipefail
model=${1:?usage: bash benchmarks/gpu_peer.sh MINILM_DIR}
OUT=${OUT:-/tmp/gpu-peer-out}
py=${PY:-python3}
mkdir -p "$OUT"
if ls .gpu/whl/*.whl >/dev/null 2>&1 && [ "${SMOKE:-0}" != 1 ]; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SUPERGREP_HOME=${SUPERGREP_HOME:-/tmp/sg-home}
if [ "${SMOKE:-0}" = 1 ]; then WL=xtr-tiny STEPS=${STEPS:-4} WARM=1 V=${V:-fp32,peer+fp32}
else WL=xtr-base STEPS=${STEPS:-100} WARM=${WARM:-5} V=${V:-naive,bf16,peer+bf16,bf16+compile}; fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  $py -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  $py -c "import sentence_transformers as s, peft; print('sentence-transformers', s.__version__, 'peft', peft.__version__)" 2>&1 | tail -1
  git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
s=$(date +%s)
timeout --kill-after=10 "${CAP_S:-500}" $py -m supergrep bench train -w $WL --model-path "$model" \
  --work-dir /tmp/sg-peer-work --variants "$V" --steps "$STEPS" --warmup "$WARM" --time-limit "${LIMIT_S:-420}" \
  --out "$OUT" > "$OUT/train.log" 2>&1
echo "bench train: rc=$? $(( $(date +%s) - s ))s" | tee "$OUT/status.txt"
tail -25 "$OUT/train.log"
$py benchmarks/peer_losses.py "$OUT/train-$WL.json" | tee "$OUT/losses.md"
