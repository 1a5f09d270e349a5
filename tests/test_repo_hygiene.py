"""Architecture and safety rules that must hold for the whole package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "supergrep"


def test_import_layers_point_downward():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    out = subprocess.run([exe], cwd=SRC.parents[1], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]


def test_no_unsafe_deserialisation_or_eval():
    bad = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        for lineno, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\b(pickle|dill|marshal)\b", code) and "import" in code:
                bad.append(f"{path}:{lineno}: pickle-like module")
            if re.search(r"(?<![.\w])(eval|exec)\(", code):
                bad.append(f"{path}:{lineno}: eval/exec")
            if "torch.load(" in code and "weights_only=True" not in code:
                bad.append(f"{path}:{lineno}: torch.load without weights_only=True")
            if "allow_pickle=True" in code:
                bad.append(f"{path}:{lineno}: np.load with allow_pickle")
    assert not bad, bad


def test_ruff_clean():
    exe = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(exe).exists():
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run([exe, "check", "--no-cache", "src", "tests"], cwd=SRC.parents[1], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]


def test_dev_extra_installs_mlx_where_the_mlx_extra_does():
    """CI runs `make test` (pip install -e '.[dev]'): the MLX parity tests need MLX there, and
    mlx[cpu] must never come with mlx[cuda13] (both ship libmlx.so)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    extras = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    mlx = [r for r in extras["mlx"] if r.startswith("mlx")]
    assert mlx and all(r in extras["dev"] for r in mlx)
    assert any("mlx[cpu]" in r and "linux" in r for r in mlx)
    assert not any("cuda" in r for r in extras["mlx"] + extras["dev"])


def test_the_readme_config_example_loads_with_the_real_defaults(tmp_path):
    """The README's config.toml is a config users copy: every key must exist (unknown keys are an
    error) and every value must be the default, so the example documents what runs (the long
    excluded_dirs list is abbreviated there)."""
    import dataclasses

    from supergrep.config import Config, load_config

    readme = (SRC.parents[1] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[search]" in b]
    assert len(blocks) == 1
    path = tmp_path / "config.toml"
    path.write_text(blocks[0])
    got, want = load_config(None, path), Config()
    got.walk = dataclasses.replace(got.walk, excluded_dirs=want.walk.excluded_dirs)
    assert got == want
