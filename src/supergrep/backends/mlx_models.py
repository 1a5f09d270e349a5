"""The encoders in ``mlx.nn``: BERT/RoBERTa/XLM-R, MPNet and the T5 encoder, plus Dense heads.

Each model is built from the same Hugging Face directory the PyTorch side loads (``config.json``
+ ``model.safetensors``; no conversion step) and its modules carry Hugging Face's names
(``encoder.layer.0.attention.self.query``, ``encoder.block.0.layer.0.SelfAttention.q``), so LoRA
adapters have the same PEFT keys in both frameworks and a checkpoint moves between them as is.

``model(input_ids, attention_mask) -> (batch, length, hidden)`` token states, like
``transformers``' ``last_hidden_state``. Attention goes through
``mx.fast.scaled_dot_product_attention``; only in training with attention dropout (which the
fused kernel cannot apply) the scores are materialised. Dropout follows each
``config.json`` (active in ``train()`` mode: an ``mlx.nn.Module`` starts in training mode, so
inference callers call ``model.eval()``).

Checked against ``transformers`` 5.x ``modeling_bert.py``, ``modeling_roberta.py``,
``modeling_mpnet.py`` and ``modeling_t5.py``; ``tests/encoder/test_mlx_layouts.py`` compares
token vectors of every layout to torch's (max abs error <= 1e-5, correlation >= 0.9999).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from supergrep.errors import ModelError

if TYPE_CHECKING:
    from supergrep.encoder.spec import DenseSpec, ModelSpec

BERT_TYPES = ("bert", "roberta", "xlm-roberta", "camembert")
T5_TYPES = ("t5", "mt5")
SUPPORTED = (*BERT_TYPES, "mpnet", *T5_TYPES)
# The name of the base model inside task checkpoints (BertForMaskedLM keeps "bert.<...>").
_PREFIXES = {"bert": ("bert",), "roberta": ("roberta",), "xlm-roberta": ("roberta",),
             "camembert": ("roberta",), "mpnet": ("mpnet",), "t5": (), "mt5": ()}


def _gelu_tanh(x: mx.array) -> mx.array:
    # transformers' "gelu_new" / "gelu_pytorch_tanh" (T5 v1.1's gated-gelu uses it).
    return 0.5 * x * (1.0 + mx.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


# config.json hidden_act / Dense activation_function -> the function.
ACTIVATIONS = {
    "gelu": nn.gelu, "gelu_new": _gelu_tanh, "gelu_pytorch_tanh": _gelu_tanh, "gelu_fast": _gelu_tanh,
    "relu": nn.relu, "silu": nn.silu, "swish": nn.silu, "tanh": mx.tanh,
    # sentence-transformers Dense activations (torch.nn class names)
    "Tanh": mx.tanh, "ReLU": nn.relu, "GELU": nn.gelu, "Sigmoid": mx.sigmoid, "SiLU": nn.silu,
    "ELU": nn.elu, "LeakyReLU": functools.partial(nn.leaky_relu, negative_slope=0.01),
    "Softplus": nn.softplus, "Mish": nn.mish, "Hardtanh": nn.hard_tanh, "Softsign": nn.softsign,
}


def _activation(name: str, where: str):
    fn = ACTIVATIONS.get(name)
    if fn is None:
        raise ModelError(f"{where}: activation '{name}' is not implemented by the MLX backend; use --backend torch")
    return fn


def additive_mask(mask: mx.array, dtype: mx.Dtype) -> mx.array:
    """(batch, length) 1/True = attend -> (batch, 1, 1, length): 0 or the dtype's minimum."""
    return mx.where(mask.astype(mx.bool_), mx.array(0.0, dtype), mx.array(mx.finfo(dtype).min, dtype))[:, None, None, :]


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array,
              dropout: float, training: bool, fused: bool = True) -> mx.array:
    """softmax(scale * q k^T + mask) v over (batch, heads, length, head_dim) inputs.

    The fused kernel, unless attention dropout must be applied (training) or ``fused`` is off;
    the explicit path computes the softmax in float32, as the fused one does.
    """
    if fused and not (training and dropout > 0):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    scores = (q * scale) @ k.swapaxes(-1, -2) + mask  # (B, H, L, L)
    probs = mx.softmax(scores.astype(mx.float32), axis=-1).astype(q.dtype)
    if training and dropout > 0:
        keep = mx.random.bernoulli(1.0 - dropout, probs.shape)
        probs = mx.where(keep, probs / (1.0 - dropout), mx.array(0.0, probs.dtype))
    return probs @ v


def _split_heads(x: mx.array, heads: int) -> mx.array:
    b, n, _ = x.shape
    return x.reshape(b, n, heads, -1).transpose(0, 2, 1, 3)  # (B, H, L, head_dim)


def _merge_heads(x: mx.array) -> mx.array:
    b, h, n, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)  # (B, L, hidden)


class Encoder(nn.Module):
    """Base class: the options every encoder shares (fused attention, activation recompute)."""

    fused_attention = True
    recompute = False  # gradient checkpointing: recompute each layer in the backward pass

    def run_layer(self, layer: nn.Module, x: mx.array, *args) -> mx.array:
        if not (self.recompute and self.training):
            return layer(x, *args)

        def inner(params, x, *args):
            layer.update(params)
            return layer(x, *args)

        return mx.checkpoint(inner)(layer.trainable_parameters(), x, *args)


# -- BERT / RoBERTa / XLM-R --------------------------------------------------------------------


@dataclass(frozen=True)
class BertArgs:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0
    roberta_positions: bool = False  # position ids count from pad_token_id + 1, padding keeps pad_token_id


class BertEmbeddings(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        self.word_embeddings = nn.Embedding(a.vocab_size, a.hidden_size)
        self.position_embeddings = nn.Embedding(a.max_position_embeddings, a.hidden_size)
        if a.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(a.type_vocab_size, a.hidden_size)
        self.LayerNorm = nn.LayerNorm(a.hidden_size, eps=a.layer_norm_eps)
        self.dropout = nn.Dropout(a.hidden_dropout_prob)
        self._pad, self._roberta, self._types = a.pad_token_id, a.roberta_positions, a.type_vocab_size

    def __call__(self, input_ids: mx.array) -> mx.array:
        n = input_ids.shape[1]
        if self._roberta:  # transformers' create_position_ids_from_input_ids
            real = (input_ids != self._pad).astype(mx.int32)
            positions = mx.cumsum(real, axis=1) * real + self._pad  # (B, L)
        else:
            positions = mx.arange(n)[None, :]  # (1, L)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)  # (B, L, H)
        if self._types:
            x = x + self.token_type_embeddings.weight[0]  # token_type_ids are all 0
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        h = a.hidden_size
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.heads = a.num_attention_heads
        self.p = a.attention_probs_dropout_prob

    def __call__(self, x: mx.array, mask: mx.array, fused: bool) -> mx.array:
        q, k, v = (_split_heads(f(x), self.heads) for f in (self.query, self.key, self.value))
        out = attention(q, k, v, 1.0 / math.sqrt(q.shape[-1]), mask, self.p, self.training, fused)
        return _merge_heads(out)


class BertSelfOutput(nn.Module):
    """dense -> dropout -> LayerNorm(+ residual); also BERT's FF output (``BertOutput``)."""

    def __init__(self, d_in: int, d_out: int, eps: float, p: float):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)
        self.dropout = nn.Dropout(p)

    def __call__(self, x: mx.array, residual: mx.array) -> mx.array:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        self.self = BertSelfAttention(a)
        self.output = BertSelfOutput(a.hidden_size, a.hidden_size, a.layer_norm_eps, a.hidden_dropout_prob)

    def __call__(self, x: mx.array, mask: mx.array, fused: bool) -> mx.array:
        return self.output(self.self(x, mask, fused), x)


class Intermediate(nn.Module):
    def __init__(self, d_in: int, d_out: int, act: str):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self._act = _activation(act, "config.json hidden_act")

    def __call__(self, x: mx.array) -> mx.array:
        return self._act(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        self.attention = BertAttention(a)
        self.intermediate = Intermediate(a.hidden_size, a.intermediate_size, a.hidden_act)
        self.output = BertSelfOutput(a.intermediate_size, a.hidden_size, a.layer_norm_eps, a.hidden_dropout_prob)

    def __call__(self, x: mx.array, mask: mx.array, fused: bool) -> mx.array:
        h = self.attention(x, mask, fused)
        return self.output(self.intermediate(h), h)


class BertStack(nn.Module):
    def __init__(self, layer_factory, n: int):
        super().__init__()
        self.layer = [layer_factory() for _ in range(n)]


class BertModel(Encoder):
    """BertModel / RobertaModel / XLMRobertaModel without the pooler."""

    def __init__(self, a: BertArgs):
        super().__init__()
        self.embeddings = BertEmbeddings(a)
        self.encoder = BertStack(lambda: BertLayer(a), a.num_hidden_layers)

    def __call__(self, input_ids: mx.array, attention_mask: mx.array) -> mx.array:
        x = self.embeddings(input_ids)  # (B, L, H)
        mask = additive_mask(attention_mask, x.dtype)  # (B, 1, 1, L)
        for layer in self.encoder.layer:
            x = self.run_layer(layer, x, mask, self.fused_attention)
        return x


# -- MPNet -------------------------------------------------------------------------------------


def relative_buckets(q_len: int, k_len: int, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5/MPNet relative position buckets (q_len, k_len) int64, computed as transformers does
    (the log in float32), in NumPy: a pure function of the lengths.

    >>> relative_buckets(1, 4, True, 8, 16).tolist()   # distance 0..3 to the right
    [[0, 5, 6, 6]]
    """
    rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]  # memory - query position
    out = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0).astype(np.int64) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (np.log(np.maximum(rel, 1).astype(np.float32) / np.float32(max_exact))
                  / np.float32(math.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact))
    large = np.minimum(max_exact + scaled.astype(np.int64), num_buckets - 1)
    return out + np.where(rel < max_exact, rel, large)


@functools.lru_cache(maxsize=64)
def _buckets(q_len: int, k_len: int, bidirectional: bool, num_buckets: int, max_distance: int) -> mx.array:
    return mx.array(relative_buckets(q_len, k_len, bidirectional, num_buckets, max_distance).astype(np.int32))


class MPNetSelfAttention(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        h = a.hidden_size
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.heads = a.num_attention_heads
        self.p = a.attention_probs_dropout_prob

    def __call__(self, x: mx.array, mask: mx.array, fused: bool) -> mx.array:
        q, k, v = (_split_heads(f(x), self.heads) for f in (self.q, self.k, self.v))
        out = attention(q, k, v, 1.0 / math.sqrt(q.shape[-1]), mask, self.p, self.training, fused)
        return self.o(_merge_heads(out))


class MPNetAttention(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        self.attn = MPNetSelfAttention(a)
        self.LayerNorm = nn.LayerNorm(a.hidden_size, eps=a.layer_norm_eps)
        self.dropout = nn.Dropout(a.hidden_dropout_prob)

    def __call__(self, x: mx.array, mask: mx.array, fused: bool) -> mx.array:
        return self.LayerNorm(self.dropout(self.attn(x, mask, fused)) + x)


class MPNetLayer(nn.Module):
    def __init__(self, a: BertArgs):
        super().__init__()
        self.attention = MPNetAttention(a)
        self.intermediate = Intermediate(a.hidden_size, a.intermediate_size, a.hidden_act)
        self.output = BertSelfOutput(a.intermediate_size, a.hidden_size, a.layer_norm_eps, a.hidden_dropout_prob)

    def __call__(self, x: mx.array, mask: mx.array, fused: bool) -> mx.array:
        h = self.attention(x, mask, fused)
        return self.output(self.intermediate(h), h)


class MPNetStack(nn.Module):
    def __init__(self, a: BertArgs, num_buckets: int):
        super().__init__()
        self.layer = [MPNetLayer(a) for _ in range(a.num_hidden_layers)]
        self.relative_attention_bias = nn.Embedding(num_buckets, a.num_attention_heads)


class MPNetModel(Encoder):
    """MPNetModel without the pooler: RoBERTa-style positions plus a relative position bias
    shared by every layer (32 buckets, max distance 128, fixed in transformers' code)."""

    def __init__(self, a: BertArgs, num_buckets: int = 32):
        super().__init__()
        emb = BertArgs(**{**a.__dict__, "type_vocab_size": 0, "pad_token_id": 1, "roberta_positions": True})
        self.embeddings = BertEmbeddings(emb)
        self.encoder = MPNetStack(a, num_buckets)
        self._buckets = num_buckets

    def __call__(self, input_ids: mx.array, attention_mask: mx.array) -> mx.array:
        x = self.embeddings(input_ids)  # (B, L, H)
        n = x.shape[1]
        bias = self.encoder.relative_attention_bias(_buckets(n, n, True, self._buckets, 128))  # (L, L, heads)
        mask = bias.transpose(2, 0, 1)[None].astype(x.dtype) + additive_mask(attention_mask, x.dtype)  # (B, H, L, L)
        for layer in self.encoder.layer:
            x = self.run_layer(layer, x, mask, self.fused_attention)
        return x


# -- T5 encoder ----------------------------------------------------------------------------


@dataclass(frozen=True)
class T5Args:
    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_heads: int
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    gated: bool = True
    act: str = "gelu_new"


class T5Attention(nn.Module):
    def __init__(self, a: T5Args, has_bias: bool):
        super().__init__()
        inner = a.num_heads * a.d_kv
        self.q = nn.Linear(a.d_model, inner, bias=False)
        self.k = nn.Linear(a.d_model, inner, bias=False)
        self.v = nn.Linear(a.d_model, inner, bias=False)
        self.o = nn.Linear(inner, a.d_model, bias=False)
        if has_bias:
            self.relative_attention_bias = nn.Embedding(a.relative_attention_num_buckets, a.num_heads)
        self.heads, self.p = a.num_heads, a.dropout_rate

    def __call__(self, x: mx.array, bias: mx.array, fused: bool) -> mx.array:
        q, k, v = (_split_heads(f(x), self.heads) for f in (self.q, self.k, self.v))
        out = attention(q, k, v, 1.0, bias, self.p, self.training, fused)  # T5 does not scale q.k
        return self.o(_merge_heads(out))


class T5LayerSelfAttention(nn.Module):
    def __init__(self, a: T5Args, has_bias: bool):
        super().__init__()
        self.SelfAttention = T5Attention(a, has_bias)
        self.layer_norm = nn.RMSNorm(a.d_model, eps=a.layer_norm_epsilon)
        self.dropout = nn.Dropout(a.dropout_rate)

    def __call__(self, x: mx.array, bias: mx.array, fused: bool) -> mx.array:
        return x + self.dropout(self.SelfAttention(self.layer_norm(x), bias, fused))


class T5DenseActDense(nn.Module):
    """``wo(dropout(act(wi_0 x) * wi_1 x))`` (gated, T5 v1.1 / XTR) or ``wo(dropout(act(wi x)))``."""

    def __init__(self, a: T5Args):
        super().__init__()
        if a.gated:
            self.wi_0 = nn.Linear(a.d_model, a.d_ff, bias=False)
            self.wi_1 = nn.Linear(a.d_model, a.d_ff, bias=False)
        else:
            self.wi = nn.Linear(a.d_model, a.d_ff, bias=False)
        self.wo = nn.Linear(a.d_ff, a.d_model, bias=False)
        self.dropout = nn.Dropout(a.dropout_rate)
        self._gated, self._act = a.gated, _activation(a.act, "config.json feed_forward_proj")

    def __call__(self, x: mx.array) -> mx.array:
        h = self._act(self.wi_0(x)) * self.wi_1(x) if self._gated else self._act(self.wi(x))  # (B, L, d_ff)
        return self.wo(self.dropout(h))


class T5LayerFF(nn.Module):
    def __init__(self, a: T5Args):
        super().__init__()
        self.DenseReluDense = T5DenseActDense(a)
        self.layer_norm = nn.RMSNorm(a.d_model, eps=a.layer_norm_epsilon)
        self.dropout = nn.Dropout(a.dropout_rate)

    def __call__(self, x: mx.array) -> mx.array:
        return x + self.dropout(self.DenseReluDense(self.layer_norm(x)))


class T5Block(nn.Module):
    def __init__(self, a: T5Args, has_bias: bool):
        super().__init__()
        self.layer = [T5LayerSelfAttention(a, has_bias), T5LayerFF(a)]

    def __call__(self, x: mx.array, bias: mx.array, fused: bool) -> mx.array:
        return self.layer[1](self.layer[0](x, bias, fused))


class T5Stack(nn.Module):
    def __init__(self, a: T5Args):
        super().__init__()
        self.block = [T5Block(a, i == 0) for i in range(a.num_layers)]
        self.final_layer_norm = nn.RMSNorm(a.d_model, eps=a.layer_norm_epsilon)
        self.dropout = nn.Dropout(a.dropout_rate)


class T5EncoderModel(Encoder):
    """T5EncoderModel: shared embedding, pre-norm blocks with RMS layer norms, one relative
    position bias (block 0's) added to every layer's scores, final norm."""

    def __init__(self, a: T5Args):
        super().__init__()
        self.shared = nn.Embedding(a.vocab_size, a.d_model)
        self.encoder = T5Stack(a)
        self.a = a

    def __call__(self, input_ids: mx.array, attention_mask: mx.array) -> mx.array:
        stack = self.encoder
        x = stack.dropout(self.shared(input_ids))  # (B, L, d_model)
        n = x.shape[1]
        table = stack.block[0].layer[0].SelfAttention.relative_attention_bias
        buckets = _buckets(n, n, True, self.a.relative_attention_num_buckets, self.a.relative_attention_max_distance)
        bias = table(buckets).transpose(2, 0, 1)[None].astype(x.dtype)  # (1, H, L, L)
        bias = bias + additive_mask(attention_mask, x.dtype)  # (B, H, L, L)
        for block in stack.block:
            x = self.run_layer(block, x, bias, self.fused_attention)
        return stack.dropout(stack.final_layer_norm(x))


# -- building and loading ----------------------------------------------------------------------


def set_model_dropout(model: nn.Module, p: float) -> int:
    """Every dropout of ``model`` (the ``nn.Dropout`` layers and the attention modules' own
    probability) at ``p``; at 0 no mask is drawn (``nn.Dropout`` returns its input when its keep
    probability is 1, ``attention`` takes the fused kernel). Call it before LoRA wraps the
    projections, so a LoRA branch's own dropout is left alone. Returns how many places changed."""
    n = 0
    for _, m in model.named_modules():
        if isinstance(m, nn.Dropout):
            m._p_1 = 1.0 - p  # MLX's Dropout keeps the keep probability
            n += 1
        elif isinstance(m, (BertSelfAttention, MPNetSelfAttention, T5Attention)):
            m.p = p
            n += 1
    return n


def read_config(path: Path) -> dict:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path / 'config.json'}: cannot be read ({exc})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{path / 'config.json'}: expected a JSON object")
    return cfg


def build_model(cfg: dict, where: str = "config.json") -> Encoder:
    """An encoder with random weights for a ``config.json`` (arrays are lazy: cheap to build)."""
    mt = str(cfg.get("model_type", ""))
    if mt not in SUPPORTED:
        raise ModelError(f"{where}: the MLX backend implements {', '.join(SUPPORTED)}, not '{mt}'; use --backend torch")
    try:
        if mt in T5_TYPES:
            proj = str(cfg.get("feed_forward_proj", "relu"))
            gated = proj.startswith("gated-")
            act = proj.split("-", 1)[1] if gated else proj
            act = "gelu_new" if act == "gelu" and gated else act  # transformers maps gated-gelu to gelu_new
            return T5EncoderModel(T5Args(
                vocab_size=int(cfg["vocab_size"]), d_model=int(cfg["d_model"]), d_kv=int(cfg["d_kv"]),
                d_ff=int(cfg["d_ff"]), num_layers=int(cfg["num_layers"]), num_heads=int(cfg["num_heads"]),
                relative_attention_num_buckets=int(cfg.get("relative_attention_num_buckets", 32)),
                relative_attention_max_distance=int(cfg.get("relative_attention_max_distance", 128)),
                dropout_rate=float(cfg.get("dropout_rate", 0.1)),
                layer_norm_epsilon=float(cfg.get("layer_norm_epsilon", 1e-6)), gated=gated, act=act))
        pos_type = cfg.get("position_embedding_type", "absolute")
        if pos_type not in (None, "absolute"):
            raise ModelError(f"{where}: position_embedding_type '{pos_type}' is not implemented by the MLX backend")
        a = BertArgs(
            vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]), num_attention_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]), hidden_act=str(cfg.get("hidden_act", "gelu")),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 512)),
            type_vocab_size=int(cfg.get("type_vocab_size", 2)),
            hidden_dropout_prob=float(cfg.get("hidden_dropout_prob", 0.1)),
            attention_probs_dropout_prob=float(cfg.get("attention_probs_dropout_prob", 0.1)),
            pad_token_id=int(cfg.get("pad_token_id") or (1 if mt != "bert" else 0)),
            roberta_positions=mt != "bert")
        if mt == "mpnet":
            return MPNetModel(a, int(cfg.get("relative_attention_num_buckets", 32)))
        return BertModel(a)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{where}: missing or malformed setting ({exc}) for a {mt} model") from None


def _weight_files(directory: Path) -> list[Path]:
    safetensors = sorted(directory.glob("model*.safetensors"))
    if safetensors:
        return safetensors
    bins = sorted(directory.glob("pytorch_model*.bin"))
    if bins:
        return bins
    raise ModelError(f"{directory}: no model.safetensors (or pytorch_model.bin) found; the model directory is incomplete")


def read_weights(files: list[Path]) -> dict[str, mx.array]:
    """Tensors by name from safetensors files (read by MLX itself, bfloat16 included), or from
    legacy ``pytorch_model.bin`` files through torch when it is installed."""
    out: dict[str, mx.array] = {}
    for f in files:
        if f.suffix == ".safetensors":
            try:
                out.update(mx.load(str(f)))
            except (RuntimeError, ValueError) as exc:
                raise ModelError(f"{f}: cannot be read as safetensors ({exc}); copy the model again") from None
            continue
        try:
            from supergrep.backends.torch_backend import load_state_dict
        except ImportError:
            raise ModelError(f"{f} is a PyTorch pickle, which the MLX backend reads only through torch; install "
                             f"torch or save the weights as model.safetensors") from None
        for k, t in load_state_dict(f).items():
            out[k] = mx.array(t.float().numpy()).astype(getattr(mx, str(t.dtype).removeprefix("torch."), mx.float32))
    return out


def _source_key(name: str, have: dict, model_type: str) -> str | None:
    """The checkpoint key holding model parameter ``name`` (task-model prefixes, T5's tied
    embedding, pre-2019 LayerNorm gamma/beta names)."""
    cands = [name, *(f"{p}.{name}" for p in _PREFIXES.get(model_type, ()))]
    if model_type in T5_TYPES and name == "shared.weight":
        cands.append("encoder.embed_tokens.weight")
    if name.endswith("LayerNorm.weight") or name.endswith("LayerNorm.bias"):
        legacy = name[: -len("weight")] + "gamma" if name.endswith("weight") else name[: -len("bias")] + "beta"
        cands += [legacy, *(f"{p}.{legacy}" for p in _PREFIXES.get(model_type, ()))]
    return next((c for c in cands if c in have), None)


def load_weights(model: nn.Module, weights: dict[str, mx.array], model_type: str, where: str,
                 dtype: mx.Dtype = mx.float32) -> None:
    """Fill every parameter of ``model`` from ``weights`` (names mapped by ``_source_key``),
    cast to ``dtype``; one error lists every missing or mis-shaped tensor."""
    from mlx.utils import tree_flatten, tree_unflatten

    missing, bad, got = [], [], []
    for name, param in tree_flatten(model.parameters()):
        key = _source_key(name, weights, model_type)
        if key is None:
            missing.append(name)
        elif tuple(weights[key].shape) != tuple(param.shape):
            bad.append(f"{name} {tuple(weights[key].shape)} vs {tuple(param.shape)}")
        else:
            got.append((name, weights[key].astype(dtype)))
    if missing or bad:
        raise ModelError(f"{where}: the weights do not match config.json ({len(missing)} missing, e.g. "
                         f"{missing[:2]}; {len(bad)} of another shape, e.g. {bad[:2]}); the checkpoint is for "
                         f"another architecture or incomplete")
    model.update(tree_unflatten(got))


def load_transformer(spec: ModelSpec, dtype: mx.Dtype = mx.float32) -> Encoder:
    """The base encoder of ``spec`` with its Hugging Face weights (no adapter); a layer-dropped
    model (`supergrep shrink`) is built with its kept layers, their weights from its file."""
    path = spec.transformer_path
    cfg, weights = read_config(path), read_weights(_weight_files(path))
    if spec.layers is not None:
        cfg = {**cfg, **{k: len(spec.layers.keep) for k in ("num_hidden_layers", "num_layers") if k in cfg}}
        weights = kept_layer_weights(weights, spec.layers.keep)
        weights.update(read_weights([spec.layers.file]))  # the trained layers, already renumbered
    model = build_model(cfg, str(path / "config.json"))
    load_weights(model, weights, spec.model_type, str(path), dtype)
    return model


_LAYER_KEY = re.compile(r"(?:^|\.)encoder\.(?:layer|block)\.(\d+)\.")


def kept_layer_weights(weights: dict, keep: tuple[int, ...]) -> dict:
    """``weights`` with only the ``keep`` encoder layers, renumbered 0, 1, ...; T5's relative
    position bias (block 0's) goes to the new first block, as torch's ``keep_layers`` does.

    >>> sorted(kept_layer_weights({"bert.encoder.layer.2.w": 2, "encoder.layer.1.w": 1, "emb": 0}, (2,)))
    ['bert.encoder.layer.0.w', 'emb']
    """
    new_index = {old: new for new, old in enumerate(keep)}
    out = {}
    for key, value in weights.items():
        m = _LAYER_KEY.search(key)
        if m is None:
            out[key] = value
            continue
        old = int(m.group(1))
        new = 0 if old == 0 and "relative_attention_bias" in key else new_index.get(old)
        if new is not None:
            out[key[: m.start(1)] + str(new) + key[m.end(1):]] = value
    return out


def load_encoder(spec: ModelSpec, dtype: mx.Dtype = mx.float32) -> Encoder:
    """The base encoder with the spec's LoRA adapter (if any) folded in (in float32), in ``dtype``."""
    if spec.adapter is None:
        return load_transformer(spec, dtype)
    from supergrep.backends.adapters import ADAPTER_WEIGHTS, LoRAConfig
    from supergrep.backends.mlx_lora import fold_adapter_weights

    model = load_transformer(spec, mx.float32)
    state = mx.load(str(spec.adapter / ADAPTER_WEIGHTS))
    fold_adapter_weights(model, LoRAConfig.read(spec.adapter), state)
    if dtype != mx.float32:
        model.set_dtype(dtype)
    return model


# -- Dense projections (sentence-transformers / PyLate layout) ---------------------------------


class DenseLayer(nn.Module):
    """activation(linear(x)) [+ x or residual(x)], as ``torch_backend.DenseLayer``."""

    def __init__(self, in_f: int, out_f: int, bias: bool, activation: str = "identity", residual: str = ""):
        super().__init__()
        self.linear = nn.Linear(in_f, out_f, bias=bias)
        if residual == "linear":
            self.residual = nn.Linear(in_f, out_f, bias=False)
        self._act = None if activation == "identity" else _activation(activation, "Dense activation_function")
        self._identity_residual = residual == "identity"

    def __call__(self, x: mx.array) -> mx.array:
        y = self.linear(x)
        if self._act is not None:
            y = self._act(y)
        if self._identity_residual:
            y = y + x
        elif "residual" in self:
            y = y + self.residual(x)
        return y


def build_dense(d: DenseSpec, dtype: mx.Dtype = mx.float32) -> DenseLayer:
    """A Dense layer from its directory; shapes checked against its config.json."""
    state = read_weights([d.weight_file()])
    residual = ("identity" if d.in_features == d.out_features else "linear") if d.residual else ""
    layer = DenseLayer(d.in_features, d.out_features, d.bias, d.activation, residual)
    want = {"linear.weight": (d.out_features, d.in_features)}
    if d.bias:
        want["linear.bias"] = (d.out_features,)
    if residual == "linear":
        want["residual.weight"] = (d.out_features, d.in_features)
    got = []
    for name, shape in want.items():
        t = state.get(name, state.get(name.removeprefix("linear.")))
        if t is None or tuple(t.shape) != shape:
            have = "nothing" if t is None else f"shape {tuple(t.shape)}"
            raise ModelError(f"{d.path}: Dense {name} has {have}, expected {shape} (its config.json says "
                             f"in_features={d.in_features}, out_features={d.out_features}, bias={d.bias})")
        got.append((name, t.astype(dtype)))
    from mlx.utils import tree_unflatten

    layer.update(tree_unflatten(got))
    return layer


def linear_paths(model: nn.Module) -> list[str]:
    """Dotted paths of every ``nn.Linear`` (the names LoRA targets are matched against)."""
    return sorted(name for name, m in model.named_modules() if isinstance(m, nn.Linear))
