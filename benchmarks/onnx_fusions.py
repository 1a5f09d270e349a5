"""Which of onnxruntime's transformer fusions make the int8 CPU forward faster, and which slower.

Exports MODEL once as a plain (unfused) ONNX graph, then for each variant fuses it with
onnxruntime's transformer optimizer (FusionOptions switched per variant), quantizes it as
`export onnx --int8` does (with ``--layers`` rules, default: every MatMul int8), and times
the forward on the shapes of a real index run (jinja2's 20 batches of ~8K tokens, longest
first) on 2 threads, rounds interleaved. Prints each variant's fused ops, the mean token
cosine to the first variant, and seconds per pass over the shapes.

    PYTHONPATH=src python benchmarks/onnx_fusions.py --model minilm-l3 --workdir /tmp/fusions \
        [--variants default,no-skip-ln,no-skip-ln-bias-gelu] [--rounds 3] [--profile]

--profile prints onnxruntime's per-op time of each variant (one (32, 256) and one (128, 64) batch).
The variants named "no-skip-ln*" also disable the session's own SkipLayerNormFusion, which would
otherwise put SkipLayerNormalization back (as OnnxBackend does).
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import numpy as np

VARIANTS = {
    "default": {},  # export recipe 1: every fusion
    "no-skip-ln": dict(enable_skip_layer_norm=False, enable_bias_skip_layer_norm=False),
    "no-skip-ln-fast-gelu": dict(enable_skip_layer_norm=False, enable_bias_skip_layer_norm=False,
                                 enable_gelu_approximation=True),
    "no-skip-ln-bias-gelu": dict(enable_skip_layer_norm=False, enable_bias_skip_layer_norm=False,
                                 enable_bias_gelu=False),  # export recipe 2
    "no-skip-ln-bias-gelu-mha": dict(enable_skip_layer_norm=False, enable_bias_skip_layer_norm=False,
                                     enable_bias_gelu=False, use_multi_head_attention=True),
}
# (batch, length) of the forward calls of `supergrep index` on jinja2 (14,310 lines, 160,745 tokens)
SHAPES = [(32, 256), (32, 256), (32, 249), (34, 239), (36, 227), (37, 219), (39, 210), (40, 202), (42, 195),
          (44, 184), (47, 173), (51, 160), (56, 146), (60, 136), (66, 124), (75, 109), (85, 96), (103, 79),
          (128, 64), (105, 49)]


def session(path: Path, disabled: list[str], profile: bool = False):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = str(path.parent / "ort-profile")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)


def op_times(path: Path, disabled: list[str], feeds: list[dict]) -> list[tuple[str, float]]:
    s = session(path, disabled, profile=True)
    for fd in feeds:
        s.run(["vectors"], fd)
    events = json.loads(Path(s.end_profiling()).read_text())
    agg: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            agg[e["args"].get("op_name")] += e["dur"] / 1e3
    return agg.most_common(8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="minilm-l3", help="A model name or float model directory.")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/onnx-fusions"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--layers", action="append", default=None,
                    help="int8 --layers rules (default: encoder.layer.*.output.dense=8, i.e. every MatMul int8).")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    from supergrep.encoder.spec import resolve_model
    from supergrep.export import onnx_graph as og
    from supergrep.export.quantized import LayerRule

    spec = resolve_model(args.model)
    cfg = json.loads((spec.transformer_path / "config.json").read_text())
    rules = [LayerRule.parse(r) for r in (args.layers or ["encoder.layer.*.output.dense=8"])]
    plain = args.workdir / "plain"
    if not (plain / og.ONNX_FILE).is_file():
        og.export_onnx(args.model, plain, optimize=False, force=True, check=False)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    rng = np.random.default_rng(0)
    feeds = [{"input_ids": rng.integers(1000, 20000, (b, n)).astype(np.int64),
              "attention_mask": np.ones((b, n), np.int64)} for b, n in SHAPES]
    sessions = {}
    for name in names:
        d = args.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        fused, q = d / "fused.onnx", d / og.ONNX_FILE
        fo = FusionOptions("bert")
        for k, v in VARIANTS[name].items():
            setattr(fo, k, v)
        opt = optimizer.optimize_model(str(plain / og.ONNX_FILE), model_type="bert",
                                       num_heads=int(cfg["num_attention_heads"]), hidden_size=int(cfg["hidden_size"]),
                                       opt_level=0, optimization_options=fo)
        print(f"{name}: fused {({k: v for k, v in opt.get_fused_operator_statistics().items() if v})}")
        opt.save_model_to_file(str(fused))
        og._quantize_int8(fused, q, rules)
        disabled = ["SkipLayerNormFusion", "BiasGeluFusion"] if name.startswith("no-skip-ln") else []
        sessions[name] = (session(q, disabled), q, disabled)
    ref = [sessions[names[0]][0].run(["vectors"], feeds[i])[0] for i in (0, 18)]
    for name, (s, _, _) in sessions.items():
        cos = [float(np.mean(np.sum(s.run(["vectors"], feeds[i])[0] * r, -1))) for i, r in zip((0, 18), ref)]
        print(f"{name}: mean token cosine to {names[0]} {cos[0]:.5f} / {cos[1]:.5f}")
    secs: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            s = sessions[name][0]
            t = time.perf_counter()
            for fd in feeds:
                s.run(["vectors"], fd)
            secs[name].append(time.perf_counter() - t)
    base = min(secs[names[0]])
    tokens = sum(b * n for b, n in SHAPES)
    for name in names:
        best = min(secs[name])
        print(f"{name:28s} s per pass ({tokens} tokens): {' '.join(f'{x:.2f}' for x in secs[name])}  "
              f"best {best:.2f} ({base / best:.2f}x {names[0]})")
    if args.profile:
        for name in names:
            _, q, disabled = sessions[name]
            print(f"{name}: " + ", ".join(f"{op} {ms:.0f} ms" for op, ms in op_times(q, disabled, [feeds[0], feeds[18]])))


if __name__ == "__main__":
    main()
