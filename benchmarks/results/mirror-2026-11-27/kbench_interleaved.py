"""The re-rank kernel of two builds (.so paths) on 160 stdlib documents, called alternately 300 times:
ns a token (min, p10, median) and whether the scores are identical. STDLIB: the indexed project."""
import sys, time, os
import numpy as np
from pathlib import Path
sys.path.insert(0, "benchmarks/rerank_kernels")
from bench import load
from supergrep.index.project import Index
index = Index(Path(os.environ.get("STDLIB", "/tmp/sgb/stdlib")), None); store = index.store; store.warm(index.conn); conn = index.conn
view, codec = store._view_for(conn)
rng = np.random.default_rng(0)
q = rng.standard_normal((32, 384)).astype(np.float32); q /= np.linalg.norm(q, axis=1, keepdims=True)
docs = np.sort(rng.choice(len(view.doc_ids), 160, replace=False))
st = store._centroid_scores(codec, q); iq = store._query_ints(codec, q)
seg_of, lay = store._runs(view, docs)
arrays = ([s.resid for s in view.segs], [s.codes for s in view.segs], [s.scale for s in view.segs])
start = np.ascontiguousarray(lay[:, 0]); length = np.ascontiguousarray(lay[:, 1]); seg = np.asarray(seg_of, np.int64)
ntok = int(length.sum())
mods = [load(p) for p in sys.argv[1:]]
ts = [[] for _ in mods]
outs = [np.empty(len(docs), np.float32) for _ in mods]
for rep in range(300):  # interleaved call by call: a burst of load hits both alike
    for i, k in enumerate(mods):
        t = time.perf_counter(); k.rerank_nibbles(*arrays, seg, start, length, iq[4], iq[1], iq[2], st, outs[i]); ts[i].append(time.perf_counter() - t)
for p, t in zip(sys.argv[1:], ts):
    t = np.array(t[20:]) / ntok * 1e9
    print("%-45s min %.1f  p10 %.1f  median %.1f ns/token" % (os.path.basename(p), t.min(), np.percentile(t, 10), np.median(t)))
print("identical", all(np.array_equal(outs[0], o) for o in outs[1:]), ntok, "tokens")
