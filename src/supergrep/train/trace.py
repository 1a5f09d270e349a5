"""A framework-profiler trace of a few steps of a real `supergrep train` run, on every rank of a
torchrun job (where `supergrep profile`, one process, cannot look): which kernels and collectives
a step spends its time in, and how long each rank waits.

    SUPERGREP_TRACE_STEPS=20:5 SUPERGREP_TRACE_DIR=/tmp/trace torchrun ... -m supergrep train ...

writes, per rank, ``trace-rank<R>.txt`` (the top operators by device and by host time, and the
synchronised wall time of each traced step) and ``trace-rank<R>.json.gz`` (Chrome trace format:
chrome://tracing or https://ui.perfetto.dev). Off unless both variables are set; torch only.
"""

from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path


class StepTracer:
    def __init__(self, start: int, count: int, out: Path, rank: int):
        self.start, self.count, self.out, self.rank = start, count, out, rank
        self.prof = None
        self.t0 = 0.0
        self.walls: list[float] = []

    @classmethod
    def from_env(cls, rank: int) -> StepTracer | None:
        steps, out = os.environ.get("SUPERGREP_TRACE_STEPS", ""), os.environ.get("SUPERGREP_TRACE_DIR", "")
        if not steps or not out:
            return None
        start, _, count = steps.partition(":")
        return cls(int(start), int(count or 3), Path(out), rank)

    def _sync(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def before(self, step: int) -> None:
        """Call with the number of the step about to run."""
        if step == self.start:
            import torch

            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self._sync()
            self.prof = torch.profiler.profile(activities=acts, record_shapes=False)
            self.prof.__enter__()
        if self.prof is not None:
            self._sync()
            self.t0 = time.perf_counter()

    def after(self, step: int) -> None:
        if self.prof is None:
            return
        self._sync()
        self.walls.append(time.perf_counter() - self.t0)
        if step < self.start + self.count - 1:
            return
        prof, self.prof = self.prof, None
        prof.__exit__(None, None, None)
        self.out.mkdir(parents=True, exist_ok=True)
        ka = prof.key_averages()
        lines = [f"rank {self.rank}: steps {self.start}-{step}, synchronised wall ms per step: "
                 + ", ".join(f"{w * 1000:.1f}" for w in self.walls)]
        for key in ("self_cuda_time_total", "cpu_time_total"):
            try:
                lines += [f"\n== by {key}", ka.table(sort_by=key, row_limit=30, max_name_column_width=70)]
            except Exception as exc:  # noqa: BLE001 - a key this build does not have (no CUDA)
                lines.append(f"\n== by {key}: unavailable ({exc})")
        (self.out / f"trace-rank{self.rank}.txt").write_text("\n".join(lines))
        raw = self.out / f"trace-rank{self.rank}.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
