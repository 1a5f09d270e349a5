"""The PyTorch trainer: frozen base + LoRA + a trainable projection, one optimizer step per batch.

What a step does (``train_step``), in order:
  1. move the batch to the device (pinned, non-blocking on CUDA);
  2. plain mode: encode queries and documents with autograd and take the loss over the whole
     batch (or over ``grad_accum_steps`` micro-batches, each with its own, smaller, set of
     in-batch negatives); cached mode (GradCache, Gao et al. 2021): encode everything in
     mini-batches without a graph, take the loss over the full batch on those embeddings, then
     re-encode each mini-batch with a graph and backpropagate the embeddings' gradients into
     it - all negatives, a mini-batch's memory; with ``packing`` (plain steps) the documents
     run as rows of several documents under a block-diagonal attention mask (``Batch.packed``)
     and are gathered back into the padded layout, so nothing downstream changes;
  3. on out-of-memory (with ``dynamic_batch``): drop the partial gradients, switch to cached
     mode with half the mini-batch and retry the same step;
  4. (distributed: average the gradients over the ranks, ``torch_dist.py``) clip, AdamW step,
     zero the gradients.
Losses and accuracies stay on the device; the loop reads them back every ``log_every`` steps.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from supergrep.backends.adapters import projection_init
from supergrep.backends.torch_backend import build_dense, load_encoder, pick_device
from supergrep.backends.torch_compile import (
    bind_autograd_thread_context,
    compile_dynamic,
    resolve_compile_mode,
)
from supergrep.backends.torch_lora import adapter_state, linear_to_lora_layers, load_adapter_state
from supergrep.backends.torch_ops import TorchOps
from supergrep.errors import TrainingError, UsageError

if TYPE_CHECKING:
    from supergrep.backends.adapters import LoRAConfig
    from supergrep.encoder.spec import ModelSpec
    from supergrep.train.config import TrainConfig
    from supergrep.train.data import Batch

log = logging.getLogger(__name__)

# Encoders with absolute position embeddings that `attn_implementation: varlen` runs
# (torch_t5_varlen.bert_varlen_forward); T5 has its own forward there.
VARLEN_BERT_TYPES = ("bert", "roberta", "xlm-roberta")

# (ops, q, q_mask, d, d_mask) -> (loss, in-batch accuracy): built by the training loop from
# supergrep.train.losses; the backend never imports the losses itself.
LossFn = Callable[[Any, Any, Any, Any, Any], tuple[Any, Any]]


# padded_rows: the padded layout built by a scatter whose backward is a gather (True), or by a
# gather whose backward scatter-adds atomically (False, the default: on the H200 the scatter form's
# backward graph failed to build under Inductor's C++ wrapper, an undeclared `int_array` in the
# generated code, twenty-seventh session; unmeasured in the step). SUPERGREP_SCATTER_ROWS=1 opts
# in; step_trace.py --ab scatter_rows compares the two.
SCATTER_ROWS = os.environ.get("SUPERGREP_SCATTER_ROWS", "0") == "1"


def padded_rows(flat: torch.Tensor, gather: torch.Tensor) -> torch.Tensor:
    """Unit vectors of ``flat`` (N, dim) in the padded layout ``gather`` (..., width) gives, index N
    (one past the end) meaning padding: a zero vector. Equals ``normalize(cat(flat, 0)[gather])``.

    Why a scatter: ``flat[gather]``'s backward scatter-adds every padded position's gradient with
    atomic adds, and every padding position adds into the same row N. At batch 384 (queries
    widened to the documents' 512) that one kernel took 1.58 ms of a 79 ms step on an H200. Here
    each flat row is stored at its one padded position (``pos``), so the backward is a gather and
    no atomics remain. Rows nothing gathers (fillers) go to one spare row past the end.
    """
    dim = flat.shape[-1]
    if not SCATTER_ROWS:  # the form every GPU figure so far was measured with
        return nn.functional.normalize(torch.cat([flat, flat.new_zeros(1, dim)])[gather], p=2, dim=-1)
    vec = nn.functional.normalize(flat, p=2, dim=-1)  # N rows, not the padded layout's n x width
    size = gather.numel()
    # each flat row's padded position; padding entries all write row N (dropped), fillers keep `size`
    pos = torch.full((vec.shape[0] + 1,), size, dtype=torch.long, device=vec.device)
    pos = pos.index_put((gather.reshape(-1),), torch.arange(size, device=vec.device))[:-1]
    out = vec.new_zeros(size + 1, dim).index_put((pos,), vec)
    return out[:size].view(*gather.shape, dim)


def is_oom(exc: BaseException) -> bool:
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if oom_types and isinstance(exc, oom_types):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


@dataclass
class Head:
    """How the projection was set up, for saving it."""

    module: nn.Linear
    replaces_base: bool  # True: it is a trained copy of the base's own (last) Dense layer


class _RandState:
    """The RNG state at one point, so a re-encode sees the same dropout masks (GradCache)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self):
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


class NoDropout(nn.Identity):
    """An identity where a dropout layer was; ``p = 0`` for code that reads the layer's
    probability (HF's BERT attention passes ``self.dropout.p`` to its attention function)."""

    p = 0.0


def set_fp8_products(model: nn.Module, on: bool, scaling: str = "row", quantize: str = "compiled") -> int:
    """Run every LoRA projection of ``model`` with float8 products (``torch_fused_lora.py``);
    returns how many were switched. Projections whose sizes float8 cannot take stay in bf16.
    ``scaling``: the forward's input quantised per row ("row") or with the previous step's
    amax ("delayed": a non-persistent 1-element buffer per projection, ``quantize_delayed``).
    ``quantize``: the row quantisations fused by the compiler into their producers ("compiled"),
    run as one opaque op each ("kernel": ``torch_fp8.quantize_rows_op``), or compiled except
    T5's gated GELU backward, which runs with its quantisation as one op ("gated":
    ``torch_fp8.gated_gelu_backward_fp8``)."""
    from supergrep.backends.torch_lora import LoRALinear

    if scaling not in ("row", "delayed"):
        raise ValueError(f"fp8 scaling must be row or delayed, not {scaling!r}")
    if quantize not in ("compiled", "kernel", "gated"):
        raise ValueError(f"fp8 quantize must be compiled, kernel or gated, not {quantize!r}")
    n = 0
    for m in model.modules():
        if isinstance(m, LoRALinear):
            m.fp8 = on
            m.fp8_quantize = quantize
            if on and scaling == "delayed":
                m.register_buffer("fp8_amax", torch.zeros(1, device=m.base.weight.device), persistent=False)
            elif hasattr(m, "fp8_amax"):
                del m.fp8_amax
            n += 1
    return n


def set_model_dropout(model: nn.Module, p: float) -> int:
    """Every ``nn.Dropout`` of ``model`` at probability ``p``; at 0 each becomes ``NoDropout``,
    so no mask is drawn, stored or applied (eager and compiled alike). Returns how many layers
    changed. Attention modules that keep the probability as a float attribute (HF's T5Attention:
    ``self.dropout``) get it set there too."""
    n = 0
    for parent in list(model.modules()):
        for attr in ("dropout", "dropout_prob", "attention_dropout"):
            if isinstance(getattr(parent, attr, None), float):
                setattr(parent, attr, p)
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Dropout):
                if p == 0:
                    setattr(parent, name, NoDropout())
                else:
                    child.p = p
                n += 1
    cfg = getattr(model, "config", None)
    for key in ("dropout_rate", "hidden_dropout_prob", "attention_probs_dropout_prob"):
        if cfg is not None and hasattr(cfg, key):
            setattr(cfg, key, p)
    return n


class TorchTrainer:
    """Trains ``spec``'s model with LoRA; see the module docstring for one step."""

    name = "torch"

    def __init__(self, spec: ModelSpec, cfg: TrainConfig, lora: LoRAConfig, loss_fn: LossFn,
                 teacher_spec: ModelSpec | None = None):
        self.cfg, self.lora, self.spec, self.loss_fn = cfg, lora, spec, loss_fn
        torch.manual_seed(cfg.seed)
        self.device = torch.device(pick_device(cfg.device))
        self.amp_dtype = self._amp_dtype(cfg.precision)
        if self.device.type == "cuda" and self.amp_dtype is not None:
            # a process-wide switch: TF32 for float32 matmuls (the loss, the LoRA merge), or not
            torch.backends.cuda.matmul.allow_tf32 = bool(cfg.tf32)
        model = load_encoder(spec, torch.float32)  # fp32 master weights; autocast computes
        if cfg.attn_implementation == "eager" and hasattr(model, "set_attn_implementation"):
            with contextlib.suppress(Exception):
                model.set_attn_implementation("eager")
        for p in model.parameters():
            p.requires_grad_(False)
        if cfg.model_dropout >= 0:
            set_model_dropout(model, cfg.model_dropout)
        self.adapted = linear_to_lora_layers(model, lora, spec.model_type, seed=cfg.seed)
        if cfg.qat_bits:  # quantization-aware training (backends/torch_quant.py)
            from supergrep.backends.torch_quant import enable_qat

            log.info("QAT: %s", enable_qat(model, cfg.qat_bits, cfg.qat_group_size))
        if cfg.fp8_products:
            from supergrep.backends.torch_fp8 import fp8_supported

            if not fp8_supported(self.device):
                raise UsageError(f"fp8_products needs a CUDA GPU with float8 tensor cores (Ada, Hopper); "
                                 f"the device here is {self.device}: leave fp8_products off")
            log.info("float8 products for %d LoRA projections", set_fp8_products(model, True, cfg.fp8_scaling, cfg.fp8_quantize))
        self.head = self._make_head(spec, cfg)
        frozen = [build_dense(d) for d in (spec.dense[:-1] if self.head.replaces_base else spec.dense)]
        for m in frozen:
            for p in m.parameters():
                p.requires_grad_(False)
        self.model = model.to(self.device)
        self.proj = nn.Sequential(*frozen, self.head.module).to(self.device)
        # The distillation teacher: the base as it was (LoRA off, the base's own projections).
        self.needs_teacher = bool(getattr(loss_fn, "needs_teacher", False))
        self.teacher_head = nn.Sequential(*[build_dense(d) for d in spec.dense]).to(self.device).eval()
        for p in self.teacher_head.parameters():
            p.requires_grad_(False)
        # distill_teacher: another model as that teacher, on its own tokens of the batch (Batch.teacher)
        self.ext_teacher = self._load_teacher(teacher_spec) if self.needs_teacher and cfg.distill_teacher else None
        self._teacher_tensors: tuple[torch.Tensor, ...] | None = None
        if cfg.gradient_checkpointing:
            if not hasattr(model, "gradient_checkpointing_enable"):
                raise UsageError(f"gradient checkpointing is not available for {spec.model_type} models")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.train()
        mode = self.compile_mode = resolve_compile_mode(cfg.compile_mode, self.device)
        if cfg.compile and mode == "cpp-wrapper":
            bind_autograd_thread_context(self.device)
        if cfg.compile:  # the first steps wait for Inductor: say so, or the run looks hung
            log.info("torch.compile (%s): the first steps compile, a few minutes (xtr-base on an H200: 86 s with "
                     "the Python wrapper, 217 s with the C++ one); later steps reuse the compiled code",
                     "Inductor's C++ wrapper" if mode == "cpp-wrapper" else mode or "default mode")
        self._cudagraphs = cfg.compile and self.device.type == "cuda" and cfg.compile_mode == "reduce-overhead"
        self._encode_impl = compile_dynamic(self._encode_eager, mode) if cfg.compile else self._encode_eager
        self._pack_offset = self._packing_positions(spec.model_type, model) if cfg.packing else None
        self._encode_packed_impl = (compile_dynamic(self._encode_packed_eager, mode) if cfg.compile
                                    else self._encode_packed_eager)
        self._flex = cfg.attn_implementation == "flex"
        self._varlen = cfg.attn_implementation == "varlen"
        # varlen: the residual stream in the autocast dtype (train config residual_dtype: compute)
        self.residual_compute = cfg.residual_dtype == "compute" and self.amp_dtype is not None
        from supergrep.backends.torch_backend import T5_TYPES

        self._t5 = spec.model_type in T5_TYPES
        if self._flex and not self._t5:
            raise UsageError(f"attn_implementation flex is implemented for T5 encoders, not {spec.model_type}; "
                             f"use sdpa")
        if self._varlen and not (self._t5 or spec.model_type in VARLEN_BERT_TYPES):
            raise UsageError(f"attn_implementation varlen is implemented for T5, BERT and RoBERTa encoders, not "
                             f"{spec.model_type}; use sdpa")
        self._pad_id = int(getattr(model.config, "pad_token_id", 0) or 0)
        self._encode_flex_impl = compile_dynamic(self._encode_flex_eager, mode) if cfg.compile else self._encode_flex_eager
        self._encode_varlen_impl = (compile_dynamic(self._encode_varlen_eager, mode) if cfg.compile
                                    else self._encode_varlen_eager)
        # The loss too (MaxSim's masking and maxima over the (queries, tokens, documents, tokens)
        # similarities as one fused pass each way, instead of a dozen eager kernels per chunk).
        self._loss_impl = compile_dynamic(self._loss_eager, mode) if cfg.compile else self._loss_eager
        self.params = self._named_trainable()
        decay = [p for n, p in self.params.items() if p.ndim >= 2]
        no_decay = [p for n, p in self.params.items() if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        # Fused AdamW: one kernel for every tensor. On CPU (torch >= 2.4) it measured 2-3x faster
        # than the per-tensor loop for xtr-base's 169 LoRA tensors (docs/performance.md).
        try:
            self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8,
                                               fused=self.device.type in ("cuda", "cpu"))
        except (RuntimeError, TypeError):  # an older torch without the fused CPU kernel
            self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)
        self.ops = TorchOps(self.device)
        self.cached = cfg.cached_contrastive
        self.mini = cfg.mini_batch_size
        self.oom_events = 0
        self._since_oom = 0

    # ------------------------------------------------------------------------------ set-up
    def _amp_dtype(self, precision: str) -> torch.dtype | None:
        dev = self.device.type
        if precision == "auto":
            if dev == "cuda":
                return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return torch.float16 if dev == "mps" else None
        if precision == "fp32":
            return None
        if dev == "cpu" and precision == "fp16":
            raise UsageError("fp16 autocast is not supported on CPU; use precision bf16 or fp32")
        return torch.bfloat16 if precision == "bf16" else torch.float16

    def _make_head(self, spec: ModelSpec, cfg: TrainConfig) -> Head:
        last = spec.dense[-1] if spec.dense else None
        if last is not None and last.activation == "identity" and cfg.projection_dim in (0, last.out_features):
            layer = build_dense(last)
            if getattr(layer, "residual", None) is None:
                return Head(layer.linear, replaces_base=True)  # train the base's own head (XTR)
        in_dim = spec.dim
        if cfg.projection_dim == 0:
            raise UsageError("projection_dim 0 needs a base model with its own projection (e.g. XTR's 2_Dense)")
        head = nn.Linear(in_dim, cfg.projection_dim, bias=False)
        # A scaled random orthogonal map keeps the base's dot products roughly intact at step 0,
        # so training starts from a working retriever; drawn with NumPy (shared with MLX).
        with torch.no_grad():
            head.weight.copy_(torch.from_numpy(projection_init(cfg.seed, cfg.projection_dim, in_dim)))
        return Head(head, replaces_base=False)

    def _named_trainable(self) -> dict[str, nn.Parameter]:
        out: dict[str, nn.Parameter] = {}
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                out[f"model.{name}"] = p
        for name, p in self.proj.named_parameters():
            if p.requires_grad:
                out[f"proj.{name}"] = p
        lora = [n for n in out if n.endswith("lora_A") or n.endswith("lora_B")]
        if len(lora) != 2 * len(self.adapted):
            raise TrainingError(f"{len(lora)} LoRA tensors are trainable, expected {2 * len(self.adapted)}")
        return out

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.params.values())

    # ----------------------------------------------------------------------------- compute
    def _encode_eager(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                            enabled=self.amp_dtype is not None):
            hidden = self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state  # (B, L, H)
            vecs = self.proj(hidden)  # (B, L, dim)
        return nn.functional.normalize(vecs.float(), p=2, dim=-1)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self._encode_impl(ids, mask)

    @staticmethod
    def _packing_positions(model_type: str, model: nn.Module) -> int:
        """The position-id offset packed rows need (-1: the model takes no position ids, T5)."""
        from supergrep.backends.torch_backend import T5_TYPES

        if model_type in T5_TYPES:
            return -1  # relative position bias: a document's positions only differ within it
        if model_type == "bert":
            return 0
        if model_type in ("roberta", "xlm-roberta"):
            return int(model.config.pad_token_id) + 1  # RoBERTa counts positions from padding_idx + 1
        raise UsageError(f"packing is not supported for {model_type} models (BERT, RoBERTa and T5 are); "
                         f"set packing: false")

    def _encode_packed_eager(self, ids, seg, pos, gather) -> torch.Tensor:
        mask = seg[:, None, :, None] == seg[:, None, None, :]  # (rows, 1, T, T) block-diagonal
        extra = {"position_ids": pos + self._pack_offset} if self._pack_offset >= 0 else {}
        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                            enabled=self.amp_dtype is not None):
            hidden = self.model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state  # (rows, T, H)
            vecs = self.proj(hidden)  # (rows, T, dim)
        return padded_rows(vecs.float().reshape(-1, vecs.shape[-1]), gather)  # (n_d, d_len, dim) as encode() gives

    def _encode_flex_eager(self, ids, seg, block_mask, gather) -> torch.Tensor:
        from supergrep.backends.torch_t5_flex import packed_forward

        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                            enabled=self.amp_dtype is not None):
            vecs = self.proj(packed_forward(self.model, ids, seg, block_mask))  # (rows, T, dim)
        return padded_rows(vecs.float().reshape(-1, vecs.shape[-1]), gather)

    def _encode_varlen_eager(self, ids, cu, gather, max_len: int, pos) -> torch.Tensor:
        from supergrep.backends.torch_t5_varlen import bert_varlen_forward, varlen_forward

        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                            enabled=self.amp_dtype is not None):
            res = self.amp_dtype if self.residual_compute else None
            if self._t5:
                hidden = varlen_forward(self.model, ids, cu, max_len, residual_dtype=res)
            else:
                hidden = bert_varlen_forward(self.model, ids, pos, cu, max_len, self._pack_offset, residual_dtype=res)
            vecs = self.proj(hidden)  # (N, dim)
        return padded_rows(vecs.float(), gather)

    def _encode_flex(self, packed) -> torch.Tensor:
        """Vectors (n, width, dim) of packed rows through FlexAttention (``torch_t5_flex``; on a
        CPU, which has no FlexAttention backward, the same attention written out). The block mask
        is built outside the compiled region (a few small kernels per step)."""
        from supergrep.backends.torch_t5_flex import segment_block_mask

        ids, seg, _pos, gather = packed
        block_mask = segment_block_mask(seg) if self.device.type == "cuda" else None
        return self._encode_flex_impl(ids, seg, block_mask, gather)

    def encode_documents(self, d_ids: torch.Tensor, d_mask: torch.Tensor, packed=None) -> torch.Tensor:
        """Document vectors (n_d, d_len, dim): from the packed rows when there are, else padded."""
        if packed is None:
            return self.encode(d_ids, d_mask)
        if self._varlen:  # (profile's document forward) the documents alone, end to end
            from supergrep.backends.packing import flatten_queries_and_documents

            ids, mask = d_ids.cpu().numpy(), d_mask.cpu().numpy()
            f = flatten_queries_and_documents(ids[:0], mask[:0], ids, mask)
            ids_t, cu, gather, pos = self._move(f.ids, f.cu, f.gather, f.pos)
            return self._encode_varlen_impl(ids_t, cu, gather, -(-f.max_len // 64) * 64, pos)
        if self._flex:
            return self._encode_flex(packed)
        return self._encode_packed_impl(*packed)

    def _joint_host(self, batch: Batch) -> tuple:
        """The joint layout's host arrays: ("varlen", ids, cu, gather, bound, pos) or (ids, seg,
        pos, gather) of packed rows. Host work only (``stage`` runs it in the prefetch thread)."""
        if self._varlen:  # no rows at all: every token end to end (torch_t5_varlen.py)
            from supergrep.backends.packing import flatten_queries_and_documents

            static = self.cfg.static_shapes
            f = flatten_queries_and_documents(batch.q_ids, batch.q_mask, batch.d_ids, batch.d_mask,
                                              self.cfg.pad_multiple, self.cfg.pad_multiple // 64 if static else 0)
            # the kernels' grid only needs an upper bound: a multiple of 64 keeps compiled shapes few
            bound = max(f.max_len, self._static_len) if static else f.max_len
            return ("varlen", f.ids, f.cu, f.gather, -(-bound // 64) * 64, f.pos)
        from supergrep.backends.packing import pack_queries_and_documents

        p = pack_queries_and_documents(batch.q_ids, batch.q_mask, batch.d_ids, batch.d_mask,
                                       self.cfg.document_max_tokens, self._pad_id, self.cfg.pad_multiple)
        return (p.ids, p.seg, p.pos, p.gather)

    def _joint_to_device(self, host: tuple, staged: bool = False) -> tuple:
        move = self._move_staged if staged else self._move
        if isinstance(host[0], str):  # ("varlen", ...)
            ids, cu, gather, pos = move(*host[1:4], host[5])
            return ("varlen", ids, cu, gather, host[4], pos)
        return move(*host)

    def joint_packed_to_device(self, batch: Batch):
        """Queries and documents packed into one set of rows: one encoder pass per step instead
        of two, so half the kernel launches of a launch-bound step (docs/performance.md)."""
        if not self._packs(batch):
            return None
        return self._joint_to_device(self._joint_host(batch))

    def stage(self, batch: Batch) -> Batch:
        """The batch's host side of ``train_step`` done ahead, in the training loop's prefetch thread
        (``Batch.staged``): static cropping, the joint layout (the varlen flattening: 7-12 ms a
        batch of 384 on a 2-core EPYC), and on CUDA the copies into pinned memory. Without it the
        step's host does this work while the GPU waits: MiniLM at batch 384 on an H200 idled 8.1
        of 42.7 ms a step, most of it in ``sg::to_device`` (docs/performance.md #49).
        Thread-safe: reads the trainer's configuration only, touches no device."""
        if self.cfg.static_shapes and self._varlen:
            batch = self._static_batch(batch)
        # laid out as for a plain step: the step itself checks again (after an OOM it runs cached)
        joint = self._joint_host(batch) if self._packs(batch, cached=False) else None
        pin = self.device.type == "cuda"

        def host(a):
            t = torch.from_numpy(a) if isinstance(a, np.ndarray) else a
            return t.pin_memory() if pin and isinstance(t, torch.Tensor) else t

        # pinned memory for the trainer's device (a worker thread's current device is 0 otherwise)
        with torch.cuda.device(self.device) if pin else contextlib.nullcontext():
            plain = tuple(host(a) for a in (batch.q_ids, batch.q_mask, batch.d_ids, batch.d_mask))
            listwise = host(batch.t_scores) if batch.t_scores is not None else None
            joint = tuple(host(a) for a in joint) if joint else None
        return replace(batch, staged=(plain, joint, listwise))

    @torch.no_grad()
    def _teacher_vectors(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The frozen base's token vectors (LoRA off, eval mode: no dropout, no RNG used)."""
        from supergrep.backends.torch_lora import lora_modules

        mods = lora_modules(self.model).values()
        was_training = self.model.training
        self.model.eval()
        for m in mods:
            m.enabled = False
        try:
            return self._frozen_vectors(self.model, self.teacher_head, ids, mask)
        finally:
            for m in mods:
                m.enabled = True
            self.model.train(was_training)

    def _load_teacher(self, spec: ModelSpec | None) -> tuple[nn.Module, nn.Module]:
        """``distill_teacher``'s encoder and its projections (``spec``: ``train.loop.teacher_spec``,
        resolved above this layer), frozen, in eval mode, on the device."""
        if spec is None:
            raise UsageError("distill_teacher: the trainer needs the teacher's model spec (train.loop.make_trainer "
                             "passes teacher_spec(cfg))")
        model = load_encoder(spec, torch.float32).to(self.device).eval()
        head = nn.Sequential(*[build_dense(d) for d in spec.dense]).to(self.device).eval()
        for p in (*model.parameters(), *head.parameters()):
            p.requires_grad_(False)
        log.info("distillation teacher: %s (%s, its own tokenizer)", spec.name, spec.path)
        return model, head

    @torch.no_grad()
    def _frozen_vectors(self, model: nn.Module, head: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A teacher's unit token vectors, ``self.mini`` rows at a time under the step's autocast."""
        out = []
        for s in range(0, ids.shape[0], self.mini):
            with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                                enabled=self.amp_dtype is not None):
                hidden = model(input_ids=ids[s : s + self.mini], attention_mask=mask[s : s + self.mini].long()).last_hidden_state
                vecs = head(hidden)
            out.append(nn.functional.normalize(vecs.float(), p=2, dim=-1))
        return torch.cat(out)

    def _ext_teacher_vectors(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self._frozen_vectors(*self.ext_teacher, ids, mask)

    def _teacher(self, q_ids, q_mask, d_ids, d_mask) -> tuple[torch.Tensor, ...] | None:
        """The distillation term's teacher for this batch: the frozen base's (query vectors,
        document vectors) on the student's tokens, or ``distill_teacher``'s (query vectors, query
        mask, document vectors, document mask) on its own tokens of the same rows."""
        if not self.needs_teacher:
            return None
        if self.ext_teacher is None:
            return self._teacher_vectors(q_ids, q_mask), self._teacher_vectors(d_ids, d_mask)
        if self._teacher_tensors is None:
            raise TrainingError("distill_teacher: this batch carries no teacher tokens (Batch.teacher); "
                                "batches come from the training loop's collation")
        tq_ids, tq_mask, td_ids, td_mask = self._teacher_tensors
        if tq_ids.shape[0] != q_ids.shape[0] or td_ids.shape[0] != d_ids.shape[0]:
            raise TrainingError(f"distill_teacher: the teacher's tokens hold {tq_ids.shape[0]} queries and "
                                f"{td_ids.shape[0]} documents, the batch {q_ids.shape[0]} and {d_ids.shape[0]}")
        return (self._ext_teacher_vectors(tq_ids, tq_mask), tq_mask,
                self._ext_teacher_vectors(td_ids, td_mask), td_mask)

    def _loss_eager(self, q, qm, d, dm, teacher=None, listwise=None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.loss_fn(self.ops, q, qm, d, dm, teacher, listwise)

    def _loss(self, q, qm, d, dm, teacher=None, listwise=None) -> tuple[torch.Tensor, torch.Tensor]:
        return self._loss_impl(q, qm, d, dm, teacher, listwise)

    def _move(self, *arrays: np.ndarray) -> tuple[torch.Tensor, ...]:
        """Host arrays on the device (pinned and non-blocking on CUDA)."""
        pin = self.device.type == "cuda"
        out = []
        for a in arrays:
            t = torch.from_numpy(a)
            out.append((t.pin_memory() if pin else t).to(self.device, non_blocking=pin))
        return tuple(out)

    def _move_staged(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``stage``'s host tensors (pinned on CUDA) on the device."""
        return tuple(t.to(self.device, non_blocking=self.device.type == "cuda") for t in tensors)

    def _to_device(self, batch: Batch):
        if self.ext_teacher is not None:  # distill_teacher's tokens of the same rows, for _teacher
            t = getattr(batch, "teacher", None)
            self._teacher_tensors = self._move(*t) if t is not None else None
        if getattr(batch, "staged", None) is not None:
            return self._move_staged(*batch.staged[0])
        return self._move(batch.q_ids, batch.q_mask, batch.d_ids, batch.d_mask)

    def _packs(self, batch: Batch, cached: bool | None = None) -> bool:
        """Whether this step runs on packed rows (plain steps only; GradCache and accumulation pad).
        ``cached``: the mode to judge for (default: the current one; ``stage`` judges for plain)."""
        cached = self.cached if cached is None else cached
        return (getattr(batch, "packed", None) is not None and self._pack_offset is not None and not cached
                and self.cfg.grad_accum_steps == 1)

    def packed_to_device(self, batch: Batch):
        """(ids, seg, pos, gather) of the packed documents on the device, when this step uses them."""
        if not self._packs(batch):
            return None
        p = batch.packed
        return self._move(p.ids, p.seg, p.pos, p.gather)

    def _backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def _step_plain(self, q_ids, q_mask, d_ids, d_mask, packed=None, joint=None,
                    listwise=None) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.cfg.grad_accum_steps
        n_q = q_ids.shape[0]
        if joint is not None:  # queries and documents in one packed pass
            teacher = self._teacher(q_ids, q_mask, d_ids, d_mask)
            if isinstance(joint[0], str):  # ("varlen", ids, cu, gather, max_len)
                both = self._encode_varlen_impl(*joint[1:])
            else:
                both = self._encode_flex(joint) if self._flex else self._encode_packed_impl(*joint)
            q, d = both[:n_q, : q_ids.shape[1]], both[n_q:, : d_ids.shape[1]]
            loss, acc = self._loss(q, q_mask, d, d_mask, teacher, listwise)
            self._backward(loss)
            return loss.detach(), acc.detach()
        if k == 1:
            teacher = self._teacher(q_ids, q_mask, d_ids, d_mask)
            loss, acc = self._loss(self.encode(q_ids, q_mask), q_mask, self.encode_documents(d_ids, d_mask, packed),
                                   d_mask, teacher, listwise)
            self._backward(loss)
            return loss.detach(), acc.detach()
        # Plain accumulation: each micro-batch only sees its own documents as negatives.
        size = n_q // k
        n_neg = (d_ids.shape[0] - n_q) // n_q if d_ids.shape[0] > n_q else 0
        losses, accs = [], []
        for s in range(0, n_q, size):
            rows = list(range(s, s + size))
            negs = [n_q + r * n_neg + j for r in rows for j in range(n_neg)]
            sel = torch.tensor(rows + negs, device=self.device)
            teacher = self._teacher(q_ids[s : s + size], q_mask[s : s + size], d_ids[sel], d_mask[sel])
            loss, acc = self._loss(self.encode(q_ids[s : s + size], q_mask[s : s + size]), q_mask[s : s + size],
                                   self.encode(d_ids[sel], d_mask[sel]), d_mask[sel], teacher,
                                   None if listwise is None else listwise[s : s + size])
            self._backward(loss / k)
            losses.append(loss.detach())
            accs.append(acc.detach())
        return torch.stack(losses).mean(), torch.stack(accs).mean()

    def _embed_cached(self, ids, mask) -> tuple[torch.Tensor, list]:
        reps, states = [], []
        with torch.no_grad():
            for s in range(0, ids.shape[0], self.mini):
                states.append(_RandState(self.device))
                reps.append(self.encode(ids[s : s + self.mini], mask[s : s + self.mini]))
        return torch.cat(reps), states

    def _replay_backward(self, ids, mask, grads, states) -> None:
        for i, s in enumerate(range(0, ids.shape[0], self.mini)):
            with states[i].replay():
                rep = self.encode(ids[s : s + self.mini], mask[s : s + self.mini])
            rep.backward(grads[s : s + self.mini])

    def _step_cached(self, q_ids, q_mask, d_ids, d_mask, listwise=None) -> tuple[torch.Tensor, torch.Tensor]:
        teacher = self._teacher(q_ids, q_mask, d_ids, d_mask)
        q, q_states = self._embed_cached(q_ids, q_mask)  # (n_q, q_len, dim), no graph
        d, d_states = self._embed_cached(d_ids, d_mask)
        after = _RandState(self.device)  # where an uninterrupted RNG stream would continue
        q.requires_grad_(True)
        d.requires_grad_(True)
        loss, acc = self._loss(q, q_mask, d, d_mask, teacher, listwise)
        self._backward(loss)  # gradients w.r.t. the embeddings only
        q_grad, d_grad = q.grad, d.grad
        self._replay_backward(q_ids, q_mask, q_grad, q_states)
        self._replay_backward(d_ids, d_mask, d_grad, d_states)
        torch.set_rng_state(after.cpu)
        if after.cuda is not None:
            torch.cuda.set_rng_state(after.cuda, self.device)
        return loss.detach(), acc.detach()

    @property
    def _static_len(self) -> int:
        """static_shapes: the attention's length bound, whatever the batch (the caps, and the
        longest filler a pad_multiple / 64 fillers can hold)."""
        k = self.cfg.pad_multiple // 64
        return max(self.cfg.query_max_tokens, self.cfg.document_max_tokens, -(-(self.cfg.pad_multiple + k) // k))

    def _static_batch(self, batch: Batch) -> Batch:
        """static_shapes: queries and documents exactly as wide as their caps (ids 0, masks False
        past the tokens), so the loss's tensors keep one shape; the packed path's flat layout only
        takes the real tokens. Also narrower: a pad_multiple of 4096 rounds the collated widths up
        to 4096, and the loss would score every padded position (8x the MaxSim of a 512 cap)."""
        def fit(a: np.ndarray, width: int) -> np.ndarray:
            if a.shape[1] >= width:
                return a[:, :width]
            return np.concatenate([a, np.zeros((a.shape[0], width - a.shape[1]), dtype=a.dtype)], axis=1)

        qw, dw = self.cfg.query_max_tokens, self.cfg.document_max_tokens
        if batch.q_mask[:, qw:].any() or batch.d_mask[:, dw:].any():
            raise TrainingError(f"static_shapes: a batch holds a query longer than query_max_tokens ({qw}) or a "
                                f"document longer than document_max_tokens ({dw}); tokenise with those caps")
        return replace(batch, q_ids=fit(batch.q_ids, qw), q_mask=fit(batch.q_mask, qw),
                       d_ids=fit(batch.d_ids, dw), d_mask=fit(batch.d_mask, dw))

    def train_step(self, batch: Batch, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on ``batch``; returns (loss, in-batch accuracy) on the device."""
        staged = getattr(batch, "staged", None)  # the host side done ahead (``stage``)
        if self.cfg.static_shapes and self._varlen and staged is None:
            batch = self._static_batch(batch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self._cudagraphs:  # a new step: the CUDA graphs' outputs of the last one may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with torch.profiler.record_function("sg::to_device"):  # labels for step_trace.py's gaps
            tensors = self._to_device(batch)
            if staged is not None:
                joint = self._joint_to_device(staged[1], True) if staged[1] and self._packs(batch) else None
                listwise = self._move_staged(staged[2])[0] if staged[2] is not None else None
            else:
                joint = self.joint_packed_to_device(batch)  # packed steps run queries and documents together
                listwise = self._move(batch.t_scores)[0] if batch.t_scores is not None else None
        while True:
            try:
                if self.cached:
                    loss, acc = self._step_cached(*tensors, listwise)
                else:
                    loss, acc = self._step_plain(*tensors, None, joint, listwise)  # no docs-only packing
                break
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled
                if not (is_oom(exc) and self.cfg.dynamic_batch):
                    raise
                self._recover_from_oom(batch)
                joint = None
        self._maybe_grow()
        with torch.profiler.record_function("sg::optimizer"):
            self._sync_gradients()
            self.optimizer_step()
        if self._cudagraphs:  # a graph's outputs live in its pool and the next replay overwrites
            loss, acc = loss.clone(), acc.clone()  # them; the loop keeps a window of losses
        return loss, acc

    def optimizer_step(self) -> None:
        """Unscale, clip, AdamW step, zero the gradients."""
        self.scaler.unscale_(self.optimizer)
        if self.cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(self.params.values()), self.cfg.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def _sync_gradients(self) -> None:
        """Between the step's last backward and clipping: nothing in one process (the
        distributed trainer averages the gradients over the ranks here)."""

    def _recover_from_oom(self, batch: Batch) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if self.cached:
            self.mini //= 2
        else:
            self.cached = True
            self.mini = max(1, min(self.mini, batch.q_ids.shape[0] // 2))
        self.oom_events += 1
        self._since_oom = 0
        if self.mini < 1:
            raise TrainingError(
                "out of memory even with mini-batches of 1; lower document_max_tokens or use a device "
                "with more memory"
            )
        log.warning("out of memory: retrying the step with cached contrastive mini-batches of %d", self.mini)

    def _maybe_grow(self) -> None:
        """After 100 clean steps following an OOM, double the mini-batch again if the GPU has room."""
        if not self.oom_events or self.mini >= self.cfg.mini_batch_size or self.device.type != "cuda":
            return
        self._since_oom += 1
        if self._since_oom >= 100:
            peak = torch.cuda.max_memory_allocated(self.device)
            total = torch.cuda.get_device_properties(self.device).total_memory
            if peak < 0.5 * total:
                self.mini = min(self.cfg.mini_batch_size, self.mini * 2)
                log.info("memory headroom: cached mini-batch grown to %d", self.mini)
            self._since_oom = 0
            torch.cuda.reset_peak_memory_stats(self.device)

    @torch.no_grad()
    def eval_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        self.model.eval()
        try:
            q_ids, q_mask, d_ids, d_mask = self._to_device(batch)
            fn = getattr(self.loss_fn, "validation", self.loss_fn)
            return fn(self.ops, self.encode(q_ids, q_mask), q_mask, self.encode(d_ids, d_mask), d_mask)
        finally:
            self.model.train()

    @staticmethod
    def to_host(values: list[torch.Tensor]) -> list[float]:
        """One device sync for a window of per-step values."""
        if not values:
            return []
        return torch.stack([v.float() for v in values]).cpu().tolist()

    def memory(self) -> dict:
        if self.device.type == "cuda":
            return {"peak_bytes": int(torch.cuda.max_memory_allocated(self.device))}
        return {}

    # ---------------------------------------------------------------------------- state
    def adapter_weights(self) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in adapter_state(self.model).items()}

    def projection(self) -> tuple[np.ndarray, bool]:
        """(weight (out, in) float32, replaces the base's own head)."""
        return self.head.module.weight.detach().float().cpu().numpy(), self.head.replaces_base

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Everything needed to continue exactly: weights, optimizer moments, RNG."""
        tensors: dict[str, np.ndarray] = {}
        meta: dict = {"backend": "torch", "cached": self.cached, "mini": self.mini, "oom_events": self.oom_events,
                      "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None}
        for name, p in self.params.items():
            tensors[f"param.{name}"] = p.detach().float().cpu().numpy()
            st = self.optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq", "step"):
                if key in st:
                    v = st[key]
                    tensors[f"optim.{name}.{key}"] = (v.detach().float().cpu().numpy() if torch.is_tensor(v)
                                                      else np.asarray(v, dtype=np.float32))
        tensors["rng.cpu"] = torch.get_rng_state().numpy()
        if self.device.type == "cuda":
            tensors["rng.cuda"] = torch.cuda.get_rng_state(self.device).numpy()
        return tensors, meta

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        written_by = meta.get("backend", "torch")
        if written_by != "torch":
            raise TrainingError(f"this checkpoint was written by the {written_by} trainer; `supergrep convert "
                                f"CHECKPOINT --to torch -o DIR` it, or resume with --backend {written_by}")
        missing = [n for n in self.params if f"param.{n}" not in tensors]
        if missing:
            raise TrainingError(f"the checkpoint does not fit this model: no weights for {missing[:3]}")
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(torch.from_numpy(np.array(tensors[f"param.{name}"])).to(p.device, p.dtype))
        for name, p in self.params.items():
            st = {}
            for key in ("exp_avg", "exp_avg_sq"):
                if f"optim.{name}.{key}" in tensors:
                    st[key] = torch.from_numpy(np.array(tensors[f"optim.{name}.{key}"])).to(p.device, torch.float32)
            if f"optim.{name}.step" in tensors:
                st["step"] = torch.tensor(float(np.asarray(tensors[f"optim.{name}.step"]).reshape(-1)[0]), dtype=torch.float32,
                                          device=p.device if self.optimizer.defaults.get("fused") else "cpu")
            if st:
                self.optimizer.state[p] = st
        if "rng.cpu" in tensors:
            torch.set_rng_state(torch.from_numpy(np.array(tensors["rng.cpu"], dtype=np.uint8)))
        else:  # converted from another backend: its RNG cannot be carried over; reseed per step
            torch.manual_seed(self.cfg.seed * 1_000_003 + int(meta.get("steps_taken", 0)))
        if "rng.cuda" in tensors and self.device.type == "cuda":
            torch.cuda.set_rng_state(torch.from_numpy(np.array(tensors["rng.cuda"], dtype=np.uint8)), self.device)
        self.cached, self.mini = bool(meta.get("cached", self.cached)), int(meta.get("mini", self.mini))
        self.oom_events = int(meta.get("oom_events", 0))
        if meta.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(meta["scaler"])

    def load_adapter(self, weights: dict[str, np.ndarray]) -> int:
        return load_adapter_state(self.model, {k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
