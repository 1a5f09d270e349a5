"""The training configuration: one typed dataclass, the only source of defaults.

A run is described by a YAML file (``supergrep train --config run.yaml``) holding any subset of
the fields below; every field is also a CLI flag (``--batch-size 32``), and flags win. Unknown
keys and wrongly typed values are errors naming the key and the file's line.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supergrep.errors import ConfigError


def _f(default: Any, help: str, choices: tuple | None = None) -> Any:
    meta = {"help": help}
    if choices:
        meta["choices"] = choices
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    # -- model ------------------------------------------------------------------------------
    model_path: str = _f("", "Base model directory; empty means the default model (all-MiniLM-L6-v2).")
    projection_dim: int = _f(128, "Output dimension of the trained projection head (0: keep the base's own).")
    lora_r: int = _f(16, "LoRA rank.")
    lora_alpha: float = _f(32.0, "LoRA alpha (the update is scaled by alpha / r).")
    lora_dropout: float = _f(0.0, "Dropout on the LoRA branch's input.")
    model_dropout: float = _f(0.0, "The encoder's own dropout (hidden states, attention) while training: 0 (default) removes it, so no mask is drawn, kept or applied (1.08-1.11x samples/s for xtr-base on an H200; all-MiniLM-L6-v2's development-set scores unchanged over two seeds: docs/training.md), -1 keeps the model's (T5/BERT: 0.1), other values replace the probability.")
    lora_target_modules: list = _f([], "Linear layers to adapt (PEFT matching); empty: per-architecture default (T5: q,k,v,o,wi_0,wi_1,wo; BERT/MPNet: attention and MLP).")
    query_max_tokens: int = _f(32, "Query length used in training (and saved with the model).")
    document_max_tokens: int = _f(256, "Document length used in training (and saved with the model).")
    qat_bits: int = _f(0, "Quantization-aware training: fake-quantize the LoRA-merged weights to this many bits in the forward (0: off; 4 or 8, as `supergrep quantize --bits` will).")
    qat_group_size: int = _f(64, "Input columns per scale in QAT (match `supergrep quantize --group-size`).")
    # -- data -------------------------------------------------------------------------------
    train_file: str = _f("", "Training pairs (JSON Lines from `supergrep mine`; split=='train' rows, or all rows if there is no split).")
    val_file: str = _f("", "Validation pairs; empty: the split=='val' rows of train_file.")
    hard_negatives: bool = _f(False, "Use each row's 'negatives' (mined hard negatives) as extra documents.")
    max_pairs: int = _f(0, "Use at most this many training pairs (0: all).")
    query_identifier_dropout: float = _f(0.0, "Share of training pairs whose query loses every word the code already spells (identifiers, symbol, path), so they can only be matched by meaning (see train/augment.py).")
    document_header_dropout: float = _f(0.0, "Share of training pairs whose document drops the '<path> <symbol>' header line.")
    docstring_body_rate: float = _f(0.0, "Share of training pairs whose document keeps the docstring's body (everything after the summary the query was made from), as indexed code keeps its docstrings.")
    # -- optimisation -------------------------------------------------------------------------
    batch_size: int = _f(48, "Pairs per optimizer step (the in-batch negatives of each query).")
    grad_accum_steps: int = _f(1, "Micro-batches per step. Plain accumulation SHRINKS the negatives to batch_size / grad_accum_steps; use cached_contrastive to keep them.")
    epochs: float = _f(1.0, "Passes over the training pairs (ignored when max_steps > 0).")
    max_steps: int = _f(0, "Stop after this many optimizer steps (0: use epochs).")
    lr: float = _f(2e-4, "Peak learning rate (LoRA + projection).")
    weight_decay: float = _f(0.01, "AdamW weight decay (2-D weights only).")
    warmup_steps: int = _f(100, "Linear warm-up steps.")
    min_lr_ratio: float = _f(0.1, "Cosine decay floor, as a fraction of lr.")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm (0: off).")
    # -- loss -------------------------------------------------------------------------------
    temperature: float = _f(0.07, "InfoNCE temperature over mean-over-query-tokens MaxSim scores.")
    infonce_weight: float = _f(1.0, "Weight of InfoNCE (the docstring -> code labels); 0 with margin_weight 0 and teacher_weight > 0 trains on the teacher's scores alone (val_loss is always the labels' InfoNCE + margin, whatever this weight, so runs compare).")
    margin: float = _f(0.2, "Margin between the positive and the hardest negative score.")
    margin_weight: float = _f(0.1, "Weight of the margin loss added to InfoNCE.")
    distill_weight: float = _f(0.0, "Weight of a KL term keeping the in-batch score distribution close to the frozen base model's (no LoRA, no projection): anchors what the base did well, e.g. matching prose; or to distill_teacher's.")
    distill_temperature: float = _f(0.05, "Temperature of the distillation softmaxes (teacher and student).")
    distill_teacher: str = _f("", "The distillation term's teacher (distill_weight): '' = the frozen base; a named model (e.g. mpnet) or a model directory = that model's MaxSim over every query and document of the batch, each text tokenised by its own tokenizer, no gradient (a stronger model's in-batch ranking). backend torch, one process, grad_accum_steps 1.")
    teacher_weight: float = _f(0.0, "Weight of a listwise KL term to each row's precomputed 'teacher_scores' (a stronger model's MaxSim over [positive, *negatives], written by `supergrep mine-negatives --teacher MODEL`); needs hard_negatives. backend torch, one process.")
    teacher_temperature: float = _f(0.05, "Temperature of the listwise teacher softmaxes (teacher and student scores alike).")
    cached_contrastive: bool = _f(False, "GradCache: embed the whole batch in mini-batches without a graph, then backprop through the loss mini-batch by mini-batch, so all batch_size negatives fit in small memory.")
    mini_batch_size: int = _f(16, "Mini-batch size of cached_contrastive (and of OOM recovery).")
    # -- speed ------------------------------------------------------------------------------
    precision: str = _f("auto", "fp32, bf16 or fp16 (autocast); auto: bf16 on GPUs that have it, fp32 on CPU.", ("auto", "fp32", "bf16", "fp16"))
    attn_implementation: str = _f("sdpa", "Attention kernels: sdpa, eager, flex (T5 encoders with packing: FlexAttention with T5's position bias in the kernel, queries and documents packed into one pass; no dropout on attention probabilities), or varlen (T5, BERT and RoBERTa encoders with packing: queries and documents laid end to end with no padding, one Triton attention kernel per sequence (T5's bias inside), fused LoRA projections; the fastest on CUDA, the same attention in torch elsewhere; no dropout on attention probabilities).", ("sdpa", "eager", "flex", "varlen"))
    fp8_products: bool = _f(False, "Float8 (e4m3, a scale per row) products for the frozen projections' forward and input-gradient GEMMs, the LoRA weight gradients staying in bf16 (torch on a CUDA GPU with float8 tensor cores: Ada, Hopper; needs lora_dropout 0; docs/performance.md).")
    fp8_scaling: str = _f("row", "With fp8_products: the forward's inputs quantised with a scale per row computed on the fly (row), or with one scale from the previous step's amax (delayed: no reduction before the cast; values past the last amax clip).", ("row", "delayed"))
    fp8_quantize: str = _f("gated", "With fp8_products: the row quantisations of the projections' inputs and input gradients fused by torch.compile into the kernels that produce them (compiled), or run as one Triton kernel each after the producer wrote its bf16 output (kernel: one read a row; measured no faster in the step on an H100, docs/performance.md #33), or compiled except where our own kernels produce the gradient (gated, the default: T5's gated GELU backward runs with the quantisation of its result as one Triton kernel, one read a row of the 2 x d_ff-wide gradient, 11% less GPU time a step and 1.04-1.06x samples/s for xtr-base on an H200, docs/performance.md #36; the varlen attention backward's d(qkv), which Inductor cannot fuse into, goes through the Triton row kernel, 2x faster than Inductor's standalone quantisation, #39).", ("compiled", "kernel", "gated"))
    tf32: bool = _f(True, "On CUDA under bf16/fp16 autocast, run the float32 matmuls that remain (the loss's query x document similarities, LoRA's per-step B @ A) in TF32 (10-bit mantissa inputs, float32 accumulation) instead of full float32 on CUDA cores; the encoder already computes in 16 bits.")
    compile: bool = _f(False, "torch.compile the encoder (dynamic shapes). backend torch only: the MLX backend always compiles its step (mx.compile), whatever this says.")
    compile_mode: str = _f("auto", "torch.compile mode when compile is on: auto (cpp-wrapper on CUDA, default elsewhere), default, reduce-overhead (CUDA graphs, one per distinct batch shape: pair it with packing or a large pad_multiple), max-autotune-no-cudagraphs, cpp-wrapper (the default mode with Inductor's C++ wrapper: the compiled graphs launch their kernels from generated C++ instead of Python; 1.19x the samples/s of the Python wrapper for xtr-base batch 192 on an H200, docs/performance.md #38; first compiles take minutes longer; falls back to the Python wrapper, with a warning, where it does not build).", ("auto", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "cpp-wrapper"))
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward (less memory, more time).")
    dynamic_batch: bool = _f(True, "On out-of-memory, halve the mini-batch and retry the step (switching to cached_contrastive keeps the negatives).")
    pad_multiple: int = _f(8, "Pad batch lengths to a multiple of this (tensor-core friendly shapes).")
    residual_dtype: str = _f("compute", "attn_implementation varlen under bf16/fp16 autocast: the residual stream (the hidden states between layers) in the autocast dtype (compute, the default: half the bytes of every residual add and layer-norm pass, the stream rounded to 16 bits after each layer, as a bf16 model runs it; 1.00-1.03x on an H200, the same loss, docs/performance.md #43) or in float32 (the embedding's dtype with float32 master weights, as HF runs T5 under autocast).", ("compute", "float32"))
    static_shapes: bool = _f(False, "attn_implementation varlen: every step's tensors of one shape but the token count, itself rounded up to pad_multiple (a multiple of 64, e.g. 4096): queries and documents padded to their caps, a fixed number of filler sequences (pad_multiple / 64), the attention's length bound at the cap. For compile_mode reduce-overhead (CUDA graphs, one per shape): a few graphs instead of one per batch.")
    packing: bool = _f(False, "Pack each batch's documents into rows of document_max_tokens with a block-diagonal attention mask (SDPA), so no FLOP is spent on padding, and the batch's queries into the same rows (one encoder pass per step) (BERT-style and T5 models; plain steps; cached/accumulated steps stay padded).")
    prefetch_batches: int = _f(4, "Batches prepared ahead by a background thread.")
    # -- run --------------------------------------------------------------------------------
    backend: str = _f("torch", "torch or mlx.", ("torch", "mlx"))
    device: str = _f("auto", "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps.")
    seed: int = _f(0, "Seed for initialisation, data order and dropout.")
    output_dir: str = _f("runs/latest", "Where checkpoints, metrics.jsonl and loss.png go.")
    log_every: int = _f(10, "Log (and sync with the device) every N steps: metrics stay on the device in between.")
    eval_every: int = _f(200, "Validation loss and in-batch accuracy every N steps (0: only at the end).")
    val_batches: int = _f(20, "Validation batches per evaluation (0: the whole split).")
    save_every: int = _f(500, "Checkpoint every N steps (and always at the end).")
    keep_last: int = _f(3, "Checkpoints kept (oldest deleted first).")
    tensorboard: bool = _f(False, "Also write TensorBoard events (needs the tensorboard package).")
    memory_profile: bool = _f(False, "Record process RSS and device memory every step: memory.jsonl, memory.png and a leak verdict (growth over the last 50 steps) in output_dir.")

    def validate(self) -> TrainConfig:
        """Check value ranges; returns self."""
        problems = []
        positive = ("batch_size", "grad_accum_steps", "lora_r", "query_max_tokens", "document_max_tokens",
                    "mini_batch_size", "log_every", "save_every", "keep_last", "pad_multiple")
        for name in positive:
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        for name in ("lr", "temperature"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0")
        if self.projection_dim < 0:
            problems.append("projection_dim must be >= 0")
        if not 0 <= self.lora_dropout < 1:
            problems.append("lora_dropout must be in [0, 1)")
        if not (self.model_dropout == -1 or 0 <= self.model_dropout < 1):
            problems.append("model_dropout must be -1 (the model's own) or in [0, 1)")
        for name in ("query_identifier_dropout", "document_header_dropout", "docstring_body_rate"):
            if not 0 <= getattr(self, name) <= 1:
                problems.append(f"{name} must be in [0, 1]")
        if self.batch_size % self.grad_accum_steps:
            problems.append("batch_size must be a multiple of grad_accum_steps")
        if self.packing and self.attn_implementation == "eager":
            problems.append("packing needs attn_implementation sdpa, flex or varlen (its block-diagonal mask)")
        if self.attn_implementation in ("flex", "varlen") and not self.packing:
            problems.append(f"attn_implementation {self.attn_implementation} needs packing: true (queries and "
                            f"documents run packed, in one encoder pass)")
        if self.static_shapes and (self.attn_implementation != "varlen" or self.pad_multiple % 64):
            problems.append("static_shapes needs attn_implementation varlen (with packing) and pad_multiple a "
                            "multiple of 64 (e.g. 4096)")
        if self.infonce_weight < 0:
            problems.append("infonce_weight must be >= 0")
        if not (self.infonce_weight or self.margin_weight or self.teacher_weight or self.distill_weight):
            problems.append("every loss weight is 0: nothing to train on")
        if self.teacher_weight < 0 or not self.teacher_temperature > 0:
            problems.append("teacher_weight must be >= 0 and teacher_temperature > 0")
        if self.teacher_weight and not self.hard_negatives:
            problems.append("teacher_weight needs hard_negatives: true (the teacher scored each row's negatives)")
        if self.teacher_weight and self.backend != "torch":
            problems.append("teacher_weight needs backend torch")
        if self.distill_teacher and not self.distill_weight > 0:
            problems.append("distill_teacher needs distill_weight > 0 (the weight of its KL term)")
        if self.distill_teacher and self.backend != "torch":
            problems.append("distill_teacher needs backend torch")
        if self.distill_teacher and self.grad_accum_steps != 1:
            problems.append("distill_teacher needs grad_accum_steps 1 (cached_contrastive keeps the whole batch "
                            "in one step with little memory)")
        if self.max_steps <= 0 and self.epochs <= 0:
            problems.append("set epochs > 0 or max_steps > 0")
        if self.fp8_products and self.backend != "torch":
            problems.append("fp8_products needs backend torch")
        if self.fp8_products and (self.qat_bits or self.lora_dropout > 0):
            problems.append("fp8_products needs qat_bits 0 and lora_dropout 0 (float8 runs in the fused LoRA product)")
        if self.qat_bits not in (0, 4, 8):
            problems.append("qat_bits must be 0, 4 or 8")
        if self.qat_bits and (self.qat_group_size <= 0 or self.qat_group_size % 2):
            problems.append("qat_group_size must be a positive even number")
        if self.qat_bits and self.lora_dropout > 0:
            problems.append("qat_bits needs lora_dropout 0 (the LoRA update is merged before rounding)")
        for f in dataclasses.fields(self):
            ch = f.metadata.get("choices")
            if ch and getattr(self, f.name) not in ch:
                problems.append(f"{f.name} must be one of {', '.join(ch)}")
        if problems:
            raise ConfigError("training config: " + "; ".join(problems))
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def field_type(f: dataclasses.Field) -> type:
    hints = typing.get_type_hints(TrainConfig)
    t = hints[f.name]
    if isinstance(t, types.GenericAlias):
        return list
    return t


def coerce(name: str, value: Any, where: str) -> Any:
    """Check/convert one value against the field's type."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    if name not in fields:
        known = ", ".join(sorted(fields))
        raise ConfigError(f"{where}: unknown key '{name}' (known keys: {known})")
    want = field_type(fields[name])
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is float and isinstance(value, str):  # YAML 1.1 reads "1e-4" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if want is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    elif isinstance(value, want) and not (want is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{where}: '{name}' must be {want.__name__}, got {type(value).__name__} {value!r}")


def load_train_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults < YAML file < overrides (CLI flags); validated.

    Raises:
        ConfigError: naming the file and line of a bad or unknown key, or the bad flag.
    """
    import yaml

    cfg = TrainConfig()
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text") from None
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{path}:{line}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
        if data is None:
            data = {}
        if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
            raise ConfigError(f"{path}: expected a mapping of keys to values (key: value per line)")
        lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
        for key, value in data.items():
            setattr(cfg, str(key), coerce(str(key), value, f"{path}: line {lines.get(str(key), '?')}"))
    for key, value in (overrides or {}).items():
        if value is not None:
            setattr(cfg, key, coerce(key, value, f"--{key.replace('_', '-')}"))
    return cfg.validate()
