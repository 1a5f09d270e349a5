"""The daemon's core, without its socket: warm models, indexes kept current, searches served.

``Engine.handle(request, notice)`` answers one protocol request (docs/daemon.md) and may be
called from many threads at once:

- one ``SharedEncoder`` per model fingerprint, loaded on first use and kept;
- one ``Project`` per (root, index dir): a pool of index handles that share one vector store,
  so its float32 cache is filled once and read by every thread;
- one updater thread applying the watcher's batches, one project at a time
  (``update_paths`` for files, ``update_index`` when only a walk can tell), then warming the
  store; a damaged index is rebuilt;
- a housekeeping thread: projects whose root came back, a dead file observer, rescans.

``server.py`` (the unix socket) and ``mcp_server.py`` are thin layers over it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from supergrep import __version__
from supergrep.arrays import tune_malloc_for_serving
from supergrep.config import Config, load_config
from supergrep.corpus.languages import language_names
from supergrep.corpus.walk import WalkRequired
from supergrep.daemon import registry
from supergrep.daemon.protocol import error
from supergrep.encoder.encoder import Encoder
from supergrep.encoder.named import default_model, model_of_index
from supergrep.encoder.spec import ModelSpec, resolve_model
from supergrep.errors import (
    IndexBusyError,
    IndexCorruptError,
    IndexMissingError,
    SupergrepError,
    UsageError,
)
from supergrep.index.format import MANIFEST, Manifest, default_index_dir
from supergrep.index.indexer import IndexReport, update_index, update_paths
from supergrep.index.project import Index, find_project_root, search_root
from supergrep.index.render import format_hits, hit_json, search_json
from supergrep.index.search import MODES, Hit, Searcher, SearchFilters

log = logging.getLogger(__name__)

Notice = Callable[[str], None]


class Fallback(Exception):
    """A request the daemon leaves to the caller (who rejects it the way the CLI does)."""


class SharedEncoder:
    """One loaded model for every thread of the daemon.

    A lock serialises the tokenizer and the forward pass (a Hugging Face fast tokenizer raises
    "Already borrowed" when two threads use it at once). Documents are encoded in slices of
    similar length, and a slice waits while a query is waiting, so a search never sits behind
    a whole indexing batch.
    """

    DOC_SLICE = 32

    def __init__(self, encoder: Encoder, loaded_s: float = 0.0):
        self.encoder = encoder
        self.loaded_s = loaded_s
        self._lock = threading.Lock()
        self._meta = threading.Lock()
        self._queries_waiting = 0
        self._local = threading.local()

    @property
    def spec(self) -> ModelSpec:
        return self.encoder.spec

    @property
    def name(self) -> str:
        return self.encoder.name

    @property
    def dim(self) -> int:
        return self.encoder.dim

    @property
    def fingerprint(self) -> str:
        return self.encoder.fingerprint

    @property
    def compatible_fingerprints(self) -> list[str]:
        """This model's and its compatible forms' fingerprints (an index built with the float
        model is searched and updated by its int8/ONNX form and the other way round)."""
        return self.encoder.compatible_fingerprints

    @property
    def device(self) -> str:
        return str(getattr(self.encoder.backend, "device", "cpu"))

    def last_query_ms(self) -> float:
        """Time the calling thread's last ``encode_queries`` took, lock wait included."""
        return getattr(self._local, "query_ms", 0.0)

    def count_tokens(self, texts: list[str], role: Any = "document") -> list[int]:
        out: list[int] = []
        for start in range(0, len(texts), 256):
            self._yield_to_queries()
            with self._lock:
                out += self.encoder.count_tokens(texts[start : start + 256], role)
        return out

    def encode_queries(self, texts: list[str]):
        t0 = time.perf_counter()
        with self._meta:
            self._queries_waiting += 1
        try:
            with self._lock:
                return self.encoder.encode_queries(texts)
        finally:
            with self._meta:
                self._queries_waiting -= 1
            self._local.query_ms = (time.perf_counter() - t0) * 1000

    def encode_documents(self, texts: list[str], progress: Callable[[int], None] | None = None):
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths per slice
        out: list = [None] * len(texts)
        for start in range(0, len(order), self.DOC_SLICE):
            part = order[start : start + self.DOC_SLICE]
            self._yield_to_queries()
            with self._lock:
                vectors = self.encoder.encode_documents([texts[i] for i in part])
            for i, v in zip(part, vectors, strict=True):
                out[i] = v
            if progress is not None:
                progress(len(part))
        return out

    def _yield_to_queries(self) -> None:
        deadline = time.monotonic() + 1.0
        while self._queries_waiting and time.monotonic() < deadline:
            time.sleep(0.002)


class Project:
    """One (root, index dir) the engine serves: index handles, update state, watch state."""

    MAX_IDLE_HANDLES = 32

    def __init__(self, root: Path, index_dir: Path | None, model_path: str | None, config: Path | None,
                 cache_bytes: int, registered: bool):
        self.root = root
        self.index_dir = index_dir.resolve() if index_dir else None
        self.dir = self.index_dir or default_index_dir(root)
        self.model_path = model_path
        self.config = config
        self.cache_bytes = cache_bytes
        self.registered = registered
        self.lock = threading.Lock()  # the handle pool and the pending changes
        self.update_lock = threading.Lock()  # one update at a time
        self._idle: list[Index] = []
        self._stamp: tuple | None = None
        self._gen = 0
        self._primary: Index | None = None
        # Update state (status output).
        self.state = "new"
        self.last_update: float | None = None
        self.last_error: str | None = None
        self.last_report: dict | None = None
        self.pending: set[str] = set()
        self.pending_walk = False
        self.pending_rebuild = False
        self.queued = False
        self.watch_error: str | None = None
        self.watch_retry_at = 0.0
        self.index_model: tuple[tuple, str | None] | None = None  # (manifest stamp, model_of_index)

    @property
    def key(self) -> tuple[str, str]:
        return (str(self.root), str(self.index_dir) if self.index_dir else "")

    def _manifest_stamp(self) -> tuple | None:
        try:
            st = os.stat(self.dir / MANIFEST)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @contextlib.contextmanager
    def reader(self) -> Iterator[Index]:
        """An index handle for this thread. A new manifest (the index was rebuilt, by us or by
        another process) starts a new generation: new store, new cache, old handles retired."""
        stamp = self._manifest_stamp()
        with self.lock:
            if stamp != self._stamp:
                self._retire(stamp)
            gen = self._gen
            handle = self._idle.pop() if self._idle else None
        if handle is None:
            handle = self._new_handle()
        try:
            yield handle
        finally:
            with self.lock:
                if gen == self._gen and len(self._idle) < self.MAX_IDLE_HANDLES and handle.exists():
                    self._idle.append(handle)
                else:
                    handle.close()

    def _new_handle(self) -> Index:
        with self.lock:
            primary = self._primary
        if primary is None:
            return Index(self.root, self.index_dir, self.cache_bytes)
        return primary.handle()  # may raise IndexCorruptError (an unreadable manifest)

    def _retire(self, stamp: tuple | None) -> None:
        for h in self._idle:
            h.close()
        self._idle = []
        self._stamp = stamp
        self._gen += 1
        self._primary = Index(self.root, self.index_dir, self.cache_bytes) if stamp is not None else None

    def close(self) -> None:
        with self.lock:
            self._retire(None)

    def cached_bytes(self) -> int:
        with self.lock:
            primary = self._primary
        store = getattr(primary, "_store", None) if primary is not None else None
        return int(sum(a.nbytes for a in list(getattr(store, "_f32", {}).values())))


def _corrupt(exc: BaseException) -> bool:
    """Whether an exception says the index files are damaged (rebuild) rather than busy."""
    if isinstance(exc, IndexCorruptError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return "no such table" in str(exc) or "no such column" in str(exc)
    return isinstance(exc, sqlite3.DatabaseError)


def _opt_path(value: Any) -> Path | None:
    return Path(value) if value else None


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Engine:
    """Serves protocol requests from many threads.

    Args:
        cfg: Daemon-wide settings (``$SUPERGREP_HOME/config.toml``): ``[daemon]``, ``[encode]``.
        watch: Watch registered projects and keep their indexes current.
        persist: Keep the project registry in ``$SUPERGREP_HOME/daemon/projects.json``.
        preload: Models to load at start when ``[daemon] preload`` is on (None: the default).
        make_encoder: ``(spec, cfg) -> Encoder``: how a model is loaded. The CLI passes its own
            (``cli.common.make_encoder``: the default model's int8 ONNX form on a CPU, as a direct
            search uses), so the daemon answers with the vectors a direct search would, ~5x faster
            per query than fp32 torch; None: ``Encoder(spec)`` with the ``[encode]`` settings.
    """

    def __init__(self, cfg: Config | None = None, watch: bool = True, persist: bool = True,
                 preload: list[str | None] | None = None,
                 make_encoder: Callable[[ModelSpec, Config], Encoder] | None = None):
        self.cfg = cfg or load_config(None)
        self._make_encoder = make_encoder
        self.persist = persist
        self._preload_models = [None] if preload is None else list(preload)
        self.started = time.time()
        self.projects: dict[tuple[str, str], Project] = {}
        self._lock = threading.RLock()
        self._encoders: dict[str, SharedEncoder] = {}
        # One model load at a time: transformers' lazy imports are not thread-safe (two threads
        # importing AutoTokenizer at once can fail), and two loads would only split the CPU.
        self._load_lock = threading.Lock()
        # Exact MaxSim is CPU-bound: more scans at once than cores only multiplies their
        # float32 temporaries and makes every one of them finish late. Lexical searches never wait.
        slots = self.cfg.daemon.search_threads or os.cpu_count() or 1
        self._scan_slots = threading.BoundedSemaphore(max(1, slots))
        self._specs: dict[str, tuple[float, ModelSpec, str]] = {}
        self._languages = set(language_names())
        self._queue: queue.Queue[Project | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.counters = {"requests": 0, "searches": 0, "errors": 0, "updates": 0, "rebuilds": 0}
        self.watcher = None
        if watch:
            from supergrep.daemon.watcher import Watcher

            d = self.cfg.daemon
            self.watcher = Watcher(self._on_changes, d.debounce_ms / 1000, d.max_delay_ms / 1000, d.max_paths)

    # ------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Threads up, registered projects watched and caught up (changes made while no daemon
        ran), the default model loading in the background."""
        tune_malloc_for_serving()
        if self.watcher is not None:
            self.watcher.start()
        for target, name in ((self._update_loop, "sg-updater"), (self._housekeeping_loop, "sg-housekeeping")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        if self.persist:
            for entry in registry.load():
                p = self._project(Path(entry.root), _opt_path(entry.index_dir), entry.model_path,
                                  _opt_path(entry.config), registered=True)
                self._activate(p)
        if self.cfg.daemon.preload:
            threading.Thread(target=self._preload, name="sg-preload", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        if self.watcher is not None:
            self.watcher.stop()
        for t in self._threads:
            t.join(timeout=2)
        with self._lock:
            projects = list(self.projects.values())
        for p in projects:
            p.close()

    def _preload(self) -> None:
        models = list(dict.fromkeys([*self._preload_models,
                                     *(p.model_path for p in list(self.projects.values()) if p.registered)]))
        for m in models:
            try:
                self.encoder(m)
            except Exception as exc:  # a broken model must not take the daemon down
                log.warning("could not preload model %s: %s", m or "(default)", exc)

    # -------------------------------------------------------------------------- models
    def _spec(self, model_path: str | None) -> tuple[ModelSpec, str]:
        key = model_path or ""
        now = time.monotonic()
        cached = self._specs.get(key)
        if cached is not None and now - cached[0] < 5.0:
            return cached[1], cached[2]
        spec = resolve_model(model_path or default_model(self.cfg.encode.device))
        fingerprint = spec.fingerprint()  # file hashes are cached by size + mtime: cheap again
        self._specs[key] = (now, spec, fingerprint)
        return spec, fingerprint

    def encoder(self, model_path: str | None) -> SharedEncoder:
        """The warm encoder for a model directory (None: the default model), loaded once per
        fingerprint."""
        spec, fingerprint = self._spec(model_path)
        with self._lock:
            enc = self._encoders.get(fingerprint)
        if enc is not None:
            return enc
        with self._load_lock:
            enc = self._encoders.get(fingerprint)
            if enc is None:
                t0 = time.perf_counter()
                c = self.cfg.encode
                loaded = (self._make_encoder(spec, self.cfg) if self._make_encoder is not None else
                          Encoder(spec, device=c.device, batch_tokens=c.batch_tokens, threads=c.threads))
                enc = SharedEncoder(loaded, time.perf_counter() - t0)
                log.info("loaded model %s (%s) on %s in %.1f s", spec.name, fingerprint[:12], enc.device,
                         enc.loaded_s)
                with self._lock:
                    self._encoders[fingerprint] = enc
        return enc

    # ------------------------------------------------------------------------ projects
    def _project(self, root: Path, index_dir: Path | None, model_path: str | None, config: Path | None,
                 registered: bool) -> Project:
        key = (str(root), str(index_dir.resolve()) if index_dir else "")
        with self._lock:
            p = self.projects.get(key)
            if p is None:
                p = Project(root, index_dir, model_path, config, self.cfg.daemon.cache_bytes, registered)
                self.projects[key] = p
                return p
        if registered and not p.registered:
            p.registered = True
            if model_path is not None:
                p.model_path = model_path
            if config is not None:
                p.config = config
        return p

    def register(self, root: Path, index_dir: Path | None = None, model_path: str | None = None,
                 config: Path | None = None) -> tuple[Project, bool]:
        """Register a project: persisted, watched, brought up to date in the background.

        Returns:
            The project, and whether it was new to the registry.
        """
        with self._lock:
            existing = self.projects.get((str(root), str(index_dir.resolve()) if index_dir else ""))
            was = existing is not None and existing.registered
        p = self._project(root, index_dir, model_path, config, registered=True)
        if self.persist:
            registry.add(registry.Entry(str(root), str(p.index_dir) if p.index_dir else None,
                                        p.model_path, str(p.config) if p.config else None))
        if not was:
            log.info("registered %s", root)
            self._activate(p)
        return p, not was

    def unregister(self, root: Path, index_dir: Path | None = None) -> bool:
        key = (str(root), str(index_dir.resolve()) if index_dir else "")
        with self._lock:
            p = self.projects.pop(key, None)
        found = False
        if self.persist:
            found = registry.remove(key[0], key[1] if index_dir else None)
        if p is not None:
            if self.watcher is not None:
                self.watcher.unwatch(p.key)
            p.close()
            log.info("unregistered %s", root)
        return found or (p is not None and p.registered)

    def _activate(self, p: Project) -> None:
        """Watch a registered project and catch its index up (a walk)."""
        self._watch(p)
        self._enqueue(p, walk=True)

    def _watch(self, p: Project) -> None:
        if self.watcher is None or self.watcher.watching(p.key):
            return
        try:
            cfg = load_config(p.root, p.config)
            self.watcher.watch(p.key, p.root, cfg.walk, p.dir)
            p.watch_error = None
        except (OSError, SupergrepError) as exc:
            p.watch_error = str(exc)
            p.watch_retry_at = time.monotonic() + 60
            if isinstance(exc, FileNotFoundError) or not p.root.is_dir():
                p.state = "missing"
            log.warning("cannot watch %s: %s (rescans every %d s instead)", p.root, exc, self.cfg.daemon.rescan_s)

    # ------------------------------------------------------------------------- updates
    def _on_changes(self, key, paths: set[str], walk: bool) -> None:
        with self._lock:
            p = self.projects.get(key)
        if p is not None:
            self._enqueue(p, paths, walk)

    def _enqueue(self, p: Project, paths: set[str] | None = None, walk: bool = False, rebuild: bool = False) -> None:
        with p.lock:
            if paths:
                p.pending.update(paths)
            p.pending_walk |= walk
            p.pending_rebuild |= rebuild
            if p.queued:
                return
            p.queued = True
        self._queue.put(p)

    def _update_loop(self) -> None:
        while not self._stop.is_set():
            p = self._queue.get()
            if p is None:
                return
            with p.lock:
                paths, walk, rebuild = p.pending, p.pending_walk, p.pending_rebuild
                p.pending, p.pending_walk, p.pending_rebuild, p.queued = set(), False, False, False
            with self._lock:
                current = self.projects.get(p.key) is p
            if current:
                self._update_logged(p, paths, walk, rebuild)

    def _model_for(self, p: Project) -> str | None:
        """The model to index and search with: the registered one, else the one the index was built with."""
        if p.model_path:
            return p.model_path
        # Remembered per manifest: working it out fingerprints every named model (~4 ms, a fifth
        # of a warm semantic search), and only a new manifest can change the answer.
        stamp = p._manifest_stamp()
        known = p.index_model
        if stamp is not None and known is not None and known[0] == stamp:
            return known[1]
        try:
            m = Manifest.read(p.dir)
        except IndexCorruptError:
            return None
        model = model_of_index(m.model) if m else None
        if stamp is not None:
            p.index_model = (stamp, model)
        return model

    def _update_logged(self, p: Project, paths: set[str], walk: bool, rebuild: bool) -> None:
        """A background update: every failure is logged and kept in the project's status."""
        try:
            self.update(p, paths, walk, rebuild)
        except Exception as exc:
            p.state = "missing" if not p.root.is_dir() else "error"
            p.last_error = f"{exc.__class__.__name__}: {exc}"
            if isinstance(exc, (SupergrepError, OSError)):
                log.error("updating %s failed: %s", p.root, p.last_error)
            else:
                log.exception("updating %s failed", p.root)

    def update(self, p: Project, paths: set[str] | None = None, walk: bool = False, rebuild: bool = False,
               cfg: Config | None = None, model_path: str | None | object = ..., force: bool = False,
               only_if_missing: bool = False) -> IndexReport | None:
        """Apply changes to a project's index now, in this thread.

        A missing root is not an error: the project waits for it to come back. A damaged index
        is wiped and rebuilt once. ``only_if_missing``: do nothing if the index exists by the
        time the update lock is ours (the updater may have built it meanwhile).
        """
        if not p.root.is_dir():
            if p.state != "missing":
                log.warning("%s is gone; its index stays until it comes back or is removed", p.root)
            p.state = "missing"
            if self.watcher is not None:
                self.watcher.unwatch(p.key)
            return None
        cfg = cfg or load_config(p.root, p.config)
        enc = self.encoder(self._model_for(p) if model_path is ... else model_path)  # type: ignore[arg-type]
        with p.update_lock:
            if only_if_missing:
                with p.reader() as index:
                    if index.exists():
                        return None
            p.state = "indexing"
            try:
                rep = self._apply(p, enc, cfg, paths or set(), walk, rebuild, force)
            except Exception as exc:
                if rebuild or force or not _corrupt(exc):
                    raise
                log.warning("the index of %s is damaged (%s); rebuilding it", p.root, exc)
                rep = self._apply(p, enc, cfg, set(), True, True, False)
            self._warm(p, cfg)
        self.counters["updates"] += 1
        p.state, p.last_error, p.last_update = "ready", None, time.time()
        p.last_report = {"files": rep.files, "chunks": rep.chunks, "files_indexed": rep.files_indexed,
                         "files_removed": rep.files_removed, "seconds": round(rep.seconds, 3)}
        if rep.files_indexed or rep.files_removed:
            log.info("%s: %d files re-indexed, %d removed in %.2f s (%d files, %d chunks)", p.root,
                     rep.files_indexed, rep.files_removed, rep.seconds, rep.files, rep.chunks)
        if self.watcher is not None and p.registered and not self.watcher.watching(p.key):
            self._watch(p)
        return rep

    def _apply(self, p: Project, enc: SharedEncoder, cfg: Config, paths: set[str], walk: bool, rebuild: bool,
               force: bool) -> IndexReport:
        if rebuild:  # a fresh handle: the shared ones may not even open a damaged index
            self.counters["rebuilds"] += 1
            fresh = Index(p.root, p.index_dir)
            with fresh.write_lock():
                fresh.wipe()
            fresh.close()
        with p.reader() as index:
            if rebuild or force or walk or not index.exists():
                return update_index(index, enc, cfg, force=force)  # type: ignore[arg-type]
            try:
                return update_paths(index, enc, cfg, sorted(paths))  # type: ignore[arg-type]
            except WalkRequired:
                return update_index(index, enc, cfg)  # type: ignore[arg-type]

    def _damaged(self, p: Project) -> bool:
        """Whether the index's files are damaged, judged by a fresh handle (not the shared
        store and its caches): a search can fail the same way when it races an update."""
        try:
            fresh = Index(p.root, p.index_dir)
            try:
                if fresh.exists():
                    fresh.store.check(fresh.conn)
                    fresh.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()
            finally:
                fresh.close()
        except Exception as exc:
            return _corrupt(exc)
        return False

    def _warm(self, p: Project, cfg: Config | None = None) -> None:
        """After an update: the store's pages mapped, the in-memory catalog brought up to date (its
        first build reads every row: ~0.7 s for 12,670 chunks; later ones only the rows added)."""
        try:
            with p.reader() as index:
                if index.exists():
                    index.store.warm(index.conn)
                    index.mirror.max_chunks = (cfg or load_config(p.root, p.config)).daemon.mirror_max_chunks
                    index.mirror.refresh(index.conn)
        except Exception as exc:  # warming is an optimisation; the next search tells the truth
            log.debug("warming %s failed: %s", p.root, exc)

    def _housekeeping_loop(self) -> None:
        last_rescan = time.monotonic()
        while not self._stop.wait(2.0):
            try:
                now = time.monotonic()
                with self._lock:
                    projects = [p for p in self.projects.values() if p.registered]
                for p in projects:
                    if p.state == "missing" and p.root.is_dir():
                        log.info("%s is back; indexing it", p.root)
                        p.state = "new"
                        self._activate(p)
                    elif (self.watcher is not None and p.watch_error and now >= p.watch_retry_at
                          and p.root.is_dir()):
                        self._watch(p)
                if self.watcher is not None and not self.watcher.alive():
                    log.warning("the file observer stopped; restarting it")
                    self.watcher.restart()
                rescan = self.cfg.daemon.rescan_s
                if rescan > 0 and now - last_rescan >= rescan:
                    last_rescan = now
                    for p in projects:
                        if p.state != "missing":
                            self._enqueue(p, walk=True)
            except Exception:
                log.exception("housekeeping failed")

    # ------------------------------------------------------------------------ requests
    def handle(self, request: dict, notice: Notice | None = None) -> dict:
        """Answer one request (without ``v``/``id``, which the transport adds)."""
        notice = notice or (lambda _line: None)
        self.counters["requests"] += 1
        op = request.get("op")
        fn = getattr(self, f"op_{op}", None) if isinstance(op, str) and op.isidentifier() else None
        if fn is None:
            return error("UsageError", f"unknown op {op!r}", fallback=True)
        try:
            return {"ok": True, **fn(request, notice)}
        except Fallback as exc:
            return error("Fallback", str(exc), fallback=True)
        except SupergrepError as exc:
            if op == "search":
                self.counters["errors"] += 1
            return error(exc.__class__.__name__, str(exc), exc.exit_code)
        except Exception as exc:
            self.counters["errors"] += 1
            log.exception("%s request failed", op)
            return error("InternalError", f"{exc.__class__.__name__}: {exc} (see the daemon log)", fallback=True)

    def op_ping(self, request: dict, notice: Notice) -> dict:
        return {"pid": os.getpid(), "version": __version__, "started": self.started}

    def op_search(self, request: dict, notice: Notice) -> dict:
        t0, cpu0 = time.perf_counter(), time.thread_time()
        query = request.get("query")
        if not isinstance(query, str):
            raise UsageError("a search request needs a query string")
        cwd = Path(request.get("cwd") or os.getcwd())
        root, sub = search_root(request.get("path"), cwd)
        subdir = request.get("subdir")
        if subdir:
            sub = f"{sub}/{subdir.strip('/')}" if sub else subdir.strip("/")
        config = _opt_path(request.get("config"))
        cfg = load_config(root, config)
        types = [str(t) for t in request.get("types") or []]
        unknown = [t for t in types if t not in self._languages]
        if unknown:
            raise Fallback(f"unknown language {unknown[0]!r}")
        mode = request.get("mode")
        if mode is not None and mode not in MODES:
            raise Fallback(f"unknown mode {mode!r}")
        model_path = request.get("model_path") or None
        render = request.get("render")
        quiet = render is None or render.get("format") == "json"
        p = self._project(root, _opt_path(request.get("index_dir")), model_path, config, registered=False)
        if request.get("register", True) and not p.registered:
            p, _ = self.register(root, _opt_path(request.get("index_dir")), model_path, config)
        filters = SearchFilters(languages=types, path_prefix=sub,
                                exclude_globs=[str(x) for x in request.get("excludes") or []])
        encoders: list[SharedEncoder] = []
        t_ready = t0

        def load() -> SharedEncoder:  # no --model: the one the index was built with
            encoders.append(self.encoder(model_path or self._model_for(p)))
            return encoders[-1]

        try:
            with p.reader() as index:
                missing = not index.exists()
            if missing:
                if request.get("no_index"):
                    raise IndexMissingError(f"{root} has no index; run `supergrep index {root}` (or drop --no-index)")
                notice(f"supergrep: indexing {root} first (`supergrep index` keeps it current)")
                rep = self.update(p, walk=True, cfg=cfg, model_path=model_path, only_if_missing=True)
                if rep is not None and rep.skipped and not quiet:
                    notice("skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(rep.skipped.items())))
            t_ready = time.perf_counter()
            scans = (mode or cfg.search.mode) != "lexical"
            for attempt in (1, 2):
                try:
                    with self._scan_slots if scans else contextlib.nullcontext():
                        t_slot = time.perf_counter()
                        with p.reader() as index:
                            # BM25 and chunk metadata from memory once built (refreshed in the
                            # background when stale)
                            index.mirror.max_chunks = cfg.daemon.mirror_max_chunks
                            searcher = Searcher(index, load, cfg.search)  # type: ignore[arg-type]
                            hits = searcher.search(query, mode=mode, limit=request.get("limit"), filters=filters,
                                                   auto=bool(request.get("auto")))
                    break
                except Exception as exc:
                    # "Damaged" can also be a search that raced an update; a fresh look decides.
                    if attempt == 2 or not _corrupt(exc) or self._damaged(p):
                        raise
                    log.info("a search of %s raced an index update (%s); searching again", root, exc)
        except Exception as exc:
            if not _corrupt(exc):
                raise
            if not self._damaged(p):
                raise IndexBusyError(f"the index of {root} changed during the search ({exc}); search again") from None
            if not (p.pending_rebuild or p.state == "indexing"):
                log.warning("the index of %s is damaged (%s); rebuilding it", root, exc)
                self._enqueue(p, rebuild=True)
            raise IndexCorruptError(f"the index of {root} is damaged ({exc}); the daemon is rebuilding it, "
                                    "search again in a moment (`supergrep daemon status` shows progress)") from None
        self.counters["searches"] += 1
        used_mode = mode or cfg.search.mode
        timings = {"total": 0.0, "prepare": round((t_ready - t0) * 1000, 3),
                   "queued": round((t_slot - t_ready) * 1000, 3),
                   "encode": round(encoders[0].last_query_ms(), 3) if encoders else 0.0}
        out: dict[str, Any] = {"root": str(root), "mode": used_mode, "count": len(hits), "timings_ms": timings}
        if render is not None:
            context = int(render.get("context", 3))
            if render.get("format") == "json":
                out["stdout"] = search_json(query, used_mode, hits, context)
            else:
                out["stdout"] = format_hits(hits, context, bool(render.get("color")))
            out["exit_code"] = 0 if hits else 1
        else:
            context = int(request.get("context", 3))
            out["results"] = [_hit_dict(h, context) for h in hits]
        timings["total"] = round((time.perf_counter() - t0) * 1000, 3)
        # CPU of this thread (not torch's encoding threads): what the search costs, whatever the load
        timings["cpu"] = round((time.thread_time() - cpu0) * 1000, 3)
        return out

    def op_index(self, request: dict, notice: Notice) -> dict:
        """Update (or with ``force``, rebuild) a project's index now and register it."""
        root = self._root_arg(request, search_up=True)
        index_dir = _opt_path(request.get("index_dir"))
        model_path = request.get("model_path") or None
        config = _opt_path(request.get("config"))
        if request.get("register", True):
            p, _ = self.register(root, index_dir, model_path, config)
        else:
            p = self._project(root, index_dir, model_path, config, registered=False)
        rep = self.update(p, walk=True, cfg=load_config(root, config), force=bool(request.get("force")),
                          model_path=model_path if model_path else ...)
        if rep is None:
            raise UsageError(f"{root} does not exist")
        return {"root": str(root), "files": rep.files, "chunks": rep.chunks, "files_indexed": rep.files_indexed,
                "files_removed": rep.files_removed, "files_unchanged": rep.files_unchanged,
                "chunks_embedded": rep.chunks_embedded, "chunks_reused": rep.chunks_reused,
                "lines": rep.lines_indexed, "seconds": round(rep.seconds, 3),
                "lines_per_s": round(rep.lines_per_s, 1), "skipped": rep.skipped}

    def op_add(self, request: dict, notice: Notice) -> dict:
        root = self._root_arg(request, search_up=False)
        p, new = self.register(root, _opt_path(request.get("index_dir")), request.get("model_path") or None,
                               _opt_path(request.get("config")))
        return {"root": str(root), "new": new}

    def op_remove(self, request: dict, notice: Notice) -> dict:
        root = self._root_arg(request, search_up=False, must_exist=False)
        return {"root": str(root), "removed": self.unregister(root, _opt_path(request.get("index_dir")))}

    def op_list(self, request: dict, notice: Notice) -> dict:
        return {"projects": [self._project_status(p, counts=False) for p in self._registered()]}

    def op_status(self, request: dict, notice: Notice) -> dict:
        with self._lock:
            encoders = list(self._encoders.values())
        return {
            "pid": os.getpid(), "version": __version__, "started": self.started,
            "uptime_s": round(time.time() - self.started, 1), "rss_bytes": _rss_bytes(),
            "threads": threading.active_count(), "counters": dict(self.counters),
            "models": [{"name": e.name, "fingerprint": e.fingerprint[:12], "device": e.device,
                        "loaded_s": round(e.loaded_s, 2)} for e in encoders],
            "projects": [self._project_status(p, counts=True) for p in self._registered()],
        }

    # ------------------------------------------------------------------------- helpers
    def _registered(self) -> list[Project]:
        with self._lock:
            return sorted((p for p in self.projects.values() if p.registered), key=lambda p: p.key)

    def _root_arg(self, request: dict, search_up: bool, must_exist: bool = True) -> Path:
        cwd = Path(request.get("cwd") or os.getcwd())
        path = request.get("path")
        if not path:
            return find_project_root(cwd) if search_up else cwd.resolve()
        p = (cwd / Path(path).expanduser())
        if must_exist and not p.is_dir():
            what = "is not a directory" if p.exists() else "does not exist"
            raise UsageError(f"{path} {what}; pass the project's root directory")
        return p.resolve() if p.exists() else Path(os.path.abspath(p))

    def _project_status(self, p: Project, counts: bool) -> dict:
        out: dict[str, Any] = {
            "root": str(p.root), "index_dir": str(p.dir), "state": p.state,
            "watching": bool(self.watcher is not None and self.watcher.watching(p.key)),
            "watch_error": p.watch_error, "model_path": p.model_path,
            "last_update": p.last_update, "last_error": p.last_error, "last_report": p.last_report,
            "pending": len(p.pending) + (1 if p.pending_walk or p.pending_rebuild else 0),
        }
        if counts:
            out.update(files=None, chunks=None, vectors=None, cached_bytes=p.cached_bytes())
            try:
                with p.reader() as index:
                    if index.exists():
                        out["files"], out["chunks"] = index.conn.execute(
                            "SELECT (SELECT COUNT(*) FROM files), (SELECT COUNT(*) FROM chunks)").fetchone()
                        out["vectors"] = index.store.stats(index.conn)["vectors"]
            except Exception as exc:  # a status must not fail on one bad index
                out["last_error"] = out["last_error"] or f"{exc.__class__.__name__}: {exc}"
        return out


def _hit_dict(hit: Hit, context: int) -> dict:
    """A result for programs (MCP): the ``--json`` fields plus the chunk's kind."""
    return {**hit_json(hit, context), "kind": hit.kind}
