"""Options every command takes, and the glue that turns them into an Index and an Encoder."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from supergrep.config import Config, load_config
from supergrep.errors import UsageError


def common_options(f=None, *, model_path: bool = True, config: bool = True, device: bool = True,
                   backend: bool | None = None):
    """--index-dir, --model-path, --device, --backend, --config and -v, on every command.

    A command that defines one of them itself (eval takes --model-path several times; train's
    --config is its YAML, --device and --backend training keys) turns the shared one off.
    ``backend`` follows ``device`` unless given.
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
        from supergrep.backends.base import available_backends

        options.insert(1, click.option(
            "--backend", type=click.Choice(["auto", *available_backends()]), default=None,
            help="Framework that runs the model: torch, mlx (Apple MLX), or auto (torch if installed, else mlx). Config: encode.backend."))
    if config:
        options.insert(1, click.option(
            "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
            help="Extra TOML config file, applied after $SUPERGREP_HOME/config.toml and the project's .supergrep.toml."))
    if model_path:
        options.insert(1, click.option(
            "--model-path", type=click.Path(path_type=Path), envvar="SUPERGREP_MODEL",
            help="Model directory (Hugging Face, sentence-transformers, PyLate, XTR or supergrep layout). Env: SUPERGREP_MODEL."))
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

    def encoder(self, cfg: Config):
        from supergrep.encoder.encoder import Encoder
        from supergrep.encoder.spec import resolve_model

        spec = resolve_model(self.model_path)
        return Encoder(spec, backend=cfg.encode.backend, device=cfg.encode.device,
                       batch_tokens=cfg.encode.batch_tokens, threads=cfg.encode.threads)

    def index(self, root: Path):
        from supergrep.index.project import Index

        return Index(root, self.index_dir)


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
