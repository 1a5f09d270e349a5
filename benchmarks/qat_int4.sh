#!/usr/bin/env bash
# What quantization-aware training buys at int4: two LoRA runs identical but for --qat-bits 4,
# each quantized afterwards to the int4 grid QAT trained for (`supergrep quantize --bits 4
# --group-size 64`), all four (and the base model, float and int4) scored on the held-out pairs.
#
# Usage: benchmarks/qat_int4.sh MODEL_DIR PAIRS.jsonl[.gz] OUT_DIR [STEPS] [VAL_LIMIT]
#   e.g. benchmarks/qat_int4.sh "$(python -c 'from supergrep.encoder.spec import default_model_dir as d; print(d())')" \
#            .cache/corpus/pairs.jsonl.gz runs/qat 300 2000
# Runs on whatever `--device auto` finds. The training shape comes from configs/minilm-code.yaml
# unless overridden by the environment: BATCH, DOC (document tokens), WARMUP, MAX_PAIRS (0: all),
# e.g. the 2-core CPU run of docs/deployment.md: BATCH=16 DOC=128 WARMUP=10 MAX_PAIRS=4000.
# Writes OUT_DIR/summary.json: {model: eval-pairs report}; the public-set figures come from
# `supergrep eval --model-path OUT_DIR/<run>/step_N --model-path OUT_DIR/<run>-q4 ...`.
set -euo pipefail
MODEL=$1 PAIRS=$2 OUT=$3 STEPS=${4:-300} VAL=${5:-2000}
SG=("${PYTHON:-python3}" -m supergrep)
mkdir -p "$OUT"
common=(--config configs/minilm-code.yaml --model-path "$MODEL" --train-file "$PAIRS" --max-steps "$STEPS"
        --save-every "$STEPS" --eval-every "$STEPS" --val-batches 4 --quiet --json
        --batch-size "${BATCH:-128}" --document-max-tokens "${DOC:-256}" --warmup-steps "${WARMUP:-100}"
        --max-pairs "${MAX_PAIRS:-0}")
"${SG[@]}" train "${common[@]}" --output-dir "$OUT/plain" > "$OUT/plain.train.json"
"${SG[@]}" train "${common[@]}" --output-dir "$OUT/qat4" --qat-bits 4 --qat-group-size 64 > "$OUT/qat4.train.json"

declare -A models=([base]="$MODEL")
for run in plain qat4; do
  models[$run]=$(ls -d "$OUT/$run"/step_* | tail -1)
done
for name in base plain qat4; do
  "${SG[@]}" quantize "${models[$name]}" -o "$OUT/$name-q4" --bits 4 --group-size 64 --force --json \
      > "$OUT/$name-q4.quantize.json"
  models[$name-q4]="$OUT/$name-q4"
done
for name in base base-q4 plain plain-q4 qat4 qat4-q4; do
  "${SG[@]}" eval-pairs --pairs "$PAIRS" --split val --limit "$VAL" --candidates 100 \
      --model-path "${models[$name]}" --backend torch --json > "$OUT/$name.pairs.json"
done
"${PYTHON:-python3}" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = {p.name.removesuffix(".pairs.json"): json.loads(p.read_text()) for p in sorted(out.glob("*.pairs.json"))}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
for name, rep in summary.items():
    print(name, {k: v for k, v in rep.items() if not isinstance(v, (dict, list))})
EOF
