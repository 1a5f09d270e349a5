import time, os
os.environ.setdefault("OMP_WAIT_POLICY","PASSIVE"); os.environ.setdefault("OPENBLAS_NUM_THREADS","1")
from pathlib import Path
import numpy as np
from supergrep.config import Config
from supergrep.cli.common import make_encoder
from supergrep.encoder.spec import resolve_model
from supergrep.index.project import Index
from supergrep.index.search import Searcher
from supergrep.index import compressed
from supergrep.evaluation.queries import load_queries
root=Path('/tmp/sgb/stdlib')
cfg=Config(); cfg.encode.device='cpu'
enc=make_encoder(resolve_model('minilm-l3'), cfg)
idx=Index(root, None, cache_bytes=2048*2**20)
s=Searcher(idx, enc, cfg.search)
qs=[q.query for q in load_queries(Path('eval/public/queries.jsonl'))][:40]
for q in qs[:3]: s.search(q, mode='hybrid')
pool=compressed.helper_pool()
res={}
same=True
for r in range(3):
    for name in (['serial','parallel'] if r%2==0 else ['parallel','serial']):
        compressed._POOL = False if name=='serial' else pool
        for mode in ['semantic','hybrid']:
            ts=[]; out=[]
            for q in qs:
                t=time.perf_counter(); h=s.search(q, mode=mode); ts.append((time.perf_counter()-t)*1e3); out.append([(x.path, x.start_line) for x in h])
            res.setdefault((name,mode),[]).append(np.percentile(ts,50))
            res.setdefault(('out',name,mode), out)
for k,v in res.items():
    if k[0]!='out': print(k, ' '.join('%.1f'%x for x in v))
print('identical results:', all(res[('out','serial',m)]==res[('out','parallel',m)] for m in ['semantic','hybrid']))
