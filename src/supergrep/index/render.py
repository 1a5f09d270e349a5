"""Search results as `supergrep search` prints them: pure functions from hits to text.

The CLI prints these strings and the daemon sends them to its clients, so a search answered by
the daemon is byte-for-byte what a direct search prints. Colours are the ANSI codes
``click.style`` writes (checked by tests/index/test_render.py), without importing click.
"""

from __future__ import annotations

import json
from typing import Any, Protocol


class HitLike(Protocol):
    path: str
    start_line: int
    end_line: int
    symbol: str
    language: str
    score: float
    text: str


_SGR = {"magenta": "35", "green": "32", "bold": "1", "dim": "2"}


def _style(text: str, code: str, enabled: bool) -> str:
    return f"\x1b[{_SGR[code]}m{text}\x1b[0m" if enabled else text


def snippet_lines(hit: HitLike, n: int) -> list[tuple[int, str]]:
    """The first ``n`` lines of a hit, with their line numbers."""
    return [(hit.start_line + i, line) for i, line in enumerate(hit.text.split("\n")[:n])]


def hit_json(hit: HitLike, context: int) -> dict[str, Any]:
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


def search_json(query: str, mode: str, hits: list[HitLike], context: int) -> str:
    """The ``--json`` output of a search: one object and a newline."""
    data = {"query": query, "mode": mode, "count": len(hits), "results": [hit_json(h, context) for h in hits]}
    return json.dumps(data, ensure_ascii=False, indent=None) + "\n"


def format_hits(hits: list[HitLike], context: int, color: bool = False, show_scores: bool = True) -> str:
    """The human output of a search (empty when there are no hits), newline-terminated.

    >>> from types import SimpleNamespace as H
    >>> print(format_hits([H(path="a.py", start_line=9, end_line=10, symbol="f", language="python",
    ...                      score=0.5, text="def f():\\n    pass  ")], context=3), end="")
    a.py:9-10 f (0.500)
     9  def f():
    10      pass
    """
    width = max((len(str(h.start_line + max(context, 1))) for h in hits), default=1)
    out: list[str] = []
    for i, h in enumerate(hits):
        if i:
            out.append("")
        head = _style(h.path, "magenta", color) + ":" + _style(f"{h.start_line}-{h.end_line}", "green", color)
        if h.symbol:
            head += " " + _style(h.symbol, "bold", color)
        if show_scores:
            head += " " + _style(f"({h.score:.3f})", "dim", color)
        out.append(head)
        for n, line in snippet_lines(h, context):
            out.append(f"{_style(str(n).rjust(width), 'green', color)}  {line.rstrip()}")
    return "".join(line + "\n" for line in out)
