"""Deployment forms of the default model side by side: size, index lines/s, query latency, quality.

Usage (after `make eval` fetched the public corpora):
    python benchmarks/deployment.py --root .cache/eval-corpora/jinja2-3.1.4/src -t python \
        --rounds 3 --out benchmarks/results/deployment-cpu-2core.json [--eval]

Builds every form of the default model (all-MiniLM-L6-v2) once into --workdir with the CLI's own
code (`supergrep quantize`, `supergrep export onnx`), then, in ONE process and interleaved
round by round (so a noisy neighbour slows every form alike and the torch fp32 baseline is
measured in the same run):

- index throughput: a full build of --root from scratch per form and round (lines/s as
  `supergrep index` prints it); the median over rounds is reported with the ratio to torch fp32;
- query latency: encoding one query (p50 over --n-queries public queries) and a whole hybrid
  search on the form's index (p50/p95, warm process);
- cold CLI search: `supergrep search` process start to exit (p50 over --cold-runs);

and with --eval, `supergrep eval` on the public set per form (hybrid and semantic P@1/MRR@10).
Prints a markdown table; --out writes the raw figures as JSON.

Other models (e.g. a `supergrep shrink` student) join the same run with ``--model NAME=DIR`` and
forms named ``NAME:FORM`` (``--forms onnx-int8,l3:onnx-int8``), built from DIR into
--workdir/NAME/ (rebuilt when DIR's fingerprint changed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from supergrep.config import Config  # noqa: E402
from supergrep.encoder import Encoder, resolve_model  # noqa: E402
from supergrep.encoder.spec import default_model_dir  # noqa: E402
from supergrep.evaluation.queries import load_queries  # noqa: E402
from supergrep.index.indexer import update_index  # noqa: E402
from supergrep.index.project import Index  # noqa: E402
from supergrep.index.search import Searcher  # noqa: E402

# name -> (the `supergrep` command that builds it from the default model, backend, index vectors)
FORMS = {
    "torch-fp32": ("", "torch", "float16"),
    "torch-q8g64": ("quantize --bits 8", "torch", "float16"),
    "torch-q4g64": ("quantize --bits 4", "torch", "float16"),
    "onnx-fp32": ("export onnx", "onnx", "float16"),
    "onnx-int8": ("export onnx --int8", "onnx", "float16"),
    "onnx-int8-all": ("export onnx --int8 --layers encoder.layer.*.output.dense=8", "onnx", "float16"),
    "torch-fp32+int8vec": ("", "torch", "int8"),
    "onnx-int8+int8vec": ("export onnx --int8", "onnx", "int8"),
    # A --model NAME=DIR that is already an ONNX export, run as it is (e.g. an older export
    # against a new one: `--model old=DIR --forms old:onnx-dir,onnx-int8`).
    "onnx-dir": ("", "onnx", "float16"),
}


def form_of(name: str) -> tuple[str, str]:
    """("" for the default model, else the --model NAME; the FORMS key) of a form name.

    >>> form_of("l3:onnx-int8"), form_of("torch-fp32")
    (('l3', 'onnx-int8'), ('', 'torch-fp32'))
    """
    model, _, form = name.rpartition(":")
    return model, form


def build_forms(workdir: Path, names: list[str], models: dict[str, Path]) -> dict[str, Path]:
    """Model directory per form, built once (reused while its source's fingerprint is the same)."""
    exe = shutil.which("supergrep", path=str(Path(sys.executable).parent)) or "supergrep"
    dirs: dict[str, Path] = {}
    for name in names:
        model, form = form_of(name)
        src = models[model] if model else default_model_dir()
        how = FORMS[form][0]
        if not how:
            dirs[name] = src
            continue
        target = (workdir / model if model else workdir) / form.split("+")[0]  # "+int8vec" shares its model's
        meta = target / "supergrep_model.json"
        from supergrep.export.onnx_graph import EXPORT_RECIPE

        info = json.loads(meta.read_text()) if meta.is_file() else {}
        built_from = info.get("source", {}).get("fingerprint")
        stale = "onnx" in info and info["onnx"].get("recipe", 1) != EXPORT_RECIPE  # an older export recipe
        if built_from != resolve_model(src).fingerprint() or stale:
            cmd = [exe, *how.split(), str(src), "-o", str(target), "--force"]
            print(f"building {name}: {' '.join(cmd[1:])}", file=sys.stderr)
            subprocess.run(cmd, check=True)
        dirs[name] = target
    return dirs


def model_size(path: Path) -> int:
    from supergrep.export.quantized import model_bytes

    return model_bytes(resolve_model(path))


def index_once(root: Path, encoder: Encoder, index_dir: Path, languages: list[str], vector_dtype: str):
    cfg = Config()
    cfg.walk.languages = languages
    cfg.encode.vector_dtype = vector_dtype
    shutil.rmtree(index_dir, ignore_errors=True)
    index = Index(root, index_dir)
    before = cpu_seconds()
    rep = update_index(index, encoder, cfg, force=True)
    stats = index.store.stats(index.conn)
    stats["cpu_s"] = cpu_seconds() - before
    index.close()
    return rep, stats


def cpu_seconds() -> float:
    """CPU time of this process, every thread (user + system): unlike wall time, it hardly
    changes when other processes compete for the cores."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1)}


def latency(root: Path, index_dir: Path, encoder: Encoder, queries: list[str], vector_dtype: str) -> dict:
    cfg = Config()
    cfg.encode.vector_dtype = vector_dtype
    encoder.encode_queries(queries[:2])  # warm-up
    enc = []
    for q in queries:
        t = time.perf_counter()
        encoder.encode_queries([q])
        enc.append((time.perf_counter() - t) * 1000)
    searcher = Searcher(Index(root, index_dir), encoder, cfg.search)
    searcher.search(queries[0], mode="hybrid")
    full = []
    for q in queries:
        t = time.perf_counter()
        searcher.search(q, mode="hybrid")
        full.append((time.perf_counter() - t) * 1000)
    return {"encode_query": pct(enc), "hybrid_search": pct(full)}


def cold_search(root: Path, index_dir: Path, model: Path, backend: str, queries: list[str]) -> dict:
    exe = shutil.which("supergrep", path=str(Path(sys.executable).parent)) or "supergrep"
    ms = []
    for q in queries:
        t = time.perf_counter()
        r = subprocess.run([exe, "search", q, str(root), "--index-dir", str(index_dir), "-n", "10",
                            "--model-path", str(model), "--backend", backend], capture_output=True, text=True)
        ms.append((time.perf_counter() - t) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"cold search failed ({backend} {model}): {r.stderr.strip()[-300:]}")
    return pct(ms)


def run_eval(model: Path, backend: str, vector_dtype: str, corpora: list[str], languages: list[str],
             queries: Path, workdir: Path) -> dict:
    exe = shutil.which("supergrep", path=str(Path(sys.executable).parent)) or "supergrep"
    cmd = [exe, "eval", "--queries", str(queries), "--json", "--model-path", str(model), "--backend", backend]
    for c in corpora:
        cmd += ["--corpus", c]
    for t in languages:
        cmd += ["-t", t]
    env = dict(os.environ)
    if vector_dtype != "float16":
        cfg = workdir / f"vectors-{vector_dtype}.toml"
        cfg.write_text(f'[encode]\nvector_dtype = "{vector_dtype}"\n')
        cmd += ["--config", str(cfg)]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"eval failed: {' '.join(cmd)}\n{r.stderr.strip()[-500:]}")
    rows = json.loads(r.stdout)["summary"]
    out = {"seconds": round(time.perf_counter() - t, 1), "command": " ".join(cmd[1:])}
    for row in rows:
        out[row["mode"]] = {k: round(row[k], 3) for k in ("p@1", "mrr@10", "r@10", "ndcg@10")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path, help="Corpus indexed for throughput and latency.")
    ap.add_argument("--forms", default=",".join(FORMS),
                    help=f"Comma-separated subset of {', '.join(FORMS)}; NAME:FORM for a --model.")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=DIR",
                    help="Another float model directory whose forms (NAME:FORM) join the run (repeatable).")
    ap.add_argument("--workdir", type=Path, default=Path(".cache/deployment"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=Path, default=Path("eval/public/queries.jsonl"))
    ap.add_argument("--n-queries", type=int, default=50)
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument("-t", "--type", dest="languages", action="append", default=[])
    ap.add_argument("--eval", action="store_true", help="Also run `supergrep eval` on the public set per form.")
    ap.add_argument("--no-speed", action="store_true", help="Only sizes, parity and (with --eval) quality.")
    ap.add_argument("--corpus", action="append", default=[],
                    help="NAME=DIR for --eval (default: the public set's jinja2 and itsdangerous).")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    names = [n.strip() for n in args.forms.split(",") if n.strip()]
    models = {}
    for m in args.model:
        key, _, path = m.partition("=")
        if not key or not path or ":" in key or not Path(path).is_dir():
            raise SystemExit(f"--model {m!r}: expected NAME=DIR with an existing model directory")
        models[key] = Path(path).resolve()
    unknown = [n for n in names if form_of(n)[1] not in FORMS or (form_of(n)[0] and form_of(n)[0] not in models)]
    if unknown:
        raise SystemExit(f"unknown forms {unknown}; choose from {list(FORMS)} (NAME:FORM for a --model NAME=DIR)")
    spec_of = {n: FORMS[form_of(n)[1]] for n in names}  # (how it is built, backend, index vectors)
    args.workdir.mkdir(parents=True, exist_ok=True)
    root = args.root.resolve()
    queries = [q.query for q in load_queries(args.queries)][: args.n_queries]
    dirs = build_forms(args.workdir, names, models)
    results: dict = {
        "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(), "root": str(root),
        "rounds": args.rounds, "models": {k: str(v) for k, v in models.items()}, "python": sys.version.split()[0], "forms": {},
    }
    for lib in ("torch", "onnxruntime", "transformers"):
        try:
            results[lib] = __import__(lib).__version__
        except ImportError:
            pass
    encoders = {} if args.no_speed else {
        n: Encoder(resolve_model(dirs[n]), backend=spec_of[n][1], device="cpu") for n in names}
    for e in encoders.values():
        e.encode_documents(["def warm(): pass"])  # load every model before timing any
    for n in names:
        meta = dirs[n] / "supergrep_model.json"
        parity = json.loads(meta.read_text()).get("parity") if meta.is_file() and n != "torch-fp32" else None
        results["forms"][n] = {"model": str(dirs[n]), "built_by": spec_of[n][0], "backend": spec_of[n][1],
                               "vector_dtype": spec_of[n][2], "model_bytes": model_size(dirs[n]),
                               "parity": parity, "lines_per_s_rounds": []}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        if args.no_speed:
            names_speed = []
        else:
            names_speed = names
        for r in range(args.rounds if names_speed else 0):
            for n in (names if r % 2 == 0 else names[::-1]):  # alternate the order round by round
                rep, stats = index_once(root, encoders[n], work / n, args.languages, spec_of[n][2])
                f = results["forms"][n]
                f["lines_per_s_rounds"].append(round(rep.lines_per_s, 1))
                f.setdefault("lines_per_cpu_s_rounds", []).append(round(rep.lines_indexed / stats["cpu_s"], 1))
                f.update(lines=rep.lines_indexed, chunks=rep.chunks, vectors=stats["vectors"],
                         index_bytes=stats["bytes"])
                print(f"round {r + 1} {n}: {rep.lines_per_s:.0f} lines/s", file=sys.stderr)
        base = statistics.median(results["forms"][names[0]]["lines_per_s_rounds"]) if names_speed else 0
        for n in names_speed:
            f = results["forms"][n]
            f["lines_per_s"] = round(statistics.median(f["lines_per_s_rounds"]), 1)
            f["speedup_vs_" + names[0]] = round(f["lines_per_s"] / base, 2)
            f["lines_per_cpu_s"] = round(statistics.median(f["lines_per_cpu_s_rounds"]), 1)
            f.update(latency(root, work / n, encoders[n], queries, spec_of[n][2]))
            f["cold_cli_search"] = cold_search(root, work / n, dirs[n], spec_of[n][1], queries[: args.cold_runs])
    if args.eval:
        corpora = args.corpus or ["jinja2=.cache/eval-corpora/jinja2-3.1.4/src",
                                  "itsdangerous=.cache/eval-corpora/itsdangerous-2.2.0/src"]
        for n in names:
            print(f"eval {n} ...", file=sys.stderr)
            results["forms"][n]["eval"] = run_eval(dirs[n], spec_of[n][1], spec_of[n][2], corpora,
                                                   args.languages or ["python"], args.queries, args.workdir)
    results["load_avg_end"] = os.getloadavg()
    if not args.no_speed:
        print(table(results))
    else:
        print(json.dumps({n: {k: f.get(k) for k in ("model_bytes", "parity", "eval")}
                          for n, f in results["forms"].items()}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


def _pm(m: dict | None) -> str:
    return f"{m['p@1']:.3f} / {m['mrr@10']:.3f}" if m else "-"


def table(results: dict) -> str:
    names = list(results["forms"])
    base = names[0]
    lines = [f"| form | model MB | index bytes/vector | lines/s (x {base}) | lines per CPU-s | query encode p50 ms "
             "| hybrid search p50 ms | cold search p50 s | token cosine (mean) | hybrid P@1 / MRR@10 "
             "| semantic P@1 / MRR@10 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, f in results["forms"].items():
        ev = f.get("eval") or {}
        cos = f["parity"]["mean_cos"] if f.get("parity") else 1.0
        lines.append(
            f"| {n} | {f['model_bytes'] / 1e6:.1f} | {f['index_bytes'] / max(f['vectors'], 1):.0f} "
            f"| {f['lines_per_s']:.0f} ({f['speedup_vs_' + base]:.2f}x) | {f['lines_per_cpu_s']:.0f} "
            f"| {f['encode_query']['p50_ms']} "
            f"| {f['hybrid_search']['p50_ms']} | {f['cold_cli_search']['p50_ms'] / 1000:.2f} | {cos:.4f} "
            f"| {_pm(ev.get('hybrid'))} | {_pm(ev.get('semantic'))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
