"""`supergrep profile`: where the time of a real training step goes.

A profiled step is the trainer's own plain step, cut into components with a device
synchronisation after each (``torch.cuda.synchronize`` / ``torch.mps.synchronize``; on the CPU
work is already synchronous), so each component's wall time is its own:

    data              wait for the prefetched batch + host -> device copy
    forward_query     encode the queries (the trainer's encode(), compiled if ``compile``)
    forward_document  encode the documents (packed rows when ``packing``)
    teacher           the distillation teacher's vectors and scores (only with distill_weight)
    maxsim            (n_q, n_d) MaxSim scores
    loss              InfoNCE + margin (+ distillation) from the scores
    backward          autograd through all of it
    optimizer         unscale, clip, AdamW, zero_grad

The synchronisations exist only here: ``supergrep train`` never waits for the device between
steps. To check that the cut does not distort the step, the same trainer then runs
``unsynced_steps`` ordinary ``train_step`` calls with one sync at the end, and the two step
times are reported side by side. ``trace`` writes a torch.profiler Chrome trace (chrome://tracing,
Perfetto) of a few extra steps with each component as a named range.

Cached-contrastive and gradient-accumulation steps are profiled as one plain step over the
whole batch (their extra passes are not timed apart). Backends other than torch are timed per
whole step (data / step) with a device read-back as the sync.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from supergrep.backends.adapters import LoRAConfig
from supergrep.encoder.tokenize import RoleTokenizer
from supergrep.train.config import TrainConfig
from supergrep.train.data import Batch, Prefetcher, bucket_batches, collate
from supergrep.train.losses import maxsim_scores, teacher_scores
from supergrep.train.memory import MemoryRecorder

log = logging.getLogger(__name__)

COMPONENTS = ("data", "forward_query", "forward_document", "teacher", "maxsim", "loss", "backward", "optimizer")
DATA_BUDGET = 0.02  # the data pipeline must stay under 2% of a step


@dataclass
class ProfileResult:
    backend: str
    device: str
    steps: int
    warmup: int
    batch_size: int
    times: dict[str, list[float]]  # component -> seconds, one per timed step
    step_s: list[float]  # wall time of each timed step, measured around the whole step
    tokens: list[int]  # useful (non-padding) tokens per timed step
    collate_s: list[float] = field(default_factory=list)  # background thread, overlapped with compute
    unsynced_step_s: float | None = None
    unsynced_steps: int = 0
    memory: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)

    def rows(self) -> list[dict]:
        """Per component: mean/std ms and share of the step (components present only)."""
        step = statistics.fmean(self.step_s) if self.step_s else 0.0
        out = []
        for name in [c for c in COMPONENTS if c in self.times] + [k for k in self.times if k not in COMPONENTS]:
            ts = self.times.get(name)
            if not ts:
                continue
            mean = statistics.fmean(ts)
            out.append({"component": name, "mean_ms": mean * 1e3,
                        "std_ms": statistics.pstdev(ts) * 1e3 if len(ts) > 1 else 0.0,
                        "pct": 100 * mean / step if step else 0.0})
        return out

    @property
    def step_mean_s(self) -> float:
        return statistics.fmean(self.step_s) if self.step_s else 0.0

    @property
    def components_sum_s(self) -> float:
        return sum(statistics.fmean(ts) for ts in self.times.values() if ts)

    @property
    def data_share(self) -> float:
        ts = self.times.get("data")
        return statistics.fmean(ts) / self.step_mean_s if ts and self.step_mean_s else 0.0

    def to_dict(self) -> dict:
        step = self.step_mean_s
        return {
            "backend": self.backend, "device": self.device, "steps": self.steps, "warmup": self.warmup,
            "batch_size": self.batch_size, "components": self.rows(),
            "step_ms": step * 1e3, "step_std_ms": statistics.pstdev(self.step_s) * 1e3 if len(self.step_s) > 1 else 0.0,
            "components_sum_ms": self.components_sum_s * 1e3,
            "unsynced_step_ms": self.unsynced_step_s * 1e3 if self.unsynced_step_s else None,
            "unsynced_steps": self.unsynced_steps,
            "samples_per_s": self.batch_size / step if step else 0.0,
            "useful_tokens_per_s": statistics.fmean(self.tokens) / step if step and self.tokens else 0.0,
            "collate_ms": statistics.fmean(self.collate_s) * 1e3 if self.collate_s else None,
            "data_pct": 100 * self.data_share, "data_ok": self.data_share < DATA_BUDGET,
            "memory": self.memory, "notes": self.notes, "config": self.config,
        }

    def markdown(self) -> str:
        d = self.to_dict()
        lines = ["| component | mean ms | std ms | % of step |", "|---|---|---|---|"]
        for r in d["components"]:
            lines.append(f"| {r['component']} | {r['mean_ms']:.2f} | {r['std_ms']:.2f} | {r['pct']:.1f}% |")
        lines.append(f"| **step** (synchronised) | {d['step_ms']:.2f} | {d['step_std_ms']:.2f} | 100% |")
        if d["unsynced_step_ms"]:
            lines.append(f"| step as `train` runs it (no syncs, {d['unsynced_steps']} steps) | "
                         f"{d['unsynced_step_ms']:.2f} | | {100 * d['unsynced_step_ms'] / d['step_ms']:.1f}% |")
        verdict = "OK" if d["data_ok"] else "ABOVE BUDGET"
        tail = [f"{self.backend} on {self.device}, batch {self.batch_size}, {self.steps} timed steps after "
                f"{self.warmup} warm-up: {d['samples_per_s']:.1f} samples/s, "
                f"{d['useful_tokens_per_s']:,.0f} useful tokens/s",
                f"data (wait for the prefetched batch + host->device): {d['data_pct']:.2f}% of the step "
                f"(budget < {100 * DATA_BUDGET:.0f}%): {verdict}"]
        if d["collate_ms"] is not None:
            tail.append(f"collation in the prefetch thread (overlapped with compute): {d['collate_ms']:.2f} ms/batch")
        return "\n".join(lines + [""] + tail + [f"note: {n}" for n in self.notes])

    def plot(self, path: str | Path) -> Path | None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        rows = self.rows()
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.4))
        names = [r["component"] for r in rows][::-1]
        means = [r["mean_ms"] for r in rows][::-1]
        stds = [r["std_ms"] for r in rows][::-1]
        ax.barh(names, means, xerr=stds, color="#4c72b0", capsize=3)
        for y, r in enumerate(rows[::-1]):
            ax.text(r["mean_ms"] + r["std_ms"], y, f"  {r['pct']:.1f}%", va="center", fontsize=8)
        ax.set_xlabel("ms per step (mean, std as error bar)")
        ax.set_title(f"training step, {self.backend} on {self.device}: {self.step_mean_s * 1e3:.1f} ms")
        ax.set_xlim(0, max(m + e for m, e in zip(means, stds)) * 1.2 if means else 1)
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


def _syncer(device) -> callable:
    import torch

    dev = getattr(device, "type", str(device))
    if dev == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if dev == "mps":
        return torch.mps.synchronize
    return lambda: None


def _plan(lengths: np.ndarray, cfg: TrainConfig) -> Iterator[tuple[int, int, np.ndarray]]:
    epoch = 0
    while True:
        for i, rows in enumerate(bucket_batches(lengths, cfg.batch_size, cfg.seed, epoch)):
            yield epoch, i, rows
        epoch += 1


def run_profile(cfg: TrainConfig, steps: int = 20, warmup: int = 3, trace: str | Path | None = None,
                trace_steps: int = 3, unsynced_steps: int = 5) -> ProfileResult:
    """Profile ``steps`` training steps of ``cfg`` (after ``warmup`` untimed ones); see the module
    docstring. Uses the config's data (train_file), model and speed settings."""
    from supergrep.train.loop import _load_data, make_trainer, training_spec

    spec = training_spec(cfg)
    tokenizer = RoleTokenizer(spec)
    train_cache, _, teacher_tokens = _load_data(cfg, spec, tokenizer)
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    trainer = make_trainer(cfg, spec, lora)
    q_expand = spec.settings.query_max_tokens if spec.settings.query_expansion else 0
    pack_to = cfg.document_max_tokens if cfg.packing else 0
    collate_s: list[float] = []
    lock = threading.Lock()

    def make(rows: np.ndarray, e: int, i: int) -> Batch:
        t = time.perf_counter()
        b = collate(train_cache, rows, tokenizer, q_expand, cfg.hard_negatives, cfg.pad_multiple, e, i, pack_to=pack_to)
        if teacher_tokens is not None:  # distill_teacher's own tokens of the rows (collation time)
            b = teacher_tokens.attach(b, rows, cfg.hard_negatives, cfg.pad_multiple)
        with lock:
            collate_s.append(time.perf_counter() - t)
        return b

    lengths = np.asarray(train_cache.doc_lengths())
    prefetch = Prefetcher(_plan(lengths, cfg), make, cfg.prefetch_batches)
    device = str(getattr(trainer, "device", "cpu"))
    res = ProfileResult(cfg.backend, device, steps, warmup, cfg.batch_size, {c: [] for c in COMPONENTS}, [], [],
                        config=cfg.to_dict())
    if cfg.cached_contrastive or cfg.grad_accum_steps > 1:
        res.notes.append("cached_contrastive / grad_accum_steps are profiled as one plain step over the batch")
    memory = MemoryRecorder(device=device)
    it = iter(prefetch)
    try:
        if cfg.backend == "torch":
            _profile_torch(trainer, it, res, steps, warmup, memory)
            if trace:
                _trace_torch(trainer, it, Path(trace), trace_steps)
            if unsynced_steps > 0:
                res.unsynced_step_s = _unsynced(trainer, it, unsynced_steps)
                res.unsynced_steps = unsynced_steps
        else:
            _profile_generic(trainer, it, res, steps, warmup, memory)
            res.notes.append(f"the {cfg.backend} backend is timed per whole step (no per-component cut)")
    finally:
        prefetch.close()
    with lock:
        res.collate_s = list(collate_s)
    res.memory = memory.summary()
    return res


def _profile_torch(trainer, it, res: ProfileResult, steps: int, warmup: int, memory: MemoryRecorder,
                   label: bool = False) -> None:
    import torch

    sync = _syncer(trainer.device)
    if not trainer.needs_teacher:
        res.times.pop("teacher", None)
    from_scores = trainer.loss_fn.from_scores
    ops = trainer.ops
    rf = torch.profiler.record_function if label else (lambda name: contextlib.nullcontext())

    for n in range(warmup + steps):
        marks: dict[str, float] = {}
        sync()
        t0 = last = time.perf_counter()

        def mark(name: str, marks: dict = marks) -> None:
            nonlocal last
            sync()
            now = time.perf_counter()
            marks[name] = now - last
            last = now

        with rf("data"):
            batch = next(it)
            q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
            packed = trainer.packed_to_device(batch)
        mark("data")
        for group in trainer.optimizer.param_groups:
            group["lr"] = trainer.cfg.lr
        with rf("forward_query"):
            q = trainer.encode(q_ids, q_mask)
        mark("forward_query")
        with rf("forward_document"):
            d = trainer.encode_documents(d_ids, d_mask, packed)
        mark("forward_document")
        t_scores = None
        if trainer.needs_teacher:
            with rf("teacher"):
                teacher = trainer._teacher(q_ids, q_mask, d_ids, d_mask)
                t_scores = teacher_scores(ops, teacher, q_mask, d_mask)
            mark("teacher")
        with rf("maxsim"):
            scores = maxsim_scores(ops, q, q_mask, d, d_mask)
        mark("maxsim")
        with rf("loss"):
            loss, _ = from_scores(ops, scores, t_scores)
        mark("loss")
        with rf("backward"):
            trainer._backward(loss)
        mark("backward")
        with rf("optimizer"):
            trainer.optimizer_step()
        mark("optimizer")
        total = time.perf_counter() - t0
        memory.sample(n)
        if n >= warmup:
            for k, v in marks.items():
                res.times.setdefault(k, []).append(v)
            res.step_s.append(total)
            res.tokens.append(batch.n_tokens)
        if not math.isfinite(float(loss.detach())):
            raise RuntimeError(f"non-finite loss at profiled step {n}")


def _trace_torch(trainer, it, path: Path, steps: int) -> None:
    import torch

    acts = [torch.profiler.ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    scratch = ProfileResult("torch", str(trainer.device), steps, 0, 0, {c: [] for c in COMPONENTS}, [], [])
    with torch.profiler.profile(activities=acts) as prof:
        _profile_torch(trainer, it, scratch, steps, 0, MemoryRecorder(), label=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))


def _unsynced(trainer, it, steps: int) -> float:
    sync = _syncer(trainer.device)
    batches = [next(it) for _ in range(steps + 1)]
    trainer.train_step(batches[0], trainer.cfg.lr)  # any re-compilation for a new shape lands here
    sync()
    t = time.perf_counter()
    losses = [trainer.train_step(b, trainer.cfg.lr)[0] for b in batches[1:]]
    trainer.to_host(losses)
    return (time.perf_counter() - t) / steps


def _profile_generic(trainer, it, res: ProfileResult, steps: int, warmup: int, memory: MemoryRecorder) -> None:
    res.times = {"data": [], "step": []}
    for n in range(warmup + steps):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        loss, _ = trainer.train_step(batch, trainer.cfg.lr)
        trainer.to_host([loss])
        t2 = time.perf_counter()
        memory.sample(n)
        if n >= warmup:
            res.times["data"].append(t1 - t0)
            res.times["step"].append(t2 - t1)
            res.step_s.append(t2 - t0)
            res.tokens.append(batch.n_tokens)


def write_outputs(res: ProfileResult, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "profile.json", "markdown": out / "profile.md"}
    files["json"].write_text(json.dumps(res.to_dict(), indent=2) + "\n")
    files["markdown"].write_text(res.markdown() + "\n")
    png = res.plot(out / "profile.png")
    if png is not None:
        files["png"] = png
    return files
