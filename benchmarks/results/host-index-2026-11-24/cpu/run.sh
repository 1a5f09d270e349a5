#!/bin/bash
# Alternating before/after: plain CLI runs (headline), then the stage harness.
SP=/work/main/.venv/lib/python3.11/site-packages
CORPUS=$SP/torch/_inductor/codegen
PY=/work/main/.venv/bin/python
cd /tmp/bench
for i in 1 2 3; do
  for v in before after; do
    src=/work/wt-$v/src; [ $v = after ] && src=/work/wt-host/src
    rm -rf /tmp/bench/ix-$v-$i
    /usr/bin/time -f "%e s wall %U user %S sys" -o cli-$v-$i.time env PYTHONPATH=$src $PY -m supergrep index $CORPUS --index-dir /tmp/bench/ix-$v-$i --store exact --json > cli-$v-$i.json 2> cli-$v-$i.err
    echo "$(date +%T) cli $v $i $(cat cli-$v-$i.json)" >> log.txt
  done
done
for i in 1 2; do
  for v in before after; do
    src=/work/wt-$v/src; [ $v = after ] && src=/work/wt-host/src
    PYTHONPATH=$src $PY /tmp/index_stages.py $CORPUS --index-dir /tmp/bench/sx-$v-$i --json stages-$v-$i.json -- --store exact > stages-$v-$i.txt 2>&1
    echo "$(date +%T) stages $v $i $(head -1 stages-$v-$i.txt)" >> log.txt
  done
done
echo done >> log.txt
