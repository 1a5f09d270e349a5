"""`supergrep mine`: (docstring -> code) pairs per language, query cleaning, every filter,
the split, atomic output, the command line and malformed input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_runner import run_main
from supergrep.corpus import mine as mine_module
from supergrep.corpus.docstrings import clean_docstring, comment_text
from supergrep.corpus.mine import DEFAULT_EXCLUDED_PACKAGES, MineConfig, mine, package_name

FIXTURES = Path(__file__).parent / "fixtures"


def _check_no_leak(records: list[dict]) -> None:
    """The rule the previous tool broke: a pair's code never contains its own query."""
    for r in records:
        q = " ".join(r["query"].lower().split()).rstrip(".")
        assert q and q not in " ".join(r["code"].lower().split()), r


def run_mine(tmp_path: Path, files: dict[str, str | bytes], roots: list[str] | None = None, **settings):
    """Write ``files`` under tmp/src, mine it (one process unless ``jobs`` is given), return
    (records, stats)."""
    base = tmp_path / "src"
    for rel, content in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    settings.setdefault("jobs", 1)
    out = tmp_path / "pairs.jsonl"
    stats = mine([base / r for r in roots] if roots else [base], out, MineConfig(**settings))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    _check_no_leak(records)
    return records, stats


def one(records: list[dict], symbol: str) -> dict:
    found = [r for r in records if r["symbol"] == symbol]
    assert len(found) == 1, (symbol, [r["symbol"] for r in records])
    return found[0]


# --- extraction per language -----------------------------------------------------------------

PY = '''"""Module docs are not a pair."""

import functools


@functools.lru_cache(maxsize=None)
def fetch_rows(conn, table, limit=10):
    """Fetch the first rows of a table as dictionaries.

    Args:
        conn: an open connection
        table: the table name

    Returns:
        A list of dicts.
    """

    cur = conn.execute(f"SELECT * FROM {table} LIMIT ?", (limit,))
    return [dict(row) for row in cur.fetchall()]


class RowCache:
    # a comment before the docstring is allowed
    """Keeps recently fetched rows in memory, keyed by table name."""

    max_tables = 8

    def evict(self, table):
        r\'\'\'Forget every cached row of one table, if present.\'\'\'
        self._rows.pop(table, None)
        self._hits.pop(table, None)

    def undocumented(self):
        return self._rows
'''


def test_python_docstring_is_removed_and_signature_kept(tmp_path):
    records, stats = run_mine(tmp_path, {"db.py": PY}, val_fraction=0.0)
    assert {r["symbol"] for r in records} == {"fetch_rows", "RowCache", "RowCache.evict"}
    f = one(records, "fetch_rows")
    assert f["query"] == "Fetch the first rows of a table as dictionaries."
    assert f["docstring"].startswith("Fetch the first rows") and "Args:" in f["docstring"]
    assert f["code"].splitlines() == [
        "@functools.lru_cache(maxsize=None)",
        "def fetch_rows(conn, table, limit=10):",
        '    cur = conn.execute(f"SELECT * FROM {table} LIMIT ?", (limit,))',
        "    return [dict(row) for row in cur.fetchall()]",
    ]
    assert (f["language"], f["kind"], f["start_line"], f["end_line"]) == ("python", "function", 6, 19)
    assert (f["repo"], f["path"], f["split"]) == ("db", "db.py", "train")
    assert f["doc_words"] == 9 and f["code_lines"] == 4
    cls = one(records, "RowCache")
    assert "Keeps recently" not in cls["code"] and "max_tables = 8" in cls["code"]
    assert "def evict" not in cls["code"]  # members are pairs of their own
    assert one(records, "RowCache.evict")["code"].startswith("    def evict(self, table):\n        self._rows")
    assert stats.dropped["no docstring"] == 1  # undocumented()


def test_rust_outer_doc_comments_only(tmp_path):
    src = (
        "//! Crate docs are not a pair.\n\n"
        "/// Adds two numbers, wrapping on overflow.\n///\n/// # Examples\n/// ```\n/// assert_eq!(add(1, 2), 3);\n/// ```\n"
        "#[inline]\npub fn add(a: u32, b: u32) -> u32 {\n    a.wrapping_add(b)\n}\n\n"
        "// A plain comment is not documentation.\nfn helper(x: u32) -> u32 {\n    x * 2 + 1\n}\n\n"
        "pub struct Meter(u32);\n\nimpl Meter {\n"
        "    /** Returns the [`Meter`] value in whole centimetres. */\n"
        "    pub fn centimetres(&self) -> u32 {\n        self.0 * 100\n    }\n}\n"
    )
    records, _ = run_mine(tmp_path, {"lib.rs": src})
    assert {r["symbol"] for r in records} == {"add", "Meter::centimetres"}
    add = one(records, "add")
    assert add["query"] == "Adds two numbers, wrapping on overflow."
    assert add["code"] == "#[inline]\npub fn add(a: u32, b: u32) -> u32 {\n    a.wrapping_add(b)\n}"
    assert "# Examples" in add["docstring"]
    cm = one(records, "Meter::centimetres")
    assert cm["query"] == "Returns the Meter value in whole centimetres." and "/**" not in cm["code"]


def test_go_comment_runs_and_directives(tmp_path):
    src = (
        "package sum\n\n"
        "// Sum adds up the values in xs\n// and returns the total.\n//go:noinline\n"
        "func Sum(xs []int) int {\n\tt := 0\n\tfor _, x := range xs {\n\t\tt += x\n\t}\n\treturn t\n}\n"
    )
    records, _ = run_mine(tmp_path, {"sum.go": src})
    r = one(records, "Sum")
    assert r["query"] == "Sum adds up the values in xs and returns the total."
    assert r["code"].startswith("//go:noinline\nfunc Sum(xs []int) int {")  # a directive is code


def test_java_javadoc(tmp_path):
    src = (
        "package lib;\n\npublic class Shelf {\n"
        "    /**\n     * Finds a book by its ISBN, see {@link Catalog#lookup(String) the catalog}.\n"
        "     * <p>Slow for large shelves.\n     *\n     * @param isbn the ISBN-13\n     * @return the book, or null\n     */\n"
        "    @Deprecated\n    public Book find(String isbn) {\n        return catalog.lookup(isbn);\n    }\n}\n"
    )
    records, _ = run_mine(tmp_path, {"Shelf.java": src})
    r = one(records, "Shelf.find")
    assert r["query"] == "Finds a book by its ISBN, see the catalog."
    assert r["code"] == "    @Deprecated\n    public Book find(String isbn) {\n        return catalog.lookup(isbn);\n    }"
    assert "@param isbn the ISBN-13" in r["docstring"]


def test_typescript_and_javascript_jsdoc(tmp_path):
    ts = (
        "/**\n * Formats a duration in milliseconds as `1h 2m 3s`.\n * @param ms - the duration\n */\n"
        "export function formatDuration(ms: number): string {\n  const s = Math.floor(ms / 1000);\n"
        "  return `${Math.floor(s / 3600)}h ${Math.floor(s / 60) % 60}m ${s % 60}s`;\n}\n\n"
        "export class Timer {\n  /** Starts the timer unless it is running already. */\n"
        "  start(): void {\n    if (this.t0 === undefined) this.t0 = Date.now();\n  }\n}\n"
    )
    js = "/** Doubles every number in the list. */\nconst doubleAll = (xs) => {\n  return xs.map((x) => x * 2);\n};\n"
    records, _ = run_mine(tmp_path, {"time.ts": ts, "double.js": js})
    f = one(records, "formatDuration")
    assert f["query"] == "Formats a duration in milliseconds as 1h 2m 3s." and f["language"] == "typescript"
    assert f["code"].startswith("export function formatDuration(ms: number): string {")
    assert one(records, "Timer.start")["query"] == "Starts the timer unless it is running already."
    assert one(records, "doubleAll")["language"] == "javascript"


def test_swift_triple_slash(tmp_path):
    src = (
        "struct Deck {\n    var cards: [Card]\n\n"
        "    /// Shuffles the deck in place.\n    ///\n    /// - Parameter rng: the random source\n"
        "    mutating func shuffle(using rng: inout some RandomNumberGenerator) {\n"
        "        cards.shuffle(using: &rng)\n    }\n}\n"
    )
    records, _ = run_mine(tmp_path, {"Deck.swift": src})
    r = one(records, "Deck.shuffle")
    assert r["query"] == "Shuffles the deck in place." and "///" not in r["code"]
    assert r["code"].lstrip().startswith("mutating func shuffle")


def test_c_and_cpp_block_comments(tmp_path):
    c = (
        "#include <stddef.h>\n\n"
        "/**\n * rb_used - number of bytes waiting to be read\n * @rb: the ring buffer\n */\n"
        "size_t rb_used(const struct ringbuf *rb)\n{\n\treturn (rb->tail - rb->head) % rb->capacity;\n}\n"
    )
    header = (
        "#pragma once\nnamespace geo {\n\n/** A 2-D vector with double components. */\n"
        "class Vec2 {\npublic:\n    double x = 0.0;\n    double y = 0.0;\n\n"
        "    /// Returns the dot product with another vector.\n"
        "    double dot(const Vec2& o) const {\n        return x * o.x + y * o.y;\n    }\n};\n\n}  // namespace geo\n"
    )
    records, _ = run_mine(tmp_path, {"ring.c": c, "vec2.h": header})
    r = one(records, "rb_used")
    assert r["query"] == "number of bytes waiting to be read" and r["language"] == "c"  # kernel-doc name dropped
    assert r["code"].startswith("size_t rb_used(")
    dot = one(records, "geo::Vec2::dot")  # a C++ header ending in .h is parsed as C++
    assert dot["language"] == "cpp" and dot["query"] == "Returns the dot product with another vector."
    assert one(records, "geo::Vec2")["query"] == "A 2-D vector with double components."


def test_lean_doc_comments(tmp_path):
    src = (
        "/-! Module docs are not a pair. -/\nnamespace Q\n\n"
        "/-- Appends an element at the back of the queue. -/\n@[inline]\n"
        "def push (x : α) (q : List α) : List α :=\n  q ++ [x]\n\n"
        "-- not a doc comment\ndef pop (q : List α) : List α :=\n  q.drop 1\n\nend Q\n"
    )
    records, _ = run_mine(tmp_path, {"Queue.lean": src})
    assert [r["symbol"] for r in records] == ["Q.push"]
    r = records[0]
    assert r["query"] == "Appends an element at the back of the queue."
    assert r["code"] == "@[inline]\ndef push (x : α) (q : List α) : List α :=\n  q ++ [x]"


def test_the_nearest_doc_comment_wins(tmp_path):
    """Directives between a doc comment and its definition are code; a plain comment or a
    bundle's #region marker ends the documentation, and what is above it is not code."""
    js = (
        "/** Options of the other function, not this one. */\n//#endregion\n//#region dist/week.js\n"
        "function getWeek(date) {\n  const d = toDate(date);\n  return Math.ceil(d.getDate() / 7);\n}\n\n"
        "/** Returns the number of days in the given month. */\n// eslint-disable-next-line no-magic-numbers\n"
        "function daysInMonth(y, m) {\n  const last = new Date(y, m + 1, 0);\n  return last.getDate();\n}\n"
    )
    records, stats = run_mine(tmp_path, {"bundle.js": js})
    assert [r["symbol"] for r in records] == ["daysInMonth"]
    assert records[0]["code"].startswith("// eslint-disable-next-line no-magic-numbers\nfunction daysInMonth")
    assert stats.dropped["no docstring"] == 1


def test_empty_bodies_are_short_code(tmp_path):
    java = (
        "public class Shelf {\n    /** Creates an empty shelf with no books at all. */\n    public Shelf() {\n    }\n\n"
        "    /** Counts the books on this shelf right now. */\n    public int count() {\n        return books == null ? 0 : books.size();\n    }\n}\n"
    )
    records, stats = run_mine(tmp_path, {"Shelf.java": java})
    assert [r["symbol"] for r in records] == ["Shelf.count"] and stats.dropped["short code"] == 1


def test_chunker_fixtures_never_leak_their_docs(tmp_path):
    """Every language fixture of the chunker: pairs come out, none holds its own query."""
    out = tmp_path / "pairs.jsonl"
    stats = mine([FIXTURES], out, MineConfig(jobs=1, min_code_lines=1, min_code_chars=0))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    _check_no_leak(records)
    assert {"c", "cpp", "go", "java", "javascript", "lean", "objc", "python", "ruby", "rust", "swift",
            "typescript"} <= set(stats.by_language)


# --- query cleaning ----------------------------------------------------------------------------


@pytest.mark.parametrize("raw, summary", [
    ("Fetch rows.\n\nArgs:\n    n: how many", "Fetch rows."),
    ("Fetch rows from the table\nArgs:\n    n: how many", "Fetch rows from the table"),
    ("Parse a date string.\n:param s: the text\n:returns: a date", "Parse a date string."),
    ("Compute the mean.\n\nParameters\n----------\nx : array", "Compute the mean."),
    ("Returns the {@code size} of the {@link java.util.List list}.\n@throws X never", "Returns the size of the list."),
    ("See {@link Foo#bar(int)} for details on frobbing things", "See Foo.bar for details on frobbing things"),
    ("Creates a `Vec` from a [`slice`] (see [the docs](https://x.y)).", "Creates a Vec from a slice (see the docs)."),
    ("Return the :class:`~pkg.mod.Frame` for ``name``.", "Return the Frame for name."),
    ("Shuffles the deck.\n- Parameter rng: the source\n- Returns: nothing", "Shuffles the deck."),
    ("@brief Opens the device\n\\param fd the descriptor", "Opens the device"),
    ("Escapes <b>HTML</b> &amp; quotes in a List<String>.", "Escapes HTML & quotes in a List<String>."),
    ("  Collapses   all\n   the\twhitespace  ", "Collapses all the whitespace"),
    ("Emits a **bold** and *emphasised* word here.", "Emits a bold and emphasised word here."),
    ("Adds one.\n\n# Panics\nNever.", "Adds one."),
    ("Sort in place.\n>>> sort([2, 1])\n[1, 2]", "Sort in place."),
    ("connect(host, port) -> Connection\n\nOpen a TCP connection to a host.", "Open a TCP connection to a host."),
    ("Refer to {@link java.awt.Graphics#create(int, int, int, int)} for details.", "Refer to java.awt.Graphics.create for details."),
    ("kmalloc_array - allocate memory for an array.\n@n: number of elements", "allocate memory for an array."),
    ("Note - this is not a kernel-doc name", "Note - this is not a kernel-doc name"),
])
def test_query_cleaning(raw, summary):
    assert clean_docstring(raw).summary == summary


def test_query_keeps_whole_sentences_of_a_long_summary():
    raw = "First sentence has five words. " + "Second sentence is much longer than the limit allows here. " * 3
    assert clean_docstring(raw, max_words=16).summary == "First sentence has five words. Second sentence is much longer than the limit allows here."
    assert clean_docstring("one two three four five six", max_words=3).summary == "one two three four five six"


def test_comment_markers():
    assert comment_text(["/**\n * Line one.\n *\n *   indented code\n */"]) == "Line one.\n\n  indented code"
    assert comment_text(["//! inner", "// more"]) == "inner\nmore"
    assert comment_text(["/*! Qt style */"]) == "Qt style"
    assert comment_text(["--- LuaDoc line"]) == "LuaDoc line"


# --- filters --------------------------------------------------------------------------------------

def _fn(name: str, doc: str = "Compute the checksum of a byte buffer quickly.", body: str = "x + 1") -> str:
    return f'def {name}(x):\n    """{doc}"""\n    total = {body}\n    return total * 2 + len(str(total))\n\n\n'


def test_test_code_is_dropped_unless_asked(tmp_path):
    files = {
        "pkg/core.py": _fn("checksum") + _fn("test_checksum", "Checks that checksum handles empty input."),
        "pkg/tests/helpers.py": _fn("make_buffer", "Build a buffer full of random bytes."),
        "pkg/test_core.py": _fn("other", "Another helper that lives in a test file."),
        "web/a.spec.ts": "/** Renders the widget into a detached node. */\nexport function render(w: W) {\n  return mount(w, document.createElement('div'));\n}\n",
        "lib.rs": "/// Parses the empty input without panicking at all.\n#[test]\nfn parses_empty() {\n    assert!(parse(\"\").is_ok());\n}\n",
    }
    records, stats = run_mine(tmp_path, files)
    assert [r["symbol"] for r in records] == ["checksum"]
    assert stats.skipped_files["test"] == 3 and stats.dropped["test"] == 2
    records, _ = run_mine(tmp_path, {}, include_tests=True)
    assert {r["symbol"] for r in records} == {"checksum", "test_checksum", "make_buffer", "other", "render", "parses_empty"}


def test_generated_and_minified_files_are_dropped(tmp_path):
    files = {
        "gen.go": "// Code generated by protoc-gen-go. DO NOT EDIT.\n\npackage pb\n\n// Reset clears every field of the message.\nfunc (m *M) Reset() {\n\t*m = M{}\n}\n",
        "auto.py": "# This file is autogenerated by a script.\n" + _fn("f"),
        "app.min.js": "/** Adds the numbers up one by one. */\nfunction add(a, b) {\n  return a + b + 0;\n}\n",
        "bundle.js": "/** Adds the numbers up one by one. */\nfunction add(a,b){return a+b}" + ";var x=1" * 800 + "\n",
        "real.py": _fn("g"),
    }
    records, stats = run_mine(tmp_path, files)
    assert [r["path"] for r in records] == ["real.py"] and stats.skipped_files["generated"] == 4
    _, stats = run_mine(tmp_path, {}, include_generated=True)
    assert "generated" not in stats.skipped_files and stats.files == 5


def test_exact_and_near_duplicates(tmp_path):
    base = _fn("checksum")
    files = {
        "a/one.py": base,
        "b/copy.py": base,  # the same function in another package: exact duplicate
        "c/reformatted.py": 'def checksum(x):\n    """Another docstring entirely for this one."""\n    total = x+1  # note\n    return total*2+len(str(total))\n',
        "d/renamed.py": _fn("checksum", body="x + 2"),  # same query and name, other code
        "e/other.py": _fn("other", "Compute the checksum of a byte buffer quickly.", "x - 5"),  # same query, other name
    }
    records, stats = run_mine(tmp_path, files)
    assert sorted(r["path"] for r in records) == ["a/one.py", "e/other.py"]
    assert stats.dropped["duplicate"] == 1 and stats.dropped["near-duplicate"] == 2
    records, _ = run_mine(tmp_path, {}, dedupe=False)
    assert len(records) == 5


def test_identical_queries_are_capped(tmp_path):
    files = {f"m{i}.py": _fn(f"f{i}", body=f"x + {i}") for i in range(4)}
    records, stats = run_mine(tmp_path, files, max_per_query=2)
    assert len(records) == 2 and stats.dropped["frequent query"] == 2


def test_excluded_packages_by_name_and_directory(tmp_path):
    files = {
        "site-packages/jinja2/filters.py": _fn("do_upper"),
        "site-packages/pip/_vendor/rich/text.py": _fn("styled", body="x + 3"),
        "site-packages/httpx2/client.py": _fn("send", body="x + 4"),
        "site-packages/mylib/core.py": _fn("keep", body="x + 5"),
        "site-packages/werkzeug-3.0.1/x.py": _fn("w", body="x + 6"),
        # the development set's corpora (eval/dev) are held out too; toolz ships tlz beside it
        "marshmallow-4.4.0/src/marshmallow/fields.py": _fn("field", "Serialize one attribute of an object.", "x + 7"),
        "site-packages/tlz/_build_tlz.py": _fn("load", "Import the accelerated module when it exists.", "x + 8"),
    }
    records, stats = run_mine(tmp_path, files)
    assert [(r["repo"], r["symbol"]) for r in records] == [("mylib", "keep")]
    assert stats.skipped_files["excluded package"] == 6
    records, stats = run_mine(tmp_path, {}, exclude=[*DEFAULT_EXCLUDED_PACKAGES, "mylib"])
    assert records == [] and stats.skipped_files["excluded package"] == 7
    records, _ = run_mine(tmp_path, {}, exclude=[])
    assert len(records) == 7


def test_short_doc_short_code_long_code_and_boilerplate(tmp_path):
    long_body = "\n".join(f"    y{i} = x + {i}" for i in range(250))
    files = {
        "a.py": _fn("short_doc", "Checksum."),
        "b.py": 'def short_code(x):\n    """Return the value unchanged for callers."""\n    return x\n',
        "c.py": f'def long_code(x):\n    """Compute a great many intermediate values."""\n{long_body}\n    return x\n',
        "d.py": _fn("licensed", "Copyright 2020 Example Corp, all rights reserved.", "x + 7"),
        "e.py": _fn("fine", body="x + 8"),
    }
    records, stats = run_mine(tmp_path, files)
    assert [r["symbol"] for r in records] == ["fine"]
    assert stats.dropped["short doc"] == 1 and stats.dropped["short code"] == 1
    assert stats.dropped["long code"] == 1 and stats.dropped["boilerplate doc"] == 1
    records, _ = run_mine(tmp_path, {}, min_doc_words=1, min_code_lines=1, min_code_chars=0, max_code_lines=1000)
    assert {r["symbol"] for r in records} == {"short_doc", "short_code", "long_code", "fine"}  # boilerplate always goes


def test_query_in_code_is_dropped(tmp_path):
    src = 'def greet():\n    """Say hello to the whole world."""\n    print("Say hello to the whole world.")\n    return None\n'
    records, stats = run_mine(tmp_path, {"g.py": src})
    assert records == [] and stats.dropped["query in code"] == 1


def test_excluded_dir_names_are_mined(tmp_path):
    """The index skips site-packages, vendor, dist, build...; mining walks them."""
    files = {f"{d}/pkg/m.py": _fn(f"f_{d.replace('-', '_')}", f"Compute checksum number {i} of a buffer.", f"x + {i}")
             for i, d in enumerate(["site-packages", "vendor", "dist", "build", "node_modules", "target"])}
    files["__pycache__/m.py"] = _fn("cached")
    records, _ = run_mine(tmp_path, files)
    assert len(records) == 6


# --- package names, split ---------------------------------------------------------------------


def test_package_names(tmp_path):
    proj = tmp_path / "myproj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text("")
    assert package_name(proj, "src/app/x.py", root_is_project=True) == "myproj"
    assert package_name(tmp_path, "myproj/src/app/x.py") == "myproj"
    assert package_name(Path("/x/go/pkg/mod"), "golang.org/x/net@v0.1.0/http2/frame.go") == "golang.org/x/net"
    assert package_name(Path("/corpus/npm"), "lodash/fp/map.js") == "lodash"
    assert package_name(Path("/c"), "gopkg.in/yaml.v3/decode.go") == "gopkg.in/yaml.v3"
    assert package_name(Path("/jdk"), "java.base/java/util/List.java") == "java.base"  # not a Go path
    records, _ = run_mine(tmp_path, {"a/m.py": _fn("f")}, repo_name="given")
    assert records[0]["repo"] == "given"


def _many_packages() -> dict[str, str]:
    return {f"pkg{p}/mod{m}.py": _fn(f"f{p}_{m}", f"Compute value number {p} {m} for the caller.", f"x + {p * 10 + m}")
            for p in range(30) for m in range(4)}


@pytest.mark.parametrize("split_by", ["package", "file"])
def test_split_is_deterministic_and_never_splits_a_unit(tmp_path, split_by):
    files = _many_packages()
    a, sa = run_mine(tmp_path / "a", files, split_by=split_by, val_fraction=0.3)
    b, _ = run_mine(tmp_path / "b", files, split_by=split_by, val_fraction=0.3, jobs=2)
    assert [(r["path"], r["split"]) for r in a] == [(r["path"], r["split"]) for r in b]
    unit = "repo" if split_by == "package" else "path"
    sides: dict[str, set[str]] = {}
    for r in a:
        sides.setdefault(r[unit], set()).add(r["split"])
    assert all(len(s) == 1 for s in sides.values())
    assert 0 < sa.by_split.get("val", 0) < len(a)
    everything, _ = run_mine(tmp_path / "c", files, split_by=split_by, val_fraction=1.0)
    assert {r["split"] for r in everything} == {"val"}


# --- output, malformed input ----------------------------------------------------------------------


def test_output_is_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "pairs.jsonl"
    out.write_text("old\n")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"m{i}.py").write_text(_fn(f"f{i}", body=f"x + {i}"))
    calls = []

    def interrupted(task, cfg):
        calls.append(task)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task, cfg)

    real = mine_module.mine_file
    monkeypatch.setattr(mine_module, "mine_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mine([src], out, MineConfig(jobs=1))
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl", "src"]  # no temp file left
    monkeypatch.undo()
    stats = mine([src], out, MineConfig(jobs=1))
    assert stats.pairs == 3 and len(out.read_text().splitlines()) == 3
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_malformed_files_are_counted_not_fatal(tmp_path):
    files = {
        "latin1.py": 'def f(x):\n    """Caf\xe9 au lait for everyone here."""\n    return x + 1\n'.encode("latin-1"),
        "binary.py": b"\x00\x01\x02def f(): pass\n",
        "broken.py": "def (((:\n    '''Nothing sensible in here at all.'''\n  return ]]\n",
        "good.py": _fn("good"),
    }
    records, stats = run_mine(tmp_path, files)
    assert [r["symbol"] for r in records] == ["good"]
    assert stats.skipped_files["not UTF-8"] == 1 and stats.skipped_files["binary"] == 1
    assert stats.files == 2  # good.py and broken.py were parsed


def test_a_parse_over_budget_is_unparsable(tmp_path, monkeypatch):
    import supergrep.corpus.chunk as chunk_module

    monkeypatch.setattr(chunk_module, "_PARSE_BUDGET", (-1.0, 0.0))
    src = "".join(_fn(f"f{i}", f"Compute value number {i} for the caller.", f"x + {i}") for i in range(30))
    records, stats = run_mine(tmp_path, {"a.py": src})
    assert records == [] and stats.skipped_files["unparsable"] == 1


def test_a_crashing_file_is_counted(tmp_path, monkeypatch):
    def boom(*_a, **_k):
        raise RecursionError("deep")

    monkeypatch.setattr(mine_module, "_tree_pairs", boom)
    records, stats = run_mine(tmp_path, {"a.py": _fn("f")})
    assert records == [] and stats.skipped_files["error"] == 1


# --- command line -----------------------------------------------------------------------------




def test_cli_counts_exit_codes_and_errors(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(_fn("f") + _fn("g", "Merge two sorted lists into one sorted list.", "x + 9"))
    (src / "tests").mkdir()
    (src / "tests" / "t.py").write_text(_fn("h"))
    out = tmp_path / "pairs.jsonl"
    r = run_main(["mine", str(src), "-o", str(out), "-j", "1"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("2 pairs from 1 files") and str(out) in lines[0]
    assert "by language: python 2" in r.output and "skipped files: test 1" in r.output
    assert "by split: train 2" in r.output
    r = run_main(["mine", str(src), "-o", str(out), "--json", "--include-tests", "--split-by", "file"])
    stats = json.loads(r.stdout)
    assert stats["pairs"] == 3 and stats["by_language"] == {"python": 3}
    assert len(out.read_text().splitlines()) == 3

    r = run_main(["mine", str(tmp_path / "missing"), "-o", str(out)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "does not exist" in r.output
    r = run_main(["mine", str(src), "-o", str(tmp_path / "no" / "dir" / "p.jsonl")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = run_main(["mine", str(src), "-o", str(out), "-t", "cobol"])
    assert r.exit_code == 2 and "cannot mine cobol" in r.output
    r = run_main(["mine", str(src), "-o", str(out), "--min-doc-words", "50"])
    assert r.exit_code == 1 and out.read_text() == ""  # nothing mined: exit 1, empty file
