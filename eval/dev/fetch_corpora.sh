#!/usr/bin/env bash
# Download and unpack the development set's corpora (sdists from PyPI) into DIR.
# usage: fetch_corpora.sh DIR      -> DIR/joblib-1.6.0 (holds joblib/), DIR/attrs-26.1.0/src (holds attr/)
set -euo pipefail
dir=${1:?usage: fetch_corpora.sh DIR}
mkdir -p "$dir"
for req in joblib==1.6.0 attrs==26.1.0; do
  name=${req%%==*}; ver=${req##*==}
  [ -d "$dir/$name-$ver" ] && continue
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$dir" "$req"
  tar -xzf "$dir/$name-$ver.tar.gz" -C "$dir"
done
echo "corpora ready: $dir/joblib-1.6.0 $dir/attrs-26.1.0/src"
