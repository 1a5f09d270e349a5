"""Contrastive losses over MaxSim, written against an ``ops`` object (NumPy, torch or MLX).

Losses receive embeddings and masks, never the model, and never import a framework: the
backend passes its tensors together with its ``ops`` (see ``supergrep.train.ops``).
"""

from typing import Any

from supergrep.train.losses.distill import Distill, distill_loss, listwise_loss, own_scores
from supergrep.train.losses.infonce import InfoNCE, infonce_loss
from supergrep.train.losses.margin import Margin, margin_loss
from supergrep.train.losses.maxsim import maxsim_scores

__all__ = ["Distill", "InfoNCE", "Margin", "contrastive_loss", "distill_loss", "infonce_loss", "listwise_loss",
           "margin_loss", "maxsim_scores", "own_scores", "teacher_scores"]


def teacher_scores(ops: Any, teacher: tuple, q_mask: Any, d_mask: Any) -> Any:
    """The distillation teacher's in-batch (n_q, n_d) MaxSim: ``teacher`` is (query vectors,
    document vectors) on the student's tokens (the frozen base, the student's masks) or (query
    vectors, query mask, document vectors, document mask) on a teacher's own tokens of the same
    rows (``distill_teacher``)."""
    if len(teacher) == 4:
        return maxsim_scores(ops, *teacher)
    return maxsim_scores(ops, teacher[0], q_mask, teacher[1], d_mask)


def contrastive_loss(temperature: float = 0.07, margin: float = 0.2, margin_weight: float = 0.1,
                     distill_weight: float = 0.0, distill_temperature: float = 0.05,
                     teacher_weight: float = 0.0, teacher_temperature: float = 0.05, infonce_weight: float = 1.0):
    """The training objective: ``infonce_weight`` * InfoNCE over MaxSim + ``margin_weight`` * margin loss
    (+ ``distill_weight`` * KL to a teacher's scores, when the trainer passes them)
    (+ ``teacher_weight`` * listwise KL to precomputed teacher scores, when the batch has them).

    Returns:
        ``fn(ops, q, q_mask, d, d_mask, teacher=None, listwise=None) -> (loss, accuracy)``,
        where accuracy is the share of queries whose own document scores highest in the batch,
        ``teacher`` is the frozen base's (query vectors, document vectors) for the same batch
        (same masks), or a ``distill_teacher``'s 4-tuple (``teacher_scores``), and ``listwise``
        the rows' (n_q, 1 + n_neg) precomputed teacher scores.
        ``fn.needs_teacher`` tells the trainer to compute the former.

    >>> import numpy as np
    >>> from supergrep.train.ops import NumpyOps
    >>> q = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])            # 2 queries, 1 token each
    >>> m = np.ones((2, 1), bool)
    >>> loss, acc = contrastive_loss(1.0, 0.2, 0.1)(NumpyOps(), q, m, q, m)
    >>> round(float(loss), 4), float(acc)  # InfoNCE log(1 + e^-1); margin 0: positives win by 1
    (0.3133, 1.0)
    """
    info, marg, dist = InfoNCE(temperature), Margin(margin), Distill(distill_temperature)
    lw = Distill(teacher_temperature)

    def from_scores(ops: Any, scores: Any, t_scores: Any = None, listwise: Any = None):
        """The loss and accuracy from (n_q, n_d) MaxSim scores (and the teachers')."""
        loss = infonce_loss(ops, scores, info) * infonce_weight
        if margin_weight:
            loss = loss + margin_weight * margin_loss(ops, scores, marg)
        if distill_weight and t_scores is not None:
            loss = loss + distill_weight * distill_loss(ops, scores, t_scores, dist)
        if teacher_weight and listwise is not None:
            loss = loss + teacher_weight * listwise_loss(ops, scores, listwise, lw)
        n_q = ops.shape(scores)[0]
        positive = ops.diagonal(scores)[:n_q]
        acc = ops.mean(ops.astype_float(positive >= ops.max(scores, axis=1)))
        return loss, acc

    def fn(ops: Any, q: Any, q_mask: Any, d: Any, d_mask: Any, teacher: Any = None, listwise: Any = None):
        scores = maxsim_scores(ops, q, q_mask, d, d_mask)  # (n_q, n_d)
        t_scores = None
        if distill_weight and teacher is not None:
            t_scores = teacher_scores(ops, teacher, q_mask, d_mask)  # (n_q, n_d)
        return from_scores(ops, scores, t_scores, listwise)

    fn.needs_teacher = bool(distill_weight)  # type: ignore[attr-defined]
    # Validation scores every run by the same yardstick, the labels (InfoNCE + margin): rows of
    # the validation split carry no teacher scores, and a run trained on the teacher alone
    # (infonce_weight 0) would otherwise report a validation loss of 0.
    fn.validation = fn if infonce_weight == 1.0 else contrastive_loss(  # type: ignore[attr-defined]
        temperature, margin, margin_weight)
    fn.from_scores = from_scores  # type: ignore[attr-defined]  # the profiler times MaxSim and the loss apart
    return fn
