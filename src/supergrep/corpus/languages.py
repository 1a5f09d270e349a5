"""The language table: one row per language, and the only place that names a language.

A row says which files belong to the language (extensions, file names), which tree-sitter
grammar parses it (from ``tree-sitter-language-pack``, which bundles its grammars), and which
syntax nodes become chunks. The walker and chunker never mention a specific language.

Row fields, in the order the chunker uses them:

- ``definitions``: node type -> chunk kind. Every such node becomes a chunk. A "function"
  directly inside a container (other than a namespace) is reported as a "method".
- ``kind_of``: optional ``(node, source_bytes) -> str | None`` refining the kind of one
  definition node (Swift's ``class_declaration`` is also struct/enum/extension; a Go type is a
  struct or an interface); None keeps the kind from ``definitions``.
- ``containers``: definition node types whose nested definitions become chunks of their own
  (a class chunk keeps its header and fields; its methods are separate chunks).
- ``namespaces``: the containers that only qualify names (Rust ``mod``, C++ ``namespace``):
  functions inside them stay "function" rather than "method".
- ``wrappers``: node types that wrap one definition and widen its span (Python decorators,
  ``export`` statements, C++ templates). The chunk takes the wrapper's span.
- ``leading``: sibling node types glued onto the definition that follows them with no blank
  line between (doc comments, Rust ``#[attributes]``, TypeScript member decorators).
- ``name_of``: optional ``(node, source_bytes) -> str | None`` for grammars where the name is
  not the node's ``name`` field; returning None for a definition node makes it an ordinary node
  (a C ``struct`` used as a type, a Java interface method without a body).
- ``scope_separator``: joins qualified names (``Class.method`` or ``Type::method``).
- ``member_separator``: joins a container's name and a function/method in it, when that differs
  from ``scope_separator`` (Ruby: ``Outer::Inner.method``). None means ``scope_separator``.
- ``splitter``: "tree-sitter" (default when a grammar is set), "declarations" (a line-based
  splitter on ``declaration_keywords``, for languages whose grammar does not ship offline) or
  "headings" (Markdown sections) or "lines" (fixed windows, for other prose and unknown text).
- ``skiplist``: tokens dropped from document embeddings. Empty by default: punctuation carries
  meaning in code.

Fields read only by the pair miner (``corpus/mine.py``), never by the chunker:

- ``doc_comment``: regex that a ``leading`` comment's text must match (from its start) to be
  documentation: ``///`` and ``/** */`` but not ``//!`` (module docs) in Rust, any ``//`` in Go.
  Empty: the language's comments are never docs.
- ``body_docstring``: the documentation is the first statement of the body when it is a string
  literal (Python), not a comment above the definition.

Fields of the "declarations" splitter (a declaration runs from its keyword line to the next
declaration, scope line or break line):

- ``declaration_keywords``: words that start a declaration; the word after one is its name
  (optional: ``instance : Foo`` is anonymous). The keyword is the chunk's kind.
- ``declaration_prefix``: regex of attributes and modifiers allowed before the keyword.
- ``declaration_breaks``: words that start, at column 0, a top-level command that is not a
  declaration (``open``, ``import``): it ends the declaration before it and is "module" code.
- ``scope_keywords``: word -> whether it qualifies names (``namespace X`` does, ``section``
  does not). ``scope_end`` closes the innermost scope, when followed by its name (or alone,
  for an unnamed scope); any other use of that word is ordinary code.
- ``line_comment``, ``block_comment``: comment syntax. Comment lines and lines matching
  ``leading_lines`` (attributes on a line of their own) glue onto the declaration below them
  when no blank line separates them; nothing inside a block comment starts a declaration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

NameFn = Callable[[Any, bytes], "str | None"]


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    extensions: tuple[str, ...] = ()
    filenames: tuple[str, ...] = ()
    grammar: str | None = None
    definitions: Mapping[str, str] = field(default_factory=dict)
    kind_of: NameFn | None = None
    containers: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()
    leading: frozenset[str] = frozenset()
    name_of: NameFn | None = None
    scope_separator: str = "."
    member_separator: str | None = None
    splitter: str = "tree-sitter"
    declaration_keywords: tuple[str, ...] = ()
    declaration_prefix: str = ""
    declaration_breaks: tuple[str, ...] = ()
    scope_keywords: Mapping[str, bool] = field(default_factory=dict)
    scope_end: str = ""
    line_comment: str = ""
    block_comment: tuple[str, str] | None = None
    leading_lines: str = ""
    skiplist: tuple[str, ...] = ()
    doc_comment: str = ""
    body_docstring: bool = False


def _text(node: Any, src: bytes) -> str:
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def field_name(node: Any, src: bytes) -> str | None:
    """The text of the node's ``name`` field (most grammars)."""
    name = node.child_by_field_name("name")
    return _text(name, src) if name is not None else None


def _child(node: Any, *types: str) -> Any | None:
    """The first named child of one of ``types``."""
    for c in node.named_children:
        if c.type in types:
            return c
    return None


def _child_name(*types: str) -> Callable[[Any, bytes], str | None]:
    """name_of for grammars without a ``name`` field: the name field, else the first child of a type."""

    def name_of(node: Any, src: bytes) -> str | None:
        found = node.child_by_field_name("name") or _child(node, *types)
        return _text(found, src) if found is not None else None

    return name_of


def _with_body(name_of: NameFn, *types: str) -> NameFn:
    """Nodes of ``types`` are chunks only with a ``body``: bare declarations (interface and
    abstract methods) stay in their container's text."""

    def wrapped(node: Any, src: bytes) -> str | None:
        if node.type in types and node.child_by_field_name("body") is None:
            return None
        return name_of(node, src)

    return wrapped


_GENERIC_ARGS = re.compile(r"<[^<>]*>|\[[^\[\]]*\]")


def _strip_generics(name: str) -> str:
    """``Box<T>::set`` -> ``Box::set``; operator names (``operator<<``) are left alone."""
    head, op, tail = name.partition("operator")
    for _ in range(8):
        stripped = _GENERIC_ARGS.sub("", head)
        if stripped == head:
            break
        head = stripped
    stripped = re.sub(r"\s+", "", head) + op + tail
    return stripped or name  # ``[T]`` (a Rust slice) is all brackets: keep it


# Doc comments (``doc_comment``): Javadoc-style blocks; ``///`` lines or those blocks (never
# ``////`` or ``//!``/``/*!`` module docs); any comment in C-family code, where plain comments
# above a function are its documentation as often as Doxygen ones; ``#`` lines (not ``#!``).
_DOC_JAVADOC = r"/\*\*(?![*/])"
_DOC_SLASHES = r"///(?!/)|/\*\*(?![*/])"
_DOC_C = r"/\*|//"
_DOC_HASH = r"#(?!!)"


# --- C, C++, Objective-C -------------------------------------------------------------------

_C_NAME_NODES = frozenset({
    "identifier", "field_identifier", "qualified_identifier", "destructor_name", "operator_name",
    "template_function", "type_identifier", "operator_cast",
})
_C_SPECIFIERS = ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier")


def _c_declarator_name(node: Any, src: bytes) -> str | None:
    """The function name hidden in a C declarator chain (``static char **names(int n)``)."""
    d = node.child_by_field_name("declarator")
    for _ in range(16):
        if d is None:
            return None
        if d.type in _C_NAME_NODES:
            return _strip_generics(_text(d, src))
        nxt = d.child_by_field_name("declarator")
        if nxt is None:  # parenthesized_declarator has no field
            nxt = next((c for c in d.named_children if c.type.endswith(("declarator", "identifier"))), None)
        d = nxt
    return None


def _c_name(node: Any, src: bytes) -> str | None:
    if node.type == "function_definition":
        return _c_declarator_name(node, src)
    if node.type == "type_definition":  # typedef struct { ... } Name;
        t = node.child_by_field_name("type")
        if t is None or t.type not in _C_SPECIFIERS or t.child_by_field_name("body") is None:
            return None
        d = node.child_by_field_name("declarator")
        return _text(d, src) if d is not None and d.type == "type_identifier" else None
    if node.type in _C_SPECIFIERS and node.child_by_field_name("body") is None:
        return None  # a struct used as a type, not defined here
    name = field_name(node, src)
    return _strip_generics(name) if name else None


def _c_kind(node: Any, src: bytes) -> str | None:
    if node.type == "type_definition":
        t = node.child_by_field_name("type")
        return _C_KINDS.get(t.type) if t is not None else None
    if node.type == "function_definition":
        d = node.child_by_field_name("declarator")
        while d is not None and d.type not in _C_NAME_NODES:
            d = d.child_by_field_name("declarator")
        if d is not None and d.type == "qualified_identifier":
            return "method"  # void Box::set(...) defined out of its class
    return None


_C_KINDS = {
    "struct_specifier": "struct", "class_specifier": "class", "union_specifier": "union", "enum_specifier": "enum",
}
_C_DEFINITIONS = {
    "function_definition": "function",
    "struct_specifier": "struct",
    "union_specifier": "union",
    "enum_specifier": "enum",
    "type_definition": "type",
    "preproc_function_def": "macro",
}
_C_LEADING = frozenset({"comment"})


def _objc_name(node: Any, src: bytes) -> str | None:
    if node.type == "method_definition":  # the selector: initWithName:age:
        parts: list[str] = []
        for c in node.named_children:
            if c.type == "identifier":
                parts.append(_text(c, src))
            elif c.type == "method_parameter" and parts:
                parts[-1] += ":"
        return "".join(parts) or None
    if node.type in ("class_interface", "class_implementation", "protocol_declaration"):
        c = _child(node, "identifier")
        return _text(c, src) if c is not None else None
    return _c_name(node, src)


# --- Rust, Go, Swift, Ruby -----------------------------------------------------------------


def _type_base(node: Any, src: bytes) -> str:
    """``Wrapper<T>`` -> ``Wrapper``, ``fmt::Display`` -> ``Display``, ``*Server`` -> ``Server``."""
    for _ in range(8):
        if node.type in ("generic_type", "pointer_type", "reference_type", "parenthesized_type"):
            inner = node.child_by_field_name("type") or (node.named_children[0] if node.named_children else None)
            if inner is None:
                break
            node = inner
        elif node.type in ("scoped_type_identifier", "qualified_type") and node.child_by_field_name("name"):
            node = node.child_by_field_name("name")
        else:
            break
    return _strip_generics(_text(node, src))


def _rust_name(node: Any, src: bytes) -> str | None:
    if node.type == "impl_item":  # impl Type / impl Trait for Type: methods are Type::method
        t = node.child_by_field_name("type")
        return _type_base(t, src) if t is not None else None
    return field_name(node, src)


def _go_name(node: Any, src: bytes) -> str | None:
    if node.type == "method_declaration":  # func (s *Server) Start() -> Server.Start
        recv = node.child_by_field_name("receiver")
        param = _child(recv, "parameter_declaration") if recv is not None else None
        rtype = param.child_by_field_name("type") if param is not None else None
        name = field_name(node, src)
        if rtype is None or not name:
            return name
        return f"{_type_base(rtype, src)}.{name}"
    if node.type == "type_declaration":  # one spec: the declaration is the chunk; a group: each spec
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
        return field_name(specs[0], src) if len(specs) == 1 else None
    return field_name(node, src)


def _go_kind(node: Any, src: bytes) -> str | None:
    if node.type == "type_declaration":
        node = _child(node, "type_spec", "type_alias")
    t = node.child_by_field_name("type") if node is not None else None
    return {"struct_type": "struct", "interface_type": "interface"}.get(t.type) if t is not None else None


_SWIFT_NAMES = {"init_declaration": "init", "deinit_declaration": "deinit", "subscript_declaration": "subscript"}


def _swift_name(node: Any, src: bytes) -> str | None:
    if node.type in _SWIFT_NAMES:
        return _SWIFT_NAMES[node.type]
    name = node.child_by_field_name("name")
    return _type_base(name, src) if name is not None else None


def _swift_kind(node: Any, src: bytes) -> str | None:
    k = node.child_by_field_name("declaration_kind")
    if k is None:
        return None
    word = _text(k, src)
    return "class" if word == "actor" else word


# --- JavaScript, TypeScript ----------------------------------------------------------------

_JS_FUNCTIONS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})


def _js_name(node: Any, src: bytes) -> str | None:
    """Functions bound to names: ``const f = () => {}``, class fields ``h = () => 1`` and
    ``Foo.prototype.bar = function () {}`` (named ``Foo.bar``)."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        decls = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(decls) != 1:
            return None
        value, name = decls[0].child_by_field_name("value"), decls[0].child_by_field_name("name")
        if value is None or value.type not in _JS_FUNCTIONS or name is None or name.type != "identifier":
            return None
        return _text(name, src)
    if node.type in ("field_definition", "public_field_definition"):
        value = node.child_by_field_name("value")
        name = node.child_by_field_name("property") or node.child_by_field_name("name")
        if value is None or value.type not in _JS_FUNCTIONS or name is None:
            return None
        return _text(name, src)
    if node.type == "expression_statement":
        assign = _child(node, "assignment_expression")
        if assign is None:
            return None
        left, right = assign.child_by_field_name("left"), assign.child_by_field_name("right")
        if left is None or right is None or right.type not in _JS_FUNCTIONS or left.type != "member_expression":
            return None
        return _text(left, src).replace(".prototype.", ".")
    if node.type == "module":  # declare module "name" { ... }
        name = field_name(node, src)
        return name.strip("'\"") if name else None
    return field_name(node, src)


def _js_kind(node: Any, src: bytes) -> str | None:
    if node.type == "expression_statement":  # Foo.prototype.bar = function () {}
        assign = _child(node, "assignment_expression")
        left = assign.child_by_field_name("left") if assign is not None else None
        if left is not None and ".prototype." in _text(left, src):
            return "method"
    return None


_JS_DEFINITIONS = {
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "method_definition": "function",
    "field_definition": "function",
    "lexical_declaration": "function",
    "variable_declaration": "function",
    "expression_statement": "function",
}
_TS_DEFINITIONS = {
    **_JS_DEFINITIONS,
    "abstract_class_declaration": "class",
    "public_field_definition": "function",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "internal_module": "namespace",
    "module": "namespace",
}


def _js_row(name: str, extensions: tuple[str, ...], grammar: str, typed: bool) -> LanguageSpec:
    """JavaScript and the two TypeScript grammars share one row shape."""
    definitions = _TS_DEFINITIONS if typed else _JS_DEFINITIONS
    namespaces = frozenset({"internal_module", "module"} if typed else ())
    return LanguageSpec(
        name=name,
        extensions=extensions,
        grammar=grammar,
        definitions=definitions,
        kind_of=_js_kind,
        containers=frozenset({"class_declaration", "abstract_class_declaration"} & set(definitions)) | namespaces,
        namespaces=namespaces,
        wrappers=frozenset({"export_statement", "ambient_declaration"}),
        leading=frozenset({"comment", "decorator"}),
        name_of=_js_name,
        doc_comment=_DOC_JAVADOC,
    )


# Rows are kept sorted by name. A new language is one row here plus fixtures in
# tests/corpus/fixtures/<lang>/ (see docs/architecture.md).
LANGUAGES: tuple[LanguageSpec, ...] = (
    LanguageSpec(
        name="bash",
        extensions=(".sh", ".bash", ".zsh", ".ksh"),
        grammar="bash",
        definitions={"function_definition": "function"},
        leading=frozenset({"comment"}),
        doc_comment=_DOC_HASH,
    ),
    LanguageSpec(
        name="c",
        extensions=(".c", ".h"),  # .h is ambiguous; C is the common case and C++ parses passably
        grammar="c",
        definitions=_C_DEFINITIONS,
        kind_of=_c_kind,
        leading=_C_LEADING,
        name_of=_c_name,
        doc_comment=_DOC_C,
    ),
    LanguageSpec(
        name="cpp",
        extensions=(
            ".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx", ".h++", ".ipp", ".tpp", ".inl", ".cu", ".cuh",
        ),
        grammar="cpp",
        definitions={**_C_DEFINITIONS, "class_specifier": "class", "namespace_definition": "namespace"},
        kind_of=_c_kind,
        containers=frozenset({"class_specifier", "struct_specifier", "union_specifier", "namespace_definition"}),
        namespaces=frozenset({"namespace_definition"}),
        wrappers=frozenset({"template_declaration"}),
        leading=_C_LEADING,
        name_of=_c_name,
        scope_separator="::",
        doc_comment=_DOC_C,
    ),
    LanguageSpec(
        name="csharp",
        extensions=(".cs", ".csx"),
        grammar="csharp",
        definitions={
            "class_declaration": "class",
            "struct_declaration": "struct",
            "record_declaration": "class",
            "interface_declaration": "interface",
            "enum_declaration": "enum",
            "method_declaration": "function",
            "constructor_declaration": "function",
            "destructor_declaration": "function",
        },
        containers=frozenset({
            "class_declaration", "struct_declaration", "record_declaration", "interface_declaration",
        }),
        leading=frozenset({"comment"}),
        name_of=_with_body(field_name, "method_declaration"),
        doc_comment=_DOC_SLASHES,
    ),
    LanguageSpec(
        name="css",
        extensions=(".css", ".scss", ".sass", ".less"),
        splitter="lines",
    ),
    LanguageSpec(
        name="go",
        extensions=(".go",),
        grammar="go",
        definitions={
            "function_declaration": "function",
            "method_declaration": "method",
            "type_declaration": "type",
            "type_spec": "type",
            "type_alias": "type",
        },
        kind_of=_go_kind,
        leading=frozenset({"comment"}),
        name_of=_go_name,
        doc_comment=r"//(?!go:|line |\s*\+build|nolint)|/\*",  # directives are not docs
    ),
    LanguageSpec(
        name="html",
        extensions=(".html", ".htm", ".xhtml", ".vue", ".svelte"),
        splitter="lines",
    ),
    LanguageSpec(
        name="java",
        extensions=(".java",),
        grammar="java",
        definitions={
            "class_declaration": "class",
            "interface_declaration": "interface",
            "annotation_type_declaration": "interface",
            "enum_declaration": "enum",
            "record_declaration": "class",
            "method_declaration": "function",
            "constructor_declaration": "function",
        },
        containers=frozenset({"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}),
        leading=frozenset({"block_comment", "line_comment"}),
        name_of=_with_body(field_name, "method_declaration"),
        doc_comment=_DOC_JAVADOC,
    ),
    _js_row("javascript", (".js", ".mjs", ".cjs", ".jsx"), "javascript", typed=False),
    LanguageSpec(
        name="kotlin",
        extensions=(".kt", ".kts"),
        grammar="kotlin",
        definitions={
            "class_declaration": "class",
            "object_declaration": "class",
            "companion_object": "class",
            "function_declaration": "function",
        },
        containers=frozenset({"class_declaration", "object_declaration", "companion_object"}),
        leading=frozenset({"line_comment", "multiline_comment"}),
        name_of=_child_name("type_identifier", "simple_identifier"),
        doc_comment=_DOC_JAVADOC,
    ),
    LanguageSpec(
        name="lean",
        extensions=(".lean",),
        splitter="declarations",  # no Lean grammar ships offline
        declaration_keywords=(
            "def", "theorem", "lemma", "structure", "class inductive", "class", "instance", "inductive",
            "abbrev", "axiom", "example", "opaque", "macro_rules", "macro", "syntax", "notation", "elab",
        ),
        declaration_prefix=(
            r"(?:@\[[^\]]*\]\s*)*"
            r"(?:(?:private|protected|noncomputable|partial|unsafe|nonrec|scoped|local)\s+)*"
        ),
        declaration_breaks=(
            "import", "open", "variable", "universe", "set_option", "attribute", "export", "mutual",
            "#eval", "#check", "#print", "#reduce", "#synth", "#guard",
        ),
        scope_keywords={"namespace": True, "section": False, "noncomputable section": False},
        scope_end="end",
        line_comment="--",
        block_comment=("/-", "-/"),
        leading_lines=r"^\s*@\[[^\]]*\]\s*$|^(?:open|set_option)\b.*\bin\s*$",
        doc_comment=r"/--",
    ),
    LanguageSpec(
        name="lua",
        extensions=(".lua",),
        grammar="lua",
        definitions={"function_declaration": "function"},
        leading=frozenset({"comment"}),
        doc_comment=r"--",
    ),
    LanguageSpec(
        name="markdown",
        extensions=(".md", ".markdown", ".mdx"),
        splitter="headings",
    ),
    LanguageSpec(
        name="objc",
        extensions=(".m", ".mm"),
        grammar="objc",
        definitions={
            **_C_DEFINITIONS,
            "class_interface": "class",
            "class_implementation": "impl",
            "protocol_declaration": "protocol",
            "method_definition": "method",
        },
        kind_of=_c_kind,
        containers=frozenset({"class_interface", "class_implementation", "protocol_declaration"}),
        wrappers=frozenset({"implementation_definition"}),
        leading=_C_LEADING,
        name_of=_objc_name,
        doc_comment=_DOC_C,
    ),
    LanguageSpec(
        name="php",
        extensions=(".php",),
        grammar="php",
        definitions={
            "function_definition": "function",
            "class_declaration": "class",
            "interface_declaration": "interface",
            "trait_declaration": "trait",
            "enum_declaration": "enum",
            "method_declaration": "function",
        },
        containers=frozenset({"class_declaration", "interface_declaration", "trait_declaration", "enum_declaration"}),
        leading=frozenset({"comment"}),
        name_of=_with_body(field_name, "method_declaration"),
        scope_separator="::",
        doc_comment=_DOC_JAVADOC,
    ),
    LanguageSpec(
        name="python",
        extensions=(".py", ".pyi", ".pyw"),
        grammar="python",
        definitions={
            "function_definition": "function",
            "class_definition": "class",
        },
        containers=frozenset({"class_definition"}),
        wrappers=frozenset({"decorated_definition"}),
        # No ``leading``: a Python definition starts at its first decorator, never at a comment.
        body_docstring=True,
    ),
    LanguageSpec(
        name="ruby",
        extensions=(".rb", ".rake", ".gemspec", ".ru"),
        filenames=("Gemfile", "Rakefile", "Vagrantfile"),
        grammar="ruby",
        definitions={
            "class": "class",
            "module": "module",
            "method": "function",
            "singleton_method": "function",
        },
        containers=frozenset({"class", "module"}),
        leading=frozenset({"comment"}),
        scope_separator="::",
        member_separator=".",
        doc_comment=_DOC_HASH,
    ),
    LanguageSpec(
        name="rust",
        extensions=(".rs",),
        grammar="rust",
        definitions={
            "function_item": "function",
            "struct_item": "struct",
            "union_item": "union",
            "enum_item": "enum",
            "trait_item": "trait",
            "impl_item": "impl",
            "mod_item": "module",
            "type_item": "type",
            "macro_definition": "macro",
        },
        containers=frozenset({"impl_item", "trait_item", "mod_item"}),
        namespaces=frozenset({"mod_item"}),
        leading=frozenset({"line_comment", "block_comment", "attribute_item"}),
        name_of=_rust_name,
        scope_separator="::",
        doc_comment=_DOC_SLASHES,
    ),
    LanguageSpec(
        name="scala",
        extensions=(".scala", ".sc"),
        grammar="scala",
        definitions={
            "class_definition": "class",
            "object_definition": "class",
            "trait_definition": "trait",
            "enum_definition": "enum",
            "function_definition": "function",
        },
        containers=frozenset({"class_definition", "object_definition", "trait_definition", "enum_definition"}),
        leading=frozenset({"comment", "block_comment"}),
        doc_comment=_DOC_JAVADOC,
    ),
    LanguageSpec(
        name="sql",
        extensions=(".sql",),
        splitter="lines",
    ),
    LanguageSpec(
        name="swift",
        extensions=(".swift",),
        grammar="swift",
        definitions={
            "class_declaration": "class",
            "protocol_declaration": "protocol",
            "function_declaration": "function",
            "init_declaration": "function",
            "deinit_declaration": "function",
            "subscript_declaration": "function",
            "typealias_declaration": "type",
        },
        kind_of=_swift_kind,
        containers=frozenset({"class_declaration", "protocol_declaration"}),
        leading=frozenset({"comment", "multiline_comment"}),
        name_of=_swift_name,
        doc_comment=_DOC_SLASHES,
    ),
    LanguageSpec(
        name="text",
        extensions=(
            ".txt", ".text", ".rst", ".adoc", ".cfg", ".ini", ".toml", ".yaml", ".yml", ".json",
            ".proto", ".graphql", ".gql", ".cmake", ".gradle", ".tf", ".hcl", ".nix",
        ),
        filenames=("README", "LICENSE", "Makefile", "Dockerfile"),
        splitter="lines",
    ),
    _js_row("tsx", (".tsx",), "tsx", typed=True),
    _js_row("typescript", (".ts", ".mts", ".cts"), "typescript", typed=True),
)

_BY_NAME: dict[str, LanguageSpec] = {spec.name: spec for spec in LANGUAGES}
_BY_EXTENSION: dict[str, LanguageSpec] = {}
_BY_FILENAME: dict[str, LanguageSpec] = {}
for _spec in LANGUAGES:
    for _ext in _spec.extensions:
        _BY_EXTENSION.setdefault(_ext.lower(), _spec)
    for _fname in _spec.filenames:
        _BY_FILENAME.setdefault(_fname, _spec)


def language_names() -> list[str]:
    """Every language name, sorted (the values ``-t/--type`` accepts)."""
    return sorted(_BY_NAME)


def get_language(name: str) -> LanguageSpec | None:
    return _BY_NAME.get(name)


def detect_language(path: str) -> LanguageSpec | None:
    """The row for a file name, or None when the file is not of a known language.

    >>> detect_language("src/app/models.py").name
    'python'
    >>> detect_language("include/point.h").name
    'c'
    >>> detect_language("photo.jpeg") is None
    True
    """
    p = PurePosixPath(path)
    return _BY_FILENAME.get(p.name) or _BY_EXTENSION.get(p.suffix.lower())
