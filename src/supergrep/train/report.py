"""Run records: metrics.jsonl (one JSON object per log event) and loss.png."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


class MetricsLog:
    """Appends events to ``metrics.jsonl``; on resume, drops events after the resumed step so a
    resumed run's file reads as if it had never stopped."""

    def __init__(self, path: Path, resume_step: int | None = None):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            path.write_text("")
        elif path.exists():
            kept = [line for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))
        self.tb = None

    def write(self, event: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(event) + "\n")
        if self.tb is not None:
            for key, value in event.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tb.add_scalar(f"{event.get('kind', 'train')}/{key}", value, event.get("step", 0))

    def read(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def plot_losses(events: list[dict], out: Path) -> Path | None:
    """Training and validation loss against step, as a PNG (None when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no %s (pip install matplotlib)", out.name)
        return None
    train = [(e["step"], e["loss"]) for e in events if e.get("kind") == "train" and "loss" in e]
    val = [(e["step"], e["val_loss"]) for e in events if e.get("kind") == "val" and "val_loss" in e]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if train:
        ax.plot(*zip(*train, strict=True), label="train loss", linewidth=1.2)
    if val:
        ax.plot(*zip(*val, strict=True), "o-", label="validation loss", linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (InfoNCE + margin)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
