# ruff: noqa  (one-off experiment scripts, kept as they were run)
import sys
import time

import faiss
import numpy as np

sys.path.insert(0,'src')
from supergrep.index.codec import assign
from supergrep.scoring.maxsim import maxsim_packed, top_k

V=np.load('.cache/idx-stdlib/vectors/seg-00000001.npy').astype(np.float32)
L=np.load('.cache/idx-stdlib/vectors/seg-00000001.layout.npy')
qz=np.load('.cache/exp/queries.npz'); Q=[qz[k] for k in qz.files]
starts=L[:,1]
def topk_all(vecs): return [top_k(maxsim_packed(q, vecs, starts),10) for q in Q]
exact=topk_all(V)
def recall(got): return np.mean([len(set(a)&set(b))/10 for a,b in zip(got,exact)])
rng=np.random.default_rng(0)
# raw spectrum
mu=V.mean(0); ev=np.linalg.eigvalsh(np.cov((V-mu)[::10].T))[::-1]
print('total var', ev.sum(), 'top16 frac', ev[:16].sum()/ev.sum(), 'top64', ev[:64].sum()/ev.sum(), 'top128', ev[:128].sum()/ev.sum(), 'mean norm2 of mu', (mu**2).sum(), flush=True)
for noise in (0.02, 0.01):
    N=V+rng.standard_normal(V.shape).astype(np.float32)*noise
    print('noise', noise, 'cos', ((N*V).sum(1)/np.linalg.norm(N,axis=1)).mean(), 'recall', recall(topk_all(N)), flush=True)
K=1024
samp=V[rng.choice(len(V), 65536, replace=False)]
km=faiss.Kmeans(384,K,niter=8,seed=1,spherical=True); km.train(samp); C=km.centroids
codes=assign(V,C); R=V-C[codes]
ev2,vecs2=np.linalg.eigh(np.cov(R[::4].T)); ev2=ev2[::-1]; vecs2=vecs2[:,::-1]
print('resid total var', ev2.sum(), 'top16', ev2[:16].sum()/ev2.sum(), 'top64', ev2[:64].sum()/ev2.sum(), 'top128', ev2[:128].sum()/ev2.sum(), flush=True)
Rr=R@vecs2  # rotated
# PQ on residuals
for M in (32, 48):
    pq=faiss.ProductQuantizer(384, M, 8)
    t=time.time(); pq.train(np.ascontiguousarray(Rr[rng.choice(len(R),65536,replace=False)]))
    cd=pq.compute_codes(np.ascontiguousarray(Rr)); Rd=pq.decode(cd)@vecs2.T
    X=C[codes]+Rd
    print('PQ M',M,'bytes',M+2,'train',round(time.time()-t),'cos',((X*V).sum(1)/np.linalg.norm(X,axis=1)).mean(),'recall',recall(topk_all(X)), flush=True)
