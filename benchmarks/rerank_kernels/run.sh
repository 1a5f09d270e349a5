#!/bin/bash
# The nibble re-rank kernel on the GPU machine's host CPU (AVX-512 VNNI): this tree's build against
# an earlier one, bit for bit and ns a token on one core, and the kernel tests on the VNNI path.
#
#   git show d67ed8d:src/supergrep/index/_kernels.c > benchmarks/rerank_kernels/_kernels_prev.c
#   device run, carry .whl (faiss-cpu for the host's Python):  bash benchmarks/rerank_kernels/run.sh
set -u
OUTD=${OUT:-/tmp/rerank-kernels}
mkdir -p "$OUTD"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1
{ lscpu; nproc; python3 --version; gcc --version | head -1; } > "$OUTD/lscpu.txt" 2>&1
python3 setup.py -q build_ext --inplace > "$OUTD/build.log" 2>&1 || { echo "build failed"; cat "$OUTD/build.log"; }
INC=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
mkdir -p /tmp/prev
gcc -O3 -ffp-contract=off -std=c11 -shared -fPIC -I"$INC" benchmarks/rerank_kernels/_kernels_prev.c \
    -o /tmp/prev/_kernels_prev.so || exit 1
python3 -c "from supergrep.index import native; print('kernels:', native.simd())" | tee "$OUTD/log.txt"
SUPERGREP_REQUIRE_NATIVE=1 python3 -m pytest -q -p no:cacheprovider tests/index/test_native_kernels.py 2>&1 \
    | tail -3 | tee -a "$OUTD/log.txt"
NEW=$(ls src/supergrep/index/_kernels*.so)
for r in 1 2; do
  taskset -c 0 python3 benchmarks/rerank_kernels/bench.py "$NEW" /tmp/prev/_kernels_prev.so > "$OUTD/bench-$r.json"
done
grep -h -E '"simd"|ns_per_token|identical' "$OUTD"/bench-*.json | tee -a "$OUTD/log.txt"
