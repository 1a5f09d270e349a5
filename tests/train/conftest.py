"""Fixtures for the training tests: small real (docstring -> code) pairs and tiny models."""

from __future__ import annotations

import ast
import hashlib
import json
import sysconfig
from pathlib import Path

import pytest

STDLIB_MODULES = ("textwrap", "shlex", "fnmatch", "glob", "csv", "difflib", "string", "heapq", "bisect",
                  "calendar", "shutil", "tempfile", "gzip", "zipfile", "argparse", "ipaddress")


def mine_stdlib(n_max: int = 400) -> list[dict]:
    """Real pairs: each function's docstring summary -> its code without the docstring."""
    root = Path(sysconfig.get_paths()["stdlib"])
    rows = []
    for mod in STDLIB_MODULES:
        path = root / f"{mod}.py"
        if not path.is_file():
            continue
        src = path.read_text(encoding="utf-8", errors="replace")
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc or len(doc.split()) < 4 or len(node.body) < 2:
                continue
            body0 = node.body[0]
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            code = "\n".join(lines[start - 1 : body0.lineno - 1] + lines[body0.end_lineno : node.end_lineno])
            split = "val" if int(hashlib.sha1(mod.encode()).hexdigest(), 16) % 8 == 0 else "train"
            rows.append({"query": " ".join(doc.split("\n\n")[0].split()), "code": code, "path": f"{mod}.py",
                         "symbol": node.name, "language": "python", "split": split})
    return rows[:n_max]


@pytest.fixture(scope="session")
def pairs_file(tmp_path_factory) -> Path:
    rows = mine_stdlib()
    assert len(rows) > 150
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory) -> Path:
    from tiny_models import make_t5

    return make_t5(tmp_path_factory.mktemp("t5") / "xtr", arch="encoder", tokenizer="json", dense="safetensors")
