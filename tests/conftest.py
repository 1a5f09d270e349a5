"""Shared fixtures: an isolated SUPERGREP_HOME for every test and tiny random models."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_sessionstart(session):
    """`make test` sets SUPERGREP_REQUIRE_MLX=1 where the dev extra installs MLX (Linux x86_64/
    aarch64, macOS arm64): there the MLX tests must run, not skip because MLX went missing."""
    if os.environ.get("SUPERGREP_REQUIRE_MLX") == "1":
        try:
            import mlx.core  # noqa: F401
        except ImportError as exc:
            raise pytest.UsageError(f"SUPERGREP_REQUIRE_MLX=1 but MLX does not import ({exc}); "
                                    f"pip install -e '.[dev]' installs mlx[cpu] on Linux") from None
    # Likewise Triton where the dev extra installs it (Linux x86_64): the varlen attention kernels'
    # interpreter test must run there.
    if os.environ.get("SUPERGREP_REQUIRE_TRITON") == "1":
        try:
            import triton  # noqa: F401
        except ImportError as exc:
            raise pytest.UsageError(f"SUPERGREP_REQUIRE_TRITON=1 but Triton does not import ({exc}); "
                                    f"pip install -e '.[dev]' installs it on Linux x86_64") from None
    # And the compressed store's C kernels where a compiler and Python's headers are installed.
    if os.environ.get("SUPERGREP_REQUIRE_NATIVE") == "1":
        try:
            from supergrep.index import _kernels  # noqa: F401
        except ImportError as exc:
            raise pytest.UsageError(f"SUPERGREP_REQUIRE_NATIVE=1 but supergrep.index._kernels does not import "
                                    f"({exc}); pip install -e . compiles it (setup.py)") from None


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
def tiny_bert_factory():
    """``make_tiny_bert(path, hidden=..., seed=...)`` for tests that need a second model."""
    return make_tiny_bert


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model):
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    return Encoder(resolve_model(tiny_model), device="cpu")


SAMPLE_FILES = {
    "app/models.py": '''"""User and session models."""

import hashlib


class User:
    """A registered user."""

    name: str
    email: str

    def check_password(self, password):
        """Compare a password against the stored hash."""
        return hashlib.sha256(password.encode()).hexdigest() == self.password_hash


def expire_sessions(sessions, now):
    """Drop every session older than its time to live."""
    return [s for s in sessions if s.created + s.ttl > now]
''',
    "app/retry.py": '''import time


def retry_with_backoff(fn, attempts=5, base=0.5):
    """Call fn until it succeeds, sleeping exponentially longer between tries."""
    for i in range(attempts):
        try:
            return fn()
        except Exception:
            time.sleep(base * 2 ** i)
    raise RuntimeError("gave up")
''',
    "docs/guide.md": "# Guide\n\nHow to configure the retry policy.\n\n## Sessions\n\nSessions expire.\n",
}


@pytest.fixture
def sample_project(tmp_path):
    root = tmp_path / "proj"
    for rel, text in SAMPLE_FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root
