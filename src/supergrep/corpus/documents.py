"""What the model reads for a piece of code, and (query, code) training/evaluation pairs.

One definition of the document text serves indexing, training and pair evaluation, so a model
is trained on exactly what it will later embed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from supergrep.corpus.types import Chunk
from supergrep.errors import InputError
from supergrep.jsonl import read_jsonl


def document_text(chunk: Chunk) -> str:
    """Where the code is and what it is called, then the code.

    >>> document_text(Chunk("app/db.py", "python", "connect", "function", 3, 4, "def connect():\\n    pass"))
    'app/db.py connect\\ndef connect():\\n    pass'
    """
    head = f"{chunk.path} {chunk.symbol}".strip()
    return f"{head}\n{chunk.text}"


def code_document(code: str, path: str = "", symbol: str = "", language: str = "") -> str:
    """``document_text`` for a bare piece of code (pairs carry no line numbers)."""
    if not path and not symbol:
        return code
    return document_text(Chunk(path, language or "text", symbol, "function", 1, code.count("\n") + 1, code))


@dataclass(frozen=True)
class Pair:
    """A (query, code) pair as `supergrep mine` writes it (see docs/training.md)."""

    query: str
    code: str
    path: str = ""
    symbol: str = ""
    language: str = ""
    repo: str = ""
    split: str = ""
    negatives: tuple[Pair, ...] = field(default=())  # hard negatives: code (+ path, symbol, docstring), no query
    docstring: str = ""  # the full cleaned docstring the query's summary came from
    teacher_scores: tuple[float, ...] = ()  # a teacher's MaxSim of the query vs [code, *negatives]

    def document(self) -> str:
        return code_document(self.code, self.path, self.symbol, self.language)


def _negative(obj: object, where: str) -> Pair:
    # A negative is rendered like a positive (header + code), so the header alone never tells
    # them apart; kept as a Pair so the training augmentations can treat both alike.
    if isinstance(obj, str) and obj.strip():
        return Pair("", obj)
    if isinstance(obj, dict) and isinstance(obj.get("code"), str):
        return Pair("", obj["code"], str(obj.get("path", "")), str(obj.get("symbol", "")),
                    str(obj.get("language", "")), docstring=str(obj.get("docstring", "") or ""))
    raise InputError(f"{where}: each of 'negatives' must be a code string or an object with 'code'")


def _teacher_scores(value: object, n_neg: int, where: str) -> tuple[float, ...]:
    if value is None:
        return ()
    if (not isinstance(value, list) or len(value) != 1 + n_neg
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise InputError(f"{where}: 'teacher_scores' must be a list of {1 + n_neg} finite numbers (the positive's, "
                         f"then one per negative); re-run `supergrep mine-negatives --teacher`")
    return tuple(float(v) for v in value)


def load_pairs(path: str | Path, split: str | None = None, strict_split: bool = False) -> list[Pair]:
    """Read a pairs file (JSON Lines with at least ``query`` and ``code``).

    Args:
        split: Keep only rows whose ``split`` equals this; rows without a split are kept too
            unless ``strict_split``.

    Raises:
        InputError: naming the file and line of the first bad row.
    """
    pairs = []
    for where, obj in read_jsonl(path, "pairs file"):
        for key in ("query", "code"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise InputError(f"{where}: '{key}' must be a non-empty string")
        row_split = str(obj.get("split", ""))
        if split is not None and row_split != split and (row_split or strict_split):
            continue
        negs = obj.get("negatives") or []
        if not isinstance(negs, list):
            raise InputError(f"{where}: 'negatives' must be a list")
        pairs.append(Pair(obj["query"], obj["code"], str(obj.get("path", "")), str(obj.get("symbol", "")),
                          str(obj.get("language", "")), str(obj.get("repo", "")), row_split,
                          tuple(_negative(n, where) for n in negs), str(obj.get("docstring", "") or ""),
                          _teacher_scores(obj.get("teacher_scores"), len(negs), where)))
    return pairs


def train_val_split(rows: list[Pair], seed: int, val_pairs: int, n_pairs: int = 0) -> tuple[list[Pair], list[Pair]]:
    """(train, held-out) rows, each shuffled with ``seed``: rows with split "val" are held out
    (at most ``val_pairs``); a file with none holds out the end of the shuffled training rows.
    ``n_pairs`` > 0 keeps that many training rows (0: all)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    train = [p for p in rows if p.split in ("train", "")]
    val = [p for p in rows if p.split == "val"]
    train = [train[i] for i in rng.permutation(len(train))]
    if not val:  # no split in the file: hold out the end of the shuffle
        val, train = train[-val_pairs:], train[:-val_pairs]
    val = [val[i] for i in rng.permutation(len(val))][:val_pairs]
    if n_pairs:
        train = train[:n_pairs]
    return train, val


