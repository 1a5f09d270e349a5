"""`supergrep quantize MODEL_DIR -o OUT --bits 8|4`."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options
from supergrep.cli.output import echo_json


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@click.command("quantize")
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Directory to write the quantized model to (a --model-path).")
@click.option("--bits", type=int, default=8, show_default=True, help="Bits per weight: 8 or 4.")
@click.option("--group-size", type=int, default=64, show_default=True,
              help="Input columns sharing one scale (an even number).")
@click.option("--symmetric/--asymmetric", default=True, show_default=True,
              help="Scales only, or scales + zero points.")
@click.option("--layers", "layer_rules", multiple=True, metavar="PATTERN=BITS",
              help="Per-layer override (repeatable, last match wins): a glob over module names "
                   "(* = one name component, ** = any: 'encoder.layer.*.attention.**') or re:REGEX; "
                   "BITS 0 keeps the layer float.")
@click.option("--embeddings/--no-embeddings", default=True, show_default=True,
              help="Quantize the embedding tables too (half of MiniLM's bytes).")
@click.option("--no-check", is_flag=True, help="Skip the parity check against the float model.")
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@common_options(model_path=False, device=False)
def quantize_cmd(model_dir: Path, output: Path, bits: int, group_size: int, symmetric: bool,
                 layer_rules: tuple[str, ...], embeddings: bool, no_check: bool, force: bool,
                 as_json: bool, opts: Options) -> None:
    """Quantize a model's weights group-wise to int8 or int4; prints the size before and after.

        supergrep quantize models/minilm -o models/minilm-q8 --bits 8

        supergrep quantize models/minilm -o models/minilm-q4 --bits 4 --layers 'embeddings.*=8'
    """
    from supergrep.cli.common import model_dir_argument
    from supergrep.export.quantized import LayerRule, quantize_model

    model_dir = model_dir_argument(model_dir)
    rules = [LayerRule.parse(r) for r in layer_rules]
    rep = quantize_model(model_dir, output, bits=bits, group_size=group_size, symmetric=symmetric,
                         rules=rules, embeddings=embeddings, force=force, check=not no_check)
    if as_json:
        echo_json({"output": str(rep.output), "bytes_before": rep.bytes_before, "bytes_after": rep.bytes_after,
                   "ratio": round(rep.ratio, 4), "quantized": {str(k): v for k, v in rep.quantized.items()},
                   "kept_float": rep.kept_float, "parity": rep.parity.to_dict() if rep.parity else None})
        return
    parts = ", ".join(f"{n} tensors at {b} bits" for b, n in sorted(rep.quantized.items()))
    click.echo(f"quantized {parts}" + (f", {rep.kept_float} kept float" if rep.kept_float else "")
               + f" -> {rep.output}")
    click.echo(f"size: {_mb(rep.bytes_before)} -> {_mb(rep.bytes_after)} ({100 * rep.ratio:.1f}% of the original)")
    if rep.parity is not None:
        click.echo(rep.parity.describe())
