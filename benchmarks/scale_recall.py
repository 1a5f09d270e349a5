"""Recall@10 of the compressed store against exact MaxSim on a real index, with real queries.

    python benchmarks/scale_recall.py --index-dir .cache/idx-stdlib \
        --out benchmarks/results/scale-recall-stdlib.json

The index is an exact (float16) supergrep index of a real corpus (here: the Python 3.11
standard library's top-level modules, built with `supergrep index`). Queries: the public eval
set's 55 questions plus the first docstring line of up to 145 indexed functions (the docstring
is part of the chunk, so the chunk is a natural top-1; what is measured here is agreement with
exact MaxSim over the whole top 10). Every configuration is converted from the same exact
index (hard-linked copy), in a child process so its build time and peak memory are its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def encode_queries(index_dir: Path, cache: Path, n_doc: int = 145, model_path: str | None = None) -> list[np.ndarray]:
    if cache.exists():
        z = np.load(cache)
        return [z[k] for k in sorted(z.files, key=int)]
    from supergrep.encoder.spec import resolve_model

    texts = [json.loads(line)["query"] for line in (ROOT / "eval/public/queries.jsonl").read_text().splitlines() if line]
    conn = sqlite3.connect(index_dir / "meta.sqlite")
    rng = np.random.default_rng(0)
    rows = conn.execute("SELECT text FROM chunks WHERE kind IN ('function', 'method') AND text LIKE '%\"\"\"%'").fetchall()
    for i in rng.permutation(len(rows)):
        body = rows[i][0].split('"""')
        line = body[1].strip().splitlines()[0].strip() if len(body) > 2 and body[1].strip() else ""
        if len(line.split()) >= 4:
            texts.append(line)
        if len(texts) >= 55 + n_doc:
            break
    # the index's model as a search loads it (named model -> its CPU form, e.g. int8 ONNX)
    from supergrep.cli.common import make_encoder
    from supergrep.config import load_config
    from supergrep.encoder.named import model_of_index
    from supergrep.index.format import Manifest

    cfg = load_config(None)
    cfg.encode.device = "cpu"
    vecs = make_encoder(resolve_model(model_path or model_of_index(Manifest.read(index_dir).model)), cfg).encode_queries(texts)
    np.savez(cache, **{str(i): v for i, v in enumerate(vecs)})
    return vecs


def one(index_dir: Path, work: Path, cfg: dict, queries: list[np.ndarray], exact_top: list[list[int]]) -> dict:
    from supergrep.index.codec import ResidualCodec
    from supergrep.index.compressed import CompressedStore, CompressSettings, convert

    ResidualCodec.KMEANS_ITERS = cfg.get("niter", ResidualCodec.KMEANS_ITERS)
    if hasattr(ResidualCodec, "LLOYD_ITERS"):  # older trees (A/B runs) have no bucket refinement
        ResidualCodec.LLOYD_ITERS = cfg.get("lloyd", ResidualCodec.LLOYD_ITERS)
    if "levels" in cfg:
        ResidualCodec.LEVELS = cfg["levels"]
    from supergrep.index.format import Manifest, connect

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("manifest.json", "meta.sqlite"):
        shutil.copy(index_dir / name, work / name)
    subprocess.run(["cp", "-al", str(index_dir / "vectors"), str(work / "vectors")], check=True)
    dim = int(Manifest.read(index_dir).model["dim"])
    conn = connect(work)
    settings = CompressSettings(nbits=cfg["nbits"], pool_factor=cfg["pool"], n_centroids=cfg.get("centroids", 0))
    if cfg.get("components"):  # the residual coded on its principal axes (2026-11-27)
        settings.components = cfg["components"]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    info = convert(conn, work, dim, settings)
    build_s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    store = CompressedStore(work, dim, settings)
    vec_bytes = store.stats(conn)["bytes"]
    rows = []
    for nprobe, cands, rerank in cfg["search"]:
        store.settings.nprobe, store.settings.candidates, store.settings.rerank = nprobe, cands, rerank
        store.search(conn, queries[0], 10)
        lat, cpu, rec = [], [], []
        for q, want in zip(queries, exact_top, strict=True):
            t, c = time.perf_counter(), time.process_time()
            got = store.search(conn, q, 10)[0].tolist()
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            rec.append(len(set(got) & set(want)) / 10)
        rows.append({"nprobe": nprobe, "candidates": cands, "rerank": rerank, "recall_at_10": round(float(np.mean(rec)), 4),
                     "p50_ms": round(float(np.percentile(lat, 50)) * 1000, 1), "p95_ms": round(float(np.percentile(lat, 95)) * 1000, 1),
                     "p50_cpu_ms": round(float(np.percentile(cpu, 50)) * 1000, 1)})
    # The exhaustive path: quantisation loss alone (no candidate generation).
    rec = [len(set(store.search(conn, q, 10, exact=True)[0].tolist()) & set(w)) / 10
           for q, w in zip(queries[: cfg.get("exhaustive_queries", 40)], exact_top, strict=False)]
    conn.close()
    shutil.rmtree(work, ignore_errors=True)
    return {**cfg, "search": rows, "exhaustive_recall_at_10": round(float(np.mean(rec)), 4),
            "exhaustive_queries": len(rec), "centroids": info["centroids"], "vectors_in": info["vectors_in"],
            "vectors_stored": info["vectors_stored"], "vector_bytes": vec_bytes,
            "bytes_per_token_vector": round(vec_bytes / info["vectors_in"], 1),
            "bytes_per_stored_vector": round(vec_bytes / info["vectors_stored"], 1),
            "build_s": round(build_s, 1), "build_peak_rss_mib": round(max(peak, rss0) / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path, default=ROOT / ".cache/scale-recall")
    ap.add_argument("--configs", default='[{"nbits": 4, "pool": 1.0}, {"nbits": 2, "pool": 1.0}, {"nbits": 1, "pool": 1.0}, {"nbits": 4, "pool": 2.0}]')
    ap.add_argument("--search", default="[[8, 0, 64], [4, 0, 64], [8, 1024, 64], [16, 0, 128]]")
    ap.add_argument("--model-path", help="The model the index was built with (default: the default model).")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    from supergrep.index.format import Manifest, connect
    from supergrep.index.store import SegmentStore

    queries = encode_queries(a.index_dir, a.index_dir / "bench-queries.npz", model_path=a.model_path)
    dim = int(Manifest.read(a.index_dir).model["dim"])
    conn = connect(a.index_dir, readonly=True)
    exact = SegmentStore(a.index_dir, dim)
    n_vec_all = conn.execute("SELECT SUM(n_vectors - dead_vectors) FROM segments").fetchone()[0]
    cache = a.index_dir / f"bench-exact-top10-{n_vec_all}.json"
    if cache.exists():
        exact_top, exact_lat, *rest = json.loads(cache.read_text())
        exact_cpu = rest[0] if rest else exact_lat
    else:
        exact_top, exact_lat, exact_cpu = [], [], []
        for q in queries:
            t, c = time.perf_counter(), time.process_time()
            exact_top.append(exact.search(conn, q, 10)[0].tolist())
            exact_lat.append(time.perf_counter() - t)
            exact_cpu.append(time.process_time() - c)
        cache.write_text(json.dumps([exact_top, exact_lat, exact_cpu]))
    if a.child:
        cfg = json.loads(a.child)
        print(json.dumps(one(a.index_dir, a.work, cfg, queries, exact_top)))
        return
    n_chunks, n_vec = conn.execute("SELECT SUM(n_chunks - dead_chunks), SUM(n_vectors - dead_vectors) FROM segments").fetchone()
    lines = sqlite3.connect(a.index_dir / "meta.sqlite").execute("SELECT SUM(n_lines), COUNT(*) FROM files").fetchone()
    out = {"index": str(a.index_dir), "files": lines[1], "lines": lines[0], "chunks": n_chunks, "token_vectors": n_vec,
           "queries": len(queries), "exact": {"p50_ms": round(float(np.percentile(exact_lat, 50)) * 1000, 1),
                                              "p95_ms": round(float(np.percentile(exact_lat, 95)) * 1000, 1),
                                              "p50_cpu_ms": round(float(np.percentile(exact_cpu, 50)) * 1000, 1),
                                              "bytes_per_token_vector": 2 * dim},
           "load_avg_start": os.getloadavg(), "configs": []}
    for cfg in json.loads(a.configs):
        cfg["search"] = json.loads(a.search)
        r = subprocess.run([sys.executable, __file__, "--index-dir", str(a.index_dir), "--work", str(a.work),
                            "--child", json.dumps(cfg)], capture_output=True, text=True)
        if r.returncode:
            print(r.stderr[-3000:], file=sys.stderr)
            raise SystemExit(r.returncode)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        for row in res["search"]:
            row["speedup_p50"] = round(out["exact"]["p50_ms"] / row["p50_ms"], 1)
            if "p50_cpu_ms" in row:
                row["speedup_p50_cpu"] = round(out["exact"]["p50_cpu_ms"] / row["p50_cpu_ms"], 1)
        out["configs"].append(res)
        print(json.dumps(res), flush=True)
    out["load_avg_end"] = os.getloadavg()
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
