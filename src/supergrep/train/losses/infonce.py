"""InfoNCE over MaxSim with in-batch negatives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InfoNCE:
    """Hyperparameters of :func:`infonce_loss`."""

    temperature: float = 0.07


def infonce_loss(ops: Any, scores: Any, hp: InfoNCE) -> Any:
    """Cross-entropy of each query's own document against all documents of the batch.

    Inputs:
        scores: (n_q, n_d) MaxSim scores (``maxsim_scores``), n_d >= n_q. Column i holds query
            i's positive; every other column (other queries' positives, then any hard
            negatives appended after them) is a negative.

    Returns:
        The mean loss (a scalar).

    Requirements: no duplicate positives in a batch (a duplicate is a false negative).
    Relations: ``margin_loss`` is added with a small weight. Reference: van den Oord et al.,
    2018 (CPC); Khattab & Zaharia, 2020 (ColBERT's in-batch negatives).

    >>> import numpy as np
    >>> from supergrep.train.ops import NumpyOps
    >>> s = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> round(float(infonce_loss(NumpyOps(), s, InfoNCE(temperature=1.0))), 4)  # log(1 + e^-1)
    0.3133
    """
    logits = scores / hp.temperature  # (n_q, n_d)
    n_q = ops.shape(scores)[0]
    positive = ops.diagonal(logits)[:n_q]  # (n_q,)
    return ops.mean(ops.logsumexp(logits, axis=1) - positive)
