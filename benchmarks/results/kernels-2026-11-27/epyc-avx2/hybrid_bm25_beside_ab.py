import json, time, os, sys
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
from pathlib import Path
from supergrep.cli.common import make_encoder
from supergrep.config import load_config
from supergrep.encoder.named import model_of_index
from supergrep.encoder.spec import resolve_model
from supergrep.index.project import Index
from supergrep.index import search as S
from supergrep.arrays import tune_malloc_for_serving
tune_malloc_for_serving()
root = Path("/tmp/sgb/stdlib")
cfg = load_config(root, None); cfg.encode.device = "cpu"
index = Index(root, None); index.store.warm(index.conn)
enc = make_encoder(resolve_model(model_of_index(index.manifest.model)), cfg)
searcher = S.Searcher(index, enc, cfg.search)
qs = [json.loads(l)["query"] for l in open("eval/public/queries.jsonl")]
real = S._lexical_pool
def run(beside):
    S._lexical_pool = real if beside else (lambda: None)
    ts, out = [], []
    for q in qs:
        a = time.perf_counter(); h = searcher.search(q, mode="hybrid"); ts.append(time.perf_counter() - a)
        out.append([(x.path, x.start_line) for x in h])
    return np.median(ts) * 1e3, out
run(True); run(False)
for r in range(6):
    a, oa = run(True); b, ob = run(False)
    print("round %d: BM25 beside %.1f ms, before %.1f ms, same results %s" % (r, a, b, oa == ob))
