#!/bin/bash
# A/B of the daemon's latency with the in-memory BM25 on (default) and off (same tree, same index).
cd "$(git rev-parse --show-toplevel)"
STDLIB=${STDLIB:-/tmp/sgb/stdlib} OUT=${OUT:-/tmp/s18/ab}
mkdir -p $OUT
export PATH=$PWD/.venv/bin:$PATH SUPERGREP_HOME=${SUPERGREP_HOME:-/tmp/sgb/homeB}
[ -e $SUPERGREP_HOME/config.toml ] && cp $SUPERGREP_HOME/config.toml $OUT/config.toml.saved
for i in 1 2; do
  for n in 200000 0; do
    printf '[daemon]\nmirror_max_chunks = %s\n' $n > $SUPERGREP_HOME/config.toml
    python benchmarks/daemon.py latency --root $STDLIB --runs 30 --cold-runs 1 --out $OUT/lat-mem$n-$i.json > $OUT/log-$n-$i.txt 2>&1 || echo "failed $n $i"
    supergrep daemon stop > /dev/null 2>&1
    sleep 2
    python3 -c "
import json; d=json.load(open('$OUT/lat-mem$n-$i.json'))
e=d['end_to_end']; t=d['daemon_timings']; nat=d['end_to_end_native']
print('mem=$n', $i, 'pass', d['baseline']['python -c pass']['p50_ms'], 'sgr', {m: nat[m]['p50_ms'] for m in nat}, 'script', {m: e[m]['p50_ms'] for m in e}, 'daemon', {m: t[m]['total']['p50_ms'] for m in t}, 'load', d['load_before'][0])"
  done
done
rm -f $SUPERGREP_HOME/config.toml
[ -e $OUT/config.toml.saved ] && mv $OUT/config.toml.saved $SUPERGREP_HOME/config.toml
