#!/usr/bin/env bash
# CPU measurement of `supergrep shrink` students against the default model (docs/deployment.md,
# "A cheaper encoder"): for each student, one benchmarks/deployment.py process (~4 min on the
# 2-core machine) that builds both int8 ONNX forms, indexes jinja2 3.1.4 with each, interleaved
# round by round (lines/s and lines per CPU-second), and runs the public set (semantic and hybrid
# P@1 / MRR@10); with TORCH=1 also `supergrep eval` of the float student (torch).
#
#   bash benchmarks/shrink_measure.sh OUT_DIR STUDENT...    # STUDENT: a model dir or gpu_shrink.sh's NAME.tgz
#
# Needs the public corpora (`make eval`) under .cache/eval-corpora. Writes OUT_DIR/deployment-NAME.json
# (and eval-torch-NAME.json), prints each run's table. Environment: PY (.venv/bin/python), ROUNDS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/shrink_measure.sh OUT_DIR STUDENT...}; shift
[ $# -gt 0 ] || { echo "no student given" >&2; exit 2; }
PY=${PY:-.venv/bin/python}
ROUNDS=${ROUNDS:-3}
corpora=(--corpus jinja2=.cache/eval-corpora/jinja2-3.1.4/src --corpus itsdangerous=.cache/eval-corpora/itsdangerous-2.2.0/src)
[ -d .cache/eval-corpora/jinja2-3.1.4/src ] || { echo "the public corpora are missing: run make eval" >&2; exit 2; }
mkdir -p "$out" .cache/shrink/students
for s in "$@"; do
  if [[ $s == *.tgz ]]; then  # gpu_shrink.sh's packing: NAME/ inside NAME.tgz
    tar -C .cache/shrink/students -xzf "$s"
    name=$(basename "$s" .tgz); dir=.cache/shrink/students/$name
  else
    dir=$s; name=$(basename "$s")
  fi
  echo "== $name ($dir), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  $PY benchmarks/deployment.py --root .cache/eval-corpora/jinja2-3.1.4/src -t python --rounds "$ROUNDS" \
    --forms "onnx-int8,$name:onnx-int8" --model "$name=$dir" --eval --out "$out/deployment-$name.json"
  if [ "${TORCH:-0}" = 1 ]; then
    $PY -m supergrep eval --queries eval/public/queries.jsonl -t python "${corpora[@]}" --backend torch \
      --model-path "$dir" --json > "$out/eval-torch-$name.json"
  fi
done
