"""The training config: YAML with line-numbered errors, flags override, ranges checked."""

from __future__ import annotations

import pytest

from supergrep.errors import ConfigError
from supergrep.train.config import TrainConfig, load_train_config


def write(tmp_path, text):
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


def test_yaml_values_and_flag_overrides(tmp_path):
    p = write(tmp_path, "batch_size: 32\nlr: 1e-4\nlora_target_modules: [q, v]\ncompile: true\nepochs: 2\n")
    cfg = load_train_config(p, {"batch_size": 16, "lr": None, "lora_target_modules": "query,value"})
    assert cfg.batch_size == 16  # the flag wins
    assert cfg.lr == 1e-4 and cfg.compile is True and cfg.epochs == 2.0
    assert cfg.lora_target_modules == ["query", "value"]
    assert TrainConfig().projection_dim == 128 and TrainConfig().temperature == 0.07


@pytest.mark.parametrize(
    "text, message",
    [
        ("batch_size: 32\nlearning_rate: 0.1\n", r"run.yaml: line 2: unknown key 'learning_rate'"),
        ("batch_size: 32\nlr: fast\n", r"run.yaml: line 2: 'lr' must be float, got str 'fast'"),
        ("batch_size: [1, 2\n", r"run.yaml: line 2: invalid YAML"),
        ("- just\n- a list\n", r"expected a mapping"),
        ("compile: 3\n", r"line 1: 'compile' must be bool"),
        ("precision: fp8\n", r"precision must be one of auto, fp32, bf16, fp16"),
        ("batch_size: 10\ngrad_accum_steps: 3\n", r"batch_size must be a multiple of grad_accum_steps"),
        ("lora_r: 0\n", r"lora_r must be > 0"),
    ],
)
def test_bad_yaml_is_one_clear_error(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config(write(tmp_path, text))


def test_bad_flag_names_the_flag():
    with pytest.raises(ConfigError, match=r"--batch-size: 'batch_size' must be int"):
        load_train_config(None, {"batch_size": "many"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_train_config("/no/such/run.yaml")


def test_cli_reports_config_errors_in_one_line(tmp_path):
    import subprocess
    import sys

    p = write(tmp_path, "batch_size: 8\nwarmup: 10\n")
    r = subprocess.run([sys.executable, "-m", "supergrep", "train", "--config", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 2: unknown key 'warmup'" in lines[0]
    r = subprocess.run([sys.executable, "-m", "supergrep", "train", "--batch-size", "8"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "train_file is not set" in r.stderr
