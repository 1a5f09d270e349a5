"""Pure ranking metrics (binary relevance, one relevant item per query) and the hit rule.

The hit rule and the metric definitions follow eval/public/README.md exactly, so figures are
comparable across tools and query sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    path: str
    symbol: str
    start_line: int
    end_line: int


def is_hit(path: str, start_line: int, target: Target) -> bool:
    """A result hits a target when the paths are equal and
    ``target.start_line - 3 <= result.start_line <= target.end_line``: the result is the
    definition itself (decorators allowed) or a piece of it, not an enclosing class or file.

    >>> t = Target("a.py", "C.m", 20, 30)
    >>> is_hit("a.py", 18, t), is_hit("a.py", 25, t), is_hit("a.py", 10, t), is_hit("b.py", 20, t)
    (True, True, False, False)
    """
    return path == target.path and target.start_line - 3 <= start_line <= target.end_line


def first_hit_rank(results: Sequence[tuple[str, int]], targets: Sequence[Target]) -> int | None:
    """1-based rank of the first result that hits any target, or None.

    >>> first_hit_rank([("a.py", 1), ("a.py", 21)], [Target("a.py", "f", 20, 30)])
    2
    """
    for rank, (path, start) in enumerate(results, start=1):
        if any(is_hit(path, start, t) for t in targets):
            return rank
    return None


def precision_at_1(ranks: Sequence[int | None]) -> float:
    """Share of queries whose first result is a hit.

    >>> precision_at_1([1, 2, None, 1])
    0.5
    """
    return sum(r == 1 for r in ranks) / len(ranks) if ranks else 0.0


def mrr_at_k(ranks: Sequence[int | None], k: int = 10) -> float:
    """Mean reciprocal rank, counting only ranks <= k.

    >>> mrr_at_k([1, 2, None, 4])  # (1 + 1/2 + 0 + 1/4) / 4
    0.4375
    """
    return sum(1.0 / r for r in ranks if r is not None and r <= k) / len(ranks) if ranks else 0.0


def recall_at_k(ranks: Sequence[int | None], k: int = 10) -> float:
    """Share of queries with a hit in the top k.

    >>> recall_at_k([1, 11, None, 10])
    0.5
    """
    return sum(r is not None and r <= k for r in ranks) / len(ranks) if ranks else 0.0


def ndcg_at_k(ranks: Sequence[int | None], k: int = 10) -> float:
    """nDCG@k with one relevant item: 1 / log2(rank + 1) within the top k (ideal DCG is 1).

    >>> round(ndcg_at_k([1, 3, None]), 4)  # (1 + 1/log2(4) + 0) / 3 = (1 + 0.5) / 3
    0.5
    """
    return sum(1.0 / math.log2(r + 1) for r in ranks if r is not None and r <= k) / len(ranks) if ranks else 0.0


def summarize(ranks: Sequence[int | None], k: int = 10) -> dict[str, float]:
    """The four headline metrics plus the query count.

    >>> summarize([1, None])
    {'n': 2, 'p@1': 0.5, 'mrr@10': 0.5, 'r@10': 0.5, 'ndcg@10': 0.5}
    """
    return {
        "n": len(ranks),
        "p@1": precision_at_1(ranks),
        f"mrr@{k}": mrr_at_k(ranks, k),
        f"r@{k}": recall_at_k(ranks, k),
        f"ndcg@{k}": ndcg_at_k(ranks, k),
    }
