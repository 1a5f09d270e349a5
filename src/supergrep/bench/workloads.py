"""Benchmark workloads: a model, a batch size, and lengths drawn from real mined code.

- ``xtr-base``: google/xtr-base-en's architecture (T5 encoder: d_model 768, 12 layers, 12 heads x
  64, d_ff 2048 gated-GELU, vocab 32128), random init (speed does not depend on the weights),
  projection 768 -> 128, LoRA r16/alpha32 on q,k,v,o,wi_0,wi_1,wo, batch 48, queries of 32
  tokens, documents up to 512 tokens. Written once under the bench's work directory; it carries
  the default model's WordPiece tokenizer (all ids < 30522 < 32128) so `profile` and `train` can
  read text with it (T5's sentencepiece model is not available offline).
- ``minilm``: the default model (all-MiniLM-L6-v2, or ``--model-path``), same LoRA/projection/
  batch/query settings, documents up to its 512 positions.
- ``minilm-random``: all-MiniLM-L6-v2's shape (BERT, 6 layers, 384 wide, 12 heads, FFN 1536,
  vocab 30522), random init: its speed without its 45 MB of weights (the GPU machine's calls
  carry at most 64 MiB with the tree; ``--model-path`` gives only the tokenizer).
- ``xtr-tiny`` / ``minilm-tiny``: the same shapes at toy size, for tests.

Document lengths: ``doc_lengths.json`` beside this file, a histogram of the token lengths of
50,000 real (docstring -> code) documents mined by `supergrep mine` (8 languages), made by
``benchmarks/doc_lengths.py``; a workload draws from it, capped at its ``doc_cap``.

Synthetic pairs are learnable, so the loss after N steps means something: a query's 32 tokens
are drawn from its own document's tokens (exact-match retrieval, which MaxSim can learn).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from supergrep.errors import UsageError
from supergrep.train.data import Batch, bucket_batches, pack_documents

LENGTHS_FILE = Path(__file__).with_name("doc_lengths.json")
T5_TARGETS = ("q", "k", "v", "o", "wi_0", "wi_1", "wo")


@dataclass
class Workload:
    name: str
    model_dir: Path
    batch_size: int = 48
    query_len: int = 32
    doc_cap: int = 512
    vocab: int = 30522
    lora_r: int = 16
    lora_alpha: float = 32.0
    projection_dim: int = 128
    lora_targets: tuple[str, ...] = ()
    note: str = ""
    extra: dict = field(default_factory=dict)

    def describe(self) -> dict:
        return {"name": self.name, "model_dir": str(self.model_dir), "batch_size": self.batch_size,
                "query_len": self.query_len, "doc_cap": self.doc_cap, "lora_r": self.lora_r,
                "lora_alpha": self.lora_alpha, "projection_dim": self.projection_dim,
                "lora_targets": list(self.lora_targets) or "per-architecture default", "note": self.note}


@lru_cache(maxsize=1)
def length_histogram() -> tuple[np.ndarray, dict]:
    data = json.loads(LENGTHS_FILE.read_text())
    counts = np.asarray(data["counts"], dtype=np.float64)
    meta = {k: v for k, v in data.items() if k != "counts"}
    return counts, meta


def sample_lengths(n: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` document lengths from the mined-code histogram, capped at ``cap`` (at least 4)."""
    counts, _ = length_histogram()
    p = counts / counts.sum()
    lengths = rng.choice(len(counts), size=n, p=p)
    return np.clip(lengths, 4, cap)


def length_stats(cap: int) -> dict:
    counts, meta = length_histogram()
    lengths = np.minimum(np.arange(len(counts)), cap)
    p = counts / counts.sum()
    mean = float((lengths * p).sum())
    return {"mean": mean, "source": meta.get("source"), "tokenizer": meta.get("tokenizer"), "cap": cap}


def _copy_tokenizer(path: Path, tokenizer_from: Path | None) -> None:
    from supergrep.encoder.spec import default_model_dir

    src = Path(tokenizer_from) if tokenizer_from else default_model_dir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy(src / name, path / name)


def make_t5_encoder(path: Path, d_model: int = 768, layers: int = 12, heads: int = 12, d_kv: int = 64,
                    d_ff: int = 2048, vocab: int = 32128, seed: int = 0, tokenizer_from: Path | None = None) -> Path:
    """A randomly initialised T5 encoder in xtr-base-en's layout (no 2_Dense: the trainer adds the
    projection), with the default model's (or ``tokenizer_from``'s) tokenizer files. Reused when
    already there."""
    import torch
    from transformers import T5Config, T5EncoderModel

    if (path / "model.safetensors").is_file() and (path / "bench_done").is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=vocab, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=layers, num_heads=heads,
                   feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                   relative_attention_max_distance=128, decoder_start_token_id=0, pad_token_id=0,
                   is_encoder_decoder=False, use_cache=False)
    T5EncoderModel(cfg).save_pretrained(path, safe_serialization=True)
    _copy_tokenizer(path, tokenizer_from)
    (path / "bench_done").write_text("ok")
    return path


def make_bert_encoder(path: Path, hidden: int = 32, layers: int = 2, heads: int = 2, seed: int = 0,
                      tokenizer_from: Path | None = None) -> Path:
    """A small random BERT with the default model's tokenizer (the MiniLM shape at toy size)."""
    import torch
    from transformers import BertConfig, BertModel

    if (path / "bench_done").is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=4 * hidden, max_position_embeddings=512)).save_pretrained(path)
    _copy_tokenizer(path, tokenizer_from)
    (path / "bench_done").write_text("ok")
    return path


def get_workload(name: str, work_dir: Path, model_path: str | None = None, batch_size: int | None = None,
                 doc_cap: int | None = None) -> Workload:
    """A named workload (xtr-base, minilm, minilm-random, xtr-tiny, minilm-tiny) or a model directory.

    ``model_path`` is the model of ``minilm`` (default: the packaged one); the synthetic
    workloads take their tokenizer files from it (they never tokenise in the bench itself)."""
    from supergrep.encoder.spec import default_model_dir

    work_dir = Path(work_dir)
    tok = Path(model_path) if model_path else None
    if name == "xtr-base":
        wl = Workload("xtr-base", make_t5_encoder(work_dir / "xtr-base", tokenizer_from=tok), vocab=32128,
                      lora_targets=T5_TARGETS, note="T5 encoder d768 x12, d_ff 2048 gated-GELU, vocab 32128, random init")
    elif name == "xtr-tiny":
        wl = Workload("xtr-tiny", make_t5_encoder(work_dir / "xtr-tiny", d_model=32, layers=2, heads=2, d_kv=16,
                                                  d_ff=64, tokenizer_from=tok), batch_size=8, query_len=8,
                      doc_cap=96, lora_r=4, lora_alpha=8, projection_dim=16, lora_targets=T5_TARGETS,
                      note="xtr-base's shape at toy size")
    elif name == "minilm-tiny":
        wl = Workload("minilm-tiny", make_bert_encoder(work_dir / "minilm-tiny", tokenizer_from=tok), batch_size=8,
                      query_len=8, doc_cap=96, lora_r=4, lora_alpha=8, projection_dim=16,
                      note="a 2-layer 32-wide BERT")
    elif name == "minilm-random":
        wl = Workload("minilm-random", make_bert_encoder(work_dir / "minilm-random", hidden=384, layers=6, heads=12,
                                                         tokenizer_from=tok),
                      note="all-MiniLM-L6-v2's shape (6 layers, 384 wide), random init")
    elif name == "minilm":
        wl = Workload("minilm", Path(model_path) if model_path else default_model_dir(),
                      note="all-MiniLM-L6-v2 (6 layers, 384 wide)")
    else:
        path = Path(model_path or name)
        if not path.is_dir():
            raise UsageError(f"unknown workload '{name}': use xtr-base, minilm, minilm-random, xtr-tiny, minilm-tiny "
                                    f"or a model directory")
        wl = Workload(path.name, path)
    if batch_size:
        wl.batch_size = batch_size
    if doc_cap:
        wl.doc_cap = doc_cap
    return wl


@dataclass
class Pool:
    """The synthetic pairs a run draws its batches from (the same for every variant)."""

    queries: list[np.ndarray]
    docs: list[np.ndarray]

    @property
    def doc_lengths(self) -> np.ndarray:
        return np.array([len(d) for d in self.docs])


def make_pool(wl: Workload, n_pairs: int, seed: int = 0) -> Pool:
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(n_pairs, wl.doc_cap, rng)
    lo = 1000 if wl.vocab > 2000 else 5
    docs = [rng.integers(lo, wl.vocab, size=int(n)) for n in lengths]
    queries = [d[rng.integers(0, len(d), size=wl.query_len)] for d in docs]
    return Pool(queries, docs)


def _pad(rows: list[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = True
    return ids, mask


def make_batches(pool: Pool, wl: Workload, batch_size: int, mode: str, packing: bool, seed: int = 0,
                 pad_multiple: int = 8) -> list[Batch]:
    """Batches of the pool, in one of three orders/paddings:

    - ``padmax``: random batches padded to ``doc_cap`` (the naive reference loop);
    - ``random``: random batches padded to their longest document;
    - ``bucketed``: the trainer's length-bucketed order (``bucket_batches``), padded to the longest.
    ``packing`` adds the packed rows (``Batch.packed``) of capacity ``doc_cap``.
    """
    n = len(pool.docs) // batch_size * batch_size
    if mode == "bucketed":
        order = bucket_batches(pool.doc_lengths[:n], batch_size, seed, 0)
    elif mode in ("random", "padmax"):
        perm = np.random.default_rng([seed, 7]).permutation(n)
        order = [perm[i : i + batch_size] for i in range(0, n, batch_size)]
    else:
        raise ValueError(f"unknown batching '{mode}': padmax, random or bucketed")
    out = []
    for idx, rows in enumerate(order):
        docs = [pool.docs[int(i)] for i in rows]
        longest = max(len(d) for d in docs)
        width = wl.doc_cap if mode == "padmax" else -(-longest // pad_multiple) * pad_multiple
        d_ids, d_mask = _pad(docs, width)
        q_ids, q_mask = _pad([pool.queries[int(i)] for i in rows], wl.query_len)
        packed = pack_documents(d_ids, d_mask, wl.doc_cap, 0, pad_multiple) if packing else None
        out.append(Batch(q_ids, q_mask, d_ids, d_mask, 0, idx, packed))
    return out
