"""Run under torchrun by tests/train/test_distributed.py (one launch, several checks, to keep CI fast).

    python -m torch.distributed.run --nproc-per-node 2 --master-port P tests/train/dist_helper.py JOB.json

JOB.json: {"model", "pairs", "out", "train_args": [...], "resume": CHECKPOINT, "grads": [{"name", "cfg"}]}.
Each rank:
  1. for every entry of "grads": builds a DistributedTorchTrainer, takes one step's gradients on
     the first global batch (its shard, padded to the global widths), averages them over the
     ranks; rank 0 saves them to OUT/grads-NAME.npz with the loss;
  2. runs `supergrep train ARGS --output-dir OUT/fresh` through the CLI (2 ranks from scratch);
  3. runs `supergrep train ARGS --output-dir OUT/resumed --resume CHECKPOINT` (a checkpoint
     written by a one-process run).
Rank 1 replaces save_checkpoint with a function that records the call: the test checks it was
never called (only rank 0 writes checkpoints).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def gradients(job: dict, name: str, overrides: dict, coll) -> None:
    import numpy as np

    from supergrep.backends.adapters import LoRAConfig
    from supergrep.backends.torch_dist import DistributedTorchTrainer
    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.tokenize import RoleTokenizer
    from supergrep.train.config import load_train_config
    from supergrep.train.data import bucket_batches, cached_tokens, collate
    from supergrep.train.distributed import World, shard_rows
    from supergrep.train.loop import _batch_widths, training_spec
    from supergrep.train.losses import contrastive_loss

    world = World.from_env()
    cfg = load_train_config(None, {"model_path": job["model"], "train_file": job["pairs"], **overrides})
    spec = training_spec(cfg)
    tok = RoleTokenizer(spec)
    cache = cached_tokens(load_pairs(cfg.train_file, split="train")[:64], None, spec, tok, "t")
    rows = bucket_batches(np.asarray(cache.doc_lengths()), cfg.batch_size, 0, 0)[0]
    negs = cfg.hard_negatives
    widths = _batch_widths(cache, rows, negs, cfg.pad_multiple, 0)
    mine = shard_rows(rows, world.rank, world.size, cfg.grad_accum_steps)
    batch = collate(cache, mine, tok, 0, negs, cfg.pad_multiple, widths=widths)
    loss_fn = contrastive_loss(cfg.temperature, cfg.margin, cfg.margin_weight, cfg.distill_weight,
                               cfg.distill_temperature)
    lora = LoRAConfig(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_target_modules))
    trainer = DistributedTorchTrainer(spec, cfg, lora, loss_fn, coll)
    trainer.train_step(batch, 1e-3)  # one real step, so every LoRA B is non-zero
    trainer._gathering = True
    step = trainer._step_cached if trainer.cached else trainer._step_plain
    loss, acc = step(*trainer._to_device(batch))
    trainer._sync_gradients()
    loss_all = coll.sum([float(loss)])[0] / world.size
    if world.is_main:
        out = {f"grad.{n}": p.grad.detach().numpy() for n, p in trainer.params.items()}
        np.savez(Path(job["out"]) / f"grads-{name}.npz", loss=np.float64(loss_all), **out)
    coll.barrier()


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    rank = int(os.environ["RANK"])
    out = Path(job["out"])
    if rank:
        from supergrep.train import checkpoint, loop

        def refuse(output_dir, step, **kw):
            (out / f"rank{rank}-wrote-step{step}").write_text("rank-0-only checkpoints broken")
            raise AssertionError("a rank other than 0 wrote a checkpoint")

        checkpoint.save_checkpoint = refuse
        loop.ckpt.save_checkpoint = refuse
    # One process group for everything (run_training finds it and leaves it open): joining,
    # leaving and joining again torchrun's store hangs gloo on the third time (torch 2.13).
    from supergrep.backends.torch_dist import TorchCollective
    from supergrep.train.distributed import World

    coll = TorchCollective(World.from_env(), "cpu")
    for g in job.get("grads", []):
        gradients(job, g["name"], g["cfg"], coll)
    from supergrep.cli import main as cli

    args = ["train", *job["train_args"], "--model-path", job["model"], "--train-file", job["pairs"]]
    runs = [[*args, "--output-dir", str(out / "fresh")]]
    if job.get("resume"):
        runs.append([*args, "--output-dir", str(out / "resumed"), "--resume", job["resume"]])
    for argv in runs:
        try:
            cli(argv)  # the CLI's entry point: it always ends in sys.exit
        except SystemExit as exc:
            if exc.code:
                raise
    coll.close()


if __name__ == "__main__":
    main()
