#!/bin/bash
# A/B of the daemon's latency with and without the C kernels (same tree, same index).
cd /work/main
export PATH=/work/main/.venv/bin:$PATH SUPERGREP_HOME=/tmp/sgb/homeB
for i in 1 2; do
  for n in 1 0; do
    SUPERGREP_NATIVE=$n python benchmarks/daemon.py latency --root /tmp/sgb/stdlib --runs 20 --cold-runs 1 --out /tmp/s17/ab/lat-native$n-$i.json > /dev/null 2>&1 || echo "failed $n $i"
    supergrep daemon stop > /dev/null 2>&1
    sleep 2
    python3 -c "
import json; d=json.load(open('/tmp/s17/ab/lat-native$n-$i.json'))
e=d['end_to_end']; t=d['daemon_timings']
print('native=$n', $i, 'pass', d['baseline']['python -c pass']['p50_ms'], 'e2e', {m: e[m]['p50_ms'] for m in e}, 'daemon', {m: t[m]['total']['p50_ms'] for m in t}, 'load', d['load_before'][0])"
  done
done
