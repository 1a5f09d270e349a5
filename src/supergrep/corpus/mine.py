"""Mine (docstring -> code) training pairs from source trees.

One pair per documented definition. The definitions are the chunker's (``chunk._collect`` over
the language table, or the declaration splitter for languages without a grammar), so a pair's
code is what the index would show for that definition, minus its documentation:

- Documentation: a row with ``body_docstring`` (Python) takes the string literal that is the
  first statement of the body; other rows take the ``leading`` comments directly above the
  definition whose text matches the row's ``doc_comment`` regex (``///``, ``/** */``, a run of
  ``//`` in Go, ``#`` in Ruby, ``/-- -/`` in Lean). Module docs (``//!``, ``/*!``) never count.
- Code: the definition's lines with its documentation cut out (a docstring's lines, and the
  blank line after it, are removed; decorators, attributes, the signature and the body stay;
  a container keeps its header and fields, its members being pairs of their own).
- Query: ``docstrings.clean_docstring``'s summary; the full cleaned docstring is kept too.

Filters, all in ``MineConfig`` (the only source of defaults): documentation of fewer than
``min_doc_words`` words or boilerplate (TODO, copyright, ``{@inheritDoc}``); code longer than
``max_code_lines`` or shorter than ``min_code_lines``/``min_code_chars``; a query that appears
verbatim in its code; test code (by path, file name, function name or test attribute);
generated or minified files; exact and near duplicates (same normalised code, or same query
for the same name); more than ``max_per_query`` pairs with one query; excluded packages.

The package of a file (``repo``), first rule that applies:

1. ``--repo-name``.
2. The deepest packaging directory in its absolute path: ``site-packages/X`` or
   ``dist-packages/X`` (X a package directory, or a module file without ``.py``),
   ``node_modules/X`` or ``node_modules/@scope/X``, ``cargo/registry/X-1.2.3`` (Debian's
   crates: X), ``gocode/src/HOST/...`` and ``pkg/mod/HOST/...`` (Go import paths: ``HOST/a/b``
   for github.com-like hosts, else ``HOST/a``; ``@version`` dropped).
3. A root that is itself a project (it holds ``pyproject.toml``, ``Cargo.toml``,
   ``package.json``, ``go.mod``, ``.git``, ...): the root directory's name.
4. Otherwise the first path component under the root (a file directly in the root by its name
   without extension; for a ``.go`` file under ``HOST/...``, the import path as in 2).

Version suffixes (``serde-1.0.195``, ``jinja2-3.1.4``) are dropped. A file is excluded when its
package, or any directory on its absolute path, matches an ``exclude`` name (case-insensitive,
``-``/``_``/``.`` alike, trailing digits ignored: ``httpx2`` is ``httpx``), so
``site-packages/jinja2/...`` and ``pip/_vendor/rich/...`` are both left out.

The split is by file or by package, never by pair: ``sha1(key) / 2**160 < val_fraction`` makes
it "val", so a file (or a whole package) is always on one side, on every machine and run.
Duplicates are dropped after the first occurrence in walk order, so no pair has a copy on the
other side.

Roots are walked with the project's walker (ignore files, hidden files, binary sniff, size
cap) but with ``MineConfig.excluded_dirs`` instead of the index's list: mining
``site-packages``, ``vendor`` or ``dist`` directories is the point, so only VCS and cache
directories are skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from supergrep.config import ChunkConfig, MiB, WalkConfig
from supergrep.corpus.chunk import (
    _collect,
    _comment_rows,
    _Def,
    _parse,
    _split_lines,
    _unwrap,
    chunk_source,
    grammar_available,
)
from supergrep.corpus.docstrings import clean_docstring, comment_text, string_literal_text
from supergrep.corpus.languages import (
    LANGUAGES,
    LanguageSpec,
    detect_language,
    field_name,
    get_language,
)
from supergrep.corpus.types import Source
from supergrep.corpus.walk import SkipFile, WalkStats, read_source, walk
from supergrep.errors import UsageError

log = logging.getLogger(__name__)

# The public evaluation set's packages (eval/public/README.md: never train on them) and the
# development set's (eval/dev/: the sweeps choose checkpoints on it, so it must stay unseen too;
# toolz ships `tlz` beside `toolz`).
DEFAULT_EXCLUDED_PACKAGES = (
    "jinja2", "itsdangerous", "markupsafe", "requests", "click", "flask", "werkzeug", "rich", "httpx",
    "joblib", "toolz", "tlz", "tomlkit", "marshmallow",
)
MINE_EXCLUDED_DIRS = (
    ".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox",
)


def _f(default: Any, help: str) -> Any:
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class MineConfig:
    """Every setting of ``supergrep mine``, with its default and its help text."""

    min_doc_words: int = _f(3, "Drop pairs whose query (the docstring's summary) has fewer words.")
    max_query_words: int = _f(64, "Cut a longer summary to the whole sentences that fit (at least one).")
    min_code_lines: int = _f(2, "Drop pairs whose code (documentation removed) has fewer lines (blank lines and lone closing brackets/'end' not counted).")
    min_code_chars: int = _f(40, "Drop pairs whose code has fewer non-blank characters.")
    max_code_lines: int = _f(200, "Drop pairs whose code has more lines.")
    max_file_bytes: int = _f(1 * MiB, "Skip files larger than this many bytes.")
    include_tests: bool = _f(False, "Keep test code (test directories and files, test_* functions, #[test]/@Test).")
    include_generated: bool = _f(False, "Keep generated files ('Code generated', 'DO NOT EDIT', '@generated', minified).")
    dedupe: bool = _f(True, "Drop exact and near duplicates (same code without comments and whitespace, or same query for the same name).")
    max_per_query: int = _f(5, "Keep at most this many pairs with the same query (0: no limit).")
    split_by: str = _f("package", "Assign train/val by 'package' or by 'file' (hash-based, never by pair).")
    val_fraction: float = _f(0.05, "Fraction of packages (or files) that go to the validation split.")
    exclude: list = _f(list(DEFAULT_EXCLUDED_PACKAGES), "Packages never mined (matched by package name and by directory name).")
    repo_name: str = _f("", "Package name recorded for every file (default: inferred per file, see docs/training.md).")
    languages: list = _f([], "Only these languages (empty: every language with a docstring syntax).")
    excluded_dirs: list = _f(list(MINE_EXCLUDED_DIRS), "Directory names never descended into (site-packages, vendor, dist... are mined).")
    respect_ignore_files: bool = _f(True, "Honour .gitignore/.ignore files under the roots.")
    jobs: int = _f(0, "Worker processes (0: one per CPU).")

    def validate(self) -> None:
        if self.split_by not in ("package", "file"):
            raise UsageError(f"--split-by must be 'package' or 'file', not {self.split_by!r}")
        if not 0.0 <= self.val_fraction <= 1.0:
            raise UsageError(f"--val-fraction must be between 0 and 1, not {self.val_fraction}")
        for name in ("min_doc_words", "max_query_words", "min_code_lines", "min_code_chars", "max_per_query", "jobs"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative")
        if self.max_code_lines < 1 or self.max_file_bytes < 1:
            raise UsageError("--max-code-lines and --max-file-bytes must be positive")
        unknown = sorted(set(self.languages) - set(minable_languages()))
        if unknown:
            raise UsageError(
                f"cannot mine {', '.join(unknown)}: choose from {', '.join(minable_languages())}")


def minable_languages() -> list[str]:
    """Languages whose row says where documentation is (``doc_comment`` or ``body_docstring``)."""
    return sorted(s.name for s in LANGUAGES if s.doc_comment or s.body_docstring)


@dataclass
class MineStats:
    """What a run did: pairs by language and split, and what it left out, by reason."""

    output: str = ""
    files: int = 0  # files read and parsed
    lines: int = 0
    definitions: int = 0
    pairs: int = 0
    seconds: float = 0.0
    by_language: dict = field(default_factory=dict)
    by_split: dict = field(default_factory=dict)
    skipped_files: dict = field(default_factory=dict)  # reason -> files
    dropped: dict = field(default_factory=dict)  # reason -> definitions
    examples: dict = field(default_factory=dict)  # reason -> one path

    def skip_file(self, reason: str, path: str, n: int = 1) -> None:
        self.skipped_files[reason] = self.skipped_files.get(reason, 0) + n
        self.examples.setdefault(reason, path)

    def drop(self, reason: str, path: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n
        self.examples.setdefault(reason, path)

    def to_dict(self) -> dict:
        return asdict(self)


# --- packages, exclusions, tests, generated files --------------------------------------------

_PROJECT_FILES = (
    "pyproject.toml", "setup.py", "setup.cfg", "Cargo.toml", "package.json", "go.mod", "pom.xml",
    "build.gradle", "build.gradle.kts", "Package.swift", "lakefile.lean", "lakefile.toml",
    "CMakeLists.txt", "meson.build", ".git",
)
_GO_HOSTS_3 = ("github.com", "gitlab.com", "bitbucket.org", "golang.org", "code.google.com", "codeberg.org", "git.sr.ht")
_VERSION = re.compile(r"(?:-v?|@v?)\d[\w.+~-]*$")


def strip_version(name: str) -> str:
    """``serde-1.0.195`` -> ``serde``; ``repo@v1.2.3`` -> ``repo``; ``yaml.v3`` is kept.

    >>> [strip_version(n) for n in ("serde-1.0.195", "jinja2-3.1.4", "mod@v0.3.0", "yaml.v3", "x.dist-info")]
    ['serde', 'jinja2', 'mod', 'yaml.v3', 'x']
    """
    for suffix in (".dist-info", ".egg-info"):
        name = name.removesuffix(suffix)
    return _VERSION.sub("", name) or name


def _go_path(dirs: list[str]) -> str:
    n = 3 if dirs and dirs[0] in _GO_HOSTS_3 else 2
    return "/".join(strip_version(d) for d in dirs[:n])


def _module_name(part: str, is_file: bool) -> str:
    return part.rsplit(".", 1)[0] if is_file and "." in part else part


def is_project_root(root: Path) -> bool:
    return any((root / name).exists() for name in _PROJECT_FILES)


def package_name(root: Path, rel: str, root_is_project: bool = False) -> str:
    """The package a file belongs to (rules in the module docstring).

    >>> package_name(Path("/v/lib/python3.11/site-packages"), "numpy/core/x.py")
    'numpy'
    >>> package_name(Path("/deb/usr/share/cargo/registry"), "serde-1.0.195/src/de.rs")
    'serde'
    >>> package_name(Path("/deb/usr/share/gocode/src"), "github.com/pkg/errors/errors.go")
    'github.com/pkg/errors'
    >>> package_name(Path("/n/node_modules"), "@angular/core/index.js")
    '@angular/core'
    >>> package_name(Path("/usr/lib/python3.11"), "argparse.py")
    'argparse'
    """
    parts = [*Path(root).parts, *rel.split("/")]
    n_dirs = len(parts) - 1
    for i in range(n_dirs - 1, -1, -1):
        d, rest = parts[i], parts[i + 1:]
        prev = parts[i - 1] if i else ""
        if d in ("site-packages", "dist-packages"):
            return strip_version(_module_name(rest[0], len(rest) == 1))
        if d == "node_modules":
            if rest[0].startswith("@") and len(rest) > 2:
                return f"{rest[0]}/{rest[1]}"
            return strip_version(_module_name(rest[0], len(rest) == 1))
        if d == "registry" and prev == "cargo" and len(rest) > 1:
            return strip_version(rest[0])
        if (d, prev) in (("src", "gocode"), ("mod", "pkg")) and len(rest) > 1:
            return _go_path(rest[:-1])
    if root_is_project:
        return strip_version(Path(root).name)
    rel_parts = rel.split("/")
    if len(rel_parts) == 1:
        return strip_version(_module_name(rel_parts[0], True))
    if "." in rel_parts[0] and len(rel_parts) > 2 and rel.endswith(".go"):
        return _go_path(rel_parts[:-1])
    return strip_version(rel_parts[0])


def _norm_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name.lower())


def excluded_by(names: Iterable[str], excluded: set[str]) -> str | None:
    """The first name that matches an excluded package (normalised, version and trailing
    digits ignored), or None.

    >>> excluded_by(["lib", "site-packages", "Jinja2-3.1.4"], {"jinja2"})
    'Jinja2-3.1.4'
    >>> excluded_by(["httpx2"], {"httpx"}), excluded_by(["typer"], {"click"})
    ('httpx2', None)
    """
    for name in names:
        n = _norm_name(strip_version(name))
        if n in excluded or n.rstrip("0123456789") in excluded:
            return name
    return None


_TEST_DIR = re.compile(
    r"^(?:tests?|testing|__tests?__|__mocks__|specs?|testdata|test_?data|test_?utils|e2e|"
    r"\w+_tests?|tests?_\w+)$", re.IGNORECASE)
_TEST_FILE = re.compile(
    r"^(?:test_.*|.*_tests?|conftest|.*_spec|.*_unittest|.*[a-z0-9]Tests?|.*\.test|.*\.spec|tests?)$")
_TEST_NAME = re.compile(r"^(?:test_|test[A-Z0-9]|Test[A-Z0-9_]|Benchmark[A-Z_])")
_TEST_SCOPE = frozenset({"test", "tests", "testing"})
_TEST_ATTRIBUTE = re.compile(r"#\[(?:\w+::)*test\b|@(?:Test|ParameterizedTest|RepeatedTest)\b|@pytest\.")


def is_test_path(rel: str) -> bool:
    """Test code by its path: a test directory anywhere below the root, or a test file name.

    >>> [is_test_path(p) for p in ("pkg/tests/x.py", "src/a_test.go", "src/FooTest.java",
    ...  "web/a.spec.ts", "lib/test_io.py", "lib/contest.py", "src/latest.rs")]
    [True, True, True, True, True, False, False]
    """
    return in_test_dir(rel) or is_test_file(rel)


def is_test_file(rel: str) -> bool:
    """Whether the file name of ``rel`` (not its directories) names test code."""
    return bool(_TEST_FILE.match(rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]))


def in_test_dir(rel: str) -> bool:
    """Whether a directory of ``rel`` (not the file name) is a test directory."""
    return any(_TEST_DIR.match(p) for p in rel.split("/")[:-1])


def _symbol_parts(symbol: str) -> list[str]:
    return [p for p in re.split(r"::|\.", symbol) if p]


def is_test_symbol(symbol: str) -> bool:
    """``test_x``, ``testX``, Go ``TestX``/``BenchmarkX``, or anything inside a ``tests`` scope.

    >>> [is_test_symbol(s) for s in ("tests::parses", "Foo.test_bar", "TestServe", "latest", "Tester")]
    [True, True, True, False, False]
    """
    parts = _symbol_parts(symbol)
    if not parts:
        return False
    return bool(_TEST_NAME.match(parts[-1])) or any(p in _TEST_SCOPE for p in parts[:-1])


_GENERATED = re.compile(
    r"code generated\b.*\bdo not edit|\bdo not edit\b|@generated\b|\bauto-?generated\b|"
    r"\bautomatically generated\b|\bthis file (?:is|was|has been) generated\b|"
    r"\bgenerated by (?:the )?(?:protoc|protocol buffer|thrift|swig|cython|bindgen|cbindgen|flatc|mockgen|"
    r"stringer|antlr|pyuic|grpc)",
    re.IGNORECASE,
)


def is_generated(name: str, text: str) -> bool:
    """Generated (a marker in the first 4 KiB) or minified (``.min.``, or over 200 characters
    per line on average)."""
    if ".min." in name or _GENERATED.search(text[:4096]):
        return True
    n_lines = text.count("\n") + 1
    return len(text) > 1000 and len(text) / n_lines > 200


# --- one file ---------------------------------------------------------------------------------

_BOILERPLATE = re.compile(
    r"^(?:todo|fixme|xxx|hack|deprecated|undocumented|see\b|inherit|copyright|\(c\)|ditto\b)|"
    r"copyright (?:\(c\)|\d{4})|licensed under|spdx-license|all rights reserved|do not edit|"
    r"inheritdoc|auto-?generated",
    re.IGNORECASE,
)
_WORDY = re.compile(r"[^\W\d_]{2}")
_CODE_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*|(?<!\S)#\s[^\n]*|(?<!\S)--\s[^\n]*", re.DOTALL)
_WS = re.compile(r"\s+")
_CLOSER = re.compile(r"^\s*(?:[})\]];?,?|end|@end|fi|done|esac)\s*$")
_STRING_TYPES = ("string", "concatenated_string")


def _char_col(lines: list[str], row: int, byte_col: int) -> int:
    line = lines[row] if row < len(lines) else ""
    return len(line.encode("utf-8", "surrogatepass")[:byte_col].decode("utf-8", "replace"))


def _span(node: Any, lines: list[str]) -> tuple[int, int, int, int]:
    """A node's (first row, first char column, last row, end char column), a node that ends
    at column 0 (one that holds its newline) ending at the end of the row before."""
    sr, sc = node.start_point
    er, ec = node.end_point
    if ec == 0 and er > sr:
        er -= 1
        return sr, _char_col(lines, sr, sc), er, len(lines[er]) if er < len(lines) else 0
    return sr, _char_col(lines, sr, sc), er, _char_col(lines, er, ec)


def _render(lines: list[str], rows: list[int], cuts: list[tuple[int, int, int, int]]) -> str:
    """The given rows with the cut spans removed. A cut that fills its lines removes them (and
    one blank line after it); a cut sharing a line with code removes only its characters."""
    cur = {r: lines[r] for r in rows if r < len(lines)}
    dropped: set[int] = set()
    for sr, sc, er, ec in sorted(cuts, reverse=True):
        if sr not in cur:
            continue
        before, after = cur[sr][:sc], cur.get(er, "")[ec:]
        if not before.strip() and not after.strip():
            dropped.update(range(sr, er + 1))
            if er + 1 in cur and not cur[er + 1].strip():
                dropped.add(er + 1)
        else:
            cur[sr] = (before.rstrip() + " " + after.lstrip()).rstrip() if before.strip() else before + after.lstrip()
            dropped.update(range(sr + 1, er + 1))
    out: list[str] = []
    for r in rows:
        if r in cur and r not in dropped and (cur[r].strip() or (out and out[-1].strip())):
            out.append(cur[r])  # runs of blank lines (where members were cut out) become one
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def _find_node(root: Any, spec: LanguageSpec, src: bytes, lines: list[str], d: _Def) -> Any | None:
    """The syntax node of a chunker definition: climb from the first token on its head row to
    the (unwrapped) definition there whose name ends the definition's symbol, looking along
    the row too (``#[inline] fn f()``)."""
    line = lines[d.head]
    indent = len(line) - len(line.lstrip())
    col = len(line[:indent].encode("utf-8", "surrogatepass"))
    node = root.descendant_for_point_range((d.head, col), (d.head, col + 1))
    name_of = spec.name_of or field_name

    def matches(n: Any) -> Any | None:
        inner = _unwrap(n, spec)
        if inner is not None and inner.start_point.row == d.head:
            name = name_of(inner, src)
            if name and d.symbol.endswith(name):
                return inner
        return None

    while node is not None and node.start_point.row >= d.start:
        found = matches(node)
        sib = node.next_named_sibling
        while found is None and sib is not None and sib.start_point.row == d.head:
            found = matches(sib)  # after an attribute or comment on the same row
            sib = sib.next_named_sibling
        if found is not None:
            return found
        node = node.parent
    return None


def _leading_nodes(root: Any, spec: LanguageSpec, lines: list[str], d: _Def) -> list[Any]:
    """The ``leading`` nodes (comments, attributes) on the rows between a definition's start
    and its head, one per node, in order."""
    out: list[Any] = []
    seen: set[int] = set()
    for row in range(d.start, d.head):
        line = lines[row]
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        col = len(line[:indent].encode("utf-8", "surrogatepass"))
        node = root.descendant_for_point_range((row, col), (row, col + 1))
        while node is not None and node.type not in spec.leading:
            node = node.parent
        if node is not None and node.start_byte not in seen:
            seen.add(node.start_byte)
            out.append(node)
    return out


_DIRECTIVE = re.compile(
    r"^(?://+|/\*+|#+|--+)\s*(?:eslint|@ts-|prettier-ignore|istanbul\s|c8\s|jshint|jscs|tslint|global\s|"
    r"NOLINT|noqa|clang-format|rubocop:|nolint|lint:|go:|\+build|type:\s*ignore|pylint:|biome-ignore|"
    r"deno-lint|webpack|@vite-ignore|swiftlint|MARK:|cppcheck|coverity|LCOV_EXCL)")
_REGION = re.compile(r"^(?://+|/\*+|#+|--+)\s*#?(?:region|endregion|pragma\s+(?:mark|region))\b", re.IGNORECASE)


def _doc_nodes(leading: list[Any], src: bytes, doc_re: re.Pattern[str]) -> tuple[list[Any], list[Any]]:
    """The documentation among a definition's leading nodes: the doc comments nearest to it,
    looking upward past attributes, decorators and tool directives (``// eslint-...``,
    ``//go:``), which stay in the code. Any other comment (a plain note, a ``#region`` marker
    of a bundle) ends the documentation; it and what is above it belong to something else
    and are returned second, to be cut from the code too."""
    docs: list[Any] = []
    for i in range(len(leading) - 1, -1, -1):
        n = leading[i]
        if "comment" not in n.type:
            continue
        text = src[n.start_byte:n.end_byte].decode("utf-8", "replace")
        if _DIRECTIVE.match(text):
            continue
        if doc_re.match(text) and not _REGION.match(text):
            docs.append(n)
            continue
        return docs[::-1], [m for m in leading[: i + 1] if "comment" in m.type]
    return docs[::-1], []


def _body_docstring(inner: Any, src: bytes) -> tuple[Any, str] | None:
    """The statement holding a body's docstring and the docstring's text, or None."""
    body = inner.child_by_field_name("body")
    if body is None:
        return None
    for stmt in body.named_children:
        if stmt.type == "comment":
            continue
        lit = stmt  # a docstring is a bare string in the block (or wrapped in an expression statement)
        if stmt.type == "expression_statement" and stmt.named_child_count == 1:
            lit = stmt.named_children[0]
        if lit.type not in _STRING_TYPES:
            return None
        parts = lit.named_children if lit.type == "concatenated_string" else [lit]
        texts = [string_literal_text(src[p.start_byte:p.end_byte].decode("utf-8", "replace")) for p in parts]
        if any(t is None for t in texts):
            return None
        return stmt, "".join(t or "" for t in texts)
    return None


def _norm_text(text: str) -> str:
    return _WS.sub(" ", text.lower()).strip().rstrip(".!?:;, ")


def _judge(raw_doc: str, code: str, symbol: str, head_text: str, cfg: MineConfig,
           dropped: Counter) -> tuple[str, str] | None:
    """The (query, full docstring) of a definition, or None after counting why it is dropped."""
    doc = clean_docstring(raw_doc, max_words=cfg.max_query_words)
    query = doc.summary
    if not query or not _WORDY.search(query) or doc.words < cfg.min_doc_words:
        dropped["short doc"] += 1
        return None
    if _BOILERPLATE.search(query):
        dropped["boilerplate doc"] += 1
        return None
    if doc.words > cfg.max_query_words:
        dropped["long doc"] += 1
        return None
    if not cfg.include_tests and (is_test_symbol(symbol) or _TEST_ATTRIBUTE.search(head_text)):
        dropped["test"] += 1
        return None
    lines = code.split("\n") if code else []
    if len(lines) > cfg.max_code_lines:
        dropped["long code"] += 1
        return None
    meaningful = sum(1 for ln in lines if ln.strip() and not _CLOSER.match(ln))
    if meaningful < cfg.min_code_lines or len(_WS.sub("", code)) < cfg.min_code_chars:
        dropped["short code"] += 1
        return None
    if _norm_text(query) in _norm_text(code):
        dropped["query in code"] += 1
        return None
    return query, doc.full


def _tree_pairs(spec: LanguageSpec, text: str, lines: list[str], cfg: MineConfig,
                dropped: Counter) -> tuple[list[dict], int] | None:
    src = text.encode("utf-8", "surrogatepass")
    tree = _parse(spec.grammar or "", src)
    if tree is None:
        return None
    root = tree.root_node
    doc_re = re.compile(spec.doc_comment) if spec.doc_comment else None
    out: list[dict] = []
    n_defs = 0

    def visit(defs: list[_Def]) -> None:
        nonlocal n_defs
        for d in defs:
            n_defs += 1
            pair = one(d)
            if pair is not None:
                out.append(pair)
            visit(d.children)

    def one(d: _Def) -> dict | None:
        """The pair of one definition, or None (counted in ``dropped``)."""
        inner = _find_node(root, spec, src, lines, d)
        if inner is None:
            dropped["unmatched definition"] += 1
            return None
        cuts: list[tuple[int, int, int, int]] = []
        raw = ""
        if spec.body_docstring:
            found = _body_docstring(inner, src)
            if found is not None:
                stmt, raw = found
                cuts.append(_span(stmt, lines))
        elif doc_re is not None:
            docs, stale = _doc_nodes(_leading_nodes(root, spec, lines, d), src, doc_re)
            if docs:
                raw = comment_text([src[n.start_byte:n.end_byte].decode("utf-8", "replace") for n in docs])
                cuts.extend(_span(n, lines) for n in docs + stale)
        if not raw.strip():
            dropped["no docstring"] += 1
            return None
        if inner.has_error:
            dropped["syntax error"] += 1
            return None
        rows = list(range(d.start, d.end + 1))
        if d.children:
            covered: set[int] = set()
            for c in d.children:
                covered.update(range(c.start, c.end + 1))
            covered.discard(d.head)
            rows = [r for r in rows if r not in covered]
        code = _render(lines, rows, cuts)
        head_text = "\n".join(lines[d.start:d.head + 1])
        judged = _judge(raw, code, d.symbol, head_text, cfg, dropped)
        if judged is None:
            return None
        return dict(query=judged[0], docstring=judged[1], code=code, symbol=d.symbol,
                    kind=d.kind, start_line=d.start + 1, end_line=d.end + 1)

    visit(_collect(root, spec, src, []))
    return out, n_defs


def _declaration_pairs(spec: LanguageSpec, rel: str, text: str, lines: list[str], cfg: MineConfig,
                       dropped: Counter) -> tuple[list[dict], int]:
    """Languages cut by the declaration splitter: the doc block among the comment lines the
    splitter glued onto the top of a declaration."""
    doc_re = re.compile(spec.doc_comment)
    comment = _comment_rows(lines, spec)
    opener, closer = spec.block_comment or ("", "")
    out: list[dict] = []
    n_defs = 0
    for c in chunk_source(rel, text, language=spec.name, cfg=ChunkConfig(max_chunk_lines=10**9)):
        if c.kind == "module":
            continue
        n_defs += 1
        first, last = c.start_line - 1, c.end_line - 1
        head = first
        while head <= last and (comment[head] or not lines[head].strip() or
                                (spec.leading_lines and re.match(spec.leading_lines, lines[head]))):
            head += 1
        doc_rows: list[int] = []
        r = first
        while r < head:
            if comment[r] and doc_re.match(lines[r].lstrip()):
                depth, end = 0, r
                for end in range(r, head):
                    depth += lines[end].count(opener) - lines[end].count(closer) if opener else 0
                    if depth <= 0:
                        break
                doc_rows.extend(range(r, end + 1))
                r = end + 1
            else:
                r += 1
        if not doc_rows:
            dropped["no docstring"] += 1
            continue
        raw = comment_text(["\n".join(lines[r] for r in doc_rows)])
        rows = [r for r in range(first, last + 1) if r not in set(doc_rows)]
        code = _render(lines, rows, [])
        judged = _judge(raw, code, c.symbol, "\n".join(lines[first:head + 1]), cfg, dropped)
        if judged is None:
            continue
        out.append(dict(query=judged[0], docstring=judged[1], code=code, symbol=c.symbol,
                        kind=c.kind, start_line=c.start_line, end_line=c.end_line))
    return out, n_defs


# ``.h`` belongs to C in the language table; a header whose content is C++ (LLVM, Abseil,
# Eigen...) is mined as C++, or its classes and templates would not parse.
_HEADER_LANGUAGE = {"c": "cpp"}
_CPP_SIGNS = re.compile(
    r"^\s*(?:namespace\s+[\w:]*\s*\{|template\s*<|class\s+\w+[^;()]*\{|(?:public|private|protected)\s*:)",
    re.MULTILINE)


@dataclass
class FileResult:
    """One file's outcome, sent back from a worker."""

    task: tuple
    language: str = ""  # the language mined (a C++ header is mined as C++)
    skip: str | None = None
    lines: int = 0
    definitions: int = 0
    pairs: list = field(default_factory=list)
    dropped: dict = field(default_factory=dict)


def _read_text(abspath: str, rel: str, language: str, max_bytes: int) -> str:
    """Read a file as the indexer does, but refuse (SkipFile "not UTF-8") invalid UTF-8 rather
    than mining replacement characters."""
    content = read_source(Source(rel, abspath, language, 0, 0), max_bytes)
    if "\ufffd" in content.text:
        try:
            with open(abspath, "rb") as fh:
                fh.read(max_bytes + 1).decode("utf-8")
        except UnicodeDecodeError:
            raise SkipFile("not UTF-8") from None
        except OSError:
            raise SkipFile("unreadable") from None
    return content.text


def mine_file(task: tuple, cfg: MineConfig) -> FileResult:
    """Pairs of one file. ``task`` is (absolute path, relative path, language, package);
    nothing raises: a file that cannot be read or parsed comes back with a ``skip`` reason."""
    abspath, rel, language, _package = task
    res = FileResult(task, language)
    try:
        spec = get_language(language)
        if spec is None:
            res.skip = "unknown language"
            return res
        text = _read_text(abspath, rel, language, cfg.max_file_bytes)
        if rel.endswith(".h") and language in _HEADER_LANGUAGE and _CPP_SIGNS.search(text[:65536]):
            language = _HEADER_LANGUAGE[language]
            spec = get_language(language) or spec
            res.language = language
        res.lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if not cfg.include_generated and is_generated(rel.rsplit("/", 1)[-1], text):
            res.skip = "generated"
            return res
        lines = _split_lines(text)
        dropped: Counter = Counter()
        if spec.splitter == "tree-sitter" and spec.grammar and (spec.doc_comment or spec.body_docstring):
            if not grammar_available(spec.grammar):
                res.skip = "no grammar"
                return res
            got = _tree_pairs(spec, text, lines, cfg, dropped)
            if got is None:
                res.skip = "unparsable"
                return res
        elif spec.splitter == "declarations" and spec.doc_comment:
            got = _declaration_pairs(spec, rel, text, lines, cfg, dropped)
        else:
            res.skip = "no docstring syntax"
            return res
        pairs, res.definitions = got
        res.pairs = [dict(p) for p in pairs]
        res.dropped = dict(dropped)
    except SkipFile as exc:
        res.skip = exc.reason
    except Exception as exc:  # noqa: BLE001 - one bad file never ends a long run
        log.debug("mining %s failed: %r", abspath, exc)
        res.skip = "error"
    return res


_WORKER_CFG: MineConfig | None = None


def _init_worker(cfg: MineConfig) -> None:
    global _WORKER_CFG
    _WORKER_CFG = cfg


def _work(task: tuple) -> FileResult:
    assert _WORKER_CFG is not None
    return mine_file(task, _WORKER_CFG)


# --- the run ------------------------------------------------------------------------------------


def split_of(key: str, val_fraction: float) -> str:
    """"val" for a ``val_fraction`` share of keys, by hash: the same on every run and machine.

    >>> split_of("numpy", 0.0), split_of("numpy", 1.0)
    ('train', 'val')
    """
    h = int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest(), "big") / 2**160
    return "val" if h < val_fraction else "train"


def code_key(code: str) -> str:
    """Code without comments and whitespace (identifiers and strings kept): near duplicates
    (re-indented, re-commented copies) share it.

    >>> code_key("def f(x):  # add\\n    return x + 1") == code_key("def f(x):\\n  return x+1")
    True
    """
    return _WS.sub("", _CODE_COMMENTS.sub("", code))


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()


class AtomicJsonl:
    """Lines go to a temporary file next to ``path``; ``commit`` renames it into place."""

    def __init__(self, path: Path):
        self.path = path
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        self.tmp = Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        self.fh = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def write(self, line: str) -> None:
        self.fh.write(line)
        self.fh.write("\n")

    def commit(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.tmp, self.path)
        try:
            fd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:  # pragma: no cover - platforms without directory fds
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def abort(self) -> None:
        if not self.fh.closed:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)


def _tasks(paths: list[Path], cfg: MineConfig, stats: MineStats, walk_stats: WalkStats) -> Iterator[tuple]:
    """(abspath, rel, language, package) for every file to mine, the path-level filters
    (excluded package, test file, duplicate file) applied here."""
    languages = set(cfg.languages) or set(minable_languages())
    excluded = {_norm_name(x) for x in cfg.exclude}
    walk_cfg = WalkConfig(max_file_bytes=cfg.max_file_bytes, respect_ignore_files=cfg.respect_ignore_files,
                          excluded_dirs=list(cfg.excluded_dirs))
    seen: set[str] = set()
    for path in paths:
        path = path.resolve()
        if path.is_file():
            root, project = path.parent, is_project_root(path.parent)
            spec = detect_language(path.name)
            if spec is None or spec.name not in languages:
                stats.skip_file("not a language to mine", str(path))
                continue
            st = path.stat()
            if st.st_size > cfg.max_file_bytes:
                stats.skip_file("too large", str(path))
                continue
            sources: Iterable[Source] = [Source(path.name, str(path), spec.name, st.st_size, st.st_mtime_ns)]
        else:
            root, project = path, is_project_root(path)
            sources = walk(path, walk_cfg, walk_stats, languages=languages)
        for s in sources:
            real = os.path.realpath(s.abspath)
            if real in seen:
                stats.skip_file("duplicate file", s.path)
                continue
            seen.add(real)
            package = cfg.repo_name or package_name(root, s.path, project)
            dirs = [*root.parts, *s.path.split("/")[:-1]]
            if excluded and excluded_by([package, *package.split("/"), *dirs], excluded):
                stats.skip_file("excluded package", s.path)
                continue
            if not cfg.include_tests and is_test_path(s.path):
                stats.skip_file("test", s.path)
                continue
            yield (s.abspath, s.path, s.language, package)


def mine(paths: list[Path], output: Path, cfg: MineConfig | None = None,
         progress: Callable[[int, int], None] | None = None) -> MineStats:
    """Mine every path (directories are walked) into ``output`` (JSON Lines, written atomically).

    ``progress(files_done, pairs)`` is called after each file. Returns the run's statistics.
    """
    cfg = cfg or MineConfig()
    cfg.validate()
    for p in paths:
        if not p.exists():
            raise UsageError(f"{p} does not exist; pass existing directories or files to mine")
    output = Path(output)
    if output.is_dir():
        raise UsageError(f"{output} is a directory; pass a file name with -o")
    if not output.parent.is_dir():
        raise UsageError(f"{output.parent} does not exist; create it or write elsewhere")
    stats = MineStats(output=str(output))
    walk_stats = WalkStats()
    t0 = time.monotonic()
    seen_exact: set[bytes] = set()
    seen_code: set[bytes] = set()
    seen_named: set[bytes] = set()
    per_query: Counter = Counter()
    writer = AtomicJsonl(output)
    jobs = cfg.jobs or os.cpu_count() or 1
    pool = None
    done = 0
    try:
        tasks = _tasks(paths, cfg, stats, walk_stats)
        if jobs > 1:
            pool = multiprocessing.get_context().Pool(jobs, initializer=_init_worker, initargs=(cfg,))
            results: Iterable[FileResult] = pool.imap(_work, tasks, chunksize=8)
        else:
            results = (mine_file(t, cfg) for t in tasks)
        for res in results:
            done += 1
            _abspath, rel, _language, package = res.task
            language = res.language
            stats.lines += res.lines
            if res.skip:
                stats.skip_file(res.skip, rel)
                continue
            stats.files += 1
            stats.definitions += res.definitions
            for reason, n in res.dropped.items():
                stats.drop(reason, rel, n)
            for p in res.pairs:
                if cfg.dedupe:
                    k_exact = _digest(p["query"] + "\0" + p["code"])
                    k_code = _digest(code_key(p["code"]))
                    name = (_symbol_parts(p["symbol"]) or [""])[-1]
                    k_named = _digest(_norm_text(p["query"]) + "\0" + name)
                    if k_exact in seen_exact:
                        stats.drop("duplicate", rel)
                        continue
                    if k_code in seen_code or k_named in seen_named:
                        stats.drop("near-duplicate", rel)
                        continue
                if cfg.max_per_query:
                    q = _norm_text(p["query"])
                    if per_query[q] >= cfg.max_per_query:
                        stats.drop("frequent query", rel)
                        continue
                    per_query[q] += 1
                if cfg.dedupe:
                    seen_exact.add(k_exact)
                    seen_code.add(k_code)
                    seen_named.add(k_named)
                key = _norm_name(package) if cfg.split_by == "package" else f"{_norm_name(package)}/{rel}"
                split = split_of(key, cfg.val_fraction)
                record = {
                    "query": p["query"], "code": p["code"], "docstring": p["docstring"],
                    "language": language, "repo": package, "path": rel, "symbol": p["symbol"],
                    "kind": p["kind"], "start_line": p["start_line"], "end_line": p["end_line"],
                    "split": split, "doc_words": len(p["query"].split()),
                    "code_lines": p["code"].count("\n") + 1,
                }
                writer.write(json.dumps(record, ensure_ascii=False))
                stats.pairs += 1
                stats.by_language[language] = stats.by_language.get(language, 0) + 1
                stats.by_split[split] = stats.by_split.get(split, 0) + 1
            if progress is not None:
                progress(done, stats.pairs)
        if pool is not None:
            pool.close()
            pool.join()
            pool = None
        writer.commit()
    except BaseException:
        if pool is not None:
            pool.terminate()
            pool.join()
        writer.abort()
        raise
    for reason, n in walk_stats.skipped.items():
        stats.skip_file(reason, walk_stats.examples.get(reason, ""), n)
    stats.seconds = time.monotonic() - t0
    stats.by_language = dict(sorted(stats.by_language.items(), key=lambda kv: -kv[1]))
    return stats
