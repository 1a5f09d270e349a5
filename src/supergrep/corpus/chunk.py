"""Cut a file into searchable chunks: one per definition, with tree-sitter.

Rules (every language, driven by its row in ``languages.py``):

- One chunk per function/method/class-like definition, with its qualified name and its
  1-based inclusive line span (decorators, ``export`` wrappers and glued doc comments included).
- A container (class, impl, interface, ...) chunk keeps its header and fields; each nested
  definition is a chunk of its own and is left out of the container's text.
- Code between definitions (imports, constants, ``if __name__ == ...``) is kept as "module"
  chunks, one per contiguous run of non-blank lines.
- Anything longer than ``max_chunk_lines`` is split into overlapping pieces (``part`` 1, 2, ...).
- Files without a grammar, and prose, are cut into line windows (Markdown by heading).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from supergrep.config import ChunkConfig
from supergrep.corpus.languages import LanguageSpec, detect_language, field_name, get_language
from supergrep.corpus.types import Chunk

log = logging.getLogger(__name__)

# Deeper than this, a syntax tree is generated code; definitions are not searched for below it
# (and Python's recursion limit stays far away).
_MAX_DEPTH = 120


@dataclass
class _Def:
    start: int  # 0-based first row, inclusive
    end: int  # 0-based last row, inclusive
    symbol: str
    kind: str
    children: list[_Def] = field(default_factory=list)


@functools.cache
def _parser(grammar: str) -> Any:
    from tree_sitter_language_pack import get_parser

    return get_parser(grammar)


def grammar_available(grammar: str) -> bool:
    try:
        _parser(grammar)
    except Exception:  # noqa: BLE001 - any failure means "no grammar", we fall back to lines
        return False
    return True


def _last_row(node: Any) -> int:
    """Last row a node occupies (a node ending at column 0 ends on the row before)."""
    end = node.end_point
    if end.column == 0 and end.row > node.start_point.row:
        return end.row - 1
    return end.row


def _unwrap(node: Any, spec: LanguageSpec, depth: int = 0) -> Any | None:
    """The definition a wrapper (decorators, export, template) holds, or the node itself."""
    if node.type in spec.definitions:
        return node
    if node.type not in spec.wrappers or depth > 4:
        return None
    inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
    candidates = [inner] if inner is not None else list(node.named_children)
    for child in candidates:
        found = _unwrap(child, spec, depth + 1)
        if found is not None:
            return found
    return None


def _collect(node: Any, spec: LanguageSpec, src: bytes, scope: list[str], depth: int = 0) -> list[_Def]:
    """Definitions among ``node``'s descendants, outermost first, in source order."""
    if depth > _MAX_DEPTH:
        return []
    defs: list[_Def] = []
    lead_start: int | None = None  # first row of a run of leading comments/attributes
    lead_end = -2
    for child in node.named_children:
        inner = _unwrap(child, spec)
        name = None
        if inner is not None:
            name = (spec.name_of or field_name)(inner, src)
        if inner is not None and name:
            start = child.start_point.row
            if lead_start is not None and lead_end + 1 >= start:
                start = lead_start
            kind = spec.definitions[inner.type]
            if kind == "function" and scope and scope[-1] is not None:
                kind = "method"
            d = _Def(start, _last_row(child), spec.scope_separator.join([*scope, name]), kind)
            if inner.type in spec.containers:
                d.children = _collect(inner, spec, src, [*scope, name], depth + 1)
            defs.append(d)
            lead_start = None
        elif child.type in spec.leading:
            if lead_start is None or child.start_point.row > lead_end + 1:
                lead_start = child.start_point.row
            lead_end = _last_row(child)
        else:
            lead_start = None
            defs.extend(_collect(child, spec, src, scope, depth + 1))
    return defs


def _runs(rows: list[int]) -> list[list[int]]:
    """Split sorted row numbers into runs of consecutive rows."""
    runs: list[list[int]] = []
    for r in rows:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


class _Builder:
    def __init__(self, path: str, language: str, lines: list[str], cfg: ChunkConfig):
        self.path, self.language, self.lines, self.cfg = path, language, lines, cfg
        self.out: list[Chunk] = []

    def emit(self, rows: list[int], symbol: str, kind: str) -> None:
        """Emit the given rows as a chunk, trimmed of blank edges, split when too long."""
        rows = [r for r in rows if r < len(self.lines)]
        while rows and not self.lines[rows[0]].strip():
            rows.pop(0)
        while rows and not self.lines[rows[-1]].strip():
            rows.pop()
        if not rows:
            return
        size = max(1, self.cfg.max_chunk_lines)
        if len(rows) <= size:
            pieces = [rows]
        else:
            step = max(1, size - max(0, min(self.cfg.overlap_lines, size - 1)))
            pieces = []
            for i in range(0, len(rows), step):
                pieces.append(rows[i : i + size])
                if i + size >= len(rows):
                    break
        for part, piece in enumerate(pieces, start=1 if len(pieces) > 1 else 0):
            self.out.append(
                Chunk(
                    path=self.path,
                    language=self.language,
                    symbol=symbol,
                    kind=kind,
                    start_line=piece[0] + 1,
                    end_line=piece[-1] + 1,
                    text="\n".join(self.lines[r] for r in piece),
                    part=part,
                )
            )

    def emit_defs(self, defs: list[_Def]) -> None:
        for d in defs:
            covered: set[int] = set()
            for c in d.children:
                covered.update(range(c.start, c.end + 1))
            self.emit([r for r in range(d.start, d.end + 1) if r not in covered], d.symbol, d.kind)
            self.emit_defs(d.children)

    def emit_gaps(self, defs: list[_Def], n_rows: int) -> None:
        covered: set[int] = set()
        for d in defs:
            covered.update(range(d.start, d.end + 1))
        free = [r for r in range(n_rows) if r not in covered]
        for run in _runs(free):
            self.emit(run, "", "module")


def _split_lines(text: str) -> list[str]:
    """Lines as tree-sitter counts rows: split on '\\n' only, no phantom last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _chunk_headings(b: _Builder) -> None:
    """Markdown-style prose: one chunk per section, named by its heading path ("Install > From source")."""
    starts: list[tuple[int, str]] = []
    trail: list[tuple[int, str]] = []
    in_fence = False
    for i, line in enumerate(b.lines):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(line)
        if m:
            level = len(m.group(1))
            trail = [(lv, t) for lv, t in trail if lv < level] + [(level, m.group(2))]
            starts.append((i, " > ".join(t for _, t in trail)))
    if not starts or starts[0][0] != 0:
        starts.insert(0, (0, ""))
    for (s, name), nxt in zip(starts, [*starts[1:], (len(b.lines), "")]):
        b.emit(list(range(s, nxt[0])), name, "section")


def _chunk_windows(b: _Builder) -> None:
    size = max(1, b.cfg.window_lines)
    for s in range(0, len(b.lines), size):
        b.emit(list(range(s, min(s + size, len(b.lines)))), "", "window")


def _chunk_declarations(b: _Builder, spec: LanguageSpec) -> None:
    """Line-based splitter for languages without an offline grammar (Lean): a new chunk starts
    at each line that begins, after optional modifiers and attributes, with a declaration keyword."""
    kw = "|".join(re.escape(k) for k in spec.declaration_keywords)
    pattern = re.compile(
        r"^(?:@\[[^\]]*\]\s*)*(?:(?:private|protected|noncomputable|partial|unsafe|nonrec|scoped|local)\s+)*"
        rf"({kw})\s+([^\s:({{\[]+)"
    )
    starts: list[tuple[int, str, str]] = []
    for i, line in enumerate(b.lines):
        m = pattern.match(line)
        if m:
            starts.append((i, m.group(2), m.group(1)))
    if not starts:
        _chunk_windows(b)
        return
    if starts[0][0] > 0:
        b.emit(list(range(0, starts[0][0])), "", "module")
    for (s, name, keyword), nxt in zip(starts, [*starts[1:], (len(b.lines), "", "")]):
        b.emit(list(range(s, nxt[0])), name, keyword)


def chunk_source(path: str, text: str, language: str | None = None, cfg: ChunkConfig | None = None) -> list[Chunk]:
    """Cut one file's text into chunks.

    Args:
        path: POSIX path relative to the project root (recorded in every chunk).
        text: The decoded file content.
        language: A language name from the table; detected from ``path`` when None.
        cfg: Chunk sizes; defaults when None.

    Returns:
        Chunks in source order of their definitions (containers before their members).

    >>> src = "import os\\n\\nclass A:\\n    x = 1\\n\\n    def f(self):\\n        return 1\\n"
    >>> [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunk_source("a.py", src)]
    [('A', 'class', 3, 4), ('A.f', 'method', 6, 7), ('', 'module', 1, 1)]
    """
    cfg = cfg or ChunkConfig()
    spec = get_language(language) if language else detect_language(path)
    lang_name = spec.name if spec else "text"
    b = _Builder(path, lang_name, _split_lines(text), cfg)
    if not b.lines:
        return []
    if spec is not None and spec.grammar and spec.splitter == "tree-sitter" and grammar_available(spec.grammar):
        src = text.encode("utf-8", "surrogatepass")
        tree = _parser(spec.grammar).parse(src)
        defs = _collect(tree.root_node, spec, src, [])
        b.emit_defs(defs)
        b.emit_gaps(defs, len(b.lines))
    elif spec is not None and spec.splitter == "declarations":
        _chunk_declarations(b, spec)
    elif spec is not None and spec.splitter == "headings":
        _chunk_headings(b)
    else:
        if spec is not None and spec.grammar and spec.splitter == "tree-sitter":
            log.warning("no tree-sitter grammar %r available; %s is cut into line windows", spec.grammar, path)
        _chunk_windows(b)
    return b.out


def split_chunk(chunk: Chunk, pieces: int, overlap_lines: int = 4) -> list[Chunk]:
    """Split a contiguous chunk into ``pieces`` overlapping line ranges (e.g. when it has more
    tokens than the model reads). Container chunks (with their members cut out) and one-line
    chunks are returned whole.

    >>> c = Chunk("a.py", "python", "f", "function", 10, 19, "\\n".join(str(i) for i in range(10)))
    >>> [(p.start_line, p.end_line, p.part) for p in split_chunk(c, 2, overlap_lines=2)]
    [(10, 16, 1), (15, 19, 2)]
    """
    lines = chunk.text.split("\n")
    if pieces <= 1 or len(lines) != chunk.n_lines or len(lines) < 2:
        return [chunk]
    pieces = min(pieces, len(lines))
    size = -(-len(lines) // pieces)  # ceil
    out: list[Chunk] = []
    start = 0
    base_part = (chunk.part - 1) * pieces if chunk.part else 0
    while start < len(lines):
        end = min(len(lines), start + size + overlap_lines)
        out.append(
            Chunk(chunk.path, chunk.language, chunk.symbol, chunk.kind, chunk.start_line + start,
                  chunk.start_line + end - 1, "\n".join(lines[start:end]), base_part + len(out) + 1)
        )
        if end >= len(lines):
            break
        start += size
    return out
