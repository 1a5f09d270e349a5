"""How close a deployment form's token vectors are to the float PyTorch model's.

Both encoders embed the same texts (a sample of real code: supergrep's own source, cut into
chunks as the indexer cuts it, plus search-style queries), and every token vector is compared
by cosine (vectors are unit length, so a dot product). A form whose mean per-token cosine is at
least ``COMPATIBLE_COSINE`` is recorded as compatible with its source: indexes built by one can
be searched and updated by the other (``ModelSpec.compatible_fingerprints``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from supergrep.encoder.encoder import Encoder

# Mean per-token cosine at or above which two forms may share an index (measured: ONNX fp32
# 0.99999+, ONNX int8 0.993, torch int8 0.9998, int4 0.93 for MiniLM; docs/deployment.md).
COMPATIBLE_COSINE = 0.99

# Search-style texts. Not `make demo`'s queries: the demo indexes this source, and a chunk that
# holds a query verbatim outranks the code it describes.
QUERIES = (
    "retry a request with exponential backoff",
    "parse the config file and report the line of a bad key",
    "where are expired sessions removed",
    "merge two sorted lists into one",
    "read a gzip file line by line",
    "hash a password with a random salt",
    "escape html in a template variable",
    "sign a value with a secret key and check the signature",
)


@dataclass
class ParityReport:
    """Per-token cosine between two encoders over the same texts."""

    n_texts: int
    n_tokens: int
    mean_cos: float
    min_cos: float
    p01_cos: float  # 1st percentile: the worst 1% of tokens are below this
    max_abs: float  # largest absolute difference of one vector component

    @property
    def compatible(self) -> bool:
        return self.mean_cos >= COMPATIBLE_COSINE

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def describe(self) -> str:
        return (f"per-token cosine vs the float model over {self.n_tokens} tokens of {self.n_texts} texts: "
                f"mean {self.mean_cos:.5f}, 1st percentile {self.p01_cos:.5f}, min {self.min_cos:.5f}")


def sample_texts(n_documents: int = 48) -> list[str]:
    """Search-style queries and ``n_documents`` code chunks of supergrep's own source."""
    from supergrep.config import ChunkConfig
    from supergrep.corpus.chunk import chunk_source
    from supergrep.corpus.documents import document_text

    pkg = Path(__file__).resolve().parent.parent
    docs: list[str] = []
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg.parent).as_posix()
        for c in chunk_source(rel, f.read_text(encoding="utf-8"), "python", ChunkConfig()):
            docs.append(document_text(c))
    step = max(1, len(docs) // n_documents)
    return list(QUERIES) + docs[::step][:n_documents]


def compare(reference: Encoder, other: Encoder, texts: list[str] | None = None) -> ParityReport:
    """Embed ``texts`` (queries as queries, the rest as documents) with both encoders."""
    texts = texts or sample_texts()
    queries = [t for t in texts if t in QUERIES]
    documents = [t for t in texts if t not in QUERIES]
    ref = reference.encode_queries(queries) + reference.encode_documents(documents)
    got = other.encode_queries(queries) + other.encode_documents(documents)
    cos, diff = [], 0.0
    for a, b in zip(ref, got, strict=True):
        if a.shape != b.shape:
            raise ValueError(f"the two forms give different token counts ({a.shape} vs {b.shape}): "
                             f"their tokenizers or settings differ")
        cos.append(np.sum(a * b, axis=1))  # (n_tokens,): both unit rows
        diff = max(diff, float(np.abs(a - b).max()) if a.size else 0.0)
    c = np.concatenate(cos)
    return ParityReport(len(texts), int(c.size), float(c.mean()), float(c.min()),
                        float(np.percentile(c, 1)), diff)
