"""The chunker on hostile input: broken syntax, CRLF, deep nesting, empty and odd files.

Whatever the input, chunks stay inside the file, in order, and the definitions that are not
containers never share a line (split pieces excepted, which overlap by design).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from supergrep.config import ChunkConfig
from supergrep.corpus.chunk import chunk_source
from supergrep.corpus.languages import LANGUAGES
from supergrep.corpus.types import Chunk

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file())
# One path per language row, so every splitter and grammar meets the odd inputs.
ROW_PATHS = [f"sample{spec.extensions[0]}" if spec.extensions else spec.filenames[0] for spec in LANGUAGES]


def n_lines(text: str) -> int:
    return len(text[:-1].split("\n")) if text.endswith("\n") else len(text.split("\n"))


def is_container(c: Chunk, chunks: list[Chunk]) -> bool:
    """A chunk whose symbol qualifies another chunk's (``Cart`` for ``Cart.add``)."""
    return bool(c.symbol) and any(
        o.symbol != c.symbol and o.symbol.startswith(c.symbol) and o.symbol[len(c.symbol)] in ".:" for o in chunks
    )


def check_invariants(chunks: list[Chunk], text: str) -> None:
    total = n_lines(text)
    lines = [line.rstrip("\r") for line in text.split("\n")]
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= total, c
        assert "\r" not in c.text
        assert c.text.strip(), c
        pieces = c.text.split("\n")
        if len(pieces) == c.n_lines:  # a contiguous chunk: its text is exactly its lines
            assert pieces == lines[c.start_line - 1 : c.end_line], c
        else:  # a container with its members cut out: fewer lines, all from its span
            assert len(pieces) < c.n_lines and pieces[0] == lines[c.start_line - 1], c
    plain = sorted((c for c in chunks if not is_container(c, chunks)), key=lambda c: (c.start_line, c.part))
    for a, b in zip(plain, plain[1:]):
        if a.symbol == b.symbol and a.kind == b.kind and a.part and b.part == a.part + 1:
            assert b.start_line <= a.end_line + 1, (a, b)  # pieces of one split definition
        else:
            assert a.end_line < b.start_line, (a, b)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("max_lines", [200, 7])
def test_fixture_invariants(path: Path, max_lines: int) -> None:
    """Spans stay in 1..n, start <= end, text matches the file; also when definitions split."""
    text = path.read_text(encoding="utf-8")
    chunks = chunk_source(path.name, text, cfg=ChunkConfig(max_chunk_lines=max_lines, overlap_lines=2))
    assert chunks
    check_invariants(chunks, text)
    if max_lines == 7:
        for c in chunks:
            assert len(c.text.split("\n")) <= 7


def test_split_pieces_overlap_and_cover() -> None:
    src = "def big():\n" + "".join(f"    x{i} = {i}\n" for i in range(30))
    chunks = chunk_source("big.py", src, cfg=ChunkConfig(max_chunk_lines=10, overlap_lines=3))
    spans = [(c.start_line, c.end_line, c.part) for c in chunks]
    assert spans == [(1, 10, 1), (8, 17, 2), (15, 24, 3), (22, 31, 4)]
    assert {c.symbol for c in chunks} == {"big"}


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_crlf_same_spans_without_cr(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    crlf = text.replace("\n", "\r\n")
    lf_chunks = chunk_source(path.name, text)
    crlf_chunks = chunk_source(path.name, crlf)
    assert [(c.symbol, c.kind, c.start_line, c.end_line, c.text) for c in crlf_chunks] == [
        (c.symbol, c.kind, c.start_line, c.end_line, c.text) for c in lf_chunks
    ]
    check_invariants(crlf_chunks, crlf)


BROKEN = {
    "broken.py": "import os\n\ndef ok():\n    return 1\n\ndef broken(:\n    return (\n\nclass C:\n    def m(self):\n        pass\n",
    "broken.rs": "fn ok() -> u32 { 1 }\n\nfn broken( {\n    let x = ;\n\nimpl S {\n    fn m(&self) {}\n}\n",
    "broken.js": "function ok() { return 1; }\n\nfunction broken( {\n  return [;\n}\n\nclass C { m() {} }\n",
    "broken.go": "package p\n\nfunc ok() int { return 1 }\n\nfunc broken( {\n\nfunc (s *S) M() {}\n",
    "broken.c": "int ok(void) { return 1; }\n\nint broken( { return\n\nstruct s { int a; };\n",
    "broken.java": "class A {\n  int ok() { return 1; }\n  void broken( {\n}\n",
    "broken.rb": "def ok\n  1\nend\n\ndef broken(\n\nclass C\n  def m; end\nend\n",
    "broken.swift": "func ok() -> Int { 1 }\n\nfunc broken( {\n\nstruct S { func m() {} }\n",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_syntax_errors_still_chunk(name: str) -> None:
    text = BROKEN[name]
    chunks = chunk_source(name, text)
    assert chunks
    symbols = {c.symbol for c in chunks}
    assert "ok" in symbols or "A.ok" in symbols, symbols
    check_invariants(chunks, text)
    # Every non-blank line is somewhere: nothing is dropped because it did not parse.
    covered = {r for c in chunks for r in range(c.start_line, c.end_line + 1)}
    assert all(i + 1 in covered for i, line in enumerate(text.split("\n")) if line.strip())


@pytest.mark.parametrize(
    "name, opener, closer",
    [("deep.py", "(", ")"), ("deep.js", "(", ")"), ("deep.rs", "(", ")"), ("deep.c", "(", ")"),
     ("deep.rb", "[", "]"), ("deep.cpp", "{", "}"), ("deep.lean", "(", ")")],
)
def test_deep_nesting(name: str, opener: str, closer: str) -> None:
    expr = opener * 5000 + "1" + closer * 5000
    for text in (f"x = {expr}\n", f"x = {opener * 5000}\n"):  # balanced, and never closed
        t = time.perf_counter()
        chunks = chunk_source(name, text)
        assert time.perf_counter() - t < 2.0
        assert chunks and chunks[0].start_line == 1
        check_invariants(chunks, text)


@pytest.mark.parametrize("path", ROW_PATHS)
def test_empty_and_blank_files(path: str) -> None:
    for text in ("", "\n", "\n\n\n", "   \n\t\n  ", "\r\n\r\n"):
        assert chunk_source(path, text) == []


@pytest.mark.parametrize("path", ROW_PATHS)
def test_replacement_characters(path: str) -> None:
    """Undecodable bytes arrive as U+FFFD (the walker decodes with errors="replace")."""
    text = "a\ufffd = 1\n\ndef f\ufffd():\n    return '\ufffd\ufffd'\n\nfunction g() { return '\ufffd'; }\n"
    chunks = chunk_source(path, text)
    assert chunks
    check_invariants(chunks, text)
    assert "\ufffd" in "".join(c.text for c in chunks)


@pytest.mark.parametrize("path", ROW_PATHS)
def test_very_long_line(path: str) -> None:
    text = "x = [" + ", ".join(str(i) for i in range(8000)) + "]\n"  # ~47 KB
    chunks = chunk_source(path, text)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1)]
    assert chunks[0].text == text.rstrip("\n")


def test_no_final_newline_and_lone_cr() -> None:
    chunks = chunk_source("a.rs", "fn a() {}\r\n\r\nfn b() {}")
    assert [(c.symbol, c.start_line, c.end_line, c.text) for c in chunks] == [
        ("a", 1, 1, "fn a() {}"), ("b", 3, 3, "fn b() {}")
    ]


def test_one_line_container_keeps_its_line() -> None:
    chunks = chunk_source("a.cpp", "struct P { int x; int sum() { return x; } };\n")
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks] == [
        ("P", "struct", 1, 1), ("P::sum", "method", 1, 1)
    ]


def test_trailing_comment_is_not_leading() -> None:
    """A comment after a definition on its last line does not pull the next one up."""
    src = "fn a() {} // about a\nfn b() {}\n\n// about c\nfn c() {}\n"
    chunks = chunk_source("a.rs", src)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [("a", 1, 1), ("b", 2, 2), ("c", 4, 5)]


def test_comment_separated_by_blank_line_is_module_code() -> None:
    src = "// License header\n\n/// Doc\nfn a() {}\n"
    chunks = chunk_source("a.rs", src)
    assert [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks] == [
        ("a", "function", 3, 4), ("", "module", 1, 1)
    ]


def test_doc_comment_outside_the_body_node() -> None:
    """Some grammars put a class's first comment beside its body node, not in it."""
    src = "class Foo\n  # Doc for bar.\n  def bar\n  end\nend\n"
    chunks = chunk_source("a.rb", src)
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [("Foo", 1, 5), ("Foo.bar", 2, 4)]
    assert chunks[0].text == "class Foo\nend"
