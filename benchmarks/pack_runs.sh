# Sourced by the GPU training scripts. pack_runs RUNS_DIR OUT: one $OUT/run-<name>.tgz per run
# (every checkpoint's adapter + projection + model/run JSON, ~3.3 MB each for MiniLM, and the
# run's metrics.jsonl / loss.png), since the device returns files of at most 16 MiB;
# pack_logs OUT FILES...: the given log files as $OUT/logs.tgz.
pack_runs() {
  local runs=$1 out=$2 r n ck
  rm -rf /tmp/pack; mkdir -p /tmp/pack
  for r in "$runs"/*; do
    [ -d "$r" ] || continue
    n=$(basename "$r"); mkdir -p /tmp/pack/$n
    for ck in "$r"/step_*; do
      [ -d "$ck" ] || continue
      mkdir -p /tmp/pack/$n/${ck##*/}
      cp -r "$ck"/{adapter_config.json,adapter_model.safetensors,projection,supergrep_model.json,run_config.json} \
        /tmp/pack/$n/${ck##*/}/ 2>/dev/null
    done
    cp "$r"/metrics.jsonl "$r"/loss.png /tmp/pack/$n/ 2>/dev/null
    tar -C /tmp/pack -czf "$out/run-$n.tgz" "$n"
  done
}

pack_logs() {
  local out=$1; shift
  mkdir -p /tmp/pack/logs
  cp "$@" /tmp/pack/logs/ 2>/dev/null
  tar -C /tmp/pack -czf "$out/logs.tgz" logs
}

# train_runs COMMON CAP_S W: every "NAME FLAGS..." line of $RUNS as `supergrep train $COMMON
# --output-dir W/runs/NAME FLAGS` at the same time on the GPU (later flags override COMMON), each
# capped at CAP_S seconds; W/NAME.json and .err per run, W/rc.txt the exit codes, one
# utilisation sample after 60 s.
train_runs() {
  local common=$1 cap=$2 w=$3 name flags t0
  t0=$(date +%s)
  while read -r name flags; do
    [ -z "$name" ] && continue
    # shellcheck disable=SC2086
    ( timeout "$cap" python3 -m supergrep train $common --output-dir "$w/runs/$name" $flags > "$w/$name.json" 2> "$w/$name.err"
      echo "$name rc=$? after $(( $(date +%s) - t0 )) s" >> "$w/rc.txt" ) &
  done <<< "$RUNS"
  sleep 60; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | tee -a "$w/gpu.txt"
  wait
  cat "$w/rc.txt"
}
