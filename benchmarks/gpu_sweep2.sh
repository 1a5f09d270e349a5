#!/usr/bin/env bash
# One device call: the distillation sweep of docs/training.md ("Keeping semantic matching").
# Carry: .gpu/minilm-fp16 (weights, fp16) and .gpu/sweep2 (pairs.jsonl.xz: 80K train + 3K val
# pairs sampled from the mined corpus, and the pathspec wheel the device lacks).
set -uo pipefail
python3 -m pip install -q --no-deps --target /tmp/site .gpu/sweep2/*.whl
export PYTHONPATH=$PWD/src:/tmp/site
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
common="--max-steps 600 --save-every 200 --keep-last 3 --eval-every 200 --lr 1e-4 --query-identifier-dropout 0.5 --document-header-dropout 0.5 --docstring-body-rate 0.5"
bash benchmarks/gpu_finetune_sweep.sh .gpu/minilm-fp16 .gpu/sweep2/pairs.jsonl.xz \
  d3 "$common --distill-weight 3" \
  d1 "$common --distill-weight 1" \
  d10 "$common --distill-weight 10"
