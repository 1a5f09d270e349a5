"""Query files: JSON Lines in the format of eval/public/README.md, validated line by line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from supergrep.errors import InputError
from supergrep.evaluation.metrics import Target
from supergrep.jsonl import read_jsonl


@dataclass(frozen=True)
class Query:
    id: str
    corpus: str
    query: str
    kind: str
    targets: tuple[Target, ...]


def _target(obj: object, where: str) -> Target:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: each target must be an object with path, symbol, start_line, end_line")
    try:
        t = Target(str(obj["path"]), str(obj.get("symbol", "")), int(obj["start_line"]), int(obj["end_line"]))
    except KeyError as exc:
        raise InputError(f"{where}: target is missing {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise InputError(f"{where}: target start_line/end_line must be integers") from None
    if t.start_line < 1 or t.end_line < t.start_line:
        raise InputError(f"{where}: target lines must satisfy 1 <= start_line <= end_line")
    return t


def load_queries(path: str | Path) -> list[Query]:
    """Read and validate a query file.

    Raises:
        InputError: naming the file and line number of the first bad line.
    """
    out: list[Query] = []
    seen: set[str] = set()
    for where, obj in read_jsonl(path, "query file"):
        missing = [k for k in ("id", "corpus", "query", "targets") if k not in obj]
        if missing:
            raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
        if not isinstance(obj["query"], str) or not obj["query"].strip():
            raise InputError(f"{where}: 'query' must be a non-empty string")
        targets = obj["targets"]
        if not isinstance(targets, list) or not targets:
            raise InputError(f"{where}: 'targets' must be a non-empty list")
        qid = str(obj["id"])
        if qid in seen:
            raise InputError(f"{where}: duplicate query id {qid!r}")
        seen.add(qid)
        out.append(Query(qid, str(obj["corpus"]), obj["query"], str(obj.get("kind", "")),
                         tuple(_target(t, where) for t in targets)))
    if not out:
        raise InputError(f"{path}: no queries found")
    return out
