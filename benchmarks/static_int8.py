"""Static int8 (calibrated activation scales) against the default dynamic int8 export, on this CPU.

The default CPU model (minilm-l3, `export onnx --int8`, every MatMul int8, recipe 2) quantises each
MatMul's activations at run time: onnxruntime's DynamicQuantizeMatMul scans the input for its
range before every product. On this AVX2-only CPU the int8 products run at ~40% of the int8 GEMM
peak measured for the same shapes (docs/deployment.md). A statically quantised graph (QDQ with
activation scales calibrated once on real code) skips those scans. This measures whether that is
faster, and what it costs in token-vector agreement with the float model:

    PYTHONPATH=src python benchmarks/static_int8.py --model minilm-l3 --workdir /tmp/static-int8 \
        --corpus .cache/dev-corpora/toolz-1.2.0 [--rounds 3] [--methods minmax,percentile]

Calibration windows come from the corpus's Python files (real code, tokenised by the model's own
tokenizer, 64 windows); agreement is measured on other windows of the same files.
Timing: jinja2's 20 index batch shapes (benchmarks/onnx_fusions.py), 2 threads, rounds interleaved.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def code_windows(corpus: Path, tokenizer_dir: Path, n: int, width: int, seed: int) -> np.ndarray:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    ids: list[int] = []
    for f in sorted(corpus.rglob("*.py")):
        ids += tok.encode(f.read_text(errors="replace"), add_special_tokens=False).ids
    ids_a = np.asarray(ids, dtype=np.int64)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(ids_a) - width, n)
    rows = np.stack([ids_a[s : s + width - 2] for s in starts])
    cls, sep = 101, 102  # BERT's [CLS] ... [SEP]
    return np.concatenate([np.full((n, 1), cls), rows, np.full((n, 1), sep)], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="minilm-l3")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/static-int8"))
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--methods", default="minmax,percentile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnx
    from onnx_fusions import SHAPES, VARIANTS, session
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    from supergrep.encoder.spec import resolve_model
    from supergrep.export import onnx_graph as og
    from supergrep.export.quantized import LayerRule

    spec = resolve_model(args.model)
    cfg = json.loads((spec.transformer_path / "config.json").read_text())
    plain = args.workdir / "plain"
    if not (plain / og.ONNX_FILE).is_file():
        og.export_onnx(args.model, plain, optimize=False, force=True, check=False)
    calib = code_windows(args.corpus, spec.transformer_path, 64, 128, seed=0)
    held = code_windows(args.corpus, spec.transformer_path, 32, 128, seed=1)

    forms: dict[str, tuple[Path, list[str]]] = {"fp32": (plain / og.ONNX_FILE, [])}
    # the default: recipe 2 fusions, then dynamic int8 on every MatMul
    dyn = args.workdir / "dynamic"
    dyn.mkdir(parents=True, exist_ok=True)
    if not (dyn / og.ONNX_FILE).is_file():
        fo = FusionOptions("bert")
        for k, v in VARIANTS["no-skip-ln-bias-gelu"].items():
            setattr(fo, k, v)
        opt = optimizer.optimize_model(str(plain / og.ONNX_FILE), model_type="bert",
                                       num_heads=int(cfg["num_attention_heads"]), hidden_size=int(cfg["hidden_size"]),
                                       opt_level=0, optimization_options=fo)
        opt.save_model_to_file(str(dyn / "fused.onnx"))
        og._quantize_int8(dyn / "fused.onnx", dyn / og.ONNX_FILE, [LayerRule.parse("encoder.layer.*.output.dense=8")])
    forms["dynamic (default)"] = (dyn / og.ONNX_FILE, ["SkipLayerNormFusion", "BiasGeluFusion"])

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input_ids": calib[i : i + 8], "attention_mask": np.ones_like(calib[i : i + 8])}
                            for i in range(0, len(calib), 8)])

        def get_next(self):
            return next(self.it, None)

    graph = onnx.load(str(plain / og.ONNX_FILE)).graph
    inits = {i.name for i in graph.initializer}
    # the projections: a weight as the second operand (not attention's QK^T and AV products)
    weights_only = [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    print(f"{len(weights_only)} of {sum(n.op_type == 'MatMul' for n in graph.node)} MatMuls multiply by a weight")
    for method in [m for m in args.methods.split(",") if m]:
        for scope, nodes in (("weights", weights_only), ("all", None)):
            out = args.workdir / f"static-{method}-{scope}" / og.ONNX_FILE
            out.parent.mkdir(parents=True, exist_ok=True)
            if not out.is_file():
                t = time.perf_counter()
                quantize_static(str(plain / og.ONNX_FILE), str(out), Reader(), quant_format=QuantFormat.QDQ,
                                op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes, per_channel=True,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                calibrate_method={"minmax": CalibrationMethod.MinMax,
                                                  "percentile": CalibrationMethod.Percentile}[method],
                                extra_options={"CalibMovingAverage": method == "minmax"})
                print(f"static {method} {scope}: quantised in {time.perf_counter() - t:.0f} s", flush=True)
            forms[f"static {method} ({'projections' if scope == 'weights' else 'every MatMul'})"] = (out, [])

    sessions = {name: session(p, dis) for name, (p, dis) in forms.items()}
    feed = {"input_ids": held, "attention_mask": np.ones_like(held)}
    ref = sessions["fp32"].run(["vectors"], feed)[0]
    result: dict = {"model": args.model, "shapes": SHAPES, "forms": {}}
    for name, s in sessions.items():
        v = s.run(["vectors"], feed)[0]
        cos = np.sum(v * ref, -1)  # unit rows
        result["forms"][name] = {"cosine_mean": float(cos.mean()), "cosine_p01": float(np.quantile(cos, 0.01))}
    rng = np.random.default_rng(0)
    feeds = [{"input_ids": rng.integers(1000, 20000, (b, n)).astype(np.int64),
              "attention_mask": np.ones((b, n), np.int64)} for b, n in SHAPES]
    secs: dict[str, list[float]] = {n: [] for n in sessions}
    names = list(sessions)
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            t = time.perf_counter()
            for fd in feeds:
                sessions[name].run(["vectors"], fd)
            secs[name].append(time.perf_counter() - t)
    base = min(secs["dynamic (default)"])
    tokens = sum(b * n for b, n in SHAPES)
    print(f"| form | mean token cosine to fp32 (1st percentile) | s per pass ({tokens:,} tokens) | best, x default |")
    print("|---|---|---|---|")
    for name in names:
        f = result["forms"][name]
        f["seconds"] = secs[name]
        best = min(secs[name])
        print(f"| {name} | {f['cosine_mean']:.4f} ({f['cosine_p01']:.4f}) | {', '.join(f'{x:.2f}' for x in secs[name])} "
              f"| {best:.2f} ({base / best:.2f}x) |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
