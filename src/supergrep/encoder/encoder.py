"""The Encoder: a model spec + tokenizer + backend, turning text into token vectors."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import numpy as np

from supergrep.arrays import cast
from supergrep.backends import load_backend
from supergrep.encoder.spec import EncoderSettings, ModelSpec, resolve_model
from supergrep.encoder.tokenize import Role, RoleTokenizer, _one_line

log = logging.getLogger(__name__)


def length_batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Group item indices into batches of similar length under a padded-token budget.

    Items are sorted longest first, so each batch pads to its first item's length and
    ``rows * first_length <= batch_tokens`` (a single over-long item still gets a batch).

    >>> length_batches([5, 100, 7, 98], batch_tokens=200)
    [[1, 3], [2, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def flat_batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Item indices in batches of at most ``batch_tokens`` real tokens laid end to end (no
    padding), longest first so that a batch's attention, sized by its longest item, wastes
    little; empty items are left out; an over-long item still gets a batch of its own.

    >>> flat_batches([5, 100, 0, 98, 7], batch_tokens=200)
    [[1, 3], [4, 0]]
    """
    n = np.asarray(lengths, dtype=np.int64)
    # A stable sort, longest first, then each batch cut where its running total would pass
    # batch_tokens: one binary search per batch, not a Python step per item (the sort with a key
    # and the loop took ~0.1 s per 100K documents while the GPU waited for its first call).
    order = np.argsort(-n, kind="stable")
    sizes = n[order]
    live = int(np.count_nonzero(sizes))  # the empty items sort last and are left out
    cum = np.concatenate([[0], np.cumsum(sizes[:live])])
    batches: list[list[int]] = []
    start = 0
    while start < live:
        end = max(start + 1, int(np.searchsorted(cum, cum[start] + batch_tokens, side="right")) - 1)
        batches.append(order[start:end].tolist())
        start = end
    return batches


def skip_array(tok: RoleTokenizer, role: Role) -> np.ndarray | None:
    """The token ids whose vectors a ``role`` input drops (the documents' skiplist), or None."""
    if role != "document" or not tok.skip_ids:
        return None
    return np.fromiter(tok.skip_ids, dtype=np.int64, count=len(tok.skip_ids))


def padded_batch(ids: list, role: Role, settings: EncoderSettings,
                 tok: RoleTokenizer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One padded forward's inputs for token-id sequences of one role, and which of its output
    rows are the vectors an index keeps (what every padded encode and `supergrep shrink`'s
    training read).

    Returns:
        input_ids (B, L) int64; attention_mask (B, L) int64, 1 = attended; keep (B, L) bool,
        True = a stored vector (real tokens, expansion tokens included, skiplist tokens not).
    """
    expand = role == "query" and settings.query_expansion
    # With query expansion every query is padded to query_max_tokens with the mask token
    # (ColBERT): the expansion tokens get vectors too, and the model attends to them only
    # with attend_to_expansion_tokens.
    lengths = [settings.query_max_tokens if expand else len(x) for x in ids]
    width = max(lengths)
    input_ids = np.full((len(ids), width), tok.mask_id if expand else tok.pad_id, dtype=np.int64)  # (B, L)
    mask = np.zeros((len(ids), width), dtype=np.int64)  # (B, L)
    keep = np.zeros((len(ids), width), dtype=bool)  # (B, L)
    for row, x in enumerate(ids):
        input_ids[row, :len(x)] = x
        mask[row, :len(x)] = 1
        keep[row, :lengths[row]] = True
    if expand and settings.attend_to_expansion_tokens:
        mask[:] = 1
    skip = skip_array(tok, role)
    if skip is not None:
        keep &= ~np.isin(input_ids, skip)
    return input_ids, mask, keep


class Encoder:
    """Turns text into L2-normalised token vectors, one matrix per input.

    Args:
        spec: The model (``resolve_model(path)``); None loads the default model.
        backend: Backend name: "torch", "mlx", "onnx" (`supergrep export onnx` directories), or
            "auto" (torch if installed, else mlx).
        device: "auto" (CUDA > MPS > CPU), "cpu", "cuda", "cuda:N" or "mps".
        batch_tokens: Padded-token budget of one forward pass; 0 picks one for the device
            (8,192 on CPU; 131,072 on CUDA/MPS, where the H200 measured 3.2x the throughput of
            8,192: benchmarks/results/gpu-encode-h200.json).
        threads: CPU threads (0: the framework's default).
    """

    def __init__(self, spec: ModelSpec | None = None, backend: str = "auto", device: str = "auto",
                 batch_tokens: int = 0, threads: int = 0):
        self.spec = spec or resolve_model(None)
        self.tokenizer = RoleTokenizer(self.spec)
        self.backend = load_backend(backend, self.spec, device=device, threads=threads)
        self.batch_tokens = batch_tokens or (8192 if self.backend.device == "cpu" else 131072)
        self._fingerprint: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dim(self) -> int:
        return self.spec.dim

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self.spec.fingerprint()
        return self._fingerprint

    @property
    def compatible_fingerprints(self) -> list[str]:
        """Its own fingerprint first, then the source model's when an export or quantization
        matched it (indexes of either may be searched and updated with this encoder)."""
        return self.spec.compatible_fingerprints(self.fingerprint)

    def count_tokens(self, texts: list[str], role: Role = "document") -> list[int]:
        return self.tokenizer.count(texts, role)

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        """Each query -> (n_tokens, dim) float32, unit rows (expansion tokens included)."""
        return self._encode(texts, "query")

    def encode_documents(self, texts: list[str], progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """Each document -> (n_tokens, dim) float32, unit rows (skiplist tokens removed).

        Args:
            progress: Called with the number of documents finished after each batch.
        """
        return self._encode(texts, "document", progress)

    def _encode(self, texts: list[str], role: Role, progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        if not texts:
            return []
        return self.encode_ids(self.tokenizer(texts, role), role, progress)

    def encode_ids(self, ids: list, role: Role, progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """``_encode`` after tokenisation: ``ids`` one token-id sequence per input (with the role's
        special tokens; ``bench encode`` feeds synthetic ones)."""
        settings = self.spec.settings
        expand = role == "query" and settings.query_expansion
        lengths = [settings.query_max_tokens if expand else len(x) for x in ids]
        skip = skip_array(self.tokenizer, role)
        out: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(ids)
        if role == "document" and getattr(self.backend, "varlen", False):
            try:
                self._encode_flat(ids, skip, out, progress)
                return out
            except _FirstBatchFailed as failed:  # e.g. a GPU the attention kernels cannot run on
                log.warning("encoding without padding failed on the first batch (%s); using padded batches",
                            failed.reason)
                self.backend.varlen = False
        for batch in length_batches(lengths, self.batch_tokens):
            input_ids, mask, keep = padded_batch([ids[i] for i in batch], role, settings, self.tokenizer)
            vecs = self.backend.forward(input_ids, mask)  # (B, L, dim)
            for row, i in enumerate(batch):
                out[i] = np.ascontiguousarray(vecs[row][keep[row]], dtype=np.float32)
            if progress is not None:
                progress(len(batch))
        return out

    def _encode_flat(self, ids: list, skip: np.ndarray | None, out: list[np.ndarray],
                     progress: Callable[[int], None] | None) -> None:
        """Documents through the backend's flat forward: laid end to end with no padding, up to
        ``batch_tokens`` real tokens a call, longest first (a call's attention is sized by its
        longest document). With ``submit_flat`` the next batch is queued on the device before the
        host splits the previous one (on an H100 the split of 131K tokens takes about half as
        long as their forward)."""
        lengths = [len(x) for x in ids]
        batches = flat_batches(lengths, self.batch_tokens)
        submit = getattr(self.backend, "submit_flat", None)
        pending = None
        for k, batch in enumerate(batches):
            flat_ids = np.concatenate([np.asarray(ids[i], dtype=np.int64) for i in batch])
            lens = np.array([lengths[i] for i in batch])
            with _first_batch(k):
                if submit is None:
                    job = (batch, flat_ids, _Done(self.backend.forward_flat(flat_ids, lens)))
                else:
                    job = (batch, flat_ids, submit(flat_ids, lens))
            if pending is not None:
                # the first batch's device errors surface in its result(), before any progress; it
                # is not awaited before the second is queued (the GPU would idle for that launch)
                with _first_batch(k - 1):
                    self._split(*pending, lengths, skip, out, progress)
            pending = job
        if pending is not None:
            with _first_batch(len(batches) - 1):
                self._split(*pending, lengths, skip, out, progress)
        done = sum(len(b) for b in batches)
        if progress is not None and done < len(ids):
            progress(len(ids) - done)  # empty documents: nothing to encode

    @staticmethod
    def _split(batch, flat_ids, job, lengths, skip, out, progress) -> None:
        # one float32 array for the whole batch, each document a view of it: one allocation
        # instead of one per document (at 384-d those were most of the host's time)
        sizes = np.fromiter((lengths[i] for i in batch), dtype=np.int64, count=len(batch))
        keep = None if skip is None else ~np.isin(flat_ids, skip)
        if keep is not None and not keep.all():
            # the skipped tokens' rows dropped in one pass, not per document (a batch of short
            # documents holds thousands: 40,000 documents of 1-4 tokens, 102 -> 27 ms here); the
            # mask's gather is the copy out of the reused buffer, so no second copy of the batch
            sizes = np.add.reduceat(keep, np.cumsum(sizes) - sizes, dtype=np.int64)
            vecs = job.result()[keep]
            if vecs.dtype != np.float32:
                vecs = cast(vecs, np.float32)
        else:
            vecs = cast(job.result(), np.float32)  # (N, dim), always a copy: the buffer is reused
        ends = np.cumsum(sizes).tolist()
        for i, a, b in zip(batch, [0, *ends[:-1]], ends, strict=True):
            out[i] = vecs[a:b]
        if progress is not None:
            progress(len(batch))


@contextlib.contextmanager
def _first_batch(k: int):
    """Errors of batch ``k`` == 0 (not out of memory) become ``_FirstBatchFailed``: the caller falls
    back to padded batches; later ones propagate."""
    try:
        yield
    except (RuntimeError, ImportError, NotImplementedError) as exc:
        if k > 0 or "out of memory" in str(exc).lower():
            raise
        raise _FirstBatchFailed(_one_line(exc)) from exc


class _FirstBatchFailed(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Done:
    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value
