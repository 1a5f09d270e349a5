#!/bin/bash
# alternated bench search runs on the kept 100K index: $@ = list of "label|args"
out=/tmp/q9/abb; mkdir -p $out
for rep in ${REPS:-1 2}; do
for spec in "$@"; do
  label=${spec%%|*}; args=${spec#*|}
  .venv/bin/supergrep bench search --sizes 100000 --exact-queries 0 --queries 100 --reuse --work-dir /tmp/q9/b100k $args --out $out/$label-$rep.json >/dev/null 2>&1
  python3 -c "import json,sys; r=json.load(open('$out/$label-$rep.json')); x=r['results'][0]; print('$label', $rep, x['p50_ms'], x['p95_ms'], 'cpu', x['p50_cpu_ms'], 'warm', x['warm_s'], 'load', [round(v,2) for v in r['load_average']])"
done; done
