"""The index's catalog in memory, for long-lived processes: BM25 (SQLite FTS5's own scores, ~10x
faster) and each chunk's (path, kind, symbol, part).

FTS5 computes ``bm25()`` row by row through its auxiliary-function API, ~3 us for every row a
query matches; a prose query of 10-20 code terms matches a quarter of a project's chunks, so
BM25 took 7-17 ms of a 12,670-chunk project's hybrid search (docs/daemon.md). A long-lived
process (the daemon, the MCP server) keeps the same statistics as arrays instead: each term's
postings (chunk position, column-weighted frequency), each chunk's length, FTS5's row and token
totals; a query is a few NumPy passes over its terms' postings. Hybrid fusion also reads the
path, kind, symbol and part of its ~400 candidates for the ranking priors and the grouping of a
definition's parts: ~1.9 ms of SQL, a dict lookup here.

The scores are FTS5's, bit for bit, so the daemon ranks exactly as ``--direct`` does:

- the FTS5 columns hold lexical terms joined by single spaces (``project.fts_rows``: ASCII
  ``[a-z0-9_]+``, which FTS5's ``unicode61`` tokenizer with ``tokenchars '_'`` keeps whole), so
  splitting a row on whitespace yields exactly the tokens FTS5 indexed (checked on every full
  build: the token and row totals must equal FTS5's own, read from its averages record);
- each term's contribution is computed with the operations of ``fts5Bm25Function``
  (``fts5_aux.c``) in its order, in float64, and summed in the query's phrase order;
- ties are broken by chunk id, as FTS5's rowid-ordered scan and SQLite's stable ``ORDER BY``.

A snapshot is valid for one state of the table, named by a key read in one statement: the
``chunks`` id sequence (ids are never reused, so any insert moves it) and FTS5's averages record
(row count and token totals: any delete moves it). A search whose key differs from the
snapshot's uses FTS5 and asks for a refresh; a refresh reads only the rows added since (a
delete drops postings; no row is ever rewritten in place).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from dataclasses import dataclass

import numpy as np

from supergrep.index.format import connect, select_in

log = logging.getLogger(__name__)

K1, B = 1.2, 0.75  # fts5_aux.c's bm25 constants
_KEY_SQL = ("SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'chunks'),"
            " (SELECT block FROM chunks_fts_data WHERE id = 1)")  # FTS5_AVERAGES_ROWID = 1
_PLAIN_TERM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _varints(blob: bytes) -> list[int]:
    """SQLite's varints (big-endian, 7 bits a byte, the 9th byte whole), as FTS5 writes them."""
    out, i = [], 0
    while i < len(blob):
        v = 0
        for n in range(9):
            b = blob[i]
            i += 1
            if n == 8:
                v = (v << 8) | b
                break
            v = (v << 7) | (b & 0x7F)
            if not b & 0x80:
                break
        out.append(v)
    return out


def read_key(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
    """The table state's key (see the module doc), or None where FTS5's records are unreadable."""
    try:
        seq, avg = conn.execute(_KEY_SQL).fetchone()
    except sqlite3.Error:
        return None
    return (int(seq or 0), bytes(avg or b""))


def fts_totals(key: tuple[int, bytes], n_cols: int) -> tuple[int, int] | None:
    """(rows, tokens over every column) from the averages record in ``key``: what FTS5's bm25
    takes as N and as N times the average row length."""
    v = _varints(key[1]) if key[1] else [0] * (n_cols + 1)
    if len(v) != n_cols + 1:
        return None
    return v[0], sum(v[1:])


@dataclass(frozen=True)
class _Snapshot:
    key: tuple[int, bytes]
    vocab: dict[str, int]  # term -> index into offsets; never mutated once published
    offsets: np.ndarray  # (terms + 1,) int64: term t's postings are [offsets[t], offsets[t + 1])
    pos: np.ndarray  # (postings,) int32 chunk position, ascending within a term
    freq: np.ndarray  # (postings,) float32 column-weighted term frequency (FTS5's aFreq: small
    # sums of the column weights, exact in float32 and widened exactly at query time)
    ids: np.ndarray  # (chunks,) int64 chunk id of each position, ascending
    length: np.ndarray  # (chunks,) int64 tokens over every column (FTS5's xColumnSize(-1))
    norm: np.ndarray  # (chunks,) float64 k1 * (1 - b + b * D / avgdl)
    n_row: int
    meta: dict[int, tuple[str, str, str, int]]  # chunk id -> (file path, kind, symbol, part)


def _tokenise(rows: list[tuple], weights: tuple[float, ...], vocab: dict[str, int], first_pos: int):
    """Postings of ``rows`` ((rowid, column text, ...)) as (term, pos, weight) per token, and
    each row's token count. New terms are added to ``vocab``."""
    get = vocab.setdefault
    terms: list[int] = []
    counts = np.zeros((len(rows), len(weights)), np.int64)
    for r, row in enumerate(rows):
        for c in range(len(weights)):
            toks = row[1 + c].split()
            counts[r, c] = len(toks)
            terms.extend([get(t, len(vocab)) for t in toks])
    per_row = counts.sum(axis=1)
    pos = np.repeat(np.arange(first_pos, first_pos + len(rows), dtype=np.int64), per_row)
    w = np.repeat(np.tile(np.asarray(weights, np.float64), len(rows)), counts.ravel())
    return np.asarray(terms, np.int64), pos, w, per_row


class Mirror:
    """The in-memory catalog of one index, shared by every handle of a long-lived process.

    ``max_chunks`` > 0 turns it on (the daemon sets it from ``[daemon] mirror_max_chunks``);
    a one-shot CLI search never builds it (reading the table costs more than one FTS5 query).
    Thread-safe: searches read an immutable snapshot; one refresh runs at a time."""

    def __init__(self, index_dir, weights: tuple[float, ...]):
        self.index_dir = index_dir
        self.weights = tuple(float(w) for w in weights)
        self.max_chunks = 0
        self.disabled: str | None = None  # why the mirror can't stand in for FTS5 here
        self._snap: _Snapshot | None = None
        self._skip: tuple[int, bytes] | None = None  # a state not to refresh for (too big, or failed)
        self._work = threading.Lock()  # one refresh at a time
        self._flag = threading.Lock()  # guards _pending
        self._pending = False
        self.refreshes = 0  # how many snapshots were published (tests, status)

    @property
    def ready(self) -> bool:
        return self._snap is not None

    # ------------------------------------------------------------------ queries
    def search(self, conn: sqlite3.Connection, terms: list[str], k: int,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """FTS5's ``bm25()`` top ``k`` for ``terms`` (``query_terms``), or None where this
        mirror can't answer for the table ``conn`` sees now (off, not built, stale: a refresh is
        then requested). ``allowed``: sorted chunk ids a result must be among."""
        if self.max_chunks <= 0 or self.disabled or any(not set(t) <= _PLAIN_TERM for t in terms):
            return None
        snap, key = self._snap, read_key(conn)
        if snap is None or key != snap.key:
            if key is not None and key != self._skip:
                self.request_refresh()
            return None
        if not len(snap.ids):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        score = np.zeros(len(snap.ids), np.float64)
        n_row, k1p1 = snap.n_row, K1 + 1.0
        for t in terms:
            ti = snap.vocab.get(t)
            if ti is None:
                continue
            a, b = int(snap.offsets[ti]), int(snap.offsets[ti + 1])
            n_hit = b - a
            if n_hit == 0:
                continue
            idf = math.log((n_row - n_hit + 0.5) / (n_hit + 0.5))  # libm's log, as SQLite's
            if idf <= 0.0:
                idf = 1e-6
            pos, f = snap.pos[a:b], snap.freq[a:b].astype(np.float64)
            # idf * ((aFreq * (k1 + 1.0)) / (aFreq + k1 * (1 - b + b * D / avgdl))), term by
            # term in the query's order: the sums FTS5 forms, rounding included
            score[pos] += idf * ((f * k1p1) / (f + snap.norm[pos]))
        if allowed is not None:
            at = np.minimum(np.searchsorted(snap.ids, allowed), len(snap.ids) - 1)
            keep = np.zeros(len(score), bool)
            keep[at[snap.ids[at] == allowed]] = True
            score[~keep] = 0.0
        cand = np.flatnonzero(score > 0.0)  # every match scores > 0 (idf >= 1e-6)
        if len(cand) > k:
            s = score[cand]
            kth = np.partition(s, len(s) - k)[len(s) - k]  # the k-th best score
            ties = cand[s == kth][: k - int((s > kth).sum())]  # lowest chunk ids first
            cand = np.concatenate([cand[s > kth], ties])
        order = np.lexsort((cand, -score[cand]))
        best = cand[order]
        return snap.ids[best], score[best].astype(np.float32)

    def chunk_meta(self, conn: sqlite3.Connection, ids) -> dict[int, tuple[str, str, str, int]] | None:
        """``Index.chunk_meta`` from memory, or None where the snapshot is not current."""
        snap = self._snap
        if self.max_chunks <= 0 or snap is None or read_key(conn) != snap.key:
            return None
        meta = snap.meta
        return {d: meta[d] for d in ids if d in meta}

    # ------------------------------------------------------------------ refresh
    def request_refresh(self) -> None:
        """Bring the snapshot up to date on a background thread (one at a time; coalesced)."""
        with self._flag:
            if self._pending or self.disabled or self.max_chunks <= 0:
                return
            self._pending = True
        threading.Thread(target=self._refresh_own, name="sg-mirror", daemon=True).start()

    def _refresh_own(self) -> None:
        try:
            conn = connect(self.index_dir, readonly=True)
            try:
                self.refresh(conn)
            finally:
                conn.close()
        except Exception as exc:  # the FTS5 path keeps answering; the next search asks again
            log.debug("refreshing the in-memory catalog of %s failed: %s", self.index_dir, exc)
        finally:
            with self._flag:
                self._pending = False

    def refresh(self, conn: sqlite3.Connection) -> bool:
        """Bring the snapshot to the state ``conn`` sees (one read transaction). Returns whether
        the mirror now answers for it."""
        if self.max_chunks <= 0 or self.disabled:
            return False
        with self._work:
            own_tx = not conn.in_transaction
            if own_tx:
                conn.execute("BEGIN")
            try:
                return self._refresh_locked(conn)
            except Exception:
                # not again for this state (searches would start a failing refresh each)
                self._skip = read_key(conn)
                raise
            finally:
                if own_tx:
                    conn.execute("COMMIT")

    def _refresh_locked(self, conn: sqlite3.Connection) -> bool:
        key = read_key(conn)
        if key is None:  # FTS5's own query will report what is wrong with the table
            return False
        snap = self._snap
        if snap is not None and snap.key == key:
            return True
        live = np.fromiter((r[0] for r in conn.execute("SELECT rowid FROM chunks_fts ORDER BY rowid")), np.int64)
        if len(live) > self.max_chunks:
            self._snap, self._skip = None, key
            return False
        added, kept = live, np.zeros(0, np.int64)
        if snap is not None:
            known = np.isin(live, snap.ids)
            if not len(snap.ids) or not len(live[~known]) or live[~known][0] > snap.ids[-1]:
                # the usual case: rows added since have larger ids (AUTOINCREMENT), so positions
                # stay in chunk id order; otherwise (a state older than the snapshot's) rebuild
                added, kept = live[~known], live[known]
        rows = _select_rows(conn, _FTS_SQL, added)
        meta = {r[0]: tuple(r[1:]) for r in _select_rows(conn, _META_SQL, added)}
        totals = fts_totals(key, len(self.weights))
        new = self._merged(snap, kept, rows, meta, key)
        if totals is None or totals != (new.n_row, int(new.length.sum())):
            # the rows are not what this mirror assumes (e.g. an index written by an older
            # supergrep): FTS5 answers from now on
            self.disabled = f"token totals differ from FTS5's ({totals} vs {new.n_row, int(new.length.sum())})"
            self._snap = None
            log.warning("the in-memory catalog is off for %s: %s", self.index_dir, self.disabled)
            return False
        self._snap = new
        self.refreshes += 1
        return True

    def _merged(self, snap: _Snapshot | None, kept: np.ndarray, rows: list[tuple],
                meta: dict[int, tuple], key) -> _Snapshot:
        """A new snapshot: ``snap``'s postings and metadata of the ``kept`` chunk ids plus those
        of ``rows`` (the added FTS rows) and ``meta`` (the added chunks')."""
        vocab = dict(snap.vocab) if snap is not None else {}
        if snap is not None:
            old = snap.meta
            meta = {**{d: old[d] for d in kept.tolist() if d in old}, **meta}
        if snap is not None and len(kept):
            old_pos = np.searchsorted(snap.ids, kept)  # positions of the kept chunks
            remap = np.full(len(snap.ids), -1, np.int64)
            remap[old_pos] = np.arange(len(kept))
            n_terms_old = len(snap.offsets) - 1
            term_of = np.repeat(np.arange(n_terms_old, dtype=np.int64), np.diff(snap.offsets))
            newpos = remap[snap.pos]
            ok = newpos >= 0
            o_term, o_pos, o_freq = term_of[ok], newpos[ok], snap.freq[ok]
            o_len = snap.length[old_pos]
        else:
            o_term = o_pos = np.zeros(0, np.int64)
            o_freq = np.zeros(0, np.float64)
            o_len = np.zeros(0, np.int64)
        t, p, w, per_row = _tokenise(rows, self.weights, vocab, len(kept))
        n_docs = len(kept) + len(rows)
        # (term, pos) -> summed column weights: aFreq, exact (small sums of 1, 2, 4)
        pair = t * max(n_docs, 1) + p
        upair, inv = np.unique(pair, return_inverse=True)
        n_term, n_pos = upair // max(n_docs, 1), upair % max(n_docs, 1)
        n_freq = np.bincount(inv, weights=w, minlength=len(upair))
        term = np.concatenate([o_term, n_term])
        pos = np.concatenate([o_pos, n_pos])
        freq = np.concatenate([o_freq, n_freq])
        # the old postings are sorted by (term, pos) and the new positions follow every old one:
        # a stable sort by term keeps each term's positions ascending (timsort: two sorted runs)
        order = np.argsort(term, kind="stable")
        term, pos, freq = term[order], pos[order], freq[order]
        offsets = np.zeros(len(vocab) + 1, np.int64)
        np.cumsum(np.bincount(term, minlength=len(vocab)), out=offsets[1:])
        ids = np.concatenate([kept, np.asarray([r[0] for r in rows], np.int64)])
        length = np.concatenate([o_len, per_row])
        n_row = len(ids)
        avgdl = float(length.sum()) / float(n_row) if n_row else 1.0
        norm = K1 * ((1 - B) + (B * length.astype(np.float64)) / avgdl)
        return _Snapshot(key, vocab, offsets, pos.astype(np.int32), freq.astype(np.float32), ids, length, norm,
                         n_row, meta)


_FTS_SQL = "SELECT rowid, path, symbol, body FROM chunks_fts WHERE rowid {} ORDER BY rowid"
_META_SQL = ("SELECT c.id, f.path, c.kind, c.symbol, c.part FROM chunks c JOIN files f ON f.id = c.file_id"
             " WHERE c.id {} ORDER BY c.id")


def _select_rows(conn: sqlite3.Connection, sql: str, ids: np.ndarray) -> list[tuple]:
    """The rows of ``sql`` (its ``{}`` the id condition) for the sorted ``ids``, in id order."""
    if not len(ids):
        return []
    if int(ids[-1]) - int(ids[0]) + 1 == len(ids):  # a contiguous run (every first build)
        return conn.execute(sql.format("BETWEEN ? AND ?"), (int(ids[0]), int(ids[-1]))).fetchall()
    return list(select_in(conn, sql.format("IN ({})"), ids.tolist()))
