"""Teacher-mined negatives with soft labels (`mine-negatives --teacher`) and the listwise loss
(`teacher_weight`) that trains on them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cli_runner import run_main
from supergrep.corpus.documents import code_document, load_pairs
from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model
from supergrep.errors import ConfigError, InputError
from supergrep.train.losses import Distill, listwise_loss, own_scores
from supergrep.train.ops import NumpyOps
from supergrep.train.teacher import mine_with_teacher


def _maxsim(q: np.ndarray, d: np.ndarray) -> float:
    return float((q @ d.T).max(axis=1).mean())


@pytest.fixture
def mined(tiny_model, pairs_file, tmp_path):
    out = tmp_path / "kd.jsonl"
    stats = mine_with_teacher(pairs_file, out, str(tiny_model), per_query=3, pool=40, max_relative=0.95,
                              device="cpu")
    return out, stats


def test_every_training_row_gets_the_teachers_negatives_and_true_scores(mined, pairs_file, tiny_model):
    out, stats = mined
    src = [json.loads(x) for x in pairs_file.read_text().splitlines()]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["query"] for r in rows] == [r["query"] for r in src]  # every row, in order
    train = [r for r in rows if r["split"] == "train"]
    assert stats.train_rows == len(train) and stats.with_negatives == len(train) and stats.no_match == 0
    for r in rows:
        if r["split"] == "val":
            assert "negatives" not in r and "teacher_scores" not in r  # copied as it was
    enc = Encoder(resolve_model(str(tiny_model)), backend="torch", device="cpu")
    for r in train[:: max(1, len(train) // 12)]:
        negs, scores = r["negatives"], r["teacher_scores"]
        assert len(negs) == 3 and len(scores) == 4
        assert scores[1:] == sorted(scores[1:], reverse=True)  # hardest first
        assert all(n["code"] != r["code"] for n in negs)
        # The scores are the teacher's MaxSim of this query against exactly these documents.
        q = enc.encode_queries([r["query"]])[0]
        docs = [code_document(r["code"], r["path"], r["symbol"], r["language"])]
        docs += [code_document(n["code"], n.get("path", ""), n.get("symbol", ""), n.get("language", "")) for n in negs]
        want = [_maxsim(q, d) for d in enc.encode_documents(docs)]
        np.testing.assert_allclose(scores, want, atol=2e-4)
    # Positive-aware: a negative above 0.95 x the positive only when the pool ran short of others.
    above = sum(s >= 0.95 * r["teacher_scores"][0] for r in train for s in r["teacher_scores"][1:])
    assert above == stats.above_threshold


def test_duplicates_and_same_named_symbols_are_never_negatives(tiny_model, tmp_path):
    code = "def parse_config(path):\n    return toml.load(path)"
    rows = [{"query": "Parse a config file.", "code": code, "symbol": "parse_config", "language": "python",
             "split": "train", "path": "a.py"},
            {"query": "Read the config.", "code": code.replace("    ", "        "), "symbol": "read",
             "language": "python", "split": "train", "path": "b.py"},  # whitespace-equal copy
            {"query": "Load a config.", "code": "def load(p):\n    return 1", "symbol": "X.parse_config",
             "language": "python", "split": "train", "path": "c.py"}]  # same last name
    rows += [{"query": f"Do thing number {i}.", "code": f"def f{i}(x):\n    return x + {i}", "symbol": f"f{i}",
              "language": "python", "split": "train", "path": f"m{i}.py"} for i in range(8)]
    src = tmp_path / "p.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o.jsonl"
    mine_with_teacher(src, out, str(tiny_model), per_query=4, pool=64, device="cpu")
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert {n["symbol"] for n in got[0]["negatives"]}.isdisjoint({"read", "X.parse_config"})
    assert all(len(r["negatives"]) == 4 for r in got)


def test_bad_arguments_are_one_line_errors(tiny_model, pairs_file, tmp_path):
    with pytest.raises(InputError, match="--pool"):
        mine_with_teacher(pairs_file, tmp_path / "o.jsonl", str(tiny_model), per_query=3, pool=3)
    r = run_main(["mine-negatives", str(pairs_file), "-o", str(tmp_path / "o.jsonl"), "--teacher",
                  str(tmp_path / "missing")])
    assert r.exit_code == 2 and not (tmp_path / "o.jsonl").exists()


def test_cli_writes_the_file_training_reads(tiny_model, pairs_file, tmp_path):
    out = tmp_path / "kd.jsonl"
    r = run_main(["mine-negatives", str(pairs_file), "-o", str(out), "--per-query", "2", "--pool", "32",
                  "--teacher", str(tiny_model), "--device", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.output)
    assert stats["negatives"] == 2 * stats["with_negatives"] > 0
    pairs = load_pairs(out, split="train")
    assert all(len(p.negatives) == 2 and len(p.teacher_scores) == 3 for p in pairs)


def test_teacher_scores_must_match_the_negatives(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"query": "q", "code": "c"}) + "\n"
                 + json.dumps({"query": "q", "code": "c", "negatives": ["x"], "teacher_scores": [0.5]}) + "\n")
    with pytest.raises(InputError, match=r"p.jsonl:2: 'teacher_scores' must be a list of 2"):
        load_pairs(p)


def test_own_scores_follow_collates_layout():
    rng = np.random.default_rng(0)
    n_q, n_neg = 4, 3
    s = rng.normal(size=(n_q, n_q + n_q * n_neg))
    own = own_scores(NumpyOps(), s, n_neg)
    for i in range(n_q):  # row i: its positive (column i), then its own negatives
        assert own[i].tolist() == [s[i, i]] + [s[i, n_q + i * n_neg + j] for j in range(n_neg)]
    from supergrep.backends.torch_ops import TorchOps

    np.testing.assert_allclose(own_scores(TorchOps(torch.device("cpu")), torch.tensor(s), n_neg).numpy(), own)


def test_listwise_gradient_moves_the_student_toward_the_teachers_order():
    from supergrep.backends.torch_ops import TorchOps

    # One query, its positive and two negatives; the teacher prefers negative 2 to negative 1.
    scores = torch.tensor([[0.8, 0.6, 0.5]], requires_grad=True)  # student: negative 1 ahead
    teacher = torch.tensor([[0.8, 0.4, 0.7]])
    loss = listwise_loss(TorchOps(torch.device("cpu")), scores, teacher, Distill(0.05))
    loss.backward()
    g = scores.grad[0]
    assert float(loss.detach()) > 0 and g[1] > 0 > g[2]  # descent lowers negative 1 and raises negative 2


def test_teacher_weight_needs_negatives_and_torch(tiny_model, pairs_file, tmp_path):
    from test_trainer import cfg_for

    with pytest.raises(ConfigError, match="hard_negatives"):
        cfg_for(tiny_model, pairs_file, tmp_path, teacher_weight=1.0)
    with pytest.raises(ConfigError, match="backend torch"):
        cfg_for(tiny_model, pairs_file, tmp_path, teacher_weight=1.0, hard_negatives=True, backend="mlx")


def test_the_step_adds_exactly_the_listwise_term(mined, tiny_model, tmp_path):
    from test_trainer import cfg_for

    from supergrep.backends.adapters import LoRAConfig
    from supergrep.encoder.tokenize import RoleTokenizer
    from supergrep.train.data import bucket_batches, cached_tokens, collate
    from supergrep.train.loop import make_trainer, training_spec

    out, _ = mined
    losses = {}
    for w in (0.0, 2.0):
        cfg = cfg_for(tiny_model, out, tmp_path, hard_negatives=True, teacher_weight=w, teacher_temperature=0.1)
        spec = training_spec(cfg)
        tok = RoleTokenizer(spec)
        cache = cached_tokens(load_pairs(out, split="train")[:64], None, spec, tok, "t")
        assert cache.t_scores.shape == (64, 4)
        rows = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, 0, 0)[0]
        batch = collate(cache, rows, tok, 0, True, 8)
        np.testing.assert_array_equal(batch.t_scores, cache.t_scores[rows])
        torch.manual_seed(0)
        trainer = make_trainer(cfg, spec, LoRAConfig(cfg.lora_r, cfg.lora_alpha, 0.0, ()))
        trainer.model.eval()
        q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
        t = torch.from_numpy(batch.t_scores)
        loss, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask, None, None, t)
        with torch.no_grad():
            q, d = trainer.encode(q_ids, q_mask), trainer.encode(d_ids, d_mask)
            from supergrep.train.losses import maxsim_scores

            s = maxsim_scores(trainer.ops, q, q_mask, d, d_mask)
            kl = listwise_loss(trainer.ops, s, t, Distill(0.1))
        losses[w] = (float(loss), float(kl))
    assert losses[2.0][0] == pytest.approx(losses[0.0][0] + 2.0 * losses[2.0][1], rel=1e-5)
    assert losses[2.0][1] > 0


def test_training_runs_end_to_end_on_teacher_data(mined, tiny_model, tmp_path):
    out, _ = mined
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"model_path: {tiny_model}\ntrain_file: {out}\nhard_negatives: true\nteacher_weight: 1.0\n"
                   f"batch_size: 8\nmax_steps: 3\nsave_every: 3\neval_every: 3\nval_batches: 1\n"
                   f"projection_dim: 16\ndocument_max_tokens: 64\nquery_max_tokens: 16\ndevice: cpu\n"
                   f"output_dir: {tmp_path / 'run'}\n")
    r = run_main(["train", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "run" / "step_0000003").is_dir()


def test_infonce_weight_zero_trains_on_the_teachers_scores_alone():
    from supergrep.train.losses import contrastive_loss

    rng = np.random.default_rng(1)
    q, d = rng.normal(size=(3, 2, 4)), rng.normal(size=(6, 5, 4))  # 3 queries, 1 negative each
    qm, dm = np.ones((3, 2), bool), np.ones((6, 5), bool)
    t = rng.normal(size=(3, 2))
    only = contrastive_loss(0.07, 0.2, 0.0, teacher_weight=1.0, teacher_temperature=0.1, infonce_weight=0.0)
    from supergrep.train.losses import maxsim_scores

    want = listwise_loss(NumpyOps(), maxsim_scores(NumpyOps(), q, qm, d, dm), t, Distill(0.1))
    assert float(only(NumpyOps(), q, qm, d, dm, None, t)[0]) == pytest.approx(float(want))
    both = contrastive_loss(0.07, 0.2, 0.0, teacher_weight=1.0, teacher_temperature=0.1)
    assert float(both(NumpyOps(), q, qm, d, dm, None, t)[0]) > float(want)  # + InfoNCE


def test_validation_loss_is_the_labels_loss_whatever_the_weights(mined, tiny_model, tmp_path):
    from test_trainer import cfg_for

    from supergrep.backends.adapters import LoRAConfig
    from supergrep.encoder.tokenize import RoleTokenizer
    from supergrep.train.data import bucket_batches, cached_tokens, collate
    from supergrep.train.loop import make_trainer, training_spec

    out, _ = mined
    got = []
    for kw in ({"margin_weight": 0.0}, {"hard_negatives": True, "teacher_weight": 1.0, "infonce_weight": 0.0,
                                        "margin_weight": 0.0}):
        cfg = cfg_for(tiny_model, out, tmp_path, **kw)
        spec = training_spec(cfg)
        tok = RoleTokenizer(spec)
        cache = cached_tokens(load_pairs(out, split="val")[:32], None, spec, tok, "v")
        rows = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, 0, 0)[0]
        torch.manual_seed(0)
        trainer = make_trainer(cfg, spec, LoRAConfig(cfg.lora_r, cfg.lora_alpha, 0.0, ()))
        got.append(float(trainer.eval_batch(collate(cache, rows, tok, 0, False, 8))[0]))
    # The teacher-only run reports the same (non-zero) validation loss as a plain run would.
    assert got[1] > 0 and got[1] == pytest.approx(got[0], rel=1e-5)


def test_bm25_mining_a_teacher_file_drops_the_old_scores(mined, tmp_path):
    from supergrep.train.negatives import mine_negatives

    out, _ = mined
    again = tmp_path / "hn.jsonl"
    mine_negatives(out, again, per_query=1, workers=1)
    rows = [json.loads(x) for x in again.read_text().splitlines()]
    assert all("teacher_scores" not in r for r in rows)  # they scored the teacher's negatives, now replaced
    assert all(len(p.negatives) <= 1 for p in load_pairs(again, split="train"))
