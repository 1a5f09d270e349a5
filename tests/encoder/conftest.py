"""Fixtures for the encoder tests: a lazily built zoo of tiny models in every layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tiny_models import (
    make_bert,
    make_mpnet,
    make_pylate,
    make_roberta,
    make_sentence_transformers,
    make_supergrep,
    make_t5,
)

# name -> builder(path, zoo). Each model is built once per session, on first use.
BUILDERS: dict[str, Callable] = {
    "bert": lambda p, z: make_bert(p),
    "mpnet": lambda p, z: make_mpnet(p),
    "roberta": lambda p, z: make_roberta(p),
    # google/xtr-base-en's layout: root T5 checkpoint + spiece tokenizer + 2_Dense
    "t5-full-json-bin": lambda p, z: make_t5(p, arch="full", tokenizer="json", dense="bin"),
    "t5-t5model-json-safetensors": lambda p, z: make_t5(p, arch="t5model", dense="safetensors"),
    "t5-encoder-spiece-bin": lambda p, z: make_t5(p, arch="encoder", tokenizer="spiece", dense="bin"),
    "t5-encoder-json-safetensors": lambda p, z: make_t5(p, arch="encoder", dense="safetensors"),
    "t5-modules": lambda p, z: make_t5(p, arch="encoder", dense="bin", modules=True),
    "st": lambda p, z: make_sentence_transformers(p, prompts={"query": "query: ", "document": "passage: "}),
    "pylate": lambda p, z: make_pylate(p),
    "supergrep": lambda p, z: make_supergrep(
        p, base=f"../{z.path('bert').name}", projection_out=8,
        settings={"query_prefix": "find: ", "document_max_tokens": 24, "skiplist": [",", "."]}),
}


class Zoo:
    def __init__(self, root: Path):
        self.root = root
        self._paths: dict[str, Path] = {}
        self._encoders: dict[str, object] = {}

    def path(self, name: str) -> Path:
        if name not in self._paths:
            self._paths[name] = BUILDERS[name](self.root / name, self)
        return self._paths[name]

    def encoder(self, name: str):
        """One shared Encoder per model (batch_tokens small, to exercise batching)."""
        from supergrep.encoder import Encoder, resolve_model

        if name not in self._encoders:
            self._encoders[name] = Encoder(resolve_model(self.path(name)), device="cpu", batch_tokens=256)
        return self._encoders[name]


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> Zoo:
    return Zoo(tmp_path_factory.mktemp("zoo"))
