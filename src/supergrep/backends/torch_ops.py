"""The loss ops (``supergrep.train.ops``) for torch tensors."""

from __future__ import annotations

from typing import Any

import torch


class TorchOps:
    def __init__(self, device: str | torch.device = "cpu"):
        self.device = torch.device(device)

    def shape(self, x: torch.Tensor) -> tuple[int, ...]:
        return tuple(x.shape)

    def fused_maxsim(self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor):
        """``maxsim_scores`` through fused Triton kernels on CUDA (``torch_maxsim``), or None."""
        from supergrep.backends.torch_maxsim import fused_maxsim

        return fused_maxsim(q, q_mask, d, d_mask)

    def einsum(self, spec: str, *xs: torch.Tensor) -> torch.Tensor:
        return torch.einsum(spec, *xs)

    def where(self, cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        # A Python scalar goes to torch.where as it is: turning it into a device tensor first
        # (torch.as_tensor) is a blocking host-to-device copy, a full device sync per call, which
        # stalled every GPU training step 6 times (docs/performance.md, "The varlen path").
        return torch.where(cond, a, b)

    def max(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return x.amax(dim=axis)

    def sum(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return x.sum(dim=axis)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean()

    def concat(self, xs: list, axis: int) -> torch.Tensor:
        return torch.cat(xs, dim=axis)

    def astype_float(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()

    def logsumexp(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.logsumexp(x, dim=axis)

    def diagonal(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diagonal(x)

    def eye_mask(self, n: int, m: int) -> torch.Tensor:
        return torch.eye(n, m, dtype=torch.bool, device=self.device)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    def exp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)
