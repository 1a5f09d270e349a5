"""`--resume` continues exactly: a real `supergrep train` killed with SIGKILL mid-run and resumed
gives, on CPU, the same losses to the bit as an uninterrupted run, and the same final weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np


def train(out, model, pairs, extra_env=None, resume=False):
    args = [sys.executable, "-m", "supergrep", "train", "--model-path", str(model), "--train-file", str(pairs),
            "--output-dir", str(out), "--batch-size", "8", "--max-steps", "10", "--log-every", "1",
            "--save-every", "4", "--eval-every", "0", "--lr", "5e-3", "--warmup-steps", "2",
            "--lora-dropout", "0.1", "--projection-dim", "16", "--document-max-tokens", "64",
            "--query-max-tokens", "24", "--device", "cpu", "--quiet"]
    if resume:
        args.append("--resume")
    env = {**os.environ, **(extra_env or {})}
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)


def losses(out):
    return [(e["step"], e["loss"]) for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if e["kind"] == "train"]


def test_killed_run_resumes_to_the_bit(tiny_model, pairs_file, tmp_path):
    from safetensors.numpy import load_file

    a, b = tmp_path / "a", tmp_path / "b"
    done = train(a, tiny_model, pairs_file)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = train(b, tiny_model, pairs_file, {"SUPERGREP_TEST_KILL_AT": "train_step:7"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert sorted(p.name for p in b.iterdir() if p.name.startswith("step_")) == ["step_0000004"]
    resumed = train(b, tiny_model, pairs_file, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    want, got = losses(a), losses(b)
    assert [s for s, _ in want] == list(range(1, 11))
    assert got == want  # the same floats, bit for bit, including steps 5-10 after the restart
    wa = load_file(str(a / "step_0000010" / "adapter_model.safetensors"))
    wb = load_file(str(b / "step_0000010" / "adapter_model.safetensors"))
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_resume_refuses_a_different_run(tiny_model, pairs_file, tmp_path):
    out = tmp_path / "c"
    assert train(out, tiny_model, pairs_file).returncode == 0
    r = subprocess.run([sys.executable, "-m", "supergrep", "train", "--model-path", str(tiny_model),
                        "--train-file", str(pairs_file), "--output-dir", str(out), "--batch-size", "16",
                        "--resume", "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "batch_size (8 -> 16)" in r.stderr


def test_a_checkpoint_from_before_model_dropout_resumes_only_with_the_old_dropout(tiny_model, pairs_file, tmp_path):
    """Checkpoints written before ``model_dropout`` existed ran with the model's own dropout (the
    old default, -1): resuming one under today's default (0) would change the recipe mid-run."""
    out = tmp_path / "old"
    assert train(out, tiny_model, pairs_file).returncode == 0
    for cfg_file in out.glob("step_*/run_config.json"):
        cfg = json.loads(cfg_file.read_text())
        assert cfg.pop("model_dropout") == 0.0
        cfg_file.write_text(json.dumps(cfg))
    again = train(out, tiny_model, pairs_file, resume=True)
    assert again.returncode == 2 and "model_dropout (-1.0 -> 0.0)" in again.stderr
    args = [sys.executable, "-m", "supergrep", "train", "--model-path", str(tiny_model), "--train-file", str(pairs_file),
            "--output-dir", str(out), "--batch-size", "8", "--max-steps", "12", "--log-every", "1",
            "--save-every", "4", "--eval-every", "0", "--lr", "5e-3", "--warmup-steps", "2",
            "--lora-dropout", "0.1", "--projection-dim", "16", "--document-max-tokens", "64",
            "--query-max-tokens", "24", "--device", "cpu", "--quiet", "--resume", "--model-dropout", "-1"]
    ok = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert [s for s, _ in losses(out)][-2:] == [11, 12]
