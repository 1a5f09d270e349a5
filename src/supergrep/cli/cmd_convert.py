"""`supergrep convert CHECKPOINT --to torch|mlx|merged -o DIR`."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options


@click.command("convert")
@click.argument("checkpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("--to", "target", required=True, type=click.Choice(["torch", "mlx", "merged"]),
              help="torch / mlx: a checkpoint the other trainer resumes from; merged: a plain model directory.")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write.")
@click.option("--backend", "merge_backend", type=click.Choice(["torch", "mlx"]), default=None,
              help="With --to merged: the framework that folds the adapter (default: the one that trained it).")
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@common_options(model_path=False, backend=False)
def convert_cmd(checkpoint: Path, target: str, output: Path, merge_backend: str | None, force: bool,
                opts: Options) -> None:
    """Move a training checkpoint between the torch and MLX trainers, or merge it.

    Every LoRA projection is counted (adapter file, trainer state, the base's targeted layers)
    and must agree before anything is written.

        supergrep convert runs/xtr-mlx/step_0001000 --to torch -o runs/xtr-torch/step_0001000

        supergrep convert runs/xtr-mlx/step_0001000 --to merged -o models/xtr-code
    """
    import json

    from supergrep.errors import UsageError
    from supergrep.train.convert import convert_checkpoint, verify_checkpoint
    from supergrep.train.merge import merge_checkpoint

    if not checkpoint.is_dir():
        raise UsageError(f"{checkpoint} does not exist; pass a checkpoint directory (step_NNNNNNN)")
    if target == "merged":
        backend = merge_backend
        if backend is None:
            meta = json.loads((checkpoint / "trainer_state.json").read_text()).get("meta", {}) \
                if (checkpoint / "trainer_state.json").is_file() else {}
            backend = meta.get("backend", "torch")
        if (checkpoint / "trainer_state.json").is_file():
            verify_checkpoint(checkpoint)
        rep = merge_checkpoint(checkpoint, output, force=force, backend=backend)
        click.echo(f"merged {rep.merged} LoRA projections (of {rep.adapter_pairs} in the adapter, "
                   f"{rep.targets_in_base} targeted in the base) with {backend} into {rep.output}")
        return
    rep = convert_checkpoint(checkpoint, output, target, force=force)
    click.echo(f"converted {rep.source} -> {rep.target}: {rep.projections} LoRA projections and "
               f"{rep.trainable_tensors} trainable tensors verified; {rep.output} "
               f"(resume with --backend {rep.target} --resume {rep.output})")
