#!/usr/bin/env bash
# Inductor's max-autotune (its own Triton GEMM templates, pointwise epilogues fused into them) on
# the varlen paths, against the default compile, in one device call:
#   carry [".gpu/minilm-fp16"];  OUT=$OUT bash benchmarks/gpu_autotune.sh
# `bench train -w xtr-base` at batch 192 (compile vs autotune), then `bench encode -w xtr-base`
# (varlen+compile vs varlen+autotune). Each part has its own time cap.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/autotune"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
m=.gpu/minilm-fp16
timeout "${TRAIN_S:-400}" python3 -m supergrep bench train -w xtr-base --model-path $m \
  --variants bs=192+bf16+compile+varlen+packing,bs=192+bf16+autotune+varlen+packing --steps 30 --warmup 10 \
  --out "$OUT/autotune" > "$OUT/autotune-train-log.txt" 2>&1
echo "train rc=$?"; grep "^|" "$OUT/autotune-train-log.txt"
timeout "${ENCODE_S:-170}" python3 -m supergrep bench encode -w xtr-base --model-path $m --docs 20000 --doc-cap 512 \
  --no-index --modes varlen+compile,varlen+autotune --out "$OUT/autotune" > "$OUT/autotune-encode-log.txt" 2>&1
echo "encode rc=$?"; grep "^|" "$OUT/autotune-encode-log.txt"
