#!/usr/bin/python3
"""Plots of strata's results next to the paper's published figures.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023).
Reads the JSON written by `build/strata run ... --json/--timeline` and plots/paper_values.json;
writes PNG and/or SVG figures. Only the Python standard library and matplotlib are used.
See plots/README.md.
"""

import argparse
import json
import os
import sys
from collections import defaultdict

try:
    import matplotlib
except ImportError:
    # `python3 plots/make_plots.py` may pick an interpreter without matplotlib (pyenv, venv): retry once
    # with the system one, which has Debian's python3-matplotlib.
    _sys_py = "/usr/bin/python3"
    if (os.path.exists(_sys_py) and not os.environ.get("STRATA_PLOTS_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(_sys_py)):
        os.environ["STRATA_PLOTS_REEXEC"] = "1"
        os.execv(_sys_py, [_sys_py, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("make_plots.py: error: matplotlib is not available to %s\n"
             "  run it with the system interpreter (/usr/bin/python3 plots/make_plots.py) or install it:\n"
             "    apt-get install python3-matplotlib" % sys.executable)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["22B", "175B", "530B", "1T"]
GIB = float(2 ** 30)

# Commands that produce each input (relative to the repository root).
PRODUCERS = {
    "table5.json": "build/strata run scenarios/paper/table5.yaml --json {d}/table5.json --csv {d}/table5.csv",
    "table2.json": "build/strata run scenarios/paper/table2.yaml --json {d}/table2.json --analytical-only",
    "timeline.json": 'build/strata run scenarios/paper/table5.yaml --case "175B present work" --timeline {d}/timeline.json',
    # optional
    "table4.json": "build/strata run scenarios/paper/table4.yaml --analytical-only --json {d}/table4.json",
    "530b-2240.json": "build/strata run scenarios/paper/530b-2240.yaml --json {d}/530b-2240.json",
}

# Colours (colour-blind-friendly Okabe-Ito palette).
C_FULL = "#E69F00"      # full recompute
C_PRESENT = "#0072B2"   # present work (SP + selective)
C_HFU = "#009E73"
C_FWD = "#56B4E9"
C_BWD = "#D55E00"
C_COMM = "#CC79A7"
C_OPT = "#555555"
C_CAP = "#C0392B"
PAPER_ALPHA = 0.45


def setup_matplotlib():
    plt.rcParams.update({
        "svg.hashsalt": "strata",          # deterministic SVG ids
        "svg.fonttype": "path",
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "savefig.dpi": 150,
        "figure.dpi": 100,
    })


class Saver:
    def __init__(self, out_dir, formats):
        self.out_dir = out_dir
        self.formats = formats

    def __call__(self, fig, stem):
        for fmt in self.formats:
            path = os.path.join(self.out_dir, "%s.%s" % (stem, fmt))
            meta = {"Date": None} if fmt == "svg" else {"Software": "strata plots/make_plots.py"}
            if fmt == "pdf":
                meta = {"CreationDate": None, "ModDate": None}
            fig.savefig(path, format=fmt, metadata=meta, bbox_inches="tight", pad_inches=0.1)
            print(path)
        plt.close(fig)


def die(msg):
    print("make_plots.py: error: " + msg, file=sys.stderr)
    sys.exit(2)


def check_inputs(inputs, names):
    missing = [n for n in names if not os.path.isfile(os.path.join(inputs, n))]
    if missing:
        lines = ["missing input%s in %s/:" % ("s" if len(missing) > 1 else "", inputs)]
        for n in missing:
            lines.append("  %s - produce it from the repository root with:" % os.path.join(inputs, n))
            lines.append("    mkdir -p %s && %s" % (inputs, PRODUCERS[n].format(d=inputs)))
        die("\n".join(lines))


def load_input(inputs, name):
    path = os.path.join(inputs, name)
    if not os.path.isfile(path):
        die("missing input %s" % path)
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:
        die("cannot parse %s: %s" % (path, e))


def load_paper():
    path = os.path.join(HERE, "paper_values.json")
    with open(path) as f:
        return json.load(f)


def by_name(results, name, source):
    for r in results:
        if r.get("name") == name:
            if "error" in r:
                die("case '%s' in %s failed in the simulator: %s" % (name, source, r["error"]))
            return r
    die("case '%s' not found in %s (cases present: %s)"
        % (name, source, ", ".join(repr(r.get("name")) for r in results)))


def pct_err(sim, paper):
    return 100.0 * (sim - paper) / paper


def bar_labels(ax, bars, texts, fontsize=8, pad=3, rotation=0, color="black"):
    for b, t in zip(bars, texts):
        ax.annotate(t, (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, pad),
                    textcoords="offset points", ha="center", va="bottom", fontsize=fontsize,
                    rotation=rotation, color=color)


# ----------------------------------------------------------------------------------------------
# Table 5: iteration time
# ----------------------------------------------------------------------------------------------
def plot_iteration_time(t5, paper, save):
    res = t5["results"]
    fig, axes = plt.subplots(1, 4, figsize=(13, 4.6))
    for ax, m in zip(axes, MODELS):
        p = paper["table5"][m]
        sf = by_name(res, m + " full recompute", "table5.json")
        sp = by_name(res, m + " present work", "table5.json")
        vals = [p["full_recompute"], sf["iteration_time_s"], p["present_work"], sp["iteration_time_s"]]
        x = [0, 0.8, 2.0, 2.8]
        cols = [C_FULL, C_FULL, C_PRESENT, C_PRESENT]
        alphas = [PAPER_ALPHA, 1, PAPER_ALPHA, 1]
        hatches = ["//", "", "//", ""]
        bars = []
        for xi, v, c, a, h in zip(x, vals, cols, alphas, hatches):
            bars += ax.bar(xi, v, width=0.75, color=c, alpha=a, hatch=h, edgecolor=c, linewidth=0.8)
        fmt = "%.2f s"
        labels = [fmt % vals[0], fmt % vals[1] + "\n(%+.1f%%)" % pct_err(vals[1], vals[0]),
                  fmt % vals[2], fmt % vals[3] + "\n(%+.1f%%)" % pct_err(vals[3], vals[2])]
        bar_labels(ax, bars, labels, fontsize=8)
        ax.set_xticks([0.4, 2.4])
        ax.set_xticklabels(["full\nrecompute", "present work\n(SP + selective)"])
        ax.set_ylim(0, max(vals) * 1.25)
        e = sp["execution"]
        gain_p = p["throughput_gain_pct"]
        gain_s = 100.0 * (sf["iteration_time_s"] / sp["iteration_time_s"] - 1)
        ax.set_title("%s  (%d GPUs: t=%d, p=%d)\nthroughput gain: paper %.1f%%, sim %.1f%%"
                     % (m, e["gpus"], e["tensor"], e["pipeline"], gain_p, gain_s), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0].set_ylabel("iteration time (s)")
    handles = [Patch(facecolor=C_FULL, alpha=PAPER_ALPHA, hatch="//", edgecolor=C_FULL, label="full recompute: paper"),
               Patch(facecolor=C_FULL, edgecolor=C_FULL, label="full recompute: simulated"),
               Patch(facecolor=C_PRESENT, alpha=PAPER_ALPHA, hatch="//", edgecolor=C_PRESENT, label="present work: paper"),
               Patch(facecolor=C_PRESENT, edgecolor=C_PRESENT, label="present work: simulated")]
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, -0.04))
    fig.suptitle("Table 5: end-to-end iteration time, paper vs strata "
                 "(percentages: simulated error vs paper; each panel has its own scale)", fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save(fig, "iteration_time")


# ----------------------------------------------------------------------------------------------
# MFU / HFU
# ----------------------------------------------------------------------------------------------
def plot_mfu(t5, paper, save, dp=None):
    """dp: optional 530b-2240.json (530B with data parallelism 8, section 6.3) as a fifth group."""
    res = t5["results"]
    series = [  # (label, colour, is_paper, getter)
        ("MFU, present work: paper", C_PRESENT, True, lambda m, sp, sf, p: p["mfu"]),
        ("MFU, present work: simulated", C_PRESENT, False, lambda m, sp, sf, p: 100 * sp["mfu"]),
        ("HFU, present work: paper", C_HFU, True, lambda m, sp, sf, p: p["hfu"]),
        ("HFU, present work: simulated", C_HFU, False, lambda m, sp, sf, p: 100 * sp["hfu"]),
        ("MFU, full recompute: paper (derived: MFU \u00d7 t_present / t_full)", C_FULL, True,
         lambda m, sp, sf, p: p["mfu"] * p["present_work"] / p["full_recompute"]),
        ("MFU, full recompute: simulated", C_FULL, False, lambda m, sp, sf, p: 100 * sf["mfu"]),
    ]
    fig, ax = plt.subplots(figsize=(12 if dp is None else 14, 5.2))
    n = len(series)
    w = 0.13
    gap = 0.03
    for i, (label, col, is_paper, get) in enumerate(series):
        pair = i // 2
        offs = (i - (n - 1) / 2.0) * w + (pair - 1) * gap
        xs, vs = [], []
        for k, m in enumerate(MODELS):
            sp = by_name(res, m + " present work", "table5.json")
            sf = by_name(res, m + " full recompute", "table5.json")
            xs.append(k + offs)
            vs.append(get(m, sp, sf, paper["table5"][m]))
        if dp is not None:  # section 6.3 publishes MFU only (both schedules); no HFU
            sp = by_name(dp["results"], "530B d=8 present work", "530b-2240.json")
            sf = by_name(dp["results"], "530B d=8 full recompute", "530b-2240.json")
            p63 = paper["section6_3_530b_2240gpus"]
            v = {0: p63["present_work_mfu"], 1: 100 * sp["mfu"], 3: 100 * sp["hfu"],
                 4: p63["full_recompute_mfu"], 5: 100 * sf["mfu"]}.get(i)
            if v is not None:
                xs.append(len(MODELS) + offs)
                vs.append(v)
        bars = ax.bar(xs, vs, width=w, color=col, alpha=PAPER_ALPHA if is_paper else 1.0,
                      hatch="//" if is_paper else "", edgecolor=col, linewidth=0.8, label=label)
        bar_labels(ax, bars, ["%.1f" % v for v in vs], fontsize=7.5, pad=2)
    groups = ["%s\n(%d GPUs)" % (m, paper["models"][m]["gpus"]) for m in MODELS]
    if dp is not None:
        groups.append("530B, data parallel 8\n(2240 GPUs, section 6.3)")
        ax.axvline(len(MODELS) - 0.5, color="black", lw=0.6, alpha=0.4)
        ax.text(len(MODELS), 66, "section 6.3 gives MFU only (no HFU);\nits full-recompute MFU is published,\nnot derived",
                ha="center", va="bottom", fontsize=8, alpha=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel("utilisation (% of 312 TFLOP/s per GPU)")
    ax.set_ylim(0, 80)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", ncol=3, fontsize=8.5, frameon=False)
    ax.set_title("Model / hardware FLOP utilisation (MFU / HFU), paper vs strata\n"
                 "hatched = paper (Table 5), solid = simulated; HFU counts the recomputed FLOPs")
    fig.tight_layout()
    save(fig, "mfu")


# ----------------------------------------------------------------------------------------------
# Table 4: per-layer time (optional input)
# ----------------------------------------------------------------------------------------------
def plot_layer_time(t4, paper, save):
    res = t4["results"]
    exps = [k for k in paper["table4_layer_ms"] if not k.startswith("_")]
    fig, ax = plt.subplots(figsize=(12, 5))
    w = 0.36
    base_p = paper["table4_layer_ms"]["baseline no recompute"]["combined"]
    base_s = None
    for k, e in enumerate(exps):
        pv = paper["table4_layer_ms"][e]
        r = by_name(res, e, "table4.json")
        sv = {"forward": r["layer"]["forward_ms"], "backward": r["layer"]["backward_ms"]}
        if e == "baseline no recompute":
            base_s = sv["forward"] + sv["backward"]
        for j, (vals, is_paper) in enumerate([(pv, True), (sv, False)]):
            x = k + (j - 0.5) * (w + 0.02)
            a = PAPER_ALPHA if is_paper else 1.0
            h = "//" if is_paper else ""
            ax.bar(x, vals["forward"], width=w, color=C_FWD, alpha=a, hatch=h, edgecolor=C_FWD)
            ax.bar(x, vals["backward"], width=w, bottom=vals["forward"], color=C_BWD, alpha=a, hatch=h,
                   edgecolor=C_BWD)
            tot = vals["forward"] + vals["backward"]
            base = base_p if is_paper else base_s
            txt = "%.1f\n(%s)" % (tot, "baseline" if e == "baseline no recompute" else "%+.0f%%" % (100 * (tot / base - 1)))
            ax.annotate(txt, (x, tot), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                        fontsize=8)
            ax.text(x, 0.4, "paper" if is_paper else "sim", ha="center", va="bottom", fontsize=7.5,
                    color="black" if is_paper else "white", rotation=90)
    ax.set_xticks(range(len(exps)))
    ax.set_xticklabels([e.replace(" + ", " +\n").replace("baseline ", "baseline\n") for e in exps])
    ax.set_ylabel("time per transformer layer (ms)")
    ax.set_ylim(0, 33)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    handles = [Patch(facecolor=C_FWD, alpha=PAPER_ALPHA, hatch="//", edgecolor=C_FWD, label="forward: paper"),
               Patch(facecolor=C_FWD, edgecolor=C_FWD, label="forward: simulated"),
               Patch(facecolor=C_BWD, alpha=PAPER_ALPHA, hatch="//", edgecolor=C_BWD, label="backward: paper"),
               Patch(facecolor=C_BWD, edgecolor=C_BWD, label="backward: simulated")]
    ax.legend(handles=handles, loc="upper right", ncol=2, fontsize=8.5, frameon=False)
    ax.set_title("Table 4: one transformer layer of the 22B model (t=8, b=4, s=2048), forward + backward\n"
                 "numbers: combined ms (overhead vs the no-recompute baseline); Table 4 is calibration data for strata")
    fig.tight_layout()
    save(fig, "layer_time")


# ----------------------------------------------------------------------------------------------
# Table 2 / Figure 7: activation memory per layer relative to the TP baseline
# ----------------------------------------------------------------------------------------------
LADDER = [  # (table2 config suffix, label, colour)
    ("tensor parallel (baseline)", "tensor parallel (TP) baseline", "#999999"),
    ("tensor + sequence parallel", "TP + sequence parallel (SP)", "#56B4E9"),
    ("tensor parallel + selective recompute", "TP + selective recompute", "#009E73"),
    ("tensor + sequence parallel + selective recompute", "TP + SP + selective\n(present work)", C_PRESENT),
    ("full activation recompute", "TP + full recompute", C_FULL),
]


def plot_memory_ladder(t2, save):
    res = t2["results"]
    fig, ax = plt.subplots(figsize=(12, 5.2))
    n = len(LADDER)
    w = 0.16
    for i, (suffix, label, col) in enumerate(LADDER):
        xs, vs, mbs = [], [], []
        for k, m in enumerate(MODELS):
            base = by_name(res, m + " tensor parallel (baseline)", "table2.json")["memory"]["activation_bytes_per_layer"]
            b = by_name(res, m + " " + suffix, "table2.json")["memory"]["activation_bytes_per_layer"]
            xs.append(k + (i - (n - 1) / 2.0) * w)
            vs.append(100.0 * b / base)
            mbs.append(b / 1e6)
        bars = ax.bar(xs, vs, width=w * 0.92, color=col, label=label)
        inside = [v > 30 for v in vs]
        bar_labels(ax, bars, ["%.0f%%" % v if big else "%.0f%%\n%.0f MB" % (v, mb)
                              for v, mb, big in zip(vs, mbs, inside)], fontsize=8)
        for b, mb, big in zip(bars, mbs, inside):  # absolute size inside the tall bars
            if big:
                ax.text(b.get_x() + b.get_width() / 2, 2, "%.0f MB" % mb, rotation=90, ha="center",
                        va="bottom", fontsize=7.5, color="white")
    ax.axhline(50, color="black", lw=0.7, ls=":", alpha=0.6)
    ax.axhline(20, color="black", lw=0.7, ls=":", alpha=0.6)
    ax.text(len(MODELS) - 0.5, 50, "50%", va="bottom", ha="right", fontsize=8, alpha=0.7)
    ax.text(len(MODELS) - 0.5, 20, "20%", va="bottom", ha="right", fontsize=8, alpha=0.7)
    ax.set_xticks(range(len(MODELS)))
    ax.set_xticklabels(MODELS)
    ax.set_xlim(-0.55, len(MODELS) - 0.45)
    ax.set_ylim(0, 125)
    ax.set_ylabel("activation memory per layer\n(% of tensor-parallel baseline)")
    ax.legend(loc="upper center", ncol=5, fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, 1.0))
    ax.set_title("Figure 7: activation memory per transformer layer and GPU, relative to tensor parallelism alone\n"
                 "(strata, Table 2 configurations; MB labels = bytes per layer and GPU in 10\u2076 B; "
                 "paper: each technique alone ~50%, both < 20%)")
    fig.tight_layout()
    save(fig, "memory_ladder")


def plot_memory_ladder_hopper(t2h, save):
    """Figure 7 on DGX H100: each configuration in BF16 (solid) and FP8 (hatched), relative to BF16 TP alone."""
    res = t2h["results"]
    fig, ax = plt.subplots(figsize=(12, 5.2))
    n = len(LADDER)
    w = 0.16
    for i, (suffix, label, col) in enumerate(LADDER):
        for prec, hatch, alpha in (("bf16", None, 1.0), ("fp8", "//", 0.55)):
            xs, vs = [], []
            for k, m in enumerate(MODELS):
                base = by_name(res, m + " tensor parallel (baseline) bf16", "table2-hopper.json")["memory"][
                    "activation_bytes_per_layer"]
                b = by_name(res, "%s %s %s" % (m, suffix, prec), "table2-hopper.json")["memory"]["activation_bytes_per_layer"]
                xs.append(k + (i - (n - 1) / 2.0) * w + (0.0 if prec == "bf16" else w * 0.46))
                vs.append(100.0 * b / base)
            bars = ax.bar(xs, vs, width=w * 0.46, color=col, alpha=alpha, hatch=hatch,
                          label=label if prec == "bf16" else None, edgecolor="white" if hatch else None)
            bar_labels(ax, bars, ["%.0f" % v for v in vs], fontsize=6.5)
    ax.set_xticks(range(len(MODELS)))
    ax.set_xticklabels(MODELS)
    ax.set_xlim(-0.55, len(MODELS) - 0.45)
    ax.set_ylim(0, 125)
    ax.set_ylabel("activation memory per layer\n(% of BF16 tensor-parallel baseline)")
    ax.legend(loc="upper center", ncol=5, fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, 1.0))
    ax.set_title("Figure 7 on DGX H100: each configuration in BF16 (left bar) and FP8 (right, hatched);\n"
                 "FP8 keeps the linear layers' inputs in 1 byte (strata's model, scenarios/paper/table2-hopper.yaml)")
    fig.tight_layout()
    save(fig, "memory_ladder_hopper")


# ----------------------------------------------------------------------------------------------
# Figure 1 spirit: total memory per GPU
# ----------------------------------------------------------------------------------------------
TOTAL_CONFIGS = [
    ("tensor parallel (baseline)", "TP\nbaseline"),
    ("tensor + sequence parallel + selective recompute", "present\nwork"),
    ("full activation recompute", "full\nrecomp."),
]


def plot_memory_total(t2, save):
    res = t2["results"]
    fig, ax = plt.subplots(figsize=(12, 5.6))
    w = 0.26
    cap = None
    ticks, ticklabels = [], []
    stacks = [("weights", "#4D4D4D"), ("gradients", "#8C8C8C"), ("optimizer state", "#BDBDBD"),
              ("activations", C_PRESENT), ("recompute working buffer", "#56B4E9"),
              ("runtime reserve (CUDA context, NCCL)", "#F0E442")]
    ymax = 0
    for k, m in enumerate(MODELS):
        for i, (suffix, short) in enumerate(TOTAL_CONFIGS):
            r = by_name(res, m + " " + suffix, "table2.json")
            mem = r["memory"]
            cap = mem["capacity_bytes"]
            static = mem["weights_bytes"] + mem["gradients_bytes"] + mem["optimizer_bytes"]
            act = mem["activation_bytes_first_stage"]
            reserved = mem.get("reserved_bytes", 0)
            buf = max(0, mem["peak_bytes"] - static - act - reserved)
            parts = [mem["weights_bytes"], mem["gradients_bytes"], mem["optimizer_bytes"], act, buf, reserved]
            x = k + (i - 1) * (w + 0.03)
            bottom = 0.0
            for (lab, col), v in zip(stacks, parts):
                ax.bar(x, v / GIB, width=w, bottom=bottom, color=col, edgecolor="white", linewidth=0.5)
                bottom += v / GIB
            ymax = max(ymax, bottom)
            over = mem["peak_bytes"] > cap
            ax.annotate("%.0f%s" % (bottom, "\nOOM" if over else ""), (x, bottom), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8,
                        color=C_CAP if over else "black", fontweight="bold" if over else "normal")
            ticks.append(x)
            ticklabels.append(short)
    ax.axhline(cap / GIB, color=C_CAP, ls="--", lw=1.3)
    ax.set_xticks(ticks)
    ax.set_xticklabels(ticklabels, fontsize=8)
    for k, m in enumerate(MODELS):
        r = by_name(res, m + " tensor parallel (baseline)", "table2.json")
        e = r["execution"]
        ax.text(k, -0.13, "%s  (t=%d, p=%d)" % (m, e["tensor"], e["pipeline"]), transform=ax.get_xaxis_transform(),
                ha="center", va="top", fontsize=10, fontweight="bold")
    ax.set_xlim(-0.55, len(MODELS) - 0.45)
    ax.set_ylim(0, ymax * 1.12)
    ax.set_ylabel("memory per GPU, first pipeline stage (GiB)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    handles = [Patch(color=c, label=l) for l, c in stacks]
    handles.append(Line2D([], [], color=C_CAP, ls="--", label="device capacity %.0f GiB" % (cap / GIB)))
    ax.legend(handles=handles, loc="upper left", ncol=3, fontsize=8.5, frameon=False)
    ax.set_title("Figure 1: per-GPU memory of the first pipeline stage - weights, fp32 gradients and Adam state "
                 "plus activations\n(strata, Table 2 configurations; present work = sequence parallel + "
                 "selective recompute; numbers: total GiB)")
    fig.tight_layout()
    save(fig, "memory_total")


# ----------------------------------------------------------------------------------------------
# Pipeline timeline
# ----------------------------------------------------------------------------------------------
KIND_STYLE = {  # kind -> (label, colour, lane offset, height)
    "F": ("forward", C_FWD, -0.38, 0.52),
    "B": ("backward (incl. recompute)", C_BWD, -0.38, 0.52),
    "O": ("optimizer step", C_OPT, -0.38, 0.52),
    "C": ("tensor-parallel communication", C_COMM, 0.17, 0.22),
}


def merged_spans(intervals, tol):
    """Sorts (start, end) and joins spans that touch (gap <= tol)."""
    out = []
    for s, e in sorted(intervals):
        if out and s - out[-1][1] <= tol:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e - s) for s, e in out]


def draw_lanes(ax, groups, tol):
    for (stage, kind), spans in sorted(groups.items()):
        _, col, off, h = KIND_STYLE.get(kind, (kind, "black", -0.38, 0.52))
        # Rasterised inside vector output: tens of thousands of rectangles would make a huge SVG.
        ax.broken_barh(merged_spans(spans, tol), (stage + off, h), facecolors=col, edgecolors="none", linewidth=0,
                       rasterized=True)


def microbatch_blocks(intervals, t_max):
    """Joins each stage's consecutive F or B intervals of one (microbatch, chunk) into one block."""
    blocks = []
    per_stage = defaultdict(list)
    for st, kind, s, e, mb, ch in intervals:
        if kind in ("F", "B") and s < t_max:
            per_stage[st].append((s, e, kind, mb, ch))
    for st, lst in per_stage.items():
        lst.sort()
        cur = None
        for s, e, kind, mb, ch in lst:
            if cur and cur[2:] == [kind, mb, ch]:
                cur[1] = e
            else:
                if cur:
                    blocks.append((st, cur))
                cur = [s, e, kind, mb, ch]
        if cur:
            blocks.append((st, cur))
    return blocks


def plot_timeline(tl, save):
    iv = tl["intervals"]
    if not iv:
        die("timeline.json has no intervals")
    T = tl["iteration_time_s"]
    p = tl["pipeline"]
    groups = defaultdict(list)
    chunks = set()
    for st, kind, s, e, mb, ch in iv:
        groups[(st, kind)].append((s, e))
        chunks.add(ch)
    zoom = 0.15 * T
    top_in, bottom_in, gap_in = 1.05, 0.6, 1.0           # margins in inches
    panel_in = max(1.3, min(0.3 * p, 5.0))               # height of one panel
    fig_h = top_in + bottom_in + gap_in + 2 * panel_in
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(14, fig_h))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=bottom_in / fig_h, top=1 - top_in / fig_h,
                        hspace=gap_in / panel_in)
    draw_lanes(ax1, groups, tol=T * 2e-4)      # sub-pixel gaps are not visible at full scale
    draw_lanes(ax2, groups, tol=zoom * 1e-5)
    for ax in (ax1, ax2):
        ax.set_ylim(p - 0.5, -0.5)
        step = max(1, -(-p // 16))  # at most ~16 stage labels per panel
        ax.set_yticks(range(0, p, step))
        ax.set_yticklabels(["stage %d" % s for s in range(0, p, step)], fontsize=8)
        ax.set_xlabel("time (s)")
        ax.spines["left"].set_visible(False)
    ax1.set_xlim(0, T * 1.005)
    ax1.axvspan(0, zoom, color="black", alpha=0.06, lw=0)
    ax2.set_xlim(0, zoom)
    # Microbatch numbers on the zoomed panel where a block is wide enough to hold them.
    multi_chunk = len(chunks) > 1
    fig.canvas.draw()
    px_per_s = ax2.get_window_extent().width / zoom
    lane_px = ax2.get_window_extent().height / p
    for st, (s, e, kind, mb, ch) in (microbatch_blocks(iv, zoom) if lane_px >= 14 else []):
        lab = ("%d.%d" % (mb, ch)) if multi_chunk else "%d" % mb
        if (min(e, zoom) - s) * px_per_s >= 6.5 * len(lab) + 2:
            ax2.text((s + min(e, zoom)) / 2, st - 0.12, lab, ha="center", va="center", fontsize=6.5,
                     color="black" if kind == "F" else "white", clip_on=True)
    handles = [Patch(color=KIND_STYLE[k][1], label=KIND_STYLE[k][0]) for k in ("F", "B", "C", "O")]
    fig.suptitle("Pipeline timeline (simulated): %s - iteration %.2f s, %d pipeline stage%s"
                 % (tl["name"], T, p, "" if p == 1 else "s"), y=1 - 0.12 / fig_h, fontsize=12)
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.42 / fig_h), ncol=4,
               frameon=False, fontsize=9)
    ax1.set_title("whole iteration (compute on the wide bar of each stage, exposed or overlapped "
                  "tensor-parallel collectives on the thin strip below it)", fontsize=10)
    ax2.set_title("zoom: first 15%% of the iteration (shaded above) - pipeline warm-up%s"
                  % ("" if lane_px < 14 else "; block labels = microbatch.chunk (interleaved schedule)" if multi_chunk
                     else "; block labels = microbatch"), fontsize=10)
    save(fig, "timeline")


def plot_memory_timeline(tl, t5, save):
    mem = tl["memory"]
    if not mem:
        die("timeline.json has no stage-0 memory samples")
    T = tl["iteration_time_s"]
    cap = tl["capacity_bytes"] / GIB
    ts = [m[0] for m in mem] + [T]
    gs = [m[1] / GIB for m in mem]
    gs.append(gs[-1])
    k = max(range(len(gs)), key=lambda i: gs[i])
    fig, ax = plt.subplots(figsize=(11, 4.6))
    ax.step(ts, gs, where="post", color=C_PRESENT, lw=1.3, label="stage 0 memory in use")
    ax.fill_between(ts, gs, step="post", color=C_PRESENT, alpha=0.15)
    ax.axhline(cap, color=C_CAP, ls="--", lw=1.3, label="capacity %.0f GiB" % cap)
    ax.plot([ts[k]], [gs[k]], "v", color="black", ms=8, label="peak %.2f GiB at %.2f s" % (gs[k], ts[k]))
    ax.annotate("peak %.2f GiB" % gs[k], (ts[k], gs[k]), xytext=(0, 10), textcoords="offset points",
                ha="center", fontsize=9)
    # Static memory (weights + gradients + optimizer state) of the same case, when table5.json has it.
    static = None
    for r in t5.get("results", []):
        if r.get("name") == tl["name"] and "memory" in r:
            m = r["memory"]
            static = (m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"] +
                      m.get("reserved_bytes", 0)) / GIB
    if static is not None:
        ax.axhline(static, color="black", ls=":", lw=0.9, alpha=0.7)
        ax.text(T * 1.005, static, "%.2f GiB\nweights +\ngradients +\noptimizer +\nruntime reserve" % static,
                va="center", ha="left", fontsize=8)
    else:
        lo = min(gs)
        ax.axhline(lo, color="black", ls=":", lw=0.9, alpha=0.7)
        ax.text(T * 1.005, lo, "minimum\n%.2f GiB" % lo, va="center", ha="left", fontsize=8)
    ax.set_xlim(0, T)
    ax.set_ylim(0, cap * 1.08)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("memory in use on stage 0 (GiB)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower center", ncol=3, fontsize=9, frameon=True)
    ax.set_title("Stage-0 GPU memory over one iteration (simulated): %s, iteration %.2f s" % (tl["name"], T))
    fig.tight_layout()
    save(fig, "memory_timeline")


# ----------------------------------------------------------------------------------------------
# Optional sweep
# ----------------------------------------------------------------------------------------------
def _dependent(res, key_of, k, j):
    """True when the value of key k is a function of the value of key j across the cases."""
    seen = {}
    for r in res:
        kk = key_of(r)
        a, b = json.dumps(kk[j]), json.dumps(kk[k])
        if seen.setdefault(a, b) != b:
            return False
    return True


def plot_sweep(sw, save):
    all_res = sw.get("results", [])
    res = [r for r in all_res if "error" not in r and "mfu" in r]
    failed = [r for r in all_res if "error" in r]
    if not res:
        print("sweep.json has no simulated cases with results (run it without --analytical-only); "
              "skipping sweep.png")
        return

    def key_of(r):
        d = dict(r["execution"])
        d["model"] = r["model"]["name"]
        return d

    def is_num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def text(v):
        return json.dumps(v).strip('"')

    def oom_of(r):
        return r.get("simulated_memory", {}).get("oom", False) or not r["memory"].get("fits", True)

    keys = list(key_of(res[0]).keys())
    varying = [k for k in keys if len(set(json.dumps(key_of(r)[k]) for r in res)) > 1]
    # Drop keys that only follow another varying key (schedule follows interleave, gpus follows data, ...);
    # keys that determine each other (sequence_parallel and recompute varied together) are both kept.
    kept = [k for k in varying
            if not any(j != k and _dependent(res, key_of, k, j) and not _dependent(res, key_of, j, k)
                       for j in varying)]
    numeric = [k for k in kept if all(is_num(key_of(r)[k]) for r in res)]
    xkey = "microbatch" if "microbatch" in numeric else (numeric[0] if numeric else None)

    fig, ax = plt.subplots(figsize=(10, 5.4))
    vals = [100 * r["mfu"] for r in res]
    feasible = [r for r in res if not oom_of(r)]
    best = max(feasible, key=lambda r: r["mfu"]) if feasible else None
    if xkey is None:  # categorical: one bar per case
        cols = [C_CAP if oom_of(r) else C_PRESENT for r in res]
        bars = ax.bar(range(len(res)), vals, color=cols)
        bar_labels(ax, bars, ["%.1f" % v for v in vals])
        ax.set_xticks(range(len(res)))
        ax.set_xticklabels([r["name"] for r in res], rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("case")
        ax.set_ylim(0, max(vals) * 1.2)
        if any(oom_of(r) for r in res):
            ax.legend(handles=[Patch(color=C_PRESENT, label="fits in memory"),
                               Patch(color=C_CAP, label="exceeds device memory (OOM)")], fontsize=8, frameon=False)
    else:
        rest = [k for k in kept if k != xkey]
        series = defaultdict(list)
        for r in res:
            kk = key_of(r)
            sort_key = tuple((0, kk[k], "") if is_num(kk[k]) else (1, 0, text(kk[k])) for k in rest)
            label = ", ".join("%s=%s" % (k, text(kk[k])) for k in rest) or "MFU"
            series[(sort_key, label)].append((kk[xkey], 100 * r["mfu"], oom_of(r), r))
        cmap = plt.get_cmap("viridis")
        n = len(series)
        many = n > 2
        for idx, (sk, label) in enumerate(sorted(series)):
            pts = sorted(series[(sk, label)], key=lambda t: t[0])
            col = cmap(0.9 * idx / max(1, n - 1)) if n > 1 else C_PRESENT
            ax.plot([a for a, _, _, _ in pts], [b for _, b, _, _ in pts], "o-", color=col, label=label, lw=1.8)
            for a, b, o, _ in pts:
                if o:
                    ax.plot([a], [b], "o", mfc="none", mec=C_CAP, ms=13, mew=1.6)
                if not many:
                    ax.annotate("%.1f" % b, (a, b), xytext=(0, 8), textcoords="offset points", ha="center",
                                fontsize=8)
        if any(oom_of(r) for r in res):
            ax.plot([], [], "o", mfc="none", mec=C_CAP, ms=10, mew=1.6, label="exceeds device memory (OOM)")
        if best is not None:
            kb = key_of(best)
            ax.plot([kb[xkey]], [100 * best["mfu"]], "*", color="black", ms=15, zorder=5,
                    label="best that fits: %.1f%% (%s)" % (100 * best["mfu"], ", ".join(
                        "%s=%s" % (k, text(kb[k])) for k in [xkey] + rest)))
        xs = sorted(set(key_of(r)[xkey] for r in res))
        if all(isinstance(v, int) and v > 0 for v in xs) and len(xs) > 2 and xs[-1] / xs[0] >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(v) for v in xs])
        ax.minorticks_off()
        ax.set_xlabel(xkey)
        lo, hi = min(vals), max(vals)
        pad = max(2.0, 0.1 * (hi - lo))
        ax.set_ylim(max(0, lo - pad), hi + 3 * pad)
        ax.legend(fontsize=8, frameon=True, loc="best", ncol=2 if n > 5 else 1)
    ax.set_ylabel("MFU (%, simulated)")
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)
    title = "Sweep: %s" % sw.get("experiment", "sweep.json")
    if failed:
        reasons = sorted(set(r["error"] for r in failed))
        title += "\n%d case%s not plotted (%s)" % (len(failed), "" if len(failed) == 1 else "s",
                                                   reasons[0] if len(reasons) == 1 else "%d distinct errors" % len(reasons))
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save(fig, "sweep")


def plot_crosscheck(xc, paper, save):
    """SC21 Table 1 cross-check: published vs simulated achieved TFLOP/s per GPU."""
    ref = paper["sc21_table1"]
    res = xc.get("results", [])
    if len(res) != len(ref["tflops_per_gpu"]):
        die("sc21-table1.json has %d results, expected the %d cases of scenarios/crosscheck/sc21-table1.yaml"
            % (len(res), len(ref["tflops_per_gpu"])))
    fig, ax = plt.subplots(figsize=(11, 4.6))
    xs = list(range(len(res)))
    w = 0.38
    pub = ref["tflops_per_gpu"]
    sim = []
    for r in res:
        if "hfu" not in r:
            die("sc21-table1.json case '%s' has no simulated result (%s)" % (r.get("name"), r.get("error", "")))
        sim.append(r["hfu"] * 312)
    ax.bar([x - w / 2 for x in xs], pub, width=w, color=C_FULL, alpha=PAPER_ALPHA, hatch="//", edgecolor=C_FULL,
           label="SC21 Table 1 (published)")
    ax.bar([x + w / 2 for x in xs], sim, width=w, color=C_FULL, edgecolor=C_FULL, label="strata (simulated)")
    for x, p_, s_ in zip(xs, pub, sim):
        ax.annotate("%+.1f%%" % (100 * (s_ / p_ - 1)), (x + w / 2, s_), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels(["%s\n%d GPUs" % (c, g) for c, g in zip(ref["cases"], ref["gpus"])], fontsize=8)
    ax.set_ylim(0, max(pub + sim) * 1.18)
    ax.set_ylabel("achieved TFLOP/s per GPU")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", fontsize=9, frameon=False, ncol=2)
    errs = [s_ / p_ - 1 for p_, s_ in zip(pub, sim)]
    ax.set_title("Cross-check, SC21 Table 1 (Megatron-LM 2021, A100, 32-3072 GPUs): mean |error| %.1f%%, worst %.1f%%"
                 % (100 * sum(abs(e) for e in errs) / len(errs), 100 * max(abs(e) for e in errs)), fontsize=10)
    fig.tight_layout()
    save(fig, "crosscheck_sc21")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out", help="directory for the figures (default: out)")
    ap.add_argument("--inputs", default=None, help="directory with table5.json, table2.json, timeline.json "
                                                   "and optionally table4.json, 530b-2240.json, sweep.json, "
                                                   "sc21-table1.json "
                                                   "(default: same as --out)")
    ap.add_argument("--format", default="png,svg", help="comma-separated figure formats (default: png,svg)")
    args = ap.parse_args()
    inputs = args.inputs if args.inputs is not None else args.out
    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    if not formats:
        die("--format names no format")
    for f in formats:
        if f not in ("png", "svg", "pdf"):
            die("unsupported format '%s' (use png, svg, pdf)" % f)

    # Check every required input before plotting anything.
    check_inputs(inputs, ["table5.json", "table2.json", "timeline.json"])
    t5 = load_input(inputs, "table5.json")
    t2 = load_input(inputs, "table2.json")
    tl = load_input(inputs, "timeline.json")
    if not any("iteration_time_s" in r for r in t5.get("results", [])):
        die("%s has no simulated results; produce it without --analytical-only:\n    %s"
            % (os.path.join(inputs, "table5.json"), PRODUCERS["table5.json"].format(d=inputs)))
    paper = load_paper()

    setup_matplotlib()
    os.makedirs(args.out, exist_ok=True)
    save = Saver(args.out, formats)
    dp_path = os.path.join(inputs, "530b-2240.json")
    dp = load_input(inputs, "530b-2240.json") if os.path.isfile(dp_path) else None
    plot_iteration_time(t5, paper, save)
    plot_mfu(t5, paper, save, dp)
    plot_memory_ladder(t2, save)
    plot_memory_total(t2, save)
    plot_timeline(tl, save)
    plot_memory_timeline(tl, t5, save)
    t4_path = os.path.join(inputs, "table4.json")
    if os.path.isfile(t4_path):
        plot_layer_time(load_input(inputs, "table4.json"), paper, save)
    else:
        print("no %s; skipping layer_time.png (produce it with: %s)"
              % (t4_path, PRODUCERS["table4.json"].format(d=inputs)))
    xc_path = os.path.join(inputs, "sc21-table1.json")
    if os.path.isfile(xc_path):
        plot_crosscheck(load_input(inputs, "sc21-table1.json"), paper, save)
    else:
        print("no %s; skipping crosscheck_sc21.png" % xc_path)
    hopper_path = os.path.join(inputs, "table2-hopper.json")
    if os.path.isfile(hopper_path):
        plot_memory_ladder_hopper(load_input(inputs, "table2-hopper.json"), save)
    else:
        print("no %s; skipping memory_ladder_hopper.png" % hopper_path)
    sweep_path = os.path.join(inputs, "sweep.json")
    if os.path.isfile(sweep_path):
        plot_sweep(load_input(inputs, "sweep.json"), save)
    else:
        print("no %s; skipping sweep.png" % sweep_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
