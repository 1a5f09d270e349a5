#!/usr/bin/env bash
# Data-parallel scaling of `supergrep train` under torchrun on one machine of 2 or 4 GPUs
# (docs/distributed.md). One call, about 3-5 minutes, no network:
#
#   bash benchmarks/gpu_distributed.sh            # on the GPU machine, repo root; results in $OUT
#
# Workload: xtr-base's shape with random weights (benchmarks/gpu_distributed.py prepare), LoRA
# r16/alpha32 on q,k,v,o,wi_0,wi_1,wo, the 768->128 head trained, bf16 autocast, batch 48 per
# GPU, queries 32 tokens, documents up to 512. Runs, each over the same number of samples:
#   g1_b48                  1 GPU, batch 48            (the baseline)
#   g2_b96, g4_b192         2 / 4 GPUs, 48 per GPU     (samples/s: the speed-up over g1_b48)
#   g1_b96, g1_b192         1 GPU, the same global batch (the loss curve the N-GPU run must match)
# Output: $OUT/gpu-distributed.json (samples/s, speed-ups against the targets x1.8 / x3.4, loss
# per sample seen, curve gaps), $OUT/env.txt (GPUs, links, versions), $OUT/log.txt.
#
# Knobs (environment): OUT, WORK (scratch, /tmp/sg-dist), SAMPLES per run (11520),
# PER_GPU_BATCH (48), GPUS (counts to run, default "1 2 4" capped at the GPUs present),
# DEADLINE_S (stop starting runs after this, 270), DEVICE (cuda), SKIP_SAME_BATCH (1: no one-GPU
# run at the N-GPU global batch), TRACE_STEPS (START:COUNT, a profiler trace per run: train/trace.py). CPU smoke test of the script
# itself (gloo): TINY=1 DEVICE=cpu GPUS="1 2" PER_GPU_BATCH=8 SAMPLES=160 bash benchmarks/gpu_distributed.sh
#
# NCCL_NVLS_ENABLE and the other multicast settings of the machine are inherited untouched.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/sg-dist}
OUT=${OUT:-$WORK/out}
SAMPLES=${SAMPLES:-11520}
PER_GPU_BATCH=${PER_GPU_BATCH:-48}
DEVICE=${DEVICE:-cuda}
DEADLINE_S=${DEADLINE_S:-270}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 SUPERGREP_HOME=$WORK/home
mkdir -p "$OUT" "$WORK/runs"
LOG=$OUT/log.txt
: > "$LOG"
start=$SECONDS

if [ "$DEVICE" = cpu ]; then ngpu=0; else ngpu=$($PY -c 'import torch; print(torch.cuda.device_count())'); fi
GPUS=${GPUS:-$(for n in 1 2 4; do [ "$n" -le "$ngpu" ] && echo -n "$n "; done)}
{
  echo "date: $(date -u +%FT%TZ)"; echo "gpus present: $ngpu; runs for: $GPUS; samples per run: $SAMPLES"
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None, "transformers", transformers.__version__)'
  env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort
  command -v nvidia-smi >/dev/null && { nvidia-smi --query-gpu=name,memory.total --format=csv; nvidia-smi topo -m; }
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ ! -f "$WORK/pairs.jsonl" ]; then
  $PY benchmarks/gpu_distributed.py prepare "$WORK" ${TINY:+--tiny} 2>&1 | tee -a "$LOG" || exit 1
fi

run() {  # run NAME GPUS GLOBAL_BATCH
  local name=$1 n=$2 batch=$3
  local steps=$((SAMPLES / batch)) dir=$WORK/runs/$1
  local warm=$((steps / 10)) left=$((DEADLINE_S - (SECONDS - start)))
  if [ "$left" -lt 20 ]; then echo "skip $name: past the deadline" | tee -a "$LOG"; return; fi
  rm -rf "$dir"
  local launch=("$PY" -m supergrep)
  [ "$n" -gt 1 ] && launch=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$n" -m supergrep)
  local args=(train --model-path "$WORK/model" --train-file "$WORK/pairs.jsonl" --output-dir "$dir"
    --batch-size "$batch" --max-steps "$steps" --warmup-steps "$warm" --lr 1e-3 --projection-dim 0
    --query-max-tokens 32 --document-max-tokens 512 --lora-r 16 --lora-alpha 32
    --lora-target-modules q,k,v,o,wi_0,wi_1,wo --log-every 5 --eval-every 0 --save-every 1000000
    --device "$DEVICE" --quiet --json)
  echo "== $name: ${launch[*]} ${args[*]}" | tee -a "$LOG"
  local t0=$SECONDS
  # TRACE_STEPS=START:COUNT: a profiler trace of those steps on every rank (train/trace.py),
  # packed as $OUT/trace-NAME.tgz (every rank's tables, rank 0's and the last rank's Chrome traces)
  local tdir=$WORK/trace-$name
  rm -rf "$tdir"
  SUPERGREP_TRACE_STEPS=${TRACE_STEPS:-} SUPERGREP_TRACE_DIR=${TRACE_STEPS:+$tdir} \
    timeout "$left" "${launch[@]}" "${args[@]}" >> "$LOG" 2>&1
  local rc=$?
  if [ -d "$tdir" ]; then
    (cd "$tdir" && tar -czf "$OUT/trace-$name.tgz" trace-rank*.txt trace-rank0.json.gz "trace-rank$((n - 1)).json.gz" 2>/dev/null)
  fi
  echo "   rc=$rc in $((SECONDS - t0)) s" | tee -a "$LOG"
  mkdir -p "$dir"
  printf '{"name": "%s", "gpus": %d, "global_batch": %d, "per_gpu_batch": %d, "rc": %d, "wall_s": %d, "command": "%s"}\n' \
    "$name" "$n" "$batch" "$((batch / n))" "$rc" "$((SECONDS - t0))" "${launch[*]} ${args[*]}" > "$dir/bench.json"
}

for n in $GPUS; do
  run "g${n}_b$((n * PER_GPU_BATCH))" "$n" $((n * PER_GPU_BATCH))
  [ "$n" -gt 1 ] && [ -z "${SKIP_SAME_BATCH:-}" ] && run "g1_b$((n * PER_GPU_BATCH))" 1 $((n * PER_GPU_BATCH))
done

$PY benchmarks/gpu_distributed.py summarize "$WORK" "$OUT/gpu-distributed.json" 2>&1 | tee -a "$LOG"
echo "total $((SECONDS - start)) s; results in $OUT"
