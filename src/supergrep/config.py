"""Typed configuration: one dataclass per concern, each the only source of its defaults.

Precedence is defaults < config file(s) < CLI flags. Config files are TOML with one table per
section (``[walk]``, ``[chunk]``, ``[encode]``, ``[index]``, ``[search]``, ``[daemon]``); they are read from
``$SUPERGREP_HOME/config.toml`` and then from ``.supergrep.toml`` in the project root. Unknown
keys and wrongly typed values are errors that name the file (and line, for TOML syntax errors).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supergrep.errors import ConfigError
from supergrep.home import supergrep_home  # noqa: F401 - re-exported (one definition, stdlib only)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

MiB = 1024 * 1024


def _f(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with its help text in the metadata (the CLI reads it)."""
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


DEFAULT_EXCLUDED_DIRS = (
    ".git", ".hg", ".svn", "node_modules", "target", ".venv", "venv", "env", "dist", "build",
    "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", "vendor",
    "third_party", "bower_components", ".gradle", ".idea", ".next", "coverage", "site-packages",
)


@dataclass
class WalkConfig:
    max_file_bytes: int = _f(1 * MiB, "Skip files larger than this many bytes.")
    include_hidden: bool = _f(False, "Index hidden files and directories (names starting with '.').")
    respect_ignore_files: bool = _f(True, "Honour .gitignore, .ignore, .git/info/exclude and git's global excludes.")
    excluded_dirs: list = _f(list(DEFAULT_EXCLUDED_DIRS), "Directory names never descended into (vendored and generated code).")
    exclude_globs: list = _f([], "Extra gitignore-style patterns to leave out of the index.")
    languages: list = _f([], "Only index these languages (names as in `-t`); empty means all.")


@dataclass
class ChunkConfig:
    max_chunk_lines: int = _f(60, "Definitions longer than this are split into overlapping pieces.")
    overlap_lines: int = _f(8, "Lines shared by consecutive pieces of a split definition.")
    window_lines: int = _f(40, "Window size for files without a grammar (prose, config).")


@dataclass
class EncodeConfig:
    device: str = _f("auto", "Where to run the model: auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps.")
    batch_tokens: int = _f(0, "Padded-token budget of one encoding batch (inputs are sorted by length first); 0: 8192 on CPU, 131072 on a GPU.")
    threads: int = _f(0, "CPU threads for encoding; 0 lets the framework decide.")
    commit_chunks: int = _f(1024, "Chunks per committed batch while indexing (a crash loses at most one batch of work).")
    prepare_ahead: int = _f(-1, "Batches an index run reads, parses, chunks and tokenises ahead, in a background thread, while the current one is encoded and written; 0: all in one thread; -1 (auto): 1 when the model runs on a GPU, 0 on a CPU (whose cores the model's own threads already take: the thread measured no faster there).")
    backend: str = _f("auto", "torch, mlx, onnx or auto: onnx for `supergrep export onnx` directories and, on a CPU-only machine with onnxruntime, the default model's int8 ONNX form (exported once); otherwise torch if it is installed, else mlx.")
    vector_dtype: str = _f("float16", "How a new index stores token vectors: float16, or int8 with one scale per vector (half the bytes; `index --force` to change an existing index).")


@dataclass
class IndexConfig:
    store: str = _f("auto", "Vector store: exact (float16), compressed (centroid + residual codes, candidate generation; docs/architecture.md), or auto (exact until compress_above vectors, then compressed).")
    compress_above: int = _f(500_000, "With store = auto: convert the index to the compressed store once it holds this many token vectors.")
    nbits: int = _f(4, "Compressed store: residual bits per coded component (1, 2 or 4).")
    components: int = _f(0, "Compressed store: 0 codes every dimension of a token's residual; N > 0 codes its coordinates on the residuals' N principal axes (a multiple of 8; docs/benchmarks.md, \"Rotated residuals\").")
    pool_factor: float = _f(1.0, "Compressed store: merge similar document tokens to about n / pool_factor vectors (1 = off).")
    centroids: int = _f(0, "Compressed store: number of k-means centroids; 0 picks from the index size.")
    drift_ratio: float = _f(1.5, "Compressed store: fit new centroids for a batch whose reconstruction error exceeds this multiple of the training error.")


@dataclass
class SearchConfig:
    mode: str = _f("hybrid", "semantic, lexical or hybrid.")
    limit: int = _f(10, "Number of results.")
    fusion: str = _f("score", "How hybrid mode fuses the rankings: score (min-max MaxSim + weight * BM25/max BM25) or rrf.")
    rrf_k: int = _f(60, "The k of reciprocal-rank fusion: 1/(k + rank).")
    semantic_weight: float = _f(1.0, "Weight of the semantic (MaxSim) scores in hybrid fusion.")
    lexical_weight: float = _f(0.15, "Weight of the lexical (BM25) scores in hybrid fusion (see docs/quality.md for how it was chosen).")
    candidates: int = _f(200, "How many results of each scorer enter hybrid fusion.")
    group_parts: bool = _f(True, "One result per definition: a function split into several chunks is shown once, by its best-scoring part (false: every part is a result of its own).")
    class_penalty: float = _f(0.1, "Hybrid score fusion: subtract this from the fused score of class chunks (a class's header and docstring outrank the method that does what a query describes; 0: off; chosen on eval/dev, docs/quality.md).")
    test_penalty: float = _f(0.2, "Hybrid score fusion: subtract this from the fused score of chunks in test code (tests/ dirs, test_*.py, *_test.go, *.spec.ts, ...) unless the query names tests (0: off; chosen on eval/dev, docs/quality.md).")
    cache_bytes: int = _f(0, "Keep up to this many bytes of float32 vectors in memory between queries (long-lived processes: eval, daemon).")
    exact: bool = _f(False, "Score every chunk (no candidate generation), also on a compressed index.")
    nprobe: int = _f(16, "Compressed store: centroids probed per query token to generate candidates (docs/benchmarks.md, \"Integer scoring\").")
    ncandidates: int = _f(0, "Compressed store: candidates scored by centroid interaction (0 skips that stage).")
    rerank: int = _f(160, "Compressed store: candidates re-ranked with exact MaxSim over the decoded vectors (at least the result count; docs/benchmarks.md, \"Equally spaced residual levels\").")
    integer_scores: bool = _f(True, "Compressed store: score with 8-bit integer products (query-centroid scores and the re-rank; ~1.5-2x faster searches, scores within ~1e-3 of float32; false: float32).")


@dataclass
class DaemonConfig:
    debounce_ms: int = _f(200, "The watcher re-indexes once a burst of file changes has been quiet this long.")
    max_delay_ms: int = _f(1000, "... and at the latest this long after the burst's first change.")
    max_paths: int = _f(256, "A burst touching more files than this re-walks the project instead of checking each path.")
    cache_bytes: int = _f(2048 * MiB, "float32 token vectors the daemon keeps in memory per project (0: cast float16 per query, ~2x slower MaxSim).")
    search_threads: int = _f(0, "Semantic and hybrid searches that scan vectors at once (others queue; lexical ones never wait); 0: one per CPU core.")
    rescan_s: int = _f(600, "Walk every registered project this often, for changes the watcher missed (0: never).")
    preload: bool = _f(True, "Load the default model when the daemon starts, so the first semantic search is warm.")
    mirror_max_chunks: int = _f(200_000, "Keep each project's catalog in memory (BM25 statistics: SQLite FTS5's scores bit for bit, ~10x faster; each chunk's path, kind, symbol, part) for projects of at most this many chunks (~8 B per term occurrence + ~200 B per chunk; 0: always ask SQLite; docs/daemon.md).")


@dataclass
class Config:
    walk: WalkConfig = field(default_factory=WalkConfig)
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    encode: EncodeConfig = field(default_factory=EncodeConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _coerce(section: str, name: str, value: Any, default: Any, path: Path) -> Any:
    want = type(default)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    if isinstance(value, want) and not (want is int and isinstance(value, bool)):
        return value
    raise ConfigError(
        f"{path}: [{section}] {name} must be {want.__name__}, got {type(value).__name__} {value!r}"
    )


def apply_overrides(cfg: Config, data: dict, path: Path) -> Config:
    """Apply a parsed TOML mapping onto ``cfg`` in place, validating every key and type."""
    for section, values in data.items():
        sub = getattr(cfg, section, None) if section in {f.name for f in dataclasses.fields(cfg)} else None
        if sub is None:
            known = ", ".join(f.name for f in dataclasses.fields(cfg))
            raise ConfigError(f"{path}: unknown section [{section}] (known: {known})")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: '{section}' must be a table like [{section}]")
        names = {f.name: f for f in dataclasses.fields(sub)}
        for name, value in values.items():
            if name not in names:
                raise ConfigError(
                    f"{path}: unknown key '{name}' in [{section}] (known: {', '.join(names)})"
                )
            value = _coerce(section, name, value, getattr(sub, name), path)
            check = _VALUE_CHECKS.get((section, name))
            if check is not None and not check[0](value):
                raise ConfigError(f"{path}: [{section}] {name} must be {check[1]}, got {value!r}")
            setattr(sub, name, value)
    return cfg


# Values a type check does not catch and that would otherwise fail only deep in an index build.
_VALUE_CHECKS = {
    ("index", "nbits"): (lambda v: v in (1, 2, 4), "1, 2 or 4"),
    ("index", "components"): (lambda v: v >= 0 and v % 8 == 0, "0 or a positive multiple of 8"),
}


def load_config(root: Path | None = None, extra: Path | None = None) -> Config:
    """Defaults, then ``$SUPERGREP_HOME/config.toml``, then ``ROOT/.supergrep.toml``, then ``extra``."""
    cfg = Config()
    candidates = [supergrep_home() / "config.toml"]
    if root is not None:
        candidates.append(Path(root) / ".supergrep.toml")
    if extra is not None:
        if not Path(extra).is_file():
            raise ConfigError(f"config file {extra} does not exist")
        candidates.append(Path(extra))
    for path in candidates:
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}; fix the file or remove it") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text; fix the file or remove it") from None
        apply_overrides(cfg, data, path)
    return cfg
