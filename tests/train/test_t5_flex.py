"""`attn_implementation: flex`: the T5 encoder over packed rows with FlexAttention (CPU, tiny T5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from supergrep.backends.torch_t5_flex import packed_forward, relative_bucket, segment_block_mask
from supergrep.errors import ConfigError, UsageError
from supergrep.train.data import pack_documents


def test_buckets_are_hf_t5s():
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-300, 301)[None, :]
    for buckets, dist in ((32, 128), (8, 128), (16, 20)):
        want = T5Attention._relative_position_bucket(rel, bidirectional=True, num_buckets=buckets, max_distance=dist)
        assert torch.equal(relative_bucket(rel, buckets, dist), want)


def _short_docs(trainer, batch):
    """Lengths 7..96 so that several documents share a packed row."""
    keep = np.array([90, 10, 33, 50, 7, 96, 12, 60])[:, None] > np.arange(batch.d_ids.shape[1])[None]
    batch.d_mask = batch.d_mask & keep
    batch.d_ids = np.where(batch.d_mask, batch.d_ids, 0)
    batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
    assert batch.packed.ids.shape[0] < batch.d_ids.shape[0]
    return batch


def test_flex_rows_give_hf_t5s_vectors_and_loss(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    trainer, batch = trainer_and_batch(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True,
                                               attn_implementation="flex"))
    trainer.model.eval()  # no dropout: FlexAttention and HF's attention must agree to rounding
    batch = _short_docs(trainer, batch)
    q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
    with torch.no_grad():
        padded = trainer.encode(d_ids, d_mask)  # HF's own forward (SDPA), one document per row
        flex = trainer.encode_documents(d_ids, d_mask, trainer.packed_to_device(batch))
        torch.testing.assert_close(flex[d_mask], padded[d_mask], atol=2e-5, rtol=1e-4)
        # the raw hidden states too, before the projection
        p = trainer.packed_to_device(batch)
        ref = trainer.model(input_ids=d_ids, attention_mask=d_mask.long()).last_hidden_state
        for block_mask in (segment_block_mask(p[1]), None):  # FlexAttention (eager), and the CPU math
            rows = packed_forward(trainer.model, p[0], p[1], block_mask)
            flat = rows.reshape(-1, rows.shape[-1])[p[3][d_mask]]
            torch.testing.assert_close(flat, ref[d_mask], atol=2e-5, rtol=1e-4)
    # queries and documents in one packed pass: the same loss as two padded passes
    joint = trainer.joint_packed_to_device(batch)
    assert joint is not None and joint[3].shape[0] == q_ids.shape[0] + d_ids.shape[0]
    l_pad, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask)
    l_joint, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask, joint=joint)
    assert float(l_joint) == pytest.approx(float(l_pad), rel=1e-5)


def test_flex_training_steps_update_every_lora_weight(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    trainer, batch = trainer_and_batch(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True,
                                               attn_implementation="flex", document_max_tokens=200))
    from supergrep.train.data import pack_documents as pack

    batch.packed = pack(batch.d_ids, batch.d_mask, 200, 0)
    trainer.model.eval()  # no dropout: the same batch's loss must fall
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    losses = [float(trainer.train_step(batch, 5e-3)[0]) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert [n for n, p in trainer.params.items() if torch.equal(p.detach(), before[n])] == []


def test_flex_needs_packing_and_a_t5_model(tiny_model, tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    with pytest.raises(ConfigError, match="flex needs packing"):
        cfg_for(tiny_t5, pairs_file, tmp_path, attn_implementation="flex")
    with pytest.raises(UsageError, match="flex is implemented for T5"):
        trainer_and_batch(cfg_for(tiny_model, pairs_file, tmp_path, packing=True, attn_implementation="flex"))
