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
