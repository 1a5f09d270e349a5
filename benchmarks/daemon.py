"""The daemon's latency, freshness and behaviour under load, end to end.

Usage (SUPERGREP_HOME must hold an index of ROOT built with the default model, e.g. by
`supergrep index ROOT`; the daemon is started there if none runs):

    python benchmarks/daemon.py corpus    --dest ROOT    # ~10K chunks: this Python's stdlib, top level + email/ + json/
    python benchmarks/daemon.py latency   --root ROOT --runs 40 --out benchmarks/results/daemon-latency.json
    python benchmarks/daemon.py freshness --root ROOT --saves 30 --out benchmarks/results/daemon-freshness.json
    python benchmarks/daemon.py load      --root ROOT --clients 20 --seconds 60 --out benchmarks/results/daemon-load.json

latency: wall time from spawning the `supergrep` console script (the same two lines pip
generates) to its exit, per mode, through the daemon; beside it the interpreter alone, the
client's imports, a ping round trip, and cold direct searches (SUPERGREP_NO_DAEMON=1). Also
the CPU time of each client process and of the daemon's request thread (`timings_ms.cpu`):
on a machine shared with other jobs, wall time measures the machine's load as much as the
code, CPU time does not. Then
where the time goes inside one warm process (query encoding, MaxSim, BM25, chunk fetch,
rendering), with the same float32 cache the daemon keeps.
freshness: write a file holding a new identifier (alternately a new file and an edit), poll
a search until it appears; the daemon's log shows the compactions that happened meanwhile.
load: N clients, each running `supergrep` processes back to back for S seconds (a mix of
modes) while files are written every 2 s; errors, latency, daemon RSS over time, and whether
every written file ended up searchable.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The model the index was built with, as the `supergrep` client sends it ($SUPERGREP_MODEL; none: the default).
MODEL = {"model_path": os.path.abspath(os.environ["SUPERGREP_MODEL"])} if os.environ.get("SUPERGREP_MODEL") else {}
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

SCRIPT = "import sys\nfrom supergrep.launcher import main\nsys.argv[0] = 'supergrep'\nsys.exit(main())\n"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summary(ms: list[float]) -> dict:
    return {"n": len(ms), "p50_ms": round(pct(ms, 0.5), 1), "p95_ms": round(pct(ms, 0.95), 1),
            "min_ms": round(min(ms), 1) if ms else None}


def console_script(workdir: Path) -> Path:
    """A file equivalent to pip's generated `supergrep` script (this interpreter, the launcher)."""
    path = workdir / "supergrep"
    path.write_text(f"#!{sys.executable}\n{SCRIPT}")
    path.chmod(0o755)
    return path


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return (time.perf_counter() - t0) * 1000, r


def timed_cpu(cmd: list[str], env: dict | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall ms and the child's CPU ms (user + system; one child at a time, so the rusage delta
    is this one's). CPU time barely moves with other jobs' load; wall time does."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ms, r = timed(cmd, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return ms, cpu, r


def compile_package() -> bool:
    """Byte-compile supergrep as `pip install` does, so each client process loads .pyc files
    instead of compiling the launcher and client from source (PYTHONDONTWRITEBYTECODE=1, a
    read-only checkout or a fresh clone would otherwise charge that to every search)."""
    import compileall

    import supergrep

    return bool(compileall.compile_dir(Path(supergrep.__file__).parent, quiet=1))


def queries(n: int) -> list[str]:
    path = Path(__file__).resolve().parents[1] / "eval" / "public" / "queries.jsonl"
    qs = [json.loads(line)["query"] for line in path.read_text().splitlines() if line.strip()]
    return qs[:n]


def wait_idle(root: Path, timeout: float) -> float | None:
    """Seconds until the daemon reports ROOT ready with nothing pending (None: timed out)."""
    from supergrep.daemon import client

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        projects = {p["root"]: p for p in client.call({"op": "list"})["projects"]}
        p = projects.get(str(root))
        if p and p["state"] == "ready" and p["pending"] == 0:
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def ensure_daemon(root: Path) -> dict:
    from supergrep.daemon import client, lifecycle

    if client.ping() is None:
        lifecycle.spawn(wait_s=120)
    client.call({"op": "add", "path": str(root)}, timeout=60)
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        projects = {p["root"]: p for p in client.call({"op": "status"})["projects"]}
        p = projects.get(str(root))
        if p and p["state"] == "ready" and p["pending"] == 0:
            break
        time.sleep(1)
    # one search per mode loads the model and fills the float32 cache
    for mode in ("lexical", "semantic", "hybrid"):
        client.call({**MODEL, "op": "search", "query": "warm up", "path": str(root), "cwd": "/", "mode": mode}, timeout=600)
    return client.call({"op": "status"})


def cmd_latency(args) -> dict:
    from supergrep.daemon import client

    root = Path(args.root).resolve()
    compiled = compile_package()
    st = ensure_daemon(root)
    proj = next(p for p in st["projects"] if p["root"] == str(root))
    work = Path(tempfile.mkdtemp(prefix="sg-bench-"))
    script = console_script(work)
    qs = queries(args.runs)
    env = dict(os.environ)
    from supergrep.daemon.paths import native_client

    native = native_client()  # daemon/sgr.c, where pip install compiled it
    out: dict = {"root": str(root), "chunks": proj["chunks"], "vectors": proj["vectors"],
                 "cached_bytes": proj["cached_bytes"], "machine": platform.processor() or platform.machine(),
                 "cpus": os.cpu_count(), "load_before": os.getloadavg(), "bytecode_compiled": compiled,
                 "end_to_end": {}, "baseline": {}}
    # Interleave the measurements so a burst of load elsewhere hits every row alike.
    rows: dict[str, list[float]] = {}
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "client imports": [sys.executable, "-c", "import supergrep.launcher, supergrep.daemon.client"],
        "ping round trip": [sys.executable, "-c", "from supergrep.daemon import client; client.call({'op': 'ping'})"],
    }
    cpu: dict[str, list[float]] = {}
    for i in range(args.runs):
        for name, cmd in cases.items():
            ms, c, _ = timed_cpu(cmd, env)
            rows.setdefault(name, []).append(ms)
            cpu.setdefault(name, []).append(c)
        for mode in ("lexical", "semantic", "hybrid"):
            ms, c, r = timed_cpu([str(script), qs[i % len(qs)], str(root), "--mode", mode], env)
            if r.returncode not in (0, 1):
                raise SystemExit(f"search failed: {r.stderr}")
            rows.setdefault(f"search --mode {mode}", []).append(ms)
            cpu.setdefault(f"search --mode {mode}", []).append(c)
            if native:  # the same search through the native client (`sgr` after `supergrep init`)
                ms, c, r2 = timed_cpu([native, qs[i % len(qs)], str(root), "--mode", mode],
                                      {**env, "SUPERGREP_FALLBACK": str(script)})
                if (r2.returncode, r2.stdout) != (r.returncode, r.stdout):
                    raise SystemExit(f"the native client's output differs from the launcher's: {r2.stderr}")
                rows.setdefault(f"sgr --mode {mode}", []).append(ms)
                cpu.setdefault(f"sgr --mode {mode}", []).append(c)
    for name in cases:
        out["baseline"][name] = summary(rows[name])
    for mode in ("lexical", "semantic", "hybrid"):
        out["end_to_end"][mode] = summary(rows[f"search --mode {mode}"])
        if native:
            out.setdefault("end_to_end_native", {})[mode] = summary(rows[f"sgr --mode {mode}"])
    out["client_cpu_ms"] = {name: summary(v) for name, v in cpu.items()}
    # Server-side split, from the daemon's own timings.
    server: dict[str, dict[str, list[float]]] = {}
    for i in range(args.runs):
        for mode in ("lexical", "semantic", "hybrid"):
            a = client.call({**MODEL, "op": "search", "query": qs[i % len(qs)], "path": str(root), "cwd": "/", "mode": mode,
                             "render": {"format": "text", "context": 3}})
            for k, v in a["timings_ms"].items():
                server.setdefault(mode, {}).setdefault(k, []).append(v)
    out["daemon_timings"] = {m: {k: summary(v) for k, v in d.items()} for m, d in server.items()}
    out["in_process_split"] = split_in_process(root, qs, args.runs, proj["cached_bytes"])
    cold = {}
    for mode in ("lexical", "hybrid"):
        ms = [timed([str(script), qs[i], str(root), "--mode", mode],
                    {**env, "SUPERGREP_NO_DAEMON": "1"})[0] for i in range(args.cold_runs)]
        cold[mode] = summary(ms)
    out["cold_direct"] = cold
    out["load_after"] = os.getloadavg()
    return out


def split_in_process(root: Path, qs: list[str], runs: int, cache_bytes: int) -> dict:
    """Where a warm search spends its time, piece by piece (what the daemon does per request)."""
    from supergrep.cli.common import make_encoder
    from supergrep.config import load_config
    from supergrep.encoder.named import model_of_index
    from supergrep.encoder.spec import resolve_model
    from supergrep.index.project import Index
    from supergrep.index.render import format_hits
    from supergrep.index.search import Searcher

    cfg = load_config(root)
    index = Index(root, cache_bytes=max(cache_bytes, 1))
    index.store.warm(index.conn)
    cfg.encode.device = "cpu"
    enc = make_encoder(resolve_model(model_of_index(index.manifest.model)), cfg)  # as the daemon loads it
    searcher = Searcher(index, enc, cfg.search)
    parts: dict[str, list[float]] = {}

    def clock(name, fn):
        t0 = time.perf_counter()
        value = fn()
        parts.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
        return value

    for i in range(runs):
        q = qs[i % len(qs)]
        vec = clock("encode query", lambda q=q: enc.encode_queries([q])[0])
        ids, _ = clock("MaxSim (exact, all chunks)", lambda vec=vec: index.store.search(index.conn, vec, 200))
        lex_ids, _ = clock("BM25 (SQLite FTS5)", lambda q=q: index.lexical(q, 200))
        rows = clock("fetch 10 chunks (SQLite)", lambda ids=ids: index.chunks([int(x) for x in ids[:10]]))
        hits = clock("hybrid search total (Searcher)", lambda q=q: searcher.search(q, mode="hybrid"))
        clock("render", lambda hits=hits: format_hits(hits, 3))
        del rows, lex_ids
    vectors = index.store.stats(index.conn)["vectors"]
    out = {k: summary(v) for k, v in parts.items()}
    out["us_per_vector_maxsim"] = round(pct(parts["MaxSim (exact, all chunks)"], 0.5) * 1000 / vectors, 3)
    return out


def cmd_freshness(args) -> dict:
    from supergrep.daemon import client

    root = Path(args.root).resolve()
    ensure_daemon(root)
    target = root / "_sg_freshness"
    target.mkdir(exist_ok=True)
    latencies, polls = [], []
    try:
        for i in range(args.saves):
            ident = f"freshness_probe_{os.getpid()}_{i}_{random.randrange(1 << 30)}"
            t0 = time.perf_counter()
            # a new file per save (every other one an edit of the last): segments accumulate,
            # so the run includes the compactions they trigger
            name = f"probe_{i - i % 2}.py"
            (target / name).write_text(f"def {ident}():\n    return {i}\n")
            slowest = (0.0, {})
            while True:
                t_call = time.perf_counter()
                a = client.call({**MODEL, "op": "search", "query": ident, "path": str(root), "cwd": "/", "mode": "lexical",
                                 "limit": 1})
                slowest = max(slowest, ((time.perf_counter() - t_call) * 1000, a["timings_ms"]), key=lambda x: x[0])
                if a["count"] and ident in a["results"][0]["snippet"]:
                    break
                if time.perf_counter() - t0 > 30:
                    raise SystemExit(f"{ident} not searchable after 30 s")
                time.sleep(0.01)
            latencies.append((time.perf_counter() - t0) * 1000)
            polls.append({"save_ms": round(latencies[-1], 1), "slowest_poll_ms": round(slowest[0], 1),
                          "its_daemon_timings_ms": slowest[1]})
            time.sleep(args.pause)
    finally:
        for p in target.iterdir():
            p.unlink()
        target.rmdir()
    return {"root": str(root), "saves": args.saves, "save_to_searchable": summary(latencies),
            "max_ms": round(max(latencies), 1), "slowest_saves": sorted(polls, key=lambda p: -p["save_ms"])[:3],
            "load": os.getloadavg()}


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cmd_load(args) -> dict:
    from supergrep.daemon import client

    root = Path(args.root).resolve()
    compile_package()
    st = ensure_daemon(root)
    pid = st["pid"]
    work = Path(tempfile.mkdtemp(prefix="sg-load-"))
    script = console_script(work)
    qs = queries(50)
    mix = [m for m, w in (("lexical", args.lexical), ("hybrid", args.hybrid), ("semantic", args.semantic))
           for _ in range(w)]
    stop = threading.Event()
    results: list[tuple[str, float, int]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client_loop(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            mode = rng.choice(mix)
            ms, r = timed([str(script), rng.choice(qs), str(root), "--mode", mode, "--json"])
            with lock:
                if r.returncode != 0 or not json.loads(r.stdout or "{}").get("count"):
                    errors.append(f"{mode}: exit {r.returncode}: {r.stderr[-300:]}")
                results.append((mode, ms, r.returncode))

    written: list[tuple[str, str]] = []
    target = root / "_sg_load"
    target.mkdir(exist_ok=True)

    def writer() -> None:
        i = 0
        while not stop.wait(2.0):
            ident = f"load_probe_{os.getpid()}_{i}"
            (target / f"w{i % 5}.py").write_text(f"def {ident}():\n    return {i}\n")
            written.append((ident, f"_sg_load/w{i % 5}.py"))
            i += 1

    rss = [(0.0, rss_of(pid))]
    t_start = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    while time.monotonic() - t_start < args.seconds:
        time.sleep(5)
        rss.append((round(time.monotonic() - t_start, 1), rss_of(pid)))
    stop.set()
    for t in threads:
        t.join()
    # No lost updates: each file holds its last write, which must be what the index has once
    # the daemon has applied everything the watcher saw (a debounce later, then idle).
    t_stop = time.monotonic()
    time.sleep(1.5)  # > max_delay_ms: the last write's batch has been handed to the updater
    settle_s = wait_idle(root, timeout=300)
    settle_s = round(time.monotonic() - t_stop, 1) if settle_s is not None else None
    last = {path: ident for ident, path in written}
    lost = []
    for path, ident in last.items():
        a = client.call({**MODEL, "op": "search", "query": ident, "path": str(root), "cwd": "/", "mode": "lexical", "limit": 1})
        if not a["count"] or a["results"][0]["path"] != path:
            lost.append(ident)
    for p in target.iterdir():
        p.unlink()
    target.rmdir()
    rss.append((round(time.monotonic() - t_start, 1), rss_of(pid)))
    by_mode = {m: summary([ms for mode, ms, _ in results if mode == m]) for m in sorted(set(mix))}
    status = client.call({"op": "status"})
    return {"root": str(root), "clients": args.clients, "seconds": args.seconds, "requests": len(results),
            "errors": len(errors), "error_samples": errors[:5], "latency": by_mode,
            "files_written": len(written), "lost_updates": lost, "settled_after_s": settle_s,
            "rss_mib": [(t, round(b / 2**20)) for t, b in rss], "daemon_errors": status["counters"]["errors"],
            "threads_after": status["threads"], "load": os.getloadavg()}


STDLIB_PARTS = ("*.py", "email/**/*.py", "json/**/*.py")


def cmd_corpus(args) -> dict:
    """A ~10K-chunk project: a copy of this interpreter's standard library (top-level modules,
    email/, json/; 9,827 chunks from CPython 3.11.7), writable so probes can be saved into it."""
    import shutil
    import sysconfig

    from supergrep.corpus.chunk import chunk_source

    src = Path(sysconfig.get_paths()["stdlib"])
    dest = Path(args.dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty")
    files = lines = chunks = 0
    for pattern in STDLIB_PARTS:
        for path in sorted(src.glob(pattern)):
            if "test" in path.relative_to(src).parts[:-1]:
                continue
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            text = target.read_text(errors="replace")
            files, lines = files + 1, lines + text.count("\n")
            chunks += len(chunk_source(str(target), text, "python"))
    return {"dest": str(dest), "source": str(src), "python": platform.python_version(), "files": files,
            "lines": lines, "chunks": chunks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("latency", "freshness", "load"):
        p = sub.add_parser(name)
        p.add_argument("--root", required=True)
        p.add_argument("--out")
    sub.add_parser("corpus").add_argument("--dest", required=True)
    sub.choices["corpus"].add_argument("--out")
    sub.choices["latency"].add_argument("--runs", type=int, default=40)
    sub.choices["latency"].add_argument("--cold-runs", type=int, default=5)
    sub.choices["freshness"].add_argument("--saves", type=int, default=30)
    sub.choices["freshness"].add_argument("--pause", type=float, default=0.5)
    ld = sub.choices["load"]
    ld.add_argument("--clients", type=int, default=20)
    ld.add_argument("--seconds", type=int, default=60)
    ld.add_argument("--lexical", type=int, default=3, help="weight of lexical queries in the mix")
    ld.add_argument("--hybrid", type=int, default=1)
    ld.add_argument("--semantic", type=int, default=0)
    args = ap.parse_args()
    result = {"latency": cmd_latency, "freshness": cmd_freshness, "load": cmd_load,
              "corpus": cmd_corpus}[args.what](args)
    result["date"] = time.strftime("%Y-%m-%d %H:%M")
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
