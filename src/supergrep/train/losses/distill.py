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
