"""The language table: one row per language, and the only place that names a language.

A row says which files belong to the language (extensions, file names), which tree-sitter
grammar parses it (from ``tree-sitter-language-pack``, which bundles its grammars), and which
syntax nodes become chunks. The walker and chunker never mention a specific language.

Row fields, in the order the chunker uses them:

- ``definitions``: node type -> chunk kind. Every such node becomes a chunk.
- ``containers``: definition node types whose nested definitions become chunks of their own
  (a class chunk keeps its header and fields; its methods are separate chunks).
- ``wrappers``: node types that wrap one definition and widen its span (Python decorators,
  ``export`` statements, C++ templates). The chunk takes the wrapper's span.
- ``leading``: sibling node types glued onto the definition that follows them with no blank
  line between (doc comments, Rust ``#[attributes]``).
- ``name_of``: optional ``(node, source_bytes) -> str | None`` for grammars where the name is
  not the node's ``name`` field; returning None for a definition node makes it an ordinary node.
- ``scope_separator``: joins qualified names (``Class.method`` or ``Type::method``).
- ``splitter``: "tree-sitter" (default when a grammar is set), "declarations" (a line-based
  splitter on ``declaration_keywords``, for languages whose grammar does not ship offline) or
  "headings" (Markdown sections) or "lines" (fixed windows, for other prose and unknown text).
- ``skiplist``: tokens dropped from document embeddings. Empty by default: punctuation carries
  meaning in code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

NameFn = Callable[[Any, bytes], "str | None"]


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    extensions: tuple[str, ...] = ()
    filenames: tuple[str, ...] = ()
    grammar: str | None = None
    definitions: Mapping[str, str] = field(default_factory=dict)
    containers: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()
    leading: frozenset[str] = frozenset()
    name_of: NameFn | None = None
    scope_separator: str = "."
    splitter: str = "tree-sitter"
    declaration_keywords: tuple[str, ...] = ()
    skiplist: tuple[str, ...] = ()


def _text(node: Any, src: bytes) -> str:
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def field_name(node: Any, src: bytes) -> str | None:
    """The text of the node's ``name`` field (most grammars)."""
    name = node.child_by_field_name("name")
    return _text(name, src) if name is not None else None


# Rows are kept sorted by name. A new language is one row here plus fixtures in
# tests/corpus/fixtures/<lang>/ (see docs/architecture.md).
LANGUAGES: tuple[LanguageSpec, ...] = (
    LanguageSpec(
        name="markdown",
        extensions=(".md", ".markdown", ".mdx"),
        splitter="headings",
    ),
    LanguageSpec(
        name="python",
        extensions=(".py", ".pyi", ".pyw"),
        grammar="python",
        definitions={
            "function_definition": "function",
            "class_definition": "class",
        },
        containers=frozenset({"class_definition"}),
        wrappers=frozenset({"decorated_definition"}),
    ),
    LanguageSpec(
        name="text",
        extensions=(".txt", ".text", ".rst", ".adoc", ".cfg", ".ini", ".toml", ".yaml", ".yml", ".json"),
        filenames=("README", "LICENSE", "Makefile", "Dockerfile"),
        splitter="lines",
    ),
)

_BY_NAME: dict[str, LanguageSpec] = {spec.name: spec for spec in LANGUAGES}
_BY_EXTENSION: dict[str, LanguageSpec] = {}
_BY_FILENAME: dict[str, LanguageSpec] = {}
for _spec in LANGUAGES:
    for _ext in _spec.extensions:
        _BY_EXTENSION.setdefault(_ext.lower(), _spec)
    for _fname in _spec.filenames:
        _BY_FILENAME.setdefault(_fname, _spec)


def language_names() -> list[str]:
    """Every language name, sorted (the values ``-t/--type`` accepts)."""
    return sorted(_BY_NAME)


def get_language(name: str) -> LanguageSpec | None:
    return _BY_NAME.get(name)


def detect_language(path: str) -> LanguageSpec | None:
    """The row for a file name, or None when the file is not of a known language.

    >>> detect_language("src/app/models.py").name
    'python'
    >>> detect_language("photo.jpeg") is None
    True
    """
    p = PurePosixPath(path)
    return _BY_FILENAME.get(p.name) or _BY_EXTENSION.get(p.suffix.lower())
