"""Role-aware tokenisation: prefixes, truncation, query expansion and the document skiplist.

Uses the model directory's own Hugging Face tokenizer; no framework tensors are made. Texts are
tokenised without special tokens straight through the ``tokenizers`` backend (one Rust call per
batch, no BatchEncoding, no attention masks or offsets), and the special tokens, the role prefix
and the truncation are applied here. For a single sequence this is exactly what
``tokenizer(text, truncation=True, max_length=n)`` gives, at a fraction of the per-call cost.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Literal

import numpy as np

from supergrep.encoder.spec import ModelSpec
from supergrep.errors import ModelError

Role = Literal["query", "document"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

# A prefix written like a special token ("[Q]", "[unused0]", "<extra_id_0>") is used as one
# token when the vocabulary has it, even if it is not an "added" token.
_TOKEN_LIKE = re.compile(r"\[[^\s\[\]]+\]|<[^\s<>]+>")
# count() keeps the ids it made, up to this many tokens (int32: 4 bytes each), so that the
# __call__ that follows it for the same chunks (the indexer: count, split, encode) does not
# tokenise them again.
CACHE_TOKENS = 2_000_000


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, without terminal escapes, cut to ``limit``."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _auto_tokenizer(path):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


class ExportedTokenizer:
    """The part of a transformers tokenizer that RoleTokenizer reads, built from
    ``tokenizer.json`` (the ``tokenizers`` library alone) and the special-token ids an export
    recorded (``supergrep_model.json`` ``tokenizer``): importing transformers costs ~2 s of a
    cold search. `supergrep export onnx` checks that both give the same ids."""

    def __init__(self, path, meta: dict):
        from tokenizers import Tokenizer

        self.backend_tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.name_or_path = str(path)
        self.unk_token = meta["unk_token"]
        self.unk_token_id = meta["unk_id"]
        self.pad_token_id = meta["pad_id"]
        self.eos_token_id = meta.get("eos_id")
        self.mask_token_id = meta["mask_id"]
        self._added = {str(k): int(v) for k, v in meta["added_vocab"].items()}

    def get_added_vocab(self) -> dict[str, int]:
        return dict(self._added)


class RoleTokenizer:
    """Tokenises text for one role, as the model expects it.

    - texts are stripped of surrounding whitespace, as sentence-transformers does;
    - the role prefix goes right after the leading special token ([CLS], <s>; T5 has none, so
      it goes first). A prefix that is a token of its own (PyLate's ``[Q] `` and ``[D] ``, added
      to the tokenizer; Stanford ColBERT's ``[unused0]``) is inserted as that token id, like
      PyLate's ``insert_prefix_token``; any other prefix (sentence-transformers prompts such as
      ``"query: "``) is put before the text and tokenised with it;
    - queries are truncated to ``query_max_tokens`` and documents to ``document_max_tokens``,
      special tokens and prefix included, keeping the trailing special token ([SEP], </s>);
    - query expansion (padding with the mask token) is done by the Encoder: see ``mask_id``.

    Attributes:
        pad_id: Padding id (the tokenizer's pad token, else EOS, else 0).
        mask_id: Query-expansion id: the mask token; models without one (T5) use EOS, then
            the pad token, which is PyLate's order.
        skip_ids: Token ids dropped from document vectors (the settings' skiplist).
    """

    def __init__(self, spec: ModelSpec):
        path = spec.transformer_path
        try:
            if spec.tokenizer_meta is not None:  # an export: tokenizer.json + recorded ids
                self.tok = ExportedTokenizer(path, spec.tokenizer_meta)
            else:
                self.tok = _auto_tokenizer(path)
        except Exception as exc:  # noqa: BLE001 - tokenizers raises bare Exception on bad JSON
            raise ModelError(
                f"cannot load the tokenizer in {path}: {_one_line(exc)}; the directory needs "
                f"tokenizer.json or the tokenizer's vocabulary (vocab.txt, spiece.model, ...)"
            ) from None
        self.settings = spec.settings
        self._cache: dict[str, np.ndarray] = {}  # tokenised string -> ids without specials
        self._cached_tokens = 0
        # The indexer counts the next batch's tokens in its background thread while this one's
        # ids are taken from the cache (and a daemon serves several projects): the cache and
        # the Rust tokenizer's settings change under this lock only.
        self._lock = threading.Lock()
        # The Rust tokenizer, when there is one (every fast / transformers-5 tokenizer).
        self._fast = getattr(self.tok, "backend_tokenizer", None)
        self._lead, self._trail = self._special_template()

        unk = self.tok.unk_token_id
        self._unk = unk
        pad = self.tok.pad_token_id
        if pad is None:
            pad = self.tok.eos_token_id if self.tok.eos_token_id is not None else 0
        self.pad_id: int = int(pad)
        mask = self.tok.mask_token_id
        if mask is None:
            mask = self.tok.eos_token_id
        self.mask_id: int = int(mask) if mask is not None else self.pad_id

        s = self.settings
        # role -> (prefix token id or None, text put before the text)
        self._prefix: dict[str, tuple[int | None, str]] = {
            "query": self._role_prefix(s.query_prefix),
            "document": self._role_prefix(s.document_prefix),
        }
        skip: set[int] = set()
        for word in s.skiplist:
            tid = self._token_id(word)
            if tid is not None:
                skip.add(tid)
        self.skip_ids = frozenset(skip)

        for role in ("query", "document"):
            limit = self.max_tokens(role)  # type: ignore[arg-type]
            fixed = len(self._lead) + len(self._trail) + (self._prefix[role][0] is not None)
            if limit <= fixed:
                raise ModelError(f"{spec.path}: {role}_max_tokens={limit} leaves no room for text "
                                 f"after {fixed} special/prefix tokens; raise it")

    # -- setup helpers -------------------------------------------------------------------------

    def _token_id(self, token: str) -> int | None:
        """The id of ``token`` as one vocabulary entry, or None (unknown)."""
        if self._fast is not None:
            tid = self._fast.token_to_id(token)
        else:
            tid = self.tok.convert_tokens_to_ids(token)
        if not isinstance(tid, int) or (tid == self._unk and token != self.tok.unk_token):
            return None
        return tid

    def _role_prefix(self, prefix: str) -> tuple[int | None, str]:
        if not prefix.strip():
            return None, ""
        added = self.tok.get_added_vocab()
        for cand in dict.fromkeys((prefix, prefix.strip())):
            if cand in added:
                return int(added[cand]), ""
            if _TOKEN_LIKE.fullmatch(cand):
                tid = self._token_id(cand)
                if tid is not None:
                    return tid, ""
        return None, prefix

    def _special_template(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after one sequence."""
        for probe in ("hello world", "a", "x = 1", "0"):
            with_special = self._encode_raw([probe], add_special_tokens=True)[0]
            plain = self._encode_raw([probe], add_special_tokens=False)[0]
            if not plain:
                continue
            for start in range(len(with_special) - len(plain) + 1):
                if with_special[start:start + len(plain)] == plain:
                    return with_special[:start], with_special[start + len(plain):]
        raise ModelError(f"the tokenizer in {self.tok.name_or_path} adds its special tokens in a "
                         f"way supergrep does not understand (not around the text)")

    # -- encoding ------------------------------------------------------------------------------

    def _encodings(self, texts: list[str], add_special_tokens: bool = False):
        fast = self._fast
        # tokenizer.json files often switch truncation/padding on (MiniLM: 128), and the
        # transformers wrapper changes them per call: make sure neither applies here.
        if fast.truncation is not None or fast.padding is not None:
            with self._lock:
                if fast.truncation is not None:
                    fast.no_truncation()
                if fast.padding is not None:
                    fast.no_padding()
        encode = getattr(fast, "encode_batch_fast", None) or fast.encode_batch
        return encode(texts, add_special_tokens=add_special_tokens)

    def _encode_raw(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        if self._fast is not None:
            return [e.ids for e in self._encodings(texts, add_special_tokens)]
        out = self.tok(texts, add_special_tokens=add_special_tokens, truncation=False,
                       return_attention_mask=False, return_token_type_ids=False, verbose=False)
        return [list(ids) for ids in out["input_ids"]]

    def _texts(self, texts: list[str], role: Role) -> tuple[list[str], list[int]]:
        """The strings to tokenise and the ids that go before them (leading specials, prefix)."""
        prefix_id, text_prefix = self._prefix[role]
        head = self._lead + ([prefix_id] if prefix_id is not None else [])
        if text_prefix:
            return [(text_prefix + t).strip() for t in texts], head
        return [t.strip() for t in texts], head

    def max_tokens(self, role: Role) -> int:
        s = self.settings
        return s.query_max_tokens if role == "query" else s.document_max_tokens

    def __call__(self, texts: list[str], role: Role) -> list[list[int]]:
        """Token ids per text: specials and prefix included, truncated to the role's limit."""
        if not texts:
            return []
        strings, head = self._texts(texts, role)
        trail = self._trail
        budget = self.max_tokens(role) - len(head) - len(trail)
        cache = self._cache
        with self._lock:
            found = [cache.pop(x, None) for x in strings] if cache else [None] * len(strings)
            self._cached_tokens -= sum(len(ids) for ids in found if ids is not None)
        missing = [x for x, ids in zip(strings, found, strict=True) if ids is None]
        fresh = iter(self._encode_raw(missing)) if missing else iter(())
        out = []
        for ids in found:
            if ids is None:
                out.append(head + next(fresh)[:budget] + trail)
            else:
                out.append(head + ids[:budget].tolist() + trail)
        return out

    def count(self, texts: list[str], role: Role) -> list[int]:
        """Untruncated token counts, specials and prefix included (to decide what to split).

        The ids are kept (within ``CACHE_TOKENS``) for the ``__call__`` that usually follows.
        """
        if not texts:
            return []
        strings, head = self._texts(texts, role)
        extra = len(head) + len(self._trail)
        cache = self._cache
        with self._lock:
            lengths = {x: len(ids) for x in dict.fromkeys(strings) if (ids := cache.get(x)) is not None}
        todo = [x for x in dict.fromkeys(strings) if x not in lengths]
        if todo:
            made = [np.asarray(ids, dtype=np.int32) for ids in self._encode_raw(todo)]
            with self._lock:
                for x, ids in zip(todo, made, strict=True):
                    lengths[x] = len(ids)
                    self._remember(x, ids)
        return [lengths[x] + extra for x in strings]

    def _remember(self, key: str, ids: np.ndarray) -> None:
        """Keep ``ids`` for ``key`` (the caller holds ``_lock``)."""
        if len(ids) > CACHE_TOKENS // 4:
            return
        cache = self._cache
        old = cache.pop(key, None)
        if old is not None:
            self._cached_tokens -= len(old)
        cache[key] = ids
        self._cached_tokens += len(ids)
        while self._cached_tokens > CACHE_TOKENS:
            self._cached_tokens -= len(cache.pop(next(iter(cache))))
