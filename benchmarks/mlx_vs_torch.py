"""Training (and encoding) speed of the torch and MLX backends on one config, data and device.

Each backend runs in its own process (no shared thread pools or allocator), builds its trainer
from the same TrainConfig through ``supergrep.train.loop.make_trainer``, takes ``--warmup``
steps (MLX compiles its step for each new shape; torch warms its allocator), then times
``--steps`` steps on the same batches, reading every loss back at the end (a device sync), and
reports samples/s, tokens/s, ms/step and peak memory. With ``--encode N`` it also times
``Encoder.encode_documents`` over N documents (what ``index`` does).

    python benchmarks/mlx_vs_torch.py --steps 10 --out benchmarks/results/mlx-vs-torch-cpu.json
    # MLX's Linux CPU wheel calls a reference BLAS; an optimised one can be preloaded:
    python benchmarks/mlx_vs_torch.py --mlx-blas /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0

The batches are real (docstring -> code) pairs mined from the Python standard library, or
``--train-file``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

STDLIB = ("textwrap", "shlex", "fnmatch", "glob", "csv", "difflib", "string", "heapq", "bisect", "calendar",
          "shutil", "tempfile", "gzip", "zipfile", "argparse", "ipaddress", "json/decoder", "pathlib")


def mine_stdlib(path: Path, n_max: int = 600) -> Path:
    """(docstring summary -> function without its docstring) pairs, as tests/train/conftest.py."""
    root = Path(sysconfig.get_paths()["stdlib"])
    rows = []
    for mod in STDLIB:
        f = root / f"{mod}.py"
        if not f.is_file():
            f = root / mod / "__init__.py"
        if not f.is_file():
            continue
        src = f.read_text(encoding="utf-8", errors="replace")
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc or len(doc.split()) < 4 or len(node.body) < 2:
                continue
            b0 = node.body[0]
            code = "\n".join(lines[node.lineno - 1 : b0.lineno - 1] + lines[b0.end_lineno : node.end_lineno])
            rows.append({"query": " ".join(doc.split("\n\n")[0].split()), "code": code, "path": f"{mod}.py",
                         "symbol": node.name, "language": "python", "split": "train"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:n_max]))
    return path


def worker(args: argparse.Namespace) -> dict:
    """One backend, in this process: build, warm up, time."""
    import numpy as np

    from supergrep.backends.adapters import LoRAConfig
    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.tokenize import RoleTokenizer
    from supergrep.train.config import load_train_config
    from supergrep.train.data import bucket_batches, cached_tokens, collate
    from supergrep.train.loop import make_trainer, training_spec

    if args.backend == "torch" and args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = load_train_config(None, dict(
        model_path=args.model_path, train_file=args.train_file, backend=args.backend, device=args.device,
        batch_size=args.batch_size, document_max_tokens=args.document_max_tokens,
        query_max_tokens=args.query_max_tokens, precision=args.precision, max_steps=args.steps,
        cached_contrastive=args.cached, mini_batch_size=args.mini_batch_size, lora_r=args.lora_r))
    spec = training_spec(cfg)
    tok = RoleTokenizer(spec)
    cache = cached_tokens(load_pairs(cfg.train_file, split="train"), None, spec, tok, "bench")
    plan = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, cfg.seed, 0)
    n = args.warmup + args.steps
    batches = [collate(cache, plan[i % len(plan)], tok, 0, False, cfg.pad_multiple) for i in range(n)]
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    t0 = time.perf_counter()
    trainer = make_trainer(cfg, spec, lora)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = [trainer.train_step(b, cfg.lr)[0] for b in batches[: args.warmup]]
    trainer.to_host(warm)  # sync
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    losses = [trainer.train_step(b, cfg.lr)[0] for b in batches[args.warmup :]]
    losses = trainer.to_host(losses)  # one sync for the timed window
    dt = time.perf_counter() - t0
    timed = batches[args.warmup :]
    out = {
        "backend": args.backend, "device": str(getattr(trainer, "device", args.device)),
        "steps": args.steps, "warmup_steps": args.warmup, "build_s": round(build_s, 2), "warmup_s": round(warm_s, 2),
        "seconds": round(dt, 3), "ms_per_step": round(1000 * dt / args.steps, 1),
        "samples_per_s": round(sum(b.q_ids.shape[0] for b in timed) / dt, 2),
        "tokens_per_s": round(sum(b.n_tokens for b in timed) / dt, 1),
        "padded_tokens_per_step": int(np.mean([b.q_ids.size + b.d_ids.size for b in timed])),
        "first_losses": [round(x, 5) for x in losses[:3]], **trainer.memory(),
    }
    if args.encode:
        from supergrep.encoder import Encoder

        docs = [p.document() for p in load_pairs(cfg.train_file, split="train")][: args.encode]
        enc = Encoder(spec, backend=args.backend, device=args.device, threads=args.threads)
        enc.encode_documents(docs[:16])  # warm-up
        t0 = time.perf_counter()
        mats = enc.encode_documents(docs)
        de = time.perf_counter() - t0
        out.update(encode_docs=len(docs), encode_tokens_per_s=round(sum(len(m) for m in mats) / de, 1),
                   encode_docs_per_s=round(len(docs) / de, 2))
    return out


def environment() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        env["cpu"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        env["cpu"] = platform.processor()
    for mod in ("torch", "mlx.core", "transformers"):
        try:
            env[mod.split(".")[0]] = __import__(mod, fromlist=["__version__"]).__version__
        except ImportError:
            env[mod.split(".")[0]] = None
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default="", help="Base model (default: all-MiniLM-L6-v2).")
    ap.add_argument("--train-file", default="", help="Pairs (default: mined from the Python standard library).")
    ap.add_argument("--backends", default="torch,mlx")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--document-max-tokens", type=int, default=64)
    ap.add_argument("--query-max-tokens", type=int, default=24)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--cached", action="store_true", help="GradCache mode.")
    ap.add_argument("--mini-batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10, help="Timed steps.")
    ap.add_argument("--warmup", type=int, default=2, help="Untimed steps first (compilation, allocator).")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch; OPENBLAS_NUM_THREADS for a preloaded BLAS).")
    ap.add_argument("--encode", type=int, default=0, help="Also time encoding this many documents.")
    ap.add_argument("--mlx-blas", default="", help="Also run MLX with this BLAS library LD_PRELOADed.")
    ap.add_argument("--note", default="", help="Free text stored with the results.")
    ap.add_argument("--out", type=Path, help="Write the results (JSON) here.")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.backend = args.worker
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return
    if not args.train_file:
        args.train_file = str(mine_stdlib(Path(tempfile.mkdtemp()) / "pairs.jsonl"))
    runs = [(b, {}) for b in args.backends.split(",")]
    if args.mlx_blas:
        blas_dir = str(Path(args.mlx_blas).parent)
        runs.append(("mlx", {"LD_PRELOAD": args.mlx_blas,
                             "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [blas_dir, str(Path(blas_dir).parent),
                                                                             os.environ.get("LD_LIBRARY_PATH", "")])),
                             "OPENBLAS_NUM_THREADS": str(args.threads or os.cpu_count())}))
    results = []
    for backend, extra in runs:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--worker", backend, "--train-file", args.train_file]
        env = {**os.environ, **extra}
        if backend == "torch":
            env.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy's pool stays out of torch's way (as the CLI does)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if p.returncode != 0 or line is None:
            print(p.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{backend} run failed")
        res = json.loads(line[len("RESULT "):])
        res["blas"] = Path(extra["LD_PRELOAD"]).name if extra else ("bundled" if backend == "mlx" else "torch's own")
        results.append(res)
        print(json.dumps(res))
    report = {"benchmark": "mlx_vs_torch", "argv": sys.argv[1:], "note": args.note, "environment": environment(),
              "config": {k: v for k, v in vars(args).items() if k not in ("worker", "out", "train_file")},
              "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
