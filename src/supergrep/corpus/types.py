"""The plain records that cross layer boundaries: a source file and the chunks cut from it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """One file found by the walker.

    Attributes:
        path: POSIX path relative to the walked root (the index key).
        abspath: Absolute path on disk.
        language: Language name from the language table, or None for plain text.
        size: Size in bytes when it was statted.
        mtime_ns: Modification time in nanoseconds when it was statted.
    """

    path: str
    abspath: str
    language: str | None
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Chunk:
    """A searchable piece of a file: a definition, a piece of a large one, or top-level code.

    Attributes:
        path: POSIX path relative to the project root.
        language: Language name ("python", ...) or "text".
        symbol: Qualified name (``Class.method``, ``Type::method``); "" for top-level code and windows.
        kind: "function", "method", "class", "module" (code between definitions), "window", ...
        start_line: 1-based first line, inclusive (decorators and doc comments included).
        end_line: 1-based last line, inclusive.
        text: The chunk's source text. A container (class) holds its header and fields; its
            methods are chunks of their own and are left out of its text.
        part: 0 for a whole definition; 1, 2, ... for the pieces of a split one.
    """

    path: str
    language: str
    symbol: str
    kind: str
    start_line: int
    end_line: int
    text: str
    part: int = 0

    @property
    def n_lines(self) -> int:
        return self.end_line - self.start_line + 1
