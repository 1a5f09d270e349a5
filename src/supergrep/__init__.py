"""supergrep: semantic code search with multi-vector embeddings fused with BM25.

Public API (imported lazily, so ``import supergrep`` stays cheap)::

    from supergrep import Encoder, Index, Searcher, update_index, resolve_model
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "Encoder": "supergrep.encoder.encoder",
    "resolve_model": "supergrep.encoder.spec",
    "Index": "supergrep.index.project",
    "update_index": "supergrep.index.indexer",
    "Searcher": "supergrep.index.search",
    "Hit": "supergrep.index.search",
    "chunk_source": "supergrep.corpus.chunk",
    "walk": "supergrep.corpus.walk",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'supergrep' has no attribute {name!r}")
