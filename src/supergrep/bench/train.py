"""`supergrep bench train`: training speed over a grid of settings, every figure a speedup over a
naive loop measured in the same run.

A variant is written as ``+``-joined tokens (``bf16+compile+packing``):

    fp32 | bf16 | fp16        autocast precision (default: bf16 on CUDA, fp32 elsewhere)
    compile                   torch.compile of the encoder (dynamic shapes)
    cudagraphs                compile with mode reduce-overhead: CUDA graphs, one per distinct shape
    cppwrap                   compile with Inductor's C++ wrapper (train config compile_mode: cpp-wrapper)
    notf32                    CUDA + bf16/fp16: float32 matmuls (loss, LoRA merge) in full float32, not TF32
    nodropout                 the encoder's dropout layers removed (train config model_dropout: 0)
    fp8                       float8 products for the frozen projections (train config fp8_products;
                              CUDA with float8 tensor cores)
    fp8d                      the same with delayed scaling of the forward's inputs (fp8_scaling: delayed)
    fp8k                      fp8 with the row quantisations as one Triton kernel each (fp8_quantize: kernel)
    fp8g                      fp8 with T5's gated GELU backward and its quantisation as one Triton kernel
                              (fp8_quantize: gated)
    autotune                  compile with mode max-autotune-no-cudagraphs: Inductor's own Triton GEMM
                              templates where they win, with the pointwise ops fused into them
    pad=N                     round document widths (and packed rows) up to a multiple of N (default 8):
                              fewer distinct shapes for CUDA graphs and first-call costs
    res16                     varlen: the residual stream in the autocast dtype (train config residual_dtype: compute,
                              train's default; without the token a variant runs the float32 stream)
    nostage                   the step's host side (the varlen flattening, pinned copies) in the step itself, as
                              before the twenty-seventh session; by default a prefetch thread runs it
                              (``TorchTrainer.stage``) as `train`'s loop does (not for naive, ``sync``)
    maxsim=M                  the loss's MaxSim on CUDA: auto (the default: Triton kernels where n_q x n_d x d_len
                              >= 12M), kernels (always), einsum (never); torch_maxsim.ENABLED, set before each step
    bias16 | bias32           T5 varlen under bf16/fp16 autocast: the attention's dense position-bias matrix in
                              float16 (the default, torch_t5_varlen.BIAS16_TRAINING) or float32; set before each step
    bwdtiles | sharedtiles    T5 varlen: the attention backward kernels' own tiles (the default,
                              t5_attention._BWD_BLOCKS: dK/dV 64x64 w4 s3, dQ 64x32 w4 s3) or the forward's
                              shared ones; without either token a variant runs the process's settings
    static                    varlen: static_shapes (one shape per token-count bucket of pad=N, N a multiple
                              of 64: caps-wide batches, a fixed filler count), for cudagraphs
    ckpt                      gradient checkpointing
    eager                     eager attention instead of SDPA
    flex                      T5 only, with packing: FlexAttention with the position bias in the kernel,
                              queries and documents packed into one encoder pass (torch_t5_flex.py)
    varlen                    T5, BERT, RoBERTa, with packing: queries and documents end to end with no
                              padding, a Triton attention kernel per sequence, fused LoRA GEMMs (torch_t5_varlen.py)
    padmax | random | bucketed   batching: pad to the cap / random batches padded to their longest /
                              the trainer's length buckets (default)
    packing                   documents packed into rows with a block-diagonal mask
    sync                      read the loss back every step (a host sync)
    peer                      sentence-transformers' MultiVectorEncoder + its multi-vector MNRL loss
    bs=N, device=D            batch size, device
    mlx | torch               the training backend (default torch): ``mlx`` runs the same workload,
                              batches, LoRA, loss and optimizer through the MLX trainer
                              (``backends/mlx_train.py``); ``fp32|bf16``, ``eager``, ``ckpt``, the
                              batchings, ``sync``, ``bs=`` and ``device=`` apply to it; ``compile``
                              (MLX always ``mx.compile``s its step), ``packing``, ``peer`` and
                              ``fp16`` are refused

``naive`` is ``fp32+eager+padmax+sync``: the seeds' reference loop (fp32, eager attention, padded
to the maximum length, a host sync every step), run through the same trainer. ``--grid`` takes
axes (``precision=fp32,bf16 compile=0,1 packing=0,1 batch=16,48 device=cpu,cuda ...``) whose
product is run, plus naive on each device; ``backend=torch,mlx`` is an axis too (its product's
combinations MLX cannot run are skipped with a warning). ``naive`` is always the torch loop: an
``mlx`` row's speedup is over torch's naive loop on the same device.

Each variant: a fresh trainer (LoRA + projection on the workload's model), ``warmup`` untimed steps,
then ``steps`` timed steps with one device sync at the end (except ``sync``); the same synthetic
pairs for every variant. Reported: samples/s, useful tokens/s, MFU (``flops.py``, the same FLOP
count for both backends), peak memory (torch: CUDA's allocator, else the process RSS; MLX: its
peak-memory counter, ``mx.get_peak_memory``), the share of computed tokens that are real, loss at the first and last step, speedup over naive.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from dataclasses import asdict, dataclass, replace

from supergrep.bench.flops import ModelFlops, measure_peak, model_flops
from supergrep.bench.workloads import Workload, make_batches, make_pool
from supergrep.train.memory import MemoryRecorder

log = logging.getLogger(__name__)

TEMPERATURE = 0.07
LR = 1e-3
# H100, xtr-base varlen at batch 192: after 60 warm-up steps two runs of one variant agreed within
# 4%; after 10, later variants in the process ran 1.2-1.5x faster (results/gpu-h100-2026-11-24-steady)
STEADY_WARMUP = 60
SEED = 0  # model init (head, LoRA A) of ours and of the peer: both start from the same weights


@dataclass(frozen=True)
class Variant:
    name: str
    precision: str = "auto"
    compile: bool = False
    compile_mode: str = "default"  # "reduce-overhead": CUDA graphs (token `cudagraphs`); "cpp-wrapper" (`cppwrap`)
    tf32: bool = True  # token `notf32`: the float32 matmuls in full float32
    dropout: bool = True  # token `nodropout`: model_dropout 0 (the encoder's dropout layers removed)
    fp8: bool = False  # token `fp8`: fp8_products (float8 GEMMs for the frozen projections)
    fp8_scaling: str = "row"  # token `fp8d`: "delayed"
    fp8_quantize: str = "compiled"  # token `fp8k`: "kernel", `fp8g`: "gated"
    pad_multiple: int = 8  # document and packed-row widths round up to this (token `pad=N`)
    static: bool = False  # token `static`: train config static_shapes
    res16: bool = False  # token `res16`: train config residual_dtype compute (varlen)
    maxsim: str = "auto"  # token `maxsim=kernels|einsum`: the loss's MaxSim (torch_maxsim.ENABLED)
    bias16: bool | None = None  # token `bias16` / `bias32`: T5's dense bias matrix in training (None: the process's)
    bwd_tiles: bool | None = None  # token `bwdtiles` / `sharedtiles`: the attention backward's tiles (None: the process's)
    stage: bool = True  # token `nostage`: the step's host side in the step, not in a prefetch thread
    ckpt: bool = False
    attn: str = "sdpa"
    batching: str = "bucketed"
    packing: bool = False
    sync: bool = False
    peer: bool = False
    batch_size: int = 0  # 0: the workload's
    device: str = "auto"
    backend: str = "torch"

    @property
    def is_naive(self) -> bool:
        return (self.backend == "torch" and self.precision == "fp32" and self.attn == "eager"
                and self.batching == "padmax" and self.sync and self.dropout
                and not (self.compile or self.ckpt or self.packing or self.peer or self.fp8))


MLX_HINT = "pip install 'supergrep[mlx]' (Linux + NVIDIA: pip install 'mlx[cuda13]')"


def mlx_conflict(v: Variant) -> str | None:
    """Why the MLX trainer cannot run ``v`` as asked (None: it can, or ``v`` is a torch variant)."""
    if v.backend != "mlx":
        return None
    bad = [t for t, on in (("compile", v.compile), ("packing", v.packing), ("peer", v.peer),
                           ("flex", v.attn == "flex"), ("varlen", v.attn == "varlen"),
                           ("fp16", v.precision == "fp16"), ("fp8", v.fp8)) if on]
    if not bad:
        return None
    why = {"compile": "MLX always mx.compiles its step", "packing": "the MLX trainer has no packed rows",
           "flex": "FlexAttention is a torch feature", "varlen": "the varlen kernels are torch/Triton",
           "peer": "the peer is a torch model", "fp16": "the MLX trainer has no fp16 loss scaling",
           "fp8": "float8 products are a torch/CUDA path"}
    return f"'{v.name}': mlx cannot run {'+'.join(bad)} ({'; '.join(why[b] for b in bad)})"


def mlx_missing() -> str | None:
    """A one-line hint when MLX is not importable, else None."""
    try:
        import mlx.core  # noqa: F401
    except ImportError as exc:
        return f"the mlx variants need MLX ({exc}); {MLX_HINT}"
    return None


MAXSIM_MODES = {"auto": "auto", "kernels": True, "einsum": False}  # token value -> torch_maxsim.ENABLED
BWD_TILES = {"dkdv": (64, 64, 4, 3), "dq": (64, 32, 4, 3)}  # token `bwdtiles`: the H200 sweep's winners (#42, #51)
SHARED_TILES = {"dkdv": None, "dq": None}  # token `sharedtiles`: the forward's tiles (t5_attention._BLOCKS)


def _switches() -> tuple:
    from supergrep.backends import t5_attention, torch_maxsim, torch_t5_varlen

    return torch_maxsim.ENABLED, torch_t5_varlen.BIAS16_TRAINING, dict(t5_attention._BWD_BLOCKS)


def _restore_switches(saved: tuple) -> None:
    from supergrep.backends import t5_attention, torch_maxsim, torch_t5_varlen

    torch_maxsim.ENABLED, torch_t5_varlen.BIAS16_TRAINING = saved[0], saved[1]
    t5_attention._BWD_BLOCKS.update(saved[2])


_BASE_SWITCHES: tuple | None = None  # the process's own (environment) settings, for variants without a token


def set_switches(v: Variant) -> None:
    """The process-wide module switches a variant's tokens stand for (the loss's MaxSim form, the
    T5 bias matrix's dtype, the attention backward's tiles): interleaved variants share the
    modules, so each step sets them; a variant without a token gets the process's setting (as
    ``run_train_bench`` found it). A switch that changes a compiled graph recompiles once per
    state (dynamo guards on it), both forms staying cached."""
    from supergrep.backends import t5_attention, torch_maxsim, torch_t5_varlen

    base = _BASE_SWITCHES or _switches()
    torch_maxsim.ENABLED = MAXSIM_MODES[v.maxsim]
    torch_t5_varlen.BIAS16_TRAINING = base[1] if v.bias16 is None else v.bias16
    t5_attention._BWD_BLOCKS.update(base[2] if v.bwd_tiles is None else BWD_TILES if v.bwd_tiles else SHARED_TILES)


def parse_variant(text: str) -> Variant:
    """``bf16+compile+packing`` -> Variant.

    >>> parse_variant("naive").is_naive, parse_variant("bf16+packing+bs=16").batch_size
    (True, 16)
    """
    text = text.strip()
    kw: dict = {}
    for tok in text.split("+"):
        tok = tok.strip().lower()
        if tok == "naive":
            kw.update(precision="fp32", attn="eager", batching="padmax", sync=True)
        elif tok in ("fp32", "bf16", "fp16", "auto"):
            kw["precision"] = tok
        elif tok in ("compile", "ckpt", "packing", "sync", "peer", "static", "res16"):
            kw[tok] = True
        elif tok == "cudagraphs":
            kw.update(compile=True, compile_mode="reduce-overhead")
        elif tok == "cppwrap":
            kw.update(compile=True, compile_mode="cpp-wrapper")
        elif tok == "notf32":
            kw["tf32"] = False
        elif tok == "nodropout":
            kw["dropout"] = False
        elif tok == "nostage":
            kw["stage"] = False
        elif tok in ("bias16", "bias32"):
            kw["bias16"] = tok == "bias16"
        elif tok in ("bwdtiles", "sharedtiles"):
            kw["bwd_tiles"] = tok == "bwdtiles"
        elif tok == "fp8":
            kw["fp8"] = True
        elif tok == "fp8d":
            kw.update(fp8=True, fp8_scaling="delayed")
        elif tok == "fp8k":
            kw.update(fp8=True, fp8_quantize="kernel")
        elif tok == "fp8g":
            kw.update(fp8=True, fp8_quantize="gated")
        elif tok == "autotune":
            kw.update(compile=True, compile_mode="max-autotune-no-cudagraphs")
        elif tok.startswith("pad="):
            kw["pad_multiple"] = int(tok[4:])
        elif tok.startswith("maxsim="):
            if tok[7:] not in MAXSIM_MODES:
                raise ValueError(f"unknown maxsim '{tok[7:]}' in '{text}': use one of {', '.join(MAXSIM_MODES)}")
            kw["maxsim"] = tok[7:]
        elif tok in ("eager", "sdpa", "flex", "varlen"):
            kw["attn"] = tok
        elif tok in ("padmax", "random", "bucketed"):
            kw["batching"] = tok
        elif tok.startswith("bs="):
            kw["batch_size"] = int(tok[3:])
        elif tok.startswith("device="):
            kw["device"] = tok[7:]
        elif tok in ("mlx", "torch"):
            kw["backend"] = tok
        else:
            raise ValueError(f"unknown variant token '{tok}' in '{text}'")
    v = Variant(name=text, **kw)
    why = mlx_conflict(v)
    if why:
        raise ValueError(why)
    return v


GRID_AXES = {"precision": "precision", "compile": "compile", "ckpt": "ckpt", "gradient_checkpointing": "ckpt",
             "attn": "attn", "batching": "batching", "packing": "packing", "batch": "batch_size",
             "batch_size": "batch_size", "device": "device", "sync": "sync", "backend": "backend"}


def _axis_value(field: str, v: str):
    if field in ("compile", "ckpt", "packing", "sync"):
        return v.lower() in ("1", "true", "on", "yes")
    if field == "batch_size":
        return int(v)
    if field == "backend" and v.lower() not in ("torch", "mlx"):
        raise ValueError(f"bad backend '{v}' in the grid: use torch or mlx")
    return v.lower() if field == "backend" else v


def grid_variants(axes: list[str]) -> list[Variant]:
    """The product of ``key=v1,v2`` axes, plus naive on every device named.

    >>> [v.name for v in grid_variants(["precision=fp32,bf16", "packing=0,1"])]
    ['naive', 'fp32', 'fp32+packing', 'bf16', 'bf16+packing']
    """
    keys, values = [], []
    for axis in axes:
        key, _, vals = axis.partition("=")
        field = GRID_AXES.get(key.strip())
        if field is None or not vals:
            raise ValueError(f"bad grid axis '{axis}': use key=v1,v2 with key in {', '.join(sorted(GRID_AXES))}")
        keys.append(field)
        values.append([_axis_value(field, v.strip()) for v in vals.split(",") if v.strip()])
    out: list[Variant] = []
    devices = next((vals for k, vals in zip(keys, values) if k == "device"), ["auto"])
    for dev in devices:
        out.append(replace(parse_variant("naive"), name="naive" if dev == "auto" else f"naive+device={dev}",
                           device=dev))
    for combo in itertools.product(*values):
        kw = dict(zip(keys, combo))
        v = Variant(name="", **kw)
        v = replace(v, name=variant_name(v))
        why = mlx_conflict(v)
        if why:
            log.warning("grid: skipping %s", why)
            continue
        out.append(v)
    return out


def variant_name(v: Variant) -> str:
    parts = ["mlx", v.precision] if v.backend == "mlx" else [v.precision]
    parts += [t for t, on in (("compile", v.compile), ("cudagraphs", v.compile_mode == "reduce-overhead"), ("cppwrap", v.compile_mode == "cpp-wrapper"),
                              ("autotune", v.compile_mode == "max-autotune-no-cudagraphs"), ("notf32", not v.tf32), ("nodropout", not v.dropout), ("nostage", not v.stage),
                              ("fp8", v.fp8 and v.fp8_scaling == "row" and v.fp8_quantize == "compiled"),
                              ("fp8d", v.fp8 and v.fp8_scaling == "delayed"), ("fp8k", v.fp8 and v.fp8_quantize == "kernel"), ("fp8g", v.fp8 and v.fp8_quantize == "gated"), ("static", v.static), ("res16", v.res16), ("bias16", v.bias16 is True), ("bias32", v.bias16 is False), ("bwdtiles", v.bwd_tiles is True), ("sharedtiles", v.bwd_tiles is False), ("ckpt", v.ckpt), ("packing", v.packing), ("sync", v.sync), ("peer", v.peer)) if on]
    if v.pad_multiple != 8:
        parts.append(f"pad={v.pad_multiple}")
    if v.maxsim != "auto":
        parts.append(f"maxsim={v.maxsim}")
    if v.attn != "sdpa":
        parts.append(v.attn)
    if v.batching != "bucketed":
        parts.append(v.batching)
    if v.batch_size:
        parts.append(f"bs={v.batch_size}")
    if v.device != "auto":
        parts.append(f"device={v.device}")
    return "+".join(parts)


DEFAULT_CPU = ["naive", "fp32+random", "fp32", "fp32+packing", "fp32+ckpt"]
# the last of ours is train's fastest path with its default compile mode on CUDA (the C++ wrapper)
DEFAULT_GPU = ["naive", "fp32", "bf16+random", "bf16", "bf16+packing", "bf16+compile", "bf16+compile+packing",
               "bf16+ckpt", "bf16+cppwrap+varlen+packing", "peer+bf16", "peer+bf16+random"]


def _device(name: str, backend: str = "torch") -> str:
    if backend == "mlx":
        missing = mlx_missing()
        if missing:
            from supergrep.errors import UsageError

            raise UsageError(missing)
        from supergrep.backends.mlx_backend import device_name
        from supergrep.backends.mlx_backend import pick_device as mlx_pick

        return device_name(mlx_pick(name))
    from supergrep.backends.torch_backend import pick_device

    return pick_device(name)


def _sync(device: str, mlx_values: list | None = None) -> None:
    """Wait for the device; with ``mlx_values`` (the MLX losses so far), evaluate them (MLX is
    lazy; its train_step already evaluates each step) and wait for MLX's stream."""
    if mlx_values is not None:
        import mlx.core as mx

        mx.eval([x for x in mlx_values if isinstance(x, mx.array)])
        if hasattr(mx, "synchronize"):
            mx.synchronize()
        return
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak_bytes(device: str, memory: MemoryRecorder) -> int:
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    _, rss = memory.series("rss")
    return int(max(rss)) if rss else 0


def train_config(wl: Workload, v: Variant, device: str, batch_size: int):
    from supergrep.train.config import TrainConfig

    precision = v.precision
    if precision == "auto":
        precision = "bf16" if device.startswith("cuda") else "fp32"
    return TrainConfig(
        backend=v.backend, model_path=str(wl.model_dir), projection_dim=wl.projection_dim, lora_r=wl.lora_r, lora_alpha=wl.lora_alpha,
        lora_target_modules=list(wl.lora_targets), query_max_tokens=wl.query_len, document_max_tokens=wl.doc_cap,
        batch_size=batch_size, lr=LR, temperature=TEMPERATURE, margin_weight=0.0, precision=precision,
        attn_implementation=v.attn, compile=v.compile, compile_mode=v.compile_mode, pad_multiple=v.pad_multiple,
        gradient_checkpointing=v.ckpt, packing=v.packing, tf32=v.tf32, model_dropout=-1.0 if v.dropout else 0.0,
        fp8_products=v.fp8, fp8_scaling=v.fp8_scaling, fp8_quantize=v.fp8_quantize, static_shapes=v.static, residual_dtype="compute" if v.res16 else "float32", dynamic_batch=False, device=device, seed=SEED,
    ).validate()


def build_trainer(wl: Workload, v: Variant, device: str, batch_size: int):
    from supergrep.backends.adapters import LoRAConfig
    from supergrep.train.loop import make_trainer, training_spec

    cfg = train_config(wl, v, device, batch_size)
    spec = training_spec(cfg)
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    return make_trainer(cfg, spec, lora)


_FLOPS: dict[tuple, ModelFlops] = {}


def workload_flops(wl: Workload) -> ModelFlops:
    """The workload's FLOP model (counted once per model and LoRA/projection setting)."""
    key = (str(wl.model_dir), wl.lora_r, wl.lora_targets, wl.projection_dim)
    if key not in _FLOPS:
        tr = build_trainer(wl, Variant("count"), "cpu", wl.batch_size)
        _FLOPS[key] = model_flops(tr.model, tr.proj, wl.projection_dim)
    return _FLOPS[key]


def batch_flops(mf: ModelFlops, batch) -> float:
    return mf.train_step(batch.q_mask.sum(1).tolist(), batch.d_mask.sum(1).tolist())


def computed_tokens(batch, doc_cap: int = 0, pad_multiple: int = 8, attn: str = "sdpa", static: bool = False) -> int:
    """Token positions the encoder actually runs (padding included). Packed batches of our
    trainer run queries and documents in one set of rows (``pack_queries_and_documents``, with
    ``doc_cap``), or with ``varlen`` end to end, the count rounded up to ``pad_multiple`` with
    filler sequences (``static``: a fixed number of them too); the peer's get no ``packed`` and
    stay padded."""
    if batch.packed is not None and attn == "varlen":
        from supergrep.backends.packing import flatten_queries_and_documents

        return int(flatten_queries_and_documents(batch.q_ids, batch.q_mask, batch.d_ids, batch.d_mask, pad_multiple,
                                                 pad_multiple // 64 if static else 0).ids.size)
    if batch.packed is None:
        return int(batch.q_ids.size + batch.d_ids.size)
    if doc_cap:
        from supergrep.backends.packing import pack_queries_and_documents

        return int(pack_queries_and_documents(batch.q_ids, batch.q_mask, batch.d_ids, batch.d_mask,
                                              doc_cap, 0, pad_multiple).ids.size)
    return int(batch.q_ids.size + batch.packed.ids.size)


def step_shape(batch, doc_cap: int, pad_multiple: int, attn: str, static: bool = False) -> tuple:
    """The shapes one step's compiled graphs see: a CUDA-graph variant records one graph per
    distinct value (its first step of that shape runs eagerly, then is captured)."""
    if batch.packed is not None and attn == "varlen":
        n = computed_tokens(batch, doc_cap, pad_multiple, attn, static)
        return (n,) if static else (n, batch.q_ids.shape[1], batch.d_ids.shape[1])
    rows = () if batch.packed is None else batch.packed.ids.shape
    return (*rows, *batch.q_ids.shape, *batch.d_ids.shape)


def graph_steps(shapes: list[tuple], warmup: int, rounds: int) -> dict:
    """Distinct step shapes, and how many timed steps were not replays for CUDA graphs: CUDA
    graph trees run a shape's first step uncaptured and capture its second, so those steps of the
    timed segments (the timed batches again each round) carry warm-up or capture work."""
    order = shapes[:warmup] + shapes[warmup:] * rounds
    runs: dict[tuple, int] = {}
    not_replayed = 0
    for i, sh in enumerate(order):
        runs[sh] = runs.get(sh, 0) + 1
        not_replayed += i >= warmup and runs[sh] <= 2
    return {"distinct": len(runs), "timed_steps_not_replayed": not_replayed}


class _Run:
    """One variant's trainer, batches and clocks: warmed once, then timed in one segment
    (``run_variant``) or in several interleaved with other variants' (``run_train_bench``'s
    ``rounds``)."""

    def __init__(self, wl: Workload, v: Variant, steps: int, warmup: int, seed: int = 0):
        why = mlx_conflict(v)
        if why:
            raise ValueError(why)
        self.wl, self.v, self.steps, self.warmup = wl, v, steps, warmup
        self.mlx = v.backend == "mlx"
        self.device = _device(v.device, v.backend)
        self.bs = v.batch_size or wl.batch_size
        pool = make_pool(wl, self.bs * (warmup + steps), seed)
        self.batches = make_batches(pool, wl, self.bs, v.batching, v.packing and not v.peer, seed, v.pad_multiple)
        self.memory = MemoryRecorder(device=self.device)
        if not self.mlx:
            _reset_peak(self.device)
        if v.peer:
            from supergrep.bench.peer import PeerTrainer

            self.trainer = PeerTrainer(wl, v, self.device, lr=LR, temperature=TEMPERATURE, seed=SEED)  # same start as ours
        else:
            self.trainer = build_trainer(wl, v, self.device, self.bs)
        self.raw: list = []
        self.segments: list[float] = []  # seconds of each timed segment
        self.peak_bytes = 0
        self._sample = 0

    def _feed(self, batches: list):
        """The batches as the step gets them: staged ahead in a background thread (``train``'s
        prefetch thread runs ``TorchTrainer.stage``), or as they are (MLX, the peer, naive, nostage)."""
        stage = getattr(self.trainer, "stage", None)
        if stage is None or not self.v.stage or self.v.sync or self.v.peer or self.mlx:
            return batches
        from supergrep.train.data import staged_ahead

        return staged_ahead(batches, stage)  # its thread starts now, ahead of the clock

    def warm(self) -> None:
        for b in self._feed(self.batches[: self.warmup]):
            self._step(b)
        _sync(self.device, self.raw if self.mlx else None)

    def _step(self, b, record: bool = True) -> None:
        if not (self.mlx or self.v.peer):  # interleaved variants share the modules' switches: set them each step
            set_switches(self.v)
        loss, _ = self.trainer.train_step(b, LR)
        if record:
            self.raw.append(float(loss) if self.v.sync else loss)  # naive: a host sync every step

    def settle(self) -> None:
        """The timed batches once, untimed and unrecorded: the first timed segment after all the
        warm-ups ran slow in every GPU call whatever variant it was (3,856-4,151 vs ~4,900
        samples/s, twenty-fifth session), so `--rounds` settles the process before round 1."""
        for b in self._feed(self.batches[self.warmup:]):
            self._step(b, record=False)
        _sync(self.device, [] if self.mlx else None)  # MLX's train_step evaluates each step already

    def segment(self) -> float:
        """Time the ``steps`` timed batches once (one device sync at the end). The first segment's
        peak memory includes the warm-up; a later one's (other variants ran between) its own steps."""
        if not self.segments:
            self.memory.sample(self._sample)
        elif self.device.startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)  # no empty_cache: the pool stays warm
        feed = self._feed(self.batches[self.warmup:])  # its thread starts ahead, as the loop's runs ahead
        t = time.perf_counter()
        for b in feed:
            self._step(b)
            self._sample += 1
            self.memory.sample(self._sample)
        _sync(self.device, self.raw if self.mlx else None)
        self.segments.append(time.perf_counter() - t)
        peak = self.trainer.memory()["peak_bytes"] if self.mlx else _peak_bytes(self.device, self.memory)
        self.peak_bytes = max(self.peak_bytes, peak or 0)
        return self.segments[-1]

    def row(self, mf: ModelFlops, peak: float | None) -> dict:
        v, steps, bs = self.v, self.steps, self.bs
        losses = [float(x) for x in self.raw]  # after the clocks stopped
        if not all(math.isfinite(x) for x in losses):
            raise RuntimeError(f"non-finite loss in {v.name}: {losses}")
        timed = self.batches[self.warmup:]
        seconds = sum(self.segments)
        n = len(self.segments)
        useful = n * sum(int(b.q_mask.sum() + b.d_mask.sum()) for b in timed)
        flops = n * sum(batch_flops(mf, b) for b in timed)
        row = {
            "variant": v.name, "settings": asdict(v), "device": self.device, "batch_size": bs, "steps": steps * n,
            "warmup": self.warmup, "seconds": seconds, "samples_per_s": steps * n * bs / seconds,
            "useful_tokens_per_s": useful / seconds, "token_efficiency": useful / (n * sum(computed_tokens(b, self.wl.doc_cap, v.pad_multiple, v.attn, v.static) for b in timed)),
            "tflops": flops / seconds / 1e12, "mfu": flops / seconds / peak if peak else None,
            "peak_memory_bytes": self.peak_bytes,
            "memory": self.memory.summary(), "backend": v.backend,
            "loss_first": sum(losses[:3]) / len(losses[:3]), "loss_last": sum(losses[-3:]) / len(losses[-3:]),
            "losses": losses, "system": "sentence-transformers" if v.peer else "supergrep",
            **(self.trainer.describe() if hasattr(self.trainer, "describe") else {}),
        }
        row["step_shapes"] = graph_steps([step_shape(b, self.wl.doc_cap, v.pad_multiple, v.attn, v.static)
                                          for b in self.batches], self.warmup, n)
        if n > 1:  # each segment's rate: the spread says how far one window's figure can be trusted
            row["segments_samples_per_s"] = [steps * bs / t for t in self.segments]
        return row


def run_variant(wl: Workload, v: Variant, steps: int, warmup: int, mf: ModelFlops, peak: float,
                seed: int = 0) -> dict:
    run = _Run(wl, v, steps, warmup, seed)
    run.warm()
    run.segment()
    return run.row(mf, peak)


def interleave_order(n: int, rounds: int) -> list[int]:
    """The variants' timed segments, round by round, every other round reversed, so no variant
    keeps a position (the first of a process measured slower, and the host's speed drifts).

    >>> interleave_order(3, 2)
    [0, 1, 2, 2, 1, 0]
    """
    out: list[int] = []
    for r in range(rounds):
        out += list(range(n)) if r % 2 == 0 else list(reversed(range(n)))
    return out


def run_train_bench(wl: Workload, variants: list[Variant], steps: int = 20, warmup: int = 5,
                    time_limit: float | None = None, peak: dict | None = None, on_row=None,
                    rounds: int = 1) -> dict:
    """Run every variant (a failure is recorded, not fatal); speedups are over naive on the same
    device. ``on_row(partial_result)`` is called after each variant (the CLI writes its files
    then, so a run cut short keeps what it measured). ``rounds`` > 1: every variant is built and
    warmed first, all kept alive, then timed in ``rounds`` segments of ``steps`` steps each,
    interleaved (``interleave_order``); a row's rate is over all its segments. The module
    switches the variants set (``set_switches``) are the process's again afterwards."""
    global _BASE_SWITCHES
    saved = _BASE_SWITCHES = _switches()
    try:
        return _run_train_bench(wl, variants, steps, warmup, time_limit, peak, on_row, rounds)
    finally:
        _restore_switches(saved)
        _BASE_SWITCHES = None


def _run_train_bench(wl, variants, steps, warmup, time_limit, peak, on_row, rounds) -> dict:
    import torch

    if any(v.backend == "mlx" for v in variants) and mlx_missing():
        from supergrep.errors import UsageError

        raise UsageError(mlx_missing())
    devices = sorted({_device(v.device, v.backend) for v in variants})
    if warmup < STEADY_WARMUP and any(v.compile and _device(v.device, v.backend).startswith("cuda") for v in variants):
        log.warning("compiled GPU steps reach their steady state after ~%d steps (with 10, a variant run later in "
                    "the same process measured up to 1.5x faster): use --warmup %d for figures to compare, and "
                    "--rounds 4 to interleave the variants' timed segments",
                    STEADY_WARMUP, STEADY_WARMUP)
    peaks = peak or {d: _measure_peak(d) for d in devices}
    mf = workload_flops(wl)
    t0 = time.perf_counter()
    if rounds > 1:
        return _run_interleaved(wl, variants, steps, warmup, rounds, time_limit, peaks, mf, t0, on_row)
    rows: list[dict] = []
    for v in variants:
        if on_row is not None and rows:
            on_row(_result(wl, steps, warmup, peaks, mf, rows, t0))
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            rows.append({"variant": v.name, "skipped": f"time limit {time_limit:.0f} s reached"})
            continue
        dev = _device(v.device, v.backend)
        log.info("bench train %s: %s", wl.name, v.name)
        try:
            row = run_variant(wl, v, steps, warmup, mf, (peaks.get(dev) or {}).get("flops_per_s"))
        except Exception as exc:  # noqa: BLE001 - one variant failing (OOM, no peer) must not end the run
            row = _failure(v, exc)
        rows.append(row)
        with contextlib.suppress(Exception):
            if v.compile:
                torch._dynamo.reset()  # drop the compiled graphs (and the model they hold)
            if dev.startswith("cuda"):
                torch.cuda.empty_cache()
        import gc

        gc.collect()
    res = _result(wl, steps, warmup, peaks, mf, rows, t0)
    if on_row is not None:
        on_row(res)
    return res


def _failure(v: Variant, exc: Exception) -> dict:
    reason = "out of memory" if "out of memory" in str(exc).lower() else f"{type(exc).__name__}: {exc}"
    log.warning("variant %s failed: %s", v.name, reason[:200])
    return {"variant": v.name, "device": _device(v.device, v.backend), "error": reason[:500]}


def _run_interleaved(wl, variants, steps, warmup, rounds, time_limit, peaks, mf, t0, on_row) -> dict:
    import torch

    # every variant's compiled graphs stay cached side by side (torch.compile's cache is per code
    # object, shared by the trainers): past the limit a frame would silently run eagerly
    with contextlib.suppress(Exception):
        cfg = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, max(getattr(cfg, name), 8 * len(variants)))
    runs: dict[int, _Run] = {}
    errors: dict[int, dict] = {}  # the rows of variants that did not get to run: failed or skipped
    warm_s = 0.0  # the longest warm-up so far: the estimate for the next one
    for i, v in enumerate(variants):
        # a warm-up (a first compile: minutes on a fresh GPU machine) that would end past the limit
        # is not started, so the variants already warm still get timed and written before an
        # outer timeout kills the process (a run killed while warming writes nothing)
        if time_limit is not None and time.perf_counter() - t0 + warm_s > time_limit:
            log.warning("time limit %.0f s: %s not warmed (the last warm-up took %.0f s)", time_limit, v.name, warm_s)
            errors[i] = {"variant": v.name, "skipped": f"time limit {time_limit:.0f} s: not warmed"}
            continue
        log.info("bench train %s: %s (warm-up)", wl.name, v.name)
        w0 = time.perf_counter()
        try:
            runs[i] = _Run(wl, v, steps, warmup)
            runs[i].warm()
        except Exception as exc:  # noqa: BLE001 - one variant failing must not end the run
            runs.pop(i, None)
            errors[i] = _failure(v, exc)
        warm_s = max(warm_s, time.perf_counter() - w0)

    def rows() -> list[dict]:
        out = []
        for i, v in enumerate(variants):
            if i in errors:
                out.append(errors[i])
            elif runs[i].segments:
                try:  # a non-finite loss is a failed variant here too, as in the sequential loop
                    out.append(runs[i].row(mf, (peaks.get(runs[i].device) or {}).get("flops_per_s")))
                except RuntimeError as exc:
                    out.append(_failure(v, exc))
            else:
                out.append({"variant": v.name, "skipped": f"time limit {time_limit:.0f} s reached"})
        return out

    order = interleave_order(len(variants), rounds)
    first = next((i for i in order if i in runs), None)
    if first is not None:
        try:
            runs[first].settle()
        except Exception as exc:  # noqa: BLE001 - as a failed segment
            errors[first] = _failure(variants[first], exc)
            del runs[first]
    for k, i in enumerate(order):
        if i not in runs:
            continue
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            log.warning("time limit %.0f s reached after %d of %d segments", time_limit, k, len(order))
            break
        try:
            runs[i].segment()
        except Exception as exc:  # noqa: BLE001
            errors[i] = _failure(variants[i], exc)
            del runs[i]
        if on_row is not None and (k + 1) % len(variants) == 0:
            on_row(_result(wl, steps, warmup, peaks, mf, rows(), t0))
    res = _result(wl, steps, warmup, peaks, mf, rows(), t0)
    res["rounds"] = rounds
    if on_row is not None:
        on_row(res)
    return res


def _measure_peak(device: str) -> dict | None:
    """The device's GEMM peak (torch); None where torch does not name MLX's device (metal)."""
    try:
        return measure_peak(device)
    except Exception as exc:  # noqa: BLE001 - no peak: the MFU column is left empty
        log.warning("no GEMM peak for %s (%s): MFU not reported", device, exc)
        return None


def _result(wl: Workload, steps: int, warmup: int, peaks: dict, mf: ModelFlops, rows: list[dict], t0: float) -> dict:
    from supergrep.bench.workloads import length_stats

    for r in rows:
        base = next((n for n in rows if _is_naive_row(n) and n.get("device") == r.get("device")
                     and "samples_per_s" in n), None)
        if base and "samples_per_s" in r:
            r["speedup_vs_naive"] = r["samples_per_s"] / base["samples_per_s"]
    ours = [r for r in rows if r.get("system") == "supergrep" and "samples_per_s" in r and not _is_naive_row(r)]
    peers = [r for r in rows if r.get("system") == "sentence-transformers" and "samples_per_s" in r]
    summary = {}
    if ours and peers:
        best = max(ours, key=lambda r: r["samples_per_s"])
        peer = max(peers, key=lambda r: r["samples_per_s"])
        summary = {"best": best["variant"], "best_samples_per_s": best["samples_per_s"], "peer": peer["variant"],
                   "peer_samples_per_s": peer["samples_per_s"],
                   "speedup_vs_peer": best["samples_per_s"] / peer["samples_per_s"],
                   "loss_last_best": best["loss_last"], "loss_last_peer": peer["loss_last"]}
    return {"kind": "train", "workload": wl.describe(), "lengths": length_stats(wl.doc_cap), "steps": steps,
            "warmup": warmup, "peaks": peaks, "model_flops": mf.to_dict(), "rows": list(rows), "summary": summary,
            "seconds": time.perf_counter() - t0, "env": environment()}


def _is_naive_row(row: dict) -> bool:
    s = row.get("settings") or {}
    return Variant(**s).is_naive if s else False


def environment() -> dict:
    import platform

    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
           "processor": platform.processor(), "cpu_threads": torch.get_num_threads()}
    with contextlib.suppress(Exception):
        import transformers

        env["transformers"] = transformers.__version__
    with contextlib.suppress(Exception):
        import mlx.core as mx

        env["mlx"] = mx.__version__
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    return env
