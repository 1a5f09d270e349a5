#!/bin/bash
# A/B of the daemon's latency: old code + its Lloyd-Max index vs this tree + an equally spaced one.
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
for i in 1 2; do
  for side in A B; do
    if [ $side = A ]; then export SUPERGREP_HOME=/tmp/sgb/home PYTHONPATH=/tmp/base/src; else export SUPERGREP_HOME=/tmp/sgb/homeB PYTHONPATH=/work/main/src; fi
    python benchmarks/daemon.py latency --root /tmp/sgb/stdlib --runs 20 --cold-runs 1 --out /tmp/sgx/lat-$side-$i.json > /dev/null 2>&1 || echo "failed $side $i"
    supergrep daemon stop > /dev/null 2>&1
    sleep 2
    python3 -c "
import json; d=json.load(open('/tmp/sgx/lat-$side-$i.json'))
e=d['end_to_end']; t=d['daemon_timings']
print('$side', $i, 'pass', d['baseline']['python -c pass']['p50_ms'], 'e2e', {m: e[m]['p50_ms'] for m in e}, 'daemon', {m: t[m]['total']['p50_ms'] for m in t}, 'load', d['load_before'][0])"
  done
done
