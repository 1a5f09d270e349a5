"""Encoding spread over the ranks of a torchrun job; one process (rank 0) writes the index.

``supergrep index --workers N`` starts N processes through torchrun. Rank 0 walks, chunks and
commits exactly as a single process does; only the step "encode these chunk texts" changes:
``ShardedEncoder.encode_documents`` broadcasts the texts, every rank (rank 0 included) encodes
its share, and the vectors come back to rank 0 (``gather``), in the original order. The other
ranks run ``serve`` and never open the index, so the index keeps one writer and all its crash
safety: a killed rank 0 leaves the last committed batch, a killed worker takes the job down
(torchrun stops the others) before anything of the batch is written.

The collective is duck-typed (``broadcast_object``, ``gather_to_main``, ``world``): the CLI
passes ``supergrep.backends.torch_dist.TorchCollective`` (gloo, whatever the encoding device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from supergrep.encoder.encoder import Encoder

STOP = "stop"
DOCUMENTS = "documents"


def share(lengths: list[int], rank: int, size: int) -> list[int]:
    """Indices of the texts ``rank`` encodes: every size-th of them, longest first, so each
    rank gets a like mix of long and short texts (and batches of similar lengths).

    >>> share([5, 50, 7, 49, 6], 0, 2), share([5, 50, 7, 49, 6], 1, 2)
    ([1, 2, 0], [3, 4])
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return order[rank::size]


def _encode_share(encoder: Encoder, texts: list[str], rank: int, size: int) -> list[tuple[int, np.ndarray]]:
    mine = share([len(t) for t in texts], rank, size)
    vecs = encoder.encode_documents([texts[i] for i in mine])
    # float16: what the index stores (index/store.py), so the narrowing loses nothing extra and
    # halves what travels between the processes.
    return [(i, v.astype(np.float16)) for i, v in zip(mine, vecs, strict=True)]


class ShardedEncoder:
    """Rank 0's encoder: the wrapped ``Encoder`` for everything but ``encode_documents``."""

    def __init__(self, encoder: Encoder, collective: Any):
        self.encoder, self.coll = encoder, collective
        self._open = True

    def __getattr__(self, name: str) -> Any:  # spec, dim, fingerprint, count_tokens, encode_queries, ...
        return getattr(self.encoder, name)

    def encode_documents(self, texts: list[str], progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        if not texts:
            return []
        size = self.coll.world.size
        self.coll.broadcast_object((DOCUMENTS, texts))
        mine = _encode_share(self.encoder, texts, 0, size)
        out: list[np.ndarray | None] = [None] * len(texts)
        for part in self.coll.gather_to_main(mine):
            for i, v in part:
                out[i] = v.astype(np.float32)
        if progress is not None:
            progress(len(texts))
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            raise RuntimeError(f"sharded encoding lost {len(missing)} of {len(texts)} texts")
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Release the workers (they return from ``serve``)."""
        if self._open:
            self._open = False
            self.coll.broadcast_object((STOP, None))


def serve(encoder: Encoder, collective: Any) -> int:
    """A worker rank: encode its share of every batch rank 0 sends, until told to stop.

    Returns:
        The number of texts this rank encoded.
    """
    world = collective.world
    done = 0
    while True:
        kind, texts = collective.broadcast_object(None)
        if kind == STOP:
            return done
        mine = _encode_share(encoder, texts, world.rank, world.size)
        done += len(mine)
        collective.gather_to_main(mine)
