"""Query augmentation against the word-overlap shortcut.

A docstring usually repeats its function's identifiers ("Return the parsed config" for
``parse_config``). Trained on such pairs, a model learns to match words, not behaviour: the
seeds' tuned model got better on keyword queries and worse on queries that describe behaviour
without naming it. ``drop_identifier_words`` removes from a query every word that the code side
already spells (its path, symbol and identifiers, split at snake_case/camelCase), so what is
left can only be matched by meaning. It is applied to a seeded fraction of the pairs
(``query_identifier_dropout``); the rest keep their words, so keyword queries still work.
"""

from __future__ import annotations

import hashlib
import re

from supergrep.scoring.bm25 import QUERY_STOPWORDS, code_terms

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
MIN_WORDS_LEFT = 3


def _stems(word: str) -> set[str]:
    w = word.lower()
    out = {w}
    for suffix in ("ing", "ed", "es", "s"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            out.add(w[: -len(suffix)])
    return out


def drop_identifier_words(query: str, document: str) -> str | None:
    """The query without the words the document's code already contains, or None when fewer
    than three words would be left (the pair is then used unchanged).

    >>> drop_identifier_words("Return the parsed config file as a dict", "def parse_config(path):\\n    ...")
    'Return the file as a dict'
    >>> drop_identifier_words("Parse config", "def parse_config(): ...") is None
    True
    """
    terms = set(code_terms(document))
    terms |= {t[:-1] for t in terms if t.endswith("e") and len(t) > 3}  # "parse" ~ "parsed"
    kept = []
    for token in query.split():
        core = _WORD.search(token)
        word = core.group().lower() if core else ""
        # Function words and very short words say nothing about identity: keep them.
        if len(word) >= 3 and word not in QUERY_STOPWORDS and any(
                s in terms or s + "e" in terms for s in _stems(word)):
            continue
        kept.append(token)
    if sum(1 for t in kept if _WORD.search(t)) < MIN_WORDS_LEFT:
        return None
    return " ".join(kept)


def chosen(seed: int, index: int | str, fraction: float) -> bool:
    """A deterministic coin flip per (seed, pair index or any other key).

    >>> [chosen(0, i, 0.5) for i in range(6)] == [chosen(0, i, 0.5) for i in range(6)]
    True
    """
    if fraction <= 0:
        return False
    if fraction >= 1:
        return True
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < fraction


_COMMENT = {"python": "#", "ruby": "#", "bash": "#", "lua": "--", "sql": "--"}


def docstring_body(docstring: str) -> str:
    r"""Everything after a docstring's first paragraph (the summary queries are made from).

    >>> docstring_body("Parse a config.\n\nReads TOML and checks every key.\n\nRaises on errors.")
    'Reads TOML and checks every key.\n\nRaises on errors.'
    >>> docstring_body("Only a summary.")
    ''
    """
    parts = [p.strip() for p in docstring.strip().split("\n\n")]
    return "\n\n".join(p for p in parts[1:] if p)


def with_docstring_body(code: str, body: str, language: str) -> str:
    r'''The code with ``body`` put back where a reader would find it: as a Python docstring
    under the signature, else as a comment block above the definition.

    >>> with_docstring_body("def f(x):\n    return x", "Doubles nothing.", "python").splitlines()
    ['def f(x):', '    """Doubles nothing."""', '    return x']
    >>> with_docstring_body("fn f() {}", "Does nothing.", "rust").splitlines()
    ['// Does nothing.', 'fn f() {}']
    '''
    lines = code.split("\n")
    quote = '"' * 3
    if language == "python":
        for i, line in enumerate(lines[:10]):
            if line.rstrip().endswith(":"):
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                indent = nxt[: len(nxt) - len(nxt.lstrip())] or line[: len(line) - len(line.lstrip())] + "    "
                doc = body.replace(quote, "'" * 3)
                return "\n".join([*lines[: i + 1], f"{indent}{quote}{doc}{quote}", *lines[i + 1 :]])
    mark = _COMMENT.get(language, "//")
    comment = "\n".join(f"{mark} {row}".rstrip() for row in body.split("\n"))
    return f"{comment}\n{code}"
