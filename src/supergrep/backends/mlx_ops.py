"""The loss ops (``supergrep.train.ops``) for MLX arrays."""

from __future__ import annotations

from typing import Any

import mlx.core as mx


class MLXOps:
    def shape(self, x: mx.array) -> tuple[int, ...]:
        return tuple(x.shape)

    def einsum(self, spec: str, *xs: mx.array) -> mx.array:
        return mx.einsum(spec, *xs)

    def where(self, cond: mx.array, a: Any, b: Any) -> mx.array:
        return mx.where(cond, a, b)

    def max(self, x: mx.array, axis: int) -> mx.array:
        return mx.max(x, axis=axis)

    def sum(self, x: mx.array, axis: int) -> mx.array:
        return mx.sum(x, axis=axis)

    def mean(self, x: mx.array) -> mx.array:
        return mx.mean(x)

    def concat(self, xs: list, axis: int) -> mx.array:
        return mx.concatenate(xs, axis=axis)

    def astype_float(self, x: mx.array) -> mx.array:
        return x.astype(mx.float32)

    def logsumexp(self, x: mx.array, axis: int) -> mx.array:
        return mx.logsumexp(x, axis=axis)

    def diagonal(self, x: mx.array) -> mx.array:
        return mx.diagonal(x)

    def eye_mask(self, n: int, m: int) -> mx.array:
        return mx.eye(n, m, dtype=mx.bool_)

    def relu(self, x: mx.array) -> mx.array:
        return mx.maximum(x, 0.0)

    def exp(self, x: mx.array) -> mx.array:
        return mx.exp(x)
