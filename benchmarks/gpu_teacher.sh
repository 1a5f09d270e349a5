#!/usr/bin/env bash
# Distil all-mpnet-base-v2 into the default MiniLM model on one GPU (issue 7; docs/training.md,
# "Fourth sweep: a stronger teacher"). Several calls of ONE warm machine, because mpnet in fp16
# (219 MB) does not fit the 64 MiB a call may carry:
#
#   bash benchmarks/gpu_teacher.sh carry .gpu/mpa     # carry [".gpu/mpa"]   (pieces + tokenizer)
#   bash benchmarks/gpu_teacher.sh carry .gpu/mpb     # carry [".gpu/mpb"], then mpc, mpd
#   bash benchmarks/gpu_teacher.sh mine               # carry [".gpu/kd", ".gpu/minilm-fp16", ".gpu/d128"]
#   bash benchmarks/gpu_teacher.sh train              # no carry: runs on what `mine` left in /tmp/w
#   bash benchmarks/gpu_teacher.sh prepare && bash benchmarks/gpu_teacher.sh train
#                                  # a fresh machine, no mpnet: carry [".gpu/kd", ".gpu/minilm-fp16", ".gpu/d128"];
#                                  # the mined file is rebuilt from the committed kd-index.json.gz
#
# Local preparation: mpnet's weights in fp16 split by `split -b 53M` into .gpu/mp{a,b,c,d}/piece.N
# (.gpu/mpa also holds meta.tar = the model directory without weights, and sha256 of the whole
# file); .gpu/kd = the sweeps' pairs (pairs.jsonl.xz: 80K train + 3K val) + the pathspec wheel.
# `mine` runs `supergrep mine-negatives --teacher` (3 negatives per row, pools of 1,024) and packs
# the result as row numbers + scores ($OUT/kd-index.json.gz; benchmarks/hn_pack.py unpacks it).
# `train` runs $RUNS at the same time on the GPU and packs every checkpoint ($OUT/run-<name>.tgz).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
MP=/tmp/mpnet
W=${W:-/tmp/w}
mkdir -p "$OUT" $MP/parts $W
phase=${1:?carry DIR | mine | train}
shift
case $phase in
carry)
  for d in "$@"; do
    if [ "$d" = .gpu/py ]; then mkdir -p /tmp/py && cp .gpu/py/* /tmp/py/; continue; fi
    cp "$d"/piece.* $MP/parts/
    if [ -f "$d/meta.tar" ]; then tar xf "$d/meta.tar" -C $MP && cp "$d/sha256" $MP/; fi
  done
  ls -la $MP/parts; df -h /tmp | tail -1
  ;;
mine)
  cat $MP/parts/piece.* > $MP/model.safetensors
  echo "$(cat $MP/sha256)  $MP/model.safetensors" | sha256sum -c - || exit 3
  rm -rf $MP/parts
  python3 -m pip install -q --no-deps --target /tmp/site ${KD:-.gpu/kd}/*.whl
  mkdir -p $W/models && cp -r .gpu/minilm-fp16 .gpu/d128 $W/models/
  xz -dc ${KD:-.gpu/kd}/pairs.jsonl.xz > $W/pairs.jsonl
  export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $W/gpu.txt
  python3 -m supergrep mine-negatives $W/pairs.jsonl -o $W/pairs-kd.jsonl --per-query ${PER_QUERY:-3} \
    --pool ${POOL:-1024} --teacher $MP --device cuda --json > $W/mine.json 2> $W/mine.err
  echo "mine rc=$?"; cat $W/mine.json; tail -3 $W/mine.err
  python3 benchmarks/hn_pack.py pack $W/pairs.jsonl $W/pairs-kd.jsonl -o $W/kd-index.json
  gzip -c $W/kd-index.json > "$OUT/kd-index.json.gz"
  cp $W/mine.json $W/gpu.txt "$OUT/"
  ls -la "$OUT"
  ;;
prepare)
  python3 -m pip install -q --no-deps --target /tmp/site ${KD:-.gpu/kd}/*.whl
  mkdir -p $W/models && cp -r .gpu/minilm-fp16 .gpu/d128 $W/models/
  xz -dc ${KD:-.gpu/kd}/pairs.jsonl.xz > $W/pairs.jsonl
  gzip -dc benchmarks/results/gpu-h100-2026-11-22-kd/kd-index.json.gz > $W/kd-index.json
  python3 benchmarks/hn_pack.py unpack $W/pairs.jsonl $W/kd-index.json -o $W/pairs-kd.jsonl
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $W/gpu.txt
  ;;
mine-extra)
  # More rows for the teacher-only runs: .gpu/py/pairs-py.jsonl.xz (45K Python training rows of
  # `make corpus` not in the sweeps' sample, docstring field dropped), carried beside .gpu/mpd.
  # After `carry` (all four pieces + .gpu/py) and `prepare`: mines them, then $W/all-kd.jsonl =
  # the 80K mined rows + these.
  cat $MP/parts/piece.* > $MP/model.safetensors
  echo "$(cat $MP/sha256)  $MP/model.safetensors" | sha256sum -c - || exit 3
  export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
  xz -dc /tmp/py/pairs-py.jsonl.xz > $W/py.jsonl
  python3 -m supergrep mine-negatives $W/py.jsonl -o $W/py-kd.jsonl --per-query ${PER_QUERY:-3} \
    --pool ${POOL:-1024} --teacher $MP --device cuda --json > $W/mine-py.json 2> $W/mine-py.err
  echo "mine rc=$?"; cat $W/mine-py.json; tail -3 $W/mine-py.err
  cat $W/pairs-kd.jsonl $W/py-kd.jsonl > $W/all-kd.jsonl; wc -l $W/all-kd.jsonl
  python3 benchmarks/hn_pack.py pack $W/py.jsonl $W/py-kd.jsonl -o $W/py-kd-index.json
  gzip -c $W/py-kd-index.json > "$OUT/py-kd-index.json.gz"; cp $W/mine-py.json "$OUT/"
  ;;
train)
  . benchmarks/pack_runs.sh
  export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
  rm -rf $W/runs $W/rc.txt
  STEPS=${STEPS:-600}
  common="--config configs/minilm-code.yaml --model-path $W/models/minilm-fp16 --max-steps $STEPS
    --save-every ${SAVE_EVERY:-200} --keep-last 3 --eval-every ${SAVE_EVERY:-200} --lr ${LR:-1e-4} --precision bf16
    --query-identifier-dropout 0.5 --document-header-dropout 0.5 --docstring-body-rate 0.5 --hard-negatives
    --train-file $W/pairs-kd.jsonl --quiet --json"
  # NAME FLAGS... per line (later flags override $common).
  RUNS=${RUNS:-"h128-t1 --model-path $W/models/d128 --projection-dim 128 --teacher-weight 1
h128-t3 --model-path $W/models/d128 --projection-dim 128 --teacher-weight 3
h128-t3-tau1 --model-path $W/models/d128 --projection-dim 128 --teacher-weight 3 --teacher-temperature 0.1
p384-t3 --projection-dim 384 --teacher-weight 3"}
  t0=$(date +%s)
  while read -r name flags; do
    [ -z "$name" ] && continue
    # shellcheck disable=SC2086
    ( timeout ${TRAIN_CAP_S:-450} python3 -m supergrep train $common --output-dir $W/runs/$name $flags > $W/$name.json 2> $W/$name.err
      echo "$name rc=$? after $(( $(date +%s) - t0 )) s" >> $W/rc.txt ) &
  done <<< "$RUNS"
  sleep 90; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | tee -a $W/gpu.txt
  wait
  cat $W/rc.txt; for f in $W/*.json; do echo "== $f"; tail -c 600 "$f"; echo; done
  for f in $W/*.err; do echo "== $f"; tail -3 "$f"; done
  pack_runs $W/runs "$OUT"
  pack_logs "$OUT" $W/h*.json $W/p*.json $W/*.err $W/*.txt
  ls -la "$OUT"
  ;;
*) echo "unknown phase $phase"; exit 2 ;;
esac
