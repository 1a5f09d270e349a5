"""`supergrep completions SHELL` and `supergrep init SHELL`: shell integration."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")

# Registers the completion function for the `sgr` alias too (click's script names one program).
_ALIAS = {
    "bash": "complete -o nosort -F _supergrep_completion sgr\n",
    "zsh": "compdef _supergrep_completion sgr\n",
    "fish": 'complete --no-files --command sgr --arguments "(_supergrep_completion)"\n',
}

# Auto-registration: on `cd` into a git work tree not seen before in this shell, tell the daemon
# to watch it (`daemon add` writes the registry when no daemon runs). One `git rev-parse` per
# directory change; the add runs in the background, silently.
_HOOKS = {
    "bash": r'''
__supergrep_register() {
    [ "$PWD" = "${__supergrep_pwd-}" ] && return
    __supergrep_pwd=$PWD
    local root
    root=$(command git rev-parse --show-toplevel 2>/dev/null) || return
    [ "$root" = "${__supergrep_root-}" ] && return
    __supergrep_root=$root
    (command supergrep daemon add --quiet -- "$root" >/dev/null 2>&1 &)
}
case ";${PROMPT_COMMAND-};" in
    *";__supergrep_register;"*) ;;
    *) PROMPT_COMMAND="__supergrep_register${PROMPT_COMMAND:+;$PROMPT_COMMAND}" ;;
esac
''',
    "zsh": r'''
__supergrep_register() {
    local root
    root=$(command git rev-parse --show-toplevel 2>/dev/null) || return
    [[ "$root" == "${__supergrep_root-}" ]] && return
    __supergrep_root=$root
    (command supergrep daemon add --quiet -- "$root" >/dev/null 2>&1 &)
}
autoload -Uz add-zsh-hook
add-zsh-hook chpwd __supergrep_register
__supergrep_register
''',
    "fish": r'''
function __supergrep_register --on-variable PWD
    set -l root (command git rev-parse --show-toplevel 2>/dev/null); or return
    test "$root" = "$__supergrep_root"; and return
    set -g __supergrep_root $root
    fish -c 'command supergrep daemon add --quiet -- $argv[1] >/dev/null 2>&1' "$root" &
    disown 2>/dev/null
end
__supergrep_register
''',
}


def native_sgr(shell: str) -> str:
    """``sgr`` as the daemon's native client (``daemon/sgr.c``) where it was built: a search
    answered end to end in about the daemon's own time (the Python launcher's interpreter start
    is ~25 ms on a 2-core machine); anything else it hands to ``supergrep``. Empty otherwise."""
    import os
    import shlex
    import shutil
    import sys

    from supergrep.daemon.paths import native_client

    client = native_client()
    if client is None:
        return ""
    script = os.path.abspath(sys.argv[0]) if os.path.basename(sys.argv[0]) in ("supergrep", "sgr") else None
    script = script or shutil.which("supergrep") or "supergrep"
    head = "# `sgr QUERY`: the daemon's native search client (no Python start); other commands go to `supergrep`.\n"
    if shell == "fish":
        return head + f"function sgr; env SUPERGREP_FALLBACK={shlex.quote(script)} {shlex.quote(client)} $argv; end\n"
    return head + f"sgr() {{ SUPERGREP_FALLBACK={shlex.quote(script)} {shlex.quote(client)} \"$@\"; }}\n"


def completion_source(shell: str) -> str:
    """click's completion script for `supergrep` (and `sgr`) in ``shell``."""
    from click.shell_completion import get_completion_class

    from supergrep.cli import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - SHELLS are all built into click
        raise click.BadParameter(f"no completion for {shell}")
    source = cls(cli, {}, "supergrep", "_SUPERGREP_COMPLETE").source()
    return source.rstrip("\n") + "\n" + _ALIAS[shell]


@click.command("completions")
@click.argument("shell", type=click.Choice(SHELLS))
def completions_cmd(shell: str) -> None:
    """Print the tab-completion script for SHELL.

    \b
      supergrep completions bash > ~/.local/share/bash-completion/completions/supergrep
      supergrep completions zsh > "${fpath[1]}/_supergrep"
      supergrep completions fish > ~/.config/fish/completions/supergrep.fish
    """
    click.echo(completion_source(shell), nl=False)


@click.command("init")
@click.argument("shell", type=click.Choice(SHELLS))
@click.option("--auto-register", is_flag=True,
              help="Also register every git work tree you cd into with the daemon (it indexes and watches them).")
@click.option("--no-completions", is_flag=True, help="Leave tab completion out.")
def init_cmd(shell: str, auto_register: bool, no_completions: bool) -> None:
    """Print a snippet for your shell's startup file: completion, `sgr` as the daemon's native
    search client (where it was built), and optionally auto-registration of projects on `cd`.

    \b
      supergrep init bash --auto-register > ~/.supergrep.bash   # then in ~/.bashrc:
      source ~/.supergrep.bash                                   # (or eval "$(supergrep init bash)",
                                                                 #  ~0.5 s per shell start)
    """
    rc = {"bash": "~/.bashrc", "zsh": "~/.zshrc", "fish": "~/.config/fish/config.fish"}[shell]
    parts = [f"# supergrep shell integration, from `supergrep init {shell}"
             f"{' --auto-register' if auto_register else ''}`; source it from {rc}.\n"]
    if not no_completions:
        parts.append(completion_source(shell))
    parts.append(native_sgr(shell))
    if auto_register:
        parts.append(_HOOKS[shell].lstrip("\n"))
    click.echo("\n".join(parts), nl=False)
