"""`train -> convert -> merge -> index -> search` on MLX through the real CLI, and `search` in a
process where torch cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

pytest.importorskip("mlx.core", reason="MLX is not installed (Linux: pip install 'mlx[cpu]'; macOS: pip install mlx)")

from supergrep.cli import main  # noqa: E402

pytestmark = pytest.mark.mlx


class _Main:
    name = "supergrep"

    def main(self, args=None, prog_name=None, **_):
        main(list(args or []))


def run(args):
    return CliRunner().invoke(_Main(), [str(a) for a in args], catch_exceptions=False)


def test_train_convert_merge_index_search_on_mlx(tiny_model, pairs_file, sample_project, tmp_path):
    out = tmp_path / "run"
    r = run(["train", "--backend", "mlx", "--model-path", tiny_model, "--train-file", pairs_file, "--output-dir", out,
             "--max-steps", 4, "--batch-size", 8, "--projection-dim", 16, "--document-max-tokens", 64,
             "--query-max-tokens", 24, "--save-every", 2, "--eval-every", 2, "--device", "cpu", "--quiet", "--json",
             # the torch trainer's distillation and augmentation keys, honoured the same way
             "--distill-weight", 0.2, "--query-identifier-dropout", 0.2, "--document-header-dropout", 0.2])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["steps"] == 4 and summary["last_loss"] > 0 and summary["val"]["val_loss"] > 0
    events = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("cache_bytes" in e for e in events if e["kind"] == "train")  # MLX's memory counters
    ck = out / "step_0000004"

    torch_ck = tmp_path / "torch-ck"
    r = run(["convert", ck, "--to", "torch", "-o", torch_ck])
    assert r.exit_code == 0 and "12 LoRA projections" in r.output, r.output
    merged = tmp_path / "merged"
    r = run(["convert", ck, "--to", "merged", "-o", merged])  # through MLX: it trained the checkpoint
    assert r.exit_code == 0 and "merged 12 LoRA projections" in r.output and "with mlx" in r.output, r.output
    r = run(["merge", torch_ck, "-o", tmp_path / "merged-torch", "--backend", "torch"])
    assert r.exit_code == 0 and "merged 12" in r.output, r.output

    model = ["--model-path", merged]
    r = run(["index", sample_project, "--backend", "mlx", *model])
    assert r.exit_code == 0, r.output
    r = run(["search", "retry a call with exponential backoff", sample_project, "--backend", "mlx", "--json",
             "--mode", "semantic", "-n", "3", *model])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)["results"]
    assert len(hits) == 3 and all(h["path"] for h in hits)

    # The same search with torch made unimportable: --backend auto falls back to MLX.
    code = ("import sys; sys.modules['torch'] = None\n"
            "from supergrep.cli import main\n"
            f"main(['search', 'retry a call with exponential backoff', {str(sample_project)!r}, '--json', "
            f"'--mode', 'semantic', '-n', '3', '--model-path', {str(merged)!r}])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [h["path"] for h in json.loads(p.stdout)["results"]] == [h["path"] for h in hits]
