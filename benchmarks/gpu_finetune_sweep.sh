#!/usr/bin/env bash
# Fine-tuning sweep on the GPU machine: several short runs of configs/minilm-code.yaml with
# overrides, each run's final checkpoint (adapter + projection + metrics) packed into $OUT.
# usage (on the device, repo root): bash benchmarks/gpu_finetune_sweep.sh MODEL_DIR PAIRS NAME "FLAGS" [NAME "FLAGS" ...]
set -uo pipefail
model=$1 pairs=$2; shift 2
export SUPERGREP_HOME=${SUPERGREP_HOME:-/tmp/sg} PYTHONUNBUFFERED=1
mkdir -p /tmp/sweep /tmp/pack
while [ $# -ge 2 ]; do
  name=$1 flags=$2; shift 2
  out=/tmp/sweep/$name
  # shellcheck disable=SC2086
  python3 -m supergrep train --config configs/minilm-code.yaml --model-path "$model" --train-file "$pairs" \
      --output-dir "$out" --quiet --json $flags > "/tmp/sweep/$name.json" 2> "/tmp/sweep/$name.err" \
      || { echo "$name failed"; tail -5 "/tmp/sweep/$name.err"; continue; }
  cat "/tmp/sweep/$name.json"; echo
  last=$(ls -d "$out"/step_* | tail -1)
  mkdir -p "/tmp/pack/$name"
  cp -r "$last"/{adapter_config.json,adapter_model.safetensors,projection,supergrep_model.json,run_config.json} "/tmp/pack/$name/"
  cp "$out/metrics.jsonl" "/tmp/pack/$name/"
  cp "$out/loss.png" "/tmp/pack/$name/" 2>/dev/null
done
tar -C /tmp/pack -cf "${OUT:-/tmp}/sweep.tar" .
