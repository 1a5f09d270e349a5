"""Transform coding of residuals: recall@10 (every chunk decoded) vs bytes per vector, stdlib."""
import json, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/src")
from supergrep.index.codec import ResidualCodec, assign, uniform_levels, lloyd_max

IDX = Path("/tmp/sgx/idx-stdlib")
t0 = time.time()
segs = sorted(p for p in (IDX / "vectors").glob("seg-*.npy") if "layout" not in p.name)
Xs, ids, starts = [], [], []
off = 0
for p in segs:
    lay = np.load(str(p).replace(".npy", ".layout.npy"))
    v = np.load(p)
    Xs.append(v)
    ids.append(lay[:, 0]); starts.append(lay[:, 1] + off)
    off += len(v)
X = np.concatenate(Xs).astype(np.float32); del Xs
ids = np.concatenate(ids); starts = np.concatenate(starts)
N = len(X)
print("loaded", X.shape, len(ids), time.time() - t0, flush=True)
z = np.load(IDX / "bench-queries.npz"); Q = [z[k] for k in sorted(z.files, key=int)]
exact_top = json.loads((IDX / f"bench-exact-top10-{N}.json").read_text())[0]
qtok = np.concatenate(Q).astype(np.float32); qoff = np.cumsum([0] + [len(q) for q in Q])
print("queries", len(Q), qtok.shape, flush=True)

def recall(Xh):
    # MaxSim of every doc for every query
    nd = len(starts)
    S = np.zeros((nd, len(qtok)), np.float32)
    bounds = list(range(0, nd, 200)) + [nd]
    for a, b in zip(bounds[:-1], bounds[1:]):
        lo = starts[a]; hi = starts[b] if b < nd else N
        sc = Xh[lo:hi] @ qtok.T
        S[a:b] = np.maximum.reduceat(sc, starts[a:b] - lo, axis=0)
    rec = []
    for qi in range(len(Q)):
        tot = S[:, qoff[qi]:qoff[qi + 1]].sum(1)
        top = ids[np.argpartition(-tot, 10)[:10]]
        rec.append(len(set(top.tolist()) & set(exact_top[qi])) / 10)
    return float(np.mean(rec))

rng = np.random.default_rng(0)
sample = X[np.sort(rng.choice(N, 131072, replace=False))]
if "--check" in sys.argv:
    print("exact check", recall(X), flush=True)
t = time.time()
base = ResidualCodec.train(sample, nbits=4, n_vectors=N)
print("k", base.n_centroids, "train", time.time() - t, flush=True)
t = time.time(); codes = assign(X, base.centroids); print("assign", time.time() - t, flush=True)
C = base.centroids
R = X - C[codes]
rs = R[np.sort(rng.choice(N, 32768, replace=False))]
res = {}

def finish(name, Rh, bytes_per):
    Xh = C[codes] + Rh
    Xh /= np.maximum(np.linalg.norm(Xh, axis=1, keepdims=True), 1e-6)
    mse = float(((Rh - R) ** 2).sum(1).mean())
    r = recall(Xh)
    res[name] = dict(bytes=bytes_per, mse=mse, recall=r)
    print(name, res[name], flush=True)

def quant_cols(Z, zs, bits, kind="uniform"):
    out = np.zeros_like(Z)
    for b in sorted(set(bits)):
        if b == 0:
            continue
        cols = np.flatnonzero(np.asarray(bits) == b)
        L = 1 << b
        start = np.quantile(zs[:, cols], (np.arange(L) + 0.5) / L, axis=0).T
        fit = uniform_levels if kind == "uniform" else lloyd_max
        cut, w = fit(zs[:, cols], start, 20)
        for j, c in enumerate(cols):
            bk = np.searchsorted(cut[j], Z[:, c], side="left")
            out[:, c] = w[j][bk]
    return out

# per-dimension baselines
for nb in (4, 2, 1):
    finish(f"perdim-{nb}bit", quant_cols(R, rs, [nb] * 384), nb * 48 + 4)

# PCA rotation of the residuals + bit allocation (greedy reverse water-filling)
cov = rs.T.astype(np.float64) @ rs / len(rs)
ev, V = np.linalg.eigh(cov); order = np.argsort(ev)[::-1]; ev, V = ev[order], V[:, order].astype(np.float32)
print("explained by top 32/64/128/192:", [round(float(ev[:k].sum() / ev.sum()), 3) for k in (32, 64, 128, 192)], flush=True)
Z = R @ V; zs = rs @ V

def alloc(total_bits, allowed=(0, 1, 2, 4), var=ev):
    bits = np.zeros(len(var), int)
    dist = var.copy()
    used = 0
    while True:
        best, gain_best, cost_best = None, 0, 0
        for i in range(len(var)):
            nxt = [a for a in allowed if a > bits[i]]
            if not nxt:
                continue
            nb = nxt[0]; cost = nb - bits[i]
            if used + cost > total_bits:
                continue
            g = (dist[i] - var[i] * 4.0 ** (-nb)) / cost
            if g > gain_best:
                best, gain_best, cost_best = i, g, cost
        if best is None:
            break
        bits[best] += cost_best; dist[best] = var[best] * 4.0 ** (-bits[best]); used += cost_best
    return bits

for m, nb in ((64, 4), (96, 4), (128, 4), (128, 2), (192, 2), (256, 1), (384, 1)):
    bits = [nb] * m + [0] * (384 - m)
    finish(f"pca-top{m}-{nb}bit", quant_cols(Z, zs, bits) @ V.T, m * nb // 8 + 4)
for total in (288, 384, 512):
    for allowed in ((0, 1, 2, 4), (0, 1, 2, 3, 4, 5, 6, 7, 8)):
        b = alloc(total, allowed)
        tag = "".join(map(str, allowed))
        hist = {int(k): int((b == k).sum()) for k in np.unique(b)}
        print("alloc", total, tag, hist, flush=True)
        Zh = quant_cols(Z, zs, b.tolist())
        finish(f"pca-{total}b-{tag}", Zh @ V.T, total // 8 + 4)
json.dump(res, open("/tmp/tc/res.json", "w"), indent=1)
