#!/bin/bash
# The compressed store's C kernels (src/supergrep/index/_kernels.c) on the GPU machine's host CPU:
# another x86 generation than the 2-core development VM, possibly with AVX-512 VNNI (the
# kernels' VNNI path; onnxruntime's MatMulInteger uses VNNI there too, so the NumPy path is
# stronger). Builds the extension with the host's python3, runs the kernel tests (SIMD path vs
# the portable one, bit for bit), builds a 100K-chunk synthetic index with every core, then
# times `bench search` on two cores (taskset), kernels on / off alternated.
#
#   device run, carry .whl (faiss-cpu for the host's Python):  bash benchmarks/kernels_host.sh
set -u
OUTD=${OUT:-/tmp/kernels-host}
R=$OUTD/r
mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1
{ lscpu; nproc; python3 --version; } > "$R/lscpu.txt" 2>&1
python3 setup.py -q build_ext --inplace > "$R/build.log" 2>&1 || { echo "build failed"; cat "$R/build.log"; }
python3 -c "from supergrep.index import native; print('kernels:', native.simd())" | tee "$OUTD/log.txt"
SUPERGREP_REQUIRE_NATIVE=1 python3 -m pytest -q -p no:cacheprovider tests/index/test_native_kernels.py 2>&1 | tail -3 | tee -a "$OUTD/log.txt"
python3 -m supergrep bench search --sizes 100000 --keep --work-dir /tmp/bs --queries 20 --exact-queries 5 \
    --out "$R/build.json" 2>&1 | grep -E "chunks|rror" | tee -a "$OUTD/log.txt"
for r in 1 2 3; do
  for n in 1 0; do
    SUPERGREP_NATIVE=$n taskset -c 0,1 python3 -m supergrep bench search --sizes 100000 --reuse --keep \
        --work-dir /tmp/bs --exact-queries 0 --out "$R/100k-native$n-r$r.json" 2>&1 | grep "chunks: p50" \
        | sed "s/^/native=$n round $r: /" | tee -a "$OUTD/log.txt"
  done
done
tar -C "$OUTD" -czf "$OUTD/kernels-host.tar.gz" r && rm -rf "$R"
