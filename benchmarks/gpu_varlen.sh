#!/usr/bin/env bash
# The varlen training path on one GPU (one device call): the attention kernels alone against
# FlexAttention (benchmarks/varlen_attention.py), then `bench train` of the flex path and the
# varlen path in the same process, then (optional) a kernel trace of the varlen step.
#
#   carry [".gpu/minilm-fp16"];  bash benchmarks/gpu_varlen.sh [attn] [bench] [trace] [encode] [minilm]
#   (.gpu/minilm-fp16: `.venv/bin/python benchmarks/make_minilm_fp16.py .gpu/minilm-fp16`, 44 MiB)
#
# encode: `bench encode` of xtr-base and MiniLM, padded vs varlen vs varlen+compile (index-time
# encoding); minilm: `bench train -w minilm`, joint packing vs varlen (BERT), batch 48 and 192
# (MWL=minilm-random MODEL=.gpu/tok: its shape with random weights, when the weights cannot travel).
# Env: BS (192), STEPS (30), WARM (10), V (the bench variants), BROUNDS (bench --rounds), CAP_S per part; trace: TW, TV, TSTEPS,
# AB (a trainer switch compared in one process, e.g. AB=stage_copies), ROUNDS, CURVE (warm-up timed in blocks);
# etrace: ETM (encode_trace.py's modes, e.g. varlen+compile,varlen+compile+fp8), ESTREAM (--stream K:
# K calls in one encode_ids, profiled for the GPU's idle gaps between calls).
# quant: the float8 row quantiser kernel alone (benchmarks/fp8_quant_check.py; QCAP seconds);
# maxsim: the loss's MaxSim alone (benchmarks/maxsim_check.py: kernels vs einsum, tiles swept; MREPS).
# gelucode: the same script's gated GELU backward only, with Inductor's generated code logged.
# attnbwd: the attention backward alone at training's batch-192 shape, dK/dV and dQ tiles swept apart
# (ADOCS=768: batch 384's, half of the sequences 32-token queries).
# fp8gemm: the float8 products alone (benchmarks/fp8_gemm.py); attnfwd: the attention forward alone
# at encoding's shape over a grid of tiles (varlen_attention.py --fwd-only); index: a whole
# `index` of torch/_inductor with MiniLM, stage by stage (index_stages.py), alternating the tree's
# src with OLDSRC's (carry .gpu/site: tree_sitter + the Python grammar for py3.12, and OLDSRC).
# PACK=1: everything under $OUT into one results.tgz at the end.
# ICACHE=1: Inductor's and Triton's caches (compiled graphs, C++ wrappers, kernels) in one folder,
# restored from .gpu/inductor-cache.txz.* (or .tgz.*) when carried and returned as $OUT/inductor-cache.txz.*
# (xz, 15 MiB parts; carry them with the ~24 MiB tree under the 64 MiB limit): a fresh machine then skips most of a first compile (217 s with the C++ wrapper).
# Next call: `mkdir -p .gpu && rm -f .gpu/inductor-cache.* && cp FILES_AT/inductor-cache.txz.* .gpu/` and carry those paths.
# inductor: `bench encode` of EW (xtr-base) in EM's modes, once per Inductor setting in IENVS
# (space-separated; each a comma-separated list of TORCHINDUCTOR_* variables, "-" for the defaults),
# one process each.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONFAULTHANDLER=1
model=${MODEL:-.gpu/minilm-fp16}  # MODEL=.gpu/tok (tokenizer files only) for the synthetic workloads
BS=${BS:-192}
unxz_() { if command -v xz > /dev/null; then xz -dc; else python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)"; fi; }
xz_() { if command -v xz > /dev/null; then xz -T0 -6; else python3 -c "import lzma, shutil, sys; f = lzma.open(sys.stdout.buffer, 'w', preset=6); shutil.copyfileobj(sys.stdin.buffer, f); f.close()"; fi; }
if [ -n "${ICACHE:-}" ]; then
  export TORCHINDUCTOR_CACHE_DIR=/tmp/sg-inductor-cache
  mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
  if ls .gpu/inductor-cache.txz.* > /dev/null 2>&1; then  # xz: ~2/3 of gzip's size, under the carry limit
    cat .gpu/inductor-cache.txz.* | unxz_ | tar -xf - -C "$TORCHINDUCTOR_CACHE_DIR" && echo "inductor cache restored: $(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1)"
  elif ls .gpu/inductor-cache.tgz.* > /dev/null 2>&1; then
    cat .gpu/inductor-cache.tgz.* | tar -xzf - -C "$TORCHINDUCTOR_CACHE_DIR" && echo "inductor cache restored: $(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1)"
  fi
fi
parts=${*:-attn bench}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  # the device copy's .git HEAD is stale (the working tree is copied, not the history): name the
  # tree itself, which `git log --format='%h %T'` here maps to a commit when the tree was committed
  echo "tree $(GIT_INDEX_FILE=/tmp/sg-tree-index git add -A 2>/dev/null && GIT_INDEX_FILE=/tmp/sg-tree-index git write-tree 2>/dev/null)"
  echo "parts: $parts"; } 2>&1 | tee "$OUT/env.txt"
for part in $parts; do
  s=$(date +%s)
  case $part in
  attn)
    timeout "${CAP_S:-200}" python3 benchmarks/varlen_attention.py --out "$OUT/attn.json" 2>&1 | grep -v Warning | tee "$OUT/attn.txt" | tail -20 ;;
  bench)
    V=${V:-bs=$BS+bf16+compile+flex+packing,bs=$BS+bf16+compile+varlen+packing}
    TORCH_LOGS=${TORCH_LOGS:-recompiles} timeout "${CAP_S:-420}" python3 -m supergrep bench train -w xtr-base --model-path $model --variants "$V" \
      --steps "${STEPS:-30}" --warmup "${WARM:-10}" --rounds "${BROUNDS:-1}" --time-limit $(( ${CAP_S:-420} - 45 )) --out "$OUT/bench" > "$OUT/bench-log.txt" 2>&1
    echo "bench rc=$?"; echo "recompiles: $(grep -c Recompiling "$OUT/bench-log.txt")"
    grep -v "Warning\|warn(\|__recompiles" "$OUT/bench-log.txt" | tail -8 ;;
  encode)
    for w in ${EW:-xtr-base minilm}; do
      cap=$([ $w = xtr-base ] && echo 512 || echo 256)
      timeout "${CAP_S:-280}" python3 -m supergrep bench encode -w $w --model-path $model --docs "${DOCS:-20000}" \
        --doc-cap $cap --no-index --modes "${EM:-padded,varlen,varlen+compile}" --out "$OUT/encode" \
        > "$OUT/encode-$w-log.txt" 2>&1
      echo "encode $w rc=$?"; grep -v "Warning\|warn(" "$OUT/encode-$w-log.txt" | tail -8
    done ;;
  etrace)
    for w in ${EW:-xtr-base minilm}; do
      timeout "${CAP_S:-200}" python3 benchmarks/encode_trace.py --workload $w --model-path $model \
        --doc-cap $([ $w = xtr-base ] && echo 512 || echo 256) --modes "${ETM:-varlen,varlen+compile}" ${ESTREAM:+--stream "$ESTREAM"} --out "$OUT/encode-trace" > "$OUT/encode-trace-$w.txt" 2>&1
      echo "etrace $w rc=$?"; grep -v "Warning\|warn(" "$OUT/encode-trace-$w.txt" | grep -A12 '"ms"'
      grep -A60 '^stream:' "$OUT/encode-trace-$w.txt" | grep -v '^ *[][{}],\?$' | head -70
    done ;;
  quant)  # the float8 row quantiser kernel: bytes vs quantize_rows, and the gated GELU backward both ways
    timeout "${QCAP:-120}" python3 benchmarks/fp8_quant_check.py --out "$OUT/fp8-quant.json" 2>&1 | grep -v Warning | tee "$OUT/fp8-quant.txt" | tail -8 ;;
  gelucode)  # Inductor's generated code for the gated GELU backward (+ row quantisation), both forms
    TORCH_LOGS=output_code timeout "${QCAP:-120}" python3 benchmarks/fp8_quant_check.py --gated-only \
      --out "$OUT/gelu-ms.json" > "$OUT/gelu-output-code.txt" 2>&1
    echo "gelucode rc=$?"; grep "gated backward" "$OUT/gelu-output-code.txt" ;;
  fp8gemm)
    timeout "${CAP_S:-120}" python3 benchmarks/fp8_gemm.py --out "$OUT/fp8-gemm.json" 2>&1 | grep -v Warning | tee "$OUT/fp8-gemm.txt" ;;
  attnbwd)  # training's attention backward alone: each backward kernel's tiles (varlen_attention.py --bwd-sweep)
    timeout "${CAP_S:-200}" python3 benchmarks/varlen_attention.py --bwd-sweep ${ADOCS:+--docs $ADOCS --queries $((ADOCS / 2))} --out "$OUT/attn-bwd.json" 2>&1 | grep -v Warning | tee "$OUT/attn-bwd.txt" | tail -30 ;;
  attnfwd)
    timeout "${CAP_S:-150}" python3 benchmarks/varlen_attention.py --fwd-only --docs 790 --queries 0 \
      --out "$OUT/attn-fwd.json" 2>&1 | grep -v Warning | tee "$OUT/attn-fwd.txt" | tail -42 ;;
  index)
    T=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))")/_inductor
    for r in ${IROUNDS:-1 2}; do
      for v in new old; do
        src=$PWD/src; [ $v = old ] && src=$PWD/${OLDSRC:-.gpu/oldsrc/src}
        PYTHONPATH=$src:$PWD/.gpu/site timeout "${CAP_S:-150}" python3 benchmarks/index_stages.py "$T" --index-dir /tmp/sx \
          --json "$OUT/index-$v-$r.json" -- --store exact --model-path $model > "$OUT/index-$v-$r.txt" 2>&1
        echo "== $v $r rc=$?"; grep -v "Warning\|warn(" "$OUT/index-$v-$r.txt" | awk '$0 !~ /^ *[A-Za-z_-]+ .* 0\.0[0-9] /' | head -24
      done
    done ;;
  inductor)
    for envs in ${IENVS:-- TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 TORCHINDUCTOR_MULTI_KERNEL=1}; do
      tag=$(echo "$envs" | tr -c 'A-Za-z0-9=_\n' '_' | sed 's/TORCHINDUCTOR_//g'); [ "$envs" = - ] && tag=default
      ( [ "$envs" != - ] && export ${envs//,/ }
        timeout "${CAP_S:-200}" python3 -m supergrep bench encode -w ${EW:-xtr-base} --model-path $model --docs "${DOCS:-20000}" \
          --doc-cap 512 --no-index --modes "${EM:-varlen+compile+fp8}" --out "$OUT/inductor-$tag" > "$OUT/inductor-$tag-log.txt" 2>&1
        echo "inductor $tag rc=$?" )
      grep "^| forward" "$OUT/inductor-$tag-log.txt" "$OUT"/inductor-"$tag"/*.md 2>/dev/null | tail -4
    done ;;
  minilm)
    MV=${MV:-bf16+compile+packing,bf16+compile+varlen+packing,bs=192+bf16+compile+packing,bs=192+bf16+compile+varlen+packing}
    TORCH_LOGS=${TORCH_LOGS:-recompiles} timeout "${CAP_S:-480}" python3 -m supergrep bench train -w "${MWL:-minilm}" --model-path $model \
      --variants "$MV" --steps "${STEPS:-30}" --warmup "${WARM:-10}" --rounds "${BROUNDS:-1}" --time-limit $(( ${CAP_S:-480} - 45 )) --out "$OUT/minilm" > "$OUT/minilm-log.txt" 2>&1
    echo "minilm rc=$?"; echo "recompiles: $(grep -c Recompiling "$OUT/minilm-log.txt")"
    grep -v "Warning\|warn(\|__recompiles" "$OUT/minilm-log.txt" | tail -10 ;;
  maxsim)  # the loss's MaxSim alone: Triton kernels vs the compiled einsum, forward tiles swept
    timeout "${CAP_S:-150}" python3 benchmarks/maxsim_check.py --reps "${MREPS:-10}" --out "$OUT/maxsim.json" 2>&1 | grep -v Warning | tee "$OUT/maxsim.txt" | tail -30 ;;
  trace)
    mkdir -p "$OUT/trace"
    # TW: workload; TSTEPS: profiled steps; AB: a trainer switch to compare (step_trace.py --ab)
    log="$OUT/trace/log-${TW:-xtr-base}.txt"
    timeout "${CAP_S:-300}" python3 benchmarks/step_trace.py --model-path $model --workload "${TW:-xtr-base}" \
      --variants "${TV:-bs=$BS+bf16+compile+varlen+packing}" --warmup "${WARM:-10}" --steps "${TSTEPS:-6}" \
      ${AB:+--ab "$AB" --rounds "${ROUNDS:-2}"} ${CURVE:+--curve-block "$CURVE"} --out "$OUT/trace" > "$log" 2>&1
    echo "trace rc=$?"; grep -v "Warning\|warn(" "$log" | tail -40 ;;
  esac
  echo "== $part: $(( $(date +%s) - s )) s"
done
ls -la "$OUT"
if [ -n "${ICACHE:-}" ] && [ -z "${ICACHE_KEEP:-}" ]; then  # (ICACHE_KEEP=1: another run follows in this call) parts under the 16 MiB a returned file may have; at most 4
  tar -C "$TORCHINDUCTOR_CACHE_DIR" -cf - . | xz_ > /tmp/inductor-cache.txz && split -b 15M -d -a 1 /tmp/inductor-cache.txz "$OUT/inductor-cache.txz."
  n=$(ls "$OUT"/inductor-cache.txz.* | wc -l); echo "inductor cache: $(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1), $n part(s) of 15 MiB"
  if [ "$n" -gt 4 ]; then rm -f "$OUT"/inductor-cache.txz.*; echo "inductor cache too large to return"; fi
fi
if [ -n "${PACK:-}" ]; then  # one archive: a call returns at most 8 files
  tar -C "$OUT" -czf /tmp/results.tgz . && find "$OUT" -mindepth 1 -delete && mv /tmp/results.tgz "$OUT/"
fi
