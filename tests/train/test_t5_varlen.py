"""`attn_implementation: varlen`: T5, BERT and RoBERTa encoders over tokens laid end to end (no
padding), the attention kernels (Triton; run here in Triton's CPU interpreter) and the torch
reference."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from supergrep.backends.packing import flatten_queries_and_documents
from supergrep.backends.t5_attention import padded_index, reference_attention
from supergrep.errors import ConfigError, TrainingError, UsageError

HAS_TRITON = importlib.util.find_spec("triton") is not None


def _dense_attention(qkv, lengths, table, dist, heads, scale):
    """Each document on its own, in float64: the plainest statement of T5 attention."""
    d = qkv.shape[1] // (3 * heads)
    out, start = [], 0
    for n in lengths:
        q, k, v = qkv[start : start + n].double().view(n, 3, heads, d).permute(1, 2, 0, 3)
        rel = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).clamp(-dist, dist) + dist
        probs = ((q @ k.transpose(-1, -2)) * scale + table.double()[:, rel]).softmax(-1)
        out.append((probs @ v).permute(1, 0, 2).reshape(n, heads * d))
        start += n
    return torch.cat(out)


def test_flatten_lays_every_real_token_end_to_end_and_gathers_them_back():
    rng = np.random.default_rng(0)
    q_len, d_len = rng.integers(1, 9, 5), rng.integers(1, 30, 7)
    q_ids = rng.integers(1, 100, (5, 8))
    d_ids = rng.integers(1, 100, (7, 30))
    q_mask, d_mask = np.arange(8) < q_len[:, None], np.arange(30) < d_len[:, None]
    f = flatten_queries_and_documents(q_ids, q_mask, d_ids, d_mask)
    assert f.ids.shape == (q_len.sum() + d_len.sum(),) and f.max_len == max(q_len.max(), d_len.max())
    assert np.diff(f.cu).tolist() == q_len.tolist() + d_len.tolist()
    table = np.append(f.ids, -1)  # the padding slot
    assert np.array_equal(table[f.gather[:5, :8]], np.where(q_mask, q_ids, -1))
    assert np.array_equal(table[f.gather[5:]], np.where(d_mask, d_ids, -1))
    with pytest.raises(ValueError, match="prefix"):
        flatten_queries_and_documents(q_ids, q_mask, d_ids, ~d_mask)


def test_fixed_fillers_keep_the_offsets_length_and_the_real_tokens_in_place():
    """static_shapes' layout: exactly k filler sequences (each >= 1 token) whatever the batch, the
    token count rounded up from the real tokens + k, the real tokens laid and gathered as before."""
    rng = np.random.default_rng(1)
    shapes = set()
    for n_docs_tokens in (5, 29):  # two batches of different sizes, one bucket
        q_len, d_len = rng.integers(1, 9, 5), rng.integers(1, n_docs_tokens, 7)
        q_ids, d_ids = rng.integers(1, 100, (5, 8)), rng.integers(1, 100, (7, 30))
        q_mask, d_mask = np.arange(8) < q_len[:, None], np.arange(30) < d_len[:, None]
        plain = flatten_queries_and_documents(q_ids, q_mask, d_ids, d_mask)
        f = flatten_queries_and_documents(q_ids, q_mask, d_ids, d_mask, 256, 4)
        real = int(q_len.sum() + d_len.sum())
        assert f.ids.shape[0] == -(-(real + 4) // 256) * 256 and len(f.cu) == 12 + 4 + 1
        fillers = np.diff(f.cu)[12:]
        assert fillers.min() >= 1 and fillers.max() - fillers.min() <= 1 and fillers.sum() == f.ids.shape[0] - real
        assert np.array_equal(f.ids[:real], plain.ids) and np.array_equal(f.cu[:13], plain.cu)
        assert np.array_equal(f.pos[:real], plain.pos) and f.pos[real:].tolist() == [i for n in fillers for i in range(n)]
        table = np.append(f.ids, -1)
        assert np.array_equal(table[f.gather[5:]], np.where(d_mask, d_ids, -1))
        shapes.add((f.ids.shape, f.cu.shape, f.gather.shape))
    assert len(shapes) == 1


def test_reference_attention_is_per_document_attention_with_the_bias():
    torch.manual_seed(0)
    heads, d, dist, lengths = 3, 8, 4, [5, 1, 12, 9]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    qkv, table = torch.randn(sum(lengths), 3 * heads * d), torch.randn(heads, 2 * dist + 1)
    got = reference_attention(qkv, cu, max(lengths) + 3, table, dist, heads, 0.5)  # max_len: an upper bound
    torch.testing.assert_close(got.double(), _dense_attention(qkv, lengths, table, dist, heads, 0.5),
                               atol=1e-5, rtol=1e-5)
    idx, valid = padded_index(cu, 12)
    assert idx[valid].tolist() == list(range(sum(lengths)))


KERNEL_CHECK = r"""
import json, sys
import numpy as np, torch
from supergrep.backends import triton_t5_attention as K
from supergrep.backends.t5_attention import reference_attention, t5_varlen_attention
torch.manual_seed(0)
out = {}
heads, d, dist = 2, 16, 5
lengths = [7, 1, 20, 33, 64, 65, 3]  # 1 token, block edges (64, 65) for 16/32/64 tiles
cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
max_len = 80
table = torch.randn(heads, 2 * dist + 1)
for dtype, bm, bn, pad in ((torch.float32, 16, 16, 0), (torch.float32, 32, 16, 5), (torch.float16, 16, 32, 0)):
    # pad > 0: qkv is a strided view of a wider buffer, as the fused q/k/v GEMM writes it
    qkv = torch.randn(sum(lengths), 3 * heads * d + pad).to(dtype)[:, : 3 * heads * d].requires_grad_()
    ref = reference_attention(qkv.float(), cu, max_len, table, dist, heads, 0.7)
    do = torch.randn(ref.shape[0], ref.shape[1] + pad)[:, : ref.shape[1]]  # strided too when pad > 0
    (g_ref,) = torch.autograd.grad(ref, qkv, do)
    o, lse = K.forward(qkv.detach(), cu, max_len, table, dist, heads, 0.7, block_m=bm, block_n=bn)
    g = K.backward(do.to(dtype), qkv.detach(), o, lse, cu, max_len, table, dist, heads, 0.7, block_m=bm, block_n=bn)
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())
    out[f"{dtype}-{bm}-{bn}-{pad}"] = [rel(o, ref), rel(g, g_ref), o.dtype == dtype, g.dtype == dtype]
# the dense (H, W, W) bias matrix (BIAS 2) gives the same as the table gather (BIAS 1)
qkv = torch.randn(sum(lengths), 3 * heads * d)
dense = K.dense_bias(table, dist, max_len)
o1, l1 = K.forward(qkv, cu, max_len, table, dist, heads, 0.7, block_m=32, block_n=16)
o2, l2 = K.forward(qkv, cu, max_len, dense, dist, heads, 0.7, block_m=32, block_n=16)
g1 = K.backward(do.float(), qkv, o1, l1, cu, max_len, table, dist, heads, 0.7, block_m=16, block_n=32)
g2 = K.backward(do.float(), qkv, o2, l2, cu, max_len, dense, dist, heads, 0.7, block_m=16, block_n=32)
o0, _ = K.forward(qkv, cu, max_len, table, dist, heads, 0.7, block_m=32, block_n=16, bias=0)
out["dense"] = [float((o2 - o1).abs().max()), float((g2 - g1).abs().max()), float((o0 - o1).abs().max())]
# the backward kernels with tiles of their own (dK/dV over 64-key blocks, dQ over 32-query blocks)
g3 = K.backward(do.float(), qkv, o2, l2, cu, max_len, dense, dist, heads, 0.7, block_m=16, block_n=32,
                dkdv=(16, 64, 4, 2), dq=(32, 16, 4, 2))
out["split"] = [float((g3 - g2).abs().max())]
# training with the dense matrix in float16 (SUPERGREP_T5_BIAS16): forward and d(qkv) to float16's
# rounding of the bias
o6, l6 = K.forward(qkv, cu, max_len, dense.half(), dist, heads, 0.7, block_m=32, block_n=16)
g6 = K.backward(do.float(), qkv, o6, l6, cu, max_len, dense.half(), dist, heads, 0.7, block_m=16, block_n=32)
out["bias16"] = [float((o6 - o2).abs().max() / o2.abs().max()), float((g6 - g2).abs().max() / g2.abs().max())]
# tiles that exceed this GPU's shared memory: the shared tiles instead, and not tried again
from triton.runtime.errors import OutOfResources
real, tried = K._DKDV, []
class TooBig:
    def __getitem__(self, grid):
        def launch(*a, **kw):
            tried.append(kw["BLOCK_N"])
            if kw["BLOCK_N"] == 64:
                raise OutOfResources(300000, 232448, "shared memory")
            return real[grid](*a, **kw)
        return launch
K._DKDV = TooBig()
g4, g5 = (K.backward(do.float(), qkv, o2, l2, cu, max_len, dense, dist, heads, 0.7, block_m=16, block_n=32,
                     dkdv=(16, 64, 4, 2), dq=(32, 16, 4, 2)) for _ in range(2))
K._DKDV = real
out["split"] += [float((g4 - g2).abs().max()), float((g5 - g2).abs().max()), tried]
# through the custom op and its registered backward, eager and compiled
qkv = torch.randn(sum(lengths), 3 * heads * d, requires_grad=True)
ref = reference_attention(qkv, cu, max_len, table, dist, heads)
do = torch.randn_like(ref)
(g_ref,) = torch.autograd.grad(ref, qkv, do)
for name, fn in (("op", t5_varlen_attention), ("compiled", torch.compile(t5_varlen_attention, dynamic=True))):
    o = fn(qkv, cu, max_len, table, dist, heads)
    (g,) = torch.autograd.grad(o, qkv, do)
    out[name] = [float((o - ref).abs().max()), float((g - g_ref).abs().max())]
# no bias (BERT: table None) with BERT's 1/sqrt(d) scale, through the op
o = t5_varlen_attention(qkv, cu, max_len, None, 0, heads, d ** -0.5)
(g,) = torch.autograd.grad(o, qkv, do)
ref = reference_attention(qkv, cu, max_len, None, 0, heads, d ** -0.5)
(g_ref,) = torch.autograd.grad(ref, qkv, do)
out["nobias"] = [float((o - ref).abs().max()), float((g - g_ref).abs().max())]
# encoding's float16 dense matrix reaches the kernels as float16 (no cast back per layer) and
# gives the float32 matrix's output to float16's rounding of the bias
import supergrep.backends.t5_attention as TA
seen, apply = [], TA._VarlenAttention.apply
TA._VarlenAttention.apply = lambda qkv, cu, table, *a: seen.append(str(table.dtype)) or apply(qkv, cu, table, *a)
with torch.no_grad():
    o16 = t5_varlen_attention(qkv.detach(), cu, max_len, dense.half(), dist, heads)
    o32 = t5_varlen_attention(qkv.detach(), cu, max_len, dense, dist, heads)
TA._VarlenAttention.apply = apply
out["half_bias"] = [float((o16 - o32).abs().max()), seen]
print(json.dumps(out))
"""


@pytest.mark.skipif(not HAS_TRITON, reason="needs triton (Triton's CPU interpreter runs the kernels)")
def test_the_triton_kernels_match_the_reference_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-c", KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for key, (fwd, bwd, o_dtype, g_dtype) in ((k, v) for k, v in out.items() if k not in ("op", "compiled", "dense", "nobias", "split", "half_bias", "bias16")):
        tol = 1e-5 if "float32" in key else 2e-3  # fp16 operands, fp32 accumulation
        assert fwd < tol and bwd < tol and o_dtype and g_dtype, (key, fwd, bwd)
    for key in ("op", "compiled", "nobias"):
        assert max(out[key]) < 1e-4, (key, out[key])
    dense_fwd, dense_bwd, no_bias = out["dense"]
    assert dense_fwd < 1e-5 and dense_bwd < 1e-5 and no_bias > 1e-2  # the bias matters, and both paths add it
    split, too_big, again, tried = out["split"]
    assert split < 1e-5 and too_big < 1e-5 and again < 1e-5 and tried == [64, 32, 32]
    assert 0 < max(out["bias16"]) < 2e-3, out["bias16"]
    half_err, seen = out["half_bias"]
    assert seen == ["torch.float16", "torch.float32"] and 0 < half_err < 5e-3, out["half_bias"]


def _short(trainer, batch):
    """Lengths 7..96 so sequences of very different lengths share the flat layout."""
    keep = np.array([90, 10, 33, 50, 7, 96, 12, 60])[:, None] > np.arange(batch.d_ids.shape[1])[None]
    batch.d_mask = batch.d_mask & keep
    batch.d_ids = np.where(batch.d_mask, batch.d_ids, 0)
    return batch


def test_t5_attention_backward_takes_its_own_tiles_and_bert_the_shared_ones(monkeypatch):
    """The backward's own tiles (#51) were measured with T5's position bias only: a biased call gets
    ``_BWD_BLOCKS``, a call without a bias (BERT-style) the forward's shared tiles unless the sweep's
    environment variable asks; training's bias matrix is float16 by default (SUPERGREP_T5_BIAS16=0: off)."""
    from supergrep.backends import t5_attention
    from supergrep.backends import triton_t5_attention as K

    got: list[dict] = []
    monkeypatch.setattr(K, "backward", lambda *a, **kw: got.append(kw))
    monkeypatch.delenv("SUPERGREP_T5_ATTN_BWD", raising=False)
    x = torch.zeros(4, 6)
    for table in (torch.zeros(2, 8), None, torch.zeros(0)):
        t5_attention._attn_bwd_impl(x, x, x, x, torch.tensor([0, 4]), table, 4, 8, 2, 1.0)
    assert got[0]["dkdv"] == t5_attention._BWD_BLOCKS["dkdv"] == (64, 64, 4, 3) and got[0]["dq"] == (64, 32, 4, 3)
    assert "dkdv" not in got[1] and "dkdv" not in got[2]
    monkeypatch.setenv("SUPERGREP_T5_ATTN_BWD", "32,32,4,2;32,16,4,2")
    t5_attention._attn_bwd_impl(x, x, x, x, torch.tensor([0, 4]), None, 4, 8, 2, 1.0)
    assert got[3]["dkdv"] == (32, 32, 4, 2)
    code = "from supergrep.backends import torch_t5_varlen as m; print(m.BIAS16_TRAINING)"
    for env, want in (({}, "True"), ({"SUPERGREP_T5_BIAS16": "0"}, "False")):
        env = {k: v for k, v in os.environ.items() if k != "SUPERGREP_T5_BIAS16"} | env
        assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == want


def test_varlen_gives_hf_t5s_vectors_and_the_padded_loss(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    from supergrep.backends.torch_t5_varlen import varlen_forward
    from supergrep.train.data import pack_documents

    trainer, batch = trainer_and_batch(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True,
                                               attn_implementation="varlen"))
    trainer.model.eval()  # no dropout: both forwards must agree to rounding
    batch = _short(trainer, batch)
    batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
    q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
    with torch.no_grad():
        padded = trainer.encode(d_ids, d_mask)  # HF's own forward, one document per row
        varlen = trainer.encode_documents(d_ids, d_mask, trainer.packed_to_device(batch))
        torch.testing.assert_close(varlen[d_mask], padded[d_mask], atol=2e-5, rtol=1e-4)
        ref = trainer.model(input_ids=d_ids, attention_mask=d_mask.long()).last_hidden_state
        f = flatten_queries_and_documents(batch.q_ids[:0], batch.q_mask[:0], batch.d_ids, batch.d_mask)
        ids, cu = torch.from_numpy(f.ids), torch.from_numpy(f.cu)
        for fuse in (True, False):  # fused LoRA projections and the modules one by one
            hidden = varlen_forward(trainer.model, ids, cu, f.max_len, fuse=fuse)
            torch.testing.assert_close(hidden, ref[d_mask], atol=2e-5, rtol=1e-4)
    joint = trainer.joint_packed_to_device(batch)
    real = int(q_mask.sum() + d_mask.sum())
    # no padding but a filler of < pad_multiple tokens, so token counts (GEMM shapes) repeat across steps
    assert joint[0] == "varlen" and joint[1].shape[0] == -(-real // trainer.cfg.pad_multiple) * trainer.cfg.pad_multiple
    l_pad, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask)
    l_var, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask, joint=joint)
    assert float(l_var) == pytest.approx(float(l_pad), rel=1e-5)
    # a large filler (4 sequences of 64 and less) changes nothing either
    from dataclasses import replace

    trainer.cfg = replace(trainer.cfg, pad_multiple=256)
    joint = trainer.joint_packed_to_device(batch)
    assert joint[1].shape[0] == -(-real // 256) * 256 > real + 64  # this batch: several filler sequences
    l_fill, _ = trainer._step_plain(q_ids, q_mask, d_ids, d_mask, joint=joint)
    assert float(l_fill) == pytest.approx(float(l_pad), rel=1e-5)


def _gradient_case(cfg):
    """A varlen trainer in eval mode (no dropout) with nonzero B's, and a batch of short documents."""
    from test_trainer import trainer_and_batch

    from supergrep.train.data import pack_documents

    trainer, batch = trainer_and_batch(cfg)
    trainer.model.eval()
    batch = _short(trainer, batch)
    batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
    with torch.no_grad():  # B starts at zero, which would hide a wrong A gradient
        for n, p in trainer.params.items():
            if n.endswith("lora_B"):
                p.normal_(0, 0.05)
    return trainer, batch


def test_varlen_gradients_equal_the_padded_forwards(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for

    trainer, batch = _gradient_case(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True, attn_implementation="varlen"))
    tensors = trainer._to_device(batch)
    grads = []
    for joint in (None, trainer.joint_packed_to_device(batch)):
        trainer._step_plain(*tensors, joint=joint)
        grads.append({n: p.grad.clone() for n, p in trainer.params.items()})
        trainer.optimizer.zero_grad(set_to_none=True)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == len(trainer.params)
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], atol=1e-6, rtol=1e-3, msg=n)


def test_static_shapes_give_the_same_loss_and_gradients_in_one_shape(tiny_t5, pairs_file, tmp_path):
    """static_shapes (for CUDA graphs): caps-wide batches, a fixed filler count and the cap as the
    attention's bound give the dynamic layout's loss and gradients, and two batches of different
    widths and token counts the same tensor shapes."""
    from dataclasses import replace

    from test_trainer import cfg_for

    cfg = cfg_for(tiny_t5, pairs_file, tmp_path, packing=True, attn_implementation="varlen", pad_multiple=256)
    trainer, batch = _gradient_case(cfg)

    results, shapes = [], []
    for static in (False, True):
        trainer.cfg = replace(cfg, static_shapes=static)
        b = trainer._static_batch(batch) if static else batch
        joint = trainer.joint_packed_to_device(b)
        loss, _ = trainer._step_plain(*trainer._to_device(b), joint=joint)
        results.append((float(loss), {n: p.grad.clone() for n, p in trainer.params.items()}))
        trainer.optimizer.zero_grad(set_to_none=True)
        if static:
            shapes.append([tuple(t.shape) for t in trainer._to_device(b)] + [tuple(t.shape) for t in joint[1:4]] + [joint[4]])
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-5)
    for n, g in results[0][1].items():
        torch.testing.assert_close(results[1][1][n], g, atol=1e-6, rtol=1e-3, msg=n)
    # a narrower batch with fewer tokens: the same shapes but the token count, a multiple of 256
    small = replace(batch, q_ids=batch.q_ids[:, :10], q_mask=batch.q_mask[:, :10] & (np.arange(10) < 4),
                    d_ids=batch.d_ids[:, :40], d_mask=batch.d_mask[:, :40])
    b = trainer._static_batch(small)
    joint = trainer.joint_packed_to_device(b)
    got = [tuple(t.shape) for t in trainer._to_device(b)] + [tuple(t.shape) for t in joint[1:4]] + [joint[4]]
    assert got[:4] == shapes[0][:4] and got[5:] == shapes[0][5:]  # the loss's tensors, cu, gather, the bound
    assert got[4][0] % 256 == 0 and got[4][0] < shapes[0][4][0]
    assert joint[4] == 128  # the caps (24, 96), rounded up to 64
    # wider than the caps (a pad_multiple of 4096 rounds collated widths up to 4096): cropped to
    # them, the same shapes and loss, not a loss over every padded position
    wide = replace(batch, q_ids=np.pad(batch.q_ids, ((0, 0), (0, 40))), q_mask=np.pad(batch.q_mask, ((0, 0), (0, 40))),
                   d_ids=np.pad(batch.d_ids, ((0, 0), (0, 300))), d_mask=np.pad(batch.d_mask, ((0, 0), (0, 300))))
    b = trainer._static_batch(wide)
    assert b.q_ids.shape[1] == 24 and b.d_mask.shape[1] == 96
    loss, _ = trainer._step_plain(*trainer._to_device(b), joint=trainer.joint_packed_to_device(b))
    trainer.optimizer.zero_grad(set_to_none=True)
    assert float(loss) == pytest.approx(results[1][0], rel=1e-5)
    # a document past its cap is refused, not silently cut
    long = replace(wide, d_mask=wide.d_mask.copy())
    long.d_mask[0, 100] = True
    with pytest.raises(TrainingError, match="document_max_tokens"):
        trainer._static_batch(long)


def test_static_shapes_need_varlen_and_a_multiple_of_64(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for

    with pytest.raises(ConfigError, match="static_shapes"):
        cfg_for(tiny_t5, pairs_file, tmp_path, packing=True, attn_implementation="varlen", pad_multiple=100,
                static_shapes=True)
    with pytest.raises(ConfigError, match="static_shapes"):
        cfg_for(tiny_t5, pairs_file, tmp_path, packing=True, pad_multiple=256, static_shapes=True)


def test_varlen_training_steps_update_every_lora_weight(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    from supergrep.train.data import pack_documents

    trainer, batch = trainer_and_batch(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True,
                                               attn_implementation="varlen", document_max_tokens=200))
    batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
    trainer.model.eval()  # no dropout: the same batch's loss must fall
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    losses = [float(trainer.train_step(batch, 5e-3)[0]) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert [n for n, p in trainer.params.items() if torch.equal(p.detach(), before[n])] == []


@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    from tiny_models import make_roberta

    return make_roberta(tmp_path_factory.mktemp("roberta") / "m")


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_roberta"])
def test_bert_and_roberta_varlen_equal_hf_and_the_padded_gradients(model_fixture, request, pairs_file, tmp_path):
    """BERT (the default MiniLM's architecture) and RoBERTa (positions counted from padding_idx + 1):
    the varlen forward gives HF's vectors, and a joint step gives the padded step's loss and
    gradients."""
    from test_trainer import cfg_for, trainer_and_batch

    from supergrep.backends.torch_t5_varlen import bert_varlen_forward
    from supergrep.train.data import pack_documents

    model = request.getfixturevalue(model_fixture)
    trainer, batch = trainer_and_batch(cfg_for(model, pairs_file, tmp_path, packing=True,
                                               attn_implementation="varlen"))
    trainer.model.eval()
    batch = _short(trainer, batch)
    batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
    q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
    with torch.no_grad():
        ref = trainer.model(input_ids=d_ids, attention_mask=d_mask.long()).last_hidden_state
        f = flatten_queries_and_documents(batch.q_ids[:0], batch.q_mask[:0], batch.d_ids, batch.d_mask)
        for fuse in (True, False):
            hidden = bert_varlen_forward(trainer.model, torch.from_numpy(f.ids), torch.from_numpy(f.pos),
                                         torch.from_numpy(f.cu), f.max_len, trainer._pack_offset, fuse=fuse)
            torch.testing.assert_close(hidden, ref[d_mask], atol=2e-5, rtol=1e-4)
        for n, p in trainer.params.items():  # non-zero B: a wrong A gradient must show
            if n.endswith("lora_B"):
                p.normal_(0, 0.05)
    tensors = trainer._to_device(batch)
    out = []
    for joint in (None, trainer.joint_packed_to_device(batch)):
        loss, _ = trainer._step_plain(*tensors, joint=joint)
        out.append((float(loss), {n: p.grad.clone() for n, p in trainer.params.items()}))
        trainer.optimizer.zero_grad(set_to_none=True)
    assert out[1][0] == pytest.approx(out[0][0], rel=1e-5)
    for n in out[0][1]:
        torch.testing.assert_close(out[1][1][n], out[0][1][n], atol=1e-6, rtol=1e-3, msg=n)


def test_plain_frozen_projections_fuse_into_one_gemm(tiny_model):
    """Inference (no LoRA): q, k, v of a plain model as one GEMM over the stacked weights."""
    from transformers import AutoModel

    from supergrep.backends.torch_t5_varlen import project

    model = AutoModel.from_pretrained(str(tiny_model)).eval()
    sa = model.encoder.layer[0].attention.self
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(5, sa.query.in_features)
    want = torch.cat([sa.query(x), sa.key(x), sa.value(x)], -1)
    torch.testing.assert_close(project(x, [sa.query, sa.key, sa.value]), want)


def test_varlen_needs_packing_and_a_supported_model(tiny_t5, pairs_file, tmp_path):
    from test_trainer import cfg_for, trainer_and_batch

    from tiny_models import make_mpnet

    with pytest.raises(ConfigError, match="varlen needs packing"):
        cfg_for(tiny_t5, pairs_file, tmp_path, attn_implementation="varlen")
    with pytest.raises(UsageError, match="not supported for mpnet models"):  # packing's own refusal comes first
        trainer_and_batch(cfg_for(make_mpnet(tmp_path / "mpnet"), pairs_file, tmp_path, packing=True,
                                  attn_implementation="varlen"))


def test_compiled_step_functions_take_the_loss_constants_as_constants():
    """The trainer's torch.compile specialises Python floats: Dynamo's default (torch 2.11) passes
    the loss's temperature, margin and weights in as 0-d CPU tensors, which the backward copies
    through a CPU kernel each step and which segfault the backward under CUDA graphs (H100,
    benchmarks/cudagraph_probe.py). The graph's inputs are the tensors and sizes only."""
    from supergrep.backends.torch_compile import compile_dynamic
    from supergrep.backends.torch_ops import TorchOps
    from supergrep.train.losses import contrastive_loss

    loss_fn, ops = contrastive_loss(), TorchOps(torch.device("cpu"))
    inputs: list[list] = []

    def record(gm, example_inputs):
        inputs.append(list(example_inputs))
        return gm.forward

    fn = compile_dynamic(lambda q, qm, d, dm: loss_fn(ops, q, qm, d, dm), backend=record)
    q, d = torch.randn(4, 8, 16, requires_grad=True), torch.randn(4, 24, 16, requires_grad=True)
    loss, _ = fn(q, torch.ones(4, 8, dtype=torch.bool), d, torch.ones(4, 24, dtype=torch.bool))
    loss.backward()
    assert inputs and q.grad is not None
    scalars = [x for x in inputs[0] if torch.is_tensor(x) and x.ndim == 0]
    assert not scalars, f"{len(scalars)} 0-d tensor inputs: floats reached the graph as tensors"
    assert not torch._dynamo.config.specialize_float  # the process's own setting is left alone


def test_fp8_gated_quantisation_takes_the_one_op_backward_with_the_same_gradients(tiny_t5, pairs_file, tmp_path):
    """fp8_quantize "gated" (set here on CPU, where torch runs the float8 products too): every
    layer's gated GELU backward runs as the one op, the attention backward's d(qkv) is quantised
    by the row kernel's op, and the step's loss and gradients are those of the compiled
    quantisation's path, to rounding."""
    from test_trainer import cfg_for

    from supergrep.backends.torch_train import set_fp8_products

    trainer, batch = _gradient_case(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True, attn_implementation="varlen"))
    results = []
    for quantize in ("compiled", "gated"):
        set_fp8_products(trainer.model, True, "row", quantize)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loss, _ = trainer._step_plain(*trainer._to_device(batch), joint=trainer.joint_packed_to_device(batch))
        ops = (sum(e.name == "supergrep::gated_gelu_bwd_fp8" for e in prof.events()),
               sum(e.name == "supergrep::fp8_quantize_rows" for e in prof.events()))
        results.append((float(loss), {n: p.grad.clone() for n, p in trainer.params.items()}, ops))
        trainer.optimizer.zero_grad(set_to_none=True)
    set_fp8_products(trainer.model, False)
    layers = len(trainer.model.encoder.block)
    assert results[0][2] == (0, 0)
    # every layer's gated backward is the one op; the attention's d(qkv) goes through the row
    # kernel's op in every layer but the first, whose input (the frozen embeddings) needs no gradient
    assert results[1][2] == (layers, layers - 1)
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-5)
    for n, g in results[0][1].items():
        assert g.abs().max() > 0, n
        torch.testing.assert_close(results[1][1][n], g, atol=1e-6, rtol=1e-3, msg=n)


def test_cpp_wrapper_mode_compiles_with_inductors_cpp_wrapper():
    """compile_mode "cpp-wrapper": the compiled graphs (forward and backward) launch their kernels
    from Inductor's generated C++ instead of generated Python, with the same results and the
    floats still specialised."""
    from torch._inductor.utils import run_and_get_code

    from supergrep.backends.torch_compile import compile_dynamic

    def f(x, w, s: float):
        return ((x @ w) * s + 1.0).relu().sum()

    x, w = torch.randn(6, 8), torch.randn(8, 4, requires_grad=True)
    ref = f(x, w, 0.5)
    (g_ref,) = torch.autograd.grad(ref, w)
    torch._dynamo.reset()
    for mode, marker in (("cpp-wrapper", "inductor_entry_impl"), (None, "def call(")):
        fn = compile_dynamic(f, mode)

        def step(fn=fn):
            out = fn(x, w, 0.5)
            return out, torch.autograd.grad(out, w)[0]

        (out, g), codes = run_and_get_code(step)
        assert len(codes) == 2 and all(marker in c for c in codes), mode  # forward and backward graphs
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(g, g_ref)
        torch._dynamo.reset()


def test_compile_mode_auto_is_the_cpp_wrapper_on_cuda_only():
    from supergrep.backends.torch_compile import resolve_compile_mode
    from supergrep.train.config import TrainConfig

    assert TrainConfig().compile_mode == "auto"
    assert resolve_compile_mode("auto", torch.device("cuda")) == "cpp-wrapper"
    assert resolve_compile_mode("auto", torch.device("cpu")) is None
    assert resolve_compile_mode("default", torch.device("cuda")) is None
    assert resolve_compile_mode("reduce-overhead", torch.device("cuda")) == "reduce-overhead"


def test_cpp_wrapper_falls_back_to_the_python_wrapper_when_it_does_not_build(monkeypatch, caplog):
    """A machine where the C++ wrapper fails to build (no compiler, no CUDA headers) trains on with
    the Python wrapper and one warning, instead of dying after the first compile."""
    from supergrep.backends import torch_compile

    real = torch.compile
    modes = []

    def fake_compile(fn, **kw):
        cpp = bool((kw.get("options") or {}).get("cpp_wrapper"))
        modes.append(cpp)
        if not cpp:
            return real(fn, **kw)

        def broken(*a, **k):
            raise torch._dynamo.exc.BackendCompilerFailed(lambda *a: None, RuntimeError("cannot find cuda.h"), None)
        return broken

    monkeypatch.setattr(torch, "compile", fake_compile)
    torch._dynamo.reset()
    fn = torch_compile.compile_dynamic(lambda x, s: (x * s).relu().sum(), "cpp-wrapper")
    x = torch.randn(5)
    with caplog.at_level("WARNING"):
        assert torch.equal(fn(x, 2.0), (x * 2.0).relu().sum())
        assert torch.equal(fn(x, 2.0), (x * 2.0).relu().sum())
    assert modes == [True, False] and fn.fallen_back
    assert sum("C++ wrapper did not build" in r.message for r in caplog.records) == 1
    torch._dynamo.reset()


@pytest.mark.parametrize("model_fixture", ["tiny_t5", "tiny_model"])
def test_residual_dtype_compute_keeps_the_stream_in_bf16_with_the_same_loss(model_fixture, request, pairs_file,
                                                                         tmp_path):
    """train config residual_dtype compute (varlen, bf16 autocast): the hidden states between layers
    are bf16 instead of float32 (half the bytes of every residual add and norm pass), the loss
    stays within bf16 rounding of the float32 stream's, every LoRA weight still learns; under
    float32 precision it is a no-op."""
    from test_trainer import cfg_for, trainer_and_batch

    from supergrep.train.data import pack_documents

    model = request.getfixturevalue(model_fixture)
    results = {}
    for res in ("float32", "compute"):
        torch.manual_seed(0)
        trainer, batch = trainer_and_batch(cfg_for(model, pairs_file, tmp_path / res, packing=True, attn_implementation="varlen",
                                                   document_max_tokens=200, precision="bf16", residual_dtype=res))
        assert trainer.residual_compute == (res == "compute")
        trainer.model.eval()
        batch.packed = pack_documents(batch.d_ids, batch.d_mask, 200, 0)
        if model_fixture == "tiny_t5":
            norm = trainer.model.encoder.block[-1].layer[0].layer_norm
        else:
            norm = trainer.model.encoder.layer[-1].attention.output.LayerNorm
        seen = []
        handle = norm.register_forward_pre_hook(lambda m, args, seen=seen: seen.append(args[0].dtype))
        before = {n: p.detach().clone() for n, p in trainer.params.items()}
        losses = [float(trainer.train_step(batch, 5e-3)[0]) for _ in range(2)]
        handle.remove()
        assert set(seen) == {torch.bfloat16 if res == "compute" else torch.float32}
        assert [n for n, p in trainer.params.items() if torch.equal(p.detach(), before[n])] == []
        results[res] = losses
    assert results["compute"][0] == pytest.approx(results["float32"][0], rel=2e-2)
    fp32, _ = trainer_and_batch(cfg_for(model, pairs_file, tmp_path / "fp32", packing=True, attn_implementation="varlen",
                                        precision="fp32", residual_dtype="compute"))
    assert not fp32.residual_compute


def test_gated_forward_kernel_feeds_wo_the_activations_float8_rows_with_the_same_step(tiny_t5, pairs_file, tmp_path,
                                                                                    monkeypatch):
    """GATED_FORWARD_KERNEL (fp8 gated, no dropout): every layer's activation and wo's float8 input
    come from the one forward op, and the step's loss and gradients are the compiled
    quantisation's, to rounding."""
    from test_trainer import cfg_for

    from supergrep.backends import torch_t5_varlen
    from supergrep.backends.torch_train import set_fp8_products

    trainer, batch = _gradient_case(cfg_for(tiny_t5, pairs_file, tmp_path, packing=True, attn_implementation="varlen"))
    set_fp8_products(trainer.model, True, "row", "gated")
    results = []
    for on in (False, True):
        monkeypatch.setattr(torch_t5_varlen, "GATED_FORWARD_KERNEL", on)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loss, _ = trainer._step_plain(*trainer._to_device(batch), joint=trainer.joint_packed_to_device(batch))
        ops = sum(e.name == "supergrep::gated_gelu_fwd_fp8" for e in prof.events())
        results.append((float(loss), {n: p.grad.clone() for n, p in trainer.params.items()}, ops))
        trainer.optimizer.zero_grad(set_to_none=True)
    set_fp8_products(trainer.model, False)
    assert results[0][2] == 0 and results[1][2] == len(trainer.model.encoder.block)
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-5)
    for n, g in results[0][1].items():
        assert g.abs().max() > 0, n
        torch.testing.assert_close(results[1][1][n], g, atol=1e-6, rtol=1e-3, msg=n)


@pytest.mark.parametrize("case", ["t5-varlen", "t5-varlen-static", "bert-rows", "plain"])
def test_staged_batches_train_exactly_like_unstaged_ones(case, tiny_t5, tiny_model, pairs_file, tmp_path):
    """TorchTrainer.stage (the step's host side, run ahead in the loop's prefetch thread) changes
    where the layout is built, not what the step computes: the same losses and weights after two
    steps, and a staged step builds no layout of its own."""
    from test_trainer import cfg_for, trainer_and_batch

    from supergrep.train.data import pack_documents

    kw = {"t5-varlen": dict(packing=True, attn_implementation="varlen"),
          "t5-varlen-static": dict(packing=True, attn_implementation="varlen", pad_multiple=256, static_shapes=True),
          "bert-rows": dict(packing=True), "plain": {}}[case]
    model = tiny_model if case.startswith(("bert", "plain")) else tiny_t5
    runs = []
    for staged in (False, True):
        trainer, batch = trainer_and_batch(cfg_for(model, pairs_file, tmp_path, document_max_tokens=96, **kw))
        if kw.get("packing"):
            batch.packed = pack_documents(batch.d_ids, batch.d_mask, 96, 0)
        trainer.model.eval()
        if staged:
            batch = trainer.stage(batch)
            assert batch.staged is not None and (batch.staged[1] is not None) == bool(kw.get("packing"))
            trainer._joint_host = trainer._static_batch = None  # a staged step must not rebuild anything
        losses = [float(trainer.train_step(batch, 5e-3)[0]) for _ in range(2)]
        runs.append((losses, {n: p.detach().clone() for n, p in trainer.params.items()}))
    assert runs[1][0] == pytest.approx(runs[0][0], rel=1e-6)
    for n, p in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][n], p, rtol=1e-5, atol=1e-7, msg=n)
