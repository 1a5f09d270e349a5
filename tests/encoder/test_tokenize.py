"""RoleTokenizer: the same ids as the model's own tokenizer, prefixes where the model expects
them, truncation, counts, skiplist; and the fast path for big batches."""

from __future__ import annotations

import dataclasses

import pytest

from supergrep.encoder.spec import resolve_model
from supergrep.encoder.tokenize import RoleTokenizer
from supergrep.errors import ModelError
from tiny_models import T5_MODELS, hf_tokenizer

TEXTS = [
    "def parse_config(path):\n    return json.load(open(path))",
    "  class Index:   ",
    "x = a[0] + b.value  # read, then write!",
    "",
    "search the vector index for a query token " * 12,
]


def _spec(zoo, name, **settings):
    spec = resolve_model(zoo.path(name))
    return dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, **settings)) if settings else spec


@pytest.mark.parametrize("name", ["bert", "mpnet", "roberta", *T5_MODELS])
def test_same_ids_as_the_models_tokenizer(zoo, name):
    """No prefix: exactly tokenizer(text.strip(), truncation=True, max_length=n)."""
    spec = _spec(zoo, name, document_max_tokens=16, query_max_tokens=8)
    rt = RoleTokenizer(spec)
    hf = hf_tokenizer(spec.transformer_path)
    stripped = [t.strip() for t in TEXTS]
    for role, n in (("document", 16), ("query", 8)):
        want = hf(stripped, truncation=True, max_length=n)["input_ids"]
        assert rt(TEXTS, role) == want
    full = hf(stripped)["input_ids"]
    assert rt.count(TEXTS, "document") == [len(x) for x in full]
    assert max(rt.count(TEXTS, "document")) > 16  # counts are not truncated


@pytest.mark.parametrize("name", ["t5-encoder-spiece-bin", "t5-full-json-bin"])
def test_t5_ids_match_sentencepiece(zoo, name):
    """The spiece.model-only tokenizer (and XTR's tokenizer.json) tokenise like sentencepiece
    itself, with T5's </s> (id 1) at the end and no leading special token."""
    import sentencepiece as spm

    spec = resolve_model(zoo.path(name))
    rt = RoleTokenizer(spec)
    sp = spm.SentencePieceProcessor(model_file=str(spec.transformer_path / "spiece.model"))
    texts = ["def parse config path return json load", "class Index: search(query)"]
    assert rt(texts, "document") == [sp.encode(t) + [1] for t in texts]
    assert rt._lead == [] and rt._trail == [1]
    assert rt.pad_id == 0
    assert rt.mask_id == 1  # T5 has no mask token: EOS, as PyLate does


def test_pylate_prefix_token_after_cls(zoo):
    """PyLate inserts the "[Q] "/"[D] " token id right after [CLS] and truncates the text to
    length - 1 (pylate/models/colbert.py: insert_prefix_token)."""
    spec = resolve_model(zoo.path("pylate"))
    rt = RoleTokenizer(spec)
    hf = hf_tokenizer(spec.transformer_path)
    q_id, d_id = hf.convert_tokens_to_ids("[Q] "), hf.convert_tokens_to_ids("[D] ")
    assert q_id != d_id and hf.unk_token_id not in (q_id, d_id)
    for role, prefix_id, n in (("query", q_id, 12), ("document", d_id, 20)):
        ids = rt(TEXTS, role)
        for text, got in zip(TEXTS, ids, strict=True):
            plain = hf(text.strip(), truncation=True, max_length=n - 1)["input_ids"]
            assert got == plain[:1] + [prefix_id] + plain[1:]  # PyLate's reference
            assert got[0] == hf.cls_token_id and got[1] == prefix_id and got[-1] == hf.sep_token_id
            assert len(got) <= n
    assert rt.count(["a b c"], "query") == [len(hf("a b c")["input_ids"]) + 1]
    assert rt.mask_id == hf.mask_token_id and rt.pad_id == hf.pad_token_id


def test_text_prompt_is_tokenised_with_the_text(zoo):
    """sentence-transformers prompts ("query: ") are text put before the text."""
    spec = resolve_model(zoo.path("st"))
    rt = RoleTokenizer(spec)
    hf = hf_tokenizer(spec.transformer_path)
    q = rt(["open file"], "query")[0]
    d = rt(["open file"], "document")[0]
    assert q == hf("query: open file")["input_ids"]
    assert d == hf("passage: open file")["input_ids"]
    prompt = hf("query:", add_special_tokens=False)["input_ids"]
    assert q[0] == hf.cls_token_id and q[1:1 + len(prompt)] == prompt


def test_t5_prefix_goes_first(zoo):
    spec = _spec(zoo, "t5-encoder-json-safetensors", query_prefix="query: ")
    rt = RoleTokenizer(spec)
    hf = hf_tokenizer(spec.transformer_path)
    assert rt(["open file"], "query") == [hf("query: open file")["input_ids"]]


def test_token_like_prefix_in_base_vocab(zoo):
    """A prefix written like a token that the vocabulary has ([unused0]-style) is one id."""
    spec = _spec(zoo, "bert", query_prefix="[MASK]", document_prefix="[D] ")
    rt = RoleTokenizer(spec)
    hf = hf_tokenizer(spec.transformer_path)
    assert rt(["open file"], "query")[0][:2] == [hf.cls_token_id, hf.mask_token_id]
    # "[D] " is not in this vocabulary: it is text
    assert rt(["open file"], "document")[0] == hf("[D] open file")["input_ids"]


def test_truncation_keeps_prefix_and_final_special(zoo):
    spec = resolve_model(zoo.path("pylate"))
    rt = RoleTokenizer(spec)
    long = "search index " * 50
    ids = rt([long], "document")[0]
    assert len(ids) == 20 and ids[-1] == rt.tok.sep_token_id and ids[1] == rt.tok.convert_tokens_to_ids("[D] ")
    assert rt.count([long], "document")[0] == 100 + 3


def test_skiplist_ids(zoo):
    spec = _spec(zoo, "bert", skiplist=(",", ".", "no-such-token", "[UNK]"))
    rt = RoleTokenizer(spec)
    hf = hf_tokenizer(spec.transformer_path)
    assert rt.skip_ids == {hf.convert_tokens_to_ids(","), hf.convert_tokens_to_ids("."), hf.unk_token_id}


def test_no_room_for_text_is_an_error(zoo):
    spec = _spec(zoo, "pylate", query_max_tokens=3)
    with pytest.raises(ModelError, match="query_max_tokens=3 leaves no room"):
        RoleTokenizer(spec)


def test_tokenizer_json_truncation_and_padding_are_ignored():
    """MiniLM's tokenizer.json switches on truncation (128) and padding: counts must not be
    capped by it, and ids must not be padded."""
    rt = RoleTokenizer(resolve_model(None))
    long = "word " * 300
    assert rt.count([long], "document") == [302]
    assert rt([long], "document")[0] == [101] + [2773] * 254 + [102]
    rt.tok(["x"], truncation=True, max_length=5)  # the wrapper leaves truncation on...
    assert rt.count([long], "document") == [302]  # ...and it still does not apply
    assert rt(["hi"], "query") == [[101, 7632, 102]]


def test_big_batches_use_the_rust_tokenizer_directly(zoo, monkeypatch):
    """count() and __call__ make one backend call per batch, never the per-call wrapper."""
    rt = RoleTokenizer(resolve_model(zoo.path("pylate")))
    want_ids, want_counts = rt(TEXTS * 3, "document"), rt.count(TEXTS * 3, "document")

    def boom(*a, **k):
        raise AssertionError("transformers' __call__ used")

    monkeypatch.setattr(type(rt.tok), "__call__", boom)
    calls = []
    backend = rt._fast
    real = backend.encode_batch_fast

    class Spy:
        def __getattr__(self, name):
            return getattr(backend, name)

        def encode_batch_fast(self, texts, **kw):
            calls.append(len(texts))
            return real(texts, **kw)

    rt._fast = Spy()
    texts = [f"def f{i}(x): return x + {i}" for i in range(3000)]
    counts = rt.count(texts, "document")
    ids = rt(texts, "document")  # reuses what count() tokenised
    assert calls == [3000]
    assert all(len(x) == n for x, n in zip(ids, counts, strict=True))
    assert rt(texts, "document") == ids and calls == [3000, 3000]  # the cache was used up
    assert not any(t in rt._cache for t in texts)
    assert rt(TEXTS * 3, "document") == want_ids and rt.count(TEXTS * 3, "document") == want_counts


def test_count_cache_is_bounded_and_role_safe(zoo, monkeypatch):
    import supergrep.encoder.tokenize as tokenize_mod

    monkeypatch.setattr(tokenize_mod, "CACHE_TOKENS", 200)
    rt = RoleTokenizer(resolve_model(zoo.path("st")))
    texts = [f"open file number {i}" for i in range(100)]
    counts = rt.count(texts, "document")
    assert 0 < rt._cached_tokens <= 200 and len(rt._cache) < 100
    fresh = RoleTokenizer(resolve_model(zoo.path("st")))
    assert rt(texts, "document") == fresh(texts, "document")
    assert [len(x) for x in rt(texts, "document")] == counts
    # the document prompt is part of the cached string: queries never see document ids
    rt.count(texts, "document")
    assert rt(texts[:3], "query") == fresh(texts[:3], "query")


def test_bad_tokenizer_files_are_a_model_error(zoo, tmp_path):
    import shutil

    path = tmp_path / "m"
    shutil.copytree(zoo.path("bert"), path)
    (path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot load the tokenizer") as err:
        RoleTokenizer(resolve_model(path))
    assert "\n" not in str(err.value)
