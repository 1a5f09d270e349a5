"""Cut a file into searchable chunks: one per definition, with tree-sitter.

Rules (every language, driven by its row in ``languages.py``):

- One chunk per function/method/class-like definition, with its qualified name and its
  1-based inclusive line span: wrappers (decorators, ``export``, ``template<>``) included, and,
  where the row lists them as ``leading``, the comments and attributes directly above it (no
  blank line between). A one-line container keeps its line even when a member shares it.
- A container (class, impl, interface, ...) chunk keeps its header and fields; each nested
  definition is a chunk of its own and is left out of the container's text.
- Code between definitions (imports, constants, ``if __name__ == ...``) is kept as "module"
  chunks, one per stretch between two definitions (blank edges trimmed).
- Lines are counted as tree-sitter counts rows (on ``\\n``); a CRLF file's ``\\r`` is dropped
  from chunk text.
- Anything longer than ``max_chunk_lines`` is split into overlapping pieces (``part`` 1, 2, ...).
- Files without a grammar, and prose, are cut into line windows (prose with ``#`` headings by section);
  languages whose grammar does not ship offline use a declaration-aware line splitter.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from supergrep.config import ChunkConfig
from supergrep.corpus.languages import LanguageSpec, detect_language, field_name, get_language
from supergrep.corpus.types import Chunk

log = logging.getLogger(__name__)

# Deeper than this, a syntax tree is generated code; definitions are not searched for below it
# (and the interpreter's recursion limit stays far away).
_MAX_DEPTH = 120
# Seconds a parse may take: (base, per MiB of source). Past it the file is cut into windows.
_PARSE_BUDGET = (0.5, 5.0)


@dataclass
class _Def:
    start: int  # 0-based first row, inclusive (leading comments and wrappers included)
    end: int  # 0-based last row, inclusive
    head: int  # 0-based row where the definition node itself starts (kept in a container's text)
    symbol: str
    kind: str
    children: list[_Def] = field(default_factory=list)


@functools.cache
def _parser(grammar: str) -> Any:
    from tree_sitter_language_pack import get_parser

    return get_parser(grammar)


def _parse(grammar: str, src: bytes) -> Any | None:
    """Parse, or None when the parser runs past its time budget. Error recovery on input a
    grammar does not expect can go superlinear (a 100 KB line took one grammar 40 s), so the
    budget is about twenty times a normal parse: half a second plus 5 s per MiB."""
    parser = _parser(grammar)
    base_s, per_mib_s = _PARSE_BUDGET
    deadline = time.monotonic() + base_s + per_mib_s * len(src) / 2**20

    def over_budget(_offset: int, _has_error: bool) -> bool:
        return time.monotonic() > deadline

    try:
        return parser.parse(lambda byte, _point: src[byte : byte + 65536], progress_callback=over_budget)
    except ValueError:  # cancelled by the callback
        parser.reset()
        return None


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


def _qualify(spec: LanguageSpec, scope: list[str], name: str, kind: str) -> str:
    if not scope:
        return name
    sep = spec.scope_separator
    if spec.member_separator and kind in ("function", "method"):
        sep = spec.member_separator
    return spec.scope_separator.join(scope) + sep + name


def _collect(
    node: Any,
    spec: LanguageSpec,
    src: bytes,
    scope: list[str],
    in_type: bool = False,
    floor: int = -1,
    lead: tuple[int, int] | None = None,
    depth: int = 0,
) -> list[_Def]:
    """Definitions among ``node``'s descendants, outermost first, in source order.

    ``in_type``: the nearest enclosing container is a type (its functions are methods), not a
    namespace. ``floor``: the last row of what precedes ``node``'s children (the previous
    sibling, or the container's header); a leading comment must start below it, so that one
    trailing a definition on its last line, or on the line that opens a block, is not glued.
    ``lead``: a run of leading comments just before ``node`` (first and last row), for
    grammars that put a member's doc comment outside the body node that holds the member."""
    if depth > _MAX_DEPTH:
        return []
    defs: list[_Def] = []
    lead_start, lead_end = lead if lead is not None else (None, -2)  # a run of leading comments
    prev_end = floor
    for child in node.named_children:
        inner = _unwrap(child, spec)
        name = None
        if inner is not None:
            name = (spec.name_of or field_name)(inner, src)
        if inner is not None and name:
            start = child.start_point.row
            if lead_start is not None and lead_end + 1 >= start:
                start = lead_start
            kind = (spec.kind_of(inner, src) if spec.kind_of else None) or spec.definitions[inner.type]
            if kind == "function" and in_type:
                kind = "method"
            d = _Def(start, _last_row(child), inner.start_point.row, _qualify(spec, scope, name, kind), kind)
            if inner.type in spec.containers:
                in_type_inside = inner.type not in spec.namespaces
                d.children = _collect(
                    inner, spec, src, [*scope, name], in_type=in_type_inside, floor=d.head, depth=depth + 1
                )
            defs.append(d)
            lead_start = None
            prev_end = d.end
        elif child.type in spec.leading and child.start_point.row > prev_end:
            if lead_start is None or child.start_point.row > lead_end + 1:
                lead_start = child.start_point.row
            lead_end = _last_row(child)
        else:
            if child.named_child_count:  # leaves (most of a big literal) hold no definitions
                run = (lead_start, lead_end) if lead_start is not None else None
                defs.extend(
                    _collect(child, spec, src, scope, in_type=in_type, floor=prev_end, lead=run, depth=depth + 1)
                )
            lead_start = None
            prev_end = max(prev_end, _last_row(child))
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
        self.rows_taken: set[int] = set()  # rows in some definition chunk
        self.rows_taken_plain: set[int] = set()  # rows in some definition chunk that is not a container

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
        """Definitions, containers before their members. Minified code puts many definitions on
        one line: a line goes to at most one container chunk and one other chunk (the first
        definition on it), never to each definition that touches it."""
        for d in defs:
            rows = list(range(d.start, d.end + 1))
            taken = self.rows_taken_plain
            if d.children:
                covered: set[int] = set()
                for c in d.children:
                    covered.update(range(c.start, c.end + 1))
                covered.discard(d.head)  # a one-line container keeps its header
                rows = [r for r in rows if r not in covered]
                taken = self.rows_taken
            first = 0
            while first < len(rows) and rows[first] in taken:
                first += 1
            rows = rows[first:]
            self.rows_taken.update(rows)
            if not d.children:
                self.rows_taken_plain.update(rows)
            self.emit(rows, d.symbol, d.kind)
            self.emit_defs(d.children)

    def emit_gaps(self, defs: list[_Def], n_rows: int) -> None:
        covered: set[int] = set()
        for d in defs:
            covered.update(range(d.start, d.end + 1))
        free = [r for r in range(n_rows) if r not in covered]
        for run in _runs(free):
            self.emit(run, "", "module")


def _split_lines(text: str) -> list[str]:
    """Lines as tree-sitter counts rows: split on '\\n' only, no phantom last line, and the
    '\\r' of CRLF line ends dropped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _chunk_headings(b: _Builder) -> None:
    """Prose with ``#`` headings: one chunk per section, named by its heading path ("Install > From source")."""
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


def _words(words: Any) -> str:
    """A regex alternation of literal words, longest first (``class inductive`` before ``class``)."""
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


def _comment_rows(lines: list[str], spec: LanguageSpec) -> list[bool]:
    """Which lines are wholly comment: line comments, and block comments opened at a line's start."""
    out = [False] * len(lines)
    opener, closer = spec.block_comment or ("", "")
    depth = 0
    for i, line in enumerate(lines):
        s = line.strip()
        if depth > 0 or (opener and s.startswith(opener)):
            out[i] = True
            depth = max(0, depth + s.count(opener) - s.count(closer))
        elif spec.line_comment and s.startswith(spec.line_comment):
            out[i] = True
    return out


def _chunk_declarations(b: _Builder, spec: LanguageSpec) -> None:
    """Line-based splitter for languages without an offline grammar (row fields ``declaration_*``).

    A declaration starts at a line that begins, after the row's ``declaration_prefix``
    (attributes, modifiers), with a declaration keyword, and takes in the comment and attribute
    lines directly above it. It runs until the next declaration, or a scope line
    (``namespace X``, ``end X``) or break line (``open``, ``import``) at column 0, which start
    "module" code. Names are qualified by the enclosing named scopes."""
    never = r"(?!)"
    decl = re.compile(
        rf"^\s*{spec.declaration_prefix}({_words(spec.declaration_keywords) or never})(?![\w'!?.])"
        r"(?:\s+([^\s:(){}\[\]]+))?"
    )
    breaks = re.compile(rf"^(?:{_words(spec.declaration_breaks) or never})(?![\w'])")
    opens = re.compile(rf"^({_words(spec.scope_keywords) or never})(?:\s+(\S+))?\s*$")
    closes = re.compile(rf"^{re.escape(spec.scope_end) if spec.scope_end else never}(?:\s+(\S+))?\s*$")
    leading = re.compile(spec.leading_lines or never)
    comment = _comment_rows(b.lines, spec)
    marks: list[tuple[int, str, str]] = []  # (first row, symbol, kind); each runs to the next
    scopes: list[tuple[str, bool]] = []  # (name, qualifies names)
    found = False

    def module_at(row: int) -> None:
        if not marks:
            marks.append((0, "", "module"))  # everything above the first command too
        elif marks[-1][2] != "module":
            marks.append((row, "", "module"))

    for i, line in enumerate(b.lines):
        if comment[i] or not line.strip():
            continue
        m = decl.match(line)
        if m:
            start = i
            floor = marks[-1][0] if marks else -1
            while start - 1 > floor and b.lines[start - 1].strip() and (
                comment[start - 1] or leading.match(b.lines[start - 1])
            ):
                start -= 1
            name = m.group(2) or ""
            prefix = spec.scope_separator.join(n for n, qualifies in scopes if qualifies and n)
            symbol = f"{prefix}{spec.scope_separator}{name}" if prefix and name else name
            marks.append((start, symbol, m.group(1)))
            found = True
            continue
        if line[:1].isspace():
            continue
        m = opens.match(line)
        if m:
            scopes.append((m.group(2) or "", spec.scope_keywords[m.group(1)]))
            module_at(i)
            continue
        m = closes.match(line)
        if m and scopes and (m.group(1) or "") == scopes[-1][0]:
            scopes.pop()
            module_at(i)
            continue
        if breaks.match(line):
            module_at(i)
    if not found:
        _chunk_windows(b)
        return
    if marks[0][0] > 0:
        marks.insert(0, (0, "", "module"))
    for (s, name, kind), nxt in zip(marks, [*marks[1:], (len(b.lines), "", "")]):
        b.emit(list(range(s, nxt[0])), name, kind)


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
        tree = _parse(spec.grammar, src)
        if tree is None:
            log.warning("parsing %s took too long; it is cut into line windows", path)
            _chunk_windows(b)
        else:
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
