"""Index-time encoding with documents laid end to end (``TorchBackend.forward_flat``, the default on
CUDA): the same document vectors as the padded batches, for every encoder family it covers, and
the padded path for the rest. On a CPU the varlen attention is the torch reference; the Triton
kernels themselves are checked in tests/train/test_t5_varlen.py."""

from __future__ import annotations

import numpy as np
import pytest

from supergrep.encoder import Encoder, resolve_model

DOCS = [
    "def add(a, b):\n    return a + b",
    "x",
    "",
    "class Stack:\n    def push(self, item):\n        self.items.append(item), self.size += 1.",
    "SELECT name FROM users WHERE id = ?; -- look up one user by id, then return the name",
    " ".join(f"word{i}" for i in range(60)),  # longer than the T5 zoo's 32-token relative buckets
]


def _encoders(path, varlen_batch_tokens: int):
    spec = resolve_model(path)
    padded = Encoder(spec, device="cpu", batch_tokens=256)
    assert not padded.backend.varlen  # CPU default: the padded path
    flat = Encoder(spec, device="cpu", batch_tokens=varlen_batch_tokens)
    flat.backend.varlen = True  # the varlen path on a CPU (SUPERGREP_ENCODE_VARLEN=1 does the same)
    return padded, flat


@pytest.mark.parametrize("name", ["bert", "roberta", "t5-encoder-json-safetensors", "t5-full-json-bin", "supergrep"])
@pytest.mark.parametrize("batch_tokens", [40, 4096])  # many calls (one document each at 40) / one call
def test_flat_documents_equal_padded(zoo, name, batch_tokens):
    padded, flat = _encoders(zoo.path(name), batch_tokens)
    calls = []
    real = flat.backend.submit_flat
    flat.backend.submit_flat = lambda ids, lengths: calls.append(list(lengths)) or real(ids, lengths)
    done = []
    want = padded.encode_documents(DOCS)
    got = flat.encode_documents(DOCS, progress=done.append)
    assert calls, "the flat path was not taken"
    assert sum(done) == len(DOCS)
    assert all(sum(c) <= batch_tokens or len(c) == 1 for c in calls)
    assert [c for call in calls for c in call] == sorted((c for call in calls for c in call), reverse=True)
    for w, g in zip(want, got, strict=True):
        assert g.dtype == np.float32 and g.shape == w.shape
        if len(w):
            np.testing.assert_allclose(g, w, atol=2e-5)
            np.testing.assert_allclose(np.linalg.norm(g, axis=1), 1.0, atol=1e-5)
    assert got[2].shape == (0, flat.dim) or len(want[2]) == len(got[2])


def test_skiplist_applies_on_the_flat_path(zoo):
    padded, flat = _encoders(zoo.path("supergrep"), 4096)  # its skiplist drops "," and "."
    doc = ["a, b. c, d."]
    got = flat.encode_documents(doc)[0]
    assert len(got) == len(padded.encode_documents(doc)[0]) < flat.count_tokens(doc)[0]


def test_queries_stay_padded(zoo):
    """Queries keep the padded path: expansion tokens get vectors at positions a varlen layout has not."""
    padded, flat = _encoders(zoo.path("bert"), 4096)
    flat.backend.forward_flat = flat.backend.submit_flat = None  # would raise if called
    for w, g in zip(padded.encode_queries(["add two numbers"]), flat.encode_queries(["add two numbers"]), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)


def test_only_supported_families_choose_varlen(zoo, monkeypatch):
    from supergrep.backends.torch_backend import TorchBackend

    monkeypatch.setenv("SUPERGREP_ENCODE_VARLEN", "1")
    assert TorchBackend(resolve_model(zoo.path("bert")), device="cpu").varlen
    assert TorchBackend(resolve_model(zoo.path("t5-modules")), device="cpu").varlen
    assert not TorchBackend(resolve_model(zoo.path("mpnet")), device="cpu").varlen  # bucketed bias: padded
    monkeypatch.setenv("SUPERGREP_ENCODE_VARLEN", "0")
    assert not TorchBackend(resolve_model(zoo.path("bert")), device="cpu").varlen


def test_backends_without_submit_use_forward_flat(zoo):
    """The encoder's contract with a backend is ``forward_flat``; ``submit_flat`` is an optional
    overlap of device and host work."""
    padded, flat = _encoders(zoo.path("t5-encoder-json-safetensors"), 100)
    want = padded.encode_documents(DOCS)
    backend = flat.backend

    class Plain:  # a backend with forward_flat only
        varlen, dim = True, backend.dim

        def forward_flat(self, ids, lengths):
            return backend.forward_flat(ids, lengths)

    flat.backend = Plain()
    for w, g in zip(want, flat.encode_documents(DOCS), strict=True):
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_compiling_the_flat_forward_waits_until_it_pays(zoo, monkeypatch):
    from supergrep.backends import torch_backend as tb

    be = tb.TorchBackend(resolve_model(zoo.path("bert")), device="cpu", varlen=True)
    assert be._compile_threshold(None) is None  # CPU: never by default
    be.device = "cuda:0"
    assert be._compile_threshold(None) is None  # BERT: measured slower compiled
    be._t5 = True
    assert be._compile_threshold(None) == tb.COMPILE_AFTER  # T5 on CUDA: once it pays
    be._t5 = False
    assert be._compile_threshold(True) == 0 and be._compile_threshold(False) is None
    monkeypatch.setenv("SUPERGREP_ENCODE_COMPILE", "1")
    assert be._compile_threshold(None) == 0
    monkeypatch.setenv("SUPERGREP_ENCODE_COMPILE", "0")
    assert be._compile_threshold(None) is None
    be.device = "cpu"
    # past the threshold the next batch runs compiled (torch.compile stubbed: no compiler needed here)
    compiled = []
    monkeypatch.setattr(tb.torch, "compile", lambda fn, **kw: compiled.append(kw) or fn)
    be._flat_compile_after = 10
    ids = np.arange(5, 13)
    be.forward_flat(ids, np.array([8]))
    assert not compiled and be._flat_tokens == 8
    be.forward_flat(ids, np.array([5, 3]))
    assert len(compiled) == 1 and compiled[0]["dynamic"] is True and compiled[0]["mode"] is None
    assert be._flat_compile_after is None
    be.forward_flat(ids, np.array([8]))
    assert len(compiled) == 1  # once


def test_a_failing_compiled_forward_falls_back_to_eager(zoo, caplog):
    be = Encoder(resolve_model(zoo.path("t5-modules")), device="cpu").backend
    be.varlen = True
    want = be.forward_flat(np.arange(3, 13), np.array([6, 4]))

    def broken(*_a, **_k):
        raise RuntimeError("InductorError: no C compiler")

    be._flat = broken
    got = be.forward_flat(np.arange(3, 13), np.array([6, 4]))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert be._flat == be._flat_impl and "encoding eagerly" in caplog.text


def test_a_first_batch_that_cannot_run_falls_back_to_padding(zoo, caplog):
    padded, flat = _encoders(zoo.path("bert"), 40)
    calls = []

    def broken(ids, lengths):
        calls.append(len(lengths))
        raise RuntimeError("triton: no kernel image for this GPU")

    flat.backend.submit_flat = broken
    done = []
    got = flat.encode_documents(DOCS, progress=done.append)
    assert calls == [1] and not flat.backend.varlen and "padded batches" in caplog.text
    assert sum(done) == len(DOCS)  # nothing counted twice
    for w, g in zip(padded.encode_documents(DOCS), got, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)


def test_the_second_batch_is_queued_before_the_first_is_awaited_and_its_errors_still_fall_back(zoo, caplog):
    """A device error of the first batch surfaces in its result() (CUDA reports kernel faults
    asynchronously): by then the second batch is queued (the GPU never idles for its launch), and
    the run still falls back to padded batches with nothing counted twice."""
    padded, flat = _encoders(zoo.path("bert"), 40)  # several batches
    real = flat.backend.submit_flat
    log = []

    class Failing:
        def result(self):
            log.append("result 0")
            raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    def submit(ids, lengths):
        log.append(f"submit {len(log)}")
        return Failing() if len(log) == 1 else real(ids, lengths)

    flat.backend.submit_flat = submit
    done = []
    got = flat.encode_documents(DOCS, progress=done.append)
    assert log[:3] == ["submit 0", "submit 1", "result 0"]
    assert not flat.backend.varlen and "padded batches" in caplog.text and sum(done) == len(DOCS)
    for w, g in zip(padded.encode_documents(DOCS), got, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)


def test_a_later_batch_failure_is_not_hidden(zoo):
    _, flat = _encoders(zoo.path("bert"), 40)  # several batches
    real = flat.backend.submit_flat
    calls = []

    def flaky(ids, lengths):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(ids, lengths)

    flat.backend.submit_flat = flaky
    with pytest.raises(RuntimeError, match="illegal memory access"):
        flat.encode_documents(DOCS)


def test_index_and_search_give_the_same_results_without_padding(sample_project, tiny_model, tmp_path, monkeypatch):
    """As a user on a GPU gets it (forced on a CPU here): `index` through the flat path, then
    `search`, ranks and scores as the padded path does."""
    import json

    from cli_runner import run_main

    def index_and_search(varlen: str, where) -> list:
        monkeypatch.setenv("SUPERGREP_ENCODE_VARLEN", varlen)
        model = ["--model-path", str(tiny_model), "--index-dir", str(where), "--direct"]
        assert run_main(["index", sample_project, *model[:4]]).exit_code == 0
        r = run_main(["search", "retry with backoff", sample_project, "--json", "-n", "5", *model])
        assert r.exit_code == 0, r.output
        return [(x["path"], x["start_line"], round(x["score"], 4)) for x in json.loads(r.stdout)["results"]]

    from supergrep.backends.torch_backend import TorchBackend

    calls = []
    real = TorchBackend.submit_flat
    monkeypatch.setattr(TorchBackend, "submit_flat", lambda self, *a: calls.append(1) or real(self, *a))
    padded = index_and_search("0", tmp_path / "padded")
    assert not calls
    flat = index_and_search("1", tmp_path / "flat")
    assert calls  # the documents went through the flat path
    assert padded and flat == padded


def test_flat_batches_are_the_greedy_longest_first_packing():
    """The vectorised packing gives what a plain greedy loop over the stable longest-first order
    gives: empty items left out, an over-long item alone, ties in input order."""
    from supergrep.encoder.encoder import flat_batches

    def greedy(lengths, limit):
        batches, total = [], 0
        for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
            if not lengths[i]:
                continue
            if batches and total + lengths[i] <= limit:
                batches[-1].append(i)
                total += lengths[i]
            else:
                batches.append([i])
                total = lengths[i]
        return batches

    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(0, int(rng.integers(1, 600)), int(rng.integers(0, 300))).tolist()
        limit = int(rng.integers(1, 2000))
        assert flat_batches(lengths, limit) == greedy(lengths, limit)
    assert flat_batches([], 10) == [] and flat_batches([0, 0], 10) == [] and flat_batches([50, 3], 10) == [[0], [1]]


@pytest.mark.parametrize("name", ["bert", "t5-encoder-json-safetensors"])
def test_compiled_flat_forward_takes_constants_as_constants(zoo, name, monkeypatch):
    """The compiled flat forward (`set_flat_mode("compile")`) specialises Python floats (an
    attention scale, T5's bucket arithmetic): unspecialised, Dynamo passes them in as 0-d CPU
    tensors, copied to the device on every call (backends/torch_compile.py)."""
    import torch

    seen: list[list] = []

    def record(gm, example_inputs):
        seen.append(list(example_inputs))
        return gm.forward

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, **{**kw, "backend": record}))
    _, flat = _encoders(zoo.path(name), 4096)
    flat.backend.set_flat_mode("compile")
    got = flat.encode_documents(DOCS)
    assert seen and len(got) == len(DOCS)
    scalars = [x for g in seen for x in g if torch.is_tensor(x) and x.ndim == 0]
    assert not scalars, f"{len(scalars)} 0-d tensor inputs: floats reached the graphs as tensors"
