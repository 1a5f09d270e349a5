"""`supergrep profile`, the memory recorder and sequence packing, on tiny models (CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from supergrep.train.data import pack_documents
from supergrep.train.memory import MemoryRecorder, MiB, memory_profile


def test_profile_cli_components_add_up_and_files_are_written(tiny_model, pairs_file, tmp_path):
    from click.testing import CliRunner

    from supergrep.cli import cli

    out, trace = tmp_path / "prof", tmp_path / "trace.json"
    got = CliRunner().invoke(cli, [
        "profile", "--model-path", str(tiny_model), "--train-file", str(pairs_file), "--batch-size", "8",
        "--document-max-tokens", "64", "--query-max-tokens", "16", "--device", "cpu", "--steps", "3",
        "--warmup", "1", "--unsynced-steps", "2", "--out", str(out), "--trace", str(trace), "--json"])
    assert got.exit_code == 0, got.output
    res = json.loads(got.output[got.output.index("{"):])
    names = [r["component"] for r in res["components"]]
    assert names == ["data", "forward_query", "forward_document", "maxsim", "loss", "backward", "optimizer"]
    # the components are contiguous cuts of the step: they add up to it
    assert res["components_sum_ms"] == pytest.approx(res["step_ms"], rel=0.02)
    assert sum(r["pct"] for r in res["components"]) == pytest.approx(100, abs=2)
    assert all(r["mean_ms"] >= 0 and r["std_ms"] >= 0 for r in res["components"])
    # the plain (unsynced) steps are timed too; no bound against the cut ones either way: on a
    # loaded 2-core machine the synchronised steps took 25x as long as the plain ones (2026-11-27)
    # and the plain ones 31x as long as the synchronised ones (2026-11-29, beside a CPU training run)
    assert res["unsynced_steps"] == 2 and 0 < res["unsynced_step_ms"] < float("inf")
    assert res["data_pct"] < 50 and res["memory"]["samples"] == 4
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    assert "| backward |" in (out / "profile.md").read_text()
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"forward_query", "backward", "optimizer"} <= {e.get("name") for e in events}


def test_profile_with_packing_runs_packed_steps(tiny_model, pairs_file, tmp_path):
    from click.testing import CliRunner

    from supergrep.cli import cli

    got = CliRunner().invoke(cli, [
        "profile", "--model-path", str(tiny_model), "--train-file", str(pairs_file), "--batch-size", "8",
        "--document-max-tokens", "64", "--query-max-tokens", "16", "--device", "cpu", "--steps", "2",
        "--warmup", "1", "--packing", "--out", str(tmp_path / "prof"), "--json"])
    assert got.exit_code == 0, got.output
    res = json.loads(got.output[got.output.index("{"):])
    assert res["components_sum_ms"] == pytest.approx(res["step_ms"], rel=0.02)


def _series(rec: MemoryRecorder, values) -> MemoryRecorder:
    for i, v in enumerate(values):
        rec.samples.append({"step": i, "t": 0.0, "rss": int(v)})
    return rec


def test_leak_detector_flags_steady_growth_only():
    rng = np.random.default_rng(0)
    base = 2_000 * MiB
    leak = _series(MemoryRecorder(), base + np.arange(60) * 2 * MiB + rng.normal(0, 3 * MiB, 60))
    flat = _series(MemoryRecorder(), base + rng.normal(0, 8 * MiB, 60))
    jump = _series(MemoryRecorder(), base + np.where(np.arange(60) < 30, 0, 200 * MiB))
    assert leak.leak().leak and leak.leak().slope_bytes_per_step == pytest.approx(2 * MiB, rel=0.1)
    assert not flat.leak().leak
    assert not jump.leak().leak  # a cache filling once
    assert leak.summary()["leak"] and not flat.summary()["leak"]


def test_recorder_sees_a_real_leak_in_this_process(tmp_path):
    import mmap

    kept = []
    rec = MemoryRecorder(window=20)
    with memory_profile("loop", recorder=rec):
        for step in range(1, 21):
            # 4 MiB of fresh anonymous pages kept every step, each page touched. A plain bytes object
            # can be served from heap pages earlier tests freed (already resident), so RSS would not
            # grow at first and the slope would depend on what ran before (CI saw 1.5 MiB/step).
            block = mmap.mmap(-1, 4 << 20)
            for off in range(0, 4 << 20, mmap.PAGESIZE):
                block[off] = 1
            kept.append(block)
            rec.sample(step)
    report = rec.leak("rss")
    assert report.leak and report.slope_bytes_per_step > 2 * MiB, report
    assert rec.plot(tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    for block in kept:
        block.close()


def test_train_memory_profile_flag_writes_its_files(tiny_model, pairs_file, tmp_path):
    from supergrep.train.config import load_train_config
    from supergrep.train.loop import run_training

    cfg = load_train_config(None, dict(model_path=str(tiny_model), train_file=str(pairs_file), batch_size=8,
                                       max_steps=3, document_max_tokens=64, query_max_tokens=16, eval_every=0,
                                       output_dir=str(tmp_path / "run"), device="cpu", memory_profile=True,
                                       packing=True))
    run_training(cfg, show_progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "memory.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["rss"] > 0 for r in rows)
    assert (tmp_path / "run" / "memory.png").is_file()
    summary = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert summary["kind"] == "summary" and summary["memory"]["leak"] is False


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_t5"])
def test_packed_documents_give_the_padded_vectors_and_loss(model_fixture, request, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    model = request.getfixturevalue(model_fixture)
    trainer, batch = trainer_and_batch(cfg_for(model, pairs_file, tmp_path, packing=True))
    trainer.model.eval()  # no dropout: packed and padded must agree to rounding
    keep = np.array([90, 10, 33, 50, 7, 96, 12, 60])[:, None] > np.arange(batch.d_ids.shape[1])[None]
    batch.d_mask = batch.d_mask & keep  # lengths 7..96 so several documents share a row
    batch.d_ids = np.where(batch.d_mask, batch.d_ids, 0)
    batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
    assert batch.packed.ids.shape[0] < batch.d_ids.shape[0]
    q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
    packed = trainer.packed_to_device(batch)
    with torch.no_grad():
        padded_vecs = trainer.encode(d_ids, d_mask)
        packed_vecs = trainer.encode_documents(d_ids, d_mask, packed)
    torch.testing.assert_close(packed_vecs[d_mask], padded_vecs[d_mask], atol=2e-5, rtol=1e-4)
    l1, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask)
    l2, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask, packed=packed)
    assert float(l1) == pytest.approx(float(l2), rel=1e-5)
    # queries packed into the same rows as the documents: one encoder pass, the same loss
    joint = trainer.joint_packed_to_device(batch)
    assert joint[3].shape[0] == q_ids.shape[0] + d_ids.shape[0]
    assert joint[0].numel() < packed[0].numel() + q_ids.numel()  # queries filled the rows' gaps
    l3, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask, joint=joint)
    assert float(l3) == pytest.approx(float(l1), rel=1e-5)


def test_packing_needs_sdpa(tiny_model, pairs_file):
    from supergrep.errors import ConfigError
    from supergrep.train.config import load_train_config

    with pytest.raises(ConfigError, match="packing needs attn_implementation sdpa"):
        load_train_config(None, dict(model_path=str(tiny_model), train_file=str(pairs_file), packing=True,
                                     attn_implementation="eager"))


def test_mlx_counters_are_read_when_mlx_is_loaded():
    mx = pytest.importorskip("mlx.core")
    from supergrep.train.memory import device_memory

    a = mx.ones((256, 256))
    mx.eval(a)
    got = device_memory()
    assert got["mlx_active"] >= 256 * 256 * 4 and "mlx_peak" in got
    rec = MemoryRecorder()
    rec.sample(0)
    assert "mlx_active" in rec.leak_keys()


def test_trace_env_records_the_chosen_steps_of_a_real_run(tiny_model, pairs_file, tmp_path, monkeypatch):
    """SUPERGREP_TRACE_STEPS / _DIR (train/trace.py): a profiler trace of steps 2-3 of a training
    run, the way the multi-GPU study reads each rank's collectives."""
    import gzip

    from supergrep.train.config import load_train_config
    from supergrep.train.loop import run_training

    monkeypatch.setenv("SUPERGREP_TRACE_STEPS", "2:2")
    monkeypatch.setenv("SUPERGREP_TRACE_DIR", str(tmp_path / "trace"))
    cfg = load_train_config(None, dict(model_path=str(tiny_model), train_file=str(pairs_file), batch_size=8,
                                       max_steps=4, document_max_tokens=64, query_max_tokens=16, eval_every=0,
                                       output_dir=str(tmp_path / "run"), device="cpu"))
    run_training(cfg, show_progress=False)
    text = (tmp_path / "trace" / "trace-rank0.txt").read_text()
    walls = text.splitlines()[0].split(": ")[-1].split(", ")
    assert text.startswith("rank 0: steps 2-3") and len(walls) == 2 and all(float(w) > 0 for w in walls)
    assert "aten::" in text  # the operator table is there
    events = json.loads(gzip.open(tmp_path / "trace" / "trace-rank0.json.gz").read())["traceEvents"]
    assert any("aten::mm" in e.get("name", "") or "aten::addmm" in e.get("name", "") for e in events)
