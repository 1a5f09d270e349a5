#!/bin/bash
# The daemon's latency on stdlib: the session's start vs this tree, alternated.
# OLD_SRC: the src/ of a worktree at d67ed8d built in place (python setup.py build_ext --inplace);
# STDLIB: the project (benchmarks/daemon.py corpus); OUT: where the JSON goes.
OLD_SRC=${OLD_SRC:-/tmp/s18/wt0/src} STDLIB=${STDLIB:-/tmp/sgb/stdlib} OUT=${OUT:-/tmp/s18/ab}
mkdir -p $OUT
cd "$(git rev-parse --show-toplevel)"
export PATH=$PWD/.venv/bin:$PATH SUPERGREP_HOME=${SUPERGREP_HOME:-/tmp/sgb/homeB}
# (a throwaway SUPERGREP_HOME holding the stdlib index, without a [daemon] section)
for i in 1 2; do
  for v in new old; do
    if [ $v = old ]; then export PYTHONPATH=$OLD_SRC; else unset PYTHONPATH; fi
    supergrep daemon stop > /dev/null 2>&1; sleep 2
    python benchmarks/daemon.py latency --root $STDLIB --runs ${RUNS:-30} --cold-runs 1 --out $OUT/session-$v-$i.json > $OUT/session-log-$v-$i.txt 2>&1 || echo "failed $v $i"
    supergrep daemon stop > /dev/null 2>&1
    python3 -c "
import json; d=json.load(open('$OUT/session-$v-$i.json'))
e=d['end_to_end']; t=d['daemon_timings']; nat=d['end_to_end_native']
print('$v', $i, 'pass', d['baseline']['python -c pass']['p50_ms'], 'sgr', {m: nat[m]['p50_ms'] for m in nat}, 'script', {m: e[m]['p50_ms'] for m in e}, 'daemon', {m: t[m]['total']['p50_ms'] for m in t}, 'load', round(d['load_before'][0], 2))"
  done
done
unset PYTHONPATH
