"""Quantization-aware training: the forward runs the weights `supergrep quantize` will deploy,
gradients still reach the adapter (straight-through), and the config refuses bad settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_trainer import cfg_for, trainer_and_batch

from supergrep.backends.quant import QuantParams, dequantize, quantize
from supergrep.backends.torch_lora import LoRALinear, lora_modules
from supergrep.backends.torch_quant import fake_quantize
from supergrep.errors import ConfigError
from supergrep.train.loop import run_training


@pytest.mark.parametrize("bits", [4, 8])
def test_fake_quantize_is_the_deployed_grid(bits):
    """torch fake-quant == NumPy quantize -> dequantize (the on-disk format), float16 scales aside."""
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    p = QuantParams(bits, 16, True)
    deployed = dequantize(quantize(w, p), w.shape, p)
    faked = fake_quantize(torch.from_numpy(w), bits, 16).numpy()
    step = np.abs(w).max() / (2 ** (bits - 1) - 1)
    # the scales differ only by float16 rounding (~1e-3 relative): values agree to a fraction of a step
    assert np.abs(deployed - faked).max() < 0.02 * step * (2 ** (bits - 1))
    levels = faked[0, :16] / (np.abs(w[0, :16]).max() / (2 ** (bits - 1) - 1))  # one group, one scale
    assert np.allclose(levels, np.round(levels), atol=1e-4)  # on the integer grid


def test_qat_forward_uses_the_rounded_merged_weight_and_gradients_reach_lora(tiny_model, pairs_file, tmp_path):
    cfg = cfg_for(tiny_model, pairs_file, tmp_path, qat_bits=4, qat_group_size=16)
    trainer, batch = trainer_and_batch(cfg)
    for _ in range(2):  # B starts at 0: A gets a gradient from the second step on
        trainer.train_step(batch, 1e-2)
    layers = lora_modules(trainer.model)
    assert layers and all(m.weight_fake_quant is not None for m in layers.values())
    layer: LoRALinear = next(iter(layers.values()))
    x = torch.randn(3, layer.base.in_features)
    merged = layer.base.weight + layer.scale * (layer.lora_B @ layer.lora_A)
    with torch.no_grad():
        want = torch.nn.functional.linear(x, fake_quantize(merged, 4, 16), layer.base.bias)
        assert torch.allclose(layer(x), want, atol=1e-6)
        plain = torch.nn.functional.linear(x, merged, layer.base.bias)
        assert not torch.allclose(layer(x), plain, atol=1e-4)  # rounding is really applied
    for p in trainer.params.values():
        p.grad = None
    q_ids, q_mask, d_ids, d_mask = trainer._to_device(batch)
    loss, _ = trainer._loss(trainer.encode(q_ids, q_mask), q_mask, trainer.encode(d_ids, d_mask), d_mask)
    loss.backward()
    grads = {n: p.grad for n, p in trainer.params.items() if "lora_" in n}
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values())
    # weights no adapter touches (embeddings, here) were rounded once, in place, to the grid
    emb = trainer.model.embeddings.word_embeddings.weight
    assert torch.equal(emb, fake_quantize(emb, 4, 16))


def test_a_qat_checkpoint_quantized_to_the_same_grid_gives_the_trained_vectors(tiny_model, pairs_file, tmp_path):
    """QAT trains exactly what `supergrep quantize --bits 4 --group-size G` deploys."""
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model
    from supergrep.export.quantized import quantize_model

    cfg = cfg_for(tiny_model, pairs_file, tmp_path, qat_bits=4, qat_group_size=16, max_steps=4, lr=2e-2,
                  save_every=4)
    run_training(cfg, show_progress=False)
    ck = tmp_path / "run" / "step_0000004"
    q4 = quantize_model(ck, tmp_path / "q4", bits=4, group_size=16, check=False).output
    texts = ["def add(a, b):\n    return a + b", "parse the command line arguments"]
    got = Encoder(resolve_model(q4), device="cpu").encode_documents(texts)

    from safetensors.numpy import load_file

    trainer, _ = trainer_and_batch(cfg)
    trainer.load_state(load_file(str(ck / "trainer_state.safetensors")), {})
    trainer.model.eval()
    enc = Encoder(resolve_model(q4), device="cpu")
    ids = enc.tokenizer(texts, "document")
    width = max(map(len, ids))
    arr = np.zeros((2, width), np.int64)
    mask = np.zeros((2, width), bool)
    for i, row in enumerate(ids):
        arr[i, : len(row)] = row
        mask[i, : len(row)] = True
    with torch.no_grad():
        ref = trainer.encode(torch.from_numpy(arr), torch.from_numpy(mask)).numpy()
    for i in range(2):
        cos = np.sum(got[i] * ref[i, : len(ids[i])], axis=1)
        assert cos.min() > 0.999, cos.min()  # only the float16 storage of the scales differs


@pytest.mark.parametrize("kw, needle", [
    ({"qat_bits": 3}, "qat_bits must be 0, 4 or 8"),
    ({"qat_bits": 4, "qat_group_size": 7}, "qat_group_size"),
    ({"qat_bits": 4, "lora_dropout": 0.1}, "lora_dropout 0"),
])
def test_bad_qat_settings_are_config_errors(tiny_model, pairs_file, tmp_path, kw, needle):
    with pytest.raises(ConfigError, match=needle):
        cfg_for(tiny_model, pairs_file, tmp_path, **kw)
