"""Code-aware lexical terms for BM25.

The BM25 ranking itself runs in SQLite FTS5 (its built-in ``bm25()``, Robertson/Sparck Jones
with k1=1.2, b=0.75), inside the same transactions as the rest of the index. This module
decides what the terms are: identifiers are kept whole *and* split at snake_case and camelCase
boundaries, lower-cased, so ``parseHTTPResponse`` matches queries for "parse http response"
and for the identifier itself.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
# camelCase / PascalCase / acronym boundaries: "parseHTTPResponse2" -> parse, HTTP, Response, 2
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9]|\b)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

# English function words dropped from queries only (documents keep everything).
QUERY_STOPWORDS = frozenset(
    """a an and are as at be by for from has have how i in into is it its of on or that the
    their them then there these this to was were what when where which while who why will with
    does do can could should would my me we you your our""".split()
)

MAX_TERM_CHARS = 64


def split_identifier(word: str) -> list[str]:
    """Parts of an identifier, lower-cased (empty when it has a single part).

    >>> split_identifier("parseHTTPResponse")
    ['parse', 'http', 'response']
    >>> split_identifier("do_filesizeformat")
    ['do', 'filesizeformat']
    >>> split_identifier("value")
    []
    """
    parts = [p.lower() for piece in word.split("_") if piece for p in _CAMEL.findall(piece)]
    return parts if len(parts) > 1 else []


# word -> its terms (itself lower-cased, then its parts): code repeats its identifiers, so
# indexing looks most words up here instead of splitting them again (3.4x faster on
# torch/_inductor/codegen). Bounded: past _TERMS_CACHE_MAX words, new ones are not kept.
_TERMS: dict[str, tuple[str, ...]] = {}
_TERMS_CACHE_MAX = 1 << 17


def _word_terms(word: str) -> tuple[str, ...]:
    terms = () if len(word) > MAX_TERM_CHARS else (word.lower(), *split_identifier(word))
    if len(_TERMS) < _TERMS_CACHE_MAX:
        _TERMS[word] = terms
    return terms


def code_terms(text: str) -> list[str]:
    """Lexical terms of code or prose: every identifier whole, then its parts.

    >>> code_terms("def do_filesizeformat(value, binary=False):")
    ['def', 'do_filesizeformat', 'do', 'filesizeformat', 'value', 'binary', 'false']
    """
    out: list[str] = []
    get = _TERMS.get
    for word in _WORD.findall(text):
        terms = get(word)
        out.extend(_word_terms(word) if terms is None else terms)
    return out


def query_terms(query: str) -> list[str]:
    """Distinct terms of a search query, stop words removed, in order of first appearance.

    >>> query_terms("How is the parseHTTPResponse used?")
    ['parsehttpresponse', 'parse', 'http', 'response', 'used']
    """
    seen: dict[str, None] = {}
    for t in code_terms(query):
        if t not in QUERY_STOPWORDS and t != "_":
            seen.setdefault(t, None)
    return list(seen)
