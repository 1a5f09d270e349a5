"""`supergrep distill`: a projection head fitted to a frozen model's own MaxSim rankings."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run_main
from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model
from supergrep.train.distill import DistillConfig, distill_projection

VERBS = ["parse", "write", "read", "sort", "merge", "split", "count", "load", "send", "hash", "open", "close"]
NOUNS = ["config", "file", "list", "socket", "token", "header", "cache", "user", "path", "record", "stream", "tree"]


def _pairs(tmp_path: Path, n_train: int = 60, n_val: int = 16) -> Path:
    rnd = random.Random(0)
    rows = []
    for i in range(n_train + n_val):
        v, n, m = rnd.choice(VERBS), rnd.choice(NOUNS), rnd.choice(NOUNS)
        rows.append({"query": f"{v} the {n} into a {m}",
                     "code": f"def {v}_{n}_{i}(x):\n    return {m}(x).{v}()",
                     "symbol": f"{v}_{n}_{i}", "path": f"pkg/{n}.py", "language": rnd.choice(["python", "go"]),
                     "split": "train" if i < n_train else "val"})
    p = tmp_path / "pairs.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _cfg(tmp_path: Path, model: Path, **kw) -> DistillConfig:
    base = dict(pairs=_pairs(tmp_path), output=tmp_path / "head", model_path=str(model), dim=8, n_pairs=60,
                val_pairs=16, pool=30, top_k=8, steps=40, batch_size=8, lr=5e-3, device="cpu")
    return DistillConfig(**{**base, **kw})


def test_distilled_head_learns_the_teachers_order_and_loads_as_a_model(tmp_path, tiny_model):
    report = distill_projection(_cfg(tmp_path, tiny_model))
    # The loss is the KL to the teacher's ranking: training must lower it from the PCA start.
    assert report.losses[-1] < report.losses[0]
    assert report.teacher.agreement_at_10 == 1.0  # the teacher agrees with itself: the metric is wired
    spec = resolve_model(tmp_path / "head")
    assert spec.dim == 8 and spec.layout == "supergrep"
    meta = json.loads((tmp_path / "head" / "supergrep_model.json").read_text())
    assert meta["distilled"]["train_pairs"] == 60 and Path(meta["base"]) == tiny_model.resolve()


def test_the_head_is_applied_to_the_bases_vectors_as_trained(tmp_path, tiny_model):
    """What the head was trained on (normalize(W x) of the base's unit vectors) is exactly what
    the written model directory encodes (W on the hidden states, then normalised)."""
    distill_projection(_cfg(tmp_path, tiny_model, steps=5))
    from safetensors.numpy import load_file

    w = load_file(str(tmp_path / "head" / "projection" / "model.safetensors"))["linear.weight"]
    texts = ["def parse_config(path): return toml.load(path)", "merge two sorted lists"]
    base = Encoder(resolve_model(tiny_model), backend="torch", device="cpu").encode_documents(texts)
    head = Encoder(resolve_model(tmp_path / "head"), backend="torch", device="cpu").encode_documents(texts)
    for b, h in zip(base, head, strict=True):
        want = b @ w.T
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        assert h.shape == (len(b), 8)
        np.testing.assert_allclose(h, want, atol=1e-4)


def test_cli_refuses_what_cannot_work_with_exit_2(tmp_path, tiny_model):
    pairs = _pairs(tmp_path)
    common = ["distill", str(pairs), "--model-path", str(tiny_model), "--device", "cpu"]
    r = run_main([*common, "-o", str(tmp_path / "h"), "--dim", "32"])  # the tiny model is 32-d
    assert r.exit_code == 2 and "not smaller than the base model's 32" in r.output
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    r = run_main([*common, "-o", str(tmp_path / "busy"), "--dim", "8"])
    assert r.exit_code == 2 and "--force" in r.output
    assert (tmp_path / "busy" / "keep.txt").read_text() == "x"  # nothing lost
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "code": "c"}\n{"query": \n')
    r = run_main(["distill", str(bad), "-o", str(tmp_path / "h2"), "--model-path", str(tiny_model), "--dim", "8"])
    assert r.exit_code == 2 and ":2" in r.output


@pytest.mark.parametrize("pool,top_k", [(30, 30)])
def test_top_k_must_leave_competitors_in_the_pool(tmp_path, tiny_model, pool, top_k):
    with pytest.raises(Exception, match="smaller than pool"):
        distill_projection(_cfg(tmp_path, tiny_model, pool=pool, top_k=top_k))
