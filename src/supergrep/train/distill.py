"""`supergrep distill`: fit a small projection head (e.g. 384 -> 128) to a frozen base model by
distilling the base's own MaxSim rankings, so indexes shrink and search speeds up while the
ranking stays the base's.

Why not PCA, or a random orthogonal map: both keep vectors, not rankings. On the public set
(MiniLM, semantic P@1) the raw 384-d model gives .691, its PCA-128 .618; a head distilled on
2,000 pairs gives .655 (docs/training.md, "A 128-d head by distillation").

Method (label-free: the pairs only supply realistic queries and documents):
1. Encode a sample of training queries and documents with the base (``Encoder``: exactly the
   unit token vectors an index of the base would store).
2. Teacher: exact MaxSim (mean over query tokens) of every query against every document of its
   pool (``pool`` documents, grouped by language so the pool holds plausible competitors);
   keep each query's ``top_k`` documents and scores.
3. Student: ``normalize(W x)`` for every token vector ``x`` (for a bias-free ``W`` this equals
   applying ``W`` to the base's hidden states before normalisation, which is where the model
   directory's projection sits). ``W`` starts as the uncentred PCA basis of the token vectors.
4. Loss: KL(teacher || student) of the softmax over each query's ``top_k`` scores at
   ``temperature``: the student learns the teacher's order among the documents that compete.
5. Report, on held-out pools, the positive's MRR and P@1 for teacher, PCA start and student,
   and the student's top-10 agreement with the teacher's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from supergrep.corpus.documents import Pair, load_pairs, train_val_split
from supergrep.encoder.spec import SPEC_FILE, ModelSpec, default_model_dir, resolve_model
from supergrep.errors import InputError, UsageError
from supergrep.train.losses.maxsim import maxsim_scores

log = logging.getLogger(__name__)


@dataclass
class DistillConfig:
    pairs: Path
    output: Path
    model_path: str = ""  # empty: the default model
    dim: int = 128
    n_pairs: int = 4000
    val_pairs: int = 500
    pool: int = 500
    top_k: int = 32
    steps: int = 600
    batch_size: int = 32
    lr: float = 1e-3
    temperature: float = 0.02
    device: str = "auto"
    seed: int = 0
    force: bool = False


@dataclass
class Ranking:
    """How one head ranks the held-out pools."""

    mrr: float  # of each query's own document within its pool
    p_at_1: float
    agreement_at_10: float  # |top10(head) & top10(teacher)| / 10, mean over queries


@dataclass
class DistillReport:
    output: str
    base: str
    in_dim: int
    dim: int
    train_pairs: int
    val_pairs: int
    seconds_encode: float
    seconds_teacher: float
    seconds_train: float
    device: str
    losses: list[float] = field(default_factory=list)
    teacher: Ranking | None = None
    pca: Ranking | None = None
    student: Ranking | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _sample(cfg: DistillConfig) -> tuple[list[Pair], list[Pair]]:
    train, val = train_val_split(load_pairs(cfg.pairs), cfg.seed, cfg.val_pairs, cfg.n_pairs)
    if len(train) < cfg.top_k + 1 or len(val) < 11:
        raise InputError(f"{cfg.pairs}: {len(train)} training and {len(val)} validation pairs; distill needs at "
                         f"least top_k + 1 = {cfg.top_k + 1} and 11")
    # Pools of one language where possible: the teacher's top-k among them are real competitors.
    key = lambda p: p.language  # noqa: E731 - sort key
    return sorted(train, key=key), sorted(val, key=key)


def pad_vectors(vectors: list[np.ndarray], torch, device):
    """Variable-length (n_tokens, dim) arrays as one zero-padded tensor and its mask, on ``device``."""
    width = max(1, max(len(v) for v in vectors))
    out = torch.zeros(len(vectors), width, vectors[0].shape[1], dtype=torch.float32)
    mask = torch.zeros(len(vectors), width, dtype=torch.bool)
    for i, v in enumerate(vectors):
        out[i, : len(v)] = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
        mask[i, : len(v)] = True
    return out.to(device), mask.to(device)


def _encode(encoder, pairs: list[Pair], torch, device):
    """(queries, query mask, documents, document mask) as padded tensors on ``device``."""
    q = encoder.encode_queries([p.query for p in pairs])
    d = encoder.encode_documents([p.document() for p in pairs])
    return (*pad_vectors(q, torch, device), *pad_vectors(d, torch, device))


def _project(x, w, torch):
    return torch.nn.functional.normalize(x @ w.T, dim=-1)


def ranking(scores: np.ndarray, teacher: np.ndarray) -> Ranking:
    """The positive's (the diagonal's) MRR and P@1 in ``scores`` (n_q, n_d), and the top-10
    overlap with the teacher's ranking, mean over queries (also `supergrep shrink`'s measure).

    >>> ranking(np.array([[0.9, 0.1], [0.8, 0.5]]), np.array([[0.9, 0.1], [0.1, 0.5]]))
    Ranking(mrr=0.75, p_at_1=0.5, agreement_at_10=1.0)
    """
    n = scores.shape[0]
    idx = np.arange(n)
    rank = (scores > scores[idx, idx][:, None]).sum(1)
    k = min(10, scores.shape[1])
    top_s = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top_t = np.argsort(-teacher, axis=1, kind="stable")[:, :k]
    agree = np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(top_s, top_t, strict=True)])
    return Ranking(mrr=round(float(np.mean(1.0 / (rank + 1))), 4), p_at_1=round(float(np.mean(rank == 0)), 4),
                   agreement_at_10=round(float(agree), 4))


def _base_reference(spec: ModelSpec) -> str:
    """How the written model names its base: the default model by package, others by path."""
    from supergrep.encoder.spec import DEFAULT_MODEL_PACKAGE

    try:
        default = default_model_dir().resolve()
    except Exception:  # noqa: BLE001 - the default model's package is not installed: not it
        default = None
    if spec.layout != "supergrep" and Path(spec.path).resolve() == default:
        return f"package:{DEFAULT_MODEL_PACKAGE}"
    return str(Path(spec.path).resolve())


def distill_projection(cfg: DistillConfig, progress: Callable[[str], None] | None = None) -> DistillReport:
    import torch

    from supergrep.backends.torch_backend import pick_device
    from supergrep.backends.torch_ops import TorchOps
    from supergrep.encoder.encoder import Encoder

    say = progress or (lambda msg: log.info(msg))
    if cfg.output.exists() and (not cfg.output.is_dir() or any(cfg.output.iterdir())) and not cfg.force:
        raise UsageError(f"{cfg.output} exists and is not empty; pass --force to overwrite it")
    for name in ("dim", "n_pairs", "val_pairs", "pool", "top_k", "steps", "batch_size"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"{name} must be at least 1, got {getattr(cfg, name)}")
    if cfg.top_k >= cfg.pool:
        raise UsageError(f"top_k ({cfg.top_k}) must be smaller than pool ({cfg.pool})")
    spec = resolve_model(cfg.model_path or None)
    if cfg.dim >= spec.dim:
        raise UsageError(f"dim {cfg.dim} is not smaller than the base model's {spec.dim}: nothing to compress")
    train, val = _sample(cfg)
    device = pick_device(cfg.device)
    ops = TorchOps(device)  # the trainer's MaxSim (mean over each query's real tokens) scores the pools
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)

    t0 = time.perf_counter()
    encoder = Encoder(spec, backend="torch", device=device)
    say(f"encoding {len(train)} + {len(val)} pairs with {spec.name} on {device}")
    tq, tqm, td, tdm = _encode(encoder, train, torch, device)
    vq, vqm, vd, vdm = _encode(encoder, val, torch, device)
    del encoder
    t_encode = time.perf_counter() - t0

    t0 = time.perf_counter()
    pools = [(a, min(a + cfg.pool, len(train))) for a in range(0, len(train), cfg.pool)]
    if pools[-1][1] - pools[-1][0] <= cfg.top_k and len(pools) > 1:  # a last pool too small to rank in
        pools[-2:] = [(pools[-2][0], pools[-1][1])]
    top_idx, top_val = [], []
    with torch.no_grad():
        for a, b in pools:
            s = maxsim_scores(ops, tq[a:b], tqm[a:b], td[a:b], tdm[a:b])
            k = min(cfg.top_k, b - a)
            v, i = s.topk(k, dim=1)
            top_idx.append(i + a)
            top_val.append(v)
        top_idx_t, top_val_t = torch.cat(top_idx), torch.cat(top_val)
        val_teacher = maxsim_scores(ops, vq, vqm, vd, vdm)
    t_teacher = time.perf_counter() - t0

    # Uncentred PCA of the token vectors: the best rank-dim linear fit of the dot products.
    with torch.no_grad():
        toks = torch.cat([td[tdm], tq[tqm]])
        pick = torch.randperm(len(toks), generator=gen)[:200_000].to(device)
        x = toks[pick].double()
        _, vecs = torch.linalg.eigh(x.T @ x)
        w0 = vecs[:, -cfg.dim:].flip(1).T.float().contiguous()
        del toks, x

    def evaluate(w) -> Ranking:
        with torch.no_grad():
            s = maxsim_scores(ops, _project(vq, w, torch), vqm, _project(vd, w, torch), vdm)
        return ranking(s.cpu().numpy(), val_teacher.cpu().numpy())

    report = DistillReport(output=str(cfg.output), base=spec.name, in_dim=spec.dim, dim=cfg.dim,
                           train_pairs=len(train), val_pairs=len(val), seconds_encode=round(t_encode, 1),
                           seconds_teacher=round(t_teacher, 1), seconds_train=0.0, device=str(device))
    report.teacher = ranking(val_teacher.cpu().numpy(), val_teacher.cpu().numpy())
    report.pca = evaluate(w0)
    say(f"held-out pools: teacher MRR {report.teacher.mrr:.3f}, PCA start MRR {report.pca.mrr:.3f} "
        f"(top-10 agreement {report.pca.agreement_at_10:.3f})")

    t0 = time.perf_counter()
    w = torch.nn.Parameter(w0.clone())
    opt = torch.optim.Adam([w], lr=cfg.lr)
    warm = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps)))))
    window: list[float] = []
    for step in range(cfg.steps):
        qi = torch.randint(0, len(train), (cfg.batch_size,), generator=gen).to(device)
        cand = top_idx_t[qi]  # (b, k) the teacher's best documents of each query's pool
        width = int(tdm[cand].sum(-1).max())
        dm = tdm[cand][:, :, :width]
        qm = tqm[qi]
        qp = _project(tq[qi], w, torch)
        dp = _project(td[cand][:, :, :width], w, torch)
        best = torch.einsum("bih,bkjh->bkij", qp, dp).masked_fill(~dm[:, :, None, :], -1e4).amax(-1)
        student = (best * qm[:, None, :]).sum(-1) / qm.sum(-1)[:, None]
        loss = torch.nn.functional.kl_div(torch.log_softmax(student / cfg.temperature, 1),
                                          torch.log_softmax(top_val_t[qi] / cfg.temperature, 1),
                                          log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        window.append(float(loss.detach()))
        if (step + 1) % max(1, cfg.steps // 10) == 0 or step + 1 == cfg.steps:
            report.losses.append(round(float(np.mean(window)), 5))
            say(f"step {step + 1}/{cfg.steps}: loss {report.losses[-1]:.4f}")
            window = []
    report.seconds_train = round(time.perf_counter() - t0, 1)
    report.student = evaluate(w.detach())
    say(f"held-out pools: student MRR {report.student.mrr:.3f} (teacher {report.teacher.mrr:.3f}), "
        f"top-10 agreement {report.student.agreement_at_10:.3f}")
    _write(cfg, spec, w.detach().cpu().numpy().astype(np.float32), report)
    return report


def _write(cfg: DistillConfig, spec: ModelSpec, weight: np.ndarray, report: DistillReport) -> None:
    """A supergrep model directory: the base by reference + ``projection/`` (a Dense layer)."""
    from safetensors.numpy import save_file

    out = cfg.output
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "projection").mkdir(parents=True)
    save_file({"linear.weight": weight}, str(tmp / "projection" / "model.safetensors"))
    (tmp / "projection" / "config.json").write_text(json.dumps({
        "in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]), "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity"}, indent=2))
    settings = spec.settings.to_dict()
    (tmp / SPEC_FILE).write_text(json.dumps({
        "name": out.name, "base": _base_reference(spec), "projection": "projection", "settings": settings,
        "distilled": {k: v for k, v in report.to_dict().items() if k != "output"}
        | {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}},
    }, indent=2))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
