"""Margin between each query's positive and its hardest negative."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Margin:
    margin: float = 0.2


def margin_loss(ops: Any, scores: Any, hp: Margin) -> Any:
    """``mean(relu(margin - s(q, d+) + max_{d-} s(q, d-)))``.

    Inputs:
        scores: (n_q, n_d) MaxSim scores; column i is query i's positive.

    Relations: added to ``infonce_loss`` with weight ``margin_weight`` (0.1 by default, as in
    the seeds' XTR runs: margin 0.2, weight 0.1).

    >>> import numpy as np
    >>> from supergrep.train.ops import NumpyOps
    >>> s = np.array([[0.9, 0.8], [0.1, 0.5]])  # q0: 0.2 - 0.9 + 0.8 = 0.1; q1: 0.2 - 0.5 + 0.1 < 0
    >>> round(float(margin_loss(NumpyOps(), s, Margin(0.2))), 4)
    0.05
    """
    n_q = ops.shape(scores)[0]
    positive = ops.diagonal(scores)[:n_q]  # (n_q,)
    own = ops.eye_mask(n_q, ops.shape(scores)[1])  # (n_q, n_d) True on each positive
    hardest = ops.max(ops.where(own, -1e4, scores), axis=1)  # (n_q,)
    return ops.mean(ops.relu(hp.margin - positive + hardest))
