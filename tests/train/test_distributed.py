"""Data-parallel training under torchrun (2 CPU processes, gloo) against one process.

One torchrun launch (tests/train/dist_helper.py) does every two-rank part, to keep CI fast:
gradients of one step in plain and GradCache mode, a fresh `supergrep train` and a resume of a
one-process checkpoint. The one-process references run in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from supergrep.train.config import load_train_config
from supergrep.train.loop import run_training

HELPER = Path(__file__).with_name("dist_helper.py")
SRC = Path(__file__).resolve().parents[2] / "src"

KEYS = dict(batch_size=8, max_steps=6, log_every=1, save_every=3, eval_every=3, val_batches=3, lr=5e-3,
            warmup_steps=2, projection_dim=16, document_max_tokens=64, query_max_tokens=24, device="cpu",
            seed=0)


def flags(keys: dict) -> list[str]:
    return [a for k, v in keys.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(n: int, *args: str, env: dict | None = None, timeout: int = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-port", str(free_port()), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def events(run: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if e["kind"] == kind]


@pytest.fixture(scope="module")
def still_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny BERT without dropout: two runs must compute the same function."""
    path = tmp_path_factory.mktemp("still") / "bert"
    shutil.copytree(tiny_model, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def one_process_grads(model: Path, pairs: Path, overrides: dict) -> tuple[float, dict]:
    """A one-process step's loss and gradients on the first global batch (as dist_helper takes it)."""
    from supergrep.backends.adapters import LoRAConfig
    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.tokenize import RoleTokenizer
    from supergrep.train.data import bucket_batches, cached_tokens, collate
    from supergrep.train.loop import make_trainer, training_spec

    cfg = load_train_config(None, {"model_path": str(model), "train_file": str(pairs), **overrides})
    spec = training_spec(cfg)
    tok = RoleTokenizer(spec)
    cache = cached_tokens(load_pairs(cfg.train_file, split="train")[:64], None, spec, tok, "t")
    rows = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, 0, 0)[0]
    batch = collate(cache, rows, tok, 0, cfg.hard_negatives, cfg.pad_multiple)
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    trainer = make_trainer(cfg, spec, lora)
    trainer.train_step(batch, 1e-3)
    step = trainer._step_cached if trainer.cached else trainer._step_plain
    loss, _ = step(*trainer._to_device(batch))
    return float(loss), {f"grad.{n}": p.grad.detach().numpy() for n, p in trainer.params.items()}


def with_negatives(pairs: Path, tmp_path: Path) -> Path:
    """The pairs with 0, 1 or 2 hard negatives each: ranks hold different numbers of them."""
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    for i, r in enumerate(rows):
        r["negatives"] = [rows[(i + k) % len(rows)]["code"] for k in range(1, 1 + i % 3)]
    out = tmp_path / "negatives.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_two_ranks_train_resume_and_checkpoint_like_one_process(still_model, pairs_file, tmp_path):
    # One process: the reference run (checkpoints at steps 3 and 6) and reference gradients.
    one = tmp_path / "one"
    run_training(load_train_config(None, {"model_path": str(still_model), "train_file": str(pairs_file),
                                          "output_dir": str(one), **KEYS}), show_progress=False)
    grads = {"plain": dict(KEYS, batch_size=8),
             "cached": dict(KEYS, batch_size=8, cached_contrastive=True, mini_batch_size=3, distill_weight=0.5),
             "accum": dict(KEYS, batch_size=8, grad_accum_steps=2),
             "negatives": dict(KEYS, batch_size=8, hard_negatives=True, train_file=str(with_negatives(pairs_file, tmp_path)))}
    job = {"model": str(still_model), "pairs": str(pairs_file), "out": str(tmp_path),
           "train_args": flags(KEYS) + ["--quiet"], "resume": str(one / "step_0000003"),
           "grads": [{"name": k, "cfg": v} for k, v in grads.items()]}
    (tmp_path / "job.json").write_text(json.dumps(job))

    r = torchrun(2, str(HELPER), str(tmp_path / "job.json"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]

    # Gradients: the mean over ranks of (local queries x all ranks' documents) = the full batch's,
    # in plain, GradCache (with distillation), accumulation and uneven-hard-negatives steps.
    for name, overrides in grads.items():
        want_loss, want = one_process_grads(still_model, pairs_file, overrides)
        got = np.load(tmp_path / f"grads-{name}.npz")
        assert float(got["loss"]) == pytest.approx(want_loss, rel=1e-5), name
        assert set(got.files) - {"loss"} == set(want)
        for key, w in want.items():
            np.testing.assert_allclose(got[key], w, rtol=1e-4, atol=1e-6, err_msg=f"{name} {key}")

    # Training: the same global batches, so the same losses, step by step, and the same validation.
    fresh = tmp_path / "fresh"
    ref_train, ref_val = events(one, "train"), events(one, "val")
    got_train, got_val = events(fresh, "train"), events(fresh, "val")
    assert [e["step"] for e in got_train] == list(range(1, 7))  # rank 0 alone logged: no duplicates
    np.testing.assert_allclose([e["loss"] for e in got_train], [e["loss"] for e in ref_train], rtol=1e-5)
    np.testing.assert_allclose([e["acc"] for e in got_train], [e["acc"] for e in ref_train])
    assert [e["step"] for e in got_val] == [e["step"] for e in ref_val] == [0, 3, 6]
    np.testing.assert_allclose([e["val_loss"] for e in got_val], [e["val_loss"] for e in ref_val], rtol=1e-5)
    assert events(fresh, "summary")[0]["world_size"] == 2

    # Rank 0 alone wrote checkpoints (rank 1's save_checkpoint was booby-trapped), with every rank's RNG.
    assert not list(tmp_path.glob("rank1-wrote-*"))
    assert sorted(p.name for p in fresh.glob("step_*")) == ["step_0000003", "step_0000006"]
    state = json.loads((fresh / "step_0000003" / "trainer_state.json").read_text())
    assert (state["step"], state["epoch"], state["index"], state["meta"]["world_size"]) == (3, 0, 3, 2)
    from safetensors.numpy import load_file

    assert "rng.cpu.rank1" in load_file(str(fresh / "step_0000003" / "trainer_state.safetensors"))

    # Resume on another world size: 1 process -> 2 ranks (in the launch) and 2 ranks -> 1 process.
    resumed = tmp_path / "resumed"
    assert [e["step"] for e in events(resumed, "train")] == [4, 5, 6]
    np.testing.assert_allclose([e["loss"] for e in events(resumed, "train")],
                               [e["loss"] for e in ref_train[3:]], rtol=1e-5)
    back = tmp_path / "back"
    run_training(load_train_config(None, {"model_path": str(still_model), "train_file": str(pairs_file),
                                          "output_dir": str(back), **KEYS}),
                 resume=fresh / "step_0000003", show_progress=False)
    assert [e["step"] for e in events(back, "train")] == [4, 5, 6]
    np.testing.assert_allclose([e["loss"] for e in events(back, "train")],
                               [e["loss"] for e in ref_train[3:]], rtol=1e-5)


def test_batch_that_does_not_split_over_the_ranks_is_refused():
    from supergrep.errors import ConfigError
    from supergrep.train.distributed import World, check_config

    with pytest.raises(ConfigError, match="multiple of grad_accum_steps x world size = 2 x 2"):
        check_config(6, 2, World(0, 2))
