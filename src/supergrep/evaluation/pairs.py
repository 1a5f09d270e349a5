"""CodeSearchNet-style pair retrieval: find each held-out docstring's code among N candidates.

Pairs files are JSON Lines, one object per line with at least ``query`` (the docstring or
question) and ``code`` (the code, without its docstring); ``path``, ``symbol`` and ``language``
are optional and, when present, go into the document text exactly as the indexer builds it.
The pairs are shuffled with a fixed seed and cut into groups of ``candidates``; every query is
ranked against the codes of its own group (its own code and N-1 distractors), as in
CodeSearchNet (Husain et al., 2019), which used N = 1000.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING

import numpy as np

from supergrep.corpus.documents import Pair, load_pairs
from supergrep.errors import InputError
from supergrep.scoring.maxsim import maxsim_packed

__all__ = ["Pair", "evaluate_pairs", "load_pairs", "rank_in_group"]

if TYPE_CHECKING:
    from supergrep.encoder.encoder import Encoder


def behaviour_pairs(pairs: list[Pair]) -> list[Pair]:
    """The pairs with every query word its code already spells dropped (identifiers, symbol,
    path); pairs left with fewer than 3 words are left out. A held-out proxy for queries that
    describe behaviour without naming it (`eval-pairs --behaviour`)."""
    from supergrep.train.augment import drop_identifier_words

    dropped = ((p, drop_identifier_words(p.query, p.document())) for p in pairs)
    return [dataclasses.replace(p, query=q) for p, q in dropped if q is not None]


def rank_in_group(queries: list[np.ndarray], docs: list[np.ndarray]) -> list[int]:
    """For query i, the 1-based rank of doc i among all docs by MaxSim (ties count against it).

    >>> e = np.eye(3, dtype=np.float32)
    >>> rank_in_group([e[:1], e[1:2]], [e[:1], e[1:2]])
    [1, 1]
    """
    lengths = np.array([len(d) for d in docs])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    packed = np.concatenate(docs).astype(np.float32)  # (sum of doc tokens, dim)
    ranks = []
    for i, q in enumerate(queries):
        scores = maxsim_packed(q, packed, starts)  # (n_docs,)
        ranks.append(1 + int((scores > scores[i]).sum()) + int((scores[:i] == scores[i]).sum()))
    return ranks


def evaluate_pairs(encoder: Encoder, pairs: list[Pair], candidates: int = 100, seed: int = 0,
                   limit: int | None = None) -> dict:
    """MRR and recall@{1,5,10} of finding each pair's code among ``candidates`` codes.

    Args:
        candidates: Group size N (each query's code plus N-1 distractors). A last group
            smaller than N is dropped, so every query faces the same odds.
        limit: Use at most this many pairs (after shuffling).
    """
    if candidates < 2:
        raise InputError("--candidates must be at least 2")
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    if limit:
        order = order[:limit]
    n_groups = len(order) // candidates
    if n_groups == 0:
        raise InputError(f"only {len(order)} pairs: need at least --candidates {candidates}")
    ranks: list[int] = []
    for g in range(n_groups):
        group = [pairs[i] for i in order[g * candidates : (g + 1) * candidates]]
        q = encoder.encode_queries([p.query for p in group])
        d = encoder.encode_documents([p.document() for p in group])
        ranks += rank_in_group(q, d)
    r = np.array(ranks)
    return {
        "n": len(ranks),
        "candidates": candidates,
        "mrr": float((1.0 / r).mean()),
        "r@1": float((r <= 1).mean()),
        "r@5": float((r <= 5).mean()),
        "r@10": float((r <= 10).mean()),
    }
