#!/bin/bash
# New code, the prepare thread off (prepare_ahead = 0) and on (default 1), alternated.
SP=/work/main/.venv/lib/python3.11/site-packages
C=$SP/torch/_inductor/codegen
cd /tmp/bench2
for i in 1 2; do
  PYTHONPATH=/work/wt-host/src /work/main/.venv/bin/python /work/wt-host/benchmarks/index_stages.py $C --index-dir /tmp/bench2/sx --json seq-$i.json -- --store exact --config /tmp/bench2/seq.toml > seq-$i.txt 2>&1
  echo "$(date +%T) seq $i $(head -1 seq-$i.txt)" >> log.txt
  PYTHONPATH=/work/wt-host/src /work/main/.venv/bin/python /work/wt-host/benchmarks/index_stages.py $C --index-dir /tmp/bench2/sx --json ahead-$i.json -- --store exact > ahead-$i.txt 2>&1
  echo "$(date +%T) ahead $i $(head -1 ahead-$i.txt)" >> log.txt
done
echo done >> log.txt
