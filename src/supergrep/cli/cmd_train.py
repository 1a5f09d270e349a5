"""`supergrep train --config run.yaml` (every config key is also a flag)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json
from supergrep.train.config import TrainConfig, field_type


def config_flags(f):
    """One option per TrainConfig field: --batch-size, --lora-r, --compile/--no-compile, ..."""
    for fld in reversed(dataclasses.fields(TrainConfig)):
        t = field_type(fld)
        flag = "--" + fld.name.replace("_", "-")
        help_text = fld.metadata.get("help", "")
        if t is bool:
            f = click.option(f"{flag}/--no-{fld.name.replace('_', '-')}", fld.name, default=None, help=help_text)(f)
        elif fld.metadata.get("choices"):
            f = click.option(flag, fld.name, type=click.Choice(fld.metadata["choices"]), default=None, help=help_text)(f)
        elif t is list:
            f = click.option(flag, fld.name, default=None, metavar="A,B,...", help=help_text)(f)
        else:
            f = click.option(flag, fld.name, type=t, default=None, help=help_text)(f)
    return f


@click.command("train", context_settings={"max_content_width": 120})
@click.option("--config", "train_config", type=click.Path(dir_okay=False, path_type=Path),
              help="YAML file with any of the keys below (flags win).")
@click.option("--resume", is_flag=False, flag_value="latest", default=None, metavar="[CHECKPOINT]",
              help="Continue exactly from the newest checkpoint in output_dir, or from CHECKPOINT.")
@click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@config_flags
@common_options(model_path=False, config=False, device=False)
def train_cmd(train_config: Path | None, resume: str | None, as_json: bool, quiet: bool, opts: Options, **keys) -> None:
    """Fine-tune the search model with LoRA (InfoNCE over MaxSim + margin).

        supergrep train --train-file pairs.jsonl --max-steps 2000 --output-dir runs/minilm

        supergrep train --config run.yaml --resume

    Several GPUs (or CPU processes): the same command under torchrun, with the global
    --batch-size split over the ranks (docs/distributed.md):

        torchrun --nproc-per-node 4 -m supergrep train --config run.yaml
    """
    from supergrep.train.config import load_train_config
    from supergrep.train.distributed import World
    from supergrep.train.loop import run_training

    cfg = load_train_config(train_config, keys)
    res = run_training(cfg, resume=(True if resume == "latest" else resume) or False, show_progress=not quiet)
    if World.from_env().rank:
        return  # under torchrun, rank 0 reports for everyone
    summary = {
        "output_dir": str(res.output_dir), "checkpoint": str(res.checkpoint) if res.checkpoint else None,
        "steps": res.steps, "train_pairs": res.train_pairs, "val_pairs": res.val_pairs,
        "seconds": round(res.seconds, 1), "samples_per_s": round(res.samples_per_s, 2),
        "last_loss": res.last_loss, "val": res.val, "oom_events": res.oom_events,
    }
    if as_json:
        echo_json(summary)
        return
    val = (f", val loss {res.val['val_loss']:.4f} / acc {res.val['val_acc']:.3f}" if res.val else "")
    loss = f"{res.last_loss:.4f}" if res.last_loss is not None else "n/a"
    click.echo(f"trained {res.steps} steps on {res.train_pairs} pairs in {res.seconds:.1f} s "
               f"({res.samples_per_s:.1f} samples/s); loss {loss}{val}")
    click.echo(f"checkpoint: {res.checkpoint}  (search with --model-path, or `supergrep merge` it)")
