"""The result printer: the daemon and the CLI share it, and its colours are click's."""

from __future__ import annotations

import click

from supergrep.index.render import format_hits, search_json
from supergrep.index.search import Hit


def click_print_hits(hits, context, color):
    """The printer as cli/output.py wrote it with click.style before render.py existed."""
    out = []
    st = (lambda text, **kw: click.style(text, **kw)) if color else (lambda text, **kw: text)
    width = max((len(str(h.start_line + max(context, 1))) for h in hits), default=1)
    for i, h in enumerate(hits):
        if i:
            out.append("")
        head = st(h.path, fg="magenta") + ":" + st(f"{h.start_line}-{h.end_line}", fg="green")
        if h.symbol:
            head += " " + st(h.symbol, bold=True)
        head += " " + st(f"({h.score:.3f})", dim=True)
        out.append(head)
        for n, line in [(h.start_line + j, x) for j, x in enumerate(h.text.split("\n")[:context])]:
            out.append(f"{st(str(n).rjust(width), fg='green')}  {line.rstrip()}")
    return "".join(x + "\n" for x in out)


HITS = [
    Hit("src/ünïcode.py", 9, 12, "Cls.méthod", "method", "python", 0.98765, "def f():\n    x = '☃'  \n\n    return x", 1),
    Hit("README.md", 1, 3, "", "section", "markdown", -0.5, "# Title\ntext", 2),
    Hit("a.rs", 998, 1003, "x", "fn", "rust", 1e-9, "fn x() {}", 3),
]


def test_same_bytes_as_the_click_printer():
    for color in (False, True):
        for context in (0, 1, 3, 100):
            for hits in (HITS, HITS[:1], []):
                assert format_hits(hits, context, color) == click_print_hits(hits, context, color)


def test_json_output():
    import json

    text = search_json("q ☃", "hybrid", HITS, 2)
    assert text.endswith("\n") and "☃" in text  # ensure_ascii=False, like echo_json
    data = json.loads(text)
    assert data["count"] == 3 and data["results"][0]["snippet"] == "def f():\n    x = '☃'  "
    assert data["results"][2]["score"] == 0.0
