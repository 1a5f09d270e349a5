"""Where a real `supergrep index` run spends its time, stage by stage.

Runs the CLI's own `index` command in this process with timers wrapped around the functions
of each stage (exclusive wall time: a stage's time excludes the stages it calls), per thread,
and prints seconds, ms per 1,000 lines and the share of the run. Nothing is replaced: the
model runs as in the product, so the "encode (model forward)" row is the backend's forward
call and every other row is host work.

    PYTHONPATH=src python benchmarks/index_stages.py PATH --index-dir /tmp/ix [--json out.json] \
        [-- more `supergrep index` options, e.g. --store exact]

The index dir is wiped first (a full build). Stages whose function a given version of the code
does not have are left out (the script serves before/after comparisons across commits).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shutil
import sys
import threading
import time
from collections import defaultdict

# (module, attribute path, stage). Exclusive time: nested stages are subtracted from their callers.
STAGES = [
    ("supergrep.corpus.walk", "walk", "walk (stat, ignore rules)"),
    ("supergrep.corpus.walk", "read_source", "read + decode + sha256"),
    ("supergrep.corpus.chunk", "_parse", "parse (tree-sitter)"),
    ("supergrep.corpus.chunk", "chunk_source", "chunk (tree walk, chunk texts)"),
    ("supergrep.encoder.tokenize", "RoleTokenizer._encode_raw", "tokenise (Rust)"),
    ("supergrep.encoder.tokenize", "RoleTokenizer.count", "tokenise (Python side)"),
    ("supergrep.encoder.tokenize", "RoleTokenizer.__call__", "tokenise (Python side)"),
    ("supergrep.encoder.tokenize", "RoleTokenizer.count_ids", "tokenise (Python side)"),
    ("supergrep.index.indexer", "_Run._prepare", "prepare (doc text, split, hash)"),
    ("supergrep.index.indexer", "_Run.prepare", "prepare (doc text, split, hash)"),
    ("supergrep.index.indexer", "_Run._lookup", "reuse lookup (SQLite + store.get)"),
    ("supergrep.index.project", "Index.chunks_by_hash", "reuse lookup (SQLite + store.get)"),
    ("supergrep.index.store", "SegmentStore.get", "reuse lookup (SQLite + store.get)"),
    ("supergrep.backends.onnx_backend", "OnnxBackend.forward", "encode (model forward)"),
    ("supergrep.backends.torch_backend", "TorchBackend.forward", "encode (model forward)"),
    ("supergrep.backends.torch_backend", "TorchBackend.forward_flat", "encode (model forward)"),
    ("supergrep.encoder.encoder", "Encoder.encode_ids", "encode host (pad, split per chunk)"),
    ("supergrep.scoring.bm25", "code_terms", "FTS terms (code_terms)"),
    ("supergrep.index.project", "Index.fts_rows", "FTS terms (code_terms)"),
    ("supergrep.index.project", "Index.add_file", "SQLite rows (files, chunks, FTS)"),
    ("supergrep.index.project", "Index.add_files", "SQLite rows (files, chunks, FTS)"),
    ("supergrep.index.project", "Index.remove_files", "SQLite rows (files, chunks, FTS)"),
    ("supergrep.encoder.encoder", "cast", "encode host: copy vectors out (varlen path)"),
    ("supergrep.arrays", "cast", "segment: pack + cast to float16"),
    ("supergrep.arrays", "pack", "segment: pack + cast to float16"),
    ("supergrep.index.store", "SegmentStore._write_npy", "segment: write + fsync files"),
    ("supergrep.index.format", "fsync_dir", "segment: write + fsync files"),
    ("supergrep.index.store", "SegmentStore._write_segment", "segment: other (layout, vec_chunks rows)"),
    ("supergrep.index.store", "SegmentStore.maintain", "maintain (orphans, compaction)"),
    ("supergrep.index.indexer", "_commit", "COMMIT"),
    ("supergrep.index.indexer", "_Run.flush", "batch bookkeeping (hashes, lists)"),
    ("supergrep.index.indexer", "_apply", "index loop / final transaction"),
    ("supergrep.index.indexer", "update_index", "index loop / final transaction"),
]

_local = threading.local()
_totals: dict[tuple[str, str], float] = defaultdict(float)
_lock = threading.Lock()


def _stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def _enter(stage: str) -> None:
    _stack().append([stage, time.perf_counter(), 0.0])


def _exit() -> None:
    stage, t0, inner = _stack().pop()
    dt = time.perf_counter() - t0
    with _lock:
        _totals[(threading.current_thread().name, stage)] += dt - inner
    if _stack():
        _stack()[-1][2] += dt


def _timed(fn, stage: str):
    import inspect

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            it = fn(*a, **k)
            while True:
                _enter(stage)
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    _exit()
                yield item
        return gen

    @functools.wraps(fn)
    def wrapper(*a, **k):
        _enter(stage)
        try:
            return fn(*a, **k)
        finally:
            _exit()
    return wrapper


def install() -> list[str]:
    installed = []
    for mod_name, attr, stage in STAGES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        owner, name = mod, attr
        if "." in attr:
            cls_name, name = attr.split(".")
            owner = getattr(mod, cls_name, None)
            if owner is None:
                continue
        fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if fn is None:
            continue
        wrapped = _timed(fn, stage)
        setattr(owner, name, wrapped)
        installed.append(f"{mod_name}.{attr}")
        if not isinstance(owner, type) and getattr(fn, "__module__", mod_name) == mod_name:
            # re-bind the names other modules imported from its module (a name imported into
            # the listed module, like the encoder's `cast`, is timed there only)
            for m in list(sys.modules.values()):
                if m is not None and m.__name__.startswith("supergrep") and getattr(m, name, None) is fn:
                    setattr(m, name, wrapped)
    # COMMIT of a batch: between the two crash points around it.
    from supergrep.index import indexer

    orig = indexer.crashpoint

    def crashpoint(name: str) -> None:
        if name == "batch_before_commit":
            orig(name)
            _enter("COMMIT")
            return
        if name == "batch_committed":
            _exit()
        orig(name)
    indexer.crashpoint = crashpoint
    return installed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--json", dest="json_out")
    args, rest = ap.parse_known_args()
    args.rest = [a for a in rest if a != "--"]  # more `supergrep index` options
    shutil.rmtree(args.index_dir, ignore_errors=True)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import supergrep.backends.onnx_backend  # noqa: F401 - so their methods can be wrapped
    import supergrep.index.indexer  # noqa: F401
    from supergrep.cli import cli

    install()
    t0 = time.perf_counter()
    from click.testing import CliRunner

    res = CliRunner().invoke(cli, ["index", args.path, "--index-dir", args.index_dir, "--json", *args.rest],
                             catch_exceptions=False)
    wall = time.perf_counter() - t0
    report = json.loads(res.output.strip().splitlines()[-1])
    lines = report["lines"]
    rows = sorted(_totals.items(), key=lambda kv: -kv[1])
    main_thread = threading.main_thread().name
    seen = sum(v for (t, _), v in _totals.items() if t == main_thread)
    print(f"{args.path}: {lines} lines, {report['chunks']} chunks, index {report['seconds']:.1f} s "
          f"({report['lines_per_s']:.0f} lines/s); wall with start-up {wall:.1f} s")
    print(f"{'thread':<12} {'stage':<42} {'s':>8} {'ms/1K lines':>12}")
    for (thread, stage), v in rows:
        print(f"{thread[:12]:<12} {stage:<42} {v:8.2f} {1e3 * v / lines * 1000:12.1f}")
    rest = report["seconds"] - seen
    print(f"{main_thread[:12]:<12} {'(other, in index seconds)':<42} {rest:8.2f} {1e3 * rest / lines * 1000:12.1f}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"report": report, "wall": wall, "stages": [
                {"thread": t, "stage": s, "seconds": v} for (t, s), v in rows]}, fh, indent=1)


if __name__ == "__main__":
    main()
