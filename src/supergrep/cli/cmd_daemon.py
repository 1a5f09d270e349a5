"""`supergrep daemon start|stop|status|add|remove|list` (docs/daemon.md)."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path

import click

from supergrep.cli.common import Options, common_options, make_encoder, resolve_root
from supergrep.cli.output import echo_json
from supergrep.daemon import client, lifecycle, paths, registry


def _setup_logging(verbose: int, to_stderr: bool) -> None:
    """The daemon logs to $SUPERGREP_HOME/daemon/daemon.log (rotated at 2 MiB), and to stderr
    in the foreground."""
    registry.ensure_private_dir(paths.daemon_dir())
    level = logging.DEBUG if verbose > 0 else logging.INFO
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.handlers.clear()
    handler: logging.Handler = logging.handlers.RotatingFileHandler(paths.log_path(), maxBytes=2 << 20,
                                                                    backupCount=2, encoding="utf-8")
    handler.setFormatter(fmt)
    root.addHandler(handler)
    if to_stderr:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(fmt)
        root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("watchdog", "filelock", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _StatusGroup(click.Group):
    """`supergrep daemon` alone shows the status."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:  # (shell completion parses resiliently)
            args = ["status"]
        return super().parse_args(ctx, args)


@click.group("daemon", cls=_StatusGroup)
def daemon_group() -> None:
    """One background process per user that keeps models warm and indexes current.

    \b
      supergrep daemon start            start it in the background (`--foreground` to debug)
      supergrep daemon status [--json]  pid, memory, models, projects and their state
      supergrep daemon add [PATH]       watch a project (searches through the daemon add theirs)
      supergrep daemon remove [PATH]    stop watching it (its index stays)
      supergrep daemon list             the registered projects
      supergrep daemon stop

    While it runs, `supergrep "QUERY"` is answered by it (same output, no model load);
    `--direct` or SUPERGREP_NO_DAEMON=1 searches in-process.
    """


@daemon_group.command("start")
@click.option("--foreground", is_flag=True, help="Run in this process (logs also go to stderr).")
@click.option("--log-only", is_flag=True, hidden=True, help="Foreground, logging only to the log file.")
@click.option("-v", "--verbose", count=True, help="Debug logging.")
def start_cmd(foreground: bool, log_only: bool, verbose: int) -> None:
    """Start the daemon (in the background unless --foreground).

        supergrep daemon start
    """
    if foreground:
        from supergrep.config import load_config
        from supergrep.daemon.engine import Engine
        from supergrep.daemon.server import Daemon

        _setup_logging(verbose, to_stderr=not log_only)
        # Clients send their own --model-path / $SUPERGREP_MODEL; inside the daemon, "no model"
        # must mean the default model, not whatever this process's environment says.
        env_model = os.environ.pop("SUPERGREP_MODEL", None)
        engine = Engine(load_config(None), preload=[env_model] if env_model else None, make_encoder=make_encoder)
        Daemon(engine).run()
        return
    state = lifecycle.probe()
    if state.running:
        click.echo(f"supergrep daemon already running (pid {state.pid}); socket {paths.socket_path()}")
        return
    started = lifecycle.spawn(verbose=verbose)
    click.echo(f"supergrep daemon started (pid {started.pid}); socket {paths.socket_path()}, log {paths.log_path()}")


@daemon_group.command("stop")
def stop_cmd() -> None:
    """Stop the daemon (SIGTERM, then SIGKILL, if it does not stop within 10 s)."""
    pid = lifecycle.probe().pid
    if lifecycle.stop():
        click.echo(f"supergrep daemon stopped (pid {pid})")
    else:
        click.echo("supergrep daemon is not running")


def _ago(ts: float | None) -> str:
    if not ts:
        return "never"
    s = max(0.0, time.time() - ts)
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


@daemon_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (running, pid, models, projects, ...).")
def status_cmd(as_json: bool) -> None:
    """Is the daemon running; its memory, models and projects. Exit status 1 when it is not."""
    state = lifecycle.probe()
    if not state.running or state.answering is None:
        if as_json:
            echo_json({"running": state.running, "answering": False, "pid": state.pid, "cleaned": state.cleaned})
        elif state.running:
            click.echo(f"supergrep daemon (pid {state.pid}) runs but does not answer yet; see {paths.log_path()}")
        else:
            click.echo("supergrep daemon is not running (`supergrep daemon start`)")
            for path in state.cleaned:
                click.echo(f"removed stale {path}")
        raise SystemExit(1)
    s = client.call({"op": "status"}, timeout=30)
    if as_json:
        s.pop("v", None)
        s.pop("ok", None)
        echo_json({"running": True, "answering": True, **s})
        return
    click.echo(f"pid:      {s['pid']} (supergrep {s['version']}, up {s['uptime_s']:.0f} s, "
               f"{s['rss_bytes'] / 2**20:.0f} MiB resident, {s['threads']} threads)")
    click.echo(f"socket:   {s['socket']}")
    click.echo(f"log:      {s['log']}")
    c = s["counters"]
    click.echo(f"served:   {c['searches']} searches, {c['updates']} index updates, {c['errors']} errors")
    for m in s["models"] or [{"name": "(none loaded yet)", "fingerprint": "", "device": "", "loaded_s": 0}]:
        extra = f" ({m['fingerprint']}, {m['device']}, loaded in {m['loaded_s']:.1f} s)" if m["fingerprint"] else ""
        click.echo(f"model:    {m['name']}{extra}")
    if not s["projects"]:
        click.echo("projects: none (`supergrep daemon add PATH`, or search through the daemon)")
    for p in s["projects"]:
        watch = "watching" if p["watching"] else f"not watching ({p['watch_error'] or 'rescans only'})"
        counts = f"{p['files']} files, {p['chunks']} chunks" if p["files"] is not None else "no index yet"
        click.echo(f"project:  {p['root']}: {p['state']}, {watch}, {counts}, updated {_ago(p['last_update'])}")
        if p["last_error"]:
            click.echo(f"          last error: {p['last_error']}")


def _project_request(path: str | None, opts: Options, search_up: bool) -> dict:
    root = resolve_root(path, search_up=search_up) if path or search_up else Path.cwd().resolve()
    return {"path": str(root), "index_dir": str(opts.index_dir.resolve()) if opts.index_dir else None,
            "model_path": str(Path(opts.model_path).expanduser().resolve()) if opts.model_path else None,
            "config": str(opts.config_file.resolve()) if opts.config_file else None}


@daemon_group.command("add")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("-q", "--quiet", is_flag=True, help="Print nothing (for shell hooks).")
@common_options(device=False)
def add_cmd(path: str | None, quiet: bool, opts: Options) -> None:
    """Register a project: the daemon watches it and keeps its index current (it indexes it
    first if needed). PATH defaults to the current git work tree.

        supergrep daemon add ~/src/myproject
    """
    req = _project_request(path, opts, search_up=True)
    if not client.disabled():
        try:
            answer = client.call({"op": "add", **req}, timeout=30)
            if not quiet:
                click.echo(f"{'registered' if answer['new'] else 'already registered'}: {answer['root']} (watching)")
            return
        except client.DaemonUnavailable:
            pass
    new = registry.add(registry.Entry(req["path"], req["index_dir"], req["model_path"], req["config"]))
    if not quiet:
        click.echo(f"{'registered' if new else 'already registered'}: {req['path']} "
                   "(the daemon watches it once started: `supergrep daemon start`)")


@daemon_group.command("remove")
@click.argument("path", required=False)
@common_options(device=False, model_path=False, config=False)
def remove_cmd(path: str | None, opts: Options) -> None:
    """Stop watching a project (its index stays; `supergrep clean` deletes it)."""
    root = Path(path).expanduser().resolve() if path else resolve_root(None)
    index_dir = str(opts.index_dir.resolve()) if opts.index_dir else None
    removed = False
    try:
        removed = client.call({"op": "remove", "path": str(root), "index_dir": index_dir}, timeout=30)["removed"]
    except client.DaemonUnavailable:
        removed = registry.remove(str(root), index_dir)
    click.echo(f"removed: {root}" if removed else f"{root} was not registered")


@daemon_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: root, index_dir, state, watching, ...")
def list_cmd(as_json: bool) -> None:
    """The registered projects (with their state when the daemon runs)."""
    try:
        projects = client.call({"op": "list"}, timeout=30)["projects"]
    except client.DaemonUnavailable:
        projects = [{"root": e.root, "index_dir": e.index_dir, "model_path": e.model_path, "state": "(daemon stopped)",
                     "watching": False} for e in registry.load()]
    for p in projects:
        if as_json:
            echo_json(p)
        else:
            click.echo(f"{p['root']}\t{p['state']}{'' if p['watching'] else ' (not watched)'}")
