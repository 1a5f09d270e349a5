"""`supergrep merge CHECKPOINT -o DIR`."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options


@click.command("merge")
@click.argument("checkpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the merged model to.")
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@click.option("--backend", "merge_backend", type=click.Choice(["torch", "mlx"]), default="torch", show_default=True,
              help="The framework that loads the base and folds the adapter (the output is the same layout).")
@common_options(model_path=False, backend=False)
def merge_cmd(checkpoint: Path, output: Path, force: bool, merge_backend: str, opts: Options) -> None:
    """Fold a checkpoint's LoRA adapter into its base weights; write a plain model directory.

        supergrep merge runs/minilm/step_0002000 -o models/minilm-code
    """
    from supergrep.errors import UsageError
    from supergrep.train.merge import merge_checkpoint

    if not checkpoint.is_dir():
        raise UsageError(f"{checkpoint} does not exist; pass a checkpoint directory (step_NNNNNNN)")
    rep = merge_checkpoint(checkpoint, output, force=force, backend=merge_backend)
    click.echo(f"merged {rep.merged} LoRA projections (of {rep.adapter_pairs} in the adapter, "
               f"{rep.targets_in_base} targeted in the base) and {rep.dense_layers} projection layer(s) "
               f"into {rep.output}")
