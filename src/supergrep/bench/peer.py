"""The peer: sentence-transformers' MultiVectorEncoder trained with its multi-vector
multiple-negatives ranking loss, on the same model, LoRA config, batches and lengths as ours.

Built the way a sentence-transformers user builds a ColBERT-style model from a plain encoder
(Transformer -> Dense(hidden -> 128, no bias) -> MultiVectorMask -> Normalize), LoRA added with
``model.add_adapter(peft.LoraConfig(...))`` on the same target modules, the projection trained
too (as ours is). The loss is ``MultiVectorMultipleNegativesRankingLoss`` with mean-over-query
MaxSim (``mean_colbert_scores``) and ``scale = 1 / temperature``: exactly our InfoNCE term (the
bench sets our margin weight to 0), so the two losses after the same steps are comparable.
Steps are a plain loop (features -> loss -> backward -> clip -> AdamW), bf16 autocast when the
variant asks for it, as ``bf16=True`` in its trainer does; no Trainer/dataloader overhead is
charged to it, so the comparison favours the peer.

Both start from the same model: the peer's Dense head and every LoRA A get the numbers our
trainer draws for the same seed (``projection_init``, ``lora_a_init``; LoRA B is zero in both),
so the losses after N steps compare the training loops, not two random initialisations (with
torch's default Dense init the peer's loss after 25 steps differed from ours by more than the
step-to-step noise, docs/performance.md).

Absent sentence-transformers (>= 6) or peft, ``available()`` says why and the bench records the
variant as skipped.
"""

from __future__ import annotations

import contextlib


def available() -> str | None:
    """None when the peer can run, else the reason it cannot."""
    try:
        import peft  # noqa: F401
        import sentence_transformers as st
    except ImportError as exc:
        return f"not installed ({exc.name}); pip install 'sentence-transformers>=6' peft"
    major = int(st.__version__.split(".")[0])
    if major < 6:
        return f"sentence-transformers {st.__version__} has no MultiVectorEncoder (needs >= 6)"
    return None


def _modules():
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.losses import (
        MultiVectorMultipleNegativesRankingLoss,
    )
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from sentence_transformers.multi_vector_encoder.scoring import mean_colbert_scores

    try:
        from sentence_transformers.base.modules import Normalize, Transformer
        from sentence_transformers.base.modules.dense import Dense
    except ImportError:  # older 6.x layout
        from sentence_transformers.models import Dense, Normalize, Transformer
    return (MultiVectorEncoder, MultiVectorMultipleNegativesRankingLoss, MultiVectorMask, mean_colbert_scores,
            Normalize, Transformer, Dense)


class PeerTrainer:
    """One optimizer step per ``train_step(batch, lr)``, like ``TorchTrainer``."""

    def __init__(self, wl, variant, device: str, lr: float, temperature: float, seed: int = 0):
        why = available()  # first: peft and sentence-transformers are optional (the bench extra)
        if why:
            raise RuntimeError(f"peer unavailable: {why}")
        import torch
        from peft import LoraConfig
        from torch import nn

        (MVE, Loss, Mask, mean_colbert_scores, Normalize, Transformer, Dense) = _modules()
        self.device = torch.device(device)
        precision = variant.precision
        if precision == "auto":
            precision = "bf16" if self.device.type == "cuda" else "fp32"
        self.amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        try:
            transformer = Transformer(str(wl.model_dir), model_kwargs={"local_files_only": True},
                                      processor_kwargs={"local_files_only": True},
                                      config_kwargs={"local_files_only": True})
        except TypeError:  # another 6.x signature; the path is local and HF_HUB_OFFLINE is set
            transformer = Transformer(str(wl.model_dir))
        self.unpadded = bool(getattr(transformer, "can_flatten_inputs", False))
        hidden = transformer.get_embedding_dimension()
        dense = Dense(in_features=hidden, out_features=wl.projection_dim, bias=False,
                      activation_function=nn.Identity(), module_input_name="token_embeddings")
        self.model = MVE(modules=[transformer, dense, Mask(), Normalize(module_input_name="token_embeddings")],
                         device=str(self.device))
        targets = list(wl.lora_targets) or _bert_targets()
        self.model.add_adapter(LoraConfig(r=wl.lora_r, lora_alpha=wl.lora_alpha, lora_dropout=0.0,
                                          target_modules=targets))
        for p in dense.parameters():
            p.requires_grad_(True)
        inner = getattr(transformer, "auto_model", None) or getattr(transformer, "model", None)
        self.aligned = align_init(inner, dense, wl.projection_dim, seed)
        self.model.to(self.device)
        self.model.train()
        self.loss = Loss(self.model, scale=1.0 / temperature, similarity_fct=mean_colbert_scores)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.01, fused=self.device.type == "cuda")
        self.attn = getattr(getattr(inner, "config", None), "_attn_implementation", None)

    def describe(self) -> dict:
        import sentence_transformers

        return {"peer": f"sentence-transformers {sentence_transformers.__version__} MultiVectorEncoder + "
                        f"MultiVectorMultipleNegativesRankingLoss", "peer_attn": self.attn,
                "peer_unpadded": self.unpadded,  # flash-attention varlen, when flash_attention_2 is there
                "peer_trainable": sum(p.numel() for p in self.params),
                "peer_init": f"ours (seed-aligned head + {self.aligned} LoRA A)"}

    def train_step(self, batch, lr: float):
        import torch

        for g in self.optimizer.param_groups:
            g["lr"] = lr

        def feats(ids, mask, task):
            return {"input_ids": torch.from_numpy(ids).to(self.device, non_blocking=True),
                    "attention_mask": torch.from_numpy(mask.astype("int64")).to(self.device, non_blocking=True),
                    "task": task}

        q = feats(batch.q_ids, batch.q_mask, "query")
        d = feats(batch.d_ids, batch.d_mask, "document")
        ctx = (torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None
               else contextlib.nullcontext())
        with ctx:
            loss = self.loss([q, d])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), None

    @staticmethod
    def to_host(values):
        import torch

        return torch.stack([v.float() for v in values]).cpu().tolist() if values else []


def align_init(inner, dense, projection_dim: int, seed: int) -> int:
    """Give the peer's head and LoRA A matrices our trainer's initial values for ``seed``;
    returns how many LoRA layers were set (every one PEFT added, or it raises)."""
    import torch

    from supergrep.backends.adapters import lora_a_init, projection_init

    linear = getattr(dense, "linear", None) or next(m for m in dense.modules() if isinstance(m, torch.nn.Linear))
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(projection_init(seed, projection_dim, linear.in_features)))
        n = 0
        for name, module in inner.named_modules():
            a = getattr(module, "lora_A", None)
            if not isinstance(a, torch.nn.ModuleDict) or "default" not in a:
                continue
            w = a["default"].weight  # (r, in_features)
            w.copy_(torch.from_numpy(lora_a_init(seed, name, w.shape[0], w.shape[1])))
            if module.lora_B["default"].weight.abs().max() != 0:
                raise RuntimeError(f"peer LoRA B of {name} does not start at zero")
            n += 1
    if n == 0:
        raise RuntimeError("the peer has no LoRA layers to align")
    return n


def _bert_targets() -> list[str]:
    from supergrep.backends.adapters import LoRAConfig

    return list(LoRAConfig(16, 32, 0.0, ()).targets_for("bert"))
