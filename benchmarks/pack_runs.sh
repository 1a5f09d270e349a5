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
