import time
import numpy as np
from pathlib import Path
from supergrep.index.project import Index
from supergrep.index import native
index = Index(Path(__import__("os").environ.get("STDLIB", "/tmp/sgb/stdlib")), None); store = index.store; store.warm(index.conn); conn = index.conn
view, codec = store._view_for(conn)
rng = np.random.default_rng(0)
q = rng.standard_normal((32, 384)).astype(np.float32); q /= np.linalg.norm(q, axis=1, keepdims=True)
docs = np.sort(rng.choice(len(view.doc_ids), 160, replace=False))
st = store._centroid_scores(codec, q)
iq = store._query_ints(codec, q)
seg_of, lay = store._runs(view, docs)
arrays = ([s.resid for s in view.segs], [s.codes for s in view.segs], [s.scale for s in view.segs])
start = np.ascontiguousarray(lay[:, 0]); length = np.ascontiguousarray(lay[:, 1]); seg = np.asarray(seg_of, np.int64)
out = np.empty(len(docs), np.float32)
w = (iq[4], iq[1], iq[2], st)
ntok = int(length.sum())
for _ in range(3): native.rerank_nibbles(*arrays, seg, start, length, *w, out)
n = 30; t = time.perf_counter()
for _ in range(n): native.rerank_nibbles(*arrays, seg, start, length, *w, out)
dt = (time.perf_counter() - t) / n
print("single thread: %d docs %d tokens %.2f ms  %.1f ns/token  %.1f GMAC/s" % (len(docs), ntok, dt * 1e3, dt / ntok * 1e9, ntok * 32 * 384 / dt / 1e9))
print("simd", native._kernels.simd() if hasattr(native, "_kernels") else "?")
