"""Docstrings and doc comments as text: markers stripped, markup removed, a summary for a query.

Two steps, both language-agnostic (they look at comment syntax, not at a language name):

- ``comment_text`` / ``string_literal_text``: the documentation inside one comment node (or a
  run of line comments) or one string literal, without ``///``, ``/** ... */``, `` * `` gutters,
  ``#``, ``--``, ``/-- ... -/`` or quotes, dedented.
- ``clean_docstring``: that text as a training query (its summary) and as a full cleaned
  docstring. The summary is the first paragraph, cut before the first section or tag
  (``Args:``, ``:param x:``, ``@param``, ``# Examples``, a code fence, ``>>>``, ``- Returns:``,
  a numpy ``Parameters`` header, ...), with inline markup reduced to its text
  (``{@link Foo#bar}`` -> ``Foo.bar``, ``[`Vec`]`` -> ``Vec``, ``:func:`f``` -> ``f``,
  HTML tags dropped and entities decoded, Markdown backticks and emphasis dropped but their
  words kept) and whitespace collapsed.
"""

from __future__ import annotations

import functools
import html
import inspect
import re
import textwrap
from dataclasses import dataclass

# --- markers ---------------------------------------------------------------------------------

_LINE_MARKER = re.compile(r"^\s*(?://[/!]?|#+|-{2,})")
_GUTTER = re.compile(r"^\s*\*+(?!/)")
_STRING_PREFIX = re.compile(r"^[rRuU]{0,2}")


def _dedent_lines(lines: list[str]) -> list[str]:
    return textwrap.dedent("\n".join(line.rstrip() for line in lines)).split("\n")


def _block_body(text: str, opener: str, closer: str) -> list[str]:
    """The lines inside one block comment, without its delimiters and its `` * `` gutter."""
    body = text[len(opener):]
    body = body.lstrip(opener[-1])  # /** and /*** open the same block; /-- too
    if body.startswith("!"):  # /*! (Doxygen, Qt)
        body = body[1:]
    if body.endswith(closer):
        body = body[: -len(closer)]
    lines = body.split("\n")
    first, rest = lines[0].strip(), lines[1:]
    if rest and sum(1 for ln in rest if _GUTTER.match(ln)) >= max(1, len([ln for ln in rest if ln.strip()]) // 2):
        rest = [_GUTTER.sub("", ln, count=1) for ln in rest]
    return [first, *_dedent_lines(rest)]


def comment_text(comments: list[str]) -> str:
    """The documentation in a run of comments (each one node's text), markers removed.

    >>> comment_text(["/// Adds one.", "///", "/// # Panics"])
    'Adds one.\\n\\n# Panics'
    >>> comment_text(["/**\\n * Returns the {@code size}.\\n *\\n * @param x the x\\n */"])
    'Returns the {@code size}.\\n\\n@param x the x'
    >>> comment_text(["/-- The empty queue. -/"])
    'The empty queue.'
    >>> comment_text(["# Charges the card.", "#   indented"])
    'Charges the card.\\n  indented'
    """
    out: list[str] = []
    line_run: list[str] = []

    def flush() -> None:
        if line_run:
            out.extend(_dedent_lines([_LINE_MARKER.sub("", ln, count=1) for ln in line_run]))
            line_run.clear()

    for raw in comments:
        text = raw.strip().replace("\r\n", "\n")
        if text.startswith("/*"):
            flush()
            out.extend(_block_body(text, "/*", "*/"))
        elif text.startswith("/-"):
            flush()
            out.extend(_block_body(text, "/-", "-/"))
        elif text.startswith("--[["):  # a Lua block comment
            flush()
            out.extend(_dedent_lines(text[4:].removesuffix("]]").removesuffix("--").split("\n")))
        else:
            line_run.extend(text.split("\n"))
    flush()
    return "\n".join(out).strip("\n").strip()


def string_literal_text(literal: str) -> str | None:
    """The text of a docstring literal (quotes and ``r``/``u`` prefixes removed, dedented as
    ``inspect.cleandoc`` does), or None for f-strings and bytes, which are not docstrings.

    >>> string_literal_text('r\"\"\"\\n    Sum the values.\\n\\n    More.\\n    \"\"\"')
    'Sum the values.\\n\\nMore.'
    >>> string_literal_text("f'{x}'") is None
    True
    """
    prefix = _STRING_PREFIX.match(literal).group(0)
    body = literal[len(prefix):]
    if body[:1] not in ("'", '"'):
        return None
    for q in ('"""', "'''", '"', "'"):
        if body.startswith(q) and body.endswith(q) and len(body) >= 2 * len(q):
            return inspect.cleandoc(body[len(q): -len(q)])
    return None


# --- cleaning --------------------------------------------------------------------------------

_SECTION_WORDS = (
    "Args|Arguments|Argument|Parameters|Parameter|Params|Param|Keyword Args|Keyword Arguments|"
    "Other Parameters|Returns|Return|Yields|Yield|Raises|Raise|Throws|Exceptions|Examples|Example|"
    "Example usage|Usage|Notes|Note|Attributes|Methods|See Also|See also|Todo|TODO|Warnings|Warning|"
    "References|Returns value|Errors|Panics|Safety|Complexity|Deprecated|Since|Version|Author|Type|Types"
)
_SECTION = re.compile(
    rf"^\s*(?:"
    rf"(?:{_SECTION_WORDS})\s*:(?:\s|$)"  # Google style, Go ``Deprecated:``
    r"|[@\\][A-Za-z]+\b"  # Javadoc / JSDoc / Doxygen tags
    r"|:[A-Za-z]+(?:\s+[^:\n]*)?:(?:\s|$)"  # reST fields :param x: :returns:
    r"|\.\.\s+[\w-]+::"  # reST directives
    r"|#{1,6}\s"  # Markdown headings (rustdoc # Examples)
    r"|```|~~~"  # code fences
    r"|>>>\s"  # doctests
    r"|[-*]\s+(?:Parameters?|Returns?|Throws|Note|Precondition|Postcondition|Complexity|Important|"
    r"Warning|SeeAlso|Author|Version|Since|Remark)\b"  # Swift callouts
    r")"
)
_UNDERLINE = re.compile(r"^\s*(?:-{3,}|={3,}|~{3,})\s*$")
_BRIEF = re.compile(r"^\s*[@\\](?:brief|short|summary|description|desc|fn\s+\S+|class\s+\S+)\b\s*", re.IGNORECASE)
_PARAGRAPH_TAG = re.compile(r"<\s*/?\s*p\s*/?>|<\s*br\s*/?>", re.IGNORECASE)
_HTML_TAGS = (
    "a|b|i|u|s|em|strong|code|tt|pre|kbd|samp|var|sup|sub|small|big|cite|span|div|font|center|"
    "ul|ol|li|dl|dt|dd|table|thead|tbody|tr|td|th|h[1-6]|blockquote|hr|img|caption|abbr|q|del|ins|mark|strike"
)
_HTML_TAG = re.compile(rf"</?\s*(?:{_HTML_TAGS})(?:\s[^<>]*)?/?>", re.IGNORECASE)
_INLINE_TAG = re.compile(r"\{@(\w+)\s*([^{}]*)\}")
_LINK_TARGET = re.compile(r"([\w.$#:/-]*(?:\([^)]*\))?)")
# kernel-doc and similar: "name - what it does", "struct foo - what it is"
_NAME_DASH = re.compile(
    r"^(?:(?:struct|union|enum|typedef|macro|function)\s+[\w:.]+|[\w:.]+\(\)|[\w:.]*_[\w:.]*|[a-z][a-z0-9]+)"
    r"\s+-+\s+(?=\S)")
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)(?:\s*->\s*.+)?$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")

_INLINE_SUBS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), ""),  # Markdown images
    (re.compile(r"\[([^\]\n]+)\]\([^)\n]*\)"), r"\1"),  # [text](url)
    (re.compile(r"\[([^\]\n]+)\]\[[^\]\n]*\]"), r"\1"),  # [text][ref]
    (re.compile(r"(?<![\w\]\[])\[(`[^`\]\n]+`|[A-Za-z_][\w:.#<>!]*(?:\(\))?)\](?![(\[])"), r"\1"),  # [`Vec`], [Vec]
    (re.compile(r"``([^`]+)``"), r"\1"),  # reST literals
    (re.compile(r"`([^`\n]*)`"), r"\1"),  # Markdown code spans: words kept, backticks dropped
    (re.compile(r"\*\*([^*\n]+)\*\*"), r"\1"),  # **bold**
    (re.compile(r"(?<![\w*])\*([^\s*][^*\n]*?)\*(?![\w*])"), r"\1"),  # *emphasis*
    (re.compile(r"[@\\](?:c|p|a|e|b|em|ref)\s+(\S+)"), r"\1"),  # Doxygen inline commands
)


def _inline_tag(m: re.Match[str]) -> str:
    """``{@link Foo#bar(int) label}`` -> ``label``; ``{@link Foo#bar}`` -> ``Foo.bar``;
    ``{@code x}`` -> ``x``; ``{@inheritDoc}`` -> nothing."""
    tag, body = m.group(1).lower(), m.group(2).strip()
    if tag == "inheritdoc":
        return ""
    if tag in ("link", "linkplain", "linkcode", "see"):
        m = _LINK_TARGET.match(body)
        target, label = (m.group(1), body[m.end():]) if m else (body, "")
        label = label.lstrip(" |").strip()
        if label:
            return label
        return re.sub(r"\(.*\)$", "", target).replace("#", ".").strip(".")
    return body


def _reduce_role(text: str) -> str:
    """reST roles: ``:class:`~pkg.mod.Name``` shows ``Name``; without ``~`` the whole target."""

    def role(m: re.Match[str]) -> str:
        inner = m.group(1)
        if "<" in inner and inner.endswith(">"):  # :ref:`text <target>`
            return inner.split("<", 1)[0].strip()
        if inner.startswith("~"):
            return inner[1:].rsplit(".", 1)[-1]
        return inner.lstrip("!")

    return re.sub(r":[\w-]+(?::[\w-]+)*:`([^`]+)`", role, text)


def clean_inline(text: str) -> str:
    """Inline markup reduced to its words (structure and line breaks kept).

    >>> clean_inline("Returns the {@link java.util.List#size() size} of {@code xs}.")
    'Returns the size of xs.'
    >>> clean_inline("See [`Vec::push`] and [the book](https://x.y) for **more** on `T`.")
    'See Vec::push and the book for more on T.'
    >>> clean_inline(":func:`~os.path.join` two :class:`Foo` parts &amp; <b>bold</b> List<T>")
    'join two Foo parts & bold List<T>'
    """
    text = _INLINE_TAG.sub(_inline_tag, text)
    text = _reduce_role(text)
    text = _HTML_TAG.sub("", text)
    for pattern, repl in _INLINE_SUBS:
        text = pattern.sub(repl, text)
    text = text.replace("`", "")
    return html.unescape(text)


def _summary_lines(lines: list[str]) -> list[str]:
    """The documentation before its first section, tag, code block or doctest."""
    out: list[str] = []
    for i, line in enumerate(lines):
        if _SECTION.match(line):
            break
        if i + 1 < len(lines) and line.strip() and _UNDERLINE.match(lines[i + 1]):
            break  # a numpy / reST section header
        out.append(line)
    return out


def _paragraphs(lines: list[str]) -> list[str]:
    paras: list[str] = []
    cur: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    return paras


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class CleanDoc:
    """A cleaned docstring: ``summary`` is the query, ``full`` the whole text without markup
    (computed on first use: most docstrings are judged by their summary alone)."""

    summary: str
    source: str

    @property
    def words(self) -> int:
        return len(self.summary.split())

    @functools.cached_property
    def full(self) -> str:
        full_lines = [ln.rstrip() for ln in clean_inline(self.source).split("\n")]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(full_lines)).strip()


def clean_docstring(text: str, max_words: int = 0) -> CleanDoc:
    """The summary (first paragraph, before any section) and the full cleaned text.

    ``max_words`` > 0 keeps only the whole sentences of a long summary that fit in that many
    words (at least its first sentence).

    >>> d = clean_docstring("Fetch rows.\\n\\nArgs:\\n    n: how many\\n\\nReturns:\\n    rows")
    >>> d.summary, d.words
    ('Fetch rows.', 2)
    >>> clean_docstring("Returns the {@code size}.\\n<p>More text.\\n@param x the x").summary
    'Returns the size.'
    >>> clean_docstring("@brief Opens the ring.\\n\\\\param n slots").summary
    'Opens the ring.'
    >>> clean_docstring("sum(a, b) -> int\\n\\nAdd two numbers.").summary
    'Add two numbers.'
    >>> clean_docstring("Parse it.\\n\\nParameters\\n----------\\nx : int").full
    'Parse it.\\n\\nParameters\\n----------\\nx : int'
    """
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    body = _PARAGRAPH_TAG.sub("\n\n", text)
    lines = body.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines:
        lines[0] = _BRIEF.sub("", lines[0])
    paras = _paragraphs(_summary_lines(lines))
    if len(paras) > 1 and _SIGNATURE.match(paras[0]):
        paras = paras[1:]  # a C extension's "name(args) -> type" line comes first
    summary = _NAME_DASH.sub("", _squash(clean_inline(paras[0]))) if paras else ""
    if max_words > 0 and len(summary.split()) > max_words:
        sentences = _SENTENCE_END.split(summary)
        kept = [sentences[0]]
        for s in sentences[1:]:
            if len(" ".join([*kept, s]).split()) > max_words:
                break
            kept.append(s)
        summary = " ".join(kept)
    return CleanDoc(summary=summary, source=text)
