"""The `supergrep` command line: a click group whose default command is `search`.

Only this package prints, prompts or exits. Library errors (SupergrepError) become a one-line
message on stderr and exit status 2; `search` exits 1 when nothing matched.
"""

from __future__ import annotations

import os
import sys

# Thread pools: torch (OpenMP) encodes, NumPy (OpenBLAS) scores. On a small CPU, two pools
# that busy-wait after each call steal each other's cores: measured on 2 cores, search p50
# went from 470-930 ms to 140 ms with these (docs/benchmarks.md). Set before NumPy/torch load;
# the user's own settings win.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click  # noqa: E402

from supergrep import __version__  # noqa: E402
from supergrep.cli.cmd_bench import bench_group  # noqa: E402
from supergrep.cli.cmd_convert import convert_cmd  # noqa: E402
from supergrep.cli.cmd_daemon import daemon_group  # noqa: E402
from supergrep.cli.cmd_eval import eval_cmd  # noqa: E402
from supergrep.cli.cmd_eval_pairs import eval_pairs_cmd  # noqa: E402
from supergrep.cli.cmd_export import export_cmd  # noqa: E402
from supergrep.cli.cmd_index import index_cmd  # noqa: E402
from supergrep.cli.cmd_merge import interpolate_cmd, merge_cmd  # noqa: E402
from supergrep.cli.cmd_mine import distill_cmd, mine_cmd, mine_negatives_cmd  # noqa: E402
from supergrep.cli.cmd_models import models_group  # noqa: E402
from supergrep.cli.cmd_profile import profile_cmd  # noqa: E402
from supergrep.cli.cmd_quantize import quantize_cmd  # noqa: E402
from supergrep.cli.cmd_search import search_cmd  # noqa: E402
from supergrep.cli.cmd_serve_mcp import serve_mcp_cmd  # noqa: E402
from supergrep.cli.cmd_shell import completions_cmd, init_cmd  # noqa: E402
from supergrep.cli.cmd_shrink import shrink_cmd  # noqa: E402
from supergrep.cli.cmd_status import chunks_cmd, clean_cmd, files_cmd, status_cmd  # noqa: E402
from supergrep.cli.cmd_train import train_cmd  # noqa: E402
from supergrep.errors import SupergrepError  # noqa: E402


class DefaultGroup(click.Group):
    """`supergrep "QUERY" ...` is `supergrep search "QUERY" ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["search", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader (e.g. `| head`) went away: exit 0 quietly, as ripgrep does (click
            # itself would exit 1). Point stdout at /dev/null so the final flush cannot fail.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="supergrep")
def cli() -> None:
    """supergrep: find code by meaning.

    \b
      supergrep index [PATH]            index a project (incremental)
      supergrep "QUERY" [PATH]          search it (same as `supergrep search`)
      supergrep status | files | chunks FILE | clean
      supergrep models [install NAME]   named models: minilm (default), mpnet (quality)
      supergrep eval --queries Q.jsonl --corpus NAME=DIR   measure quality
      supergrep eval-pairs --pairs val.jsonl              docstring -> code retrieval
      supergrep mine PATH... -o pairs.jsonl              docstring -> code training pairs
      supergrep mine-negatives pairs.jsonl -o hn.jsonl   add BM25 hard negatives
      supergrep train --train-file pairs.jsonl           fine-tune (LoRA), see docs/training.md
      supergrep distill pairs.jsonl -o DIR --dim 128     a small head that keeps the base's ranking
      supergrep shrink pairs.jsonl -o DIR --layers 0,2,4  fewer layers, distilled from the base
      supergrep merge CHECKPOINT -o DIR                  fold the adapter into a plain model
      supergrep interpolate CHECKPOINT --alpha 0.5 -o DIR  WiSE-FT: blend a checkpoint with its base
      supergrep convert CHECKPOINT --to torch|mlx|merged -o DIR   move a checkpoint between backends
      supergrep profile --config run.yaml                where a training step's time goes
      supergrep bench train|encode|search                speed, MFU, memory; search latency/recall
      supergrep daemon start | stop | status | add PATH  keep models warm, indexes current
      supergrep serve-mcp                                MCP server for coding agents (stdio)
      supergrep completions SHELL | init SHELL           tab completion, shell integration
      supergrep quantize MODEL_DIR -o DIR --bits 8|4     int8/int4 weights
      supergrep export onnx|coreml MODEL_DIR -o OUT      deployment forms (--backend onnx)
    """


for _cmd in (search_cmd, index_cmd, status_cmd, files_cmd, chunks_cmd, clean_cmd, eval_cmd, eval_pairs_cmd,
             mine_cmd, mine_negatives_cmd, distill_cmd, shrink_cmd, train_cmd, merge_cmd, interpolate_cmd, convert_cmd, profile_cmd,
             bench_group, quantize_cmd, export_cmd, models_group):
    cli.add_command(_cmd)
for _cmd in (daemon_group, serve_mcp_cmd, completions_cmd, init_cmd):  # issue 9: daemon, agents, shells
    cli.add_command(_cmd)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `supergrep` and `sgr` scripts."""
    code: int | str | None = 0
    try:
        try:
            cli.main(args=argv, prog_name="supergrep", standalone_mode=False)
        except SystemExit as exc:  # `search` exits 1 when nothing matched
            code = exc.code
        sys.stdout.flush()  # inside the try: a reader that went away shows up here
    except click.exceptions.NoArgsIsHelpError as exc:  # pragma: no cover - depends on click version
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        code = 0
    except click.UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "supergrep"
        click.echo(f"supergrep: error: {exc.format_message()} (see `{cmd} --help`)", err=True)
        code = 2
    except click.Abort:
        click.echo("supergrep: interrupted", err=True)
        code = 130
    except SupergrepError as exc:
        click.echo(f"supergrep: error: {exc}", err=True)
        code = exc.exit_code
    except BrokenPipeError:  # the final flush found the reader gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except KeyboardInterrupt:
        click.echo("supergrep: interrupted", err=True)
        code = 130
    sys.exit(code)
