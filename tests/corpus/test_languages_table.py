"""The language table itself: file detection, grammars that load, rows that are consistent,
a chunker that stays language-agnostic, and the declaration splitter's edge cases."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import supergrep.corpus.chunk as chunk_module
from supergrep.corpus.chunk import _parser, chunk_source, grammar_available
from supergrep.corpus.languages import LANGUAGES, detect_language, get_language, language_names

SPLITTERS = {"tree-sitter", "declarations", "headings", "lines"}


@pytest.mark.parametrize(
    "path, language",
    [
        ("src/app.py", "python"), ("stubs/x.pyi", "python"),
        ("src/lib.rs", "rust"),
        ("web/app.js", "javascript"), ("web/app.mjs", "javascript"), ("web/App.jsx", "javascript"),
        ("web/app.ts", "typescript"), ("web/App.tsx", "tsx"),
        ("cmd/main.go", "go"),
        ("src/Main.java", "java"),
        ("lib/ring.c", "c"), ("include/ring.h", "c"),
        ("src/m.cpp", "cpp"), ("src/m.cc", "cpp"), ("include/m.hpp", "cpp"), ("kern/k.cu", "cpp"),
        ("App/View.swift", "swift"),
        ("App/Manager.m", "objc"), ("App/Bridge.mm", "objc"),
        ("lib/billing.rb", "ruby"), ("Gemfile", "ruby"), ("Rakefile", "ruby"),
        ("Mathlib/Queue.lean", "lean"),
        ("scripts/run.sh", "bash"), ("app/Main.kt", "kotlin"), ("App/Program.cs", "csharp"),
        ("web/index.php", "php"), ("src/App.scala", "scala"), ("nvim/init.lua", "lua"),
        ("db/schema.sql", "sql"), ("web/index.html", "html"), ("web/site.css", "css"), ("web/s.scss", "css"),
        ("README.md", "markdown"), ("conf.yaml", "text"), ("pyproject.toml", "text"), ("x.json", "text"),
        ("Makefile", "text"), ("Dockerfile", "text"), ("SRC/UPPER.PY", "python"),
    ],
)
def test_detect_language(path: str, language: str) -> None:
    spec = detect_language(path)
    assert spec is not None and spec.name == language


@pytest.mark.parametrize("path", ["photo.jpeg", "archive.tar.gz", "noext", "lib.so"])
def test_unknown_files(path: str) -> None:
    assert detect_language(path) is None


def test_each_extension_and_filename_has_one_row() -> None:
    seen: dict[str, str] = {}
    for spec in LANGUAGES:
        for key in (*spec.extensions, *spec.filenames):
            assert key.lower() not in seen, f"{key} claimed by {seen.get(key.lower())} and {spec.name}"
            seen[key.lower()] = spec.name
            assert key.startswith(".") or key in spec.filenames


def test_rows_are_consistent() -> None:
    names = [spec.name for spec in LANGUAGES]
    assert names == sorted(names) == language_names()
    for spec in LANGUAGES:
        assert get_language(spec.name) is spec
        assert spec.splitter in SPLITTERS, spec.name
        assert spec.extensions or spec.filenames, spec.name
        assert spec.containers <= set(spec.definitions), spec.name
        assert spec.namespaces <= spec.containers, spec.name
        assert not (spec.wrappers & set(spec.definitions)), spec.name
        if spec.splitter == "tree-sitter":
            assert spec.grammar, f"{spec.name}: the tree-sitter splitter needs a grammar"
        if spec.splitter == "declarations":
            assert spec.declaration_keywords, spec.name
        if spec.grammar is None:
            assert not spec.definitions, f"{spec.name}: definitions without a grammar are never used"


@pytest.mark.parametrize("spec", [s for s in LANGUAGES if s.grammar], ids=lambda s: s.name)
def test_grammar_loads(spec) -> None:
    assert grammar_available(spec.grammar)


# A tiny, valid program per grammar-backed row, and the definitions it must yield.
SAMPLES = {
    "bash": ("# Greets.\ngreet() {\n  echo hi\n}\nfunction bye { echo bye; }\n", ["greet", "bye"]),
    "c": ("int add(int a, int b) { return a + b; }\n", ["add"]),
    "cpp": ("namespace n {\nclass A {\n  public:\n    int f() { return 1; }\n};\n}\n", ["n", "n::A", "n::A::f"]),
    "csharp": (
        "namespace N {\n/// Doc.\n[Serializable]\npublic class A {\n    private int x;\n"
        "    public A() {}\n    public int M() => x;\n}\ninterface I { void F(); }\n}\n",
        ["A", "A.A", "A.M", "I"],
    ),
    "go": ("package p\n\nfunc F() {}\n", ["F"]),
    "java": ("class A { void f() {} }\n", ["A", "A.f"]),
    "javascript": ("export const f = () => 1;\nclass A { m() {} }\n", ["f", "A", "A.m"]),
    "kotlin": (
        "package x\n\nclass A(val x: Int) {\n    fun m(): Int { return x }\n}\n\nobject O {\n    fun o() { println(1) }\n}\n\n"
        "fun top(): Int { return 1 }\n",
        ["A", "A.m", "O", "O.o", "top"],
    ),
    "lua": ("-- Adds.\nlocal function add(a, b)\n  return a + b\nend\n\nfunction M.sub(a, b) return a - b end\n", ["add", "M.sub"]),
    "objc": ("@implementation A\n- (void)run:(int)n {}\n@end\n", ["A", "A.run:"]),
    "php": (
        "<?php\nnamespace App;\n\n/** Doc. */\nfunction top() {}\n\n#[Attr]\nclass A extends B {\n    private $x;\n"
        "    public function m() { return 1; }\n}\n\ninterface I { function i(); }\ntrait T { function t() {} }\n",
        ["top", "A", "A::m", "I", "T", "T::t"],
    ),
    "python": ("@dec\ndef f():\n    pass\n", ["f"]),
    "ruby": ("module M\n  class C\n    def m; end\n  end\nend\n", ["M", "M::C", "M::C.m"]),
    "rust": ("impl S {\n    fn m(&self) {}\n}\n", ["S", "S::m"]),
    "scala": (
        "package x\n\n/** Doc. */\nclass A(x: Int) extends B {\n  def m(): Int = 1\n}\n\nobject O { def o() = 1 }\n"
        "trait T { def t(): Int }\n",
        ["A", "A.m", "O", "O.o", "T"],
    ),
    "swift": ("struct S {\n    func m() {}\n}\n", ["S", "S.m"]),
    "tsx": ("export const C = () => <div />;\n", ["C"]),
    "typescript": ("interface I { a: string }\nexport function f(): void {}\n", ["I", "f"]),
}


def test_every_grammar_row_has_a_sample() -> None:
    assert set(SAMPLES) == {s.name for s in LANGUAGES if s.grammar}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_parses_and_chunks(name: str) -> None:
    spec = get_language(name)
    src, symbols = SAMPLES[name]
    tree = _parser(spec.grammar).parse(src.encode())
    assert not tree.root_node.has_error, f"{name}: the sample does not parse cleanly"
    chunks = chunk_source(f"sample{spec.extensions[0]}", src)
    assert [c.symbol for c in chunks if c.symbol] == symbols
    assert {c.language for c in chunks} == {name}


def test_chunker_names_no_language() -> None:
    """Per-language knowledge lives in the table: no string in the chunker's code (docstrings
    aside) is a language name."""
    tree = ast.parse(Path(chunk_module.__file__).read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    strings = {
        n.value.lower() for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    }
    identifiers = {n.id.lower() for n in ast.walk(tree) if isinstance(n, ast.Name)}
    identifiers |= {n.attr.lower() for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    identifiers = {i for i in identifiers if len(i) > 2}  # ``c`` is a fine loop variable
    for name in language_names():
        if name == "text":  # also the generic name of the fallback
            continue
        assert name not in strings and name not in identifiers, name


def test_parse_budget_falls_back_to_windows(monkeypatch) -> None:
    monkeypatch.setattr(chunk_module, "_PARSE_BUDGET", (-1.0, 0.0))
    src = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(30))
    chunks = chunk_source("a.py", src)
    assert {c.kind for c in chunks} == {"window"}
    monkeypatch.undo()
    assert chunk_source("a.py", src)[0].symbol == "f0"  # the parser recovers after a cancel


# --- the declarations splitter (rows without an offline grammar) ----------------------------


def lean(src: str) -> list[tuple[str, str, int, int]]:
    return [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunk_source("a.lean", src)]


def test_declarations_comment_is_not_a_declaration() -> None:
    src = "/-\ntheorem inside_a_comment : True\n-/\ndef a := 1\n"
    assert lean(src) == [("a", "def", 1, 4)]


def test_declarations_bare_end_closes_only_an_unnamed_scope() -> None:
    """``end`` alone closes an unnamed section; in a named namespace it is ordinary code (a Lean 3
    ``begin ... end`` proof), so names stay qualified."""
    src = (
        "namespace N\n\ntheorem t : true :=\nbegin\n  trivial\nend\n\ndef d := 1\n\nend N\n\n"
        "section\ndef e := 2\nend\n\ndef f := 3\n"
    )
    assert lean(src) == [
        ("", "module", 1, 1),
        ("N.t", "theorem", 3, 6),
        ("N.d", "def", 8, 8),
        ("", "module", 10, 12),
        ("e", "def", 13, 13),
        ("", "module", 14, 14),
        ("f", "def", 16, 16),
    ]


def test_declarations_attributes_and_modifiers() -> None:
    src = "@[simp] protected theorem a : True := trivial\n@[inline]\nprivate def b := 1\nclass inductive C\n  | x\n"
    assert lean(src) == [("a", "theorem", 1, 1), ("b", "def", 2, 3), ("C", "class inductive", 4, 5)]


def test_declarations_without_any_declaration_use_windows() -> None:
    src = "import Mathlib\n\nopen Nat\n"
    assert {c.kind for c in chunk_source("a.lean", src)} == {"window"}
