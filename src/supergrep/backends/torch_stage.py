"""A training step's host arrays on the device in one copy.

``TorchTrainer._move`` used to pin every array of a step on its own (``tensor.pin_memory()``:
a fresh page-locked allocation and a copy each) and send each with its own host->device copy:
about 19 ``aten::copy_`` calls and 9 ms of host time per step on the H100 trace of the batch-192
varlen step (docs/performance.md, "The training step after 60 warm-up steps, traced"), while the
GPU waited. Here the arrays are packed into one page-locked buffer that is reused (a small ring,
so a buffer is only rewritten once the copy that read it has finished) and sent with one
non-blocking copy; the device tensors are dtype views into that one device buffer.
"""

from __future__ import annotations

import numpy as np
import torch

ALIGN = 64  # bytes: every array starts at a multiple of this (dtype views need their size's)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


class HostStager:
    """Packs host arrays into one reused staging buffer and moves them with one copy.

    ``pin``: page-locked staging (CUDA). ``slots``: how many staging buffers rotate; a slot is
    rewritten only after the event recorded behind its last copy has completed, so with a few
    calls per step and a step or two in flight that wait is normally already over."""

    def __init__(self, device: torch.device | str, pin: bool | None = None, slots: int = 8):
        self.device = torch.device(device)
        self.pin = self.device.type == "cuda" if pin is None else pin
        self._bufs: list[torch.Tensor | None] = [None] * slots
        self._events: list[torch.cuda.Event | None] = [None] * slots
        self._next = 0

    def move(self, arrays) -> tuple[torch.Tensor, ...]:
        arrays = [np.ascontiguousarray(a) for a in arrays]
        offsets, end = [], 0
        for a in arrays:
            offsets.append(end)
            end += -(-a.nbytes // ALIGN) * ALIGN
        slot = self._next
        self._next = (slot + 1) % len(self._bufs)
        if self._events[slot] is not None:
            self._events[slot].synchronize()  # its previous copy has read the buffer
            self._events[slot] = None
        buf = self._bufs[slot]
        if buf is None or buf.numel() < end:
            size = max(end, 2 * buf.numel() if buf is not None else 0, 1 << 16)
            buf = torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
            self._bufs[slot] = buf
        host = buf.numpy()
        for off, a in zip(offsets, arrays):
            host[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
        if self.device.type == "cpu":
            dev = buf[:end].clone()  # the slot is rewritten later: the caller gets its own memory
        else:
            dev = buf[:end].to(self.device, non_blocking=self.pin)
            if self.device.type == "cuda":
                ev = torch.cuda.Event()
                ev.record()
                self._events[slot] = ev
        return tuple(dev[off : off + a.nbytes].view(_torch_dtype(a.dtype)).view(a.shape)
                     for off, a in zip(offsets, arrays))
