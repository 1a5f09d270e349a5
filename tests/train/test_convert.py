"""Checkpoints move between the MLX and torch trainers and merge through either framework:
every LoRA projection is counted whatever the key order, and the vectors stay the same."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (Linux: pip install 'mlx[cpu]'; macOS: pip install mlx)")

from safetensors.numpy import load_file, save_file  # noqa: E402

from supergrep.backends.adapters import LoRAConfig, adapter_keys  # noqa: E402
from supergrep.encoder import Encoder, resolve_model  # noqa: E402
from supergrep.errors import ModelError, TrainingError  # noqa: E402
from supergrep.train.config import load_train_config  # noqa: E402
from supergrep.train.convert import base_linear_paths, convert_checkpoint, verify_checkpoint  # noqa: E402
from supergrep.train.loop import run_training  # noqa: E402
from supergrep.train.merge import merge_checkpoint  # noqa: E402
from tiny_models import make_mpnet, make_roberta, make_t5  # noqa: E402

pytestmark = pytest.mark.mlx

DOCS = ["def add(a, b):\n    return a + b", "parse the command line arguments", "class Index: ..."]


@pytest.fixture(scope="module")
def mlx_checkpoint(tiny_t5, pairs_file, tmp_path_factory):
    """3 MLX steps on the XTR-layout T5 (its own 2_Dense head trained in place)."""
    out = tmp_path_factory.mktemp("mlx-run")
    cfg = load_train_config(None, dict(
        model_path=str(tiny_t5), train_file=str(pairs_file), batch_size=8, max_steps=3, lr=2e-2, warmup_steps=1,
        save_every=3, eval_every=0, log_every=1, projection_dim=0, document_max_tokens=64, query_max_tokens=24,
        device="cpu", backend="mlx", output_dir=str(out)))
    run_training(cfg, show_progress=False)
    return out / "step_0000003"


def torch_linear_paths(spec):
    import torch

    from supergrep.backends.torch_backend import load_transformer

    model = load_transformer(spec, torch.float32)
    return sorted(n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not n.startswith("pooler"))


def test_base_linear_paths_equal_what_both_frameworks_build(tiny_model, tmp_path):
    from supergrep.backends.mlx_models import build_model, linear_paths, read_config

    models = [tiny_model, make_roberta(tmp_path / "roberta"), make_mpnet(tmp_path / "mpnet"),
              make_t5(tmp_path / "t5-full", arch="full", dense=None)]  # a full T5: the decoder is skipped
    for path in models:
        spec = resolve_model(path)
        want = torch_linear_paths(spec)
        assert base_linear_paths(spec) == want == linear_paths(build_model(read_config(path))), path.name
        assert len(want) in (12, 14)


def _random_adapter(paths, shapes, seed=0):
    rng = np.random.default_rng(seed)
    state = {}
    for p in paths:
        out_f, in_f = shapes[p]
        ka, kb = adapter_keys(p)
        state[ka] = rng.standard_normal((4, in_f)).astype(np.float32) * 0.1
        state[kb] = rng.standard_normal((out_f, 4)).astype(np.float32) * 0.1
    keys = list(state)
    random.Random(seed).shuffle(keys)  # B before A, layers interleaved: any order must work
    return {k: state[k] for k in keys}


def test_shuffled_adapter_keys_merge_every_projection_in_both_frameworks(tiny_t5):
    import torch

    from supergrep.backends.mlx_lora import fold_adapter_weights
    from supergrep.backends.mlx_models import load_transformer as mlx_load
    from supergrep.backends.torch_backend import load_transformer as torch_load
    from supergrep.backends.torch_lora import merge_adapter_weights

    spec = resolve_model(tiny_t5)
    cfg = LoRAConfig(r=4, lora_alpha=8.0)
    t_model = torch_load(spec, torch.float32)
    paths = [n for n in torch_linear_paths(spec)]
    shapes = {n: tuple(t_model.get_submodule(n).weight.shape) for n in paths}
    for seed in range(3):
        state = _random_adapter(paths, shapes, seed)
        m_model, t_model = mlx_load(spec), torch_load(spec, torch.float32)
        assert fold_adapter_weights(m_model, cfg, state) == 14
        assert merge_adapter_weights(t_model, cfg, {k: torch.from_numpy(v) for k, v in state.items()}) == 14
        from mlx.utils import tree_flatten

        got = dict(tree_flatten(m_model.parameters()))
        for n in paths:
            assert np.abs(np.array(got[f"{n}.weight"]) - t_model.get_submodule(n).weight.detach().numpy()).max() < 1e-6
    del state[next(k for k in state if k.endswith("lora_B.weight"))]
    with pytest.raises(ModelError, match="unpaired"):
        fold_adapter_weights(mlx_load(spec), cfg, state)


def test_round_trip_mlx_to_torch_to_merged_keeps_the_vectors(mlx_checkpoint, tmp_path):
    from supergrep.backends.mlx_train import MLXTrainer
    from supergrep.train.loop import training_spec
    from supergrep.train.losses import contrastive_loss

    ck = mlx_checkpoint
    meta = json.loads((ck / "trainer_state.json").read_text())["meta"]
    assert meta["backend"] == "mlx"
    # The reference: the MLX trainer itself, adapter unmerged, dropout off.
    cfg = load_train_config(None, json.loads((ck / "run_config.json").read_text()))
    trainer = MLXTrainer(training_spec(cfg), cfg, LoRAConfig.read(ck), contrastive_loss())
    trainer.load_state(load_file(str(ck / "trainer_state.safetensors")), meta)
    trainer.tower.eval()
    ref_enc = Encoder(resolve_model(ck), backend="mlx", device="cpu")  # the checkpoint as a model dir
    ids = ref_enc.tokenizer(DOCS, "document")
    width = max(map(len, ids))
    arr, mask = np.zeros((len(ids), width), np.int64), np.zeros((len(ids), width), bool)
    for i, row in enumerate(ids):
        arr[i, : len(row)], mask[i, : len(row)] = row, True
    want = trainer.encode(arr, mask)

    torch_ck = tmp_path / "torch" / "step_0000003"
    rep = convert_checkpoint(ck, torch_ck, "torch")
    assert (rep.source, rep.target, rep.projections) == ("mlx", "torch", 14)
    state = json.loads((torch_ck / "trainer_state.json").read_text())
    assert state["meta"]["backend"] == "torch" and state["step"] == 3
    assert json.loads((torch_ck / "run_config.json").read_text())["backend"] == "torch"

    # The torch trainer resumes from it: same weights and moments.
    from supergrep.train.loop import make_trainer

    tcfg = load_train_config(None, json.loads((torch_ck / "run_config.json").read_text()))
    tt = make_trainer(tcfg, training_spec(tcfg), LoRAConfig.read(torch_ck))
    tt.load_state(load_file(str(torch_ck / "trainer_state.safetensors")), state["meta"])
    ts, ms = tt.state()[0], trainer.state()[0]
    assert all(np.array_equal(ts[k], ms[k]) for k in ms if not k.endswith(".step"))

    merged = tmp_path / "merged"
    rep = merge_checkpoint(torch_ck, merged, backend="torch")
    assert rep.merged == rep.adapter_pairs == rep.targets_in_base == 14
    for backend in ("torch", "mlx"):
        got = Encoder(resolve_model(merged), backend=backend, device="cpu").encode_documents(DOCS)
        for i, row in enumerate(ids):
            assert np.abs(got[i] - want[i, : len(row)]).max() < 1e-5, backend
    for i, v in enumerate(ref_enc.encode_documents(DOCS)):
        assert np.abs(v - want[i, : len(ids[i])]).max() < 1e-5

    back = tmp_path / "back"
    convert_checkpoint(torch_ck, back, "mlx")
    a, b = load_file(str(ck / "trainer_state.safetensors")), load_file(str(back / "trainer_state.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_merging_through_mlx_writes_what_torch_writes(mlx_checkpoint, tmp_path):
    reps = {b: merge_checkpoint(mlx_checkpoint, tmp_path / b, backend=b) for b in ("torch", "mlx")}
    assert reps["mlx"].merged == reps["torch"].merged == 14
    wt, wm = (load_file(str(tmp_path / b / "model.safetensors")) for b in ("torch", "mlx"))
    assert set(wm) <= set(wt)  # torch may add tied copies (encoder.embed_tokens)
    assert all(np.abs(wt[k] - wm[k]).max() < 1e-6 for k in wm)
    got = Encoder(resolve_model(tmp_path / "mlx"), backend="torch", device="cpu").encode_documents(DOCS)
    want = Encoder(resolve_model(tmp_path / "torch"), backend="torch", device="cpu").encode_documents(DOCS)
    assert all(np.abs(a - b).max() < 1e-6 for a, b in zip(got, want, strict=True))
    assert json.loads((tmp_path / "mlx" / "config.json").read_text())["architectures"] == ["T5EncoderModel"]


@pytest.mark.parametrize("victim", [0, 7, 13], ids=["first", "middle", "last"])
def test_a_checkpoint_missing_a_projection_is_refused(mlx_checkpoint, tmp_path, victim):
    """One projection gone from the adapter file (the keys of the rest shuffled), or from the
    trainer state only: convert and merge refuse, write nothing, and the CLI says so in one line
    with exit status 2."""
    import shutil

    from click.testing import CliRunner

    from supergrep.cli import main

    def runner(args):
        class _Main:
            name = "supergrep"

            def main(self, args=None, prog_name=None, **_):
                main(list(args or []))

        return CliRunner().invoke(_Main(), [str(a) for a in args])

    bad = tmp_path / "bad"
    shutil.copytree(mlx_checkpoint, bad)
    state = load_file(str(bad / "adapter_model.safetensors"))
    name = sorted(k for k in state if k.endswith("lora_A.weight"))[victim]
    del state[name], state[name.replace("lora_A", "lora_B")]
    keys = list(state)
    random.Random(victim).shuffle(keys)
    save_file({k: state[k] for k in keys}, str(bad / "adapter_model.safetensors"))
    with pytest.raises(TrainingError, match="13 projections but its target_modules select 14"):
        verify_checkpoint(bad)
    for target in ("torch", "mlx", "merged"):
        r = runner(["convert", bad, "--to", target, "-o", tmp_path / f"out-{target}"])
        assert r.exit_code == 2 and "13 projections" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
        assert not (tmp_path / f"out-{target}").exists()
    # ... or only from the trainer state: the adapter and the state must agree.
    bad2 = tmp_path / "bad2"
    shutil.copytree(mlx_checkpoint, bad2)
    ts = load_file(str(bad2 / "trainer_state.safetensors"))
    path = name[len("base_model.model."): -len(".lora_A.weight")]
    gone = [k for k in ts if k.startswith(f"param.model.{path}.") or k.startswith(f"optim.model.{path}.")]
    assert len(gone) >= 2
    save_file({k: v for k, v in ts.items() if k not in gone}, str(bad2 / "trainer_state.safetensors"))
    with pytest.raises(TrainingError, match="adapter and trainer state disagree"):
        convert_checkpoint(bad2, tmp_path / "out2", "torch")
    assert not (tmp_path / "out2").exists()
