"""Terminal concerns in one place: colour (tty only, NO_COLOR respected), progress bars on
stderr, JSON output and the result printer."""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

import click

from supergrep.index.search import Hit


def use_color(stream: IO[str] | None = None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Styler:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, **kw: Any) -> str:
        return click.style(text, **kw) if self.enabled else text


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=None))


def snippet_lines(hit: Hit, n: int) -> list[tuple[int, str]]:
    """The first ``n`` non-blank-led lines of a hit, with their line numbers."""
    lines = hit.text.split("\n")
    out = []
    for i, line in enumerate(lines):
        if len(out) >= n:
            break
        out.append((hit.start_line + i, line))
    return out


def hit_json(hit: Hit, context: int) -> dict:
    """A result object of the documented ``--json`` schema."""
    return {
        "path": hit.path,
        "start_line": hit.start_line,
        "end_line": hit.end_line,
        "symbol": hit.symbol,
        "language": hit.language,
        "score": round(hit.score, 6),
        "snippet": "\n".join(line for _, line in snippet_lines(hit, context)),
    }


def print_hits(hits: list[Hit], context: int, show_scores: bool = True) -> None:
    st = Styler(use_color())
    width = max((len(str(h.start_line + max(context, 1))) for h in hits), default=1)
    for i, h in enumerate(hits):
        if i:
            click.echo("")
        head = st(h.path, fg="magenta") + ":" + st(f"{h.start_line}-{h.end_line}", fg="green")
        if h.symbol:
            head += " " + st(h.symbol, bold=True)
        if show_scores:
            head += " " + st(f"({h.score:.3f})", dim=True)
        click.echo(head)
        for n, line in snippet_lines(h, context):
            click.echo(f"{st(str(n).rjust(width), fg='green')}  {line.rstrip()}")


class BarProgress:
    """An index run's progress bar (tqdm on stderr, shown only when stderr is a terminal)."""

    def __init__(self, desc: str = "indexing"):
        self.desc = desc
        self.bar = None

    def start(self, total_files: int) -> None:
        if total_files and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_files, desc=self.desc, unit="file", file=sys.stderr,
                            leave=False, dynamic_ncols=True)

    def advance(self, n_files: int) -> None:
        if self.bar is not None:
            self.bar.update(n_files)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
