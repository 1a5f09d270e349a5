#!/usr/bin/env bash
# Daemon latency, two trees alternated (each round starts a fresh daemon from that tree):
#   OLD=/tmp/old NEW=/work/main ROUNDS=3 SUPERGREP_HOME=/tmp/sgb/home bash ab.sh /tmp/sgb/stdlib OUTDIR
set -euo pipefail
root=$1 out=$2
mkdir -p "$out"
py=${PYTHON:-/work/main/.venv/bin/python}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for side in old new; do
    tree=$([ $side = old ] && echo "$OLD" || echo "$NEW")
    PYTHONPATH=$tree/src $py -m supergrep daemon stop >/dev/null 2>&1 || true
    PYTHONPATH=$tree/src $py "$tree/benchmarks/daemon.py" latency --root "$root" --runs 30 --cold-runs 1 \
      --out "$out/$side-$r.json" > "$out/$side-$r.log" 2>&1
    PYTHONPATH=$tree/src $py -c "import json; d=json.load(open('$out/$side-$r.json')); print('$side $r', {k: v['p50_ms'] for k, v in d['end_to_end'].items()}, {m: x['total']['p50_ms'] for m, x in d['daemon_timings'].items()}, 'load', round(d['load_before'][0], 2))"
  done
done
PYTHONPATH=$NEW/src $py -m supergrep daemon stop >/dev/null 2>&1 || true
