"""``supergrep bench search``: latency, QPS and recall of the compressed store at given index sizes.

Indexes of any size are built from synthetic token vectors, directly in compressed form (so a
million chunks builds in minutes on a laptop): random unit centroids, documents whose tokens
fall in the centroids of a "topic" (real code clusters the same way: a function's tokens share
few centroids), chunk lengths drawn around a real mean, random residual bytes. Queries are
noisy copies of some document's token centroids. Latency is what ``VectorStore.search`` takes
(query encoding excluded: the model is not part of this benchmark), as wall time and as the
process's CPU time (single-threaded NumPy: on a machine shared with other jobs, CPU time is what
the query costs on an idle core, wall time what it took here); the baseline is exhaustive
MaxSim over every stored vector (``search(..., exact=True)``), timed in the same run, and
Recall@10 is the compressed pipeline's top 10 against that baseline's.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from supergrep.arrays import tune_malloc_for_serving
from supergrep.index import intmm, native
from supergrep.index.codec import ResidualCodec, default_n_centroids
from supergrep.index.compressed import CompressedStore, CompressSettings
from supergrep.index.format import connect


@dataclass
class SizeResult:
    chunks: int
    vectors: int
    centroids: int
    bytes: int
    bytes_per_vector: float
    build_s: float
    build_peak_rss_mib: float
    p50_ms: float
    p95_ms: float
    qps: float
    p50_cpu_ms: float
    p95_cpu_ms: float
    exact_p50_ms: float | None
    exact_p50_cpu_ms: float | None
    exact_queries: int
    speedup_p50: float | None
    recall_at_10: float | None
    search_peak_rss_mib: float
    warm_s: float = 0.0  # CompressedStore.warm before the clock: pages mapped, integer tables built
    reused: bool = False  # an index kept by an earlier run with the same settings (--reuse)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _synthetic_codec(dim: int, n_centroids: int, nbits: int, rng: np.random.Generator,
                     components: int = 0) -> ResidualCodec:
    centroids = rng.standard_normal((n_centroids, dim)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    # Residual spread of real MiniLM token states after k-means (~0.37 total variance).
    sigma = math.sqrt(0.37 / dim)
    rdim = components or dim
    sample = rng.standard_normal((4096, rdim)).astype(np.float32) * sigma
    # the residual levels a real index gets (``ResidualCodec.train``): what the re-rank decodes
    cutoffs, weights = ResidualCodec.fit_levels(sample, nbits)
    # ``components``: a random orthonormal basis stands in for the residuals' principal axes
    # (the search's cost depends on the shapes, not on which axes they are)
    rotation = np.linalg.qr(rng.standard_normal((dim, rdim)))[0].astype(np.float32) if components else None
    return ResidualCodec(centroids, cutoffs, weights, nbits, 0.37, rotation)


def build_synthetic(index_dir: Path, n_chunks: int, dim: int = 384, nbits: int = 2, mean_tokens: float = 139.0,
                    seed: int = 0, segment_chunks: int = 100_000, components: int = 0) -> tuple[CompressedStore, dict]:
    """A compressed index of ``n_chunks`` synthetic chunks, streamed one segment at a time."""
    rng = np.random.default_rng(seed)
    shutil.rmtree(index_dir, ignore_errors=True)
    index_dir.mkdir(parents=True)
    conn = connect(index_dir)
    n_vec_est = int(n_chunks * mean_tokens)
    k = default_n_centroids(n_vec_est)
    codec = _synthetic_codec(dim, k, nbits, rng, components)
    store = CompressedStore(index_dir, dim, CompressSettings(nbits=nbits, pool_factor=1.0))
    topic_size = 48
    n_topics = max(1, k // 16)
    topics = rng.integers(0, k, size=(n_topics, topic_size))
    conn.execute("BEGIN IMMEDIATE")
    store.write_codec(conn, codec)
    conn.execute("COMMIT")
    next_id, n_vec = 1, 0
    for start in range(0, n_chunks, segment_chunks):
        n = min(segment_chunks, n_chunks - start)
        # Chunk lengths: log-normal around the real mean, 4 to 256 tokens (the model's cap).
        lengths = np.clip(rng.lognormal(math.log(mean_tokens) - 0.18, 0.6, n), 4, 256).astype(np.int64)
        total = int(lengths.sum())
        doc_topic = np.repeat(rng.integers(0, n_topics, n), lengths)
        in_topic = rng.random(total) < 0.8
        codes = np.where(in_topic, topics[doc_topic, rng.integers(0, topic_size, total)],
                         rng.integers(0, k, total)).astype(codec.code_dtype)
        resid = rng.integers(0, 256, size=(total, codec.residual_bytes), dtype=np.uint8)
        ids = np.arange(next_id, next_id + n, dtype=np.int64)
        conn.execute("BEGIN IMMEDIATE")
        store._write_encoded(conn, ids, lengths, codes, resid, codec)
        conn.execute("COMMIT")
        next_id += n
        n_vec += total
        del codes, resid, doc_topic, in_topic
    return store, {"conn": conn, "codec": codec, "vectors": n_vec}


def _queries(store: CompressedStore, conn, codec: ResidualCodec, n: int, q_tokens: int,
             rng: np.random.Generator) -> list[np.ndarray]:
    view, _ = store._view_for(conn)
    out = []
    for _ in range(n):
        doc = int(rng.integers(0, len(view.doc_ids)))
        codes, *_ = store._gather(view, np.array([doc]))
        pick = codes[rng.integers(0, len(codes), q_tokens)].astype(np.int64)
        q = codec.centroids[pick] + rng.standard_normal((q_tokens, codec.dim)).astype(np.float32) * (0.6 / math.sqrt(codec.dim))
        out.append((q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32))
    return out


def run_search_bench(sizes: list[int], work_dir: Path, queries: int = 100, exact_queries: int = 3,
                     exact_max_chunks: int = 100_000, dim: int = 384, nbits: int = 2, components: int = 0, q_tokens: int = 32,
                     mean_tokens: float = 139.0, nprobe: int | None = None, candidates: int | None = None,
                     rerank: int | None = None, k: int = 10, seed: int = 0, keep: bool = False,
                     integer_scores: bool | None = None, reuse: bool = False, progress=None) -> dict:
    """Build a synthetic compressed index per size, then time ``queries`` searches on it.

    Args:
        sizes: Index sizes in chunks.
        work_dir: Where the indexes are built (deleted afterwards unless ``keep``).
        exact_queries: Queries also run exhaustively (the baseline and the recall reference);
            skipped above ``exact_max_chunks`` chunks (exhaustive MaxSim there takes minutes).
        nprobe, candidates, rerank, integer_scores: The store's search knobs (default: the
            config defaults).
        reuse: Open an index an earlier run kept (``keep``) with the same build settings instead
            of building it again (alternated A/B runs of search settings).

    Returns:
        {"hardware", "settings", "results": [SizeResult as dict, ...]}.
    """
    tune_malloc_for_serving()  # as the daemon: many queries in one process
    settings = CompressSettings()
    if nprobe is not None:
        settings.nprobe = nprobe
    if candidates is not None:
        settings.candidates = candidates
    if rerank is not None:
        settings.rerank = rerank
    if integer_scores is not None:
        settings.integer_scores = integer_scores
    results = []
    for n_chunks in sizes:
        say = progress or (lambda _msg: None)
        say(f"building {n_chunks:,} chunks")
        d = Path(work_dir) / f"synthetic-{n_chunks}"
        build_key = json.dumps({"chunks": n_chunks, "dim": dim, "nbits": nbits, "mean_tokens": mean_tokens, "seed": seed,
                                "version": 3, "levels": ResidualCodec.LEVELS,
                                **({"components": components} if components else {})})
        stamp = d / "synthetic.json"
        t0 = time.perf_counter()
        reused = reuse and stamp.is_file() and stamp.read_text() == build_key
        if reused:
            say(f"reusing {d}")
            conn = connect(d)
            store = CompressedStore(d, dim, CompressSettings(nbits=nbits, pool_factor=1.0))
            codec = store.codec(conn)
            info = {"conn": conn, "codec": codec,
                    "vectors": int(conn.execute("SELECT SUM(n_vectors - dead_vectors) FROM segments").fetchone()[0])}
        else:
            store, info = build_synthetic(d, n_chunks, dim=dim, nbits=nbits, mean_tokens=mean_tokens, seed=seed,
                                          components=components)
            stamp.write_text(build_key)
        build_s = time.perf_counter() - t0
        build_rss = _rss_mib()
        conn, codec = info["conn"], info["codec"]
        store.settings.nprobe, store.settings.candidates, store.settings.rerank = (
            settings.nprobe, settings.candidates, settings.rerank)
        store.settings.integer_scores = settings.integer_scores
        rng = np.random.default_rng(seed + 1)
        qs = _queries(store, conn, codec, queries, q_tokens, rng)
        # As the daemon does after an update: every page mapped, integer tables built (a search
        # of scattered candidates would otherwise pay first-touch page faults: docs/benchmarks.md).
        warm_s = store.warm(conn)["seconds"]
        store.search(conn, qs[0], k)  # size the scratch arrays
        lat, cpu = [], []
        got = []
        for q in qs:
            t, c = time.perf_counter(), time.process_time()
            ids, _ = store.search(conn, q, k)
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            got.append(ids)
        exact_lat, exact_cpu, recall = [], [], None
        if n_chunks <= exact_max_chunks and exact_queries > 0:
            hits = []
            for q, ids in zip(qs[:exact_queries], got[:exact_queries], strict=True):
                t, c = time.perf_counter(), time.process_time()
                want, _ = store.search(conn, q, k, exact=True)
                exact_lat.append(time.perf_counter() - t)
                exact_cpu.append(time.process_time() - c)
                hits.append(len(set(want.tolist()) & set(ids.tolist())) / max(len(want), 1))
            recall = float(np.mean(hits))
        size = sum(p.stat().st_size for p in (d / "vectors").iterdir())
        lat_ms = np.array(lat) * 1000
        p50 = float(np.percentile(lat_ms, 50))
        exact_p50 = float(np.percentile(np.array(exact_lat) * 1000, 50)) if exact_lat else None
        cpu_ms = np.array(cpu) * 1000
        results.append(SizeResult(
            chunks=n_chunks, vectors=info["vectors"], centroids=codec.n_centroids, bytes=size,
            bytes_per_vector=round(size / info["vectors"], 2), build_s=round(build_s, 1),
            build_peak_rss_mib=round(build_rss, 0), p50_ms=round(p50, 2),
            p95_ms=round(float(np.percentile(lat_ms, 95)), 2), qps=round(len(lat) / sum(lat), 1),
            p50_cpu_ms=round(float(np.percentile(cpu_ms, 50)), 2), p95_cpu_ms=round(float(np.percentile(cpu_ms, 95)), 2),
            exact_p50_ms=round(exact_p50, 1) if exact_p50 else None,
            exact_p50_cpu_ms=round(float(np.percentile(exact_cpu, 50)) * 1000, 1) if exact_cpu else None,
            exact_queries=len(exact_lat),
            speedup_p50=round(exact_p50 / p50, 1) if exact_p50 else None, recall_at_10=recall,
            search_peak_rss_mib=round(_rss_mib(), 0), warm_s=round(warm_s, 2), reused=bool(reused)))
        say(f"{n_chunks:,} chunks: p50 {p50:.1f} ms (CPU {np.percentile(cpu_ms, 50):.1f} ms)" + (f", exhaustive {exact_p50:.0f} ms, recall@10 {recall:.3f}"
                                                        if exact_p50 else ""))
        conn.close()
        del store
        if not (keep or reuse):
            shutil.rmtree(d, ignore_errors=True)
    return {
        "load_average": os.getloadavg(),
        "hardware": {"machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
                     "python": platform.python_version(), "numpy": np.__version__},
        "settings": {"dim": dim, "nbits": nbits, "components": components, "q_tokens": q_tokens, "mean_tokens": mean_tokens, "k": k,
                     "queries": queries, "nprobe": settings.nprobe, "candidates": settings.candidates,
                     "rerank": settings.rerank, "integer_scores": settings.integer_scores,
                     "int_backend": intmm.backend() if settings.integer_scores else None,
                     # the fused C kernels ('avx2' / 'scalar'; 'none': NumPy, e.g. SUPERGREP_NATIVE=0)
                     "kernels": native.simd(), "seed": seed},
        "results": [asdict(r) for r in results],
    }


__all__ = ["run_search_bench", "build_synthetic", "SizeResult"]
