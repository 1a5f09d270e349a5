"""Bench output: JSON, a markdown table and a PNG bar chart per run."""

from __future__ import annotations

import json
from pathlib import Path

GiB = 1 << 30


def _f(x, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _rate(flops_per_s: float) -> str:
    return f"{flops_per_s / 1e12:.1f} TFLOP/s" if flops_per_s >= 1e12 else f"{flops_per_s / 1e9:.0f} GFLOP/s"


def train_markdown(res: dict) -> str:
    wl = res["workload"]
    peak = ", ".join(f"{d}: {_rate(p['flops_per_s'])} ({p['dtype']} {p['n']}^3 GEMM)"
                     for d, p in res["peaks"].items() if p)
    head = [f"**bench train**, workload `{wl['name']}` ({wl['note']}), batch {wl['batch_size']}, query "
            f"{wl['query_len']} tokens, documents from mined code (mean {res['lengths']['mean']:.0f} tokens, cap "
            f"{wl['doc_cap']}); {_timing(res)}; peak {peak}.", "",
            "| variant | device | batch | samples/s | useful tokens/s | real/computed tokens | MFU | peak memory "
            "| loss first -> last | speedup vs naive |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "samples_per_s" not in r:
            why = r.get("error") or r.get("skipped") or "?"
            head.append(f"| {r['variant']} | {r.get('device', '')} | | {why} | | | | | | |")
            continue
        head.append(
            f"| {r['variant']} | {r['device']} | {r['batch_size']} | {r['samples_per_s']:.1f} | "
            f"{r['useful_tokens_per_s']:,.0f} | {100 * r['token_efficiency']:.0f}% | {_f(r['mfu'], '.1%')} | "
            f"{r['peak_memory_bytes'] / GiB:.2f} GiB | {r['loss_first']:.3f} -> {r['loss_last']:.3f} | "
            f"{_f(r.get('speedup_vs_naive'), '.2f')}x |")
    segs = [r for r in res["rows"] if len(r.get("segments_samples_per_s") or []) > 1]
    if segs:
        base = segs[0]["segments_samples_per_s"]
        head += ["", f"| variant | samples/s of each segment, in time order | spread (max / min) | over "
                     f"{segs[0]['variant']}, round by round (mean, min-max) |", "|---|---|---|---|"]
        for r in segs:
            x = r["segments_samples_per_s"]
            paired = [a / b for a, b in zip(x, base)]  # same round: drift cancels
            ratio = (f"{sum(paired) / len(paired):.3f} ({min(paired):.3f}-{max(paired):.3f})"
                     if r is not segs[0] and len(x) == len(base) else "-")
            head.append(f"| {r['variant']} | {', '.join(f'{v:.1f}' for v in x)} | {max(x) / min(x):.3f} | {ratio} |")
    graphs = [r for r in res["rows"] if (r.get("settings") or {}).get("compile_mode") == "reduce-overhead"
              and r.get("step_shapes")]
    if graphs:  # each new shape is a graph recorded, and one met in the timed steps is recorded there
        head += [""] + [f"CUDA graphs, {r['variant']}: {r['step_shapes']['distinct']} distinct step shapes, "
                        f"{r['step_shapes']['timed_steps_not_replayed']} timed steps not replayed (a shape's first "
                        f"run or its capture)." for r in graphs]
    s = res.get("summary") or {}
    if s:
        head += ["", f"Best ({s['best']}) vs the peer ({s['peer']}): {s['speedup_vs_peer']:.2f}x samples/s; "
                     f"loss after the same steps {s['loss_last_best']:.3f} vs {s['loss_last_peer']:.3f}."]
    return "\n".join(head) + "\n"


def _timing(res: dict) -> str:
    if res.get("rounds", 1) > 1:
        return (f"{res['warmup']} warm-up steps each, then {res['rounds']} interleaved segments of {res['steps']} "
                f"timed steps per variant (every other round in reverse order)")
    return f"{res['steps']} timed steps after {res['warmup']} warm-up"


def encode_markdown(res: dict) -> str:
    wl = res["workload"]
    p = res["peak"]
    lines = [f"**bench encode**, workload `{wl['name']}`, {res['device']} ({res['dtype']}), documents from mined "
             f"code capped at {res['doc_cap']} tokens, peak {_rate(p['flops_per_s'])} ({p['dtype']} GEMM)", "",
             "| what | documents | useful tokens | seconds | tokens/s | MFU | lines/s | min / mean cosine vs first row "
             "| GPU busy | host waits |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "error" in r:
            lines.append(f"| {r['what']} | {r['error']} | | | | | | | | |")
            continue
        busy = f"{r['gpu_s'] / r['seconds']:.0%}" if r.get("gpu_s") and r["seconds"] else "-"
        wait = f"{r['host_wait_s'] / r['seconds']:.0%}" if "host_wait_s" in r and r["seconds"] else "-"
        lines.append(f"| {r['what']} | {r.get('documents', '-')} | {_f(r.get('tokens'), ',')} | {r['seconds']:.2f} | "
                     f"{_f(r.get('tokens_per_s'), ',.0f')} | {_f(r.get('mfu'), '.1%')} | "
                     f"{_f(r.get('lines_per_s'), ',.0f')} | {_f(r.get('min_cosine_vs_first'), '.5f')} / "
                     f"{_f(r.get('mean_cosine_vs_first'), '.5f')} | {busy} | {wait} |")
    if any("gpu_s" in r for r in res["rows"]):
        lines += ["", "GPU busy: the flat forwards' GPU time (CUDA events) over the wall; host waits: the share of "
                      "the wall the host spent blocked on results. Busy near 100% = GPU-bound; low busy with low "
                      "waits = host-bound."]
    return "\n".join(lines) + "\n"


def train_plot(res: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [r for r in res["rows"] if "samples_per_s" in r]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(rows) + 1.5))
    names = [f"{r['variant']} ({r['device']})" for r in rows][::-1]
    vals = [r["samples_per_s"] for r in rows][::-1]
    colors = ["#c44e52" if r.get("system") == "sentence-transformers" else
              "#8c8c8c" if r["variant"].startswith("naive") else "#4c72b0" for r in rows][::-1]
    ax.barh(names, vals, color=colors)
    for y, r in enumerate(rows[::-1]):
        label = f"  {r['samples_per_s']:.1f}"
        if r.get("speedup_vs_naive"):
            label += f"  ({r['speedup_vs_naive']:.2f}x"
            label += f", MFU {r['mfu']:.1%})" if r.get("mfu") is not None else ")"
        ax.text(r["samples_per_s"], y, label, va="center", fontsize=7)
    ax.set_xlim(0, max(vals) * 1.45)
    ax.set_xlabel("samples/s (grey: naive, red: sentence-transformers peer)")
    ax.set_title(f"bench train: {res['workload']['name']}, batch {res['workload']['batch_size']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write(res: dict, out: Path, stem: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md"}
    files["json"].write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = train_markdown(res) if res["kind"] == "train" else encode_markdown(res)
    files["markdown"].write_text(md)
    if res["kind"] == "train":
        png = train_plot(res, out / f"{stem}.png")
        if png:
            files["png"] = png
    return files
