"""Tiny randomly initialised models in every layout supergrep reads, built offline.

Tokenizers are made locally: a WordPiece vocabulary (BERT, MPNet), a byte-level BPE trained on a
few lines (RoBERTa), a sentencepiece model trained on a few lines (T5), or the default model's
MiniLM files. Every builder writes a complete model directory and returns its path.
"""

from __future__ import annotations

import functools
import json
import random
import shutil
from pathlib import Path

WORDS = (
    "def return class import self value index search query token vector model encode file path "
    "open read write for in if else the a of to and is parse json config load save error raise "
    "list dict string number print main test user name data result"
).split()
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
PUNCT = ".,:;()[]{}=_-+*/'\"#<>!?"

# The zoo's T5 variants (tests/encoder/conftest.py builds them)
T5_MODELS = ["t5-full-json-bin", "t5-t5model-json-safetensors", "t5-encoder-spiece-bin",
             "t5-encoder-json-safetensors", "t5-modules"]

# Dense activation as sentence-transformers writes it
IDENTITY = "torch.nn.modules.linear.Identity"


def _quiet() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _corpus(n: int = 300, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    lines = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 14))) for _ in range(n)]
    lines += ["def foo(x): return x.value + 1", "class Parser: def parse(self, text): ...",
              "if (a[0] == b) { print('x'); } # note", PUNCT, CHARS.upper()]
    return lines


def wordpiece_vocab(specials: list[str]) -> dict[str, int]:
    toks = specials + list(CHARS) + list(PUNCT) + ["##" + c for c in CHARS + "_"] + WORDS
    return {t: i for i, t in enumerate(dict.fromkeys(toks))}


def _small(hidden: int) -> dict:
    return dict(hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=2 * hidden)


def save_dense(path: Path, weight, bias=None, fmt: str = "safetensors",
               activation: str = IDENTITY, extra: dict | None = None) -> Path:
    """A sentence-transformers Dense directory: config.json + model.safetensors or
    pytorch_model.bin (a torch.save'd state dict with ``linear.weight``)."""
    import torch

    path.mkdir(parents=True, exist_ok=True)
    out_f, in_f = weight.shape
    cfg = {"in_features": in_f, "out_features": out_f, "bias": bias is not None,
           "activation_function": activation}
    cfg.update(extra or {})
    (path / "config.json").write_text(json.dumps(cfg))
    state = {"linear.weight": weight.contiguous()}
    if bias is not None:
        state["linear.bias"] = bias.contiguous()
    if fmt == "bin":
        torch.save(state, path / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file(state, str(path / "model.safetensors"))
    return path


def random_dense(in_f: int, out_f: int, seed: int = 1, bias: bool = False):
    import torch

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=g) / in_f**0.5
    b = torch.randn(out_f, generator=g) * 0.1 if bias else None
    return w, b


# -- plain Hugging Face encoders --------------------------------------------------------------


def make_bert(path: Path, hidden: int = 32, seed: int = 0, minilm_tokenizer: bool = False,
              added_tokens: tuple[str, ...] = ()) -> Path:
    """BERT with a small WordPiece vocabulary (or the real MiniLM tokenizer)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, BertTokenizer

    from supergrep.encoder.spec import default_model_dir

    _quiet()
    if minilm_tokenizer:
        tok = AutoTokenizer.from_pretrained(str(default_model_dir()), local_files_only=True)
    else:
        tok = BertTokenizer(vocab=wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    if added_tokens:
        tok.add_tokens(list(added_tokens))  # what PyLate does with "[Q] " and "[D] "
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tok), max_position_embeddings=512, **_small(hidden))
    BertModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_mpnet(path: Path, hidden: int = 32, seed: int = 0) -> Path:
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    _quiet()
    tok = MPNetTokenizer(vocab=wordpiece_vocab(["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]))
    torch.manual_seed(seed)
    cfg = MPNetConfig(vocab_size=len(tok), max_position_embeddings=514, pad_token_id=tok.pad_token_id,
                      **_small(hidden))
    MPNetModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_roberta(path: Path, hidden: int = 32, seed: int = 0) -> Path:
    """RoBERTa with a byte-level BPE trained on a few lines."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    _quiet()
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_corpus(), vocab_size=400, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    merges = json.loads(bpe.to_str())["model"]["merges"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]
    tok = RobertaTokenizer(vocab=bpe.get_vocab(), merges=merges)
    torch.manual_seed(seed)
    cfg = RobertaConfig(vocab_size=len(tok), max_position_embeddings=514, pad_token_id=tok.pad_token_id,
                        **_small(hidden))
    RobertaModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


# -- T5 / XTR ---------------------------------------------------------------------------------


def train_spiece(prefix: Path, vocab_size: int = 120) -> Path:
    """A sentencepiece unigram model with T5's special ids (pad 0, eos 1, unk 2, no bos)."""
    import sentencepiece as spm

    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(_corpus()))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(prefix), vocab_size=vocab_size, hard_vocab_limit=False,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0,
        minloglevel=2,
    )
    text.unlink()
    return prefix.with_suffix(".model")


def make_t5(path: Path, arch: str = "encoder", tokenizer: str = "json", dense: str | None = "bin",
            modules: bool = False, d_model: int = 32, out_features: int = 16, seed: int = 0) -> Path:
    """A T5 encoder in google/xtr-base-en's layout.

    Args:
        arch: "full" (T5ForConditionalGeneration), "t5model" (T5Model) or "encoder"
            (T5EncoderModel): what the root checkpoint holds.
        tokenizer: "json" (spiece.model + tokenizer.json + tokenizer_config.json, like XTR) or
            "spiece" (spiece.model only).
        dense: "bin" (2_Dense/pytorch_model.bin), "safetensors", or None (no projection).
        modules: Also write a sentence-transformers modules.json (Transformer at "", Pooling,
            Dense at 2_Dense, Normalize).
    """
    import torch
    from transformers import (
        AutoTokenizer,
        T5Config,
        T5EncoderModel,
        T5ForConditionalGeneration,
        T5Model,
    )

    _quiet()
    path.mkdir(parents=True, exist_ok=True)
    spm_file = train_spiece(path / "spiece")
    (path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)  # from spiece.model
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=len(tok), d_model=d_model, d_kv=16, d_ff=2 * d_model, num_layers=2,
                   num_heads=2, feed_forward_proj="gated-gelu", decoder_start_token_id=0,
                   relative_attention_num_buckets=8)
    cls = {"full": T5ForConditionalGeneration, "t5model": T5Model, "encoder": T5EncoderModel}[arch]
    cls(cfg).save_pretrained(path)
    for extra in ("generation_config.json",):
        (path / extra).unlink(missing_ok=True)
    if tokenizer == "json":
        tok.save_pretrained(path)
    assert spm_file.is_file()
    if dense:
        w, _ = random_dense(d_model, out_features, seed=seed + 1)
        save_dense(path / "2_Dense", w, fmt=dense)
    if modules:
        (path / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"},
        ]))
        (path / "1_Pooling").mkdir(exist_ok=True)
        (path / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": d_model, "pooling_mode_mean_tokens": True}))
        (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))
    return path


# -- sentence-transformers and PyLate ----------------------------------------------------------


def _st_modules(dense_type: str, dense_dir: str | None, pooling: bool = True) -> list[dict]:
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    if pooling:
        mods.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    if dense_dir:
        mods.append({"idx": len(mods), "name": str(len(mods)), "path": dense_dir, "type": dense_type})
    if pooling:
        mods.append({"idx": len(mods), "name": str(len(mods)), "path": f"{len(mods)}_Normalize",
                     "type": "sentence_transformers.models.Normalize"})
    return mods


def make_sentence_transformers(path: Path, prompts: dict | None = None, dense_out: int | None = 24,
                               activation: str = IDENTITY, bias: bool = True, seed: int = 0) -> Path:
    """BERT + Pooling + Dense + Normalize, with prompts in config_sentence_transformers.json."""
    make_bert(path, seed=seed)
    dense_dir = "2_Dense" if dense_out else None
    (path / "modules.json").write_text(json.dumps(
        _st_modules("sentence_transformers.models.Dense", dense_dir)))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    if dense_out:
        w, b = random_dense(32, dense_out, seed=seed + 1, bias=bias)
        save_dense(path / "2_Dense", w, b, activation=activation)
    cfg = {"__version__": {"sentence_transformers": "3.0.1"}, "prompts": prompts or {},
           "default_prompt_name": None, "similarity_fn_name": "cosine"}
    (path / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return path


def make_pylate(path: Path, query_length: int = 12, document_length: int = 20,
                do_query_expansion: bool = True, attend_to_expansion_tokens: bool = False,
                skiplist_words: list[str] | None = None, dense_out: int = 16,
                dense_fmt: str = "safetensors", seed: int = 0) -> Path:
    """A PyLate ColBERT directory as ``ColBERT.save`` writes it (pylate/models/colbert.py):
    modules.json with Transformer + ``pylate.models.Dense.Dense`` (no Pooling), the ColBERT keys
    in config_sentence_transformers.json, and "[Q] "/"[D] " added to the tokenizer."""
    make_bert(path, seed=seed, added_tokens=("[Q] ", "[D] "))
    (path / "modules.json").write_text(json.dumps(
        _st_modules("pylate.models.Dense.Dense", "1_Dense", pooling=False)))
    w, _ = random_dense(32, dense_out, seed=seed + 1)
    save_dense(path / "1_Dense", w, fmt=dense_fmt, extra={"use_residual": False})
    cfg = {
        "__version__": {"sentence_transformers": "4.0.2", "pylate": "1.2.0"},
        "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
        "query_prefix": "[Q] ", "document_prefix": "[D] ",
        "query_length": query_length, "document_length": document_length,
        "attend_to_expansion_tokens": attend_to_expansion_tokens,
        "skiplist_words": list(PUNCT) if skiplist_words is None else skiplist_words,
        "do_query_expansion": do_query_expansion,
    }
    (path / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    return path


def make_supergrep(path: Path, base: str, projection_out: int | None = 8, settings: dict | None = None,
                   name: str = "tiny-supergrep", in_features: int = 32, seed: int = 5) -> Path:
    """supergrep's own layout: supergrep_model.json + an optional projection directory."""
    path.mkdir(parents=True, exist_ok=True)
    data: dict = {"name": name, "base": base}
    if projection_out:
        w, _ = random_dense(in_features, projection_out, seed=seed)
        save_dense(path / "projection", w)
        data["projection"] = "projection"
    if settings is not None:
        data["settings"] = settings
    (path / "supergrep_model.json").write_text(json.dumps(data))
    return path


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# -- independent references --------------------------------------------------------------------


def hf_tokenizer(path: Path):
    from transformers import AutoTokenizer

    _quiet()
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def dense_weights(dense_dir: Path):
    """(weight, bias) read straight from a Dense directory's weight file."""
    import torch

    if (dense_dir / "model.safetensors").is_file():
        from safetensors.torch import load_file

        state = load_file(str(dense_dir / "model.safetensors"))
    else:
        state = torch.load(dense_dir / "pytorch_model.bin", weights_only=True)
    return state["linear.weight"], state.get("linear.bias")


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns if path.exists() else 0


@functools.lru_cache(maxsize=16)
def _reference_model(model_dir: str, *_stamp):
    """The checkpoint loaded with its own architecture class (a full T5's encoder stack)."""
    import transformers

    _quiet()
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    arch = (cfg.get("architectures") or ["AutoModel"])[0]
    cls = getattr(transformers, arch, transformers.AutoModel)
    model = cls.from_pretrained(model_dir, local_files_only=True).eval()
    if cfg.get("model_type") == "t5" and arch != "T5EncoderModel":
        model = model.get_encoder()
    return model


def reference_vectors(model_dir: Path, ids: list[int], dense: list[Path] = (),
                      attention: list[int] | None = None, activation: str = "identity"):
    """Token vectors computed directly with transformers: the checkpoint's own architecture
    (the encoder of a full T5), then each Dense weight, then L2 normalisation. -> (n, dim)"""
    import torch

    model = _reference_model(str(model_dir), *(_mtime(model_dir / f) for f in ("config.json", "model.safetensors")))
    input_ids = torch.tensor([ids])
    mask = torch.tensor([attention if attention is not None else [1] * len(ids)])
    with torch.no_grad():
        h = model(input_ids=input_ids, attention_mask=mask).last_hidden_state[0].float()
        for d in dense:
            w, b = dense_weights(Path(d))
            h = h @ w.T + (b if b is not None else 0)
            if activation != "identity":
                h = getattr(torch.nn, activation)()(h)
        return torch.nn.functional.normalize(h, dim=-1).numpy()
