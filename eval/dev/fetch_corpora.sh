#!/usr/bin/env bash
# Download and unpack the development set's corpora (sdists from PyPI) into DIR.
# usage: fetch_corpora.sh DIR      -> corpus roots (each holds the package dir):
#   DIR/joblib-1.6.0 (joblib/)
#   DIR/toolz-1.2.0 (toolz/)          DIR/tomlkit-0.15.2 (tomlkit/)
#   DIR/marshmallow-4.4.0/src (marshmallow/)
set -euo pipefail
dir=${1:?usage: fetch_corpora.sh DIR}
mkdir -p "$dir"
for req in joblib==1.6.0 toolz==1.2.0 tomlkit==0.15.2 marshmallow==4.4.0; do
  name=${req%%==*}; ver=${req##*==}
  [ -d "$dir/$name-$ver" ] && continue
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$dir" "$req"
  tar -xzf "$dir/$name-$ver.tar.gz" -C "$dir"
done
echo "corpora ready: $dir/joblib-1.6.0 $dir/toolz-1.2.0 $dir/tomlkit-0.15.2 $dir/marshmallow-4.4.0/src"
