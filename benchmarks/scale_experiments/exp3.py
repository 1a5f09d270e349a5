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
for K in (1024, 4096):
    samp=V[rng.choice(len(V), min(len(V), 64*K), replace=False)]
    t=time.time(); km=faiss.Kmeans(384,K,niter=8,seed=1,spherical=True); km.train(samp); C=km.centroids
    codes=assign(V,C); R=V-C[codes]
    print('K',K,'kmeans',round(time.time()-t),'resid var', (R**2).sum(1).mean(), flush=True)
    ev,P=np.linalg.eigh(np.cov(R[::4].T)); ev=ev[::-1]; P=P[:,::-1]
    Rr=R@P
    for budget in (256, 304, 384, 512):
        # greedy water-filling with per-dim bits in {0,1,2,4}: marginal gain per bit
        bits=np.zeros(384,int); used=0
        dist=ev.copy()
        def gain(d):
            b=bits[d]; nb={0:1,1:2,2:4,4:None}[b]
            if nb is None: return -1,0
            return (ev[d]*(4.0**-b - 4.0**-nb))/(nb-b), nb-b
        import heapq
        h=[(-gain(d)[0], d) for d in range(384)]; heapq.heapify(h)
        while h:
            g,d=heapq.heappop(h)
            gg,cost=gain(d)
            if gg<=0 or used+cost>budget: continue
            bits[d]+=cost; used+=cost
            ng,_=gain(d)
            if ng>0: heapq.heappush(h,(-ng,d))
        # quantize each rotated dim with its bits using quantiles
        Rq=np.zeros_like(Rr)
        for d in range(384):
            b=bits[d]
            if b==0: Rq[:,d]=np.median(Rr[::8,d]); continue
            lv=1<<b; col=Rr[:,d]; s=col[::8]
            cut=np.quantile(s, np.arange(1,lv)/lv); w=np.quantile(s,(np.arange(lv)+.5)/lv)
            Rq[:,d]=w[np.searchsorted(cut,col)]
        X=C[codes]+Rq@P.T
        print(' budget bits',budget,'bytes',budget//8+2,'alloc',np.bincount(bits,minlength=5)[[0,1,2,4]],'cos',((X*V).sum(1)/np.linalg.norm(X,axis=1)).mean(),'recall',recall(topk_all(X)), flush=True)
