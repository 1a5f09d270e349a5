#!/usr/bin/env bash
# Issue 7 experiment, one GPU (nvidia-h100 / h200), two calls of one warm machine: do comment ->
# definition pairs (benchmarks/comment_pairs.py) teach MiniLM behaviour matching that docstring
# summaries do not? Three runs at once on the GPU, same recipe, only the training queries differ:
#   doc  the mined docstring -> code pairs (Python part of `make corpus`)
#   mix  those + the comment pairs
#   cmt  the comment pairs alone
# All validate on the same held-out docstring pairs; the choice is made on the development set
# here (docs/training.md, "Fifth sweep"). The pairs travel without their docstring field (64 MiB
# carry), so the docstring-body augmentation is off in every run.
#
#   bash benchmarks/gpu_comments.sh model      # carry [".gpu/mA"]: the weights' first piece to /tmp/w
#   bash benchmarks/gpu_comments.sh train      # carry [".gpu/mB", ".gpu/cmt"], at once (30 s idle
#                                              # gives the machine back)
#
# all-MiniLM-L6-v2 in fp16 (45.9 MB; tokenizer.json, no vocab.txt) does not fit one call beside
# the 21 MB working tree and the data: `split -b 24000000 model.safetensors` -> .gpu/mA/piece.aa,
# .gpu/mB/piece.ab + meta.tar (the model directory without weights) + sha256. .gpu/cmt:
# pairs.jsonl.xz (the mined pairs, the fields the trainer reads), comments.jsonl.xz
# (comment_pairs.py), the pathspec wheel.
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/pack_runs.sh
OUT=${OUT:-/tmp/out}
W=${W:-/tmp/w}
mkdir -p "$OUT" $W

# MiniLM from its two pieces (the first carried by `model`), the wheels, the environment.
assemble_minilm() {
  rm -rf $W/minilm-fp16 && mkdir -p $W/minilm-fp16 && tar xf .gpu/mB/meta.tar -C $W/minilm-fp16
  cat $W/parts/piece.aa .gpu/mB/piece.ab > $W/minilm-fp16/model.safetensors
  echo "$(cat .gpu/mB/sha256)  $W/minilm-fp16/model.safetensors" | sha256sum -c - || exit 3
  python3 -m pip install -q --no-deps --target /tmp/site .gpu/cmt/*.whl
  export PYTHONPATH=$PWD/src:/tmp/site SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1
}

case ${1:?model | train} in
model)
  rm -rf $W/parts && mkdir -p $W/parts && cp .gpu/mA/piece.* $W/parts/ && ls -la $W/parts
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $W/gpu.txt
  ;;
train)
  assemble_minilm
  rm -rf $W/runs $W/rc.txt /tmp/pack
  xz -dc .gpu/cmt/pairs.jsonl.xz > $W/doc.jsonl
  xz -dc .gpu/cmt/comments.jsonl.xz > $W/cmt.jsonl
  cat $W/doc.jsonl $W/cmt.jsonl > $W/mix.jsonl
  grep '"split": "val"' $W/doc.jsonl > $W/val.jsonl
  wc -l $W/doc.jsonl $W/cmt.jsonl $W/val.jsonl
  STEPS=${STEPS:-500}
  common="--config configs/minilm-code.yaml --model-path $W/minilm-fp16 --max-steps $STEPS
    --save-every ${SAVE_EVERY:-250} --keep-last 3 --eval-every ${SAVE_EVERY:-250} --lr ${LR:-1e-4} --precision bf16
    --projection-dim 384 --distill-weight ${DISTILL:-0.3} --query-identifier-dropout 0.5 --document-header-dropout 0.5
    --docstring-body-rate 0 --val-file $W/val.jsonl --quiet --json"
  RUNS=${RUNS:-"doc --train-file $W/doc.jsonl
mix --train-file $W/mix.jsonl
cmt --train-file $W/cmt.jsonl"}
  train_runs "$common" ${TRAIN_CAP_S:-500} $W
  for f in $W/*.json; do echo "== $f"; tail -c 500 "$f"; echo; done
  for f in $W/*.err; do echo "== $f"; tail -3 "$f"; done
  pack_runs $W/runs "$OUT"
  pack_logs "$OUT" $W/*.json $W/*.err $W/*.txt
  ls -la "$OUT"
  ;;
carry)
  # one piece of a split model per call (the working tree leaves ~45 MB of a call's 64 MiB)
  shift; mkdir -p $W/parts; for d in "$@"; do cp "$d"/piece.* $W/parts/; cp "$d"/mp* $W/ 2>/dev/null; done
  ls -la $W/parts; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $W/gpu.txt
  ;;
teacher)
  # all-mpnet-base-v2 as the teacher on the comment queries (the fifth sweep's open question):
  # after `model` (.gpu/mA), `carry .gpu/mp1` ... `carry .gpu/mp5` (its fp16 weights in five
  # pieces + mpmeta.tar + mpsha256), with carry [".gpu/mB", ".gpu/cmt"]: assemble both models,
  # mine 3 negatives + the teacher's scores per comment row, train $RUNS on them.
  assemble_minilm
  rm -rf $W/mpnet $W/runs $W/rc.txt /tmp/pack && mkdir -p $W/mpnet
  tar xf $W/mpmeta.tar -C $W/mpnet
  cat $W/parts/piece.a $W/parts/piece.b $W/parts/piece.c $W/parts/piece.d $W/parts/piece.e > $W/mpnet/model.safetensors
  echo "$(cat $W/mpsha256)  $W/mpnet/model.safetensors" | sha256sum -c - || exit 3
  xz -dc .gpu/cmt/pairs.jsonl.xz | grep '"split": "val"' > $W/val.jsonl
  xz -dc .gpu/cmt/comments.jsonl.xz | grep '"split": "train"' > $W/cmt.jsonl
  t0=$(date +%s)
  python3 -m supergrep mine-negatives $W/cmt.jsonl -o $W/cmt-kd.jsonl --per-query 3 --pool 1024 \
    --teacher $W/mpnet --device cuda --json > $W/mine.json 2> $W/mine.err
  echo "mine rc=$? after $(( $(date +%s) - t0 )) s"; cat $W/mine.json; tail -3 $W/mine.err
  STEPS=${STEPS:-500}
  common="--config configs/minilm-code.yaml --model-path $W/minilm-fp16 --max-steps $STEPS
    --save-every ${SAVE_EVERY:-250} --keep-last 3 --eval-every ${SAVE_EVERY:-250} --lr ${LR:-1e-4} --precision bf16
    --projection-dim 384 --teacher-weight 1 --infonce-weight 0 --margin-weight 0 --query-identifier-dropout 0
    --document-header-dropout 0 --docstring-body-rate 0 --hard-negatives --train-file $W/cmt-kd.jsonl
    --val-file $W/val.jsonl --quiet --json"
  RUNS=${RUNS:-"tkd
tkd-lr2 --lr 2e-4
tkd-inf --infonce-weight 1 --distill-weight 1"}
  train_runs "$common" ${TRAIN_CAP_S:-400} $W
  for f in $W/t*.json; do echo "== $f"; tail -c 500 "$f"; echo; done
  for f in $W/t*.err; do echo "== $f"; tail -3 "$f"; done
  pack_runs $W/runs "$OUT"
  python3 benchmarks/hn_pack.py pack $W/cmt.jsonl $W/cmt-kd.jsonl -o $W/kd-index.json && gzip -c $W/kd-index.json > "$OUT/kd-index.json.gz"
  pack_logs "$OUT" $W/t*.json $W/*.err $W/*.txt $W/mine.json
  ls -la "$OUT"
  ;;
*) echo "unknown phase $1"; exit 2 ;;
esac
