"""`supergrep profile --config run.yaml`: a per-component breakdown of a real training step."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.cmd_train import config_flags
from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json


@click.command("profile", context_settings={"max_content_width": 120})
@click.option("--config", "train_config", type=click.Path(dir_okay=False, path_type=Path),
              help="The training run's YAML (flags below win), as for `supergrep train`.")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True, help="Timed steps.")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Untimed steps first (allocator, kernels, compilation).")
@click.option("--unsynced-steps", type=click.IntRange(min=0), default=5, show_default=True,
              help="Then this many ordinary (unsynchronised) steps, to compare the step time with.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a torch.profiler Chrome trace of 3 more steps here (chrome://tracing, Perfetto).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write profile.json, profile.md and profile.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@config_flags
@common_options(model_path=False, config=False, device=False)
def profile_cmd(train_config: Path | None, steps: int, warmup: int, unsynced_steps: int, trace: Path | None,
                out_dir: Path | None, as_json: bool, opts: Options, **keys) -> None:
    """Time each part of a training step: data, forward (query, document), MaxSim, loss, backward,
    optimizer; mean, std and share of the step, synchronised with the device after each part.

        supergrep profile --config run.yaml --steps 20 --out runs/profile

        supergrep profile --train-file pairs.jsonl --batch-size 16 --trace trace.json
    """
    from supergrep.train.config import load_train_config
    from supergrep.train.profile import run_profile, write_outputs

    cfg = load_train_config(train_config, keys)
    res = run_profile(cfg, steps=steps, warmup=warmup, trace=trace, unsynced_steps=unsynced_steps)
    files = write_outputs(res, out_dir) if out_dir is not None else {}
    if as_json:
        echo_json({**res.to_dict(), "files": {k: str(v) for k, v in files.items()},
                   "trace": str(trace) if trace else None})
        return
    click.echo(res.markdown())
    for kind, path in files.items():
        click.echo(f"{kind}: {path}")
    if trace:
        click.echo(f"trace: {trace}")
