#!/usr/bin/env bash
# One device call on nvidia-h200-x4: the default-model training runs of issue 4/7, one run per GPU
# at the same time, then every checkpoint scored on the mined validation split (never the
# public set: benchmarks/select_checkpoints.py), packed into $OUT/run-<name>.tgz and $OUT/logs.tgz.
#
#   carry [".gpu/minilm-fp16", ".gpu/sweep2"]:  bash benchmarks/gpu_train_default.sh
#
# .gpu/minilm-fp16: all-MiniLM-L6-v2 in fp16 (45 MB; the carry limit is 64 MiB a call).
# .gpu/sweep2: pairs.jsonl.xz (80K train + 3K val pairs sampled from `make corpus`, 8 languages)
#   and the pathspec wheel the device lacks. Hard negatives are mined there (64 cores).
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/pack_runs.sh
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-1200}
TRAIN_CAP_S=${TRAIN_CAP_S:-390}
python3 -m pip install -q --no-deps --target /tmp/site .gpu/sweep2/*.whl
export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
W=${W:-/tmp/w}; rm -rf $W /tmp/pack; mkdir -p $W "$OUT"
model=$PWD/.gpu/minilm-fp16
xz -dc ${PAIRS_XZ:-.gpu/sweep2/pairs.jsonl.xz} > $W/pairs.jsonl
common="--config configs/minilm-code.yaml --model-path $model --max-steps $STEPS --save-every ${SAVE_EVERY:-300} --keep-last 8
  --eval-every ${SAVE_EVERY:-300} --lr 1e-4 --precision fp32 --query-identifier-dropout 0.5 --document-header-dropout 0.5
  --docstring-body-rate 0.5 --quiet --json ${EXTRA:-}"
run() {  # GPU NAME PAIRS FLAGS...
  local gpu=$1 name=$2 pairs=$3; shift 3
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$gpu timeout $TRAIN_CAP_S python3 -m supergrep train $common --train-file "$pairs" \
    --output-dir $W/runs/$name "$@" > $W/$name.json 2> $W/$name.err
  echo "$name rc=$?" >> $W/rc.txt
}
# RUNS: "GPU NAME DATA FLAGS..." per line, DATA plain|hn (hn waits for the miner, ~30 s).
RUNS=${RUNS:-"0 p384-d3 plain --projection-dim 384 --distill-weight 3
1 p384-d3-hn hn --projection-dim 384 --distill-weight 3 --hard-negatives
2 p128-d3-hn hn --projection-dim 128 --distill-weight 3 --hard-negatives
3 p384-d1-hn hn --projection-dim 384 --distill-weight 1 --hard-negatives"}
while read -r gpu name data flags; do
  # shellcheck disable=SC2086
  [ "$data" = plain ] && run "$gpu" "$name" $W/pairs.jsonl $flags &
done <<< "$RUNS"
t0=$(date +%s)
python3 -m supergrep mine-negatives $W/pairs.jsonl -o $W/pairs-hn.jsonl --per-query 1 -j 48 2>&1 | tee $W/negatives.txt
echo "negatives mined in $(( $(date +%s) - t0 )) s"
while read -r gpu name data flags; do
  # shellcheck disable=SC2086
  [ "$data" = hn ] && [ -s $W/pairs-hn.jsonl ] && run "$gpu" "$name" $W/pairs-hn.jsonl $flags &
done <<< "$RUNS"
wait
cat $W/rc.txt; for f in $W/*.json; do echo "== $f"; tail -c 1500 "$f"; echo; done
for f in $W/*.err; do echo "== $f"; tail -3 "$f"; done
# Checkpoint choice on the validation split, one GPU per run; the base once.
i=0
for r in $W/runs/*; do
  CUDA_VISIBLE_DEVICES=$i timeout 150 python3 benchmarks/select_checkpoints.py --val $W/pairs.jsonl \
    --runs "$r" --limit ${SELECT_LIMIT:-2000} --out $W/select-$(basename "$r").jsonl > /dev/null 2> $W/select-$(basename "$r").err &
  i=$(( (i + 1) % 4 ))
done
CUDA_VISIBLE_DEVICES=3 timeout 150 python3 benchmarks/select_checkpoints.py --val $W/pairs.jsonl --base "$model" \
  --limit ${SELECT_LIMIT:-2000} --out $W/select-base.jsonl > /dev/null 2> $W/select-base.err &
wait
cat $W/select-*.jsonl; tail -n 2 $W/select-*.err
# Pack: one tarball per run (the device returns files of at most 16 MiB; a checkpoint's adapter +
# projection is ~3.3 MB), one for the logs and the selection.
pack_runs $W/runs "$OUT"
pack_logs "$OUT" $W/*.json $W/*.err $W/*.txt $W/select-*.jsonl
ls -la "$OUT"
