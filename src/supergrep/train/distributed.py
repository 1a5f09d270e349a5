"""Data-parallel training under torchrun: which process this is, which rows of each global
batch it trains on, and the collective operations the training loop needs.

Framework-neutral (no torch here): the loop reads the launcher's environment (``World``),
shards each global batch with ``shard_rows``, pads every shard to the global batch's widths
(``global_widths``, so the shards can be gathered and the shapes equal a one-process run's), and
talks to the other ranks through a ``Collective`` that the backend provides
(``supergrep.backends.torch_dist.TorchCollective``). With one process none of this runs: the
loop keeps its single-process path, with no collective calls at all.

The design (docs/distributed.md): the global batch, the data order, the learning-rate schedule
and the checkpoints' data position are those of a one-process run with the same
``batch_size``; each of N ranks encodes 1/N of every batch, all-gathers the document vectors
(with gradients) so that every query still sees the whole global batch's documents as
negatives, and averages the LoRA/projection gradients with one all-reduce per optimizer step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from supergrep.errors import ConfigError, UsageError


@dataclass(frozen=True)
class World:
    """This process's place among the ranks (torchrun's RANK, WORLD_SIZE, LOCAL_RANK)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> World:
        """Read the launcher's variables; a plain process is rank 0 of 1.

        >>> World.from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
        World(rank=1, size=2, local_rank=1)
        >>> World.from_env({}).distributed
        False
        """
        env = os.environ if environ is None else environ
        try:
            size = int(env.get("WORLD_SIZE", "1") or 1)
            rank = int(env.get("RANK", "0") or 0)
            local = int(env.get("LOCAL_RANK", str(rank)) or 0)
        except ValueError:
            raise UsageError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (torchrun sets them)") from None
        if size < 1 or not 0 <= rank < size or local < 0:
            raise UsageError(f"invalid launcher environment: RANK={rank} WORLD_SIZE={size} LOCAL_RANK={local}")
        return cls(rank, size, local)


class Collective(Protocol):
    """What the loop needs from the process group; a backend implements it."""

    world: World
    device: str  # where this rank computes, e.g. "cuda:1" or "cpu"

    def barrier(self) -> None: ...

    def sum(self, values: list[float]) -> list[float]: ...

    def max(self, values: list[float]) -> list[float]: ...

    def gather_objects(self, obj: Any) -> list[Any]: ...

    def close(self) -> None: ...


def check_config(batch_size: int, grad_accum_steps: int, world: World) -> None:
    """Every micro-batch of every global batch must split evenly over the ranks.

    >>> check_config(48, 1, World(0, 4))
    >>> check_config(48, 4, World(0, 8))
    Traceback (most recent call last):
    ...
    supergrep.errors.ConfigError: batch_size 48 must be a multiple of grad_accum_steps x world size = 4 x 8 = 32 under torchrun (each rank takes an equal share of every micro-batch)
    """
    k = grad_accum_steps * world.size
    if batch_size % k:
        raise ConfigError(f"batch_size {batch_size} must be a multiple of grad_accum_steps x world size = "
                          f"{grad_accum_steps} x {world.size} = {k} under torchrun (each rank takes an equal "
                          f"share of every micro-batch)")


def shard_rows(rows: np.ndarray, rank: int, size: int, micro_batches: int = 1) -> np.ndarray:
    """This rank's rows of a global batch: its contiguous 1/size of each micro-batch.

    With plain accumulation (``micro_batches`` = grad_accum_steps > 1) a micro-batch's documents
    are its queries' negatives, so the split is within each micro-batch: gathered across the
    ranks, micro-batch j is exactly micro-batch j of a one-process run.

    >>> shard_rows(np.arange(8), 1, 2).tolist()
    [4, 5, 6, 7]
    >>> shard_rows(np.arange(8), 1, 2, micro_batches=2).tolist()   # micro-batches [0..3], [4..7]
    [2, 3, 6, 7]
    """
    n = len(rows)
    if n % (size * micro_batches):
        raise ConfigError(f"a batch of {n} rows does not split into {micro_batches} micro-batches x {size} ranks")
    per_micro = n // micro_batches
    piece = per_micro // size
    parts = [rows[j * per_micro + rank * piece : j * per_micro + (rank + 1) * piece] for j in range(micro_batches)]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _padded(longest: int, multiple: int) -> int:
    return -(-longest // multiple) * multiple


def global_widths(q_lengths: np.ndarray, d_lengths: np.ndarray, pad_multiple: int,
                  query_expansion_to: int = 0) -> tuple[int, int]:
    """(query width, document width) that ``collate`` pads the whole global batch to.

    Every rank pads its shard to these widths, so the shards all-gather (equal shapes) and each
    rank computes on exactly the tensors a one-process run would.

    >>> global_widths(np.array([3, 9]), np.array([17, 40, 5]), 8)
    (16, 40)
    >>> global_widths(np.array([3, 9]), np.array([17]), 8, query_expansion_to=32)
    (32, 24)
    """
    q = query_expansion_to or _padded(int(q_lengths.max()), pad_multiple)
    return q, _padded(int(d_lengths.max()), pad_multiple)


def start_collective(backend: str, world: World, device: str) -> Collective:
    """Join the process group of the launcher (torchrun) with the training backend's engine."""
    if backend == "torch":
        from supergrep.backends.torch_dist import TorchCollective

        return TorchCollective(world, device)
    raise UsageError(f"distributed training (WORLD_SIZE={world.size}) is implemented for backend: torch only; "
                     f"{backend} trains in one process (see docs/distributed.md)")
