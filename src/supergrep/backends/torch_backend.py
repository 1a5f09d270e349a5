"""PyTorch + Hugging Face transformers backend (CUDA, Apple MPS or CPU)."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from supergrep.errors import ModelError, UsageError

if TYPE_CHECKING:
    from supergrep.encoder.spec import DenseSpec, ModelSpec

log = logging.getLogger(__name__)

# Models come from local directories only: never let transformers reach for the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from supergrep.backends.torch_compile import compile_dynamic  # noqa: E402

# Encoder-decoder families whose encoder stack has a class of its own (decoder never loaded).
ENCODER_CLASSES = {
    "t5": "T5EncoderModel",
    "mt5": "MT5EncoderModel",
    "umt5": "UMT5EncoderModel",
    "t5gemma": "T5GemmaEncoderModel",
}
T5_TYPES = set(ENCODER_CLASSES)
# Encoders with a varlen forward (``torch_t5_varlen``): documents laid end to end, no padding.
VARLEN_TYPES = ("t5", "bert", "roberta", "xlm-roberta")


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, without terminal escapes, cut to ``limit``."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return default if not value else value not in ("0", "false", "no", "off")


def pick_device(device: str = "auto") -> str:
    """CUDA > MPS > CPU for "auto"; otherwise validate the requested device."""
    device = (device or "auto").strip().lower()
    mps = getattr(torch.backends, "mps", None)
    mps_ok = bool(mps is not None and mps.is_available())
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if mps_ok:
            return "mps"
        return "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or re.fullmatch(r"cuda:\d+", device):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device} requested but CUDA is not available; use --device cpu")
        n = torch.cuda.device_count()
        if ":" in device and int(device.split(":")[1]) >= n:
            raise UsageError(f"--device {device} requested but there are only {n} CUDA device(s) "
                             f"(cuda:0 to cuda:{n - 1})")
        return device
    if device == "mps":
        if not mps_ok:
            raise UsageError("--device mps requested but MPS is not available; use --device cpu")
        return device
    raise UsageError(f"unknown device '{device}'; use auto, cpu, cuda, cuda:N or mps")


def pick_dtype(device: str) -> torch.dtype:
    """fp32 on CPU (fp16 matmuls there are slow and lossy); bf16 on GPUs that have it, else fp16."""
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    return torch.float32


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Weights from safetensors, or a legacy .bin without unpickling arbitrary objects."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - safetensors/zip readers raise many kinds
        if type(exc).__name__ == "UnpicklingError":  # what weights_only=True raises for objects
            raise ModelError(
                f"{path}: cannot be read as weights: it holds pickled Python objects besides tensors, "
                f"which supergrep does not load; convert it to model.safetensors"
            ) from None
        raise ModelError(
            f"{path}: cannot be read as weights ({_one_line(exc)}); the file is damaged or not a "
            f"checkpoint: copy it again or convert it to model.safetensors"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"{path}: expected a dict of tensors (a state dict); convert it to model.safetensors")
    return state


class DenseLayer(torch.nn.Module):
    """sentence-transformers / PyLate Dense: activation(linear(x)) [+ x or residual(x)]."""

    def __init__(self, linear: torch.nn.Linear, activation: torch.nn.Module,
                 residual: torch.nn.Module | None):
        super().__init__()
        self.linear, self.activation, self.residual = linear, activation, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.linear(x))
        if self.residual is not None:
            y = y + self.residual(x)
        return y


def build_dense(d: DenseSpec) -> torch.nn.Module:
    """A Dense layer (``linear.weight``, optional ``linear.bias``, activation, PyLate residual)."""
    state = load_state_dict(d.weight_file())

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        t = state.get(f"linear.{name}", state.get(name))
        if t is None or tuple(t.shape) != shape:
            got = "nothing" if t is None else f"shape {tuple(t.shape)}"
            raise ModelError(
                f"{d.path}: Dense {name} has {got}, expected {shape} "
                f"(out_features={d.out_features}, in_features={d.in_features} in its config.json); "
                f"the config and the weights do not match"
            )
        return t

    linear = torch.nn.Linear(d.in_features, d.out_features, bias=d.bias)
    with torch.no_grad():
        linear.weight.copy_(get("weight", (d.out_features, d.in_features)))
        if d.bias:
            if state.get("linear.bias", state.get("bias")) is None:
                raise ModelError(f"{d.path}: Dense config says bias=true but the weights have no bias; "
                                 f"set \"bias\": false in its config.json")
            linear.bias.copy_(get("bias", (d.out_features,)))
    if d.activation == "identity":
        act: torch.nn.Module = torch.nn.Identity()
    else:
        cls = getattr(torch.nn, d.activation, None)
        if cls is None:
            raise ModelError(f"{d.path}: unsupported Dense activation '{d.activation}'")
        act = cls()
    residual: torch.nn.Module | None = None
    if d.residual:
        if d.in_features == d.out_features:
            residual = torch.nn.Identity()
        else:
            w = state.get("residual.weight")
            if w is None or tuple(w.shape) != (d.out_features, d.in_features):
                raise ModelError(f"{d.path}: use_residual is set but residual.weight is missing or "
                                 f"not ({d.out_features}, {d.in_features})")
            residual = torch.nn.Linear(d.in_features, d.out_features, bias=False)
            with torch.no_grad():
                residual.weight.copy_(w)
    return DenseLayer(linear, act, residual)


def _dtype_kwarg() -> str:
    """transformers >= 4.56 calls it ``dtype``; older versions ``torch_dtype``."""
    import transformers

    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


# Missing weights that do not affect token vectors (the pooler head, buffers).
_HARMLESS_MISSING = re.compile(r"(^|\.)pooler\.|position_ids$|masked_bias$")


def load_transformer(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    """The base encoder; for encoder-decoder models (T5) only the encoder stack is used. A
    layer-dropped model (`supergrep shrink`: ``spec.layers``) is the base with only the kept
    layers, their weights from the student's file."""
    model = _load_transformer(spec, dtype)
    if spec.layers is not None:
        from supergrep.backends.torch_layers import keep_layers, load_layer_weights

        keep_layers(model, spec.layers.keep)
        load_layer_weights(model, spec.layers.file)
    return model


def _load_transformer(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    if spec.onnx_file is not None:
        raise UsageError(f"{spec.path} holds an ONNX graph (`supergrep export onnx`), which the torch "
                         f"backend cannot run; use --backend onnx, or point --model-path at the float model")
    if spec.quantization is not None:
        return load_quantized(spec, dtype)
    path = str(spec.transformer_path)
    kwargs = {"local_files_only": True, _dtype_kwarg(): dtype, "output_loading_info": True}

    def load(cls, **extra):
        model, info = cls.from_pretrained(path, **kwargs, **extra)
        missing = [k for k in info.get("missing_keys", ()) if not _HARMLESS_MISSING.search(k)]
        if missing:
            raise ModelError(
                f"{path}: the weights do not match config.json ({len(missing)} weight(s) missing, "
                f"e.g. '{missing[0]}'); the checkpoint is for another architecture or incomplete"
            )
        if info.get("mismatched_keys"):
            raise ModelError(f"{path}: weight shapes do not match config.json "
                             f"(e.g. '{info['mismatched_keys'][0]}'); the directory is inconsistent")
        return model

    try:
        enc_class = ENCODER_CLASSES.get(spec.model_type)
        if enc_class is not None:
            cls = getattr(transformers, enc_class, None)
            if cls is None:
                raise ModelError(f"{path}: model type '{spec.model_type}' needs transformers."
                                 f"{enc_class}, which this transformers {transformers.__version__} lacks; "
                                 f"upgrade transformers")
            return load(cls)
        try:
            model = load(transformers.AutoModel, attn_implementation="sdpa")
        except ValueError as exc:  # architectures without SDPA support (MPNet, ...)
            if "attention" not in str(exc).lower() and "sdpa" not in str(exc).lower():
                raise
            model = load(transformers.AutoModel)
        if getattr(model.config, "is_encoder_decoder", False):
            model = model.get_encoder()
        return model
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; say what to do
        if "mismatched" in str(exc) or "size mismatch" in str(exc):
            raise ModelError(f"cannot load the model in {path}: weight shapes do not match "
                             f"config.json; the weights belong to another model") from None
        raise ModelError(
            f"cannot load the model in {path}: {_one_line(exc)}; copy the model directory again, "
            f"or upgrade transformers ({transformers.__version__}) if its architecture is newer"
        ) from None


def load_quantized(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    """A `supergrep quantize` directory: the architecture from config.json, the weights
    dequantized to float at load (``backends/quant.py``).

    What it costs: loading reads ~4x (int8) or ~7x (int4) fewer bytes but dequantizes every
    weight once (~0.3 s for MiniLM); inference then runs at float speed with the quantized
    weights' values. The fast CPU path is the ONNX int8 export (docs/deployment.md).
    """
    import transformers

    from supergrep.backends.quant import load_dequantized

    q = spec.quantization or {}
    path = str(spec.transformer_path)
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
        raise ModelError(f"{path}/config.json cannot be read ({_one_line(exc)}); quantize the model again") from None
    enc_class = ENCODER_CLASSES.get(spec.model_type)
    if enc_class:
        model = getattr(transformers, enc_class)(config)
    else:
        try:
            model = transformers.AutoModel.from_config(config, attn_implementation="sdpa")
        except (ValueError, TypeError):  # architectures without SDPA support (MPNet, ...)
            model = transformers.AutoModel.from_config(config)
    if getattr(model.config, "is_encoder_decoder", False):
        model = model.get_encoder()
    arrays = load_dequantized(q["file"], q.get("tensors", {}))
    state = {k: torch.from_numpy(v) for k, v in arrays.items()}
    for alias, target in (q.get("aliases") or {}).items():  # tied weights are stored once
        if target not in state:
            raise ModelError(f"{q['file']}: tied weight {alias} points at missing {target}; quantize again")
        state[alias] = state[target]
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not _HARMLESS_MISSING.search(k)]
    if missing or result.unexpected_keys:
        what = f"missing {missing[:2]}" if missing else f"unexpected {result.unexpected_keys[:2]}"
        raise ModelError(f"{q['file']} does not fit {path}/config.json ({what}); quantize the model again")
    return model.to(dtype)


def load_encoder(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    """The base encoder with the spec's LoRA adapter (if any) folded in, in ``dtype``.

    The adapter is merged in fp32 (W + alpha/r * B @ A), then the model is cast.
    """
    if spec.adapter is None:
        return load_transformer(spec, dtype)
    from safetensors.torch import load_file

    from supergrep.backends.adapters import ADAPTER_WEIGHTS, LoRAConfig
    from supergrep.backends.torch_lora import merge_adapter_weights

    model = load_transformer(spec, torch.float32)
    merge_adapter_weights(model, LoRAConfig.read(spec.adapter), load_file(str(spec.adapter / ADAPTER_WEIGHTS)))
    return model.to(dtype)


_TORCH_DTYPES = {np.int64: torch.int64, np.int32: torch.int32}


class _Pending:
    """A queued ``submit_flat``: ``result()`` waits for its device work and gives the vectors."""

    def __init__(self, host: np.ndarray, done):
        self._host, self._done = host, done

    def result(self) -> np.ndarray:
        if self._done is not None:
            with torch.profiler.record_function("sg::wait_result"):
                self._done.synchronize()
            self._done = None
        return self._host


# Eager T5 tokens before the flat forward compiles: ~18 s of compilation at 0.82M tokens/s eager
# (xtr-base, H100; TorchBackend._compile_threshold).
COMPILE_AFTER = 15_000_000


class TorchBackend:
    name = "torch"

    def __init__(self, spec: ModelSpec, device: str = "auto", threads: int = 0, varlen: bool | None = None,
                 compile: bool | None = None, fp8: bool | None = None):
        if threads > 0:
            torch.set_num_threads(threads)
        self.device = pick_device(device)
        self._dtype = pick_dtype(self.device)
        self.dtype = str(self._dtype).removeprefix("torch.")
        spec.weight_files()  # a clear error for missing weights before transformers' own
        layers = [build_dense(d) for d in spec.dense]  # cheap checks first
        self.model = load_encoder(spec, self._dtype).to(self.device).eval()
        self.head = torch.nn.Sequential(*layers).to(self.device, self._dtype).eval()
        self.dim = spec.dim
        self._t5 = spec.model_type in T5_TYPES
        # RoBERTa counts positions from padding_idx + 1
        self._pos_offset = (int(self.model.config.pad_token_id) + 1
                            if spec.model_type in ("roberta", "xlm-roberta") else 0)
        self.varlen = self._choose_varlen(spec, varlen)
        self._flat = self._flat_impl
        self._flat_tokens = 0
        self._pinned: list = [None, None]  # forward_flat's two host buffers, used in turn
        # ... and its inputs' (ids, cu, pos) two sets, used in turn
        self._pinned_in: list = [[None] * 3, [None] * 3]
        self._pinned_in_done: list = [None, None]  # each set's upload event
        self._pinned_in_turn = 0
        self.flat_pin_inputs = True  # False: pageable uploads (bench encode's +pageable comparison)
        self._pinned_turn = 0
        self._copy_stream = None  # CUDA: the device-to-host copies, off the compute stream
        # What the flat forward hands the host: float32 (default), or float16 for half the bytes
        # over PCIe at the price of a host-side conversion (`bench encode`'s comparison)
        self.flat_host_dtype = torch.float32
        self._flat_compile_after = self._compile_threshold(compile)
        self._fp8 = None  # the handle of the float8 layers while they are on (set_fp8)
        self._fp8_options = None
        if fp8 is None and os.environ.get("SUPERGREP_ENCODE_FP8", "").strip():
            fp8 = _env_flag("SUPERGREP_ENCODE_FP8", False)
        if fp8:
            self.set_fp8(True)

    def set_fp8(self, on: bool, options=None) -> bool:
        """Float8 matrix products for the encoder's linear layers (``torch_fp8.py``; CUDA with
        compute capability 8.9+ only, else a warning and bf16), with ``options``
        (``Fp8Options``; None: from the environment). Returns whether they are on."""
        from supergrep.backends.torch_fp8 import Fp8Options, enable_fp8, fp8_supported

        options = options or Fp8Options.from_env()
        if self._fp8 is not None and (not on or self._fp8_options != options):
            self._fp8.restore()
            self._fp8 = None
        if not on:
            return False
        if self._fp8 is not None:
            return True
        if not fp8_supported(self.device):
            log.warning("float8 encoding needs a CUDA GPU with compute capability 8.9+ (%s has none); "
                        "encoding in %s", self.device, self.dtype)
            return False
        self._fp8 = enable_fp8(self.model, options=options)
        self._fp8_options = options
        return True

    def _choose_varlen(self, spec: ModelSpec, varlen: bool | None) -> bool:
        """Whether documents go through ``forward_flat``: T5/BERT/RoBERTa float models, by default on
        CUDA with Triton (where the varlen attention is a kernel); ``SUPERGREP_ENCODE_VARLEN=0|1``
        overrides (the tests run the torch attention on a CPU)."""
        ok = spec.model_type in VARLEN_TYPES and spec.quantization is None
        if varlen is None:
            default = self.device.startswith("cuda") and importlib.util.find_spec("triton") is not None
            varlen = _env_flag("SUPERGREP_ENCODE_VARLEN", default)
        return bool(varlen and ok)

    def _compile_threshold(self, compile: bool | None) -> int | None:
        """After how many flat tokens the flat forward gets compiled (None: never).

        Compiling fuses T5's norms and gated activation, memory-bound passes over every token:
        xtr-base on an H100 encodes 1.93M tokens/s compiled vs 0.82M eager, for ~18 s of
        compilation (benchmarks/results/gpu-h100-2026-11-24-encode/). So on CUDA a T5 model
        compiles once it has spent about that long in eager batches (COMPILE_AFTER tokens; at
        most 2x the best choice made in hindsight, and never for a small index). MiniLM (BERT,
        384-d) measured slower compiled (0.80M vs 0.95M tokens/s: its batches are bound by the
        host's copy of the vectors), so BERT/RoBERTa stay eager. ``compile`` /
        ``SUPERGREP_ENCODE_COMPILE``: 1 = from the first batch, 0 = never."""
        if not self.varlen:
            return None
        if compile is None and os.environ.get("SUPERGREP_ENCODE_COMPILE", "").strip():
            compile = _env_flag("SUPERGREP_ENCODE_COMPILE", False)
        if compile is not None:
            return 0 if compile else None
        return COMPILE_AFTER if self.device.startswith("cuda") and self._t5 else None

    def set_flat_mode(self, mode: str) -> None:
        """Documents through the flat forward from now on, run ``eager``, ``compile``d or
        ``autotune``d (Inductor's max-autotune), with no later switch (``bench encode``'s modes)."""
        self.varlen, self._flat_compile_after = True, None
        if mode == "eager":
            self._flat = self._flat_impl
        else:
            self._flat = compile_dynamic(self._flat_impl, "max-autotune-no-cudagraphs" if mode == "autotune" else None)

    def _run_flat(self, ids, cu, pos, max_len: int) -> torch.Tensor:
        """The flat forward, compiled if it is; a compilation that fails (no compiler, an Inductor
        bug) costs a warning and the eager forward, never the index run."""
        if self._flat is not self._flat_impl:
            try:
                return self._flat(ids, cu, pos, max_len)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - torch.compile raises many kinds
                log.warning("the compiled encoder failed (%s); encoding eagerly from now on", _one_line(exc))
                self._flat = self._flat_impl
        return self._flat_impl(ids, cu, pos, max_len)

    def _flat_impl(self, ids: torch.Tensor, cu: torch.Tensor, pos: torch.Tensor, max_len: int) -> torch.Tensor:
        from supergrep.backends.torch_t5_varlen import bert_varlen_forward, varlen_forward

        if self._t5:
            hidden = varlen_forward(self.model, ids, cu, max_len)
        else:
            hidden = bert_varlen_forward(self.model, ids, pos, cu, max_len, self._pos_offset)
        vecs = torch.nn.functional.normalize(self.head(hidden).float(), p=2, dim=-1)  # (N, dim)
        # float32 by default: the GPU converts for free, while the host's float16 -> float32
        # conversion (NumPy) was the encoder's bottleneck (flat_host_dtype)
        return vecs.to(self.flat_host_dtype)

    @torch.inference_mode()
    def forward_flat(self, input_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Encode documents laid end to end, with no padding (T5/BERT/RoBERTa: ``self.varlen``).

        Args:
            input_ids: (N,) int64, the documents' token ids one after another.
            lengths: (n,) each document's token count (>= 1), summing to N.

        Returns:
            (N, dim) unit token vectors, float32 (``flat_host_dtype``).
        """
        return self.submit_flat(input_ids, lengths).result().copy()

    @torch.inference_mode()
    def submit_flat(self, input_ids: np.ndarray, lengths: np.ndarray) -> _Pending:
        """``forward_flat`` without waiting: the forward and the copy to the host are queued on the
        device and ``.result()`` waits for them, so the caller's host work on the previous batch
        overlaps this one's GPU work. The array ``result()`` gives lives in a reused pinned buffer:
        valid until the next-but-one submit (copy what you keep)."""
        with torch.profiler.record_function("sg::submit_flat"):  # a label for encode_trace.py's gaps
            return self._submit_flat(input_ids, lengths)

    def _submit_flat(self, input_ids: np.ndarray, lengths: np.ndarray) -> _Pending:
        lengths = np.asarray(lengths, dtype=np.int64)
        cu = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=cu[1:])
        n = int(cu[-1])
        pos = np.arange(n, dtype=np.int64) - np.repeat(cu[:-1].astype(np.int64), lengths)
        max_len = -(-int(lengths.max()) // 64) * 64  # fewer distinct bias sizes (and compiled variants)
        cuda = self.device.startswith("cuda")
        arrays = (input_ids.astype(np.int64, copy=False), cu, pos)
        if cuda and self.flat_pin_inputs:
            ids_t, cu_t, pos_t = self._upload_pinned(arrays)
        else:
            ids_t, cu_t, pos_t = (torch.from_numpy(np.ascontiguousarray(a)).to(self.device, non_blocking=cuda)
                                  for a in arrays)
        self._flat_tokens += n
        if self._flat_compile_after is not None and self._flat_tokens > self._flat_compile_after:
            self._flat_compile_after = None  # enough tokens seen that compiling pays: from now on
            log.info("compiling the encoder's flat forward (once; ~20 s on an H100)")
            self.set_flat_mode("compile")
        vecs = self._run_flat(ids_t, cu_t, pos_t, max_len)  # (N, dim)
        if not cuda:  # CPU (and MPS, when forced): a plain blocking copy
            return _Pending(vecs.cpu().numpy(), None)
        self._pinned_turn ^= 1
        buf = self._pinned[self._pinned_turn]
        if buf is None or buf.shape[0] < n or buf.shape[1] != vecs.shape[1] or buf.dtype != vecs.dtype:
            buf = torch.empty((max(n, 1 << 16), vecs.shape[1]), dtype=vecs.dtype, pin_memory=True)
            self._pinned[self._pinned_turn] = buf
        # The copy runs on a stream of its own, so the next call's forward need not wait for it
        compute = torch.cuda.current_stream(vecs.device)  # the model's GPU, whichever is current
        if self._copy_stream is None or self._copy_stream.device != vecs.device:
            self._copy_stream = torch.cuda.Stream(vecs.device)
        copy = self._copy_stream
        copy.wait_stream(compute)
        with torch.cuda.stream(copy):
            buf[:n].copy_(vecs, non_blocking=True)
            vecs.record_stream(copy)  # not reused by the compute stream before the copy is done
            done = torch.cuda.Event()
            done.record(copy)
        return _Pending(buf[:n].numpy(), done)

    def _upload_pinned(self, arrays: tuple[np.ndarray, ...]) -> list:
        """The inputs through pinned host buffers (two sets, used in turn): from pageable memory the
        driver stages each copy through a buffer of its own, synchronously. Measured on an H100
        (`bench encode`, +pageable): MiniLM 1.04-1.13x, xtr-base 1.00-1.03x (its GPU idles 6-9%
        of the wall for another reason, not found yet)."""
        self._pinned_in_turn ^= 1
        turn = self._pinned_in_turn
        if self._pinned_in_done[turn] is not None:  # that set's upload, two calls ago (done by now, unless
            self._pinned_in_done[turn].synchronize()  # a caller submits further ahead than Encoder does)
        bufs = self._pinned_in[turn]
        out = []
        for i, a in enumerate(arrays):
            buf, dtype = bufs[i], _TORCH_DTYPES[a.dtype.type]
            if buf is None or buf.numel() < a.size or buf.dtype != dtype:
                buf = bufs[i] = torch.empty(max(a.size, 1 << 16), dtype=dtype, pin_memory=True)
            buf[: a.size].numpy()[:] = a.ravel()
            out.append(buf[: a.size].to(self.device, non_blocking=True))
        done = torch.cuda.Event()
        done.record()
        self._pinned_in_done[turn] = done
        return out

    @torch.inference_mode()
    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids = torch.from_numpy(np.ascontiguousarray(input_ids, dtype=np.int64)).to(self.device)
        mask = torch.from_numpy(np.ascontiguousarray(attention_mask, dtype=np.int64)).to(self.device)
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
        vecs = self.head(hidden).float()  # (B, L, dim)
        vecs = torch.nn.functional.normalize(vecs, p=2, dim=-1)
        return vecs.cpu().numpy()
