"""Which part of the training step crashes under CUDA graphs (compile mode reduce-overhead)?

torch 2.11 on the H100 segfaults inside the compiled backward's generated ``call`` when the step
runs under CUDA graphs (sixth session: MiniLM, padded; twenty-second: xtr-base, varlen + packing +
fp8 + static_shapes). This bisects it: a 2-layer T5 in xtr-base's widths (~100 s to compile on
a fresh machine, less once Inductor's cache is warm), one `bench train` process per configuration
(a segfault ends only that one), and for a crash the Inductor file and line the faulthandler
stack names, copied out with the lines before it, so the failing call is read rather than
guessed. (It found the cause: the loss's Python floats passed as 0-d CPU tensors, fixed by
``torch_compile.compile_dynamic``; ``benchmarks/results/cudagraphs-2026-11-28/``.)

    python3 benchmarks/cudagraph_probe.py --model-path .gpu/tok --out /tmp/out/cg \
        --config "bf16+cudagraphs" --config "bf16+compile" ...

A configuration may end in ``@static`` (torch.compile with dynamic=False instead of True: one graph
per shape) or ``@notrees`` (Inductor's older cudagraphify, not cudagraph trees), both patched in
the child process only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, torch
mods = sys.argv[1].split(",") if sys.argv[1] else []
if "static" in mods:
    _compile = torch.compile
    def compile_static(*a, **k):
        k["dynamic"] = False
        return _compile(*a, **k)
    torch.compile = compile_static
if "notrees" in mods:
    import torch._inductor.config as ic
    ic.triton.cudagraph_trees = False
from supergrep.launcher import main
main(sys.argv[2:])
"""


def inductor_site(log: str) -> tuple[str, int] | None:
    """The last generated file + line of the crashing thread's stack (faulthandler prints the
    current thread first; its innermost frame is the generated ``call``)."""
    m = re.search(r"Current thread[^\n]*\n\s+File \"([^\"]+torchinductor[^\"]+\.py)\", line (\d+)", log)
    return (m.group(1), int(m.group(2))) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-path", required=True, help="a folder with tokenizer files (e.g. .gpu/tok)")
    ap.add_argument("--config", action="append", required=True, help="a bench variant, optionally @static / @notrees")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=6)
    # a 2-layer model's first compile on a fresh machine takes ~80-100 s (Triton compiling the
    # kernels, not the layers): a 75 s cap timed out every configuration once
    ap.add_argument("--cap", type=int, default=240, help="seconds per configuration")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    from supergrep.bench.workloads import make_t5_encoder

    args.out.mkdir(parents=True, exist_ok=True)
    model = make_t5_encoder(args.out.parent / f"t5-{args.layers}l", layers=args.layers,
                            tokenizer_from=Path(args.model_path))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONFAULTHANDLER": "1",
           "TORCH_LOGS": os.environ.get("TORCH_LOGS", "perf_hints")}
    rows = []
    for i, spec in enumerate(args.config):
        variant, _, mods = spec.partition("@")
        log_path = args.out / f"{i}.log"
        cmd = [sys.executable, "-c", CHILD, mods, "bench", "train", "-w", str(model), "--variants", variant,
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--out", str(args.out / f"{i}")]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=args.cap)
            rc, log = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, log = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log_path.write_text(log)
        row = {"config": spec, "rc": rc, "s": round(time.perf_counter() - t0, 1),
               "skips": sorted(set(re.findall(r"skipping cudagraphs due to ([^\n]+)", log)))}
        for js in (args.out / f"{i}").glob("train-*.json"):
            r0 = json.loads(js.read_text())["rows"][0]
            row.update(samples_per_s=r0.get("samples_per_s"), loss=[r0.get("loss_first"), r0.get("loss_last")],
                       error=r0.get("error"))
        site = inductor_site(log) if rc != 0 else None
        if site and Path(site[0]).is_file():
            dst = args.out / f"{i}-graph.py"
            shutil.copy(site[0], dst)
            lines = dst.read_text().splitlines()
            row["site"] = {"file": dst.name, "line": site[1],
                           "context": lines[max(0, site[1] - 25): site[1] + 2]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "site"}), flush=True)
        if "site" in row:
            print(f"  crash at {row['site']['file']}:{site[1]}")
            for line in row["site"]["context"]:
                print("   |", line[:220])
    (args.out / "probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
