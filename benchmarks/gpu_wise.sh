#!/usr/bin/env bash
# One device call on ONE GPU (nvidia-h200): four default-model training runs at the same time on
# the same GPU (MiniLM at batch 128 leaves most of an H200 idle), each checkpoint's adapter +
# projection packed into $OUT/run-<name>.tgz for WiSE-FT interpolation and choice on the
# development set here (docs/training.md, "WiSE-FT").
#
#   carry [".gpu/minilm-fp16", ".gpu/sweep2", ".gpu/d128"]:  bash benchmarks/gpu_wise.sh
#
# .gpu/minilm-fp16: all-MiniLM-L6-v2 in fp16 (45 MB). .gpu/d128: the distilled 128-d head
#   (benchmarks/results/gpu-h200-2026-11-21c/d128-n60k-k64-t05) on that base ("base": "../minilm-fp16").
# .gpu/sweep2: pairs.jsonl.xz (80K train + 3K val pairs from `make corpus`), the pathspec wheel,
#   and hn-index.json: BM25 hard negatives mined here (`mine-negatives --per-query 1`) as row
#   numbers (benchmarks/hn_pack.py), so the pairs travel once.
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/pack_runs.sh
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-1000}
TRAIN_CAP_S=${TRAIN_CAP_S:-480}
python3 -m pip install -q --no-deps --target /tmp/site .gpu/sweep2/*.whl
export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
W=${W:-/tmp/w}; rm -rf $W /tmp/pack; mkdir -p $W "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $W/gpu.txt
xz -dc .gpu/sweep2/pairs.jsonl.xz > $W/pairs.jsonl
python3 benchmarks/hn_pack.py unpack $W/pairs.jsonl .gpu/sweep2/hn-index.json -o $W/pairs-hn.jsonl
common="--config configs/minilm-code.yaml --model-path $PWD/.gpu/minilm-fp16 --max-steps $STEPS --save-every ${SAVE_EVERY:-250}
  --keep-last 3 --eval-every ${SAVE_EVERY:-250} --lr 1e-4 --precision ${PRECISION:-bf16} --query-identifier-dropout 0.5
  --document-header-dropout 0.5 --docstring-body-rate 0.5 --hard-negatives --train-file $W/pairs-hn.jsonl --quiet --json"
# NAME FLAGS... per line (later flags override $common).
RUNS=${RUNS:-"p384-d0.3 --projection-dim 384 --distill-weight 0.3
p384-d0 --projection-dim 384 --distill-weight 0
h128-d0.3 --model-path $PWD/.gpu/d128 --projection-dim 128 --distill-weight 0.3
h128-d1 --model-path $PWD/.gpu/d128 --projection-dim 128 --distill-weight 1"}
t0=$(date +%s)
while read -r name flags; do
  [ -z "$name" ] && continue
  # shellcheck disable=SC2086
  ( timeout $TRAIN_CAP_S python3 -m supergrep train $common --output-dir $W/runs/$name $flags ${EXTRA:-} > $W/$name.json 2> $W/$name.err
    echo "$name rc=$? after $(( $(date +%s) - t0 )) s" >> $W/rc.txt ) &
done <<< "$RUNS"
sleep 60; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | tee -a $W/gpu.txt
wait
cat $W/rc.txt; for f in $W/*.json; do echo "== $f"; tail -c 800 "$f"; echo; done
for f in $W/*.err; do echo "== $f"; tail -3 "$f"; done
pack_runs $W/runs "$OUT"
pack_logs "$OUT" $W/*.json $W/*.err $W/*.txt
ls -la "$OUT"
