"""Shared fixtures: an isolated SUPERGREP_HOME for every test and tiny random models."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's indexes, config or caches."""
    home = tmp_path_factory.mktemp("sghome")
    monkeypatch.setenv("SUPERGREP_HOME", str(home))
    monkeypatch.delenv("SUPERGREP_MODEL", raising=False)
    monkeypatch.delenv("SUPERGREP_INDEX_DIR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    yield home


def make_tiny_bert(path: Path, hidden: int = 32, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT with the real MiniLM WordPiece tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    from supergrep.encoder.spec import default_model_dir

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=2 * hidden, max_position_embeddings=512)
    BertModel(cfg).save_pretrained(path, safe_serialization=True)
    src = default_model_dir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, path / name)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))
