"""The MLX trainer: the torch trainer's step, in MLX (the ``Trainer`` protocol of ``backends.base``).

Same model names, LoRA init (``adapters.lora_a_init``), projection init, loss (passed in by the
loop, run on ``MLXOps``), AdamW (decay on 2-D tensors only, torch's update order), clipping,
accumulation, GradCache and checkpoint tensor names as ``torch_train``; so a run starts from the
same numbers in both frameworks and a checkpoint converts between them (``supergrep convert``).

What a step does (``train_step``), in order:
  1. plan memory: predict the step's peak from MLX's counters (bytes per padded token seen so
     far); if it would pass the budget, switch to cached mode with a mini-batch that fits;
  2. seed MLX's RNG from (seed, step, phase, mini-batch): dropout masks are a pure function
     of the position in the run, so a resumed run and a GradCache replay draw the same ones;
  3. run one compiled function (``mx.compile``; the model, optimizer moments and RNG are its
     explicit inputs and outputs, as in mlx-lm's trainer): forward, loss, ``value_and_grad``,
     clipping and AdamW - or, accumulating / cached, one compiled gradient function per
     micro-batch and a compiled update;
  4. ``mx.eval`` once per step (per micro-batch when accumulating: that bounds the memory), so
     no lazy graph spans two steps. Loss and accuracy stay MLX arrays until ``to_host``.
On out-of-memory the weights and moments of before the step are put back and the step is
retried in cached mode with half the mini-batch, as in the torch trainer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_unflatten

from supergrep.backends.adapters import projection_init
from supergrep.backends.mlx_backend import device_name, pick_device
from supergrep.backends.mlx_lora import (
    adapter_state,
    linear_to_lora_layers,
    load_adapter_state,
    lora_modules,
)
from supergrep.backends.mlx_models import build_dense, load_transformer, set_model_dropout
from supergrep.backends.mlx_ops import MLXOps
from supergrep.errors import TrainingError, UsageError

if TYPE_CHECKING:
    from supergrep.backends.adapters import LoRAConfig
    from supergrep.encoder.spec import ModelSpec
    from supergrep.train.config import TrainConfig
    from supergrep.train.data import Batch

log = logging.getLogger(__name__)

LossFn = Callable[..., tuple[Any, Any]]
BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults, as the torch trainer uses them
_OOM_TEXT = ("out of memory", "attempting to allocate", "maximum allowed buffer", "insufficient memory",
             "resource limit", "cudaerrormemoryallocation", "bad_alloc")


def is_oom(exc: BaseException) -> bool:
    """MLX reports allocation failures as RuntimeError ([metal::malloc] ..., CUDA errors)."""
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and any(s in str(exc).lower() for s in _OOM_TEXT))


def memory_budget() -> int:
    """Bytes a step may use: 90% of the device's recommended working set (Metal), its memory
    (CUDA) or MLX's memory limit (CPU: about the RAM), whichever is smallest."""
    limit = mx.get_memory_limit()
    info = mx.device_info() if mx.default_device().type == mx.gpu else {}
    for key in ("max_recommended_working_set_size", "memory_size", "total_memory"):
        if isinstance(info.get(key), int) and info[key] > 0:
            limit = min(limit, info[key])
    return int(0.9 * limit)


class Tower(nn.Module):
    """The encoder + the projection(s) + L2 normalisation: ``(ids, mask) -> (B, L, dim)`` float32.

    Parameter names are the torch trainer's: ``model.<HF path>.lora_A``, ``proj.<i>.weight``.
    """

    def __init__(self, model: nn.Module, proj: list[nn.Module]):
        super().__init__()
        self.model = model
        self.proj = proj

    def __call__(self, ids: mx.array, mask: mx.array) -> mx.array:
        h = self.model(ids, mask)  # (B, L, H)
        for layer in self.proj:
            h = layer(h)
        h = h.astype(mx.float32)  # (B, L, dim)
        return h / mx.maximum(mx.sqrt(mx.sum(h * h, axis=-1, keepdims=True)), 1e-12)


class MLXTrainer:
    """Trains ``spec``'s model with LoRA in MLX; see the module docstring for one step.

    Args:
        compiled: ``mx.compile`` the step functions (off only to debug or compare).
    """

    name = "mlx"

    def __init__(self, spec: ModelSpec, cfg: TrainConfig, lora: LoRAConfig, loss_fn: LossFn, compiled: bool = True):
        self.cfg, self.lora, self.spec, self.loss_fn = cfg, lora, spec, loss_fn
        self._device = pick_device(cfg.device)
        mx.set_default_device(self._device)
        self.device = device_name(self._device)
        self.dtype = self._compute_dtype(cfg.precision)
        model = load_transformer(spec, self.dtype)  # frozen base in the compute dtype; adapters stay fp32
        model.fused_attention = cfg.attn_implementation == "sdpa"
        model.recompute = cfg.gradient_checkpointing
        model.freeze()
        if cfg.model_dropout >= 0:  # before LoRA: its branch's dropout is lora_dropout's
            set_model_dropout(model, cfg.model_dropout)
        self.adapted = linear_to_lora_layers(model, lora, spec.model_type, seed=cfg.seed)
        head, self.replaces_base = self._make_head(spec, cfg)
        frozen = [build_dense(d, self.dtype) for d in (spec.dense[:-1] if self.replaces_base else spec.dense)]
        for layer in frozen:
            layer.freeze()
        self.head_index = len(frozen)
        self.tower = Tower(model, [*frozen, head])
        # The distillation teacher: the base as it was (LoRA off, eval mode, the base's own
        # projections), as the torch trainer's; its vectors never carry a gradient.
        self.needs_teacher = bool(getattr(loss_fn, "needs_teacher", False))
        self.teacher_head = [build_dense(d, self.dtype) for d in spec.dense]
        for layer in self.teacher_head:
            layer.freeze()
        self._lora = list(lora_modules(model).values())
        self.tower.train()
        params = dict(tree_flatten(self.tower.trainable_parameters()))
        lora_names = [n for n in params if n.endswith(".lora_A") or n.endswith(".lora_B")]
        if len(lora_names) != 2 * len(self.adapted) or len(params) != len(lora_names) + len(head.parameters()):
            raise TrainingError(f"{len(lora_names)} LoRA tensors and {len(params) - len(lora_names)} others are "
                                f"trainable; expected {2 * len(self.adapted)} and the projection")
        self.param_names = sorted(params)
        self.decay = {n: params[n].ndim >= 2 for n in self.param_names}  # AdamW decay on 2-D tensors only
        # The optimizer's moments: dicts whose identity never changes (compiled functions write
        # into them), float32 like the parameters.
        self.opt: dict[str, dict[str, mx.array]] = {
            "exp_avg": {n: mx.zeros_like(params[n]) for n in self.param_names},
            "exp_avg_sq": {n: mx.zeros_like(params[n]) for n in self.param_names},
        }
        self.opt_steps = 0  # AdamW's step count (bias correction)
        self.steps_taken = 0  # train_step calls: with the seed, what the RNG is derived from
        self.ops = MLXOps()
        self.cached = cfg.cached_contrastive
        self.mini = cfg.mini_batch_size
        self.oom_events = 0
        self._since_oom = 0
        self.budget = memory_budget()
        self._bytes_per_token: float | None = None
        self._peak = self._last_peak = 0
        mx.eval(self.tower.parameters(), self.opt, [t.parameters() for t in self.teacher_head])
        self._build(compiled)

    # ------------------------------------------------------------------------------ set-up
    def _compute_dtype(self, precision: str) -> mx.Dtype:
        if precision == "auto":
            return mx.float32 if self.device == "cpu" else mx.bfloat16
        if precision == "fp16":
            raise UsageError("the MLX trainer has no fp16 loss scaling; use precision bf16 (or fp32)")
        return mx.bfloat16 if precision == "bf16" else mx.float32

    def _make_head(self, spec: ModelSpec, cfg: TrainConfig) -> tuple[nn.Linear, bool]:
        last = spec.dense[-1] if spec.dense else None
        if (last is not None and last.activation == "identity" and not last.residual
                and cfg.projection_dim in (0, last.out_features)):
            dense = build_dense(last, mx.float32)  # train the base's own head (XTR), in fp32
            return dense.linear, True
        if cfg.projection_dim == 0:
            raise UsageError("projection_dim 0 needs a base model with its own projection (e.g. XTR's 2_Dense)")
        head = nn.Linear(spec.dim, cfg.projection_dim, bias=False)
        head.weight = mx.array(projection_init(cfg.seed, cfg.projection_dim, spec.dim))
        return head, False

    def _build(self, compiled: bool) -> None:
        """The step functions, compiled with their state as explicit inputs/outputs."""
        everything = [self.tower.state, self.opt, mx.random.state]
        reads = [self.tower.state, mx.random.state]

        def comp(fn, inputs, outputs):
            return mx.compile(fn, inputs=inputs, outputs=outputs) if compiled else fn

        self._grad_fn = nn.value_and_grad(self.tower, self._loss_on)
        self._step_fn = comp(self._fused_step, everything, everything)
        # value_and_grad puts traced arrays into the tower: a function that differentiates must
        # list the tower among its outputs too, so the real arrays are written back.
        self._micro_fn = comp(self._micro_grads, reads, reads)
        self._apply_fn = comp(self._apply_grads, everything, everything)
        self._embed_fn = comp(self._embed, reads, [mx.random.state])
        self._replay_fn = comp(self._replay, reads, reads)
        self._emb_loss_fn = comp(mx.value_and_grad(self._loss_on_embeddings, argnums=(0, 1)), [], [])
        self._eval_fn = comp(self._eval_loss, [self.tower.state], [])
        self._teacher_fn = comp(self._teacher_vectors, [self.tower.state, [t.state for t in self.teacher_head]], [])

    # -------------------------------------------------------------------- traced functions
    # Each takes ``train`` (a Python bool: part of mx.compile's cache key) and sets the mode
    # while tracing, so dropout is never baked into a trace meant for the other mode.
    # ``teacher`` (the distillation term's input) is () or (query vectors, document vectors).
    def _loss_on(self, q_ids, q_mask, d_ids, d_mask, *teacher):
        q = self.tower(q_ids, q_mask)  # (n_q, q_len, dim)
        d = self.tower(d_ids, d_mask)  # (n_d, d_len, dim)
        return self.loss_fn(self.ops, q, q_mask, d, d_mask, tuple(teacher) or None)

    def _loss_on_embeddings(self, q, d, q_mask, d_mask, *teacher):
        return self.loss_fn(self.ops, q, q_mask, d, d_mask, tuple(teacher) or None)

    def _teacher_vectors(self, ids, mask):
        """The frozen base's unit token vectors: every LoRA layer off, eval mode (no dropout,
        no RNG drawn), the base's own Dense layers; no gradient."""
        was = self.tower.training
        self.tower.eval()
        for m in self._lora:
            m.enabled = False
        try:
            h = self.tower.model(ids, mask)
            for layer in self.teacher_head:
                h = layer(h)
            h = h.astype(mx.float32)
            return mx.stop_gradient(h / mx.maximum(mx.sqrt(mx.sum(h * h, axis=-1, keepdims=True)), 1e-12))
        finally:
            for m in self._lora:
                m.enabled = True
            self.tower.train(was)

    def _teacher_in_graph(self, q_ids, q_mask, d_ids, d_mask) -> tuple:
        """Inside a traced step: () or the teacher's (q, d) vectors."""
        if not self.needs_teacher:
            return ()
        return self._teacher_vectors(q_ids, q_mask), self._teacher_vectors(d_ids, d_mask)

    def _teacher_cached(self, ids, mask) -> mx.array:
        """The teacher's vectors in mini-batches, each evaluated (the memory of one)."""
        parts = []
        for s in range(0, ids.shape[0], self.mini):
            part = self._teacher_fn(ids[s : s + self.mini], mask[s : s + self.mini])
            mx.eval(part)
            parts.append(part)
        return mx.concatenate(parts)

    def _fused_step(self, q_ids, q_mask, d_ids, d_mask, hp, train: bool):
        self.tower.train(train)
        teacher = self._teacher_in_graph(q_ids, q_mask, d_ids, d_mask)
        (loss, acc), grads = self._grad_fn(q_ids, q_mask, d_ids, d_mask, *teacher)
        self._apply_grads(grads, hp)
        return loss, acc

    def _micro_grads(self, q_ids, q_mask, d_ids, d_mask, scale, train: bool):
        self.tower.train(train)
        teacher = self._teacher_in_graph(q_ids, q_mask, d_ids, d_mask)
        (loss, acc), grads = self._grad_fn(q_ids, q_mask, d_ids, d_mask, *teacher)
        return loss, acc, tree_map(lambda g: g * scale, grads)

    def _apply_grads(self, grads, hp):
        """Clip to ``max_grad_norm`` and take one AdamW step, exactly as torch orders it.

        ``hp`` = [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t), 1 - lr * weight_decay], computed
        on the host in double precision (as torch does), passed as an array so a new lr never
        recompiles.
        """
        flat = dict(tree_flatten(grads))
        if self.cfg.max_grad_norm > 0:  # torch.nn.utils.clip_grad_norm_
            total = mx.sqrt(sum(mx.sum(mx.square(g)) for g in flat.values()))
            coef = mx.minimum(self.cfg.max_grad_norm / (total + 1e-6), 1.0)
            flat = {k: g * coef for k, g in flat.items()}
        params = dict(tree_flatten(self.tower.trainable_parameters()))
        b1, b2 = BETAS
        new = []
        for name in self.param_names:
            p, g = params[name], flat[name]
            if self.decay[name]:
                p = p * hp[3]
            m = self.opt["exp_avg"][name]
            m = m + (1 - b1) * (g - m)  # torch: exp_avg.lerp_(grad, 1 - beta1)
            v = self.opt["exp_avg_sq"][name] * b2 + (1 - b2) * (g * g)
            self.opt["exp_avg"][name], self.opt["exp_avg_sq"][name] = m, v
            new.append((name, p - hp[1] * (m / (mx.sqrt(v) / hp[2] + EPS))))
        self.tower.update(tree_unflatten(new))

    def _embed(self, ids, mask, train: bool):
        self.tower.train(train)
        return mx.stop_gradient(self.tower(ids, mask))

    def _replay(self, ids, mask, grad, train: bool):
        """d(sum(tower(ids) * grad)) / d(params): a mini-batch's share of the gradient."""
        self.tower.train(train)

        def surrogate(ids, mask, grad):
            return mx.sum(self.tower(ids, mask) * grad)

        _, grads = nn.value_and_grad(self.tower, surrogate)(ids, mask, grad)
        return grads

    def _eval_loss(self, q_ids, q_mask, d_ids, d_mask):
        self.tower.eval()
        fn = getattr(self.loss_fn, "validation", self.loss_fn)  # the labels' loss, as in torch
        return fn(self.ops, self.tower(q_ids, q_mask), q_mask, self.tower(d_ids, d_mask), d_mask)

    # ----------------------------------------------------------------------------- a step
    def _seed(self, phase: int, i: int) -> None:
        """Dropout randomness = f(seed, step, phase, mini-batch): exact resume and replay."""
        ss = np.random.SeedSequence([self.cfg.seed, self.steps_taken, phase, i])
        mx.random.seed(int(ss.generate_state(1, np.uint64)[0]))

    def _hyper(self, lr: float) -> mx.array:
        t = self.opt_steps + 1
        b1, b2 = BETAS
        return mx.array([lr, lr / (1 - b1**t), math.sqrt(1 - b2**t), 1 - lr * self.cfg.weight_decay], dtype=mx.float32)

    @staticmethod
    def _to_device(batch: Batch):
        return (mx.array(batch.q_ids.astype(np.int32)), mx.array(batch.q_mask), mx.array(batch.d_ids.astype(np.int32)),
                mx.array(batch.d_mask))

    def _step_plain(self, q_ids, q_mask, d_ids, d_mask, hp):
        k, train = self.cfg.grad_accum_steps, self.tower.training
        if k == 1:
            self._seed(0, 0)
            loss, acc = self._step_fn(q_ids, q_mask, d_ids, d_mask, hp, train)
            return loss, acc
        # Plain accumulation: each micro-batch only sees its own documents as negatives.
        n_q = q_ids.shape[0]
        size = n_q // k
        n_neg = (d_ids.shape[0] - n_q) // n_q if d_ids.shape[0] > n_q else 0
        total, losses, accs = None, [], []
        for j, s in enumerate(range(0, n_q, size)):
            rows = list(range(s, s + size))
            sel = mx.array(rows + [n_q + r * n_neg + i for r in rows for i in range(n_neg)])
            self._seed(0, j)
            loss, acc, grads = self._micro_fn(q_ids[s : s + size], q_mask[s : s + size], d_ids[sel], d_mask[sel],
                                              mx.array(1.0 / k), train)
            total = grads if total is None else tree_map(mx.add, total, grads)
            mx.eval(total, loss, acc)  # one micro-batch's graph at a time: that is the point of accumulating
            losses.append(loss)
            accs.append(acc)
        self._apply_fn(total, hp)
        return mx.mean(mx.stack(losses)), mx.mean(mx.stack(accs))

    def _embed_cached(self, ids, mask, phase: int):
        parts = []
        for i, s in enumerate(range(0, ids.shape[0], self.mini)):
            self._seed(phase, i)
            rep = self._embed_fn(ids[s : s + self.mini], mask[s : s + self.mini], self.tower.training)
            mx.eval(rep)
            parts.append(rep)
        return mx.concatenate(parts)

    def _replay_grads(self, ids, mask, grad, phase: int, total):
        for i, s in enumerate(range(0, ids.shape[0], self.mini)):
            self._seed(phase, i)  # the same dropout masks as when the embeddings were made
            g = self._replay_fn(ids[s : s + self.mini], mask[s : s + self.mini], grad[s : s + self.mini],
                                self.tower.training)
            total = g if total is None else tree_map(mx.add, total, g)
            mx.eval(total)
        return total

    def _step_cached(self, q_ids, q_mask, d_ids, d_mask, hp):
        """GradCache: embed in mini-batches without a graph, loss + gradients w.r.t. the
        embeddings over the whole batch, then each mini-batch's share of the weight gradient."""
        teacher = ((self._teacher_cached(q_ids, q_mask), self._teacher_cached(d_ids, d_mask))
                   if self.needs_teacher else ())
        q = self._embed_cached(q_ids, q_mask, 1)  # (n_q, q_len, dim), no graph
        d = self._embed_cached(d_ids, d_mask, 2)  # (n_d, d_len, dim)
        (loss, acc), (q_grad, d_grad) = self._emb_loss_fn(q, d, q_mask, d_mask, *teacher)
        mx.eval(loss, acc, q_grad, d_grad)
        total = self._replay_grads(q_ids, q_mask, q_grad, 1, None)
        total = self._replay_grads(d_ids, d_mask, d_grad, 2, total)
        self._apply_fn(total, hp)
        return loss, acc

    def train_step(self, batch: Batch, lr: float) -> tuple[mx.array, mx.array]:
        """One optimizer step on ``batch``; returns (loss, in-batch accuracy) as MLX scalars."""
        self.steps_taken += 1
        hp = self._hyper(lr)
        tensors = self._to_device(batch)
        self._plan_memory(batch)
        saved = self._snapshot()
        active = mx.get_active_memory()
        mx.reset_peak_memory()
        while True:
            try:
                step = self._step_cached if self.cached else self._step_plain
                loss, acc = step(*tensors, hp)
                mx.eval(loss, acc, self.tower.trainable_parameters(), self.opt)  # the one sync of the step
                break
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled
                if not (is_oom(exc) and self.cfg.dynamic_batch):
                    raise
                self._restore(saved)
                self._recover_from_oom(batch)
        self.opt_steps += 1
        self._measure(batch, active)
        self._maybe_grow()
        return loss, acc

    # ---------------------------------------------------------------------------- memory
    def _snapshot(self):
        """References to the evaluated weights and moments (arrays are immutable: free)."""
        return (tree_flatten(self.tower.trainable_parameters()),
                {k: dict(v) for k, v in self.opt.items()})

    def _restore(self, saved) -> None:
        params, opt = saved
        self.tower.update(tree_unflatten(params))
        for k, v in opt.items():
            self.opt[k].update(v)
        mx.clear_cache()

    def _graph_tokens(self, batch: Batch, cached: bool, mini: int) -> int:
        """Padded tokens encoded under one autograd graph (what activation memory scales with)."""
        q_len, d_len = batch.q_ids.shape[1], batch.d_ids.shape[1]
        if cached:
            return max(min(mini, batch.q_ids.shape[0]) * q_len, min(mini, batch.d_ids.shape[0]) * d_len)
        k = self.cfg.grad_accum_steps
        return (batch.q_ids.size + batch.d_ids.size) // k

    def _plan_memory(self, batch: Batch) -> None:
        """Shrink the step before it runs if the measured bytes/token say it would not fit."""
        if not self.cfg.dynamic_batch or self._bytes_per_token is None:
            return
        base = mx.get_active_memory()

        def fits(cached: bool, mini: int) -> bool:
            return base + self._bytes_per_token * self._graph_tokens(batch, cached, mini) <= self.budget

        if fits(self.cached, self.mini):
            return
        mini = self.mini if self.cached else max(1, min(self.mini, batch.q_ids.shape[0] // 2))
        while mini > 1 and not fits(True, mini):
            mini //= 2
        if not fits(True, mini):
            raise TrainingError(f"a mini-batch of 1 needs more memory than the budget ({self.budget / 2**30:.1f} GiB); "
                                f"lower document_max_tokens or use a device with more memory")
        log.warning("memory: the next step would need more than %.1f GiB; cached contrastive mini-batches of %d",
                    self.budget / 2**30, mini)
        self.cached, self.mini = True, mini
        self.oom_events += 1
        self._since_oom = 0

    def _measure(self, batch: Batch, active_before: int) -> None:
        peak = mx.get_peak_memory()
        self._peak = max(self._peak, peak)
        used = max(0, peak - active_before)
        est = used / max(1, self._graph_tokens(batch, self.cached, self.mini))
        # The largest recent value, slowly forgotten: new shapes can cost more than old ones.
        self._bytes_per_token = est if self._bytes_per_token is None else max(est, 0.98 * self._bytes_per_token)
        self._last_peak = peak

    def _recover_from_oom(self, batch: Batch) -> None:
        if self.cached:
            self.mini //= 2
        else:
            self.cached = True
            self.mini = max(1, min(self.mini, batch.q_ids.shape[0] // 2))
        self.oom_events += 1
        self._since_oom = 0
        if self.mini < 1:
            raise TrainingError("out of memory even with mini-batches of 1; lower document_max_tokens or use a "
                                "device with more memory")
        log.warning("out of memory: retrying the step with cached contrastive mini-batches of %d", self.mini)

    def _maybe_grow(self) -> None:
        """After 100 clean steps following a shrink, double the mini-batch if the peak stayed
        under half the budget."""
        if not self.oom_events or self.mini >= self.cfg.mini_batch_size:
            return
        self._since_oom += 1
        if self._since_oom >= 100:
            if self._last_peak < 0.5 * self.budget:
                self.mini = min(self.cfg.mini_batch_size, self.mini * 2)
                log.info("memory headroom: cached mini-batch grown to %d", self.mini)
            self._since_oom = 0

    def memory(self) -> dict:
        return {"peak_bytes": int(self._peak), "active_bytes": int(mx.get_active_memory()),
                "cache_bytes": int(mx.get_cache_memory())}

    # ----------------------------------------------------------------------- eval, host
    def eval_batch(self, batch: Batch) -> tuple[mx.array, mx.array]:
        was = self.tower.training
        try:
            loss, acc = self._eval_fn(*self._to_device(batch))
            mx.eval(loss, acc)
            return loss, acc
        finally:
            self.tower.train(was)

    def encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(B, L) ids and mask -> (B, L, dim) unit vectors, in the current mode (tests, tools)."""
        return np.array(self.tower(mx.array(np.asarray(ids, np.int32)), mx.array(np.asarray(mask, bool))))

    @staticmethod
    def to_host(values: list) -> list[float]:
        """One copy for a window of per-step scalars (already evaluated by their steps)."""
        if not values:
            return []
        return np.array(mx.stack([v.astype(mx.float32) for v in values])).tolist()

    # ---------------------------------------------------------------------------- state
    def trainable(self) -> dict[str, mx.array]:
        return dict(tree_flatten(self.tower.trainable_parameters()))

    def adapter_weights(self) -> dict[str, np.ndarray]:
        return adapter_state(self.tower.model)

    def projection(self) -> tuple[np.ndarray, bool]:
        """(head weight (out, in) float32, whether it replaces the base's own last Dense)."""
        return np.array(self.tower.proj[self.head_index].weight.astype(mx.float32)), self.replaces_base

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Weights and AdamW moments under the torch trainer's names. No RNG tensor: MLX's
        randomness is re-derived from (seed, steps_taken) at every step."""
        tensors: dict[str, np.ndarray] = {}
        params = self.trainable()
        for name in self.param_names:
            tensors[f"param.{name}"] = np.array(params[name].astype(mx.float32))
            if self.opt_steps:
                tensors[f"optim.{name}.exp_avg"] = np.array(self.opt["exp_avg"][name])
                tensors[f"optim.{name}.exp_avg_sq"] = np.array(self.opt["exp_avg_sq"][name])
                tensors[f"optim.{name}.step"] = np.asarray(self.opt_steps, dtype=np.float32)
        meta = {"backend": "mlx", "cached": self.cached, "mini": self.mini, "oom_events": self.oom_events,
                "steps_taken": self.steps_taken}
        return tensors, meta

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        written_by = meta.get("backend", "torch")
        if written_by != "mlx":
            raise TrainingError(f"this checkpoint was written by the {written_by} trainer; `supergrep convert "
                                f"CHECKPOINT --to mlx -o DIR` it, or resume with --backend {written_by}")
        params = self.trainable()
        missing = [n for n in self.param_names if f"param.{n}" not in tensors]
        bad = [n for n in self.param_names if n not in missing
               and tuple(np.shape(tensors[f"param.{n}"])) != tuple(params[n].shape)]
        if missing or bad:
            raise TrainingError(f"the checkpoint does not fit this model: no weights for {missing[:3]}, other "
                                f"shapes for {bad[:3]}")
        self.tower.update(tree_unflatten([(n, mx.array(np.asarray(tensors[f"param.{n}"], np.float32)))
                                          for n in self.param_names]))
        steps = 0
        for n in self.param_names:
            for key in ("exp_avg", "exp_avg_sq"):
                if f"optim.{n}.{key}" in tensors:
                    self.opt[key][n] = mx.array(np.asarray(tensors[f"optim.{n}.{key}"], np.float32))
            if f"optim.{n}.step" in tensors:
                steps = int(np.asarray(tensors[f"optim.{n}.step"]).reshape(-1)[0])
        self.opt_steps = steps
        self.steps_taken = int(meta.get("steps_taken", steps))
        self.cached, self.mini = bool(meta.get("cached", self.cached)), int(meta.get("mini", self.mini))
        self.oom_events = int(meta.get("oom_events", 0))
        mx.eval(self.tower.parameters(), self.opt)

    def load_adapter(self, weights: dict[str, np.ndarray]) -> int:
        return load_adapter_state(self.tower.model, weights)


