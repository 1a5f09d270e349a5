"""Round-robin in-process A/B of search settings on the kept 100K synthetic index (per query,
every config in turn: machine drift hits all alike)."""
import sys, time, numpy as np
from pathlib import Path
sys.path.insert(0, "/work/main/src")
from supergrep.arrays import tune_malloc_for_serving; tune_malloc_for_serving()
from supergrep.index.compressed import CompressedStore, CompressSettings
from supergrep.index.format import connect
from supergrep.bench.search import _queries
d = Path(sys.argv[1])
cfgs = [c for c in sys.argv[2:]]
conn = connect(d, readonly=True)
stores = []
for c in cfgs:
    npb, nc, rr, integer, *par = c.split("/")
    st = CompressedStore(d, 384, CompressSettings(nprobe=int(npb), candidates=int(nc), rerank=int(rr), integer_scores=integer == "i"))
    st.PARALLEL_CANDIDATES = not par or par[0] == "p"
    st.warm(conn); stores.append(st)
view, codec = stores[0]._view_for(conn)
qs = _queries(stores[0], conn, codec, 100, 32, np.random.default_rng(1))
for st in stores: st.search(conn, qs[0], 10)
lat = [[] for _ in cfgs]
for q in qs:
    for i, st in enumerate(stores):
        t = time.perf_counter(); st.search(conn, q, 10); lat[i].append(time.perf_counter() - t)
for c, l in zip(cfgs, lat):
    print(c, "p50 %.2f p95 %.2f" % (1000 * np.median(l), 1000 * np.percentile(l, 95)))
