"""Hard negatives and soft labels from a stronger model: ``supergrep mine-negatives --teacher``.

BM25 negatives share a query's words; a stronger encoder's negatives are code it *nearly*
matches by meaning, and its scores over them say how near each one is. Training the small
model on those scores (``teacher_weight``: listwise KL over [positive, *negatives]) transfers
the teacher's ranking without running it in the training step (ColBERTv2's recipe, with a
bi-encoder teacher instead of a cross-encoder: all-mpnet-base-v2 beats the default MiniLM on
behaviour queries by 6-10 points of P@1, docs/quality.md).

Per pool of ``pool`` training rows (sorted by language, so competitors are in the query's
language), the teacher encodes every query and document, scores all of them with MaxSim
(mean over query tokens of the best document token, the same formula the trainer uses) and
keeps, per query, the highest-scoring documents that are not the answer. Never a negative:
the row's own code, whitespace-equal code, a same-named symbol, the same docstring summary
(as for BM25), and (positive-aware mining, Moreira et al. 2024, "NV-Retriever") any document
scoring above ``max_relative`` x the positive's score: those are more often unlabelled answers
than mistakes. Validation rows are copied unchanged and are never candidates.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from supergrep.corpus.documents import code_document
from supergrep.errors import InputError
from supergrep.train.distill import pad_vectors
from supergrep.train.negatives import negative_object, read_rows, write_mined


@dataclasses.dataclass
class TeacherStats:
    teacher: str = ""
    device: str = ""
    rows: int = 0
    train_rows: int = 0
    with_negatives: int = 0
    negatives: int = 0
    above_threshold: int = 0  # negatives taken above max_relative because too few were below it
    no_match: int = 0  # rows left without negatives (a pool with too few candidates)
    pools: int = 0
    teacher_p_at_1: float = 0.0  # share of queries whose own code the teacher ranks first in its pool
    mean_positive: float = 0.0
    mean_negative: float = 0.0
    seconds_encode: float = 0.0
    seconds_score: float = 0.0
    seconds: float = 0.0
    by_language: dict = dataclasses.field(default_factory=dict)
    output: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _pools(train: list[int], rows: list[dict], size: int, per_query: int, seed: int) -> list[list[int]]:
    """Training rows shuffled within each language, then cut into pools of ``size`` (a last pool
    too small to hold ``per_query`` negatives joins the one before it)."""
    rng = np.random.default_rng(seed)
    order = [train[i] for i in rng.permutation(len(train))]
    order.sort(key=lambda i: str(rows[i].get("language", "")))  # stable: shuffled within a language
    pools = [order[a : a + size] for a in range(0, len(order), size)]
    if len(pools) > 1 and len(pools[-1]) <= per_query:
        pools[-2:] = [pools[-2] + pools[-1]]
    return pools


def _choose(me: int, ranked: np.ndarray, scores: np.ndarray, pool: list[int], facts: list[tuple],
            per_query: int, max_relative: float) -> tuple[list[int], int]:
    """Positions (into ``pool``) of the negatives of the query at position ``me``, best first,
    and how many of them had to come from above the relative threshold."""
    i = pool[me]
    _, query, key, name = facts[i]
    qnorm = query.strip().lower()
    limit = max_relative * scores[me]
    below, above, seen = [], [], {key}
    for p in ranked:
        j = pool[p]
        if j == i:
            continue
        _, jq, jkey, jname = facts[j]
        if jkey in seen or (name and jname == name) or jq.strip().lower() == qnorm:
            continue
        seen.add(jkey)
        (below if scores[p] < limit else above).append(int(p))
        if len(below) == per_query:
            break
    taken = below + above[: per_query - len(below)]
    taken.sort(key=lambda p: -scores[p])
    return taken, max(0, len(taken) - len(below))


def mine_with_teacher(pairs_path: str | Path, output: str | Path, teacher: str, per_query: int = 3,
                      pool: int = 1024, max_relative: float = 0.95, device: str = "auto", split: str = "train",
                      seed: int = 0, query_block: int = 32,
                      progress: Callable[[str], None] | None = None) -> TeacherStats:
    """Add the teacher's hard negatives (``negatives``) and its MaxSim scores
    (``teacher_scores`` = [positive, *negatives]) to every row of ``split``; write all rows, in
    order, to ``output`` (temp file + rename)."""
    import torch

    from supergrep.backends.torch_backend import pick_device
    from supergrep.backends.torch_ops import TorchOps
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model
    from supergrep.train.losses.maxsim import maxsim_scores

    if per_query < 1:
        raise InputError("--per-query must be at least 1")
    if pool <= per_query:
        raise InputError(f"--pool ({pool}) must be larger than --per-query ({per_query})")
    if not 0 < max_relative <= 1:
        raise InputError(f"--max-relative must be in (0, 1], got {max_relative}")
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    rows, train, facts = read_rows(pairs_path, split)
    if len(train) <= per_query:
        raise InputError(f"{pairs_path}: {len(train)} '{split}' rows; the teacher needs more than --per-query")
    spec = resolve_model(teacher)
    dev = pick_device(device)
    ops = TorchOps(dev)
    encoder = Encoder(spec, backend="torch", device=dev)
    stats = TeacherStats(teacher=spec.name, device=str(dev), rows=len(rows), train_rows=len(train),
                         output=str(output))
    found: dict[int, tuple[list[int], list[float]]] = {}
    firsts, pos_sum, neg_sum = 0, 0.0, 0.0
    pools = _pools(train, rows, pool, per_query, seed)
    stats.pools = len(pools)
    for n, members in enumerate(pools):
        t1 = time.perf_counter()
        docs = [code_document(rows[i]["code"], str(rows[i].get("path", "")), str(rows[i].get("symbol", "")),
                              str(rows[i].get("language", ""))) for i in members]
        q, qm = pad_vectors(encoder.encode_queries([rows[i]["query"] for i in members]), torch, dev)
        d, dm = pad_vectors(encoder.encode_documents(docs), torch, dev)
        t2 = time.perf_counter()
        with torch.no_grad():
            scores = torch.cat([maxsim_scores(ops, q[a : a + query_block], qm[a : a + query_block], d, dm)
                                for a in range(0, len(members), query_block)]).float().cpu().numpy()
        stats.seconds_encode += t2 - t1
        stats.seconds_score += time.perf_counter() - t2
        ranked_all = np.argsort(-scores, axis=1, kind="stable")
        for r, i in enumerate(members):
            firsts += int(ranked_all[r, 0] == r)
            taken, above = _choose(r, ranked_all[r], scores[r], members, facts, per_query, max_relative)
            if len(taken) < per_query:
                continue
            stats.above_threshold += above
            pos_sum += float(scores[r, r])
            neg_sum += float(scores[r, taken].sum())
            found[i] = ([members[p] for p in taken], [float(scores[r, r])] + [float(scores[r, p]) for p in taken])
        say(f"pool {n + 1}/{len(pools)}: {len(members)} rows, encode {t2 - t1:.1f} s")
    del encoder
    langs = Counter(str(rows[i].get("language", "")) for i in found)
    write_mined(output, rows, train, {i: {"negatives": [negative_object(rows[j]) for j in negs],
                                          "teacher_scores": [round(s, 5) for s in scores_i]}
                                      for i, (negs, scores_i) in found.items()})
    stats.with_negatives = len(found)
    stats.negatives = len(found) * per_query
    stats.no_match = len(train) - len(found)
    stats.teacher_p_at_1 = round(firsts / len(train), 4)
    stats.mean_positive = round(pos_sum / max(1, len(found)), 4)
    stats.mean_negative = round(neg_sum / max(1, len(found) * per_query), 4)
    stats.by_language = dict(langs)
    stats.seconds_encode = round(stats.seconds_encode, 1)
    stats.seconds_score = round(stats.seconds_score, 1)
    stats.seconds = round(time.perf_counter() - t0, 1)
    return stats
