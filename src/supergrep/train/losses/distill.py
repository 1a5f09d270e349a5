"""Score distillation: keep the student's in-batch ranking close to a teacher's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Distill:
    temperature: float = 0.05  # applied to both teacher and student scores


def distill_loss(ops: Any, scores: Any, teacher: Any, hp: Distill) -> Any:
    """KL(teacher || student) between the in-batch score distributions of each query.

    Inputs:
        scores: (n_q, n_d) the student's MaxSim scores (mean over query tokens).
        teacher: (n_q, n_d) the teacher's scores for the same pairs, no gradient.

    Why: fine-tuning on (docstring -> code without docstring) pairs teaches code matching but
    erodes what the base model did well - matching a description to the prose in a chunk
    (its docstring and comments). Using the frozen base model (no LoRA, no projection) as the
    teacher anchors the ranking where the contrastive signal says nothing (PyLate's
    distillation loss, Santhanam et al. 2022, with the base as its own teacher).

    >>> import numpy as np
    >>> from supergrep.train.ops import NumpyOps
    >>> s = np.array([[0.9, 0.1], [0.2, 0.8]])
    >>> float(distill_loss(NumpyOps(), s, s, Distill(0.1)))  # same distributions: 0
    0.0
    """
    log_p_s = scores / hp.temperature
    log_p_s = log_p_s - ops.logsumexp(log_p_s, axis=1)[:, None]
    log_p_t = teacher / hp.temperature
    log_p_t = log_p_t - ops.logsumexp(log_p_t, axis=1)[:, None]
    p_t = ops.exp(log_p_t)
    return ops.mean(ops.sum(p_t * (log_p_t - log_p_s), axis=1))


def own_scores(ops: Any, scores: Any, n_neg: int) -> Any:
    """Each query's scores against its own documents: (n_q, 1 + n_neg) = [positive, *negatives].

    ``scores`` is the in-batch (n_q, n_d) matrix whose columns are the n_q positives in query
    order, then every query's ``n_neg`` hard negatives in query order (``collate``'s layout).
    """
    n_q = ops.shape(scores)[0]
    positive = ops.diagonal(scores)[:n_q][:, None]  # (n_q, 1)
    if not n_neg:
        return positive
    negs = scores[:, n_q : n_q + n_q * n_neg].reshape(n_q, n_q, n_neg)  # [query, owner, j]
    mine = ops.eye_mask(n_q, n_q)[:, :, None]  # owner == query
    own = ops.sum(ops.where(mine, negs, negs * 0), axis=1)  # (n_q, n_neg)
    return ops.concat([positive, own], axis=1)


def listwise_loss(ops: Any, scores: Any, teacher: Any, hp: Distill) -> Any:
    """KL(teacher || student) over each query's own list [positive, *hard negatives].

    Inputs:
        scores: (n_q, n_d) the student's in-batch MaxSim scores (``own_scores``' layout).
        teacher: (n_q, 1 + n_neg) a stronger model's precomputed scores of the same lists.

    Why: in-batch distillation needs the teacher in the step; precomputed scores of a fixed
    list per query need only a file (ColBERTv2's recipe, Santhanam et al. 2022: a stronger
    scorer's soft labels over the negatives it mined). The teacher's order among near misses is
    what a docstring -> code label cannot say: which wrong function is nearly right.

    >>> import numpy as np
    >>> from supergrep.train.ops import NumpyOps
    >>> s = np.array([[0.9, 0.1, 0.5, 0.0], [0.2, 0.8, 0.0, 0.3]])  # 2 queries, 1 negative each
    >>> own_scores(NumpyOps(), s, 1).tolist()
    [[0.9, 0.5], [0.8, 0.3]]
    >>> round(float(listwise_loss(NumpyOps(), s, own_scores(NumpyOps(), s, 1), Distill(0.1))), 6)
    0.0
    """
    n_neg = teacher.shape[1] - 1
    return distill_loss(ops, own_scores(ops, scores, n_neg), teacher, hp)
