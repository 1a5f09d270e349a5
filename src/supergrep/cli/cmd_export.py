"""`supergrep export onnx|coreml MODEL_DIR -o OUT`."""

from __future__ import annotations

from pathlib import Path

import click

from supergrep.cli.common import Options, common_options, model_dir_argument
from supergrep.cli.output import echo_json


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@click.group("export")
def export_cmd() -> None:
    """Export a model for deployment: ONNX (onnxruntime) or Core ML.

    \b
      supergrep export onnx MODEL_DIR -o models/minilm-onnx [--int8]
      supergrep export coreml MODEL_DIR -o minilm.mlpackage
    """


@export_cmd.command("onnx")
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Model directory to write (model.onnx + tokenizer + supergrep_model.json).")
@click.option("--int8", is_flag=True, help="Quantize dynamically to int8 with onnxruntime (the fast CPU form).")
@click.option("--layers", "layer_rules", multiple=True, metavar="PATTERN=0|8",
              help="With --int8: keep matching layers float (=0) or quantize them (=8); a glob over module "
                   "names or re:REGEX. The FFN output projections stay float unless "
                   "'encoder.layer.*.output.dense=8'.")
@click.option("--no-optimize", is_flag=True,
              help="Skip onnxruntime's transformer fusions (a plain ONNX graph, without contrib ops).")
@click.option("--no-check", is_flag=True, help="Skip the parity check against the torch model.")
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@common_options(model_path=False, device=False)
def onnx_cmd(model_dir: Path, output: Path, int8: bool, layer_rules: tuple[str, ...], no_optimize: bool,
             no_check: bool, force: bool, as_json: bool, opts: Options) -> None:
    """Export MODEL_DIR to an ONNX model directory; search it with --backend onnx.

        supergrep export onnx models/minilm -o models/minilm-onnx-int8 --int8

        supergrep index --model-path models/minilm-onnx-int8 --backend onnx
    """
    from supergrep.export.onnx_graph import export_onnx
    from supergrep.export.quantized import LayerRule

    model_dir = model_dir_argument(model_dir)
    rules = [LayerRule.parse(r) for r in layer_rules]
    rep = export_onnx(model_dir, output, int8=int8, optimize=not no_optimize, force=force, check=not no_check,
                      layer_rules=rules)
    if as_json:
        echo_json({"output": str(rep.output), "bytes_before": rep.bytes_before, "bytes_after": rep.bytes_after,
                   "int8": rep.int8, "optimized": rep.optimized, "mask": rep.mask,
                   "parity": rep.parity.to_dict() if rep.parity else None})
        return
    form = "int8" if rep.int8 else "fp32"
    click.echo(f"exported {form} ONNX ({'fused' if rep.optimized else 'unfused'} graph) -> {rep.output}")
    click.echo(f"size: {_mb(rep.bytes_before)} -> {_mb(rep.bytes_after)} "
               f"({100 * rep.bytes_after / max(rep.bytes_before, 1):.1f}% of the original)")
    if rep.parity is not None:
        click.echo(rep.parity.describe())
        if not rep.parity.compatible:
            click.echo("note: below the 0.99 mean cosine that lets it share indexes with the source model",
                       err=True)


@export_cmd.command("coreml")
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="Package to write (*.mlpackage).")
@click.option("--max-batch", type=click.IntRange(1, 4096), default=64, show_default=True,
              help="Largest batch the package accepts.")
@click.option("--max-length", type=click.IntRange(0, 65536), default=0,
              help="Longest input in tokens (default: the model's document_max_tokens).")
@click.option("--precision", type=click.Choice(["float16", "float32"]), default="float16", show_default=True,
              help="Compute precision (float16 runs on the Neural Engine).")
@click.option("--force", is_flag=True, help="Overwrite an existing package.")
@common_options(model_path=False, device=False)
def coreml_cmd(model_dir: Path, output: Path, max_batch: int, max_length: int, precision: str, force: bool,
               opts: Options) -> None:
    """Convert MODEL_DIR to a Core ML ML Program (prediction needs macOS).

        supergrep export coreml models/minilm -o minilm.mlpackage
    """
    from supergrep.export.coreml import export_coreml

    model_dir = model_dir_argument(model_dir)
    rep = export_coreml(model_dir, output, max_batch=max_batch, max_length=max_length, precision=precision,
                        force=force)
    click.echo(f"converted to a Core ML ML Program ({rep.precision}; batch 1..{rep.max_batch}, "
               f"length 1..{rep.max_length}) -> {rep.output} ({_mb(rep.bytes_after)})")
