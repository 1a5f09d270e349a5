"""What an index holds does not depend on how the run was scheduled: the background thread
that prepares batches ahead (``[encode] prepare_ahead``), the one-pass vector packing, the
batched SQLite inserts and the cached FTS terms all give the rows, ids, order and vectors of
the plain one-thread loop, and of their definitions."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from supergrep.config import Config
from supergrep.index import indexer
from supergrep.index.indexer import update_index
from supergrep.index.project import Index
from supergrep.scoring.bm25 import MAX_TERM_CHARS, split_identifier

SRC = Path(__file__).resolve().parents[2] / "src" / "supergrep"


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    for sub in ("corpus", "scoring"):
        shutil.copytree(SRC / sub, root / sub, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "README.md").write_text("# Title\n\nSome prose.\n\n## Part\n\nMore words, parseHTTPResponse.\n")
    return root


def _cfg(ahead: int) -> Config:
    cfg = Config()
    cfg.encode.commit_chunks = 24  # many batches, so the thread runs ahead of several commits
    cfg.encode.prepare_ahead = ahead
    return cfg


def contents(index: Index) -> dict:
    """Every row and vector of an exact index, keyed so that equal indexes compare equal."""
    conn = index.conn
    q = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
    vectors = {}
    for cid, seg, off, n in q("SELECT chunk_id, seg, offset, n FROM vec_chunks ORDER BY chunk_id"):
        arr = np.load(index.dir / "vectors" / f"seg-{seg:08d}.npy", mmap_mode="r")
        vectors[cid] = (seg, off, np.asarray(arr[off:off + n]).tobytes())
    return {
        "files": q("SELECT id, path, language, size, sha256, n_lines FROM files ORDER BY id"),
        "chunks": q("SELECT * FROM chunks ORDER BY id"),
        "fts": q("SELECT rowid, path, symbol, body FROM chunks_fts ORDER BY rowid"),
        "segments": q("SELECT id, n_chunks, n_vectors, dead_chunks, dead_vectors, bytes FROM segments ORDER BY id"),
        "tombstones": q("SELECT * FROM tombstones ORDER BY chunk_id"),
        "sequence": q("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'"),
        "vectors": vectors,
    }


def _build(project: Path, tmp_path: Path, encoder, ahead: int, name: str) -> list[dict]:
    """A full index, then an edit + a deletion + a new file: the contents after each run."""
    root = tmp_path / name
    shutil.copytree(project, root)
    index = Index(root, tmp_path / f"{name}-index")
    out = []
    update_index(index, encoder, _cfg(ahead))
    out.append(contents(index))
    chunk_py = root / "corpus" / "chunk.py"
    chunk_py.write_text(chunk_py.read_text().replace("def _runs(", "def _runs_renamed("))
    (root / "scoring" / "maxsim.py").unlink()
    (root / "corpus" / "extra.py").write_text("def added():\n    return 1\n")
    update_index(index, encoder, _cfg(ahead))
    out.append(contents(index))
    index.close()
    return out


def test_prepare_ahead_changes_nothing_in_the_index(project, tmp_path, tiny_encoder):
    plain = _build(project, tmp_path, tiny_encoder, 0, "plain")
    for ahead in (1, 3):
        got = _build(project, tmp_path, tiny_encoder, ahead, f"ahead{ahead}")
        for before, after in zip(plain, got, strict=True):
            for key in before:
                assert after[key] == before[key], f"prepare_ahead={ahead}: {key} differ"
    first, second = plain
    assert len(first["segments"]) > 5  # many batches
    assert second["tombstones"]  # the edit and the deletion left dead chunks behind


def _terms(text: str) -> list[str]:
    """code_terms as first written (no cache)."""
    out: list[str] = []
    for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+", text):
        word = m.group()
        if len(word) <= MAX_TERM_CHARS:
            out += [word.lower(), *split_identifier(word)]
    return out


def test_rows_ids_and_vectors_are_what_they_stand_for(project, tmp_path, tiny_encoder):
    first, second = _build(project, tmp_path, tiny_encoder, 1, "one")
    for state in (first, second):
        paths = dict((fid, path) for fid, path, *_ in state["files"])
        chunks = {row[0]: row for row in state["chunks"]}
        # FTS rows: the chunk's own terms, rowid = chunk id
        for rowid, path, symbol, body in state["fts"]:
            cid, fid, sym, _kind, _lang, _s, _e, _part, text, _h, _n = chunks[rowid]
            assert (path, symbol, body) == (" ".join(_terms(paths[fid])), " ".join(_terms(sym)),
                                            " ".join(_terms(text)))
        assert sorted(chunks) == [r[0] for r in state["fts"]]
        # ids: AUTOINCREMENT's (consecutive per file, never reused, the sequence at the largest)
        assert state["sequence"] == [(max(chunks),)]
    old_ids = {row[0] for row in first["chunks"]}
    new_ids = sorted({row[0] for row in second["chunks"]} - old_ids)
    assert new_ids and new_ids[0] == max(old_ids) + 1 and new_ids == list(range(new_ids[0], new_ids[-1] + 1))
    # vectors: each chunk's own, in order (the tiny model encodes one text alone the same way, to
    # float16 rounding and padding noise)
    from supergrep.corpus.documents import document_text
    from supergrep.corpus.types import Chunk

    paths = dict((fid, path) for fid, path, *_ in second["files"])
    rows = second["chunks"][::7]
    texts = [document_text(Chunk(paths[fid], lang, sym, kind, s, e, text, part))
             for _cid, fid, sym, kind, lang, s, e, part, text, _h, _n in rows]
    for row, want in zip(rows, tiny_encoder.encode_documents(texts), strict=True):
        _seg, _off, raw = second["vectors"][row[0]]
        got = np.frombuffer(raw, np.float16).reshape(-1, tiny_encoder.dim).astype(np.float32)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=2e-3)


@pytest.mark.parametrize("ahead", [0, 1])
def test_an_error_while_preparing_reaches_the_caller_and_keeps_earlier_batches(ahead, project, tmp_path,
                                                                              tiny_encoder, monkeypatch):
    real = indexer.chunk_source

    def chunk_source(path, *args, **kwargs):
        if path == "scoring/bm25.py":
            raise RuntimeError("boom")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(indexer, "chunk_source", chunk_source)
    index = Index(project, tmp_path / "index")
    with pytest.raises(RuntimeError, match="boom"):
        update_index(index, tiny_encoder, _cfg(ahead))
    files = {r[0] for r in index.conn.execute("SELECT path FROM files")}
    assert files and all(p.startswith(("corpus/", "README", "scoring/__init__")) for p in files)  # earlier batches
    assert not [t for t in threading.enumerate() if t.name == "sg-index-prepare"]
    monkeypatch.setattr(indexer, "chunk_source", real)
    rep = update_index(index, tiny_encoder, _cfg(1))
    assert rep.files == len(list(project.rglob("*.py"))) + 1


def test_prepare_ahead_auto_is_on_for_a_gpu_only(tiny_encoder):
    from types import SimpleNamespace

    from supergrep.index.indexer import prepare_ahead

    cfg = Config()
    assert cfg.encode.prepare_ahead == -1
    assert prepare_ahead(cfg, tiny_encoder) == 0  # a CPU: the model's threads take the cores
    for device in ("cuda", "cuda:1", "mps", "gpu"):
        assert prepare_ahead(cfg, SimpleNamespace(backend=SimpleNamespace(device=device))) == 1
    cfg.encode.prepare_ahead = 2
    assert prepare_ahead(cfg, tiny_encoder) == 2
