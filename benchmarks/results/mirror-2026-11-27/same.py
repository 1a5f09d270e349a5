import json, os, sys, pickle
from pathlib import Path
from supergrep.cli.common import make_encoder
from supergrep.config import load_config
from supergrep.encoder.named import model_of_index
from supergrep.encoder.spec import resolve_model
from supergrep.index.project import Index
from supergrep.index import search as S
import supergrep
print(supergrep.__file__, file=sys.stderr)
root = Path(__import__("os").environ.get("STDLIB", "/tmp/sgb/stdlib"))
cfg = load_config(root, None); cfg.encode.device = "cpu"
index = Index(root, None)
if os.environ.get("MIRROR") == "1":
    index.mirror.max_chunks = 10**6; index.mirror.refresh(index.conn)
enc = make_encoder(resolve_model(model_of_index(index.manifest.model)), cfg)
searcher = S.Searcher(index, enc, cfg.search)
qs = [json.loads(l)["query"] for l in open("eval/public/queries.jsonl")]
qs += [json.loads(l)["query"] for l in open("eval/dev/queries.jsonl")]
out = {}
for mode in ("hybrid", "semantic", "lexical"):
    out[mode] = [[(h.chunk_id, h.score, h.semantic_score, h.lexical_score) for h in searcher.search(q, mode=mode)] for q in qs]
pickle.dump(out, open(sys.argv[1], "wb"))
