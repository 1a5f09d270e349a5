#!/usr/bin/env bash
# Build the multi-language mining corpus under .cache/corpus/ and mine it into pairs.jsonl.
#
#   make corpus                                  # = bash scripts/corpus/build_corpus.sh
#   STAGES="rust go" bash scripts/corpus/build_corpus.sh   # only some sources (then mine)
#   STAGES=mine bash scripts/corpus/build_corpus.sh        # re-mine what is already there
#
# Sources (each stage is idempotent: a finished stage leaves .cache/corpus/.<stage>.done):
#   python  symbolic links to the stdlib and site-packages of every interpreter found
#           ($PYTHON, python3 on PATH, /usr/bin/python3); mined in place, nothing copied
#   rust    the $RUST_CRATES (800) most depended-on Debian librust-*-dev packages (crate sources)
#   go      the $GO_MODULES most depended-on Debian golang-*-dev packages (module sources)
#   npm     `npm pack` tarballs of the packages in scripts/corpus/npm-packages.txt
#   java    OpenJDK 17's src.zip (openjdk-17-source) and OpenJFX's (openjfx-source)
#   c       a subset of the Linux kernel (linux-source-6.1: core, mm, lib, fs, net, ...)
#   cpp     C++ headers with doc comments: LLVM/Clang 15, Abseil, Eigen, OpenCV, protobuf, nlohmann-json
# Debian packages come from `apt-get download` + `dpkg -x` (no root-level install); the
# selection reads only the local apt lists (scripts/corpus/select_debs.py).
# Not available here: Swift and Lean sources (no Debian/npm package ships them), C/C++ source
# packages (no deb-src lines, so `apt-get source` does not work).
#
# Environment: CORPUS (.cache/corpus), PYTHON (.venv/bin/python), SUPERGREP ("$PYTHON -m
# supergrep"), JOBS (nproc), OUT ($CORPUS/pairs.jsonl), STAGES, RUST_CRATES (800),
# GO_MODULES (300), MINE_ARGS (extra `supergrep mine` flags).
set -euo pipefail
cd "$(dirname "$0")/../.."

CORPUS=${CORPUS:-.cache/corpus}
PYTHON=${PYTHON:-.venv/bin/python}
SUPERGREP=${SUPERGREP:-"$PYTHON -m supergrep"}
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-$CORPUS/pairs.jsonl}
STAGES=${STAGES:-"python rust go npm java c cpp mine"}
RUST_CRATES=${RUST_CRATES:-800}
GO_MODULES=${GO_MODULES:-300}
MINE_ARGS=${MINE_ARGS:-}
DL=$CORPUS/_downloads
HERE=scripts/corpus

mkdir -p "$CORPUS" "$DL"
CORPUS=$(cd "$CORPUS" && pwd)
DL=$CORPUS/_downloads
T0=$SECONDS

log() { echo "corpus: $*" >&2; }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
finished() { [ -e "$CORPUS/.$1.done" ]; }
finish() { touch "$CORPUS/.$1.done"; log "$1 done ($(du -sh "$CORPUS/$1" 2>/dev/null | cut -f1) on disk, $((SECONDS - T0)) s so far)"; }

# apt-get download PACKAGES into $DL/debs/$1 (batches; a failed batch is retried one by one,
# and a package that still fails is reported and skipped).
download_debs() {
    local dir=$DL/debs/$1; shift
    mkdir -p "$dir"
    printf '%s\n' "$@" | (cd "$dir" && xargs -n 40 sh -c 'apt-get download -q "$@" 2>/dev/null || for p in "$@"; do apt-get download -q "$p" 2>/dev/null || echo "corpus: could not download $p" >&2; done' sh) >/dev/null
}

stage_python() {
    local dest=$CORPUS/python py
    mkdir -p "$dest"
    # every interpreter's stdlib and site directories, one link per outermost real directory
    # (a base interpreter's stdlib holds its own site-packages)
    for py in "$PYTHON" "$(command -v python3 || true)" /usr/bin/python3; do
        [ -n "$py" ] && [ -x "$py" ] || continue
        "$py" -c 'import site, sysconfig
p = sysconfig.get_paths()
print(p["stdlib"]); print(p["purelib"])
for d in getattr(site, "getsitepackages", list)(): print(d)'
    done | "$PYTHON" -c 'import os, re, sys
dirs = sorted({os.path.realpath(d.strip()) for d in sys.stdin if os.path.isdir(d.strip())})
for d in dirs:
    if not any(o != d and d.startswith(o + os.sep) for o in dirs):
        print(re.sub(r"[^\w.-]+", "_", d.strip("/")), d)' | while read -r name dir; do
        ln -sfn "$dir" "$dest/$name"
    done
    ls -l "$dest" >&2
}

stage_rust() {
    mapfile -t pkgs < <("$PYTHON" $HERE/select_debs.py rust "$RUST_CRATES")
    log "rust: ${#pkgs[@]} crates"
    download_debs rust "${pkgs[@]}"
    mkdir -p "$CORPUS/rust"
    for deb in "$DL"/debs/rust/*.deb; do dpkg -x "$deb" "$CORPUS/rust"; done
}

stage_go() {
    mapfile -t pkgs < <("$PYTHON" $HERE/select_debs.py go "$GO_MODULES")
    log "go: ${#pkgs[@]} modules"
    download_debs go "${pkgs[@]}"
    mkdir -p "$CORPUS/go"
    for deb in "$DL"/debs/go/*.deb; do dpkg -x "$deb" "$CORPUS/go"; done
}

stage_npm() {
    local dest=$CORPUS/npm dir=$DL/npm
    mkdir -p "$dest" "$dir"
    local name tgz slug
    grep -v '^\s*\(#\|$\)' $HERE/npm-packages.txt | while read -r name; do
        slug=${name//\//__}
        [ -d "$dest/$slug" ] && continue
        tgz=$(cd "$dir" && npm pack --silent "$name" 2>/dev/null | tail -1) || true
        if [ -z "$tgz" ] || [ ! -f "$dir/$tgz" ]; then log "npm: could not fetch $name"; continue; fi
        mkdir -p "$dest/$slug"
        tar -xzf "$dir/$tgz" -C "$dest/$slug" --strip-components=1 --no-same-owner
    done
}

stage_java() {
    download_debs java openjdk-17-source openjfx-source
    local tmp=$DL/java-x
    rm -rf "$tmp" && mkdir -p "$tmp" "$CORPUS/java"
    for deb in "$DL"/debs/java/*.deb; do dpkg -x "$deb" "$tmp"; done
    local zip
    zip=$(find "$tmp" -path '*openjdk*' -name src.zip | head -1)
    [ -n "$zip" ] && (mkdir -p "$CORPUS/java/jdk17" && cd "$CORPUS/java/jdk17" && unzip -q -o "$zip" '*.java')
    zip=$(find "$tmp" -path '*openjfx*' -name src.zip | head -1)
    [ -n "$zip" ] && (mkdir -p "$CORPUS/java/openjfx" && cd "$CORPUS/java/openjfx" && unzip -q -o "$zip" '*.java')
    rm -rf "$tmp"
}

stage_c() {
    download_debs c linux-source-6.1
    local tmp=$DL/c-x
    rm -rf "$tmp" && mkdir -p "$tmp" "$CORPUS/c"
    dpkg -x "$DL"/debs/c/linux-source-6.1_*.deb "$tmp"
    local tarball
    tarball=$(find "$tmp" -name 'linux-source-6.1.tar.xz' | head -1)
    # The kernel's core: scheduler, memory, libraries, block layer, IPC, crypto, networking
    # core and IPv4, the VFS and two file systems (the drivers tree is left out: it is huge).
    tar -xJf "$tarball" -C "$CORPUS/c" --no-same-owner --wildcards --no-wildcards-match-slash \
        linux-source-6.1/kernel linux-source-6.1/mm linux-source-6.1/lib linux-source-6.1/block \
        linux-source-6.1/ipc linux-source-6.1/init linux-source-6.1/crypto linux-source-6.1/security \
        linux-source-6.1/net/core linux-source-6.1/net/ipv4 linux-source-6.1/fs/ext4 linux-source-6.1/fs/btrfs \
        'linux-source-6.1/fs/*.c'
    rm -rf "$tmp"
}

stage_cpp() {
    local pkgs=(llvm-15-dev libclang-15-dev libabsl-dev libeigen3-dev libopencv-core-dev libprotobuf-dev nlohmann-json3-dev)
    download_debs cpp "${pkgs[@]}"
    local tmp=$DL/cpp-x deb name inc
    mkdir -p "$CORPUS/cpp"
    for deb in "$DL"/debs/cpp/*.deb; do
        name=$(dpkg-deb -f "$deb" Package)
        rm -rf "$tmp" && mkdir -p "$tmp"
        dpkg -x "$deb" "$tmp"
        # headers only (the static libraries in these packages are most of their size)
        while read -r inc; do
            mkdir -p "$CORPUS/cpp/$name"
            cp -a "$inc/." "$CORPUS/cpp/$name/"
        done < <(find "$tmp" -type d -name include -not -path '*/include/*')
    done
    rm -rf "$tmp"
}

# What a stage needs on this machine; a stage whose tools are missing is reported and skipped.
needs() {
    case $1 in
        python) echo "$PYTHON" ;;
        npm) echo "npm tar" ;;
        rust|go|java|c|cpp) echo "apt-get apt-cache dpkg dpkg-deb tar unzip" ;;
    esac
}

for stage in python rust go npm java c cpp; do
    has_stage "$stage" || continue
    if finished "$stage"; then log "$stage already there (rm $CORPUS/.$stage.done to redo)"; continue; fi
    missing=""
    for tool in $(needs "$stage"); do command -v "$tool" >/dev/null || missing="$missing $tool"; done
    if [ -n "$missing" ]; then log "$stage skipped: not installed:$missing"; continue; fi
    if [[ " rust go java c cpp " == *" $stage "* ]] && [ -z "$(apt-cache pkgnames librust- 2>/dev/null | head -1)" ]; then
        log "$stage skipped: the apt package lists are empty (run apt-get update once)"; continue
    fi
    log "$stage ..."
    "stage_$stage"
    finish "$stage"
done

if has_stage mine; then
    roots=()
    for r in "$CORPUS"/python/* "$CORPUS/rust/usr/share/cargo/registry" "$CORPUS/go/usr/share/gocode/src" \
             "$CORPUS/npm" "$CORPUS"/java/* "$CORPUS"/c/* "$CORPUS/cpp"; do
        [ -e "$r" ] && roots+=("$r")
    done
    log "mining ${#roots[@]} roots into $OUT"
    # shellcheck disable=SC2086
    $SUPERGREP mine "${roots[@]}" -o "$OUT" --split-by package -j "$JOBS" $MINE_ARGS
fi
log "total $((SECONDS - T0)) s; corpus $(du -sh --exclude=_downloads "$CORPUS" | cut -f1), downloads $(du -sh "$DL" | cut -f1)"
