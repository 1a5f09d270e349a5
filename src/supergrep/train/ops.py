"""The handful of array operations the losses use, per framework.

Losses are written once against this interface; each backend passes its own ops. NumPy's is
the reference the parity tests compare every backend against.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class NumpyOps:
    """Reference implementation (float64 where the inputs are)."""

    def shape(self, x: Any) -> tuple[int, ...]:
        return tuple(x.shape)

    def einsum(self, spec: str, *xs: Any) -> Any:
        return np.einsum(spec, *xs)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b)

    def max(self, x: Any, axis: int) -> Any:
        return x.max(axis=axis)

    def sum(self, x: Any, axis: int) -> Any:
        return x.sum(axis=axis)

    def mean(self, x: Any) -> Any:
        return x.mean()

    def concat(self, xs: list, axis: int) -> Any:
        return np.concatenate(xs, axis=axis)

    def astype_float(self, x: Any) -> Any:
        return x.astype(np.float64)

    def logsumexp(self, x: Any, axis: int) -> Any:
        m = x.max(axis=axis, keepdims=True)
        return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)

    def diagonal(self, x: Any) -> Any:
        return np.diagonal(x)

    def eye_mask(self, n: int, m: int) -> Any:
        return np.eye(n, m, dtype=bool)

    def relu(self, x: Any) -> Any:
        return np.maximum(x, 0.0)

    def exp(self, x: Any) -> Any:
        return np.exp(x)
