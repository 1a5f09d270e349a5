"""Memory profiler: process RSS and device memory per step, a leak trend, a plot.

- ``MemoryRecorder.sample(step)`` reads, without a device sync: the process' resident set
  (``/proc/self/statm`` on Linux, else psutil, else the peak from ``getrusage``); CUDA's allocated,
  reserved and peak bytes (when CUDA is initialised); MPS' allocated and driver bytes; MLX's
  active, peak and cache bytes (when ``mlx.core`` is loaded). Frameworks are never imported
  here: only those the process already uses are asked.
- ``leak(key)``: the least-squares slope of a series over the last ``window`` samples. A leak is
  flagged when the fitted rise over the window exceeds ``min_rise_bytes``, the line explains
  the series (r^2 >= ``min_r2``) and the growth goes on in the window's second half (fitted rise
  there > ``min_rise_bytes / 4``): steady growth, not allocator noise (low r^2) or a one-off
  jump such as a cache filling once (flat after it).
- ``memory_profile(label)``: a context manager around any block; samples on entry and exit.
- ``plot(path)``: RSS and device memory against the step (matplotlib, optional).

``supergrep train`` records with ``memory_profile: true`` (memory.jsonl, memory.png, the leak
verdict in the summary); ``supergrep bench`` always does.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20


def process_rss() -> int:
    """Resident set size of this process in bytes (0 when it cannot be read)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001 - psutil is optional
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)  # the peak: better than nothing
    except Exception:  # noqa: BLE001
        return 0


def device_memory(device: str | None = None) -> dict[str, int]:
    """Device memory counters of the frameworks already loaded; no device sync."""
    out: dict[str, int] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        dev = device or "cuda"
        try:
            if dev.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_initialized():
                out["cuda_allocated"] = int(torch.cuda.memory_allocated(dev))
                out["cuda_reserved"] = int(torch.cuda.memory_reserved(dev))
                out["cuda_peak"] = int(torch.cuda.max_memory_allocated(dev))
            elif dev == "mps" and hasattr(torch, "mps"):
                out["mps_allocated"] = int(torch.mps.current_allocated_memory())
                out["mps_driver"] = int(torch.mps.driver_allocated_memory())
        except Exception:  # noqa: BLE001 - a counter that is not there is left out
            pass
    mx = sys.modules.get("mlx.core")
    if mx is not None:
        for key, names in (("mlx_active", ("get_active_memory",)), ("mlx_peak", ("get_peak_memory",)),
                           ("mlx_cache", ("get_cache_memory",))):
            for name in names:
                fn = getattr(mx, name, None) or getattr(getattr(mx, "metal", None), name, None)
                if fn is not None:
                    with contextlib.suppress(Exception):
                        out[key] = int(fn())
                    break
    return out


@dataclass
class LeakReport:
    key: str
    samples: int
    slope_bytes_per_step: float
    rise_bytes: float  # the fitted rise over the window
    r2: float
    leak: bool

    def to_dict(self) -> dict:
        return {"key": self.key, "samples": self.samples, "slope_mib_per_step": self.slope_bytes_per_step / MiB,
                "rise_mib": self.rise_bytes / MiB, "r2": self.r2, "leak": self.leak}


def trend(steps: list[float], values: list[float]) -> tuple[float, float]:
    """(least-squares slope, r^2) of values against steps.

    >>> trend([0, 1, 2, 3], [10, 12, 14, 16])
    (2.0, 1.0)
    >>> trend([0, 1, 2, 3], [5, 5, 5, 5])
    (0.0, 0.0)
    """
    n = len(steps)
    if n < 2:
        return 0.0, 0.0
    mx = sum(steps) / n
    my = sum(values) / n
    sxx = sum((x - mx) ** 2 for x in steps)
    syy = sum((y - my) ** 2 for y in values)
    sxy = sum((x - mx) * (y - my) for x, y in zip(steps, values))
    if sxx == 0:
        return 0.0, 0.0
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, r2


@dataclass
class MemoryRecorder:
    """Per-step memory samples; see the module docstring.

    Args:
        device: The training device ("cuda", "cuda:1", "mps", "cpu"); which counters to read.
        window: Samples the leak trend is fitted over (the most recent ones).
        min_rise_bytes: Fitted growth over the window that counts as a leak.
        min_r2: How well a straight line must fit (steady growth) to call it a leak.
    """

    device: str | None = None
    window: int = 50
    min_rise_bytes: float = 32 * MiB
    min_r2: float = 0.5
    samples: list[dict] = field(default_factory=list)

    def sample(self, step: int, **extra) -> dict:
        row = {"step": step, "t": time.perf_counter(), "rss": process_rss(), **device_memory(self.device), **extra}
        self.samples.append(row)
        return row

    def keys(self) -> list[str]:
        seen: dict[str, None] = {}
        for s in self.samples:
            for k, v in s.items():
                if k not in ("step", "t") and isinstance(v, int):
                    seen[k] = None
        return list(seen)

    def series(self, key: str) -> tuple[list[float], list[float]]:
        rows = [s for s in self.samples if key in s]
        return [float(s["step"]) for s in rows], [float(s[key]) for s in rows]

    def leak(self, key: str = "rss") -> LeakReport:
        steps, values = self.series(key)
        steps, values = steps[-self.window :], values[-self.window :]
        slope, r2 = trend(steps, values)
        rise = slope * (max(steps) - min(steps)) if len(steps) >= 2 else 0.0
        # Still growing in the window's second half: a one-off jump (a cache filling once) is not
        # a leak even though a line through it fits fairly well.
        half = len(steps) // 2
        late_slope, _ = trend(steps[half:], values[half:])
        late_rise = late_slope * (max(steps[half:]) - min(steps[half:])) if len(steps) - half >= 2 else 0.0
        flagged = (len(steps) >= 8 and rise > self.min_rise_bytes and r2 >= self.min_r2
                   and late_rise > self.min_rise_bytes / 4)
        return LeakReport(key, len(steps), slope, rise, r2, flagged)

    def leak_keys(self) -> list[str]:
        """The series a leak is looked for in: RSS and the allocated/active device bytes."""
        return [k for k in self.keys() if k == "rss" or k.endswith(("_allocated", "_active"))]

    def summary(self) -> dict:
        out: dict = {"samples": len(self.samples)}
        for k in self.keys():
            _, vals = self.series(k)
            if vals:
                out[f"{k}_max_mib"] = max(vals) / MiB
                out[f"{k}_last_mib"] = vals[-1] / MiB
        leaks = [self.leak(k) for k in self.leak_keys()]
        out["leaks"] = [r.to_dict() for r in leaks]
        out["leak"] = any(r.leak for r in leaks)
        return out

    def write_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text("".join(json.dumps(s) + "\n" for s in self.samples))
        return path

    def plot(self, path: str | Path, title: str = "memory") -> Path | None:
        """RSS and device memory (MiB) against the step; None without matplotlib or samples."""
        if not self.samples:
            return None
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for k in self.keys():
            steps, vals = self.series(k)
            ax.plot(steps, [v / MiB for v in vals], label=k)
        verdict = [r.key for r in (self.leak(k) for k in self.leak_keys()) if r.leak]
        ax.set_title(f"{title}" + (f"  LEAK: {', '.join(verdict)}" if verdict else ""))
        ax.set_xlabel("step")
        ax.set_ylabel("MiB")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


@contextlib.contextmanager
def memory_profile(label: str = "block", device: str | None = None,
                   recorder: MemoryRecorder | None = None) -> Iterator[MemoryRecorder]:
    """Sample memory on entry and exit of a block.

    >>> import mmap
    >>> with memory_profile("alloc") as rec:  # pages of their own: a heap block could reuse freed pages
    ...     blob = mmap.mmap(-1, 64 << 20)
    ...     _ = blob.write(b"x" * (64 << 20))
    >>> [s["label"] for s in rec.samples]
    ['alloc:enter', 'alloc:exit']
    >>> rec.samples[-1]["rss"] - rec.samples[0]["rss"] > 32 << 20
    True
    """
    rec = recorder if recorder is not None else MemoryRecorder(device=device)

    def next_step() -> int:
        return rec.samples[-1]["step"] + 1 if rec.samples else 0

    rec.sample(next_step(), label=f"{label}:enter")
    try:
        yield rec
    finally:
        rec.sample(next_step(), label=f"{label}:exit")
