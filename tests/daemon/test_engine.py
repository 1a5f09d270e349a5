"""The daemon's engine in-process: searches like the direct path, a watcher that keeps the
index current (create, modify, delete, rename, directories), and survival of a deleted root,
a damaged index and failing updates."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from conftest import wait_for
from supergrep.config import load_config
from supergrep.daemon import registry
from supergrep.daemon.engine import Engine
from supergrep.index.project import Index
from supergrep.index.search import Searcher


@pytest.fixture
def engine():
    e = Engine(load_config(None))
    e.start()
    yield e
    e.stop()


def lexical(engine, root, query, **kw):
    return engine.handle({"op": "search", "query": query, "path": str(root), "cwd": str(root), "mode": "lexical",
                          "register": False, **kw})


def found(engine, root, query):
    answer = lexical(engine, root, query)
    assert answer["ok"], answer
    return sorted({r["path"] for r in answer["results"]})


def test_search_answers_like_the_direct_path(engine, indexed, tiny_model):
    from supergrep.cli.output import hit_json
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model
    from supergrep.index.render import format_hits
    from supergrep.index.search import Searcher

    direct = Searcher(Index(indexed), Encoder(resolve_model(tiny_model), device="cpu")).search("retry", limit=3)
    answer = engine.handle({"op": "search", "query": "retry", "path": str(indexed), "cwd": "/", "limit": 3,
                            "model_path": str(tiny_model)})
    assert answer["ok"] and answer["mode"] == "hybrid"
    assert answer["results"] == [{**hit_json(h, 3), "kind": h.kind} for h in direct]
    answer = engine.handle({"op": "search", "query": "retry", "path": str(indexed), "cwd": "/", "limit": 3,
                            "model_path": str(tiny_model), "render": {"format": "text", "context": 3}})
    assert answer["stdout"] == format_hits(direct, 3) and answer["exit_code"] == 0
    # The search registered the project: persisted and watched.
    assert [e.root for e in registry.load()] == [str(indexed)]
    assert engine.handle({"op": "list"})["projects"][0]["watching"]
    # Errors are the direct path's: type, message, exit code 2; bad languages go back to the CLI.
    bad = engine.handle({"op": "search", "query": "x", "path": "/no/such", "cwd": "/"})
    assert bad["ok"] is False and bad["error"]["exit_code"] == 2 and "does not exist" in bad["error"]["message"]
    assert engine.handle({"op": "search", "query": "x", "path": str(indexed), "types": ["klingon"]})["fallback"]


def test_unindexed_project_is_indexed_first_with_a_notice(engine, sample_project, tiny_model):
    notices = []
    answer = engine.handle({"op": "search", "query": "password", "path": str(sample_project), "cwd": "/",
                            "model_path": str(tiny_model), "no_index": True})
    assert answer["error"]["type"] == "IndexMissingError" and "--no-index" in answer["error"]["message"]
    answer = engine.handle({"op": "search", "query": "password", "path": str(sample_project), "cwd": "/",
                            "model_path": str(tiny_model)}, notices.append)
    assert answer["ok"] and answer["count"] > 0
    assert notices == [f"supergrep: indexing {sample_project} first (`supergrep index` keeps it current)"]


def test_watcher_picks_up_create_modify_delete_rename(engine, sample_project, tiny_model):
    root = sample_project
    assert engine.handle({"op": "add", "path": str(root), "model_path": str(tiny_model)})["new"]
    wait_for(lambda: Index(root).exists() and found(engine, root, "retry_with_backoff"), what="the first index")

    new = root / "app" / "zebra.py"
    new.write_text("def quokka_marmot_one():\n    return 1\n")  # create
    wait_for(lambda: found(engine, root, "quokka_marmot_one") == ["app/zebra.py"], what="a created file")

    new.write_text("def wombat_dingo_two():\n    return 2\n")  # modify
    wait_for(lambda: found(engine, root, "wombat_dingo_two") == ["app/zebra.py"], what="a modified file")
    assert found(engine, root, "quokka_marmot_one") == []

    new.rename(root / "app" / "okapi.py")  # rename
    wait_for(lambda: found(engine, root, "wombat_dingo_two") == ["app/okapi.py"], what="a renamed file")

    (root / "app" / "okapi.py").unlink()  # delete
    wait_for(lambda: found(engine, root, "wombat_dingo_two") == [], what="a deleted file")

    (root / "app").rename(root / "lib")  # a directory rename: only a walk can tell
    wait_for(lambda: "lib/retry.py" in (f := found(engine, root, "retry_with_backoff")) and "app/retry.py" not in f,
             what="a renamed directory")

    # an editor's atomic save: write a hidden temp file, rename it over the original
    tmp = root / "lib" / ".retry.py.swp"
    tmp.write_text((root / "lib" / "retry.py").read_text().replace("retry_with_backoff", "capybara_sloth"))
    tmp.replace(root / "lib" / "retry.py")
    wait_for(lambda: found(engine, root, "capybara_sloth") == ["lib/retry.py"], what="an atomic save")
    wait_for(lambda: engine.handle({"op": "status"})["projects"][0]["state"] == "ready", what="ready")
    assert engine.handle({"op": "status"})["counters"]["errors"] == 0


def test_the_in_memory_catalog_answers_as_sqlite_and_follows_updates(engine, sample_project, tiny_model):
    """After an update the project's catalog (index/mirror.py) is built and answers lexical
    searches with FTS5's results, scores included; a change is found at once (SQLite answers
    until the refresh) and the refresh reads it."""
    root = sample_project
    assert engine.handle({"op": "add", "path": str(root), "model_path": str(tiny_model)})["new"]
    wait_for(lambda: Index(root).exists() and found(engine, root, "retry_with_backoff"), what="the first index")
    p = next(iter(engine.projects.values()))
    with p.reader() as index:
        mirror = index.mirror
    wait_for(lambda: mirror.ready, what="the catalog")

    def direct(query):
        fresh = Index(root)
        try:
            return [(h.path, h.start_line, round(h.score, 6)) for h in
                    Searcher(fresh, None).search(query, mode="lexical", limit=5)]
        finally:
            fresh.close()

    def daemon(query):
        answer = lexical(engine, root, query, limit=5)
        assert answer["ok"], answer
        return [(r["path"], r["start_line"], round(r["score"], 6)) for r in answer["results"]]

    for q in ("retry with backoff", "session expire now", "password hash", "guide"):
        assert daemon(q) == direct(q)
    before = mirror.refreshes
    (root / "app" / "tapir.py").write_text("def tapir_gazelle(x):\n    return retry_with_backoff(x)\n")
    wait_for(lambda: found(engine, root, "tapir_gazelle") == ["app/tapir.py"], what="a created file")
    wait_for(lambda: mirror.refreshes > before, what="the catalog's refresh")
    for q in ("tapir gazelle", "retry with backoff"):
        assert daemon(q) == direct(q)


def test_a_deleted_root_is_survived_and_picked_up_when_it_returns(engine, indexed, tiny_model, tmp_path):
    root = indexed
    engine.handle({"op": "add", "path": str(root), "model_path": str(tiny_model)})
    wait_for(lambda: engine.handle({"op": "list"})["projects"][0]["state"] == "ready", what="ready")
    backup = tmp_path / "backup"
    shutil.copytree(root, backup)
    shutil.rmtree(root)
    wait_for(lambda: engine.handle({"op": "list"})["projects"][0]["state"] == "missing", what="missing")
    assert engine.handle({"op": "ping"})["ok"]
    shutil.copytree(backup, root)
    (root / "app" / "back.py").write_text("def phoenix_risen():\n    pass\n")
    wait_for(lambda: found(engine, root, "phoenix_risen") == ["app/back.py"], timeout=30, what="the root's return")


@pytest.mark.parametrize("damage", ["sqlite", "manifest"])
def test_a_damaged_index_is_rebuilt(engine, indexed, tiny_model, damage):
    root = indexed
    index_dir = Index(root).dir
    if damage == "sqlite":  # damaged while no daemon had it open
        with open(index_dir / "meta.sqlite", "r+b") as fh:
            fh.write(b"this is not a database" * 500)
    else:  # damaged under a running daemon
        engine.handle({"op": "add", "path": str(root), "model_path": str(tiny_model)})
        wait_for(lambda: engine.handle({"op": "list"})["projects"][0]["state"] == "ready", what="ready")
        assert found(engine, root, "retry_with_backoff")
        (index_dir / "manifest.json").write_text("{not json")
    answer = lexical(engine, root, "retry_with_backoff", model_path=str(tiny_model))
    assert not answer["ok"] and "rebuilding" in answer["error"]["message"], answer
    assert answer["error"]["exit_code"] == 2
    wait_for(lambda: lexical(engine, root, "retry_with_backoff").get("results"), timeout=30, what="the rebuild")
    assert engine.counters["rebuilds"] >= 1


def test_a_failing_update_is_logged_and_the_next_one_works(engine, indexed, tiny_model, monkeypatch, caplog):
    import supergrep.daemon.engine as engine_mod

    root = indexed
    engine.handle({"op": "add", "path": str(root), "model_path": str(tiny_model)})
    wait_for(lambda: engine.handle({"op": "list"})["projects"][0]["state"] == "ready", what="ready")
    real = engine_mod.update_paths
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise PermissionError(13, "Permission denied", str(root / "app"))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_mod, "update_paths", flaky)
    (root / "app" / "one.py").write_text("def first_try():\n    pass\n")
    wait_for(lambda: engine.handle({"op": "list"})["projects"][0]["last_error"], what="the error")
    assert "Permission denied" in engine.handle({"op": "list"})["projects"][0]["last_error"]
    (root / "app" / "two.py").write_text("def second_try():\n    pass\n")
    wait_for(lambda: found(engine, root, "second_try"), what="the next update")
    assert engine.handle({"op": "ping"})["ok"]


def test_concurrent_searches_during_updates(engine, indexed, tiny_model):
    root = indexed
    engine.handle({"op": "add", "path": str(root), "model_path": str(tiny_model)})
    wait_for(lambda: engine.handle({"op": "list"})["projects"][0]["state"] == "ready", what="ready")
    errors, done = [], threading.Event()

    def client(i):
        mode = ("lexical", "hybrid", "semantic")[i % 3]
        while not done.is_set():
            a = engine.handle({"op": "search", "query": "retry sessions", "path": str(root), "mode": mode,
                               "model_path": str(tiny_model)})
            if not a["ok"] or not a["results"]:
                errors.append(a)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    names = []
    for i, name in enumerate(["aardvarkish", "bisonlike", "cheetahish", "dolphinlike", "emuish", "ferretlike"]):
        (root / "app" / f"w{i}.py").write_text(f"def {name}():\n    return {i}\n")
        names.append(name)
        time.sleep(0.15)
    for i, name in enumerate(names):
        wait_for(lambda name=name, i=i: found(engine, root, name) == [f"app/w{i}.py"], what=name)
    done.set()
    for t in threads:
        t.join()
    assert errors == []


def test_scans_queue_for_a_slot_but_lexical_searches_never_wait(_isolated_home, indexed, tiny_model):
    (_isolated_home / "config.toml").write_text("[daemon]\nsearch_threads = 1\npreload = false\nrescan_s = 0\n")
    e = Engine(load_config(None), watch=False, persist=False)
    req = {"op": "search", "query": "retry sessions", "path": str(indexed), "cwd": "/", "register": False,
           "model_path": str(tiny_model)}
    assert e.handle({**req, "mode": "semantic"})["ok"]  # the model is loaded
    answers: list[dict] = []
    e._scan_slots.acquire()  # one scan in progress: the only slot is taken
    try:
        t = threading.Thread(target=lambda: answers.append(e.handle({**req, "mode": "hybrid"})))
        t.start()
        lex = e.handle({**req, "mode": "lexical"})
        assert lex["ok"] and lex["results"] and lex["timings_ms"]["queued"] < 50
        t.join(0.5)
        assert t.is_alive() and not answers  # the hybrid search waits for the slot
    finally:
        e._scan_slots.release()
    t.join(30)
    assert answers and answers[0]["ok"] and answers[0]["results"]
    assert answers[0]["timings_ms"]["queued"] >= 400


def test_a_search_that_races_an_update_is_retried_not_taken_for_damage(engine, indexed, tiny_model, monkeypatch):
    """Only a fresh look at the files decides "damaged": a search that saw a segment vanish
    (a compaction raced it) is run again, and the index is not wiped."""
    import supergrep.daemon.engine as engine_mod
    from supergrep.errors import IndexCorruptError

    real, failures = engine_mod.Searcher.search, []

    def racing(self, *args, **kwargs):
        if len(failures) < want_failures:
            failures.append(1)
            raise IndexCorruptError("segment files are missing; run `supergrep index --force` to rebuild")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(engine_mod.Searcher, "search", racing)
    want_failures = 1
    answer = lexical(engine, indexed, "retry_with_backoff", model_path=str(tiny_model))
    assert answer["ok"] and answer["results"] and failures == [1]
    want_failures = 3  # twice in a row: an error to search again, still no rebuild
    answer = lexical(engine, indexed, "retry_with_backoff", model_path=str(tiny_model))
    assert answer["error"]["type"] == "IndexBusyError" and "search again" in answer["error"]["message"]
    assert answer["error"]["exit_code"] == 2
    assert engine.counters["rebuilds"] == 0 and Index(indexed).exists()


def test_models_load_through_the_injected_loader(indexed, tiny_model):
    """`supergrep daemon start` passes the CLI's loader (the backend a direct search picks); the
    engine must use it for every model instead of building an Encoder itself."""
    from supergrep.encoder.encoder import Encoder

    calls = []

    def make(spec, cfg):
        calls.append((spec.path, cfg.encode.device))
        return Encoder(spec, device="cpu")

    e = Engine(load_config(None), watch=False, persist=False, make_encoder=make)
    req = {"op": "search", "query": "retry sessions", "path": str(indexed), "cwd": "/", "register": False,
           "model_path": str(tiny_model)}
    assert e.handle({**req, "mode": "semantic"})["ok"]
    assert e.handle({**req, "mode": "hybrid"})["ok"]
    assert len(calls) == 1 and str(calls[0][0]) == str(tiny_model)  # loaded once, then kept warm


def test_without_a_model_the_index_model_is_used_and_followed_across_rebuilds(indexed, tiny_model,
                                                                               tiny_bert_factory, tmp_path):
    """No --model: the daemon loads the model the index was built with (remembered per manifest),
    and a rebuild with another model is followed on the next search."""
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model
    from supergrep.index.indexer import update_index

    loaded = []

    def make(spec, cfg):
        loaded.append(str(spec.path))
        return Encoder(spec, device="cpu")

    e = Engine(load_config(None), watch=False, persist=False, make_encoder=make)
    req = {"op": "search", "query": "retry sessions", "path": str(indexed), "cwd": "/", "register": False,
           "mode": "semantic"}
    assert e.handle(req)["ok"] and e.handle(req)["ok"]
    assert loaded == [str(tiny_model)]
    other = tiny_bert_factory(tmp_path / "other-bert", seed=7)
    index = Index(indexed)
    update_index(index, Encoder(resolve_model(other), device="cpu"), force=True)
    index.close()
    assert e.handle(req)["ok"]
    assert loaded == [str(tiny_model), str(other)]
