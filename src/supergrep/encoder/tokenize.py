"""Role-aware tokenisation: prefixes, truncation, query expansion and the document skiplist.

Uses the model directory's own Hugging Face (fast) tokenizer; no framework tensors are made.
"""

from __future__ import annotations

import os
from typing import Literal

from supergrep.encoder.spec import ModelSpec
from supergrep.errors import ModelError

Role = Literal["query", "document"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")


class RoleTokenizer:
    """Tokenises text for one role, as the model expects it.

    - the role prefix (e.g. PyLate's ``[Q] ``) goes before the text, so it lands right after
      the first special token;
    - queries are truncated to ``query_max_tokens`` and, with query expansion, padded to it
      with the mask token (ColBERT);
    - documents are truncated to ``document_max_tokens``.
    """

    def __init__(self, spec: ModelSpec):
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()

        try:
            self.tok = AutoTokenizer.from_pretrained(str(spec.transformer_path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load the tokenizer in {spec.transformer_path}: {exc}") from None
        self.settings = spec.settings
        pad = self.tok.pad_token_id
        if pad is None:
            pad = self.tok.eos_token_id if self.tok.eos_token_id is not None else 0
        self.pad_id: int = int(pad)
        mask = self.tok.mask_token_id
        self.mask_id: int = int(mask) if mask is not None else self.pad_id
        skip: set[int] = set()
        for word in self.settings.skiplist:
            tid = self.tok.convert_tokens_to_ids(word)
            if isinstance(tid, int) and tid != self.tok.unk_token_id:
                skip.add(tid)
        self.skip_ids = frozenset(skip)

    def max_tokens(self, role: Role) -> int:
        s = self.settings
        return s.query_max_tokens if role == "query" else s.document_max_tokens

    def __call__(self, texts: list[str], role: Role) -> list[list[int]]:
        if not texts:
            return []
        prefix = self.settings.query_prefix if role == "query" else self.settings.document_prefix
        limit = self.max_tokens(role)
        enc = self.tok(
            [prefix + t for t in texts],
            add_special_tokens=True,
            truncation=True,
            max_length=limit,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        return [list(ids) for ids in enc]

    def count(self, texts: list[str], role: Role) -> list[int]:
        """Untruncated token counts (to decide whether a chunk must be split)."""
        if not texts:
            return []
        prefix = self.settings.query_prefix if role == "query" else self.settings.document_prefix
        enc = self.tok(
            [prefix + t for t in texts],
            add_special_tokens=True,
            truncation=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )["input_ids"]
        return [len(ids) for ids in enc]
