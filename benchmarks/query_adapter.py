"""Issue 7 probe: tune the QUERY side only, against the raw model's frozen document vectors.

Every earlier sweep (docs/training.md) tuned one LoRA shared by queries and documents and lost to
raw all-MiniLM-L6-v2: the documents' vectors moved toward our labels' style and the raw model's
code skill went with them. Here the documents stay the raw model's (an index built with the raw
model is searched unchanged) and only the query encoder learns, with in-batch MaxSim InfoNCE over
frozen document vectors and a KL term that keeps its in-batch scores near the raw query encoder's.
Cheap enough for a CPU: the documents are encoded once, without gradients.

    .venv/bin/python benchmarks/query_adapter.py --pairs pairs.jsonl --out /tmp/qa/run \\
        --queries eval/dev/queries.jsonl --corpus joblib=.cache/dev-corpora/joblib-1.6.0 ...

Writes ``adapter.safetensors`` (the query LoRA), ``log.jsonl`` (loss per step) and
``eval.json`` / ``eval.md`` (the eval harness, raw vs adapted queries, same indexes).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from supergrep.backends.torch_ops import TorchOps
from supergrep.config import Config
from supergrep.corpus.documents import code_document, load_pairs
from supergrep.encoder.encoder import Encoder, padded_batch
from supergrep.encoder.spec import resolve_model
from supergrep.evaluation.evaluate import markdown_table, run_eval, summary_rows
from supergrep.evaluation.queries import load_queries
from supergrep.train.distill import pad_vectors
from supergrep.train.losses.maxsim import maxsim_scores  # the trainer's: mean over query tokens

OPS = TorchOps(torch.device("cpu"))


def lora_copy(model: torch.nn.Module, r: int, alpha: float, seed: int) -> torch.nn.Module:
    from supergrep.backends.adapters import LoRAConfig
    from supergrep.backends.torch_lora import linear_to_lora_layers, lora_modules

    q = copy.deepcopy(model)
    for p in q.parameters():
        p.requires_grad_(False)
    cfg = LoRAConfig(r=r, lora_alpha=alpha, lora_dropout=0.0)
    linear_to_lora_layers(q, cfg, q.config.model_type, seed=seed)
    for m in lora_modules(q).values():
        for n, p in m.named_parameters():
            if "lora" in n:
                p.requires_grad_(True)
    return q


def query_vectors(model, enc: Encoder, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, dim) unit token vectors and the (B, L) mask of the vectors an index would keep."""
    ids = enc.tokenizer(texts, "query")
    input_ids, mask, keep = padded_batch(ids, "query", enc.spec.settings, enc.tokenizer)
    hidden = model(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    return F.normalize(hidden.float(), dim=-1), torch.from_numpy(keep)


class AdaptedEncoder(Encoder):
    """The raw encoder (same fingerprint: the raw index is reused) with queries through ``qmodel``."""

    def __init__(self, raw: Encoder, qmodel: torch.nn.Module):  # noqa: D107 - shares raw's parts
        self.__dict__.update(raw.__dict__)
        self.qmodel = qmodel

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        with torch.no_grad():
            v, keep = query_vectors(self.qmodel, self, texts)
        return [v[i][keep[i]].numpy() for i in range(len(texts))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=6000, help="training pairs (their documents are encoded once)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.05, help="of the scores divided by query length")
    ap.add_argument("--distill", type=float, default=1.0, help="KL to the raw query encoder's in-batch scores")
    ap.add_argument("--doc-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", default="")
    ap.add_argument("--corpus", action="append", default=[])
    ap.add_argument("--modes", default="semantic,hybrid")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--teacher", default="", help="a named model (e.g. mpnet): its in-batch MaxSim scores, from its "
                    "own token vectors of the same texts (encoded once), as soft labels (--teacher-weight)")
    ap.add_argument("--teacher-weight", type=float, default=1.0)
    ap.add_argument("--infonce", type=float, default=1.0, help="weight of the docstring labels' InfoNCE (0: the "
                    "teacher's scores alone)")
    ap.add_argument("--group-by", choices=["none", "dir"], default="none",
                    help="dir: pairs taken whole directories at a time and each batch drawn from consecutive "
                         "directories, so the in-batch negatives share the positive's module, names and vocabulary")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    raw = Encoder(resolve_model(None), backend="torch", device="cpu", threads=args.threads)
    base = raw.backend.model.float().eval()
    pairs = [p for p in load_pairs(args.pairs, split="train") if p.query.strip() and p.code.strip()]
    random.Random(args.seed).shuffle(pairs)
    groups: list[list[int]] = []
    if args.group_by == "dir":  # whole directories (of >= 4 pairs) until n, each kept contiguous
        by_dir: dict[str, list] = {}
        for p in pairs:
            by_dir.setdefault(f"{p.repo}/{Path(p.path).parent}", []).append(p)
        keys = [k for k in by_dir if len(by_dir[k]) >= 4]
        random.Random(args.seed).shuffle(keys)
        chosen: list = []
        for k in keys:
            if len(chosen) >= args.n:
                break
            groups.append(list(range(len(chosen), len(chosen) + len(by_dir[k]))))
            chosen += by_dir[k]
        pairs = chosen
        print(f"{len(pairs)} pairs from {len(groups)} directories", flush=True)
    else:
        pairs = pairs[: args.n]
    t0 = time.perf_counter()
    docs = raw.encode_documents([code_document(p.code, p.path, p.symbol, p.language) for p in pairs])
    docs = [d[: args.doc_tokens] for d in docs]
    t_docs = time.perf_counter() - t0
    print(f"{len(pairs)} documents encoded in {t_docs:.0f} s", flush=True)
    t_docs_teacher, t_vecs = 0.0, None
    if args.teacher:  # the teacher's token vectors of every query and document, once, no gradients
        t0 = time.perf_counter()
        teacher_enc = Encoder(resolve_model(args.teacher), backend="torch", device="cpu", threads=args.threads)
        t_vecs = (teacher_enc.encode_queries([p.query for p in pairs]),
                  [v[: args.doc_tokens] for v in teacher_enc.encode_documents(
                      [code_document(p.code, p.path, p.symbol, p.language) for p in pairs])])
        del teacher_enc
        t_docs_teacher = time.perf_counter() - t0
        print(f"teacher {args.teacher}: {len(pairs)} queries and documents encoded in {t_docs_teacher:.0f} s", flush=True)

    qmodel = lora_copy(base, args.r, 2 * args.r, args.seed)
    params = [p for p in qmodel.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    log = (out / "log.jsonl").open("w")
    t0 = time.perf_counter()
    order: list[int] = []
    for step in range(args.steps):
        if groups:  # consecutive directories, their order reshuffled each pass
            if len(order) < args.batch:
                perm = rng.permutation(len(groups))
                order += [i for g in perm for i in groups[g]]
            idx, order = np.array(order[: args.batch]), order[args.batch:]
        else:
            idx = rng.choice(len(pairs), size=args.batch, replace=False)
        texts = [pairs[i].query for i in idx]
        d, dk = pad_vectors([docs[i] for i in idx], torch, "cpu")
        with torch.no_grad():
            rq, rk = query_vectors(base, raw, texts)
            teacher = maxsim_scores(OPS, rq, rk, d, dk)
            if t_vecs is not None:
                tq, tqk = pad_vectors([t_vecs[0][i] for i in idx], torch, "cpu")
                td, tdk = pad_vectors([t_vecs[1][i] for i in idx], torch, "cpu")
                external = maxsim_scores(OPS, tq, tqk, td, tdk)
        lr = args.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + np.cos(np.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        q, qk = query_vectors(qmodel, raw, texts)
        logits = maxsim_scores(OPS, q, qk, d, dk) / args.temperature
        ce = F.cross_entropy(logits, torch.arange(args.batch))
        kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(teacher / args.temperature, -1),
                      log_target=True, reduction="batchmean")
        loss = args.infonce * ce + args.distill * kl
        if t_vecs is not None:
            tkl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(external / args.temperature, -1),
                           log_target=True, reduction="batchmean")
            loss = loss + args.teacher_weight * tkl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = (logits.argmax(-1) == torch.arange(args.batch)).float().mean().item()
        racc = (teacher.argmax(-1) == torch.arange(args.batch)).float().mean().item()
        rec = {"step": step, "ce": ce.item(), "kl": kl.item(), "acc": acc, "raw_acc": racc, "lr": lr}
        if t_vecs is not None:
            rec["teacher_kl"] = tkl.item()
            rec["teacher_acc"] = (external.argmax(-1) == torch.arange(args.batch)).float().mean().item()
        log.write(json.dumps(rec) + "\n")
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step}: ce {ce.item():.3f} kl {kl.item():.3f} acc {acc:.3f} (raw {racc:.3f}) "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    log.close()
    t_train = time.perf_counter() - t0
    from safetensors.torch import save_file

    from supergrep.backends.torch_lora import adapter_state

    save_file({k: v.contiguous() for k, v in adapter_state(qmodel).items()}, str(out / "adapter.safetensors"))
    qmodel.eval()

    if not args.queries:
        return
    corpora = dict(c.split("=", 1) for c in args.corpus)
    queries = load_queries(args.queries)
    modes = args.modes.split(",")
    results = run_eval(queries, {k: Path(v) for k, v in corpora.items()},
                       [lambda: raw, lambda: AdaptedEncoder(raw, qmodel)], modes, Config(),
                       labels=["raw", "query-adapted"])
    rows = summary_rows(results)
    (out / "eval.json").write_text(json.dumps({"args": vars(args), "docs_s": t_docs, "teacher_s": t_docs_teacher,
                                               "train_s": t_train,
                                               "rows": rows}, indent=1))
    md = markdown_table(rows)
    (out / "eval.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
