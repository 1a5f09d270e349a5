"""Terminal concerns in one place: colour (tty only, NO_COLOR respected), progress bars on
stderr, JSON output and the result printer."""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

import click

from supergrep.index.render import format_hits, hit_json, snippet_lines  # noqa: F401 - re-exported
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


def print_hits(hits: list[Hit], context: int, show_scores: bool = True) -> None:
    """The human output of a search (``index/render.py`` formats it; the daemon sends the same)."""
    click.echo(format_hits(hits, context, use_color(), show_scores), nl=False)


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
