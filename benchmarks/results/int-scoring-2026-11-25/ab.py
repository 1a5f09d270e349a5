import json, sys, time
import numpy as np
from pathlib import Path
sys.path.insert(0, "/work/main/src")
from supergrep.index.compressed import CompressedStore, CompressSettings
from supergrep.index.format import connect
from supergrep.index import intmm
work = Path("/tmp/q9/conv")
z = np.load("/tmp/sgc/exact/bench-queries.npz"); Q = [np.ascontiguousarray(z[k], np.float32) for k in sorted(z.files, key=int)]
truth = json.loads(Path("/tmp/sgc/exact/bench-exact-top10-1709497.json").read_text())[0]
conn = connect(work, readonly=True)
st = CompressedStore(work, 384, CompressSettings())
FLAGS = (True,) if __import__("os").environ.get("INTONLY") else (False, True)
configs = [tuple(map(int, c.split("/"))) for c in sys.argv[1:]] or [(8, 0, 64)]
print("backend", intmm.backend())
for npb, nc, rr in configs:
    st.settings.nprobe, st.settings.candidates, st.settings.rerank = npb, nc, rr
    for rep in range(int(__import__("os").environ.get("REPS", 2))):
        for flag in FLAGS:
            st.settings.integer_scores = flag
            st.search(conn, Q[0], 10)
            lat, rec = [], []
            for q, w in zip(Q, truth):
                t = time.perf_counter(); got = st.search(conn, q, 10)[0].tolist(); lat.append(time.perf_counter() - t)
                rec.append(len(set(got) & set(w)) / 10)
            print(f"{npb}/{nc}/{rr} int={flag} recall {np.mean(rec):.4f} p50 {1000*np.median(lat):.2f} p95 {1000*np.percentile(lat,95):.2f}", flush=True)
