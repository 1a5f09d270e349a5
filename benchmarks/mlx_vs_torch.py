"""Training and encoding speed of the torch and MLX backends: one config, the same batches, one device.

Each backend runs in its own process (no shared thread pools or allocator) and builds its
trainer from the same TrainConfig through ``supergrep.train.loop.make_trainer``; it takes
``--warmup`` untimed steps (MLX traces/compiles its step once per new shape, torch warms its
allocator), then times ``--steps`` steps on the same batches, reading every loss back at the end
(a device sync; MLX also evaluates each step). Reported: samples/s, tokens/s, ms/step, peak
memory, and MLX's samples/s as a ratio of torch's measured in the same run. ``--rounds N``
repeats every configuration N times in alternating order (a shared machine's load drifts) and
reports each one's median.

Also measured, per process: one ``--matmul`` x ``--matmul`` fp32 matrix product in the
backend's framework (and NumPy's, in the driver). MLX's Linux CPU wheel (``mlx[cpu]``) calls
the reference BLAS it bundles (``mlx_cpu.libs/libblas-*.so.3.10``, single-threaded, unblocked);
``--mlx-blas LIB`` adds a run of MLX with an optimised BLAS preloaded (``LD_PRELOAD``), which
interposes ``cblas_sgemm`` (the symbol libmlx.so imports). Debian's OpenBLAS works:

    apt-get download libopenblas0-pthread libgfortran5 && for f in *.deb; do dpkg -x $f .cache/openblas; done
    python benchmarks/mlx_vs_torch.py --rounds 2 --encode 64 \\
        --mlx-blas .cache/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        --out benchmarks/results/mlx-vs-torch-cpu-2core.json

(pip's ``scipy-openblas32/64`` do not interpose: their symbols are renamed, ``scipy_cblas_sgemm``.)

On an NVIDIA machine with ``mlx[cuda13]`` (see ``benchmarks/gpu_mlx.sh``):

    python benchmarks/mlx_vs_torch.py --device cuda --precision bf16 --random-model bert-base \\
        --batch-size 32 --document-max-tokens 256 --query-max-tokens 32 --out $OUT/mlx-vs-torch-gpu.json

The model is ``--model-path`` (default: all-MiniLM-L6-v2 when its package is installed) or
``--random-model minilm|bert-base``: a randomly initialised BERT of that shape with a WordPiece
vocabulary of the data's words, built offline (speed does not depend on the weights). The
batches are real (docstring -> code) pairs mined from the Python standard library, or
``--train-file``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

STDLIB = ("textwrap", "shlex", "fnmatch", "glob", "csv", "difflib", "string", "heapq", "bisect", "calendar",
          "shutil", "tempfile", "gzip", "zipfile", "argparse", "ipaddress", "json/decoder", "pathlib")
# BERT shapes for --random-model: (hidden, layers, heads, intermediate)
SHAPES = {"minilm": (384, 6, 12, 1536), "bert-base": (768, 12, 12, 3072)}


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


def random_bert(path: Path, shape: str, train_file: Path, vocab_size: int = 8000) -> Path:
    """A randomly initialised BERT of ``SHAPES[shape]`` whose WordPiece vocabulary is the data's
    most frequent words plus single characters (realistic token counts, no download)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    words: collections.Counter = collections.Counter()
    for line in train_file.read_text().splitlines():
        row = json.loads(line)
        words.update(re.findall(r"[a-z]+|\d+", (row["query"] + " " + row["code"]).lower()))
    chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks = specials + chars + ["##" + c for c in chars] + [w for w, _ in words.most_common(vocab_size)]
    vocab = dict.fromkeys(toks)
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("".join(t + "\n" for t in vocab))
    tok = BertTokenizer(str(path / "vocab.txt"))
    hidden, layers, heads, inter = SHAPES[shape]
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=inter, max_position_embeddings=512)
    BertModel(cfg).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def time_matmul(backend: str, device: str, n: int, reps: int = 10) -> dict:
    """One n x n fp32 product in ``backend``'s framework on ``device`` (ms, GFLOP/s)."""
    if backend == "numpy":
        import numpy as np

        a, b = (np.random.default_rng(i).standard_normal((n, n), dtype=np.float32) for i in (0, 1))
        run = lambda: a @ b  # noqa: E731
    elif backend == "torch":
        import torch

        dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

        def run():
            c = a @ b
            sync()
            return c
    else:
        import mlx.core as mx

        a, b = mx.random.normal((n, n)), mx.random.normal((n, n))
        mx.eval(a, b)

        def run():
            c = a @ b
            mx.eval(c)
            return c
    for _ in range(3):
        run()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    dt = (time.perf_counter() - t0) / reps
    return {"n": n, "ms": round(1000 * dt, 3), "gflops": round(2 * n**3 / dt / 1e9, 2)}


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
        cached_contrastive=args.cached, mini_batch_size=args.mini_batch_size, lora_r=args.lora_r,
        distill_weight=args.distill_weight, compile=args.torch_compile))
    spec = training_spec(cfg)
    tok = RoleTokenizer(spec)
    cache = cached_tokens(load_pairs(cfg.train_file, split="train"), None, spec, tok, "bench")
    plan = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, cfg.seed, 0)
    n = args.warmup + args.steps
    batches = [collate(cache, plan[i % len(plan)], tok, 0, False, cfg.pad_multiple) for i in range(n)]
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    out: dict = {"backend": args.backend, "load_before": round(os.getloadavg()[0], 2)}
    if args.matmul:
        out["matmul"] = time_matmul(args.backend, args.device, args.matmul)
    t0 = time.perf_counter()
    trainer = make_trainer(cfg, spec, lora)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # The warm-up covers every batch shape the timed window will see (MLX traces per shape).
    shapes = {}
    for b in batches[args.warmup :]:
        shapes.setdefault((b.q_ids.shape, b.d_ids.shape), b)
    warm = [trainer.train_step(b, cfg.lr)[0] for b in [*batches[: args.warmup], *shapes.values()]]
    trainer.to_host(warm)  # sync
    warm_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    losses = [trainer.train_step(b, cfg.lr)[0] for b in batches[args.warmup :]]
    losses = trainer.to_host(losses)  # one sync for the timed window
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    timed = batches[args.warmup :]
    out.update({
        "device": str(getattr(trainer, "device", args.device)), "steps": args.steps,
        "warmup_steps": len(warm), "build_s": round(build_s, 2), "warmup_s": round(warm_s, 2),
        "seconds": round(dt, 3), "ms_per_step": round(1000 * dt / args.steps, 1),
        "samples_per_s": round(sum(b.q_ids.shape[0] for b in timed) / dt, 2),
        # CPU seconds of every thread of this process: on a shared machine, less disturbed by
        # other jobs than wall time (which counts the time the scheduler gave them).
        "cpu_s": round(cpu, 3), "samples_per_cpu_s": round(sum(b.q_ids.shape[0] for b in timed) / cpu, 3),
        "tokens_per_s": round(sum(b.n_tokens for b in timed) / dt, 1),
        "padded_tokens_per_step": int(np.mean([b.q_ids.size + b.d_ids.size for b in timed])),
        "losses_finite": bool(np.isfinite(losses).all()), **trainer.memory(),
    })
    if args.encode:
        from supergrep.encoder import Encoder

        del trainer
        docs = [p.document() for p in load_pairs(cfg.train_file, split="train")][: args.encode]
        enc = Encoder(spec, backend=args.backend, device=args.device, threads=args.threads)
        enc.encode_documents(docs)  # warm-up (and MLX's traces, on a GPU)
        t0 = time.perf_counter()
        mats = enc.encode_documents(docs)
        de = time.perf_counter() - t0
        out.update(encode_docs=len(docs), encode_tokens_per_s=round(sum(len(m) for m in mats) / de, 1),
                   encode_docs_per_s=round(len(docs) / de, 2))
    out["load_after"] = round(os.getloadavg()[0], 2)
    return out


def environment(device: str) -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d")}
    try:
        env["cpu"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        env["cpu"] = platform.processor()
    for mod in ("torch", "mlx.core", "transformers", "numpy"):
        try:
            env[mod.split(".")[0]] = __import__(mod, fromlist=["__version__"]).__version__
        except ImportError:
            env[mod.split(".")[0]] = None
    if device.startswith("cuda"):
        try:
            import torch

            env["gpu"] = torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001 - informational only
            pass
    return env


def run_config(args: argparse.Namespace, backend: str, extra: dict) -> dict:
    cmd = [sys.executable, __file__, *sys.argv[1:], "--worker", backend, "--train-file", args.train_file,
           "--model-path", args.model_path]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **extra}  # as the CLI sets it
    if backend == "torch":
        env.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy's pool stays out of torch's way (as the CLI does)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        print(p.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{backend} run failed")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default="", help="Base model (default: all-MiniLM-L6-v2).")
    ap.add_argument("--random-model", choices=sorted(SHAPES), help="A random BERT of this shape instead.")
    ap.add_argument("--train-file", default="", help="Pairs (default: mined from the Python standard library).")
    ap.add_argument("--backends", default="torch,mlx")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"])
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--document-max-tokens", type=int, default=128)
    ap.add_argument("--query-max-tokens", type=int, default=32)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--cached", action="store_true", help="GradCache mode.")
    ap.add_argument("--mini-batch-size", type=int, default=16)
    ap.add_argument("--distill-weight", type=float, default=0.0)
    ap.add_argument("--torch-compile", action="store_true", help="torch.compile the torch encoder (MLX always compiles).")
    ap.add_argument("--steps", type=int, default=8, help="Timed steps.")
    ap.add_argument("--warmup", type=int, default=2, help="Untimed steps first (plus one per new batch shape).")
    ap.add_argument("--rounds", type=int, default=1, help="Run every configuration this many times (order alternating).")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch; OPENBLAS_NUM_THREADS for a preloaded BLAS).")
    ap.add_argument("--matmul", type=int, default=768, help="Also time an N x N fp32 matmul per backend (0: off).")
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
    tmp = Path(tempfile.mkdtemp(prefix="mlx-bench-"))
    if not args.train_file:
        args.train_file = str(mine_stdlib(tmp / "pairs.jsonl"))
    if args.random_model:
        args.model_path = str(random_bert(tmp / args.random_model, args.random_model, Path(args.train_file)))
    if not args.model_path:
        from supergrep.encoder.spec import default_model_dir

        args.model_path = str(default_model_dir())
    configs = [(b, b, {}) for b in args.backends.split(",")]
    if args.mlx_blas:
        blas = Path(args.mlx_blas).resolve()
        if not blas.is_file():
            raise SystemExit(f"--mlx-blas: {blas} does not exist")
        dirs = [str(blas.parent), str(blas.parent.parent), os.environ.get("LD_LIBRARY_PATH", "")]
        configs.append(("mlx+" + blas.name, "mlx", {
            "LD_PRELOAD": str(blas), "LD_LIBRARY_PATH": os.pathsep.join(filter(None, dirs)),
            "OPENBLAS_NUM_THREADS": str(args.threads or os.cpu_count())}))
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in configs}
    for r in range(args.rounds):
        for name, backend, extra in (configs if r % 2 == 0 else configs[::-1]):
            res = run_config(args, backend, extra)
            res["blas"] = Path(extra["LD_PRELOAD"]).name if extra else ("bundled" if backend == "mlx" else "torch's own")
            runs[name].append(res)
            print(name, json.dumps(res), flush=True)
    summary = {}
    for name, rs in runs.items():
        summary[name] = {k: statistics.median(r[k] for r in rs) for k in
                         ("samples_per_s", "samples_per_cpu_s", "tokens_per_s", "ms_per_step", "encode_docs_per_s") if k in rs[0]}
        if "matmul" in rs[0]:
            summary[name]["matmul_ms"] = statistics.median(r["matmul"]["ms"] for r in rs)
    base = summary.get("torch", {})
    for s in summary.values():
        for k in ("samples_per_s", "samples_per_cpu_s", "encode_docs_per_s"):
            if base.get(k) and k in s:
                s[f"{k}_vs_torch"] = round(s[k] / base[k], 3)
    if args.matmul:
        summary["numpy"] = {"matmul_ms": time_matmul("numpy", "cpu", args.matmul)["ms"]}
    report = {"benchmark": "mlx_vs_torch", "argv": sys.argv[1:], "note": args.note,
              "environment": environment(args.device),
              "config": {k: v for k, v in vars(args).items() if k not in ("worker", "out", "train_file", "backend")},
              "summary_median": summary, "runs": runs}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
