"""Per-language chunking: each fixture under ``fixtures/<lang>/`` cuts into exactly these chunks.

Each expected row is ``(symbol, kind, start_line, end_line)`` in the order ``chunk_source``
returns them (definitions in source order, containers before their members, then the
top-level "module" code). Regenerate a list by printing the chunker's output and review it
line by line against the fixture before pasting it here.
"""

from __future__ import annotations

from pathlib import Path

from supergrep.config import ChunkConfig
from supergrep.corpus.chunk import _parser, chunk_source, grammar_available
from supergrep.corpus.languages import detect_language

FIXTURES = Path(__file__).parent / "fixtures"
# Large enough that no fixture definition is split: these tests are about spans, not pieces.
CFG = ChunkConfig(max_chunk_lines=200)


def chunks_of(rel: str, language: str):
    path = FIXTURES / rel
    spec = detect_language(path.name)
    assert spec is not None and spec.name == language
    text = path.read_text(encoding="utf-8")
    if spec.grammar:
        assert grammar_available(spec.grammar), f"grammar {spec.grammar!r} does not load"
        assert not _parser(spec.grammar).parse(text.encode()).root_node.has_error, "the fixture should be valid code"
    chunks = chunk_source(rel, text, cfg=CFG)
    lines = text.split("\n")
    for c in chunks:
        assert c.language == language
        assert c.part == 0
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert c.text.split("\n")[0] == lines[c.start_line - 1]
    return [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks]


def test_python():
    """Python keeps its own rule: decorators are part of a definition, comments above it are not
    (the evaluation counts a hit by ``ast`` line numbers with slack for decorators only)."""
    assert chunks_of("python/inventory.py", "python") == [
        ("normalize_sku", "function", 13, 15),
        ("parse_quantity", "function", 19, 23),
        ("Item", "class", 26, 33),
        ("Item.available", "method", 35, 37),
        ("Item.reserve", "method", 39, 43),
        ("Item.Meta", "class", 45, 46),
        ("Item.Meta.describe", "method", 48, 49),
        ("Inventory", "class", 52, 52),
        ("Inventory.__init__", "method", 53, 54),
        ("Inventory.key", "method", 56, 59),
        ("Inventory.add", "method", 61, 69),
        ("Inventory.needs_reorder", "method", 71, 72),
        ("log_calls", "function", 75, 76),
        ("", "module", 1, 10),
        ("", "module", 18, 18),
        ("", "module", 79, 82),
    ]


def test_python_spans_match_ast():
    """Each Python chunk starts on its ``def``/``class`` line as ``ast`` reports it, or at most
    3 lines above (its decorators); a function chunk ends where ``ast`` says it ends."""
    import ast

    text = (FIXTURES / "python/inventory.py").read_text(encoding="utf-8")
    chunks = {c.symbol.rsplit(".", 1)[-1]: c for c in chunk_source("inventory.py", text, cfg=CFG) if c.symbol}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name == "audit":
            continue  # ``audit`` is nested in a function: part of its parent's chunk
        c = chunks[node.name]
        assert c.start_line <= node.lineno <= c.start_line + 3, node.name
        if isinstance(node, ast.FunctionDef):
            assert c.end_line == node.end_lineno, node.name


def test_rust():
    """Rust: ``impl Type`` and ``impl Trait for Type`` qualify methods as ``Type::method``; doc
    comments and ``#[attributes]`` glue on; functions in a ``mod`` stay functions."""
    assert chunks_of("rust/geometry.rs", "rust") == [
        ("Point", "struct", 7, 12),
        ("Point", "impl", 14, 26),
        ("Point::new", "method", 15, 18),
        ("Point::distance", "method", 20, 25),
        ("Shape", "enum", 28, 31),
        ("Area", "trait", 33, 40),
        ("Area::is_empty", "method", 37, 39),
        ("Shape", "impl", 42, 49),
        ("Shape::area", "method", 43, 48),
        ("Vec", "impl", 51, 55),
        ("Vec::area", "method", 52, 54),
        ("Point", "impl", 57, 61),
        ("Point::fmt", "method", 58, 60),
        ("convert", "module", 63, 69),
        ("convert::from_polar", "function", 66, 68),
        ("point", "macro", 71, 75),
        ("Polygon", "type", 77, 77),
        ("tests", "module", 79, 88),
        ("tests::distance_is_symmetric", "function", 83, 87),
        ("", "module", 1, 5),
    ]


def test_javascript():
    """JavaScript: functions bound to names (``const f = () => {}``, class fields, prototype
    assignments) are definitions; ``export`` and JSDoc comments widen the span."""
    assert chunks_of("javascript/cart.js", "javascript") == [
        ("roundCents", "function", 6, 12),
        ("percentOff", "function", 14, 14),
        ("clamp", "function", 16, 18),
        ("lineIds", "function", 20, 22),
        ("Cart", "class", 24, 54),
        ("Cart.constructor", "method", 29, 31),
        ("Cart.add", "method", 33, 39),
        ("Cart.subtotal", "method", 41, 43),
        ("Cart.total", "method", 45, 47),
        ("Cart.fromJSON", "method", 49, 53),
        ("Legacy", "function", 56, 58),
        ("Legacy.describe", "method", 60, 62),
        ("render", "function", 65, 67),
        ("", "module", 1, 4),
        ("", "module", 64, 64),
        ("", "module", 68, 70),
    ]


def test_typescript():
    """TypeScript: interfaces, type aliases, enums, abstract classes, namespaces; member
    decorators and doc comments glue onto the method below them."""
    assert chunks_of("typescript/scheduler.ts", "typescript") == [
        ("JobId", "type", 6, 6),
        ("Job", "interface", 8, 12),
        ("State", "enum", 14, 18),
        ("byPriority", "function", 22, 25),
        ("sleep", "function", 27, 28),
        ("logged", "function", 30, 32),
        ("Runner", "class", 34, 40),
        ("Runner.describe", "method", 37, 39),
        ("Scheduler", "class", 42, 71),
        ("Scheduler.constructor", "method", 46, 48),
        ("Scheduler.submit", "method", 50, 55),
        ("Scheduler.execute", "method", 57, 66),
        ("Scheduler.onDone", "method", 68, 70),
        ("Jobs", "namespace", 73, 77),
        ("Jobs.noop", "function", 74, 76),
        ("Window", "interface", 80, 82),
        ("", "module", 1, 4),
        ("", "module", 20, 20),
        ("", "module", 79, 79),
        ("", "module", 83, 85),
    ]


def test_tsx():
    """.tsx files use the TSX grammar (JSX inside TypeScript) with the TypeScript rules."""
    assert chunks_of("tsx/TodoList.tsx", "tsx") == [
        ("Todo", "interface", 3, 7),
        ("Props", "type", 9, 9),
        ("TodoItem", "function", 11, 16),
        ("TodoList", "function", 18, 34),
        ("TodoStore", "class", 36, 42),
        ("TodoStore.render", "method", 39, 41),
        ("", "module", 1, 1),
        ("", "module", 44, 44),
    ]


def test_go():
    """Go: a method is ``Receiver.Method`` (pointer and type parameters dropped); a ``type`` is a
    struct, interface or plain type, and each spec of a grouped ``type ( ... )`` is its own chunk."""
    assert chunks_of("go/cache.go", "go") == [
        ("Store", "interface", 13, 17),
        ("Key", "type", 20, 21),
        ("clock", "type", 22, 22),
        ("LRU", "struct", 25, 32),
        ("entry", "struct", 34, 38),
        ("New", "function", 40, 48),
        ("LRU.Get", "method", 50, 65),
        ("LRU.Put", "method", 67, 78),
        ("LRU.removeElement", "method", 80, 83),
        ("Pair.Swap", "method", 85, 85),
        ("", "module", 1, 11),
        ("", "module", 19, 19),
        ("", "module", 23, 23),
        ("", "module", 87, 87),
    ]


def test_java():
    """Java: nested records and enums qualify their methods; interface methods without a body
    stay in the interface chunk; annotations are part of the declaration node."""
    assert chunks_of("java/LibraryService.java", "java") == [
        ("LibraryService", "class", 8, 53),
        ("LibraryService.LibraryService", "method", 16, 18),
        ("LibraryService.lend", "method", 20, 28),
        ("LibraryService.overdue", "method", 30, 33),
        ("LibraryService.find", "method", 35, 37),
        ("LibraryService.Loan", "class", 39, 44),
        ("LibraryService.Loan.isOverdue", "method", 41, 43),
        ("LibraryService.Status", "enum", 46, 52),
        ("LibraryService.Status.lendable", "method", 49, 51),
        ("Lending", "interface", 55, 61),
        ("Lending.policy", "method", 58, 60),
        ("", "module", 1, 6),
    ]


def test_c():
    """C: function names come out of declarators (pointers, function pointers); structs are
    definitions only where they have a body; ``typedef struct {...} name`` takes the typedef name."""
    assert chunks_of("c/ringbuf.c", "c") == [
        ("RB_MAX", "macro", 6, 6),
        ("ringbuf", "struct", 8, 14),
        ("rb_stats", "struct", 16, 19),
        ("rb_error", "enum", 21, 21),
        ("rb_new", "function", 25, 36),
        ("rb_free", "function", 38, 42),
        ("rb_used", "function", 44, 47),
        ("rb_put", "function", 49, 58),
        ("rb_get", "function", 60, 68),
        ("rb_get_stats", "function", 70, 70),
        ("rb_callback", "function", 72, 75),
        ("", "module", 1, 5),
        ("", "module", 23, 23),
    ]


def test_cpp():
    """C++: namespaces and classes qualify with ``::``; ``template<>`` wraps; out-of-class
    ``Matrix<T>::transpose`` is a method named without its template arguments."""
    assert chunks_of("cpp/matrix.cpp", "cpp") == [
        ("linalg", "namespace", 6, 62),
        ("linalg::Matrix", "class", 8, 28),
        ("linalg::Matrix::Matrix", "method", 12, 13),
        ("linalg::Matrix::~Matrix", "method", 15, 15),
        ("linalg::Matrix::operator()", "method", 17, 17),
        ("linalg::Matrix::rows", "method", 19, 19),
        ("linalg::Shape", "struct", 30, 35),
        ("linalg::Shape::square", "method", 34, 34),
        ("linalg::Matrix::transpose", "method", 37, 44),
        ("linalg::Matrix::identity", "method", 46, 51),
        ("linalg::detail", "namespace", 53, 58),
        ("linalg::detail::check_shapes", "function", 54, 57),
        ("linalg::Norm", "enum", 60, 60),
        ("main", "function", 64, 67),
        ("", "module", 1, 4),
    ]


def test_swift():
    """Swift: one grammar node covers class/struct/enum/extension/actor, told apart by keyword;
    ``init``/``deinit``/``subscript`` are methods; attributes and doc comments are in the span."""
    assert chunks_of("swift/Playlist.swift", "swift") == [
        ("Playable", "protocol", 3, 8),
        ("PlaybackError", "enum", 10, 13),
        ("Song", "struct", 15, 25),
        ("Song.play", "method", 21, 24),
        ("Playlist", "class", 27, 62),
        ("Playlist.init", "method", 32, 34),
        ("Playlist.deinit", "method", 36, 38),
        ("Playlist.add", "method", 45, 51),
        ("Playlist.merged", "method", 53, 57),
        ("Playlist.subscript", "method", 59, 61),
        ("Playlist", "extension", 64, 70),
        ("Playlist.shuffled", "method", 67, 69),
        ("formatDuration", "function", 72, 74),
        ("", "module", 1, 1),
        ("", "module", 76, 76),
    ]


def test_objc():
    """Objective-C: ``@interface`` is a class chunk, ``@implementation`` an impl chunk whose
    methods are named by selector (``download:retries:``); categories add to the class."""
    assert chunks_of("objc/DownloadManager.m", "objc") == [
        ("DownloadDelegate", "protocol", 5, 10),
        ("DownloadManager", "class", 12, 18),
        ("DownloadManager", "impl", 20, 51),
        ("DownloadManager.sharedManager", "method", 24, 31),
        ("DownloadManager.init", "method", 33, 38),
        ("DownloadManager.download:retries:", "method", 40, 45),
        ("DownloadManager.activeCount", "method", 47, 49),
        ("DownloadManager", "class", 53, 55),
        ("DownloadManager", "impl", 57, 61),
        ("DownloadManager.purge", "method", 58, 60),
        ("MakeURL", "function", 63, 66),
        ("", "module", 1, 3),
    ]


def test_ruby():
    """Ruby: modules and classes nest with ``::``, methods join with ``.``; ``def self.x`` and
    ``class << self`` methods belong to the class."""
    assert chunks_of("ruby/billing.rb", "ruby") == [
        ("Billing", "module", 5, 50),
        ("Billing::Error", "class", 9, 9),
        ("Billing::Invoice", "class", 11, 43),
        ("Billing::Invoice.initialize", "method", 15, 18),
        ("Billing::Invoice.total", "method", 20, 24),
        ("Billing::Invoice.parse", "method", 26, 28),
        ("Billing::Invoice.blank", "method", 31, 33),
        ("Billing::Invoice.==", "method", 36, 36),
        ("Billing::Invoice.overdue?", "method", 40, 42),
        ("Billing::Reminders", "module", 45, 49),
        ("Billing::Reminders.due", "method", 46, 48),
        ("Billing::LineItem", "class", 52, 56),
        ("Billing::LineItem.to_s", "method", 53, 55),
        ("format_money", "function", 58, 60),
        ("", "module", 1, 3),
        ("", "module", 62, 62),
    ]


def test_lean():
    """Lean: no Lean grammar ships offline (``get_parser("lean")`` fails), so Lean files go
    through the line-based "declarations" splitter: a chunk starts at each ``def``/``theorem``/
    ``lemma``/``structure``/``instance``/... line (after ``@[attr]`` and modifiers such as
    ``private``), takes in the doc comments and attribute lines directly above it, and ends at
    the next declaration or at a top-level ``open``/``variable``/``section``/``end``/``#eval``
    line, which is "module" code. ``namespace X`` ... ``end X`` qualifies names as ``X.name``;
    sections do not. Anonymous ``instance``/``example`` declarations have an empty symbol."""
    assert chunks_of("lean/Queue.lean", "lean") == [
        ("", "module", 1, 10),
        ("Queue.Q", "structure", 12, 16),
        ("", "module", 18, 18),
        ("Queue.empty", "def", 20, 21),
        ("Queue.push", "def", 23, 24),
        ("Queue.normalize", "def", 26, 30),
        ("Queue.pop?", "def", 32, 35),
        ("Queue.toList", "def", 37, 37),
        ("Queue.toList_empty", "theorem", 39, 39),
        ("Queue.toList_push", "theorem", 41, 43),
        ("", "instance", 45, 45),
        ("", "module", 47, 47),
        ("Queue.size", "def", 49, 49),
        ("Queue.size_push", "lemma", 51, 53),
        ("", "module", 55, 57),
        ("", "example", 59, 59),
        ("", "module", 61, 61),
    ]
