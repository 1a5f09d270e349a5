"""Compare two exact indexes row by row, and their vectors chunk by chunk (float16 bytes).

    python compare.py INDEX_DIR_A INDEX_DIR_B
"""

import hashlib
import sqlite3
import sys

import numpy as np


def contents(d: str) -> dict:
    conn = sqlite3.connect(f"file:{d}/meta.sqlite?mode=ro", uri=True)

    def q(sql: str) -> list:
        return conn.execute(sql).fetchall()

    segs: dict = {}
    vec = hashlib.sha256()
    n = 0
    for cid, seg, off, k in q("SELECT chunk_id, seg, offset, n FROM vec_chunks ORDER BY chunk_id"):
        if seg not in segs:
            segs[seg] = np.load(f"{d}/vectors/seg-{seg:08d}.npy", mmap_mode="r")
        vec.update(cid.to_bytes(8, "little"))
        vec.update(np.asarray(segs[seg][off:off + k]).tobytes())
        n += k
    return {
        "files": q("SELECT id, path, language, size, sha256, n_lines FROM files ORDER BY id"),
        "chunks": q("SELECT * FROM chunks ORDER BY id"),
        "fts": q("SELECT rowid, path, symbol, body FROM chunks_fts ORDER BY rowid"),
        "segments": q("SELECT id, n_chunks, n_vectors, dead_chunks, dead_vectors, bytes FROM segments ORDER BY id"),
        "vec_chunks": q("SELECT * FROM vec_chunks ORDER BY chunk_id"),
        "sequence": q("SELECT * FROM sqlite_sequence"),
        "vectors": (n, vec.hexdigest()),
    }


if __name__ == "__main__":
    a, b = contents(sys.argv[1]), contents(sys.argv[2])
    for key in a:
        print(key, "same" if a[key] == b[key] else "DIFFERENT", len(a[key]) if key != "vectors" else a[key])
