# ruff: noqa  (one-off experiment scripts, kept as they were run)
import sys
import time

import numpy as np

sys.path.insert(0,'src')
from supergrep.index.codec import ResidualCodec, pool_tokens
from supergrep.scoring.maxsim import maxsim_packed, top_k

V=np.load('.cache/idx-stdlib/vectors/seg-00000001.npy').astype(np.float32)
L=np.load('.cache/idx-stdlib/vectors/seg-00000001.layout.npy')
qz=np.load('.cache/exp/queries.npz'); Q=[qz[k] for k in qz.files]
starts=L[:,1]
def topk_all(vecs, starts):
    return [top_k(maxsim_packed(q, vecs, starts),10) for q in Q]
exact=topk_all(V, starts)
def recall(got): return np.mean([len(set(a)&set(b))/10 for a,b in zip(got,exact)])
print('n', len(V), 'chunks', len(L), flush=True)
rng=np.random.default_rng(0)
# pooled
t=time.time()
docs=[V[o:o+n] for _,o,n in L]
pooled=[pool_tokens(d,2.0) for d in docs]
print('pool time', time.time()-t, 'vectors', sum(len(p) for p in pooled), flush=True)
P=np.concatenate(pooled); pst=np.concatenate([[0],np.cumsum([len(p) for p in pooled])[:-1]])
print('pooled exact recall', recall(topk_all(P,pst)), flush=True)
for K in (512, 2048):
  for nb in (1,2):
    t=time.time()
    samp=V[rng.choice(len(V), min(len(V),64*K), replace=False)]
    c=ResidualCodec.train(samp, nbits=nb, n_centroids=K, niter=8)
    tt=time.time()-t
    codes,packed=c.encode(V); R=c.decode(codes,packed)
    cos=(R*V).sum(1)/np.linalg.norm(R,axis=1)
    r1=recall(topk_all(R,starts))
    codes,packed=c.encode(P); RP=c.decode(codes,packed)
    r2=recall(topk_all(RP,pst))
    print(f'K={K} nbits={nb} train {tt:.0f}s cos {cos.mean():.4f} recall {r1:.3f} pooled+compressed {r2:.3f}', flush=True)
