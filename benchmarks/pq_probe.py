"""How much Recall@10 each residual code keeps at a given size, scored exhaustively (every chunk's
decoded vectors, no candidate generation): the store's scalar codes (4 or 2 bits a dimension,
optionally on the residual's principal axes) against product quantisation of the same residuals
(faiss: M sub-vectors of 8 bits each, optionally after an OPQ rotation). The question it answers
for issue 8: can a code of <= 40 bytes a token vector keep .95 of exact MaxSim's top 10 with the
384-d model, where the scalar codes need ~200 bytes (docs/benchmarks.md, "Why .95 needs ~4 bits")?

    python benchmarks/pq_probe.py --index-dir /tmp/sgx/idx-stdlib [--queries 100] [--out FILE.json]

The index must be an exact (float16) supergrep index; the queries are scale_recall.py's (the
public set's questions + indexed docstring lines, encoded by the index's model, cached). Every
decoded token is renormalised, as the compressed store scores it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def load_vectors(index_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vectors (N, dim) float32 grouped by chunk, chunk ids (C,), group starts (C,))."""
    from supergrep.index.format import Manifest, connect
    from supergrep.index.store import SegmentStore

    dim = int(Manifest.read(index_dir).model["dim"])
    conn = connect(index_dir)
    ids = [r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")]
    store = SegmentStore(index_dir, dim)
    vecs, keep = [], []
    for s in range(0, len(ids), 4096):
        batch = ids[s : s + 4096]
        try:
            got = store.get(conn, batch)
        except KeyError:  # a chunk without vectors (empty text): one at a time
            got = []
            for cid in batch:
                try:
                    got.append(store.get(conn, [cid])[0])
                except KeyError:
                    got.append(None)
        for cid, v in zip(batch, got, strict=True):
            if v is not None and len(v):
                vecs.append(np.asarray(v, np.float32))
                keep.append(cid)
    conn.close()
    starts = np.cumsum([0] + [len(v) for v in vecs[:-1]])
    return np.concatenate(vecs), np.asarray(keep), starts


def top10(vectors: np.ndarray, starts: np.ndarray, queries: list[np.ndarray]) -> list[np.ndarray]:
    """Exhaustive MaxSim top 10 (chunk positions) of each query over ``vectors``."""
    out = []
    for q in queries:
        s = vectors @ q.T.astype(np.float32)  # (N, q_tokens)
        scores = np.maximum.reduceat(s, starts, axis=0).sum(axis=1)
        out.append(np.argsort(-scores, kind="stable")[:10])
    return out


def renorm(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def main() -> None:
    import faiss
    from scale_recall import encode_queries

    from supergrep.index.codec import ResidualCodec, assign

    ap = argparse.ArgumentParser()
    ap.add_argument("--index-dir", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--sample", type=int, default=200_000, help="training sample (token vectors)")
    ap.add_argument("--configs", default="scalar4,scalar2,scalar2r128,pq32,pq48,opq32,opq48,pq64")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cache = ROOT / ".cache" / "pq-probe-queries.npz"
    cache.parent.mkdir(exist_ok=True)
    queries = encode_queries(args.index_dir, cache)[: args.queries]
    t = time.perf_counter()
    vectors, chunk_ids, starts = load_vectors(args.index_dir)
    n, dim = vectors.shape
    print(f"{n:,} vectors, {len(chunk_ids):,} chunks, loaded in {time.perf_counter() - t:.0f} s", flush=True)
    exact = top10(vectors, starts, queries)
    rng = np.random.default_rng(0)
    sample = vectors[rng.choice(n, min(args.sample, n), replace=False)]
    report = {"vectors": n, "chunks": len(chunk_ids), "queries": len(queries), "dim": dim, "configs": []}
    base = ResidualCodec.train(sample, nbits=4, n_vectors=n)  # the store's centroids for every code
    codes = assign(vectors, base.centroids)
    centroid_bytes = 2  # a uint16 centroid id per token (4,096 centroids)
    for name in args.configs.split(","):
        t = time.perf_counter()
        if name.startswith("scalar"):
            nbits, _, comps = name[len("scalar"):].partition("r")  # scalar<bits>[r<components>]
            nbits, comps = int(nbits), int(comps or 0)
            codec = ResidualCodec.train(sample, nbits=nbits, n_vectors=n, components=comps)
            c, packed = codec.encode(vectors)
            decoded = codec.decode(c, packed)
            code_bytes = codec.residual_bytes
        else:
            m = int(name.lstrip("opq"))
            resid = vectors - base.centroids[codes]
            train = resid[rng.choice(n, min(args.sample, n), replace=False)]
            if name.startswith("opq"):
                index = faiss.IndexPreTransform(faiss.OPQMatrix(dim, m), faiss.IndexPQ(dim, m, 8))
            else:
                index = faiss.IndexPQ(dim, m, 8)
            index.train(train)
            decoded = np.empty_like(resid)
            for s in range(0, n, 262_144):  # encode + decode in blocks (memory)
                block = np.ascontiguousarray(resid[s : s + 262_144])
                if name.startswith("opq"):
                    opq = faiss.downcast_VectorTransform(index.chain.at(0))
                    pq = faiss.downcast_index(index.index)
                    rot = opq.apply(block)
                    decoded[s : s + 262_144] = opq.reverse_transform(pq.sa_decode(pq.sa_encode(rot)))
                else:
                    decoded[s : s + 262_144] = index.sa_decode(index.sa_encode(block))
            decoded += base.centroids[codes]
            code_bytes = m
        build_s = time.perf_counter() - t
        got = top10(renorm(decoded), starts, queries)
        recall = float(np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(got, exact, strict=True)]))
        err = float(np.mean(np.sum((renorm(decoded) - vectors) ** 2, axis=1)))
        row = {"code": name, "bytes_per_vector": code_bytes + centroid_bytes, "recall_at_10_exhaustive": round(recall, 4),
               "mse": round(err, 5), "build_s": round(build_s, 1)}
        report["configs"].append(row)
        print(json.dumps(row), flush=True)
        del decoded
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
