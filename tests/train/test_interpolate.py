"""WiSE-FT interpolation: alpha 0 is the run's starting model, alpha 1 the checkpoint, and every
output loads as a model (adapter folded at load) on the same or a new base."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from cli_runner import run_main
from supergrep.backends.adapters import projection_init
from supergrep.encoder import Encoder, resolve_model
from supergrep.train.checkpoint import write_projection
from supergrep.train.config import load_train_config
from supergrep.train.loop import run_training

TEXTS = ["def add(a, b):\n    return a + b", "split a shell command line into words", "class Index:\n    pass"]


def _train(model, pairs, out, **kw):
    cfg = load_train_config(None, dict(
        model_path=str(model), train_file=str(pairs), batch_size=8, max_steps=3, lr=5e-2, warmup_steps=1,
        save_every=3, eval_every=0, log_every=1, document_max_tokens=48, query_max_tokens=16, device="cpu",
        seed=7, output_dir=str(out), **kw))
    run_training(cfg, show_progress=False)
    return out / "step_0000003"


@pytest.fixture(scope="module")
def new_head_checkpoint(tiny_model, pairs_file, tmp_path_factory):
    """A BERT run that adds a new 16-d head (seeded orthogonal start)."""
    return _train(tiny_model, pairs_file, tmp_path_factory.mktemp("run-bert"), projection_dim=16)


def vectors(model_dir):
    return Encoder(resolve_model(model_dir), backend="torch", device="cpu").encode_documents(TEXTS)


def close(a, b, tol=1e-5):
    return all(x.shape == y.shape and np.allclose(x, y, atol=tol) for x, y in zip(a, b, strict=True))


def test_alpha_one_is_the_checkpoint_and_alpha_zero_the_start(new_head_checkpoint, tiny_model, tmp_path):
    for alpha in ("1", "0", "0.5"):
        r = run_main(["interpolate", new_head_checkpoint, "--alpha", alpha, "-o", tmp_path / alpha])
        assert r.exit_code == 0, r.output
        assert "seed 7" in r.output
    assert close(vectors(tmp_path / "1"), vectors(new_head_checkpoint))

    # The start: the base with the seeded head the run began from, and no adapter.
    start = tmp_path / "start"
    write_projection(start / "projection", projection_init(7, 16, resolve_model(tiny_model).dim))
    (start / "supergrep_model.json").write_text(json.dumps({"base": str(tiny_model), "projection": "projection"}))
    zero, half, one = vectors(tmp_path / "0"), vectors(tmp_path / "0.5"), vectors(tmp_path / "1")
    assert close(zero, vectors(start))
    assert not close(zero, one, 1e-3)  # the run moved: the test can tell the ends apart
    assert not close(half, zero, 1e-4) and not close(half, one, 1e-4)

    ck = load_file(str(new_head_checkpoint / "adapter_model.safetensors"))
    mid = load_file(str(tmp_path / "0.5" / "adapter_model.safetensors"))
    assert set(ck) == set(mid)
    for k, v in ck.items():  # B halved (the update B @ A halves), A untouched
        assert np.allclose(mid[k], v * 0.5 if k.endswith("lora_B.weight") else v), k
    spec = json.loads((tmp_path / "0.5" / "supergrep_model.json").read_text())
    assert spec["interpolated"]["alpha"] == 0.5 and spec["adapter"] == "."
    assert not (tmp_path / "0.5" / "trainer_state.safetensors").exists()


def test_a_run_that_trained_the_bases_own_head_starts_from_that_head(tiny_t5, pairs_file, tmp_path):
    ck = _train(tiny_t5, pairs_file, tmp_path / "run-t5", projection_dim=0)
    r = run_main(["interpolate", ck, "--alpha", "0", "-o", tmp_path / "zero"])
    assert r.exit_code == 0 and "from base" in r.output, r.output
    assert close(vectors(tmp_path / "zero"), vectors(tiny_t5))
    assert not close(vectors(ck), vectors(tiny_t5), 1e-3)


def test_the_output_can_be_rebased_and_merged(new_head_checkpoint, tiny_model, tmp_path, monkeypatch):
    import shutil

    copy = tmp_path / "base-copy"
    shutil.copytree(tiny_model, copy)
    monkeypatch.chdir(tmp_path)  # a relative --base is the user's path, from the working directory
    r = run_main(["interpolate", new_head_checkpoint, "--alpha", "0.5", "--base", "base-copy", "-o", tmp_path / "w"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "w" / "supergrep_model.json").read_text())["base"] == str(copy)
    r = run_main(["merge", tmp_path / "w", "-o", tmp_path / "merged"])
    assert r.exit_code == 0, r.output
    assert close(vectors(tmp_path / "merged"), vectors(tmp_path / "w"), 1e-4)


def test_bad_input_exits_2_and_writes_nothing(new_head_checkpoint, tiny_model, tmp_path):
    head_only = tmp_path / "head-only"  # a model with a head but no adapter (what `distill` writes)
    write_projection(head_only / "projection", projection_init(0, 16, resolve_model(tiny_model).dim))
    (head_only / "supergrep_model.json").write_text(json.dumps({"base": str(tiny_model), "projection": "projection"}))
    cases = [
        ([new_head_checkpoint, "--alpha", "1.5"], "between 0"),
        ([tmp_path / "missing", "--alpha", "0.5"], "does not exist"),
        ([tiny_model, "--alpha", "0.5"], "checkpoint directory"),
        ([head_only, "--alpha", "0.5"], "no adapter"),
        ([new_head_checkpoint, "--alpha", "0.5", "--base", tmp_path / "nope"], "does not exist"),
    ]
    for args, words in cases:
        r = run_main(["interpolate", *args, "-o", tmp_path / "out"])
        assert r.exit_code == 2 and words in r.output, (args, r.output)
        assert not (tmp_path / "out").exists()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    r = run_main(["interpolate", new_head_checkpoint, "--alpha", "0.5", "-o", tmp_path / "out"])
    assert r.exit_code == 2 and "--force" in r.output
    assert (tmp_path / "out" / "keep.txt").read_text() == "x"
