"""FLOP counts of a LoRA training step and of encoding, and the measured peak they are read against.

Model FLOPs count the useful (non-padding) tokens only, so padding, recomputation (gradient
checkpointing) and packing's wasted attention never raise MFU. A multiply-add is 2 FLOPs.

Per useful token of a sequence of length ``L``, for an encoder with ``n_layers`` layers of
attention width ``d_attn`` (heads x head dim):

    forward  (encode):  2 * N_linear                    every Linear the token passes through
                      + 4 * n_layers * d_attn * L        QK^T and AV

    training (fwd+bwd): 4 * N_frozen                    forward + input gradient of frozen weights
                      + 6 * N_trainable                  LoRA A/B and the projection also get weight gradients
                      + 12 * n_layers * d_attn * L       attention: forward + 2x in backward

and per batch, MaxSim between every query and every document (forward + both input gradients):

                        6 * dim * (sum of query tokens) * (sum of document tokens)

``N_frozen`` counts the frozen Linear weights (embeddings and BERT's pooler excluded: the pooler
runs once per sequence and its output is unused), ``N_trainable`` the LoRA A and B matrices
(each adapted layer costs 2 * r * (in + out) per token forward) and the projection head. The
plain-loop anchor in docs/performance.md uses the simpler ``4 * non-embedding params`` per token;
ours is higher by the LoRA and attention terms (about 5% for xtr-base at L = 190).

MFU = model FLOPs / seconds / peak, where peak is the best rate of a large GEMM measured at the
start of the run (bf16 8192^3 on CUDA; fp32 on CPU, which has no fast bf16 here).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ModelFlops:
    """What the FLOP formulas need to know about one model."""

    n_frozen: int  # frozen Linear weights (in * out summed), embeddings and pooler excluded
    n_trainable: int  # LoRA A + B weights and the trainable projection
    n_layers: int
    d_attn: int
    dim: int  # output vector width (MaxSim)

    def to_dict(self) -> dict:
        return asdict(self)

    def forward_per_token(self, length: int) -> float:
        return 2.0 * (self.n_frozen + self.n_trainable) + 4.0 * self.n_layers * self.d_attn * length

    def train_per_token(self, length: int) -> float:
        return 4.0 * self.n_frozen + 6.0 * self.n_trainable + 12.0 * self.n_layers * self.d_attn * length

    def train_step(self, q_lengths: Sequence[int], d_lengths: Sequence[int]) -> float:
        """Model FLOPs of one training step over these useful sequence lengths.

        >>> m = ModelFlops(n_frozen=100, n_trainable=10, n_layers=2, d_attn=4, dim=8)
        >>> m.train_step([3], [5])  # 3*(460+288) + 5*(460+480) + 6*8*3*5
        7664.0
        """
        seq = sum(n * self.train_per_token(n) for n in list(q_lengths) + list(d_lengths))
        maxsim = 6.0 * self.dim * sum(q_lengths) * sum(d_lengths)
        return float(seq + maxsim)

    def encode(self, lengths: Sequence[int]) -> float:
        return float(sum(n * self.forward_per_token(n) for n in lengths))


def model_flops(model, proj, dim: int) -> ModelFlops:
    """Count a (LoRA-wrapped) Hugging Face encoder and its projection head."""
    from torch import nn

    from supergrep.backends.torch_lora import LoRALinear

    frozen = trainable = 0
    inside_lora: set[int] = set()
    for mod in model.modules():
        if isinstance(mod, LoRALinear):
            inside_lora.add(id(mod.base))
            frozen += mod.base.in_features * mod.base.out_features
            trainable += mod.lora_A.numel() + mod.lora_B.numel()
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and id(mod) not in inside_lora and not name.startswith("pooler"):
            frozen += mod.in_features * mod.out_features
    for mod in proj.modules():
        if isinstance(mod, nn.Linear):
            n = mod.in_features * mod.out_features
            if mod.weight.requires_grad:
                trainable += n
            else:
                frozen += n
    n_layers, d_attn = attention_shape(model.config)
    return ModelFlops(frozen, trainable, n_layers, d_attn, dim)


def attention_shape(config) -> tuple[int, int]:
    """(layers, attention width) from a transformers config (BERT-style or T5)."""
    if getattr(config, "model_type", "") in ("t5", "mt5", "umt5") or hasattr(config, "d_kv"):
        return int(config.num_layers), int(config.num_heads * config.d_kv)
    return int(config.num_hidden_layers), int(config.hidden_size)


def measure_peak(device: str, n: int | None = None, seconds: float = 1.0) -> dict:
    """The best GEMM rate (FLOP/s) this device reaches: bf16 on CUDA, fp32 elsewhere."""
    import torch

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    n = n or (8192 if dev.type == "cuda" else 1024)
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(3):
        a @ b
    sync()
    best = float("inf")
    reps = 10 if dev.type == "cuda" else 1
    deadline = time.perf_counter() + seconds
    tries = 0
    while tries < 3 or time.perf_counter() < deadline:
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync()
        best = min(best, (time.perf_counter() - t) / reps)
        tries += 1
        if tries >= 50:
            break
    flops = 2.0 * n**3 / best
    return {"flops_per_s": flops, "tflops": flops / 1e12, "dtype": str(dtype).removeprefix("torch."), "n": n,
            "device": str(dev)}
