"""How many exact-MaxSim near-ties sit at the top-10 boundary on stdlib; tie-aware recall of 128x2."""
import json, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/src")
IDX = Path("/tmp/sgx/idx-stdlib")
segs = sorted(p for p in (IDX / "vectors").glob("seg-*.npy") if "layout" not in p.name)
Xs, ids, starts = [], [], []; off = 0
for p in segs:
    lay = np.load(str(p).replace(".npy", ".layout.npy")); v = np.load(p)
    Xs.append(v); ids.append(lay[:, 0]); starts.append(lay[:, 1] + off); off += len(v)
X = np.concatenate(Xs).astype(np.float32); del Xs
ids = np.concatenate(ids); starts = np.concatenate(starts); N = len(X)
z = np.load(IDX / "bench-queries.npz"); Q = [z[k] for k in sorted(z.files, key=int)]
qtok = np.concatenate(Q).astype(np.float32); qoff = np.cumsum([0] + [len(q) for q in Q])
def allscores(Xh):
    nd = len(starts); S = np.zeros((nd, len(qtok)), np.float32)
    bounds = list(range(0, nd, 200)) + [nd]
    for a, b in zip(bounds[:-1], bounds[1:]):
        lo = starts[a]; hi = starts[b] if b < nd else N
        S[a:b] = np.maximum.reduceat(Xh[lo:hi] @ qtok.T, starts[a:b] - lo, axis=0)
    return np.stack([S[:, qoff[i]:qoff[i+1]].sum(1) for i in range(len(Q))])  # (q, docs)
t=time.time(); E = allscores(X); print("exact", time.time()-t, flush=True)
np.save("/tmp/exact_scores.npy", E)  # kept for follow-up studies
srt = -np.sort(-E, axis=1)
s10 = srt[:, 9]
for eps in [0, 1e-6, 1e-4, 1e-3, 1e-2]:
    n = ((E >= (s10 - eps * np.abs(s10))[:, None]).sum(1))
    print(f"eps {eps}: docs scoring >= 10th*(1-eps): mean {n.mean():.2f}, queries with >10: {(n>10).sum()}/{len(Q)}")
# relative gap between 10th and 11th
gap = (srt[:, 9] - srt[:, 10]) / np.abs(srt[:, 9])
print("rel gap 10th-11th quantiles", np.quantile(gap, [0.1, 0.25, 0.5, 0.75]))
# duplicate texts: identical score at exact equality in top 20
dup = [(np.unique(srt[i, :20]).size) for i in range(len(Q))]
print("distinct among top20 mean", np.mean(dup))
