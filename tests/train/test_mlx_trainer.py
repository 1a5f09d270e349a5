"""The MLX trainer against the torch trainer (same init, same batches), and on its own: gradients
reach every LoRA weight, GradCache, accumulation, memory recovery, exact resume.

fp32 on CPU (``mlx[cpu]``). The first compiled step of a fresh machine JIT-compiles MLX's CPU
kernels (cached under $TMPDIR/mlx afterwards).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (Linux: pip install 'mlx[cpu]'; macOS: pip install mlx)")

from mlx.utils import tree_flatten  # noqa: E402

from supergrep.backends.adapters import LoRAConfig  # noqa: E402
from supergrep.errors import TrainingError, UsageError  # noqa: E402
from supergrep.train.config import load_train_config  # noqa: E402
from supergrep.train.data import bucket_batches, cached_tokens, collate  # noqa: E402
from supergrep.train.loop import get_lr, make_trainer, run_training, training_spec  # noqa: E402

pytestmark = pytest.mark.mlx


def cfg_for(model, pairs_file, tmp_path, **kw):
    base = dict(model_path=str(model), train_file=str(pairs_file), batch_size=8, max_steps=20, lr=5e-3,
                warmup_steps=2, log_every=1, save_every=100, eval_every=0, val_batches=2,
                output_dir=str(tmp_path / "run"), projection_dim=16, document_max_tokens=64,
                query_max_tokens=24, seed=0, device="cpu", backend="mlx")
    base.update(kw)
    return load_train_config(None, base)


def setup(cfg, n_batches=1):
    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.tokenize import RoleTokenizer

    spec = training_spec(cfg)
    tok = RoleTokenizer(spec)
    cache = cached_tokens(load_pairs(cfg.train_file, split="train"), None, spec, tok, "t")
    rows = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, 0, 0)[:n_batches]
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    return make_trainer(cfg, spec, lora), [collate(cache, r, tok, 0, False, 8) for r in rows]


def train_both(model, pairs_file, tmp_path, steps, **kw):
    """The same config, init and batches through both trainers, dropout off."""
    out = {}
    for backend in ("torch", "mlx"):
        cfg = cfg_for(model, pairs_file, tmp_path, backend=backend, max_steps=steps, **kw)
        trainer, batches = setup(cfg, steps)
        (trainer.model if backend == "torch" else trainer.tower).eval()
        losses = [trainer.train_step(b, get_lr(i + 1, cfg.lr, cfg.warmup_steps, steps, cfg.min_lr_ratio))[0]
                  for i, b in enumerate(batches)]
        out[backend] = (trainer, np.array(trainer.to_host(losses)))
    return out


def max_abs(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_t5"])
def test_twenty_steps_match_torch(model_fixture, request, pairs_file, tmp_path):
    """Measured (fp32, CPU): loss curves within ~1e-6, LoRA weights within ~1e-5 (|w| ~ 0.2)."""
    got = train_both(request.getfixturevalue(model_fixture), pairs_file, tmp_path, 20)
    (t_torch, l_torch), (t_mlx, l_mlx) = got["torch"], got["mlx"]
    assert len(l_mlx) == 20 and np.isfinite(l_mlx).all()
    assert np.abs(l_torch - l_mlx).max() < 1e-4, (l_torch, l_mlx)
    assert max_abs(t_torch.adapter_weights(), t_mlx.adapter_weights()) < 1e-4
    assert np.abs(t_torch.projection()[0] - t_mlx.projection()[0]).max() < 1e-5
    assert t_torch.adapted == t_mlx.adapted
    ts, tm = t_torch.state()[0], t_mlx.state()[0]
    names = {k for k in ts if k.startswith(("param.", "optim."))}
    assert names == set(tm)  # the same checkpoint tensor names: convertible as is
    assert max(float(np.abs(ts[k] - tm[k]).max()) for k in names if k.endswith("exp_avg")) < 1e-4


DISTILL = {"distill_weight": 0.5, "distill_temperature": 0.05}


@pytest.mark.parametrize("extra", [{"cached_contrastive": True, "mini_batch_size": 3}, {"grad_accum_steps": 2},
                                   DISTILL, {**DISTILL, "cached_contrastive": True, "mini_batch_size": 3}],
                         ids=["gradcache", "accumulation", "distill", "distill-gradcache"])
def test_gradcache_accumulation_and_distillation_match_torch(extra, tiny_model, pairs_file, tmp_path):
    got = train_both(tiny_model, pairs_file, tmp_path, 4, **extra)
    assert np.abs(got["torch"][1] - got["mlx"][1]).max() < 1e-4, (got["torch"][1], got["mlx"][1])
    assert max_abs(got["torch"][0].adapter_weights(), got["mlx"][0].adapter_weights()) < 1e-4


def test_distillation_teacher_is_the_base_with_lora_off(tiny_model, pairs_file, tmp_path):
    """The teacher's vectors are the base model's (LoRA off, no trained head, no dropout) even
    after the adapter has moved, and the KL term changes the loss by exactly what it adds."""
    from supergrep.encoder import Encoder, resolve_model
    from supergrep.train.losses import distill_loss, maxsim_scores
    from supergrep.train.losses.distill import Distill

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, lora_dropout=0.1, **DISTILL)
    trainer, (batch,) = setup(cfg)
    assert trainer.needs_teacher
    for _ in range(3):
        trainer.train_step(batch, 5e-3)
    assert np.abs(np.array(trainer.adapter_weights()[next(k for k in trainer.adapter_weights()
                                                           if "lora_B" in k)])).max() > 0
    q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
    t_d = np.array(trainer._teacher_fn(d_ids, d_mask))
    base = Encoder(resolve_model(tiny_model), backend="mlx", device="cpu")
    want = base.backend.forward(batch.d_ids, batch.d_mask)  # (n, L, 32): the base's own vectors
    assert t_d.shape == want.shape and np.abs(t_d - want)[batch.d_mask].max() < 1e-5
    assert trainer.tower.training  # the teacher left the student's mode alone
    # loss(distill) - loss(no distill) == weight * KL(teacher scores, student scores), eval mode
    trainer.tower.eval()
    with_t = float(trainer._loss_on(q_ids, q_mask, d_ids, d_mask, trainer._teacher_fn(q_ids, q_mask),
                                    mx.array(t_d))[0])
    without = float(trainer._loss_on(q_ids, q_mask, d_ids, d_mask)[0])
    q, d = trainer.tower(q_ids, q_mask), trainer.tower(d_ids, d_mask)
    t_q = trainer._teacher_fn(q_ids, q_mask)
    kl = float(distill_loss(trainer.ops, maxsim_scores(trainer.ops, q, q_mask, d, d_mask),
                            maxsim_scores(trainer.ops, t_q, q_mask, mx.array(t_d), d_mask), Distill(0.05)))
    assert kl > 1e-4 and with_t - without == pytest.approx(0.5 * kl, rel=1e-4)


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_t5"])
def test_every_lora_weight_and_the_projection_get_gradients(model_fixture, request, pairs_file, tmp_path):
    cfg = cfg_for(request.getfixturevalue(model_fixture), pairs_file, tmp_path)
    trainer, (batch,) = setup(cfg)
    before = {k: np.array(v) for k, v in trainer.trainable().items()}
    assert len(before) == 2 * len(trainer.adapted) + 1 and len(trainer.adapted) >= 12
    trainer.train_step(batch, 1e-3)  # B starts at 0: A's gradient is 0 until B has moved
    _, grads = trainer._grad_fn(*trainer._to_device(batch))
    flat = dict(tree_flatten(grads))
    assert set(flat) == set(before)
    zero = [k for k, g in flat.items() if not np.abs(np.array(g)).max() > 0]
    assert zero == [], f"no gradient reached {zero}"
    trainer.train_step(batch, 1e-3)
    unchanged = [k for k, v in trainer.trainable().items() if np.array_equal(np.array(v), before[k])]
    assert unchanged == []
    frozen = [k for k, _ in tree_flatten(trainer.tower.parameters()) if k not in before]
    assert frozen and all(".lora_" not in k for k in frozen)


def test_recompute_and_uncompiled_give_the_same_gradients(tiny_model, pairs_file, tmp_path):
    from supergrep.backends.mlx_train import MLXTrainer
    from supergrep.train.losses import contrastive_loss

    grads = []
    for kw, compiled in (({}, True), ({"gradient_checkpointing": True}, True), ({}, False)):
        cfg = cfg_for(tiny_model, pairs_file, tmp_path, **kw)
        spec = training_spec(cfg)
        _, (batch,) = setup(cfg)
        t = MLXTrainer(spec, cfg, LoRAConfig(16, 32.0), contrastive_loss(), compiled=compiled)
        t.tower.eval()
        t.train_step(batch, 1e-3)
        _, g = t._grad_fn(*t._to_device(batch))
        grads.append({k: np.array(v) for k, v in tree_flatten(g)})
    assert max_abs(grads[0], grads[1]) < 1e-6 and max_abs(grads[0], grads[2]) < 1e-6


def test_out_of_memory_restores_the_weights_and_retries_smaller(tiny_model, pairs_file, tmp_path):
    cfg = cfg_for(tiny_model, pairs_file, tmp_path)
    trainer, (batch,) = setup(cfg)
    reference, _ = setup(cfg)
    real, calls = trainer._step_plain, []

    def failing(*args):
        real(*args)  # the update is built (lazily) and then the allocation fails
        calls.append(1)
        raise RuntimeError("[metal::malloc] Attempting to allocate 4294967296 bytes which is greater than the "
                           "maximum allowed buffer size of 3221225472 bytes.")

    trainer._step_plain = failing
    loss, _ = trainer.train_step(batch, 1e-3)
    assert calls == [1] and trainer.cached and trainer.mini == 4 and trainer.oom_events == 1
    reference.cached, reference.mini = True, 4
    ref_loss, _ = reference.train_step(batch, 1e-3)
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-6)  # applied once, from the old weights
    assert max_abs(trainer.adapter_weights(), reference.adapter_weights()) < 1e-6

    def always(*args):
        raise RuntimeError("[malloc] Out of memory")

    trainer._step_cached = always
    with pytest.raises(TrainingError, match="mini-batches of 1"):
        trainer.train_step(batch, 1e-3)


def test_memory_counters_shrink_a_step_that_would_not_fit(tiny_model, pairs_file, tmp_path):
    cfg = cfg_for(tiny_model, pairs_file, tmp_path)
    trainer, (batch,) = setup(cfg)
    trainer.train_step(batch, 1e-3)  # measures bytes per padded token
    mem = trainer.memory()
    assert mem["peak_bytes"] > 0 and trainer._bytes_per_token > 0 and not trainer.cached
    # A budget that holds the weights plus a third of this batch's activations:
    trainer.budget = int(mx.get_active_memory() + trainer._bytes_per_token * (batch.q_ids.size + batch.d_ids.size) / 3)
    loss, _ = trainer.train_step(batch, 1e-3)
    assert trainer.cached and trainer.mini <= 2 and trainer.oom_events == 1 and np.isfinite(float(loss))


def test_bf16_trains_and_fp16_is_refused(tiny_model, pairs_file, tmp_path):
    trainer, (batch,) = setup(cfg_for(tiny_model, pairs_file, tmp_path, precision="bf16"))
    assert trainer.dtype == mx.bfloat16
    assert trainer.tower.model.encoder.layer[0].intermediate.dense.base.weight.dtype == mx.bfloat16
    loss, _ = trainer.train_step(batch, 1e-3)
    assert np.isfinite(float(loss)) and all(v.dtype == mx.float32 for v in trainer.trainable().values())
    with pytest.raises(UsageError, match="bf16"):
        setup(cfg_for(tiny_model, pairs_file, tmp_path, precision="fp16"))


def test_exact_resume_and_no_cross_backend_resume(tiny_model, pairs_file, tmp_path):
    """6 steps with dropout (model's own and LoRA's) = 3 steps, checkpoint, a new process's worth of
    state (fresh trainer, fresh compiled functions), 3 more: the same losses to the bit."""
    from safetensors.numpy import load_file

    def train(out, resume=False):
        cfg = cfg_for(tiny_model, pairs_file, tmp_path, max_steps=6, save_every=3, lora_dropout=0.1,
                      output_dir=str(out), cached_contrastive=out.name == "c", mini_batch_size=3)
        run_training(cfg, resume=resume, show_progress=False)
        return [(e["step"], e["loss"]) for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                if e["kind"] == "train"]

    a, b = tmp_path / "a", tmp_path / "b"
    want = train(a)
    b.mkdir()
    shutil.copytree(a / "step_0000003", b / "step_0000003")
    got = train(b, resume=True)
    assert [s for s, _ in want] == [1, 2, 3, 4, 5, 6] and got == want[3:]
    wa = load_file(str(a / "step_0000006" / "adapter_model.safetensors"))
    wb = load_file(str(b / "step_0000006" / "adapter_model.safetensors"))
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    state = json.loads((a / "step_0000006" / "trainer_state.json").read_text())
    assert state["meta"]["backend"] == "mlx" and state["meta"]["steps_taken"] == 6

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, backend="torch", max_steps=7, output_dir=str(a), lora_dropout=0.1)
    with pytest.raises(TrainingError, match="convert"):
        run_training(cfg, resume=True, show_progress=False)


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_t5"])
def test_model_dropout_zero_removes_the_encoders_dropout(model_fixture, request, pairs_file, tmp_path):
    """Default 0: two train-mode forwards agree; -1 (the model's 0.1) draws masks; the LoRA
    branch's own dropout is not the model's (set before LoRA wraps the projections)."""
    model = request.getfixturevalue(model_fixture)
    ids = mx.array(np.random.RandomState(0).randint(5, 60, (2, 12)))
    mask = mx.ones(ids.shape, dtype=mx.int32)

    def twice(trainer):
        trainer.tower.train()
        return [np.array(trainer.tower.model(ids, mask)) for _ in range(2)]

    off, _ = setup(cfg_for(model, pairs_file, tmp_path))
    a, b = twice(off)
    np.testing.assert_array_equal(a, b)
    own, _ = setup(cfg_for(model, pairs_file, tmp_path, model_dropout=-1.0))
    a, b = twice(own)
    assert not np.array_equal(a, b)
    lora, _ = setup(cfg_for(model, pairs_file, tmp_path, lora_dropout=0.2))
    from mlx import nn as mnn

    kept = [m for _, m in lora.tower.model.named_modules() if isinstance(m, mnn.Dropout) and m._p_1 < 1]
    assert kept and all(abs(m._p_1 - 0.8) < 1e-6 for m in kept)  # only LoRA's, at its own rate
