# ruff: noqa  (one-off experiment scripts, kept as they were run)
import json
import sys

import numpy as np

sys.path.insert(0,'src')
from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model

qs=[json.loads(l)['query'] for l in open('eval/public/queries.jsonl')]
enc=Encoder(resolve_model(None), device='cpu')
vecs=enc.encode_queries(qs)
np.savez('.cache/exp/queries.npz', *vecs)
print(len(vecs), [v.shape for v in vecs[:5]])
