"""The walker: ignore rules, junk filters, and files that misbehave mid-walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supergrep.config import WalkConfig
from supergrep.corpus.types import Source
from supergrep.corpus.walk import SkipFile, WalkStats, read_source, walk


def write(root: Path, rel: str, content: str | bytes = "x = 1\n") -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return p


def paths(root: Path, cfg: WalkConfig | None = None, stats: WalkStats | None = None) -> list[str]:
    return [s.path for s in walk(root, cfg, stats)]


def test_gitignore_nested_negation_and_dir_patterns(tmp_path):
    write(tmp_path, ".gitignore", "*.log.py\nbuild_out/\ngen_*.py\n!gen_keep.py\n")
    write(tmp_path, "a.py")
    write(tmp_path, "debug.log.py")
    write(tmp_path, "build_out/x.py")
    write(tmp_path, "gen_a.py")
    write(tmp_path, "gen_keep.py")
    write(tmp_path, "sub/.gitignore", "local.py\n!gen_b.py\n")
    write(tmp_path, "sub/local.py")
    write(tmp_path, "sub/gen_b.py")  # re-included by the deeper file
    write(tmp_path, "sub/kept.py")
    write(tmp_path, "other/local.py")  # the sub/.gitignore rule is relative to sub/
    assert paths(tmp_path) == ["a.py", "gen_keep.py", "other/local.py", "sub/gen_b.py", "sub/kept.py"]


def test_dot_ignore_overrides_gitignore_in_same_dir(tmp_path):
    write(tmp_path, ".gitignore", "secret.py\n")
    write(tmp_path, ".ignore", "!secret.py\nnoisy.py\n")
    write(tmp_path, "secret.py")
    write(tmp_path, "noisy.py")
    assert paths(tmp_path) == ["secret.py"]


def test_git_info_exclude_and_global_excludes(tmp_path, monkeypatch):
    xdg = tmp_path / "xdg"
    write(xdg, "git/ignore", "*_global.py\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "proj"
    write(root, ".git/info/exclude", "local_only.py\n")
    write(root, "a.py")
    write(root, "b_global.py")
    write(root, "local_only.py")
    assert paths(root) == ["a.py"]
    assert paths(root, WalkConfig(respect_ignore_files=False)) == ["a.py", "b_global.py", "local_only.py"]


def test_core_excludesfile_from_gitconfig(tmp_path, monkeypatch):
    home = tmp_path / "home"
    write(home, ".gitconfig", f"[user]\n  name = x\n[core]\n  excludesFile = {tmp_path / 'my-ignore'}\n")
    write(tmp_path, "my-ignore", "skipme.py\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "noxdg"))
    root = tmp_path / "proj"
    write(root, "skipme.py")
    write(root, "keep.py")
    assert paths(root) == ["keep.py"]


def test_hidden_vendored_and_unknown_files_skipped(tmp_path):
    write(tmp_path, ".hidden/a.py")
    write(tmp_path, ".secret.py")
    for d in ("node_modules", "target", ".venv", "dist", "build", "__pycache__"):
        write(tmp_path, f"{d}/x.py")
    write(tmp_path, "image.png", b"\x89PNG")
    write(tmp_path, "src/notes.txt", "notes\n")
    write(tmp_path, "README.md", "# hi\n")
    assert paths(tmp_path) == ["README.md", "src/notes.txt"]
    cfg = WalkConfig(include_hidden=True)
    assert ".hidden/a.py" in paths(tmp_path, cfg) and ".secret.py" in paths(tmp_path, cfg)


def test_user_exclude_globs_and_language_filter(tmp_path):
    write(tmp_path, "a.py")
    write(tmp_path, "tests/test_a.py")
    write(tmp_path, "b.md", "# b\n")
    assert paths(tmp_path, WalkConfig(exclude_globs=["tests/"])) == ["a.py", "b.md"]
    assert [s.path for s in walk(tmp_path, None, None, {"markdown"})] == ["b.md"]


def test_size_cap(tmp_path):
    write(tmp_path, "big.py", "x = 1\n" * 1000)
    write(tmp_path, "small.py")
    stats = WalkStats()
    assert paths(tmp_path, WalkConfig(max_file_bytes=1000), stats) == ["small.py"]
    assert stats.skipped == {"too large": 1}


def test_symlink_loop_and_links_out_of_root(tmp_path):
    root = tmp_path / "proj"
    write(root, "pkg/a.py")
    os.symlink(root / "pkg", root / "pkg" / "loop")  # pkg/loop -> pkg
    outside = tmp_path / "outside"
    write(outside, "secret.py")
    os.symlink(outside, root / "out_dir")
    os.symlink(outside / "secret.py", root / "out_file.py")
    os.symlink(root / "missing.py", root / "dangling.py")
    write(root, "real.py")
    os.symlink(root / "real.py", root / "alias.py")  # inside the root: followed
    stats = WalkStats()
    found = paths(root, None, stats)
    assert found == ["alias.py", "pkg/a.py", "real.py"]
    assert stats.skipped["symlink outside root"] == 2
    assert stats.skipped["symlink loop"] == 1


def test_file_vanishing_mid_walk(tmp_path):
    write(tmp_path, "a.py")
    write(tmp_path, "b.py")
    stats = WalkStats()
    it = walk(tmp_path, None, stats)
    assert next(it).path == "a.py"
    (tmp_path / "b.py").unlink()
    assert list(it) == []  # b.py vanished between listing and stat: skipped, no error
    assert stats.skipped == {"vanished": 1}


def test_directory_vanishing_or_unreadable(tmp_path, monkeypatch):
    write(tmp_path, "a/x.py")
    write(tmp_path, "b/y.py")
    real_scandir = os.scandir

    def flaky(path):
        if str(path).endswith("/a"):
            raise PermissionError(13, "denied")
        if str(path).endswith("/b"):
            raise FileNotFoundError(2, "gone")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", flaky)
    stats = WalkStats()
    assert paths(tmp_path, None, stats) == []
    assert stats.skipped == {"unreadable": 1, "vanished": 1}


def _src(p: Path) -> Source:
    st = p.stat()
    return Source(p.name, str(p), "python", st.st_size, st.st_mtime_ns)


def test_read_source_binary_invalid_utf8_bom_and_vanished(tmp_path):
    binary = write(tmp_path, "bin.py", b"abc\x00def")
    with pytest.raises(SkipFile) as exc:
        read_source(_src(binary), 1 << 20)
    assert exc.value.reason == "binary"

    bad = write(tmp_path, "latin.py", b"name = 'caf\xe9'\n")
    fc = read_source(_src(bad), 1 << 20)
    assert fc.text == "name = 'caf\ufffd'\n"  # replaced, not fatal

    bom = write(tmp_path, "bom.py", b"\xef\xbb\xbfx = 1\n")
    assert read_source(_src(bom), 1 << 20).text == "x = 1\n"

    gone = _src(write(tmp_path, "gone.py"))
    os.unlink(gone.abspath)
    with pytest.raises(SkipFile) as exc:
        read_source(gone, 1 << 20)
    assert exc.value.reason == "vanished"

    grown = _src(write(tmp_path, "grown.py"))
    Path(grown.abspath).write_text("y = 2\n" * 100)  # grew past the cap after the walk
    with pytest.raises(SkipFile) as exc:
        read_source(grown, 50)
    assert exc.value.reason == "too large"


def test_read_source_unreadable(tmp_path, monkeypatch):
    p = write(tmp_path, "locked.py")
    import builtins

    real_open = builtins.open

    def guarded(file, *a, **k):
        if str(file) == str(p):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", guarded)
    with pytest.raises(SkipFile) as exc:
        read_source(_src(p), 1 << 20)
    assert exc.value.reason == "unreadable"
