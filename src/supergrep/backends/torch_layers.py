"""Layer-dropped encoders (`supergrep shrink`): keep some of a model's encoder layers and load
their trained weights over the base's.

A student keeps the base's embeddings (and T5's relative position bias, and any Dense
projection) as they are; what it trains and stores is only its encoder layers (and T5's final
layer norm, which sits between them and the projection). ``layer_parameter_names`` is the one
definition of that set: `shrink` trains and writes it, the loader demands it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from supergrep.errors import ModelError

SUPPORTED = "BERT-family encoders (bert, roberta, xlm-roberta, mpnet, electra, ...) and T5 encoders"


def encoder_layers(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """(parameter-name prefix, the ModuleList of layers) of a transformers encoder."""
    enc = getattr(model, "encoder", None)
    for attr in ("layer", "block"):  # BERT family / T5 stack
        layers = getattr(enc, attr, None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return f"encoder.{attr}", layers
    raise ModelError(f"{type(model).__name__} has no encoder.layer or encoder.block list; layer dropping "
                     f"supports {SUPPORTED}")


def keep_layers(model: torch.nn.Module, keep: tuple[int, ...] | list[int]) -> torch.nn.Module:
    """Drop every encoder layer of ``model`` not in ``keep`` (in place; returns ``model``)."""
    prefix, layers = encoder_layers(model)
    kept = [layers[i] for i in keep]
    if prefix == "encoder.block" and keep[0] != 0:
        # T5: only block 0 holds the relative position bias (the others reuse its output), so
        # the new first block takes it over, frozen and shared like the embeddings.
        first, new = layers[0].layer[0].SelfAttention, kept[0].layer[0].SelfAttention
        new.relative_attention_bias = first.relative_attention_bias
        new.has_relative_attention_bias = True
    setattr(model.encoder, prefix.split(".")[1], torch.nn.ModuleList(kept))
    for key in ("num_hidden_layers", "num_layers"):
        if hasattr(model.config, key):
            setattr(model.config, key, len(kept))
    return model


def layer_parameter_names(model: torch.nn.Module) -> list[str]:
    """The parameters a student trains and its directory stores: its encoder layers (without
    T5's shared position bias) and T5's final layer norm."""
    prefix, _ = encoder_layers(model)
    return [n for n, _ in model.named_parameters()
            if (n.startswith(prefix + ".") and "relative_attention_bias" not in n)
            or n.startswith("encoder.final_layer_norm.")]


def load_layer_weights(model: torch.nn.Module, file: Path) -> None:
    """Put the stored layer weights (``layer_parameter_names``, any float dtype) into ``model``,
    whose layers were already dropped; one error for anything missing or extra."""
    from safetensors.torch import load_file

    try:
        state = load_file(str(file))
    except Exception as exc:  # noqa: BLE001 - safetensors raises several kinds for a bad file
        raise ModelError(f"{file}: cannot be read as safetensors ({exc}); run `supergrep shrink` again") from None
    params = dict(model.named_parameters())
    want = set(layer_parameter_names(model))
    missing = sorted(want - set(state))
    extra = sorted(set(state) - want)
    bad = [k for k in want & set(state) if tuple(state[k].shape) != tuple(params[k].shape)]
    if missing or extra or bad:
        what = (f"{len(missing)} missing (e.g. {missing[0]})" if missing else
                f"{len(extra)} unexpected (e.g. {extra[0]})" if extra else f"{bad[0]} has another shape")
        raise ModelError(f"{file} does not fit the base's kept layers ({what}); the base model changed "
                         f"or the file is damaged: run `supergrep shrink` again")
    with torch.no_grad():
        for k in want:
            params[k].copy_(state[k].to(params[k].dtype))
