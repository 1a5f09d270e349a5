"""Options every command takes, and the glue that turns them into an Index and an Encoder."""

from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from supergrep.config import Config, load_config
from supergrep.encoder.named import cpu_only
from supergrep.errors import UsageError

__all__ = ["Options", "choose_backend", "common_options", "cpu_only", "make_encoder"]

BACKEND_CHOICES = ("auto", "torch", "mlx", "onnx")


def common_options(f=None, *, model_path: bool = True, config: bool = True, device: bool = True,
                   backend: bool | None = None):
    """--index-dir, --model-path, --device, --backend, --config and -v, on every command.

    A command that defines one of them itself (eval takes --model-path several times; train's
    --config is its YAML, --device and --backend training keys) turns the shared one off.
    ``backend`` follows ``device`` unless given (both say where the model runs).
    """
    backend = device if backend is None else backend
    if f is None:
        return lambda g: common_options(g, model_path=model_path, config=config, device=device, backend=backend)

    @functools.wraps(f)
    def wrapper(*args: Any, index_dir, verbose, **kwargs: Any):
        level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
        logging.basicConfig(level=level, format="supergrep: %(levelname)s: %(message)s")
        logging.getLogger().setLevel(level)
        opts = Options(index_dir=index_dir,
                       model_path=kwargs.pop("model_path") if model_path else None,
                       device=kwargs.pop("device") if device else None,
                       config_file=kwargs.pop("config_file") if config else None,
                       backend=kwargs.pop("backend") if backend else None)
        return f(*args, opts=opts, **kwargs)

    options = [
        click.option("--index-dir", type=click.Path(file_okay=False, path_type=Path), envvar="SUPERGREP_INDEX_DIR",
                     help="Index directory to use (default: $SUPERGREP_HOME/indexes/<project>)."),
        click.option("-v", "--verbose", count=True, help="More log output (-vv for debug)."),
    ]
    if device:
        options.insert(1, click.option("--device", default=None, help="auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps."))
    if backend:
        options.insert(1, click.option(
            "--backend", type=click.Choice(BACKEND_CHOICES), default=None, envvar="SUPERGREP_BACKEND",
            help="Framework that runs the model: torch, mlx (Apple MLX), onnx (onnxruntime, CPU) or auto "
                 "(onnx for exported models and for the named models on a CPU-only machine; else torch if "
                 "installed, else mlx). Config: encode.backend; env: SUPERGREP_BACKEND."))
    if config:
        options.insert(1, click.option(
            "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
            help="Extra TOML config file, applied after $SUPERGREP_HOME/config.toml and the project's .supergrep.toml."))
    if model_path:
        options.insert(1, click.option(
            "--model-path", "--model", "model_path", type=click.Path(path_type=Path), envvar="SUPERGREP_MODEL",
            help="Model: a name (minilm = the default, mpnet = quality; `supergrep models`) or a directory "
                 "(Hugging Face, sentence-transformers, PyLate, XTR or supergrep layout). Env: SUPERGREP_MODEL."))
    for opt in reversed(options):
        wrapper = opt(wrapper)
    return wrapper


@dataclass
class Options:
    index_dir: Path | None
    model_path: Path | None
    device: str | None
    config_file: Path | None
    backend: str | None = None

    def config(self, root: Path | None) -> Config:
        cfg = load_config(root, self.config_file)
        if self.device:
            cfg.encode.device = self.device
        if self.backend:
            cfg.encode.backend = self.backend
        return cfg

    def encoder(self, cfg: Config, index=None):
        """The Encoder for --model-path; without one, for the model ``index`` was built with
        (when it exists and that model is here), else for the default model of the device
        that encodes (``named.default_model``: minilm-l3 on a CPU, minilm on a GPU)."""
        return make_encoder(self.model_spec(cfg, index), cfg)

    def model_spec(self, cfg: Config, index=None):
        from supergrep.encoder.named import default_model, model_of_index
        from supergrep.encoder.spec import resolve_model

        if self.model_path is not None:
            return resolve_model(self.model_path)
        if index is not None and index.exists():
            built_with = model_of_index(index.manifest.model)
            if built_with is not None:
                return resolve_model(built_with)
        return resolve_model(default_model(cfg.encode.device))

    def index(self, root: Path):
        from supergrep.index.project import Index

        return Index(root, self.index_dir)


def model_dir_argument(path: Path) -> Path:
    """A MODEL_DIR argument: a directory, or a model name (``mpnet``) made one (assembled if needed)."""
    from supergrep.encoder.named import MODEL_NAMES, is_model_name, model_dir

    if is_model_name(path):
        return model_dir(str(path))
    if not path.is_dir():
        raise UsageError(f"{path} is not a model directory; pass the directory holding the model "
                         f"or a model name ({', '.join(MODEL_NAMES)})")
    return path


def resolve_root(path: str | None, search_up: bool = True) -> Path:
    """The project root: PATH if given, else the nearest indexed ancestor / git root / cwd."""
    from supergrep.index.project import find_project_root

    if path is not None:
        p = Path(path).expanduser()
        if not p.exists():
            raise UsageError(f"{p} does not exist; pass an existing directory")
        if not p.is_dir():
            raise UsageError(f"{p} is not a directory; pass the project's root directory")
        return p.resolve()
    return find_project_root(Path.cwd()) if search_up else Path.cwd().resolve()


def runs_int8_on_cpu(spec) -> bool:
    """Whether ``auto`` runs ``spec`` as its int8 ONNX form on a CPU: the named models, however
    given (no --model-path, a name, or their directory), whose int8 forms were measured within
    one point of MRR of fp32 (minilm on the public set; mpnet: public hybrid .866 vs .862, dev
    .794 vs .801, 1.42x the lines/s; minilm-l3; docs/deployment.md), and only them: another model's int8
    form is unmeasured."""
    from supergrep.encoder.named import named_model_of

    # minilm-l3 is in supergrep's layout (its layers over minilm): no adapter either
    return named_model_of(spec.path) is not None and spec.adapter is None


def choose_backend(spec, cfg: Config):
    """(model spec, backend name) for ``cfg.encode.backend``.

    - an exported ONNX directory runs on onnx (torch cannot run it);
    - ``onnx`` with a float model directory uses its int8 ONNX form, exported once into
      ``$SUPERGREP_HOME/models`` (``export.onnx_graph.cached_export``);
    - ``auto`` does the same for the named models (minilm, the default, and mpnet) when encoding
      runs on the CPU and onnxruntime is installed (DEFAULT_CPU_ONNX: measured faster for < 1
      point of MRR, docs/deployment.md); every other model runs on torch if installed, else mlx.
    """
    from supergrep.encoder.spec import resolve_model

    requested = (cfg.encode.backend or "auto").strip().lower()
    if requested not in BACKEND_CHOICES:
        raise UsageError(f"unknown backend '{requested}'; choose one of: {', '.join(BACKEND_CHOICES)}")
    if spec.onnx_file is not None:
        if requested in ("torch", "mlx"):
            raise UsageError(f"{spec.path} is an ONNX export, which --backend {requested} cannot run; "
                             f"use --backend onnx (or auto)")
        return spec, "onnx"
    fast_default = (requested == "auto" and DEFAULT_CPU_ONNX and cpu_only(cfg.encode.device)
                    and importlib.util.find_spec("onnxruntime") is not None and runs_int8_on_cpu(spec))
    if requested == "onnx" or fast_default:
        from supergrep.encoder.named import named_model_of
        from supergrep.export.onnx_graph import cached_export, cached_export_dir

        named = named_model_of(spec.path)
        rules = list(named.cpu_int8_layers) if named is not None else []  # the measured form
        if requested == "auto" and not (cached_export_dir(spec, rules=rules) / "supergrep_model.json").is_file() \
                and importlib.util.find_spec("onnx") is None:
            return spec, "torch"  # cannot export here: stay on torch
        return resolve_model(cached_export(spec, rules=rules)), "onnx"
    if requested == "auto":
        from supergrep.backends.base import resolve_backend

        return spec, resolve_backend("auto")  # torch if installed, else mlx
    return spec, requested


# The named models' int8 ONNX forms are the default CPU path (MRR within one point of fp32
# torch: docs/deployment.md).
DEFAULT_CPU_ONNX = True


def make_encoder(spec, cfg: Config):
    """The Encoder for ``spec`` with the backend ``choose_backend`` picks."""
    from supergrep.encoder.encoder import Encoder

    spec, backend = choose_backend(spec, cfg)
    return Encoder(spec, backend=backend, device=cfg.encode.device, batch_tokens=cfg.encode.batch_tokens,
                   threads=cfg.encode.threads)
