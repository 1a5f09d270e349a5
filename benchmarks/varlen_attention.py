"""T5 attention alone, on the GPU: our varlen Triton kernels (``backends/triton_t5_attention.py``)
against FlexAttention over the same documents packed into 512-token rows (what the flex path
runs), at xtr-base's shape (12 heads x 64) and the workload's document lengths.

1. Correctness: bf16 kernels vs the float32 torch reference, forward and d(qkv), relative norm
   error, on fresh random inputs with the output poisoned first.
2. Speed: forward and forward + backward, median of ``do_bench``; useful TFLOP/s counts only
   each document's own L^2 (4 L^2 d per head forward, 10 L^2 d backward: QK^T recomputed, dV,
   dP, dK, dQ).
3. Tiles: (block_m, block_n, warps, stages) over a small grid; the best is printed to put in
   ``t5_attention._BLOCKS``.

    python3 benchmarks/varlen_attention.py --docs 384 --out $OUT/attn.json
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=384, help="documents (batch 192: 192 queries + 192 documents)")
    ap.add_argument("--queries", type=int, default=192, help="32-token queries added to the documents")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--cap", type=int, default=512)
    ap.add_argument("--out", default=None)
    ap.add_argument("--fwd-only", action="store_true",
                    help="index-time encoding: the forward alone over a wider grid of tiles, the dense bias in "
                         "float32 and float16; no backward, no FlexAttention (e.g. --docs 790 --queries 0)")
    ap.add_argument("--bwd-sweep", action="store_true",
                    help="training's backward alone: the dK/dV kernel's tiles over a grid (dQ at the shared tiles), "
                         "then the dQ kernel's with the best dK/dV; the dense bias; no forward grid, no FlexAttention")
    args = ap.parse_args()

    import triton.testing

    from supergrep.backends import triton_t5_attention as K
    from supergrep.backends.packing import pack_documents
    from supergrep.backends.t5_attention import reference_attention
    from supergrep.bench.workloads import sample_lengths

    dev = "cuda"
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(args.queries, 32), sample_lengths(args.docs - args.queries, args.cap, rng)])
    rng.shuffle(lengths)
    heads, d, dist = args.heads, args.head_dim, 128
    n = int(lengths.sum())
    max_len = int(lengths.max())
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=dev)
    table = torch.randn(heads, 2 * dist + 1, device=dev)
    useful_fwd = float(4 * heads * d * (lengths.astype(np.float64) ** 2).sum())
    useful_bwd = 2.5 * useful_fwd
    res: dict = {"tokens": n, "sequences": len(lengths), "max_len": max_len, "mean_len": float(lengths.mean()),
                 "useful_gflop_fwd": useful_fwd / 1e9, "useful_gflop_fwd_bwd": (useful_fwd + useful_bwd) / 1e9,
                 "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}

    # 1. correctness (bf16 kernels vs fp32 reference)
    torch.manual_seed(0)
    qkv = torch.randn(n, 3 * heads * d, device=dev).bfloat16()
    qf = qkv.float().requires_grad_()
    ref = reference_attention(qf, cu, max_len, table, dist, heads)
    do = torch.randn_like(ref)
    (g_ref,) = torch.autograd.grad(ref, qf, do)
    poison = torch.full((n, heads * d), float("nan"), dtype=qkv.dtype, device=dev)
    del poison  # the caching allocator hands this NaN block to the output: every element must be written
    o, lse = K.forward(qkv, cu, max_len, table, dist, heads, 1.0)
    g = K.backward(do.bfloat16(), qkv, o, lse, cu, max_len, table, dist, heads, 1.0)

    def rel(a, b):
        return float((a.float() - b.float()).norm() / b.float().norm())

    res["check"] = {"fwd_rel_err": rel(o, ref), "bwd_rel_err": rel(g, g_ref),
                    "finite": bool(torch.isfinite(o).all() and torch.isfinite(g).all())}
    print("check (bf16 vs fp32 reference):", res["check"], flush=True)
    del ref, g_ref, qf

    # 2 + 3. speed of our kernels over a grid of tiles
    dense = K.dense_bias(table, dist, max_len)  # BIAS 2: (H, W, W), once per step in training

    def ours(cfg, tab):
        def fwd():
            return K.forward(qkv, cu, max_len, tab, dist, heads, 1.0, **cfg)

        def fwd_bwd():
            o_, lse_ = K.forward(qkv, cu, max_len, tab, dist, heads, 1.0, **cfg)
            return K.backward(do16, qkv, o_, lse_, cu, max_len, tab, dist, heads, 1.0, **cfg)

        return fwd, fwd_bwd

    do16 = do.bfloat16()
    if args.bwd_sweep:
        res["bwd_sweep"] = bwd_sweep(K, qkv, cu, max_len, dense, dist, heads, do16, useful_bwd, rel)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(res, fh, indent=1)
        return
    if args.fwd_only:
        res["fwd_only"] = fwd_sweep(K, qkv, cu, max_len, table, dense, dist, heads, o, useful_fwd, rel)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(res, fh, indent=1)
        return
    rows = []
    # bias: "table" (gather per score), "dense" (coalesced tiles of a (H, W, W) matrix), "none" (timing only)
    for bm, bn, w, s, b in ((64, 64, 4, 2, "table"), (64, 64, 4, 2, "dense"), (64, 64, 4, 2, "none"),
                            (64, 32, 4, 2, "dense"), (128, 64, 8, 2, "dense"), (128, 32, 4, 2, "dense"),
                            (64, 64, 4, 3, "dense"), (32, 32, 2, 2, "dense"), (64, 64, 8, 2, "dense")):
        cfg = {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": s}
        tab = dense if b == "dense" else table
        if b == "none":
            cfg["bias"] = 0
        try:
            fwd, fwd_bwd = ours(cfg, tab)
            t_f = triton.testing.do_bench(fwd, warmup=25, rep=100, return_mode="median")
            t_fb = triton.testing.do_bench(fwd_bwd, warmup=25, rep=100, return_mode="median")
            o2, lse2 = fwd()
            g2 = K.backward(do16, qkv, o2, lse2, cu, max_len, tab, dist, heads, 1.0, **cfg)
            row = {**cfg, "bias": b, "fwd_ms": t_f, "fwd_bwd_ms": t_fb, "fwd_tflops": useful_fwd / t_f / 1e9,
                   "fwd_bwd_tflops": (useful_fwd + useful_bwd) / t_fb / 1e9,
                   "matches_default": rel(o2, o) < 1e-2 and rel(g2, g) < 1e-2}
        except Exception as exc:  # noqa: BLE001 - a tile that does not compile is a row, not the end
            row = {**cfg, "bias": b, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        rows.append(row)
        print(row, flush=True)
    res["ours"] = rows

    # FlexAttention over the same sequences packed into rows (the flex path's attention)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    p = pack_documents(np.zeros((len(lengths), max_len), np.int64), np.arange(max_len)[None, :] < lengths[:, None],
                       args.cap, 0)
    seg = torch.from_numpy(p.seg).to(dev)
    r, width = seg.shape
    flat_idx = torch.from_numpy(p.gather).to(dev)  # (seqs, max_len) -> rows * width
    valid = torch.arange(max_len, device=dev)[None, :] < torch.from_numpy(lengths).to(dev)[:, None]
    # our flat tokens in sequence order -> the packed rows' positions
    pos_of_token = flat_idx[valid]
    qkv_rows = qkv.new_zeros(r * width, 3 * heads * d)
    qkv_rows[pos_of_token] = qkv
    q, k, v = qkv_rows.view(r, width, 3, heads, d).permute(2, 0, 3, 1, 4).contiguous().unbind(0)
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def same_doc(b, h, qi, kv):
        return seg[b, qi] == seg[b, kv]

    bm = create_block_mask(same_doc, B=r, H=None, Q_LEN=width, KV_LEN=width, device=dev)

    def add_bias(score, b, h, qi, kv):
        return score + table[h, (kv - qi).clamp(-dist, dist) + dist]

    flex = torch.compile(flex_attention, dynamic=False)
    fo = flex(q, k, v, score_mod=add_bias, block_mask=bm, scale=1.0)
    flex_flat = fo.permute(0, 2, 1, 3).reshape(r * width, heads * d)[pos_of_token]
    res["flex_vs_ours_rel"] = rel(flex_flat, o)
    dfo = torch.randn_like(fo)

    def flex_fwd():
        with torch.no_grad():
            return flex(q, k, v, score_mod=add_bias, block_mask=bm, scale=1.0)

    def flex_fwd_bwd():
        out = flex(q, k, v, score_mod=add_bias, block_mask=bm, scale=1.0)
        return torch.autograd.grad(out, (q, k, v), dfo)

    t_f = triton.testing.do_bench(flex_fwd, warmup=25, rep=100, return_mode="median")
    t_fb = triton.testing.do_bench(flex_fwd_bwd, warmup=25, rep=100, return_mode="median")
    res["flex"] = {"rows": r, "width": width, "fwd_ms": t_f, "fwd_bwd_ms": t_fb, "fwd_tflops": useful_fwd / t_f / 1e9,
                   "fwd_bwd_tflops": (useful_fwd + useful_bwd) / t_fb / 1e9,
                   "computed_blocks": int(bm.kv_num_blocks.sum()) + int(getattr(bm, "full_kv_num_blocks", bm.kv_num_blocks).sum())
                   if getattr(bm, "full_kv_num_blocks", None) is not None else int(bm.kv_num_blocks.sum())}
    print("flex:", res["flex"], "flex vs ours rel", res["flex_vs_ours_rel"], flush=True)

    ok = [x for x in rows if "fwd_bwd_ms" in x and (x["matches_default"] or x["bias"] == "none")]
    best = min((x for x in ok if x["bias"] != "none"), key=lambda x: x["fwd_bwd_ms"], default=None)
    res["best"] = best
    print("\n| kernel | fwd ms | fwd+bwd ms | useful TFLOP/s fwd | fwd+bwd |\n|---|---|---|---|---|")
    for x in ok:
        print(f"| ours {x['block_m']}x{x['block_n']} w{x['num_warps']} s{x['num_stages']} bias {x['bias']} | {x['fwd_ms']:.2f} | "
              f"{x['fwd_bwd_ms']:.2f} | {x['fwd_tflops']:.0f} | {x['fwd_bwd_tflops']:.0f} |")
    f = res["flex"]
    print(f"| FlexAttention, {f['rows']} rows x {f['width']} | {f['fwd_ms']:.2f} | {f['fwd_bwd_ms']:.2f} | "
          f"{f['fwd_tflops']:.0f} | {f['fwd_bwd_tflops']:.0f} |")
    if best:
        print(f"best: {best['block_m']},{best['block_n']},{best['num_warps']},{best['num_stages']} bias {best['bias']} "
              f"= {f['fwd_bwd_ms'] / best['fwd_bwd_ms']:.2f}x FlexAttention (fwd+bwd)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    assert math.isfinite(res["check"]["fwd_rel_err"])


def bwd_sweep(K, qkv, cu, max_len, dense, dist, heads, do16, useful_bwd, rel) -> dict:
    """The backward (delta + dK/dV + dQ kernels) at training's tiles, then each kernel's tiles
    alone: (block_m, block_n, warps, stages); d(qkv) checked against the shared tiles' result."""
    import triton.testing

    shared = {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}  # t5_attention._BLOCKS
    o, lse = K.forward(qkv, cu, max_len, dense, dist, heads, 1.0, **shared)
    g_ref = K.backward(do16, qkv, o, lse, cu, max_len, dense, dist, heads, 1.0, **shared)

    def run(dkdv, dq):
        fn = lambda: K.backward(do16, qkv, o, lse, cu, max_len, dense, dist, heads, 1.0, **shared,  # noqa: E731
                                dkdv=dkdv, dq=dq)
        try:
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            row = {"dkdv": dkdv, "dq": dq, "ms": ms, "tflops": useful_bwd / ms / 1e9, "rel_err": rel(fn(), g_ref)}
        except Exception as exc:  # noqa: BLE001 - a tile that does not compile is a row
            row = {"dkdv": dkdv, "dq": dq, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
        print(row, flush=True)
        return row

    base = (64, 32, 4, 2)
    rows = [run(base, base)]
    for t in ((32, 64, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2), (32, 64, 4, 3), (64, 64, 4, 3), (32, 128, 8, 2),
              (64, 128, 8, 2), (16, 64, 4, 2), (32, 32, 4, 2), (32, 128, 4, 2), (64, 128, 8, 3), (128, 64, 8, 2)):
        rows.append(run(t, base))
    ok = lambda r: "ms" in r and r["rel_err"] < 1e-2  # noqa: E731
    best_dkdv = min((r for r in rows if ok(r)), key=lambda r: r["ms"])["dkdv"]
    for t in ((64, 64, 4, 2), (128, 32, 8, 2), (128, 64, 8, 2), (64, 64, 8, 2), (32, 64, 4, 2), (64, 32, 4, 3),
              (128, 32, 4, 2), (64, 16, 4, 2), (128, 64, 8, 3), (32, 32, 4, 2)):
        rows.append(run(best_dkdv, t))
    best = min((r for r in rows if ok(r)), key=lambda r: r["ms"])
    print(f"backward at the shared tiles {rows[0]['ms']:.3f} ms ({rows[0]['tflops']:.0f} TFLOP/s); best dK/dV "
          f"{best['dkdv']}, dQ {best['dq']}: {best['ms']:.3f} ms ({best['tflops']:.0f} TFLOP/s), "
          f"{rows[0]['ms'] / best['ms']:.2f}x", flush=True)
    return {"rows": rows, "best": best, "shared": rows[0]}


def fwd_sweep(K, qkv, cu, max_len, table, dense, dist, heads, o_ref, useful_fwd, rel) -> list[dict]:
    """The forward alone (what encoding runs) over tiles x the dense bias' dtype; best first."""
    import triton.testing

    rows = []
    biases = {"dense32": dense, "dense16": dense.half(), "none": table}
    for bm, bn, w, s in ((64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3),
                         (128, 32, 8, 2), (128, 128, 8, 2), (64, 128, 4, 2), (32, 64, 2, 2), (32, 32, 2, 2),
                         (64, 32, 2, 2), (128, 32, 4, 2)):
        for b, tab in biases.items():
            if b == "none" and (bm, bn) != (64, 32):
                continue
            cfg = {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": s}
            extra = {"bias": 0} if b == "none" else {}
            try:
                def fwd(cfg=cfg, tab=tab, extra=extra):
                    return K.forward(qkv, cu, max_len, tab, dist, heads, 1.0, **cfg, **extra)

                t = triton.testing.do_bench(fwd, warmup=25, rep=100, return_mode="median")
                row = {**cfg, "bias": b, "fwd_ms": t, "fwd_tflops": useful_fwd / t / 1e9,
                       "rel_err_vs_default": rel(fwd()[0], o_ref)}
            except Exception as exc:  # noqa: BLE001 - a tile that does not compile is a row
                row = {**cfg, "bias": b, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            rows.append(row)
            print(row, flush=True)
    ok = sorted((r for r in rows if "fwd_ms" in r), key=lambda r: r["fwd_ms"])
    print("\n| tile | bias | fwd ms | useful TFLOP/s | rel. diff vs 64x32 dense32 |\n|---|---|---|---|---|")
    for r in ok:
        print(f"| {r['block_m']}x{r['block_n']} w{r['num_warps']} s{r['num_stages']} | {r['bias']} | {r['fwd_ms']:.3f} | "
              f"{r['fwd_tflops']:.0f} | {r['rel_err_vs_default']:.1e} |")
    return ok


if __name__ == "__main__":
    main()
