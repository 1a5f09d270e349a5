"""`bench train`/`bench encode` on toy workloads: they run end to end and their numbers agree."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from supergrep.backends.packing import pack_queries_and_documents
from supergrep.bench.flops import ModelFlops, model_flops
from supergrep.bench.train import (
    Variant,
    build_trainer,
    computed_tokens,
    grid_variants,
    parse_variant,
    run_train_bench,
    train_config,
    variant_name,
    workload_flops,
)
from supergrep.bench.workloads import get_workload, make_batches, make_pool

PEAK = {"cpu": {"flops_per_s": 1e11, "tflops": 0.1, "dtype": "float32", "n": 0, "device": "cpu"}}


@pytest.fixture(scope="module")
def tiny_bert_workload(tmp_path_factory):
    return get_workload("minilm-tiny", tmp_path_factory.mktemp("bench"))


def test_flop_count_of_a_tiny_bert_matches_a_hand_count(tiny_bert_workload):
    wl = tiny_bert_workload  # 2 layers, hidden 32, intermediate 128, LoRA r4 on 6 projections, projection 32 -> 16
    tr = build_trainer(wl, Variant("count"), "cpu", wl.batch_size)
    mf = model_flops(tr.model, tr.proj, wl.projection_dim)
    assert workload_flops(wl) == mf
    per_layer_frozen = 4 * 32 * 32 + 32 * 128 + 128 * 32  # q, k, v, attention output; intermediate; output
    per_layer_lora = 4 * 4 * (32 + 32) + 2 * 4 * (32 + 128)  # r * (in + out) for A and B
    assert mf == ModelFlops(n_frozen=2 * per_layer_frozen, n_trainable=2 * per_layer_lora + 32 * 16,
                            n_layers=2, d_attn=32, dim=16)
    # One query of 3 tokens, one document of 5: by hand, term by term.
    per_tok = lambda n: 4 * mf.n_frozen + 6 * mf.n_trainable + 12 * 2 * 32 * n  # noqa: E731
    assert mf.train_step([3], [5]) == 3 * per_tok(3) + 5 * per_tok(5) + 6 * 16 * 3 * 5
    assert mf.encode([5]) == 5 * (2 * (mf.n_frozen + mf.n_trainable) + 4 * 2 * 32 * 5)


def test_variant_language_and_grid(tiny_bert_workload):
    v = parse_variant("bf16+compile+packing+bs=16")
    assert (v.precision, v.compile, v.packing, v.batch_size, v.is_naive) == ("bf16", True, True, 16, False)
    assert parse_variant("naive").is_naive
    with pytest.raises(ValueError, match="unknown variant token"):
        parse_variant("bf16+warp")
    names = [g.name for g in grid_variants(["precision=fp32,bf16", "compile=0,1"])]
    assert names == ["naive", "fp32", "fp32+compile", "bf16", "bf16+compile"]
    g = parse_variant("bf16+cudagraphs+packing+pad=64")
    assert (g.compile, g.compile_mode, g.pad_multiple) == (True, "reduce-overhead", 64)
    assert variant_name(g) == "bf16+compile+cudagraphs+packing+pad=64"
    assert parse_variant(variant_name(g)) == replace(g, name=variant_name(g))
    cfg = train_config(tiny_bert_workload, g, "cpu", 8)
    assert (cfg.compile_mode, cfg.pad_multiple) == ("reduce-overhead", 64)


def test_maxsim_token_sets_the_switch_for_each_variant_step_and_restores_it(tiny_bert_workload, monkeypatch):
    """``maxsim=kernels|einsum``: interleaved variants share torch_maxsim.ENABLED, so each step
    of a variant runs with its own setting; the process's setting is back afterwards."""
    from supergrep.backends import torch_maxsim
    from supergrep.bench import train as bt

    v = parse_variant("fp32+maxsim=einsum")
    assert v.maxsim == "einsum" and variant_name(v) == "fp32+maxsim=einsum"
    assert parse_variant(variant_name(v)) == replace(v, name=variant_name(v))
    with pytest.raises(ValueError, match="unknown maxsim 'fast'"):
        parse_variant("fp32+maxsim=fast")
    seen: list[tuple[str, object]] = []
    real_step = bt._Run._step

    def step(self, b, record=True):
        real_step(self, b, record)
        seen.append((self.v.name, torch_maxsim.ENABLED))

    monkeypatch.setattr(bt._Run, "_step", step)
    monkeypatch.setattr(torch_maxsim, "ENABLED", "auto")
    variants = [parse_variant(x) for x in ("fp32+maxsim=kernels", "fp32+maxsim=einsum", "fp32")]
    run_train_bench(tiny_bert_workload, variants, steps=1, warmup=1, peak=PEAK, rounds=2)
    want = {"fp32+maxsim=kernels": True, "fp32+maxsim=einsum": False, "fp32": "auto"}
    # warm-up 1 + 2 rounds of 1 step each, and the first variant's untimed settling step
    assert len(seen) == 3 * (1 + 2) + 1 and all(state == want[name] for name, state in seen)
    assert torch_maxsim.ENABLED == "auto"


def test_bias_and_tile_tokens_set_their_switches_each_step_and_restore_them(tiny_bert_workload, monkeypatch):
    """``bias16|bias32`` and ``bwdtiles|sharedtiles``: each step runs with its variant's T5 bias
    dtype and attention-backward tiles; a variant without the token runs the process's settings,
    which are back afterwards."""
    from supergrep.backends import t5_attention, torch_t5_varlen
    from supergrep.bench import train as bt

    v = parse_variant("fp32+bias32+sharedtiles")
    assert (v.bias16, v.bwd_tiles) == (False, False) and variant_name(v) == "fp32+bias32+sharedtiles"
    assert parse_variant(variant_name(v)) == replace(v, name=variant_name(v))
    assert (parse_variant("fp32+bias16+bwdtiles").bias16, parse_variant("fp32").bwd_tiles) == (True, None)
    seen: list[tuple[str, bool, tuple | None]] = []
    real_step = bt._Run._step

    def step(self, b, record=True):
        real_step(self, b, record)
        seen.append((self.v.name, torch_t5_varlen.BIAS16_TRAINING, t5_attention._BWD_BLOCKS["dkdv"]))

    monkeypatch.setattr(bt._Run, "_step", step)
    own = (64, 64, 4, 3)
    monkeypatch.setattr(torch_t5_varlen, "BIAS16_TRAINING", True)
    monkeypatch.setattr(t5_attention, "_BWD_BLOCKS", {"dkdv": own, "dq": (64, 32, 4, 3)})
    variants = [parse_variant(x) for x in ("fp32+bias32+sharedtiles", "fp32", "fp32+bias32")]
    run_train_bench(tiny_bert_workload, variants, steps=1, warmup=1, peak=PEAK, rounds=2)
    want = {"fp32+bias32+sharedtiles": (False, None), "fp32": (True, own), "fp32+bias32": (False, own)}
    assert len(seen) == 3 * (1 + 2) + 1 and all((b16, t) == want[n] for n, b16, t in seen), seen
    assert torch_t5_varlen.BIAS16_TRAINING is True and t5_attention._BWD_BLOCKS["dkdv"] == own


def test_steps_get_batches_staged_ahead_unless_nostage_or_naive(tiny_bert_workload, monkeypatch):
    """As `train`'s prefetch thread does, bench stages each batch (TorchTrainer.stage) in a
    background thread; ``nostage`` and the naive loop (``sync``) hand the step raw batches."""
    from supergrep.bench import train as bt

    v = parse_variant("fp32+packing+nostage")
    assert not v.stage and variant_name(v) == "fp32+nostage+packing"
    assert parse_variant(variant_name(v)) == replace(v, name=variant_name(v))
    seen: list[tuple[str, bool]] = []
    real_step = bt._Run._step

    def step(self, b, record=True):
        seen.append((self.v.name, b.staged is not None))
        real_step(self, b, record)

    monkeypatch.setattr(bt._Run, "_step", step)
    variants = [parse_variant(x) for x in ("fp32+packing", "fp32+packing+nostage", "naive")]
    run_train_bench(tiny_bert_workload, variants, steps=2, warmup=1, peak=PEAK)
    want = {"fp32+packing": True, "fp32+packing+nostage": False, "naive": False}
    assert {name for name, _ in seen} == set(want)
    assert all(staged == want[name] for name, staged in seen)


def test_pad_multiple_rounds_document_widths(tiny_bert_workload):
    pool = make_pool(tiny_bert_workload, 32, seed=1)
    for b in make_batches(pool, tiny_bert_workload, 8, "bucketed", packing=True, pad_multiple=16):
        assert b.d_ids.shape[1] % 16 == 0 and b.packed.ids.shape[1] % 16 == 0
        # the trainer packs the queries into the documents' rows; the count is of those rows,
        # which hold every real token once
        p = pack_queries_and_documents(b.q_ids, b.q_mask, b.d_ids, b.d_mask, tiny_bert_workload.doc_cap, 0, 16)
        useful = int(b.q_mask.sum() + b.d_mask.sum())
        assert computed_tokens(b, tiny_bert_workload.doc_cap, 16) == p.ids.size >= useful
        assert int((p.seg >= 0).sum()) == useful and p.gather.shape[0] == len(b.q_ids) + len(b.d_ids)
        assert p.ids.shape[1] % 16 == 0


def test_varlen_computed_tokens_count_the_fillers(tiny_bert_workload):
    """varlen runs the real tokens end to end plus the filler sequences that round the count up
    to pad_multiple (static_shapes: a fixed number of them too): the efficiency column counts
    them, so a pad=4096 static variant does not report 100%."""
    pool = make_pool(tiny_bert_workload, 32, seed=1)
    for b in make_batches(pool, tiny_bert_workload, 8, "bucketed", packing=True, pad_multiple=8):
        useful = int(b.q_mask.sum() + b.d_mask.sum())
        plain = computed_tokens(b, tiny_bert_workload.doc_cap, 8, "varlen")
        assert plain % 8 == 0 and useful <= plain < useful + 8
        static = computed_tokens(b, tiny_bert_workload.doc_cap, 4096, "varlen", static=True)
        assert static % 4096 == 0 and static >= useful + 64  # 4096 / 64 fillers of >= 1 token


def test_step_shapes_count_the_graphs_cuda_graphs_record(tiny_bert_workload):
    """A CUDA-graph variant records one graph per distinct step shape: varlen batches of pad 8
    are nearly all distinct, static ones of pad 4096 one bucket here; the table says how many
    and how many were first met inside the timed steps (recorded there, inside the timing)."""
    from supergrep.bench import report
    from supergrep.bench.train import step_shape

    wl = tiny_bert_workload
    pool = make_pool(wl, 64, seed=1)
    dyn = {step_shape(b, wl.doc_cap, 8, "varlen") for b in make_batches(pool, wl, 8, "bucketed", True, 0, 8)}
    static = {step_shape(b, wl.doc_cap, 4096, "varlen", True)
              for b in make_batches(pool, wl, 8, "bucketed", True, 0, 4096)}
    assert len(static) == 1 < len(dyn)
    padded = {step_shape(b, wl.doc_cap, 8, "sdpa") for b in make_batches(pool, wl, 8, "padmax", False)}
    assert len(padded) == 1  # every batch at the cap

    res = run_train_bench(wl, [parse_variant("fp32")], steps=2, warmup=1, peak=PEAK)
    row = res["rows"][0]
    assert 1 <= row["step_shapes"]["distinct"] <= 3 and 0 <= row["step_shapes"]["timed_steps_not_replayed"] <= 2
    assert "CUDA graphs" not in report.train_markdown(res)
    row["settings"]["compile_mode"] = "reduce-overhead"
    row["step_shapes"] = {"distinct": 18, "timed_steps_not_replayed": 7}
    assert ("CUDA graphs, fp32: 18 distinct step shapes, 7 timed steps not replayed" in report.train_markdown(res))


def test_graph_steps_counts_first_runs_and_captures_inside_the_timing():
    """A shape's first run is uncaptured, its second captured, later ones replayed; the timed
    batches run again each round."""
    from supergrep.bench.train import graph_steps

    a, b, c = (1,), (2,), (3,)
    # warm-up a a b; timed b c, twice: b's capture and c's first run in round 1, c's capture in round 2
    assert graph_steps([a, a, b, b, c], 3, 2) == {"distinct": 3, "timed_steps_not_replayed": 3}
    assert graph_steps([a, a, b, b, a, b], 4, 3) == {"distinct": 2, "timed_steps_not_replayed": 0}


def test_batches_cover_the_same_pool_in_every_mode(tiny_bert_workload):
    wl = tiny_bert_workload
    pool = make_pool(wl, 32, seed=1)
    real = sum(len(d) for d in pool.docs)
    for mode in ("padmax", "random", "bucketed"):
        bs = make_batches(pool, wl, 8, mode, packing=mode == "bucketed")
        assert sum(int(b.d_mask.sum()) for b in bs) == real
        if mode == "padmax":
            assert all(b.d_ids.shape[1] == wl.doc_cap for b in bs)
    packed = make_batches(pool, wl, 8, "bucketed", packing=True)
    assert all(int((b.packed.seg >= 0).sum()) == int(b.d_mask.sum()) for b in packed)
    # queries are drawn from their own document, so there is something to learn
    assert all(set(q.tolist()) <= set(d.tolist()) for q, d in zip(pool.queries, pool.docs))


def test_bench_train_runs_naive_and_optimised_with_consistent_numbers(tiny_bert_workload, tmp_path):
    from supergrep.bench import report

    wl = tiny_bert_workload
    variants = [parse_variant(v) for v in ("naive", "fp32", "fp32+packing")]
    res = run_train_bench(wl, variants, steps=2, warmup=1, peak=PEAK)
    rows = {r["variant"]: r for r in res["rows"]}
    assert set(rows) == {"naive", "fp32", "fp32+packing"} and all("error" not in r for r in rows.values())
    assert rows["naive"]["speedup_vs_naive"] == pytest.approx(1.0)
    for r in rows.values():
        assert r["samples_per_s"] == pytest.approx(r["steps"] * r["batch_size"] / r["seconds"])
        assert r["mfu"] == pytest.approx(r["tflops"] * 1e12 / PEAK["cpu"]["flops_per_s"])
        assert r["speedup_vs_naive"] == pytest.approx(r["samples_per_s"] / rows["naive"]["samples_per_s"])
        assert 0 < r["token_efficiency"] <= 1 and r["peak_memory_bytes"] > 0
        assert len(r["losses"]) == 3 and r["memory"]["samples"] == 3
    # naive pads every document to the cap; bucketing and packing waste less
    assert rows["naive"]["token_efficiency"] < min(rows["fp32"]["token_efficiency"],
                                                   rows["fp32+packing"]["token_efficiency"])
    files = report.write(res, tmp_path, "train-tiny")
    assert json.loads(files["json"].read_text())["rows"][0]["variant"] == "naive"
    assert "| naive | cpu | 8 |" in files["markdown"].read_text()
    assert files["png"].read_bytes()[:4] == b"\x89PNG"


def test_rounds_interleave_the_variants_segments(tiny_bert_workload, tmp_path, monkeypatch):
    """--rounds: every variant warmed first and kept, then timed in segments A B B A ...; a row's
    rate is over all its segments, each segment's rate reported, training continuing across them."""
    from supergrep.bench import report
    from supergrep.bench import train as bt

    order: list[str] = []
    real_segment = bt._Run.segment

    def segment(self):
        order.append(self.v.name)
        return real_segment(self)

    real_settle = bt._Run.settle

    def settle(self):
        order.append("settle " + self.v.name)
        return real_settle(self)

    monkeypatch.setattr(bt._Run, "segment", segment)
    monkeypatch.setattr(bt._Run, "settle", settle)
    variants = [parse_variant(v) for v in ("naive", "fp32", "fp32+packing")]
    res = run_train_bench(tiny_bert_workload, variants, steps=2, warmup=1, peak=PEAK, rounds=3)
    # an untimed, unrecorded pass first: the first timed segment after the warm-ups ran slow on GPUs
    assert order == ["settle naive", "naive", "fp32", "fp32+packing", "fp32+packing", "fp32", "naive",
                     "naive", "fp32", "fp32+packing"]
    assert res["rounds"] == 3 and res["steps"] == 2
    rows = {r["variant"]: r for r in res["rows"]}
    for r in rows.values():
        assert "error" not in r and r["steps"] == 6 and len(r["segments_samples_per_s"]) == 3
        assert r["samples_per_s"] == pytest.approx(6 * r["batch_size"] / r["seconds"])
        # the aggregate rate sits inside the segments' range (total steps over total time)
        assert min(r["segments_samples_per_s"]) <= r["samples_per_s"] * (1 + 1e-9)
        assert r["samples_per_s"] <= max(r["segments_samples_per_s"]) * (1 + 1e-9)
        assert len(r["losses"]) == 1 + 3 * 2  # warm-up + every segment: one training run, not restarts
    assert rows["naive"]["speedup_vs_naive"] == pytest.approx(1.0)
    md = report.train_markdown(res)
    assert "3 interleaved segments of 2 timed steps" in md and "| fp32+packing | " in md and "spread" in md
    # each variant over the first, segment by segment of the same round
    seg = {r["variant"]: r["segments_samples_per_s"] for r in res["rows"]}
    paired = [a / b for a, b in zip(seg["fp32"], seg["naive"])]
    line = next(x for x in md.splitlines() if x.startswith("| fp32 | ") and x.endswith(") |"))
    assert line.endswith(f"| {sum(paired) / 3:.3f} ({min(paired):.3f}-{max(paired):.3f}) |")


def test_rounds_record_a_failing_variant_and_time_the_rest(tiny_bert_workload, monkeypatch):
    from supergrep.bench import train as bt

    real_warm = bt._Run.warm

    def warm(self):
        if self.v.packing:
            raise RuntimeError("CUDA out of memory")
        return real_warm(self)

    monkeypatch.setattr(bt._Run, "warm", warm)
    res = run_train_bench(tiny_bert_workload, [parse_variant(v) for v in ("fp32", "fp32+packing")], steps=1,
                          warmup=0, peak=PEAK, rounds=2)
    rows = {r["variant"]: r for r in res["rows"]}
    assert rows["fp32+packing"]["error"] == "out of memory"
    assert len(rows["fp32"]["segments_samples_per_s"]) == 2
    # a non-finite loss ends that variant's row, not the run (as in the sequential loop)
    monkeypatch.setattr(bt._Run, "warm", real_warm)
    real_step = bt._Run._step

    def nan_step(self, b, record=True):
        real_step(self, b, record)
        if self.v.packing and record:
            self.raw[-1] = float("nan")

    monkeypatch.setattr(bt._Run, "_step", nan_step)
    res = run_train_bench(tiny_bert_workload, [parse_variant(v) for v in ("fp32", "fp32+packing")], steps=1,
                          warmup=0, peak=PEAK, rounds=2)
    rows = {r["variant"]: r for r in res["rows"]}
    assert "non-finite loss" in rows["fp32+packing"]["error"] and "samples_per_s" in rows["fp32"]


def test_rounds_do_not_start_a_warm_up_that_would_end_past_the_time_limit(tiny_bert_workload, monkeypatch):
    """A first compile takes minutes on a fresh GPU machine: a run whose outer timeout fell in the
    second variant's warm-up wrote nothing. The warm-up that would end past --time-limit (the last
    one's length as the estimate) is not started; the warm variants are timed and written."""
    from supergrep.bench import train as bt

    clock = [0.0]

    def perf_counter():  # a fake clock that still moves between the timed steps' reads
        clock[0] += 1e-3
        return clock[0]

    monkeypatch.setattr(bt.time, "perf_counter", perf_counter)
    real_warm, real_segment = bt._Run.warm, bt._Run.segment

    def warm(self):
        clock[0] += 100.0  # each warm-up "takes" 100 s
        return real_warm(self)

    def segment(self):
        clock[0] += 1.0
        return real_segment(self)

    monkeypatch.setattr(bt._Run, "warm", warm)
    monkeypatch.setattr(bt._Run, "segment", segment)
    written = []
    variants = [parse_variant(v) for v in ("fp32", "fp32+packing", "naive")]
    # after two warm-ups (200 s) a third would end at 300 > 250: skipped, the two warm ones timed
    res = run_train_bench(tiny_bert_workload, variants, steps=1, warmup=0, peak=PEAK, rounds=2,
                          time_limit=250, on_row=written.append)
    rows = {r["variant"]: r for r in res["rows"]}
    assert "not warmed" in rows["naive"]["skipped"]
    assert len(rows["fp32"]["segments_samples_per_s"]) == 2 and len(rows["fp32+packing"]["segments_samples_per_s"]) == 2
    assert written and written[-1]["rows"] == res["rows"]
    # with room for all three, all three are warmed and timed
    clock[0] = 0.0
    res = run_train_bench(tiny_bert_workload, variants, steps=1, warmup=0, peak=PEAK, rounds=2, time_limit=400)
    assert all("segments_samples_per_s" in r for r in res["rows"])


def test_the_peer_runs_on_the_same_batches_or_is_skipped_cleanly(tiny_bert_workload, monkeypatch):
    from supergrep.bench import peer

    res = run_train_bench(tiny_bert_workload, [parse_variant("peer+fp32")], steps=1, warmup=1, peak=PEAK)
    row = res["rows"][0]
    if peer.available() is None:
        assert row["system"] == "sentence-transformers" and row["samples_per_s"] > 0, row
        assert row["peer_trainable"] > 0
    else:
        assert "peer unavailable" in row["error"]
    monkeypatch.setattr(peer, "available", lambda: "not installed (test)")
    res = run_train_bench(tiny_bert_workload, [parse_variant("peer+fp32")], steps=1, warmup=0, peak=PEAK)
    assert "not installed" in res["rows"][0]["error"]


def test_the_peer_starts_from_our_weights_and_follows_the_same_losses(tmp_path):
    """Same head, same LoRA A (B zero) and same batches: the two loops compute the same InfoNCE
    over mean MaxSim, so with dropout off the loss before any update is equal and the curves
    stay together (a random Dense init made the peer's loss differ by more than the noise)."""
    import pytest

    from supergrep.bench import peer

    if peer.available() is not None:
        pytest.skip(peer.available())
    wl = get_workload("minilm-tiny", tmp_path)
    cfg_file = wl.model_dir / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # dropout masks differ per loop
    cfg_file.write_text(json.dumps(cfg))
    res = run_train_bench(wl, [parse_variant("fp32"), parse_variant("peer+fp32")], steps=6, warmup=0, peak=PEAK)
    ours, theirs = (r for r in res["rows"])
    assert theirs["peer_init"].startswith("ours") and "error" not in theirs, theirs
    assert abs(ours["losses"][0] - theirs["losses"][0]) < 1e-4, (ours["losses"], theirs["losses"])
    for a, b in zip(ours["losses"], theirs["losses"], strict=True):
        assert abs(a - b) < 0.05 * max(abs(a), 1.0), (ours["losses"], theirs["losses"])
    assert ours["losses"][-1] < ours["losses"][0]  # both learn, not just start alike


def test_bench_cli_train_and_encode(tmp_path):
    from click.testing import CliRunner

    from supergrep.cli import cli

    runner = CliRunner()
    got = runner.invoke(cli, ["bench", "train", "-w", "xtr-tiny", "--work-dir", str(tmp_path / "w"), "--steps", "2",
                              "--warmup", "0", "--variants", "fp32+packing", "--json", "--device", "cpu", "--rounds", "2"])
    assert got.exit_code == 0, got.output
    res = json.loads(got.stdout)
    assert [r["variant"] for r in res["rows"]] == ["fp32+packing"]
    assert res["rounds"] == 2 and len(res["rows"][0]["segments_samples_per_s"]) == 2
    assert all("samples_per_s" in r for r in res["rows"]), res["rows"]
    assert res["model_flops"]["n_layers"] == 2 and res["model_flops"]["d_attn"] == 32  # T5: heads x d_kv
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("def add(a, b):\n    '''Add.'''\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    got = runner.invoke(cli, ["bench", "encode", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"), "--docs", "20",
                              "--index-root", str(src), "--json", "--device", "cpu", "--out", str(tmp_path / "o")])
    assert got.exit_code == 0, got.output
    res = json.loads(got.stdout)
    fwd, idx = res["rows"]
    assert fwd["tokens_per_s"] > 0 and 0 < fwd["mfu"] < 1
    assert idx["lines"] == 7 and idx["lines_per_s"] > 0, idx
    assert (tmp_path / "o" / "encode-minilm-tiny.md").is_file()
    # both forward modes on a CPU (varlen: the torch attention), same documents, same tokens
    got = runner.invoke(cli, ["bench", "encode", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"), "--docs", "20",
                              "--no-index", "--modes", "padded,varlen", "--json", "--device", "cpu"])
    assert got.exit_code == 0, got.output
    rows = json.loads(got.stdout)["rows"]
    assert [r["mode"] for r in rows] == ["padded", "varlen"] and "real tokens" in rows[1]["what"]
    assert rows[0]["tokens"] == rows[1]["tokens"] and all(r["tokens_per_s"] > 0 for r in rows)
    assert rows[1]["min_cosine_vs_first"] > 0.9999  # the same vectors (fp32 on a CPU)
    # the modifier: float16 to the host (converted there)
    got = runner.invoke(cli, ["bench", "encode", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"), "--docs", "20",
                              "--no-index", "--modes", "varlen,varlen+half", "--json", "--device", "cpu"])
    assert got.exit_code == 0, got.output
    rows = json.loads(got.stdout)["rows"]
    assert [r["mode"] for r in rows] == ["varlen", "varlen+half"]
    assert 0.999 < rows[1]["min_cosine_vs_first"] < 1.0  # float16-rounded, not the same vectors
    assert rows[1]["mean_cosine_vs_first"] >= rows[1]["min_cosine_vs_first"]
    # float8 products need a GPU that has them: a row that says so, the other modes still run
    got = runner.invoke(cli, ["bench", "encode", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"), "--docs", "20",
                              "--no-index", "--modes", "varlen+fp8,varlen", "--json", "--device", "cpu"])
    assert got.exit_code == 0, got.output
    rows = json.loads(got.stdout)["rows"]
    assert rows[0]["error"] == "no float8 products on cpu" and rows[1]["mode"] == "varlen"
    from cli_runner import run_main

    for bad in ("padded,fast", "padded+half", "varlen+f32acc"):
        got = run_main(["bench", "encode", "-w", "minilm-tiny", "--work-dir", tmp_path / "w", "--modes", bad])
        assert got.exit_code == 2 and f"unknown encode mode '{bad.split(',')[-1]}'" in got.output


def test_bench_train_runs_the_mlx_trainer_on_the_same_workload(tmp_path):
    pytest.importorskip("mlx.core")
    from click.testing import CliRunner

    from supergrep.cli import cli

    got = CliRunner().invoke(cli, ["bench", "train", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"),
                                   "--steps", "2", "--warmup", "1", "--variants", "fp32,mlx+fp32", "--json",
                                   "--device", "cpu"])
    assert got.exit_code == 0, got.output
    rows = {r["variant"]: r for r in json.loads(got.stdout)["rows"]}  # stderr: progress bars
    assert set(rows) == {"fp32", "mlx+fp32"} and all("error" not in r for r in rows.values()), rows
    assert (rows["fp32"]["backend"], rows["mlx+fp32"]["backend"]) == ("torch", "mlx")
    for r in rows.values():
        assert r["device"] == "cpu" and r["samples_per_s"] > 0 and r["mfu"] > 0 and r["peak_memory_bytes"] > 0
        assert all(math.isfinite(x) for x in r["losses"]) and len(r["losses"]) == 3
    # same batches, same init: the first step's loss is close (not equal: each framework draws
    # its own dropout masks)
    assert rows["mlx+fp32"]["losses"][0] == pytest.approx(rows["fp32"]["losses"][0], rel=0.2)


def test_mlx_variants_refuse_what_mlx_cannot_run(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from supergrep.cli import cli
    from supergrep.errors import UsageError

    for bad, what in (("mlx+packing", "packing"), ("mlx+bf16+compile", "compile"), ("peer+mlx", "peer")):
        with pytest.raises(ValueError, match=f"mlx cannot run {what}"):
            parse_variant(bad)
    v = parse_variant("mlx+bf16+ckpt+eager")
    assert (v.backend, v.ckpt, v.attn, v.is_naive) == ("mlx", True, "eager", False)
    assert not parse_variant("mlx+naive").is_naive  # naive is torch's loop
    names = [g.name for g in grid_variants(["backend=torch,mlx", "compile=0,1"])]
    assert names == ["naive", "auto", "auto+compile", "mlx+auto"]  # mlx+compile skipped, with a warning
    got = CliRunner().invoke(cli, ["bench", "train", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"),
                                   "--variants", "fp32,mlx+packing", "--device", "cpu"])
    assert isinstance(got.exception, UsageError) and got.exception.exit_code == 2
    assert "mlx cannot run packing" in str(got.exception) and "\n" not in str(got.exception)
    from supergrep.bench import train as bench_train

    monkeypatch.setattr(bench_train, "mlx_missing", lambda: "the mlx variants need MLX (test); pip install x")
    got = CliRunner().invoke(cli, ["bench", "train", "-w", "minilm-tiny", "--work-dir", str(tmp_path / "w"),
                                   "--variants", "mlx+fp32", "--device", "cpu"])
    assert isinstance(got.exception, UsageError) and "pip install" in str(got.exception)


def test_fp8_variant_sets_fp8_products(tiny_bert_workload):
    from supergrep.bench.train import parse_variant, train_config, variant_name

    v = parse_variant("bf16+compile+varlen+packing+fp8")
    assert v.fp8 and not v.is_naive and "fp8" in variant_name(v)
    assert train_config(tiny_bert_workload, v, "cpu", 8).fp8_products
    assert not train_config(tiny_bert_workload, parse_variant("bf16"), "cpu", 8).fp8_products
    with pytest.raises(ValueError, match="float8"):
        parse_variant("mlx+fp8")
    d = parse_variant("bf16+varlen+packing+fp8d")
    assert d.fp8 and "fp8d" in variant_name(d) and "+fp8+" not in variant_name(d) + "+"
    assert train_config(tiny_bert_workload, d, "cpu", 8).fp8_scaling == "delayed"
    k = parse_variant("bf16+varlen+packing+fp8k")
    assert k.fp8 and "fp8k" in variant_name(k).split("+") and "fp8" not in variant_name(k).split("+")
    cfg = train_config(tiny_bert_workload, k, "cpu", 8)
    assert cfg.fp8_products and cfg.fp8_quantize == "kernel" and cfg.fp8_scaling == "row"
    # the token fp8 keeps its meaning in older records (quantisations compiled), whatever the
    # train config's default; fp8g is the gated GELU kernel (the config's default since #36)
    assert train_config(tiny_bert_workload, v, "cpu", 8).fp8_quantize == "compiled"
    gk = parse_variant("bf16+varlen+packing+fp8g")
    assert gk.fp8 and "fp8g" in variant_name(gk).split("+") and "fp8" not in variant_name(gk).split("+")
    assert train_config(tiny_bert_workload, gk, "cpu", 8).fp8_quantize == "gated"
    cw = parse_variant("bf16+cppwrap+varlen+packing")
    assert cw.compile and "cppwrap" in variant_name(cw).split("+")
    assert train_config(tiny_bert_workload, cw, "cpu", 8).compile_mode == "cpp-wrapper"
    st = parse_variant("bf16+compile+varlen+packing+pad=256+static")
    assert "static" in variant_name(st).split("+") and train_config(tiny_bert_workload, st, "cpu", 8).static_shapes


def test_nodropout_variant_sets_model_dropout_zero(tiny_bert_workload):
    wl = tiny_bert_workload
    from supergrep.bench.train import grid_variants, parse_variant, train_config, variant_name

    v = parse_variant("bf16+varlen+packing+nodropout")
    assert not v.dropout and not v.is_naive and "nodropout" in variant_name(v)
    assert train_config(wl, v, "cpu", 8).model_dropout == 0.0
    assert train_config(wl, parse_variant("bf16"), "cpu", 8).model_dropout == -1.0  # the model's own
    assert train_config(wl, parse_variant("mlx+nodropout"), "cpu", 8).model_dropout == 0.0  # MLX too
    assert [x.name for x in grid_variants(["precision=bf16"])] == ["naive", "bf16"]


def test_minilm_random_has_the_default_models_shape(tmp_path):
    """`minilm-random`: all-MiniLM-L6-v2's architecture with random weights (its speed on a machine
    that cannot carry the weights), with the default model's tokenizer."""
    from supergrep.encoder.spec import default_model_dir

    wl = get_workload("minilm-random", tmp_path)
    real = json.loads((default_model_dir() / "config.json").read_text())
    got = json.loads((wl.model_dir / "config.json").read_text())
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
            "max_position_embeddings")
    assert {k: got[k] for k in keys} == {k: real[k] for k in keys}
    assert (wl.model_dir / "tokenizer.json").is_file() and wl.batch_size == get_workload("minilm", tmp_path).batch_size
