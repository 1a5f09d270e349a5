"""The torch trainer on tiny random BERT and T5 (XTR layout) models, on real mined pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from supergrep.backends.adapters import LoRAConfig
from supergrep.backends.torch_lora import lora_modules
from supergrep.errors import ModelError, TrainingError, UsageError
from supergrep.train.config import load_train_config
from supergrep.train.data import bucket_batches, cached_tokens, collate
from supergrep.train.loop import make_trainer, run_training, training_spec


def cfg_for(model, pairs_file, tmp_path, **kw):
    base = dict(model_path=str(model), train_file=str(pairs_file), batch_size=8, max_steps=6, lr=5e-3,
                warmup_steps=2, log_every=1, save_every=3, eval_every=3, val_batches=2,
                output_dir=str(tmp_path / "run"), projection_dim=16, document_max_tokens=96,
                query_max_tokens=24, weight_decay=0.0, seed=0, device="cpu")
    base.update(kw)
    return load_train_config(None, base)


def trainer_and_batch(cfg):
    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.tokenize import RoleTokenizer

    spec = training_spec(cfg)
    tok = RoleTokenizer(spec)
    pairs = load_pairs(cfg.train_file, split="train")[:64]
    cache = cached_tokens(pairs, None, spec, tok, "t")
    rows = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, 0, 0)[0]
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    return make_trainer(cfg, spec, lora), collate(cache, rows, tok, 0, False, 8)


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_t5"])
def test_gradients_reach_every_lora_weight_and_the_projection(model_fixture, request, pairs_file, tmp_path):
    model = request.getfixturevalue(model_fixture)
    trainer, batch = trainer_and_batch(cfg_for(model, pairs_file, tmp_path))
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    n_lora = len(lora_modules(trainer.model))
    assert n_lora == len(trainer.adapted) > 0
    assert len(before) == 2 * n_lora + 1  # every A and B, plus the projection
    for _ in range(2):  # B starts at 0, so A only gets a gradient from the second step on
        trainer.train_step(batch, 1e-3)
    unchanged = [n for n, p in trainer.params.items() if torch.equal(p.detach(), before[n])]
    assert unchanged == [], f"no gradient reached {unchanged}"
    base_frozen = [n for n, p in trainer.model.named_parameters() if "lora_" not in n and p.requires_grad]
    assert base_frozen == []


def test_t5_trains_the_xtr_head_in_place(tiny_t5, pairs_file, tmp_path):
    trainer, _ = trainer_and_batch(cfg_for(tiny_t5, pairs_file, tmp_path, projection_dim=0))
    weight, replaces = trainer.projection()
    assert replaces and weight.shape == (16, 32)  # the 2_Dense head, trained instead of a new one
    assert set(trainer.adapted) >= {"encoder.block.0.layer.0.SelfAttention.q", "encoder.block.0.layer.1.DenseReluDense.wo"}


def test_a_target_that_matches_nothing_is_an_error(tiny_model, pairs_file, tmp_path):
    with pytest.raises(ModelError, match="match no Linear layer"):
        trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, lora_target_modules=["query", "nonexistent"]))


@pytest.mark.parametrize("distill_weight", [0.0, 1.0])
def test_cached_contrastive_gives_the_same_gradients_as_plain(tiny_model, pairs_file, tmp_path, distill_weight):
    plain, batch = trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, distill_weight=distill_weight))
    cached, _ = trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, cached_contrastive=True, mini_batch_size=3,
                                          distill_weight=distill_weight))
    assert plain.needs_teacher == (distill_weight > 0)
    for t in (plain, cached):
        t.model.eval()  # no dropout: the two must agree to rounding
        t.train_step(batch, 1e-3)  # one real step, so every LoRA B is non-zero
    l1, _ = plain._step_plain(*plain._to_device(batch))
    l2, _ = cached._step_cached(*cached._to_device(batch))
    assert float(l1) == pytest.approx(float(l2), rel=1e-5)
    for name, p in plain.params.items():
        torch.testing.assert_close(p.grad, cached.params[name].grad, rtol=1e-3, atol=1e-7)


def test_out_of_memory_halves_and_retries_the_step(tiny_model, pairs_file, tmp_path):
    trainer, batch = trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path))
    real = trainer._step_plain
    calls = []

    def failing(*args):
        calls.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    trainer._step_plain = failing
    loss, _ = trainer.train_step(batch, 1e-3)  # recovered: cached mode, half the batch per mini-batch
    assert calls == [1] and trainer.cached and trainer.mini == 4 and trainer.oom_events == 1
    assert torch.isfinite(loss)
    trainer._step_plain = real

    def always_oom(*args):
        raise torch.OutOfMemoryError("CUDA out of memory")

    trainer._step_cached = always_oom
    with pytest.raises(TrainingError, match="mini-batches of 1"):
        trainer.train_step(batch, 1e-3)


def test_loss_falls_and_run_writes_everything(tiny_model, pairs_file, tmp_path):
    cfg = cfg_for(tiny_model, pairs_file, tmp_path, max_steps=60, lr=1e-2, warmup_steps=5, log_every=5,
                  save_every=20, eval_every=20, projection_dim=32)
    res = run_training(cfg, show_progress=False)
    events = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in events if e["kind"] == "train"]
    assert len(losses) == 12
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.05, losses
    assert any(e["kind"] == "val" for e in events) and res.val_pairs > 0
    assert (tmp_path / "run" / "loss.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib: a dev extra
    names = sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("step_"))
    assert names == ["step_0000020", "step_0000040", "step_0000060"]
    ck = tmp_path / "run" / "step_0000060"
    for f in ("adapter_model.safetensors", "adapter_config.json", "projection/model.safetensors",
              "supergrep_model.json", "trainer_state.safetensors", "run_config.json"):
        assert (ck / f).is_file(), f
    assert not list((tmp_path / "run").glob(".step_*"))


def test_nan_loss_stops_naming_the_step_and_keeps_the_good_checkpoint(tiny_model, pairs_file, tmp_path, monkeypatch):
    from supergrep.backends import torch_train

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, max_steps=8, save_every=2, log_every=4)
    real = torch_train.TorchTrainer.train_step
    calls = []

    def poisoned(self, batch, lr):
        calls.append(1)
        loss, acc = real(self, batch, lr)
        return (loss * float("nan"), acc) if len(calls) == 3 else (loss, acc)

    monkeypatch.setattr(torch_train.TorchTrainer, "train_step", poisoned)
    with pytest.raises(TrainingError, match=r"became nan at step 3.*step_0000002"):
        run_training(cfg, show_progress=False)
    kept = sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("step_"))
    assert kept == ["step_0000002"]  # step 4's checkpoint was never written


def test_merge_is_exact_and_complete(tiny_model, pairs_file, tmp_path):
    from safetensors.numpy import load_file, save_file

    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model
    from supergrep.train.merge import merge_checkpoint

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, max_steps=4, lr=2e-2, save_every=4)
    run_training(cfg, show_progress=False)
    ck = tmp_path / "run" / "step_0000004"
    rep = merge_checkpoint(ck, tmp_path / "merged")
    assert rep.merged == rep.adapter_pairs == rep.targets_in_base == 12  # 2 layers x 6 projections

    # Reference: base + adapter *unmerged* (LoRALinear forward), straight from the trainer.
    trainer, _ = trainer_and_batch(cfg)
    trainer.load_state(load_file(str(ck / "trainer_state.safetensors")), {})
    trainer.model.eval()
    enc = Encoder(resolve_model(tmp_path / "merged"), device="cpu")
    texts = ["def add(a, b):\n    return a + b", "parse the command line arguments"]
    ids = enc.tokenizer(texts, "document")
    width = max(map(len, ids))
    arr = np.zeros((2, width), np.int64)
    mask = np.zeros((2, width), bool)
    for i, row in enumerate(ids):
        arr[i, : len(row)] = row
        mask[i, : len(row)] = True
    with torch.no_grad():
        ref = trainer.encode(torch.from_numpy(arr), torch.from_numpy(mask)).numpy()
    got = enc.encode_documents(texts)
    for i in range(2):
        assert np.abs(got[i] - ref[i, : len(ids[i])]).max() <= 1e-4

    # An adapter missing one projection's weights is refused, not half-merged.
    state = load_file(str(ck / "adapter_model.safetensors"))
    victim = next(k for k in state if k.endswith("lora_A.weight"))
    del state[victim], state[victim.replace("lora_A", "lora_B")]
    save_file(state, str(ck / "adapter_model.safetensors"))
    with pytest.raises(ModelError, match="refusing to write a partial merge"):
        merge_checkpoint(ck, tmp_path / "merged2")
    assert not (tmp_path / "merged2").exists()


def test_distillation_teacher_is_the_untouched_base(tiny_model, pairs_file, tmp_path):
    """The teacher's vectors are the base's (LoRA off), and stay so while the student trains."""
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    trainer, batch = trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, distill_weight=1.0))
    for _ in range(3):
        loss, _ = trainer.train_step(batch, 1e-2)
        assert torch.isfinite(loss)
    q_ids, q_mask, _, _ = trainer._to_device(batch)
    teacher = trainer._teacher_vectors(q_ids, q_mask).numpy()
    base = Encoder(resolve_model(tiny_model), device="cpu").backend.forward(batch.q_ids, batch.q_mask)
    rows = batch.q_mask
    np.testing.assert_allclose(teacher[rows], base[rows], atol=1e-5)


def trainer_with_teacher(cfg):
    """``trainer_and_batch`` with ``distill_teacher``'s own tokens of the batch's rows attached."""
    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.tokenize import RoleTokenizer
    from supergrep.train.loop import TeacherTokens, teacher_spec

    trainer, batch = trainer_and_batch(cfg)
    spec = training_spec(cfg)
    pairs = load_pairs(cfg.train_file, split="train")[:64]
    rows = bucket_batches(np.asarray(cached_tokens(pairs, None, spec, RoleTokenizer(spec), "t").doc_lengths()),
                          cfg.batch_size, 0, 0)[0]
    t_spec = teacher_spec(cfg)
    t_tok = RoleTokenizer(t_spec)
    teacher = TeacherTokens(t_spec, t_tok, cached_tokens(pairs, None, t_spec, t_tok, "t"))
    return trainer, teacher.attach(batch, rows, False, 8)


def test_distill_teacher_naming_the_base_itself_is_the_base_distillation(tiny_model, pairs_file, tmp_path):
    """``distill_teacher`` = the base's own directory: a separately loaded copy, on its own (here
    identical) tokens, must give the frozen-base term exactly: same losses, same updates."""
    base, batch = trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, distill_weight=1.0))
    ext, t_batch = trainer_with_teacher(cfg_for(tiny_model, pairs_file, tmp_path, distill_weight=1.0,
                                                distill_teacher=str(tiny_model)))
    assert base.ext_teacher is None and ext.ext_teacher is not None
    np.testing.assert_array_equal(t_batch.teacher[0], batch.q_ids)  # the same tokenizer: the same ids
    for _ in range(3):
        l1, _ = base.train_step(batch, 1e-2)
        l2, _ = ext.train_step(t_batch, 1e-2)
        assert float(l1) == pytest.approx(float(l2), rel=1e-5)
    for name, p in base.params.items():
        torch.testing.assert_close(p, ext.params[name], rtol=1e-4, atol=1e-6)


def test_distill_teacher_scores_the_batch_with_its_own_model_and_tokens(tiny_model, tiny_t5, pairs_file, tmp_path):
    """A T5 teacher (its own sentencepiece tokens, 2_Dense head) for a BERT student: the teacher's
    vectors are what the T5 model encodes, its weights never move, and its term changes the loss."""
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    trainer, batch = trainer_with_teacher(cfg_for(tiny_model, pairs_file, tmp_path, distill_weight=1.0,
                                                  distill_teacher=str(tiny_t5)))
    plain, _ = trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path))
    tq_ids, tq_mask, td_ids, td_mask = batch.teacher
    assert tq_ids.shape[0] == batch.q_ids.shape[0] and td_ids.shape[0] == batch.d_ids.shape[0]
    assert tq_ids.shape != batch.q_ids.shape or not np.array_equal(tq_ids, batch.q_ids)
    frozen = [p.detach().clone() for p in trainer.ext_teacher[0].parameters()]
    trainer._to_device(batch)
    got = trainer._ext_teacher_vectors(*trainer._teacher_tensors[:2]).numpy()
    want = Encoder(resolve_model(tiny_t5), device="cpu").backend.forward(tq_ids, tq_mask)
    np.testing.assert_allclose(got[tq_mask], want[tq_mask], atol=1e-5)
    for _ in range(2):
        loss, _ = trainer.train_step(batch, 1e-2)
        assert torch.isfinite(loss)
    assert all(torch.equal(a, b) for a, b in zip(frozen, trainer.ext_teacher[0].parameters(), strict=True))
    l_plain, _ = plain._step_plain(*plain._to_device(batch))
    l_teach, _ = trainer._step_plain(*trainer._to_device(batch))
    assert float(l_teach) != pytest.approx(float(l_plain), rel=1e-3)
    trainer._teacher_tensors = None
    with pytest.raises(TrainingError, match="no teacher tokens"):
        trainer._step_plain(*trainer._to_device(trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path))[1]))


def test_run_training_and_profile_feed_distill_teacher_its_tokens(tiny_model, tiny_t5, pairs_file, tmp_path):
    from supergrep.train.profile import run_profile

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, max_steps=3, save_every=3, eval_every=3,
                  distill_weight=0.5, distill_teacher=str(tiny_t5))
    res = run_training(cfg, show_progress=False)
    assert (tmp_path / "run" / "step_0000003" / "adapter_model.safetensors").is_file() and res.val_pairs > 0
    prof = run_profile(cfg, steps=2, warmup=1, unsynced_steps=1)
    assert prof.times["teacher"] and all(t > 0 for t in prof.times["teacher"])


@pytest.mark.parametrize("kw, msg", [
    (dict(distill_teacher="x"), "distill_teacher needs distill_weight > 0"),
    (dict(distill_teacher="x", distill_weight=1.0, backend="mlx"), "distill_teacher needs backend torch"),
    (dict(distill_teacher="x", distill_weight=1.0, grad_accum_steps=2), "distill_teacher needs grad_accum_steps 1"),
])
def test_distill_teacher_config_errors(tiny_model, pairs_file, tmp_path, kw, msg):
    from supergrep.errors import ConfigError

    with pytest.raises(ConfigError, match=msg):
        cfg_for(tiny_model, pairs_file, tmp_path, **kw)


def test_a_missing_distill_teacher_is_a_config_error_naming_the_key(tiny_model, pairs_file, tmp_path):
    from supergrep.errors import ConfigError

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, distill_weight=1.0, distill_teacher=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"distill_teacher '.*nope': .*does not exist"):
        run_training(cfg, show_progress=False)
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("step_*"))


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_t5"])
def test_model_dropout_zero_removes_the_encoders_dropout(model_fixture, request, pairs_file, tmp_path):
    model = request.getfixturevalue(model_fixture)

    def twice(trainer):  # the same input through the model in train mode, twice
        ids = torch.randint(5, 60, (2, 12), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        with torch.no_grad():
            return [trainer.model(input_ids=ids, attention_mask=mask).last_hidden_state for _ in range(2)]

    default, _ = trainer_and_batch(cfg_for(model, pairs_file, tmp_path))  # the default: removed
    assert not any(isinstance(m, torch.nn.Dropout) for m in default.model.modules())
    own, batch = trainer_and_batch(cfg_for(model, pairs_file, tmp_path, model_dropout=-1.0))
    assert own.model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in own.model.modules())
    a, b = twice(own)
    assert not torch.equal(a, b)  # the model's own dropout draws new masks
    off, _ = trainer_and_batch(cfg_for(model, pairs_file, tmp_path, model_dropout=0.0))
    assert not any(isinstance(m, torch.nn.Dropout) for m in off.model.modules())
    a, b = twice(off)
    assert torch.equal(a, b)
    loss, _ = off.train_step(batch, 1e-3)  # BERT's attention reads its dropout layer's p
    assert torch.isfinite(loss)
    half, _ = trainer_and_batch(cfg_for(model, pairs_file, tmp_path, model_dropout=0.3))
    ps = {m.p for m in half.model.modules() if isinstance(m, torch.nn.Dropout)}
    assert ps == {0.3}


def test_fp8_products_is_checked(tiny_model, pairs_file, tmp_path):
    from supergrep.errors import ConfigError

    for bad in ({"backend": "mlx"}, {"lora_dropout": 0.1}, {"qat_bits": 8}):
        with pytest.raises(ConfigError, match="fp8_products"):
            load_train_config(None, {"train_file": "x.jsonl", "fp8_products": True, **bad})
    # this machine has no float8 tensor cores: a clear refusal, not a slow float8 emulation
    with pytest.raises(UsageError, match="float8 tensor cores"):
        trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, fp8_products=True))


def test_model_dropout_is_checked():
    from supergrep.errors import ConfigError

    for bad in ({"model_dropout": 1.0}, {"model_dropout": -0.5}):
        with pytest.raises(ConfigError, match="model_dropout"):
            load_train_config(None, {"train_file": "x.jsonl", **bad})
