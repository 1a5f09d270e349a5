"""Bring an index up to date with its project: incremental, batched, crash-safe.

A file is re-read only when its size or mtime changed, and re-embedded only when its content
hash changed; even then, chunks whose text is unchanged (anywhere in the index) reuse their
stored vectors, so editing one function re-encodes about one chunk. Deleted and renamed
files leave the index. Work is committed in batches, each one SQLite transaction that also
records the batch's vector segment: ``kill -9`` at any moment leaves the last committed state,
and the next run carries on from there.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from supergrep.config import Config
from supergrep.corpus.chunk import chunk_source, split_chunk
from supergrep.corpus.documents import document_text
from supergrep.corpus.types import Chunk, Source
from supergrep.corpus.walk import FileContent, SkipFile, WalkStats, read_source, source_at, walk
from supergrep.errors import IndexMissingError, UsageError
from supergrep.index.format import crashpoint
from supergrep.index.project import Index, fts_rows

if TYPE_CHECKING:
    from supergrep.encoder.encoder import Encoder

log = logging.getLogger(__name__)


class Progress(Protocol):
    def start(self, total_files: int) -> None: ...
    def advance(self, n_files: int) -> None: ...
    def finish(self) -> None: ...


@dataclass
class IndexReport:
    """What an index run did. ``lines_indexed`` counts the lines of the files (re)embedded."""

    files: int = 0
    chunks: int = 0
    files_indexed: int = 0
    files_removed: int = 0
    files_unchanged: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    lines_indexed: int = 0
    seconds: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def lines_per_s(self) -> float:
        return self.lines_indexed / self.seconds if self.seconds > 0 else 0.0


def model_record(encoder: Encoder) -> dict:
    spec = encoder.spec
    return {"name": spec.name, "fingerprint": encoder.fingerprint, "dim": encoder.dim,
            "layout": spec.layout, "path": str(spec.path), "form": spec.form,
            "compatible": encoder.compatible_fingerprints[1:]}


@dataclass
class _Pending:
    source: Source
    content: FileContent
    chunks: list[Chunk]
    old_id: int | None


@dataclass
class _Batch:
    """Files ready to encode and commit: what needs no index access is done (chunks split to
    the model's length, their texts, token counts, text hashes and FTS rows)."""

    pending: list[_Pending]
    per_file: list[tuple[list[Chunk], list[str], list[int]]]  # (chunks, texts, token counts) per file
    hashes: list[list[str]]
    fts: list[list[tuple[str, str, str]]]


def _count_lines(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


class _Run:
    def __init__(self, index: Index, encoder: Encoder, cfg: Config, progress: Progress | None):
        self.index, self.encoder, self.cfg, self.progress = index, encoder, cfg, progress
        self.report = IndexReport()
        self.max_tokens = encoder.spec.settings.document_max_tokens

    def _prepare(self, chunks: list[Chunk]) -> tuple[list[Chunk], list[str], list[int]]:
        """Split chunks the model would truncate, and return (chunks, texts, token counts)."""
        texts = [document_text(c) for c in chunks]
        counts = self.encoder.count_tokens(texts, "document")
        budget = max(8, int(self.max_tokens * 0.9))
        out_chunks: list[Chunk] = []
        for c, n in zip(chunks, counts, strict=True):
            if n > self.max_tokens:
                out_chunks.extend(split_chunk(c, math.ceil(n / budget), self.cfg.chunk.overlap_lines // 2))
            else:
                out_chunks.append(c)
        if len(out_chunks) != len(chunks):
            texts = [document_text(c) for c in out_chunks]
            counts = self.encoder.count_tokens(texts, "document")
        return out_chunks, texts, [min(n, self.max_tokens) for n in counts]

    def prepare(self, pending: list[_Pending]) -> _Batch:
        """Everything about a batch that needs neither the index nor the model's forward
        (runs in the background thread of ``_apply``)."""
        per_file = [self._prepare(p.chunks) for p in pending]
        hashes = [[hashlib.sha1(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
                  for _, texts, _ in per_file]
        fts = [fts_rows(p.source.path, chunks) for p, (chunks, _, _) in zip(pending, per_file, strict=True)]
        return _Batch(pending, per_file, hashes, fts)

    def flush(self, batch: _Batch) -> None:
        pending, per_file, hashes = batch.pending, batch.per_file, batch.hashes
        if not pending:
            return
        idx = self.index
        flat_hashes = [h for hs in hashes for h in hs]
        flat_texts = [t for _, texts, _ in per_file for t in texts]

        # Vectors: reuse what the index already has for identical text, encode the rest once.
        known = idx.chunks_by_hash(list(set(flat_hashes)))
        vectors_by_hash: dict[str, np.ndarray] = {}
        if known:
            hs = list(known)
            for h, v in zip(hs, idx.store.get(idx.conn, [known[h] for h in hs]), strict=True):
                vectors_by_hash[h] = v
        todo: dict[str, str] = {}
        for h, t in zip(flat_hashes, flat_texts, strict=True):
            if h not in vectors_by_hash:
                todo.setdefault(h, t)
        if todo:
            encoded = self.encoder.encode_documents(list(todo.values()))
            vectors_by_hash.update(zip(todo.keys(), encoded, strict=True))
        self.report.chunks_embedded += len(todo)
        self.report.chunks_reused += len(flat_hashes) - len(todo)

        conn = idx.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            new_ids: list[int] = []
            new_vecs: list[np.ndarray] = []
            stored_form: list[bool] = []  # vectors reused from the store are already pooled
            old = [p.old_id for p in pending if p.old_id is not None]
            idx.remove_files(old)
            for p, (chunks, _, counts), hs, fts in zip(pending, per_file, hashes, batch.fts, strict=True):
                ids = idx.add_file(p.source.path, p.source.language, p.source.size, p.source.mtime_ns,
                                   p.content.sha256, _count_lines(p.content.text), chunks, hs, counts, fts)
                new_ids += ids
                new_vecs += [vectors_by_hash[h] for h in hs]
                stored_form += [h in known for h in hs]
            idx.store.add(conn, new_ids, new_vecs, stored_form)
            idx.set_meta("updated", repr(time.time()))
            crashpoint("batch_before_commit")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        crashpoint("batch_committed")
        self.report.files_indexed += len(pending)
        self.report.lines_indexed += sum(_count_lines(p.content.text) for p in pending)
        if self.progress:
            self.progress.advance(len(pending))


def maybe_compress(index: Index, cfg: Config) -> dict | None:
    """Convert an exact index to the compressed store when the config asks for it: ``store =
    "compressed"``, or ``"auto"`` once it holds ``compress_above`` token vectors. The caller
    holds the write lock. Returns the conversion's figures, or None when nothing changed."""
    from supergrep.index.compressed import convert

    want = cfg.index.store
    if want not in ("auto", "exact", "compressed"):
        raise UsageError(f"[index] store must be auto, exact or compressed, not {want!r}")
    kind = index.store_kind
    if kind == "compressed":
        if want == "exact":
            raise UsageError(f"{index.root}: the index is compressed; rebuild it with `supergrep index --force` "
                             "to store exact vectors")
        return None
    n = index.store.stats(index.conn)["vectors"]
    if want == "compressed" or (want == "auto" and n >= cfg.index.compress_above):
        index.configure(index_cfg=cfg.index, search_cfg=cfg.search)
        info = convert(index.conn, index.dir, index.store.dim, index.compress,
                       vector_dtype=index.manifest.vector_dtype)
        index.drop_store()  # the next access opens the compressed store
        return info
    return None


def update_index(index: Index, encoder: Encoder, cfg: Config | None = None, force: bool = False,
                 progress: Progress | None = None) -> IndexReport:
    """Index ``index.root`` with ``encoder``, incrementally.

    Args:
        index: The project's index (created when missing).
        encoder: The model; an existing index built with another model is an error unless
            ``force`` rebuilds it.
        cfg: Walk and chunk settings.
        force: Rebuild from scratch.
        progress: Receives file counts as batches commit.

    Raises:
        ModelMismatchError: The index was built with another model (and not ``force``).
        IndexBusyError: Another process keeps the write lock for too long.
    """
    cfg = cfg or Config()
    t0 = time.perf_counter()
    model = model_record(encoder)
    with index.write_lock():
        if index.exists():
            manifest = index.manifest
            if manifest.root != str(index.root):
                raise UsageError(
                    f"index dir {index.dir} belongs to {manifest.root}, not {index.root}; "
                    "pick another --index-dir"
                )
            if force:
                index.wipe()
            else:
                index.check_model(model["fingerprint"], model["name"], model["compatible"])
        if not index.exists():
            index.wipe()  # leftovers of a crash during creation
            index.create(model, cfg.encode.vector_dtype)
        index.configure(index_cfg=cfg.index, search_cfg=cfg.search)
        run = _Run(index, encoder, cfg, progress)
        index.store.maintain(index.conn)  # clears orphans a crash may have left

        stats = WalkStats()
        known = index.file_states()
        seen: set[str] = set()
        changed: list[tuple[Source, int | None]] = []
        for src in walk(index.root, cfg.walk, stats, set(cfg.walk.languages) or None):
            seen.add(src.path)
            state = known.get(src.path)
            if state is not None and state[1] == src.size and state[2] == src.mtime_ns:
                run.report.files_unchanged += 1
                continue
            changed.append((src, state[0] if state else None))

        removed = [known[p][0] for p in known if p not in seen]
        return _apply(index, run, cfg, stats, known, changed, removed, progress, t0)


def update_paths(index: Index, encoder: Encoder, cfg: Config | None, paths: list[str]) -> IndexReport:
    """Bring just ``paths`` up to date, without walking the project (the file watcher's path).

    Each root-relative path is judged by the walk's own rules (``corpus.walk.source_at``): a
    file that is new or changed is (re-)indexed, one that is gone, ignored or no longer
    indexable leaves the index, an unchanged one costs a stat. Same batching, vector reuse and
    crash safety as ``update_index``.

    Args:
        paths: Root-relative paths with ``/`` separators (files; directories are ignored).

    Raises:
        IndexMissingError: There is no index yet (run ``update_index``).
        WalkRequired: A path goes through a symbolic link (run ``update_index``).
        ModelMismatchError: The index was built with another model.
    """
    cfg = cfg or Config()
    t0 = time.perf_counter()
    model = model_record(encoder)
    with index.write_lock():
        if not index.exists():
            raise IndexMissingError(f"{index.root} has no index yet; run `supergrep index {index.root}` first")
        index.check_model(model["fingerprint"], model["name"])
        index.configure(index_cfg=cfg.index, search_cfg=cfg.search)
        run = _Run(index, encoder, cfg, None)
        stats = WalkStats()
        wanted = sorted(set(paths))
        known = index.file_states(wanted)
        languages = set(cfg.walk.languages) or None
        changed: list[tuple[Source, int | None]] = []
        removed: list[int] = []
        for rel in wanted:
            src = source_at(index.root, rel, cfg.walk, stats, languages)
            state = known.get(rel)
            if src is None:
                if state is not None:
                    removed.append(state[0])
                continue
            if state is not None and state[1] == src.size and state[2] == src.mtime_ns:
                run.report.files_unchanged += 1
                continue
            changed.append((src, state[0] if state else None))
        if not changed and not removed:
            rep = run.report
            rep.seconds = time.perf_counter() - t0
            return rep
        return _apply(index, run, cfg, stats, known, changed, removed, None, t0)


_Event = tuple[str, Any]


def _events(run: _Run, cfg: Config, changed: list[tuple[Source, int | None]],
            known: dict[str, tuple[int, int, int, str]]) -> Iterator[_Event]:
    """Read and chunk ``changed`` files, in order, as ("skip", (source, reason, old id)),
    ("touched", (file id, source)) and ("batch", _Batch) events: a batch every
    ``commit_chunks`` chunks, prepared up to encoding (``_Run.prepare``), and a last one
    (maybe empty). Touches neither the index nor the model's forward, so that it can run ahead
    in a background thread."""
    pending: list[_Pending] = []
    n_pending = 0
    for src, old_id in changed:
        try:
            content = read_source(src, cfg.walk.max_file_bytes)
        except SkipFile as skip:
            yield "skip", (src, skip.reason, old_id)
            continue
        state = known.get(src.path)
        if state is not None and state[3] == content.sha256:
            yield "touched", (state[0], src)
            continue
        chunks = chunk_source(src.path, content.text, src.language, cfg.chunk)
        pending.append(_Pending(src, content, chunks, old_id))
        n_pending += len(chunks)
        if n_pending >= cfg.encode.commit_chunks:
            yield "batch", run.prepare(pending)
            pending, n_pending = [], 0
    yield "batch", run.prepare(pending)


class _ahead:  # noqa: N801 - used like a generator
    """``events`` produced by a background thread, in the same order, with up to ``depth``
    prepared batches waiting for the consumer (and one more in preparation): the next files are
    read, parsed, chunked and tokenised while
    the indexing thread encodes and commits the current batch (the model's forward, NumPy's
    copies, file writes and SQLite release the GIL). Only the indexing thread touches the
    index, so commits, crash safety and the index's contents are those of the plain loop. An
    exception in the thread is raised in the consumer; closing stops the thread."""

    def __init__(self, events: Iterator[_Event], depth: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.Semaphore(depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(events,), name="sg-index-prepare", daemon=True)
        self._thread.start()

    def _run(self, events: Iterator[_Event]) -> None:
        try:
            for kind, item in events:
                if kind == "batch":
                    while not self._slots.acquire(timeout=0.1):
                        if self._stop.is_set():
                            return
                if self._stop.is_set():
                    return
                self._queue.put((kind, item))
            self._queue.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self._queue.put(("error", exc))

    def __iter__(self) -> _ahead:
        return self

    def __next__(self) -> _Event:
        if self._done:
            raise StopIteration
        kind, item = self._queue.get()
        if kind == "end":
            self._done = True
            raise StopIteration
        if kind == "error":
            self._done = True
            raise item
        if kind == "batch":
            self._slots.release()
        return kind, item

    def close(self) -> None:
        self._done = True
        self._stop.set()
        self._thread.join(timeout=10)


def prepare_ahead(cfg: Config, encoder: Encoder) -> int:
    """``[encode] prepare_ahead``, with -1 (auto) resolved: 1 when the model runs on a GPU
    (or MPS), where the indexing thread mostly waits for the device; 0 on a CPU, where the
    model's threads take every core and a preparing thread only competes with them (measured:
    docs/performance.md, "The index run's host side")."""
    ahead = cfg.encode.prepare_ahead
    if ahead >= 0:
        return ahead
    device = str(getattr(getattr(encoder, "backend", None), "device", "cpu"))
    return 0 if device == "cpu" else 1


def _apply(index: Index, run: _Run, cfg: Config, stats: WalkStats, known: dict[str, tuple[int, int, int, str]],
           changed: list[tuple[Source, int | None]], removed: list[int], progress: Progress | None,
           t0: float) -> IndexReport:
    """Read, chunk, embed and commit ``changed`` files, drop ``removed`` file ids (the caller
    holds the write lock); shared by full updates and the watcher's per-path updates."""
    if progress:
        progress.start(len(changed))
    unreadable: list[int] = []
    touched: list[tuple[int, Source]] = []
    events = _events(run, cfg, changed, known)
    ahead = prepare_ahead(cfg, run.encoder)
    with contextlib.closing(_ahead(events, ahead) if ahead > 0 else events) as stream:
        for kind, item in stream:
            if kind == "skip":
                src, reason, old_id = item
                stats.skip(reason, src.path)
                if old_id is not None:
                    unreadable.append(old_id)
            elif kind == "touched":
                touched.append(item)  # same bytes, new mtime: nothing to embed
                run.report.files_unchanged += 1
            else:
                run.flush(item)
                continue
            if progress:
                progress.advance(1)

    conn = index.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        index.remove_files(removed + unreadable)
        for fid, src in touched:
            index.touch_file(fid, src.size, src.mtime_ns)
        if removed or unreadable or touched:
            index.set_meta("updated", repr(time.time()))
        if index.meta("updated") is None:
            index.set_meta("updated", repr(time.time()))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    index.store.maintain(conn)
    maybe_compress(index, cfg)
    if progress:
        progress.finish()

    rep = run.report
    rep.files_removed = len(removed) + len(unreadable)
    rep.files, rep.chunks = conn.execute(
        "SELECT (SELECT COUNT(*) FROM files), (SELECT COUNT(*) FROM chunks)"
    ).fetchone()
    rep.skipped = dict(stats.skipped)
    rep.seconds = time.perf_counter() - t0
    return rep
