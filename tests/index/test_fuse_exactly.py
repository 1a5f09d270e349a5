"""Hybrid fusion's exact-scoring loop (``Searcher._fuse_exactly``) runs over arrays; it must return
what the loop over dicts it replaced returns, bit for bit, and leave the same semantic scores and
the same set of exactly scored chunks behind: the reference below is that loop, verbatim."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from supergrep.index.search import Searcher
from supergrep.scoring.fusion import score_fusion


def reference(score, sem, lex, exact, margin, sem_w, lex_w, limit, penalty):
    """The dict loop of supergrep before the array version (f0d4... in git history)."""
    def fuse():
        fused = score_fusion(sem, lex, sem_w, lex_w)
        for d, amount in (penalty or {}).items():
            if d in fused:
                fused[d] -= amount
        return fused

    for _ in range(16):
        fused = fuse()
        if len(exact) >= len(sem) or not sem:
            return fused
        low = sorted(sem, key=lambda d: sem[d])[:16]
        if low[0] not in exact:
            todo = [d for d in low if d not in exact]
        else:
            hi, lo = max(sem.values()), sem[low[0]]
            slack = sem_w * 2 * margin / (hi - lo) if hi > lo else float("inf")
            ranked = sorted(fused.values(), reverse=True)
            bar = ranked[min(limit, len(ranked)) - 1]
            todo = [d for d in sem if d not in exact and fused[d] + slack >= bar]
        if not todo:
            return fused
        got = score(todo)
        for d, v in zip(todo, got.tolist(), strict=True):
            exact.add(d)
            if np.isfinite(v):
                sem[d] = float(v)
            else:
                sem.pop(d)
    return fuse()


class FakeStore:
    """Exact scores: each chunk's estimate moved by a fixed per-chunk error (some chunks have no
    vectors: -inf), in float32 as the real store returns them."""

    def __init__(self, truth):
        self.truth = truth
        self.calls = []

    def score(self, conn, q, ids):
        self.calls.append(list(ids))
        return np.array([self.truth[d] for d in ids], np.float32)


def case(seed):
    rng = random.Random(seed)
    n_sem = rng.choice([1, 3, 30, 250])
    ids = rng.sample(range(1, 10_000), n_sem + 60)
    sem_ids, lex_only = ids[:n_sem], ids[n_sem:]
    coarse = rng.random() < 0.3  # ties everywhere
    est = {d: float(np.float32(round(rng.uniform(5, 20), 1 if coarse else 6))) for d in sem_ids}
    if rng.random() < 0.1:
        est = {d: 7.5 for d in sem_ids}  # hi == lo
    truth = {d: (-math.inf if rng.random() < 0.03 else v + rng.gauss(0, 0.6)) for d, v in est.items()}
    n_exact = rng.randint(0, n_sem)
    exact = set(rng.sample(sem_ids, n_exact))
    for d in exact:
        if math.isfinite(truth[d]):
            est[d] = float(np.float32(truth[d]))
    lex_pool = rng.sample(sem_ids, min(len(sem_ids), rng.randint(0, 40))) + rng.sample(lex_only, rng.randint(0, 20))
    lex = {d: float(np.float32(rng.uniform(0.5, 12))) for d in lex_pool} if rng.random() < 0.9 else {}
    penalty = {d: rng.choice([0.1, 0.2, 0.30000000000000004]) for d in rng.sample(ids, 20)} if rng.random() < 0.7 else None
    margin = rng.choice([0.0, 0.05, 0.4, 3.0])
    return est, lex, exact, truth, margin, rng.choice([1.0, 0.7]), rng.choice([0.15, 1.0]), rng.choice([1, 3, 10, 30]), penalty


@pytest.mark.parametrize("seed", range(60))
def test_array_loop_equals_the_dict_loop(seed):
    est, lex, exact, truth, margin, sem_w, lex_w, limit, penalty = case(seed)
    store = FakeStore(truth)
    sem_a, exact_a = dict(est), set(exact)
    want = reference(lambda todo: store.score(None, None, todo), sem_a, lex, exact_a, margin, sem_w, lex_w,
                     limit, penalty)
    calls_want, store.calls = store.calls, []

    s = Searcher.__new__(Searcher)
    s.index = type("I", (), {"store": store, "conn": None})()
    sem_b, exact_b = dict(est), set(exact)
    got = s._fuse_exactly(None, sem_b, lex, exact_b, margin, sem_w, lex_w, limit, penalty)
    assert got == want  # the same chunks with the same floats (== on floats: bit for bit here)
    assert sem_b == sem_a and exact_b == exact_a
    assert [sorted(c) for c in store.calls] == [sorted(c) for c in calls_want]  # the same rounds
