"""Comment -> definition pairs from the Python files a mined pairs file came from (issue 7 experiment).

A developer's prose comment inside a function ("Windows may still hold the file open, so retry")
describes behaviour in the words of someone reading the code, not in the words of its name:
closer to the development set's semantic queries than a docstring summary is. For every function
or method of the files behind ``pairs.jsonl`` (so the miner's filters, excluded packages and
test files included, already apply), documented or not, one such comment becomes the query and
is removed from the code (so the query cannot match it word for word). Docstrings are removed
from the code as the miner removes them. Output: the miner's pair format + ``query_kind:
comment``; the split of each file is the one its mined pairs had.

    python benchmarks/comment_pairs.py /tmp/corpus/pairs.jsonl --roots /tmp/corpus/python -o comments.jsonl
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import random
import re
import sys
import textwrap
import tokenize
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from supergrep.corpus.mine import code_key, is_test_symbol  # noqa: E402

_SKIP = re.compile(r"^\s*(?:!|-\*-|noqa|type:|pragma|pylint|fmt:|isort|mypy|pyright|coding[:=]|nosec|"
                   r"todo|xxx|fixme|hack|\$|[-=#*~]{3,})", re.I)
_CODEISH = re.compile(r"[()\[\]{}=<>]|\b(?:import|return|def|class|self\.)\b|\.\w+\(|^\w+\.\w+$")
_WORD = re.compile(r"[A-Za-z]{2,}")


def explanatory_comments(code: str) -> list[tuple[str, list[tuple[int, int]]]]:
    r"""The code's comments that read as prose: (text, [(0-based line, column of its '#')]).
    Consecutive comment-only lines are one comment; commented-out code, tool pragmas and
    banners are not.

    >>> explanatory_comments("def f(x):\n    # retry because Windows may hold the file open\n    return x  # x")
    [('retry because Windows may hold the file open', [(1, 4)])]
    """
    dedented = textwrap.dedent(code)
    # dedent removes the same leading whitespace from every line: columns shift by that much
    first = next((ln for ln in code.split("\n") if ln.strip()), "")
    first_d = next((ln for ln in dedented.split("\n") if ln.strip()), "")
    shift = (len(first) - len(first.lstrip())) - (len(first_d) - len(first_d.lstrip()))
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(dedented).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    blocks: list[tuple[list[str], list[tuple[int, int]], bool]] = []  # (texts, places, own line)
    for t in toks:
        if t.type != tokenize.COMMENT:
            continue
        text = t.string.lstrip("#").strip()
        line = t.start[0] - 1
        own = not t.line[: t.start[1]].strip()
        if blocks and own and blocks[-1][2] and blocks[-1][1][-1][0] == line - 1:
            blocks[-1][0].append(text)
            blocks[-1][1].append((line, t.start[1] + shift))
        else:
            blocks.append(([text], [(line, t.start[1] + shift)], own))
    out = []
    for texts, lines, _own in blocks:
        text = " ".join(x for x in texts if x).strip()
        words = text.split()
        if not (4 <= len(words) <= 30) or _SKIP.match(text) or _CODEISH.search(text):
            continue
        if sum(1 for w in words if _WORD.fullmatch(w.strip(".,;:!?'\"`"))) < 0.7 * len(words):
            continue
        out.append((text, lines))
    return out


def strip_comment(code: str, places: list[tuple[int, int]]) -> str:
    r"""``code`` without the comment at the given (line, column) places; a line left blank is
    dropped.

    >>> strip_comment("    a = '#'  # note\n    # gone\n    b = 1", [(0, 13), (1, 4)])
    "    a = '#'\n    b = 1"
    """
    cut = dict(places)
    keep = []
    for i, line in enumerate(code.split("\n")):
        if i in cut:
            line = line[: cut[i]].rstrip()
            if not line.strip():
                continue
        keep.append(line)
    return "\n".join(keep)


def _defs(tree: ast.AST):
    """(qualified name, node) of every function and method, nested ones and methods of nested
    classes included (classes themselves are not yielded)."""
    stack = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                stack.append((name + ".", child))


def file_rows(text: str, rel: str, repo: str, split: str, rng: random.Random, min_words: int) -> list[dict]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.split("\n")
    rows = []
    for symbol, node in _defs(tree):
        if is_test_symbol(symbol):
            continue
        start, end = node.lineno - 1, node.end_lineno or node.lineno
        seg = lines[start:end]
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):  # drop the docstring, as the miner does
            d0, d1 = body[0].lineno - 1 - start, (body[0].end_lineno or body[0].lineno) - start
            seg = seg[:d0] + seg[d1:]
        code = "\n".join(seg)
        if len(seg) < 3 or len(seg) > 150:
            continue
        comments = [c for c in explanatory_comments(code) if len(c[0].split()) >= min_words]
        if not comments:
            continue
        text_c, where = rng.choice(comments)
        rows.append({"query": text_c, "code": strip_comment(code, where), "language": "python", "repo": repo,
                     "path": rel, "symbol": symbol, "kind": "function", "start_line": node.lineno,
                     "end_line": node.end_lineno, "split": split, "query_kind": "comment"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", type=Path)
    ap.add_argument("--roots", type=Path, required=True, help="the folder of corpus roots the pairs were mined from")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--min-words", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for ok, path, what in ((args.pairs.is_file(), args.pairs, "pairs file"),
                           (args.roots.is_dir(), args.roots, "roots folder")):
        if not ok:
            print(f"{path}: no such {what}; give the mined pairs.jsonl and the folder of corpus roots "
                  f"it was mined from", file=sys.stderr)
            sys.exit(2)
    files: dict[tuple[str, str], str] = {}
    with args.pairs.open() as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"{args.pairs}:{n}: not JSON ({e.msg}); fix or drop the line", file=sys.stderr)
                sys.exit(2)
            if row.get("language") == "python":
                files.setdefault((row.get("repo", ""), row["path"]), row.get("split", "train"))
    roots = sorted(p for p in args.roots.iterdir() if p.is_dir())
    rng = random.Random(args.seed)
    seen: set[str] = set()
    stats: dict[str, int] = defaultdict(int)
    with args.output.open("w") as out:
        for (repo, rel), split in sorted(files.items()):
            path = next((r / rel for r in roots if (r / rel).is_file()), None)
            if path is None:
                stats["file not found"] += 1
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                stats["unreadable"] += 1
                continue
            for row in file_rows(text, rel, repo, split, rng, args.min_words):
                key = code_key(row["code"])
                if key in seen:
                    stats["duplicate code"] += 1
                    continue
                seen.add(key)
                stats[f"rows {split}"] += 1
                out.write(json.dumps(row) + "\n")
    print(json.dumps({"files": len(files), **stats}))


if __name__ == "__main__":
    main()
