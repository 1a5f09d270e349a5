"""Hybrid fusion of the semantic and lexical rankings."""

from __future__ import annotations

from collections.abc import Sequence


def weighted_rrf(rankings: Sequence[Sequence[int]], weights: Sequence[float], k: int = 60) -> dict[int, float]:
    """Weighted reciprocal-rank fusion (Cormack et al., 2009): ``sum_i w_i / (k + rank_i)``.

    Args:
        rankings: Each a list of ids, best first (rank 1 = first).
        weights: One weight per ranking.
        k: Damping constant; larger k flattens the head of each ranking.

    Returns:
        id -> fused score (higher is better).

    >>> s = weighted_rrf([[7, 8], [8, 9]], [1.0, 1.0], k=0)
    >>> sorted(s.items())  # 8: 1/2 + 1/1
    [(7, 1.0), (8, 1.5), (9, 0.5)]
    """
    scores: dict[int, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        if w == 0:
            continue
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return scores


def minmax(values: dict[int, float]) -> dict[int, float]:
    """Scale scores to [0, 1] (all equal -> all 1).

    >>> minmax({1: 2.0, 2: 4.0, 3: 3.0})
    {1: 0.0, 2: 1.0, 3: 0.5}
    """
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    if hi == lo:
        return {d: 1.0 for d in values}
    return {d: (v - lo) / (hi - lo) for d, v in values.items()}


def score_fusion(semantic: dict[int, float], lexical: dict[int, float], semantic_weight: float,
                 lexical_weight: float) -> dict[int, float]:
    """Score-level fusion over the union of both candidate lists.

    The semantic scores (exact MaxSim, known for every candidate) are min-max scaled over the
    candidates; BM25 scores are divided by the query's best BM25 score (BM25 has a natural
    zero, so a candidate BM25 did not match gets 0). Then a weighted sum.

    Args:
        semantic: id -> MaxSim score, for every candidate.
        lexical: id -> BM25 score (> 0), for the candidates BM25 matched.

    >>> out = score_fusion({1: 10.0, 2: 12.0, 3: 11.0}, {1: 4.0, 3: 2.0}, 1.0, 0.5)
    >>> {k: round(v, 3) for k, v in sorted(out.items())}
    {1: 0.5, 2: 1.0, 3: 0.75}
    """
    sem = minmax(semantic)
    top = max(lexical.values(), default=0.0)
    out = {d: semantic_weight * v for d, v in sem.items()}
    if top > 0:
        for d, v in lexical.items():
            out[d] = out.get(d, 0.0) + lexical_weight * v / top
    return out
