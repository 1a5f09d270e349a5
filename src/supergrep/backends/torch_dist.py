"""torch.distributed for data-parallel training and sharded encoding (launched by torchrun).

- ``TorchCollective``: joins torchrun's process group (NCCL on CUDA, one GPU per LOCAL_RANK;
  gloo on CPU) and offers the few collectives the training loop and the indexer use.
- ``gather_rows``: an all-gather along the first axis that keeps the autograd graph: its
  backward sums every rank's gradient for this rank's rows (reduce-scatter), so a loss over the
  gathered documents trains the encoders that produced them on every rank.
- ``DistributedTorchTrainer``: ``TorchTrainer`` with the document vectors gathered across ranks
  before the loss (N ranks: N x the in-batch negatives) and the trainable gradients averaged by
  one all-reduce per optimizer step, in every mode (plain, accumulation, GradCache).

Why not ``DistributedDataParallel``'s wrapper: its autograd hooks all-reduce during the one
backward of a step and must be told (``no_sync``) about every other backward, but a GradCache
step runs one backward per mini-batch and accumulation k of them; and its bucketed overlap saves
nothing here: the trainable LoRA + projection weights are 1-3M floats (4-12 MB, a fraction of a
millisecond on NVLink against a step of 100+ ms). The semantics are DDP's: replicated weights,
identical optimizer steps, averaged gradients. FSDP would shard weights that are mostly frozen
and small (a 22M-110M encoder fits any GPU many times over) and add an all-gather per layer per
forward: pure cost at this size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from supergrep.backends.torch_backend import pick_device
from supergrep.backends.torch_train import LossFn, TorchTrainer
from supergrep.errors import TrainingError, UsageError

if TYPE_CHECKING:
    from supergrep.backends.adapters import LoRAConfig
    from supergrep.encoder.spec import ModelSpec
    from supergrep.train.config import TrainConfig
    from supergrep.train.distributed import World

log = logging.getLogger(__name__)

# Collectives wait this long (a slow rank 0 building the token cache, a long walk before the
# first encoding batch) before the process group gives up.
DEFAULT_TIMEOUT_S = 3600


def _timeout() -> timedelta:
    return timedelta(seconds=float(os.environ.get("SUPERGREP_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)))


def rank_device(setting: str, world: World) -> str:
    """The device of one rank: auto/cuda -> cuda:LOCAL_RANK when CUDA is there (else CPU for
    auto); cpu and mps as asked (all ranks share them)."""
    want = (setting or "auto").strip().lower()
    if want.startswith("cuda:"):
        raise UsageError(f"--device {want} with several processes: each rank uses cuda:LOCAL_RANK; pass --device "
                         f"cuda (or auto) and pick GPUs with CUDA_VISIBLE_DEVICES")
    picked = pick_device(want)
    if picked == "cuda":
        n = torch.cuda.device_count()
        if world.local_rank >= n:
            raise UsageError(f"LOCAL_RANK {world.local_rank} but only {n} CUDA device(s): start at most {n} "
                             f"processes (--workers / --nproc-per-node)")
        return f"cuda:{world.local_rank}"
    return picked


class TorchCollective:
    """This process's membership in torchrun's process group.

    Args:
        world: From ``World.from_env()``.
        device: The run's device setting: auto/cuda put rank r on cuda:LOCAL_RANK with NCCL
            (when CUDA is there), cpu uses gloo (the indexer passes "cpu" whatever it encodes
            on: its texts and NumPy vectors live in host memory, which gloo moves directly).
    """

    def __init__(self, world: World, device: str = "auto"):
        self.world = world
        picked = rank_device(device, world)
        if picked == "mps":
            raise UsageError("distributed training needs CUDA or CPU (MPS has no torch.distributed backend)")
        self.torch_device = torch.device(picked)
        if self.torch_device.type == "cuda":
            torch.cuda.set_device(self.torch_device)
        self.device = str(self.torch_device)
        backend = "nccl" if self.torch_device.type == "cuda" else "gloo"
        self._owns = not dist.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"timeout": _timeout()}
            if backend == "nccl":
                kwargs["device_id"] = self.torch_device
            dist.init_process_group(backend, **kwargs)
        if dist.get_world_size() != world.size or dist.get_rank() != world.rank:
            raise UsageError(f"process group is rank {dist.get_rank()} of {dist.get_world_size()}, "
                             f"the environment says {world.rank} of {world.size}")
        self.backend = dist.get_backend()
        # Small tensors for the loop's reductions live where the backend can reduce them.
        self._reduce_device = self.torch_device if self.backend == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.torch_device.index])
        else:
            dist.barrier()

    def _reduce(self, values: list[float], op) -> list[float]:
        if not values:
            return []
        t = torch.tensor(values, dtype=torch.float64, device=self._reduce_device)
        dist.all_reduce(t, op=op)
        return t.cpu().tolist()

    def sum(self, values: list[float]) -> list[float]:
        return self._reduce(values, dist.ReduceOp.SUM)

    def max(self, values: list[float]) -> list[float]:
        return self._reduce(values, dist.ReduceOp.MAX)

    def gather_objects(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def gather_to_main(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` on rank 0 (in rank order); the others get []."""
        out: list[Any] | None = [None] * self.world.size if self.world.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out or []

    def close(self) -> None:
        """Leave the group (only if this object joined it)."""
        if self._owns and dist.is_initialized():
            dist.destroy_process_group()
            self._owns = False


# torch 2.13 renamed the single-tensor collectives (the old names warn); torch 2.11 has only those.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class _GatherRows(torch.autograd.Function):
    """all_gather along dim 0 with a gradient: backward = reduce-scatter of the cotangents."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        n, rank = dist.get_world_size(), dist.get_rank()
        ctx.rows, ctx.rank = x.shape[0], rank
        out = x.new_empty((n * x.shape[0], *x.shape[1:]))
        _all_gather_single(out, x.contiguous())
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.contiguous()
        if dist.get_backend() == "nccl":
            out = grad.new_empty((ctx.rows, *grad.shape[1:]))
            _reduce_scatter_single(out, grad, op=dist.ReduceOp.SUM)
            return out
        total = grad.clone()  # gloo: reduce-scatter as all-reduce + own slice
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather_rows(x: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``x`` (same shape on all) along dim 0, in rank order.

    With ``x.requires_grad`` the result keeps the graph: the gradient reaching ``x`` is the sum
    over ranks of the gradients of their losses with respect to this rank's rows.
    """
    if x.requires_grad and torch.is_grad_enabled():
        return _GatherRows.apply(x)
    out = x.new_empty((dist.get_world_size() * x.shape[0], *x.shape[1:]))
    _all_gather_single(out, x.contiguous())
    return out


def _rank_seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") & ((1 << 63) - 1)


class DistributedTorchTrainer(TorchTrainer):
    """``TorchTrainer`` for one rank of a torchrun job (see the module docstring)."""

    def __init__(self, spec: ModelSpec, cfg: TrainConfig, lora: LoRAConfig, loss_fn: LossFn,
                 collective: TorchCollective):
        super().__init__(spec, dataclasses.replace(cfg, device=collective.device), lora, loss_fn)
        self.coll = collective
        self.rank, self.world_size = collective.world.rank, collective.world.size
        self._gathering = False
        with torch.no_grad():  # the same start everywhere (it is already: same seed, same files)
            for p in self.params.values():
                dist.broadcast(p.data, src=0)
        if self.rank:  # each rank its own dropout masks; rank 0 keeps the one-process stream
            torch.manual_seed(_rank_seed(cfg.seed, self.rank))

    # ------------------------------------------------------------------------------ step
    def train_step(self, batch, lr: float):
        self._gathering = True
        try:
            return super().train_step(batch, lr)
        finally:
            self._gathering = False

    def _loss(self, q, qm, d, dm, teacher=None, listwise=None):
        # ``listwise`` is always None here: make_distributed_trainer refuses teacher_weight.
        if not self._gathering:  # validation: each rank scores whole batches of its own
            return super()._loss(q, qm, d, dm, teacher)
        d, dm, t_docs = self._gather_documents(q.shape[0], d, dm, teacher[1] if teacher is not None else None)
        return self.loss_fn(self.ops, q, qm, d, dm, (teacher[0], t_docs) if teacher is not None else None)

    def _gather_documents(self, n_pos: int, d: torch.Tensor, dm: torch.Tensor, t_d: torch.Tensor | None):
        """All ranks' documents, arranged for this rank's queries: its own positives first (so
        query i's positive is column i, as the losses expect), then the other ranks' positives,
        then every rank's hard negatives (padded with empty documents to the largest count)."""
        n_neg = d.shape[0] - n_pos
        if self.cfg.hard_negatives:  # counts may differ per rank: pad to the largest
            most = int(self.coll.max([float(n_neg)])[0])
            if most > n_neg:
                extra = most - n_neg
                d = torch.cat([d, d.new_zeros((extra, *d.shape[1:]))])
                dm = torch.cat([dm, dm.new_zeros((extra, *dm.shape[1:]))])
                if t_d is not None:
                    t_d = torch.cat([t_d, t_d.new_zeros((extra, *t_d.shape[1:]))])
                n_neg = most
        per = n_pos + n_neg
        order = [(self.rank + i) % self.world_size for i in range(self.world_size)]

        def arrange(all_rows: torch.Tensor) -> torch.Tensor:
            pos = [all_rows[r * per : r * per + n_pos] for r in order]
            neg = [all_rows[r * per + n_pos : (r + 1) * per] for r in range(self.world_size)] if n_neg else []
            return torch.cat(pos + neg)

        d_all = arrange(gather_rows(d))
        m_all = arrange(gather_rows(dm.to(torch.uint8))).bool()
        t_all = arrange(gather_rows(t_d)) if t_d is not None else None
        return d_all, m_all, t_all

    def _sync_gradients(self) -> None:
        """Average the trainable gradients over the ranks: one flat all-reduce."""
        # A weight without a gradient has none on every rank (the same graph everywhere); AdamW
        # skips it, as in one process.
        params = [p for p in self.params.values() if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        flat = torch._utils._flatten_dense_tensors(grads)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(self.world_size)
        for g, avg in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
            g.copy_(avg)

    def _recover_from_oom(self, batch) -> None:
        raise TrainingError(
            f"out of memory on rank {self.rank} under torchrun: ranks cannot retry a step on their own "
            f"(the others are waiting in a collective). Set cached_contrastive: true with a smaller "
            f"mini_batch_size (now {self.mini}), or lower document_max_tokens, and resume"
        )

    # ----------------------------------------------------------------------------- state
    def _rng(self) -> dict[str, np.ndarray]:
        out = {"cpu": torch.get_rng_state().numpy()}
        if self.device.type == "cuda":
            out["cuda"] = torch.cuda.get_rng_state(self.device).numpy()
        return out

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Rank 0's state (the weights and moments are the same on every rank) plus every
        rank's RNG, so a resume on the same number of ranks replays the same dropout masks."""
        tensors, meta = super().state()
        for r, rng in enumerate(self.coll.gather_objects(self._rng())):
            if r:
                for kind, value in rng.items():
                    tensors[f"rng.{kind}.rank{r}"] = value
        meta["world_size"] = self.world_size
        return tensors, meta

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        super().load_state(tensors, meta)
        if not self.rank:
            return
        key = f"rng.cpu.rank{self.rank}"
        if key in tensors:
            torch.set_rng_state(torch.from_numpy(np.array(tensors[key], dtype=np.uint8)))
            cuda_key = f"rng.cuda.rank{self.rank}"
            if cuda_key in tensors and self.device.type == "cuda":
                torch.cuda.set_rng_state(torch.from_numpy(np.array(tensors[cuda_key], dtype=np.uint8)), self.device)
        else:  # a checkpoint from fewer ranks: a fresh stream, derived from what was saved
            torch.manual_seed(_rank_seed(self.cfg.seed, self.rank, bytes(np.asarray(tensors["rng.cpu"]))))
