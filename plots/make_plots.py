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
import re
import sys
from collections import defaultdict

import importlib.util

if importlib.util.find_spec("matplotlib") is None:
    # `python3 plots/make_plots.py` may pick an interpreter without matplotlib (pyenv, venv): retry once
    # with the system one, which has Debian's python3-matplotlib.
    _sys_py = "/usr/bin/python3"
    if (os.path.exists(_sys_py) and not os.environ.get("STRATA_PLOTS_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(_sys_py)):
        os.environ["STRATA_PLOTS_REEXEC"] = "1"
        os.execv(_sys_py, [_sys_py, os.path.abspath(__file__)] + sys.argv[1:])

# matplotlib is imported when the first figure is drawn (load_matplotlib): telling what a file is needs none.
plt = Patch = Line2D = None


def load_matplotlib():
    global plt, Patch, Line2D
    if plt is not None:
        return
    try:
        import matplotlib
    except ImportError:
        sys.exit("make_plots.py: error: matplotlib is not available to %s\n"
                 "  run it with the system interpreter (/usr/bin/python3 plots/make_plots.py) or install it:\n"
                 "    apt-get install python3-matplotlib" % sys.executable)
    matplotlib.use("Agg")
    import matplotlib.pyplot
    import matplotlib.patches
    import matplotlib.lines
    plt, Patch, Line2D = matplotlib.pyplot, matplotlib.patches.Patch, matplotlib.lines.Line2D


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
    load_matplotlib()
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


class PlotProblem(Exception):
    """Why a figure, a file or a directory cannot be plotted; make_plots.py exits with 2 when nothing was."""


class Saver:
    """Writes a figure in each format as OUT_DIR/PREFIXSTEM.FMT and prints the path. `written` (path -> source),
    shared by the savers of one run, refuses to overwrite a figure that another input wrote."""

    def __init__(self, out_dir, formats, prefix="", source=None, written=None):
        self.out_dir = out_dir
        self.formats = formats
        self.prefix = prefix
        self.source = source
        self.written = written if written is not None else {}

    def __call__(self, fig, stem):
        for fmt in self.formats:
            path = os.path.join(self.out_dir, "%s%s.%s" % (self.prefix, stem, fmt))
            key = os.path.realpath(path)
            if self.written.get(key, self.source) != self.source:
                plt.close(fig)
                die("%s was just written for %s; plot one of them with --out DIR elsewhere"
                    % (path, self.written[key]))
            meta = {"Date": None} if fmt == "svg" else {"Software": "strata plots/make_plots.py"}
            if fmt == "pdf":
                meta = {"CreationDate": None, "ModDate": None}
            fig.savefig(path, format=fmt, metadata=meta, bbox_inches="tight", pad_inches=0.1)
            self.written[key] = self.source
            print(path)
        plt.close(fig)


def die(msg):
    raise PlotProblem(msg)


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


def swept_x_axis(ax, xs, xkey, labels):
    """The x axis of a sweep plot: a tick per swept value `xs` (sorted) with `labels`, on a log2 scale when the values
    are positive integers spanning a factor of 4 or more."""
    if all(isinstance(v, int) and v > 0 for v in xs) and len(xs) > 2 and xs[-1] / xs[0] >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.minorticks_off()
    ax.set_xlabel(xkey)


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
            sort_key = tuple((0, kk[k], "") if is_num(kk[k]) else (1, 0, text_of(kk[k])) for k in rest)
            label = ", ".join("%s=%s" % (k, text_of(kk[k])) for k in rest) or "MFU"
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
                        "%s=%s" % (k, text_of(kb[k])) for k in [xkey] + rest)))
        xs = sorted(set(key_of(r)[xkey] for r in res))
        swept_x_axis(ax, xs, xkey, [str(v) for v in xs])
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


def plot_hopper_validation(tables, paper, save):
    """Hopper validation: each published row's signed error, grouped by table (Megatron-LM's TFLOP/s per GPU,
    Megatron-Bridge's, NeMo's, MLPerf's and DGX Cloud Benchmarking's tokens/s per GPU). `tables`: (title, results file,
    paper_values key, measure)."""
    rows = []   # (group, label, error)
    for title, data, key, measure in tables:
        ref = paper[key]
        pub = ref["tflops_per_gpu"] if measure == "tflops" else ref["tokens_per_s_per_gpu"]
        res = data.get("results", [])
        if len(res) != len(pub):
            die("%s: %d results, expected the %d published rows of %s" % (title, len(res), len(pub), key))
        for r, p_, case in zip(res, pub, ref["cases"]):
            if "iteration_time_s" not in r:
                die("%s case '%s' has no simulated result (%s)" % (title, r.get("name"), r.get("error", "")))
            sim = r["tflops_per_gpu"] if measure == "tflops" else r["tokens_per_s"] / r["execution"]["gpus"]
            rows.append((title, case, sim / p_ - 1))
    colors = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#999999", "#000000",
              "#F0E442"]  # one per table
    groups = list(dict.fromkeys(g for g, _, _ in rows))
    fig, ax = plt.subplots(figsize=(max(8, 0.42 * len(rows) + 2), 4.8))
    ax.axhspan(-5, 5, color="#DDDDDD", alpha=0.5, lw=0, label="within 5%")
    ax.axhline(0, color="black", lw=0.8)
    labelled = set()
    for i, (g, case, e) in enumerate(rows):
        ax.bar(i, 100 * e, color=colors[groups.index(g) % len(colors)], label=None if g in labelled else g)
        labelled.add(g)
        ax.annotate("%+.1f" % (100 * e), (i, 100 * e), xytext=(0, 2 if e >= 0 else -9), textcoords="offset points",
                    ha="center", fontsize=7)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([c for _, c, _ in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("simulated / published - 1 (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    errs = [e for _, _, e in rows]
    ax.set_title("Hopper validation, %d published rows (positive: strata fast): mean |error| %.1f%%, signed %+.1f%%"
                 % (len(errs), 100 * sum(abs(e) for e in errs) / len(errs), 100 * sum(errs) / len(errs)), fontsize=10)
    fig.tight_layout()
    save(fig, "validation_hopper")


# ----------------------------------------------------------------------------------------------
# The paper's figures from a directory (table5.json, table2.json, timeline.json and the optional files)
# ----------------------------------------------------------------------------------------------
PAPER_REQUIRED = ["table5.json", "table2.json", "timeline.json"]
PAPER_OPTIONAL = ["530b-2240.json", "table4.json", "sc21-table1.json", "table2-hopper.json", "sweep.json",
                  "megatron-h100.json", "megatron-bridge-h100.json", "nemo-h100.json", "mlperf-gpt3-h100.json",
                  "mlperf-gpt3-h100-v4.json", "mlperf-llama31-405b.json", "dgxc-h100.json", "dgxc-h100-v2504.json",
                  "nemo-long-h100.json"]
# The Hopper validation figure's tables: results file, title, paper_values key, measure.
HOPPER_TABLES = [("megatron-h100.json", "Megatron-LM weak scaling (TFLOP/s, BF16)", "megatron_h100", "tflops"),
                 ("megatron-bridge-h100.json", "Megatron-Bridge (tokens/s, FP8)", "megatron_bridge_h100", "tokens"),
                 ("nemo-h100.json", "NeMo (tokens/s, FP8)", "nemo_h100", "tokens"),
                 ("mlperf-gpt3-h100.json", "MLPerf v3.1 GPT-3 175B (tokens/s, FP8)", "mlperf_gpt3_h100", "tokens"),
                 ("mlperf-gpt3-h100-v4.json", "MLPerf v4.0 / v4.1 GPT-3 175B (tokens/s, FP8)", "mlperf_gpt3_h100_v4",
                  "tokens"),
                 ("mlperf-llama31-405b.json", "MLPerf v5.0 Llama 3.1 405B (tokens/s, FP8; H100, H200)",
                  "mlperf_llama31_405b", "tokens"),
                 ("dgxc-h100.json", "DGX Cloud Benchmarking v25.02 (tokens/s, BF16 and FP8)", "dgxc_h100", "tokens"),
                 ("dgxc-h100-v2504.json", "DGX Cloud Benchmarking v25.04, NeMo 2 (tokens/s, BF16 and FP8)",
                  "dgxc_h100_v2504", "tokens"),
                 ("nemo-long-h100.json", "NeMo long sequences, 4K-1,024K, context parallel (tokens/s, FP8)",
                  "nemo_long_h100", "tokens")]


def plot_paper(inputs, out, formats, written=None):
    # Check every required input before plotting anything.
    check_inputs(inputs, PAPER_REQUIRED)
    t5 = load_input(inputs, "table5.json")
    t2 = load_input(inputs, "table2.json")
    tl = load_input(inputs, "timeline.json")
    if not any("iteration_time_s" in r for r in t5.get("results", [])):
        die("%s has no simulated results; produce it without --analytical-only:\n    %s"
            % (os.path.join(inputs, "table5.json"), PRODUCERS["table5.json"].format(d=inputs)))
    paper = load_paper()

    setup_matplotlib()
    make_out_dir(out)
    save = Saver(out, formats, source="the paper's figures", written=written)
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
    if not draw_hopper(inputs, paper, save):
        print("no %s in %s; skipping validation_hopper.png" % (" / ".join(f for f, _, _, _ in HOPPER_TABLES), inputs))


def draw_hopper(inputs, paper, save):
    """The Hopper validation figure from the tables' results files in `inputs` that are there; False if none is."""
    hopper = [(title, load_input(inputs, f), key, measure) for f, title, key, measure in HOPPER_TABLES
              if os.path.isfile(os.path.join(inputs, f))]
    if hopper:
        plot_hopper_validation(hopper, paper, save)
    return bool(hopper)


# ----------------------------------------------------------------------------------------------
# Any results file, recognised by its content: `strata run --json` (one case, several, a sweep),
# `strata search --json`, `strata run --timeline`
# ----------------------------------------------------------------------------------------------
RECOGNISED = ("recognised: `strata run --json` results (FILE-sweep or FILE-cases: iteration time, MFU and peak "
              "memory per case; FILE-memory: peak memory by category, per stage for one case), `strata search "
              "--json` results (FILE-search: estimate against simulated time per candidate), `strata run "
              "--timeline` files (FILE-timeline: per-stage Gantt chart; FILE-memory_timeline); a directory: every "
              "recognised .json in it, and the paper's figures when it holds %s" % ", ".join(PAPER_REQUIRED))

# memory.by_stage keys of `strata run --json` (sim/report/report.cpp), with the colours of memory_total.
MEMORY_CATEGORIES = [
    ("weights_bytes", "weights", "#4D4D4D"),
    ("gradients_bytes", "gradients", "#8C8C8C"),
    ("optimizer_bytes", "optimizer state", "#BDBDBD"),
    ("activations_bytes", "activations (transformer layers)", C_PRESENT),
    ("embedding_output_bytes", "activations (embedding, output layer)", "#009E73"),
    ("recompute_bytes", "recompute working buffer", "#56B4E9"),
    ("attention_workspace_bytes", "attention workspace (context-parallel ring)", "#CC79A7"),
    ("reserved_bytes", "runtime reserve (CUDA context, NCCL)", "#F0E442"),
]
# Keys that name a case best, first; the x axis of a sweep prefers microbatch (as the paper's sweep figure).
KEY_PRIORITY = ["model", "microbatch", "recompute", "interleave", "pipeline", "tensor", "data", "context_parallel",
                "global_batch", "sequence_parallel", "seq_len", "precision", "attention", "schedule"]
MAX_SEARCH_ROWS = 40


def classify(path):
    """(kind, data) with kind "run", "search" or "timeline"; (None, why not) for anything else."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        return None, "cannot be read (%s)" % e.strerror
    text = head.lstrip()
    if not text:
        return None, "empty"
    if not text.startswith((b"{", b"[")):
        return None, "not JSON"
    if b'"traceEvents"' in head:
        return None, ("a Chrome trace (strata run --trace): open it in https://ui.perfetto.dev; for a figure, "
                      "write the same run's --timeline and plot that")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        return None, "not valid JSON (%s)" % e
    if isinstance(data, dict):
        if isinstance(data.get("intervals"), list) and "pipeline" in data and "iteration_time_s" in data:
            return "timeline", data
        if isinstance(data.get("results"), list) and "experiment" in data:
            return ("search" if isinstance(data.get("search"), dict) else "run"), data
    return None, ("JSON, but not strata's: no \"experiment\" and \"results\" (strata run/search --json) and no "
                  "\"intervals\" (strata run --timeline)")


def _flat(prefix, d, out):
    for k, v in d.items():
        if isinstance(v, dict):
            _flat(prefix + k + ".", v, out)
        else:
            out[prefix + k] = v
    return out


def case_keys(r):
    """What a case can vary by: the model's name, the execution keys, the model's other keys, the system."""
    d = {"model": r.get("model", {}).get("name")}
    d.update(r.get("execution", {}))
    for k, v in r.get("model", {}).items():
        if k not in ("name", "parameters"):
            d.setdefault(k, v)
    d["system"] = r.get("system")
    _flat("system.", r.get("system_spec", {}), d)
    _flat("variation.", r.get("variation", {}), d)
    return d


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def text_of(v):
    return json.dumps(v).strip('"')


def varied_keys(res):
    """The keys that vary across the cases: one per group of keys that determine each other (model name, layers
    and hidden of different models), none that only follows another (schedule follows interleave)."""
    vals = [case_keys(r) for r in res]
    keys = []
    for v in vals:
        keys += [k for k in v if k not in keys]
    enc = {k: [json.dumps(v.get(k), sort_keys=True) for v in vals] for k in keys}
    varying = [k for k in keys if len(set(enc[k])) > 1]
    order = sorted(varying, key=lambda k: (KEY_PRIORITY.index(k) if k in KEY_PRIORITY else len(KEY_PRIORITY),
                                           keys.index(k)))

    def follows(k, j):  # the value of k is a function of the value of j
        seen = {}
        return all(seen.setdefault(a, b) == b for a, b in zip(enc[j], enc[k]))

    kept = []
    for k in order:
        if not any(j != k and follows(k, j) and (j in kept or not follows(j, k)) for j in order):
            kept.append(k)
    return kept, vals


def oom_of(r):
    return r.get("simulated_memory", {}).get("oom", False) or not r.get("memory", {}).get("fits", True)


def peak_gib(r):
    m = r.get("simulated_memory") or r["memory"]
    return m["peak_bytes"] / GIB


def errors_line(failed):
    if not failed:
        return ""
    reasons = sorted(set(r["error"] for r in failed))
    reason = reasons[0] if len(reasons) == 1 else "%d distinct errors" % len(reasons)
    if len(reason) > 110:
        reason = reason[:107] + "..."
    return "\n%d case%s not plotted (%s)" % (len(failed), "" if len(failed) == 1 else "s", reason)


SWEEP_SUFFIX = re.compile(r"(?:^| )(\w+=[^,]*(?:, \w+=[^,]*)*)$")
MAX_SERIES = 12


def sweep_axes(res, vals):
    """The swept keys, in the file's order, read from the case names a `sweep:` gives ("microbatch=2, interleave=3",
    or "<case> microbatch=2, ..." when crossed with cases) and checked against each case's values; with each case's
    base name. None when the cases do not come from a sweep."""
    axes, bases = None, []
    for r, v in zip(res, vals):
        m = SWEEP_SUFFIX.search(r["name"])
        if not m:
            return None, None
        pairs = [kv.split("=", 1) for kv in m.group(1).split(", ")]
        keys = [k for k, _ in pairs]
        if axes is None:
            axes = keys
        if keys != axes or any(k not in v or text_of(v[k]) != val.strip('"') for k, val in pairs):
            return None, None
        bases.append(r["name"][:m.start(1)].strip())
    return axes, bases


def sweep_layout(res):
    """(x key or None, the keys that tell the lines apart, each case's keys): the swept numeric key on x when the
    cases come from a `sweep:`, else a numeric varied key when the cases form lines of two points or more; None:
    one bar per case."""
    vals = [case_keys(r) for r in res]
    axes, bases = sweep_axes(res, vals)
    if axes is not None:
        for v, b in zip(vals, bases):
            v["case"] = b
        numeric = [k for k in axes if all(is_num(v[k]) for v in vals)]
        if not numeric:
            return None, [], vals
        xkey = "microbatch" if "microbatch" in numeric else max(
            numeric, key=lambda k: (len(set(v[k] for v in vals)), axes.index(k)))
        return xkey, [k for k in axes if k != xkey] + (["case"] if len(set(bases)) > 1 else []), vals
    kept, _ = varied_keys(res)
    numeric = [k for k in kept if all(is_num(v[k]) for v in vals)]
    for xkey in (["microbatch"] if "microbatch" in numeric else []) + sorted(
            numeric, key=lambda k: -len(set(v[k] for v in vals))):
        rest = [k for k in kept if k != xkey]
        lines = defaultdict(int)
        for v in vals:
            lines[tuple(json.dumps(v[k]) for k in rest)] += 1
        if len(lines) <= MAX_SERIES and min(lines.values()) >= 2:
            return xkey, rest, vals
    return None, [], vals


def plot_run_cases(data, save, src):
    """Iteration time, MFU and peak memory of every case: against the numeric key that varies (one line per
    combination of the other varied keys) for a sweep, one bar per case otherwise."""
    all_res = data["results"]
    res = [r for r in all_res if "error" not in r and "memory" in r]
    failed = [r for r in all_res if "error" in r]
    if not res:
        die("no case to plot: %s" % errors_line(failed).strip().replace("not plotted", "ended in an error"))
    simulated = any("iteration_time_s" in r for r in res)
    panels = []
    if simulated:
        panels += [("iteration time (s)", lambda r: r.get("iteration_time_s")),
                   ("MFU (%)", lambda r: 100 * r["mfu"] if "mfu" in r else None)]
    panels.append(("peak memory per GPU (GiB, %s)" % ("simulated" if simulated else "analytical"), peak_gib))
    xkey, rest, vals = sweep_layout(res)
    feasible = [r for r in res if not oom_of(r) and ("mfu" in r or not simulated)]
    best = max(feasible, key=lambda r: r["mfu"]) if simulated and feasible else None
    n_panels = len(panels)
    if xkey is None:
        width = min(30, max(9, 0.42 * len(res) + 3))
        fig, axes = plt.subplots(n_panels, 1, figsize=(width, 2.9 * n_panels + 1.6), sharex=True, squeeze=False)
        xs = list(range(len(res)))
        for ax, (label, get) in zip(axes[:, 0], panels):
            vs = [get(r) for r in res]
            cols = [C_CAP if oom_of(r) else C_PRESENT for r in res]
            bars = ax.bar(xs, [v if v is not None else 0 for v in vs], color=cols)
            if len(res) <= 24:
                bar_labels(ax, bars, ["" if v is None else ("%.0f" % v if abs(v) >= 100 else "%.3g" % v)
                                      for v in vs], fontsize=7, pad=2)
            ax.set_ylabel(label)
            pos = [v for v in vs if v is not None and v > 0]
            if pos and max(pos) / min(pos) > 50:   # a few huge cases (no parallelism) would flatten the rest
                ax.set_yscale("log")
                ax.set_ylim(min(pos) / 1.5, max(pos) * 3)
            else:
                ax.set_ylim(0, max(pos + [1e-9]) * 1.18)
        ax = axes[-1, 0]
        ax.set_xticks(xs)
        ax.set_xticklabels([r["name"] for r in res], rotation=30, ha="right", fontsize=8)
        handles = [Patch(color=C_PRESENT, label="fits in memory")]
        if any(oom_of(r) for r in res):
            handles.append(Patch(color=C_CAP, label="exceeds device memory (OOM)"))
        stem = "cases"
    else:
        series = defaultdict(list)
        for r, v in zip(res, vals):
            sort_key = tuple((0, v[k], "") if is_num(v[k]) else (1, 0, text_of(v[k])) for k in rest)
            label = ", ".join("%s=%s" % (k, text_of(v[k])) for k in rest) or r.get("model", {}).get("name", "cases")
            series[(sort_key, label)].append((v[xkey], r))
        fig, axes = plt.subplots(n_panels, 1, figsize=(10, 2.9 * n_panels + 1.6), sharex=True, squeeze=False)
        cmap = plt.get_cmap("viridis")
        n = len(series)
        for idx, (sk, label) in enumerate(sorted(series)):
            pts = sorted(series[(sk, label)], key=lambda t: t[0])
            col = cmap(0.9 * idx / max(1, n - 1)) if n > 1 else C_PRESENT
            for ax, (_, get) in zip(axes[:, 0], panels):
                xy = [(x, get(r), oom_of(r)) for x, r in pts if get(r) is not None]
                ax.plot([a for a, _, _ in xy], [b for _, b, _ in xy], "o-", color=col, lw=1.6, ms=4,
                        label=label if ax is axes[0, 0] else None)
                for a, b, o in xy:
                    if o:
                        ax.plot([a], [b], "o", mfc="none", mec=C_CAP, ms=12, mew=1.5)
        xs = sorted(set(v[xkey] for v in vals))
        for ax, (label, get) in zip(axes[:, 0], panels):
            if best is not None and get(best) is not None:
                ax.plot([vals[res.index(best)][xkey]], [get(best)], "*", color="black", ms=14, zorder=5)
            ax.set_ylabel(label)
            ax.margins(y=0.15)
        ax = axes[-1, 0]
        swept_x_axis(ax, xs, xkey, [text_of(v) for v in xs])
        handles, _ = axes[0, 0].get_legend_handles_labels()
        if any(oom_of(r) for r in res):
            handles.append(Line2D([], [], ls="", marker="o", mfc="none", mec=C_CAP, ms=10, mew=1.5,
                                  label="exceeds device memory (OOM)"))
        if best is not None:
            kb = vals[res.index(best)]
            handles.append(Line2D([], [], ls="", marker="*", color="black", ms=12, label="best MFU that fits: %.1f%% (%s)"
                                  % (100 * best["mfu"], ", ".join("%s=%s" % (k, text_of(kb[k])) for k in [xkey] + rest))))
        stem = "sweep"
    mem_ax = axes[-1, 0]
    for cap in sorted(set(r["memory"]["capacity_bytes"] for r in res)):
        mem_ax.axhline(cap / GIB, color=C_CAP, ls="--", lw=1.1)
        handles.append(Line2D([], [], color=C_CAP, ls="--", label="device capacity %.0f GiB" % (cap / GIB)))
        if mem_ax.get_yscale() == "linear":
            mem_ax.set_ylim(0, max(mem_ax.get_ylim()[1], cap / GIB * 1.08))
    for ax in axes[:, 0]:
        ax.grid(alpha=0.3)
        ax.set_axisbelow(True)
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, frameon=False)
    what = "Sweep" if xkey is not None else "Cases"
    axes[0, 0].set_title("%s: %s (%d case%s%s)%s" % (what, data.get("experiment", src), len(all_res),
                                                   "" if len(all_res) == 1 else "s",
                                                   "" if simulated else ", analytical only", errors_line(failed)),
                         fontsize=10)
    fig.tight_layout()
    save(fig, stem)


def stage_breakdowns(r):
    """Per pipeline stage, the bytes of each memory category at the stage's peak (memory.by_stage), as dicts
    with a "stage"; a file without by_stage (an older strata) gives the peak stage alone, activations and recompute
    buffer together. The flag says which."""
    m = r["memory"]
    by = m.get("by_stage")
    if isinstance(by, dict) and by.get("total_bytes"):
        return [dict({k: v[s] for k, v in by.items()}, stage=s) for s in range(len(by["total_bytes"]))], True
    rest = m["peak_bytes"] - m["weights_bytes"] - m["gradients_bytes"] - m["optimizer_bytes"] - m.get("reserved_bytes", 0)
    return [{"stage": m.get("peak_stage", 0), "weights_bytes": m["weights_bytes"],
             "gradients_bytes": m["gradients_bytes"], "optimizer_bytes": m["optimizer_bytes"],
             "activations_bytes": rest, "reserved_bytes": m.get("reserved_bytes", 0),
             "total_bytes": m["peak_bytes"]}], False


def plot_run_memory(data, save, src):
    """Peak memory per GPU by category: every pipeline stage of a single case; each case's peak stage otherwise."""
    res = [r for r in data["results"] if "error" not in r and "memory" in r]
    if not res:
        die("no case to plot (no case has \"memory\")")
    single = len(res) == 1
    if single:
        stages, per_stage = stage_breakdowns(res[0])
        bars = [("stage %d" % s["stage"], s) for s in stages]
    else:
        bars, per_stage = [], True
        for r in res:
            stages, full = stage_breakdowns(r)
            per_stage = per_stage and full
            peak = r["memory"].get("peak_stage", 0)
            st = next((s for s in stages if s.get("stage") == peak), stages[0])
            bars.append(("%s (stage %d)" % (r["name"], st["stage"]) if r["execution"]["pipeline"] > 1 else r["name"], st))
    caps = sorted(set(r["memory"]["capacity_bytes"] for r in res))
    width = min(30, max(9, (0.32 if single else 0.42) * len(bars) + 4))
    fig, ax = plt.subplots(figsize=(width, 5.2))
    xs = list(range(len(bars)))
    bottom = [0.0] * len(bars)
    handles = []
    for key, label, col in MEMORY_CATEGORIES:
        vs = [s.get(key, 0) / GIB for _, s in bars]
        if not any(vs):
            continue
        if key == "activations_bytes" and not per_stage:
            label = "activations and recompute buffer"
        ax.bar(xs, vs, bottom=bottom, color=col, edgecolor="white", linewidth=0.4, width=0.8)
        handles.append(Patch(color=col, label=label))
        bottom = [b + v for b, v in zip(bottom, vs)]
    for cap in caps:
        ax.axhline(cap / GIB, color=C_CAP, ls="--", lw=1.2)
        handles.append(Line2D([], [], color=C_CAP, ls="--", label="device capacity %.0f GiB" % (cap / GIB)))
    cap0 = caps[0] / GIB
    # Bars far over the capacity (no parallelism at all) are cut at 3x the capacity, their total written on top.
    top = min(max(bottom + [cap0]), 3 * caps[-1] / GIB)
    for x, total in zip(xs, bottom):
        over = total > cap0 + 1e-9
        if len(bars) <= 40 or over:
            ax.annotate("%.1f%s%s" % (total, "\u2191" if total > top else "", "\nOOM" if over else ""),
                        (x, min(total, top)), xytext=(0, 6), textcoords="offset points", ha="center", va="bottom",
                        fontsize=7, color=C_CAP if over else "black")
    if single and "simulated_memory" in res[0]:
        sm = res[0]["simulated_memory"]
        sx = next((i for i, (_, s) in enumerate(bars) if s.get("stage") == sm["peak_stage"]), None)
        if sx is not None:
            ax.plot([sx], [sm["peak_bytes"] / GIB], "_", color="black", ms=22, mew=2.2, zorder=5)
            handles.append(Line2D([], [], ls="", marker="_", color="black", ms=14, mew=2.2,
                                  label="simulated peak, stage %d: %.2f GiB" % (sm["peak_stage"], sm["peak_bytes"] / GIB)))
    ax.set_xticks(xs)
    step = max(1, -(-len(bars) // 40))
    ax.set_xticklabels([name if i % step == 0 else "" for i, (name, _) in enumerate(bars)],
                       rotation=0 if single and len(bars) <= 12 else 35, ha="center" if single and len(bars) <= 12 else "right",
                       fontsize=8)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    ax.set_ylim(0, top * 1.25)
    ax.set_ylabel("memory per GPU at the stage's peak (GiB)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if single:
        r = res[0]
        e = r["execution"]
        title = ("Memory per GPU by pipeline stage (analytical peak of each stage): %s\n%s, t=%d, p=%d, d=%d, "
                 "microbatch %d, recompute %s%s" % (r["name"], r["model"]["name"], e["tensor"], e["pipeline"],
                                                   e["data"], e["microbatch"], e["recompute"],
                                                   ", sequence parallel" if e.get("sequence_parallel") else ""))
    else:
        title = "Memory per GPU of each case's fullest pipeline stage (analytical): %s" % data.get("experiment", src)
    if not per_stage:
        title += "\n(this file has no memory.by_stage: the peak stage only)"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save(fig, "memory")


def candidate_label(e):
    parts = ["t%d" % e["tensor"]]
    if e.get("context_parallel", 1) > 1:
        parts.append("c%d" % e["context_parallel"])
    parts += ["p%d" % e["pipeline"], "d%d" % e["data"]]
    if e.get("interleave", 1) > 1:
        parts.append("m%d" % e["interleave"])
    parts.append("b%d" % e["microbatch"])
    parts.append({"none": "no-recomp", "selective": "selective", "full": "full"}.get(e["recompute"], e["recompute"]))
    if e.get("sequence_parallel"):
        parts.append("SP")
    if e.get("distributed_optimizer"):
        parts.append("dopt")
    return " ".join(parts)


def plot_search(data, save, src):
    """The simulated candidates of a search, fastest first: each one's analytical estimate (the screen that chose
    it) and its simulated time; beside it, estimate against simulation for all of them."""
    s = data["search"]
    cands = [r for r in data["results"] if isinstance(r.get("screen"), dict)]
    ok = sorted((r for r in cands if "iteration_time_s" in r), key=lambda r: r["screen"]["simulated_rank"])
    failed = [r for r in cands if "error" in r]
    if not ok:
        die("no simulated candidate to plot%s" % errors_line(failed).replace("\n", ": ").replace("case", "candidate"))
    shown = ok[:MAX_SEARCH_ROWS]
    fig, (ax, sc) = plt.subplots(1, 2, figsize=(14, 1.9 + 0.26 * max(len(shown), 12)),
                                 gridspec_kw={"width_ratios": [2.2, 1]})
    ys = list(range(len(shown)))
    est = [r["screen"]["estimate_s"] for r in shown]
    sim = [r["iteration_time_s"] for r in shown]
    for y, e, t in zip(ys, est, sim):
        ax.plot([e, t], [y, y], color="#999999", lw=1, zorder=1)
    ax.scatter(est, ys, marker="o", facecolors="white", edgecolors=C_PRESENT, s=30, zorder=2)
    ax.scatter(sim, ys, marker="o", color=C_PRESENT, s=30, zorder=3)
    lo, hi = min(est + sim), max(est + sim)
    span = hi - lo or hi
    ax.set_xlim(lo - 0.05 * span, hi + 0.22 * span)
    for y, e, t, r in zip(ys, est, sim, shown):
        ax.annotate("%+.1f%%  est #%d" % (100 * (e / t - 1), r["screen"]["estimate_rank"]), (hi + 0.03 * span, y),
                    va="center", fontsize=7, color="#555555")
    ax.set_yticks(ys)
    ax.set_yticklabels(["#%d  %s" % (r["screen"]["simulated_rank"], candidate_label(r["execution"])) for r in shown],
                       fontsize=7.5)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlabel("iteration time (s): \u25cb analytical estimate (the screen), \u25cf simulated; "
                  "on the right: estimate error, rank by estimate")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    all_est = [r["screen"]["estimate_s"] for r in ok]
    all_sim = [r["iteration_time_s"] for r in ok]
    ranks = [r["screen"]["simulated_rank"] for r in ok]
    pts = sc.scatter(all_est, all_sim, c=ranks, cmap="viridis_r", s=22, zorder=3)
    lo, hi = min(all_est + all_sim), max(all_est + all_sim)
    pad = 0.05 * (hi - lo or hi)
    sc.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="black", lw=0.8, ls=":", label="estimate = simulated")
    for r, e, t in list(zip(ok, all_est, all_sim))[:5]:
        sc.annotate("#%d" % r["screen"]["simulated_rank"], (e, t), xytext=(4, -8), textcoords="offset points",
                    fontsize=7)
    sc.set_xlim(lo - pad, hi + pad)
    sc.set_ylim(lo - pad, hi + pad)
    sc.set_xlabel("analytical estimate (s)")
    sc.set_ylabel("simulated (s)")
    sc.grid(alpha=0.3)
    sc.legend(loc="upper left", fontsize=8, frameon=False)
    fig.colorbar(pts, ax=sc, label="simulated rank")
    errs = [e / t - 1 for e, t in zip(all_est, all_sim)]
    sc.set_title("all %d simulated candidates\nestimate error: mean |e| %.1f%%, worst %+.1f%%" % (
        len(ok), 100 * sum(abs(x) for x in errs) / len(errs), 100 * max(errs, key=abs)), fontsize=9)
    constraints = " ".join(s.get("constraints") or [])
    ax.set_title("Search: %s on %s GPUs, global batch %s%s\n%s enumerated, %s fit and screened, %d simulated%s%s"
                 % (data.get("experiment", src).replace("search ", "", 1), s.get("gpus"), s.get("global_batch"),
                    " (%s)" % constraints if constraints else "", s.get("enumerated"), s.get("screened"), len(ok),
                    "" if len(ok) <= len(shown) else ", the fastest %d shown" % len(shown),
                    errors_line(failed).replace("\n", "; ").replace("case", "candidate")), fontsize=10)
    fig.tight_layout()
    save(fig, "search")


def make_out_dir(out):
    """The figures' directory, created if missing; a PlotProblem (exit 2) when it cannot be."""
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        die("--out %s: cannot create the directory for the figures (%s)" % (out, e.strerror or e))
    if not os.access(out, os.W_OK):
        die("--out %s: the directory for the figures is not writable" % out)


def plot_file(path, kind, data, out, formats, written):
    """The figures of one recognised results file, as OUT/STEM-FIGURE.FMT."""
    setup_matplotlib()
    make_out_dir(out)
    stem = os.path.splitext(os.path.basename(path))[0]
    save = Saver(out, formats, prefix=stem + "-", source=path, written=written)
    if kind == "timeline":
        plot_timeline(data, save)
        plot_memory_timeline(data, {}, save)
    elif kind == "search":
        plot_search(data, save, path)
    else:
        if len(data["results"]) > 1:
            plot_run_cases(data, save, path)
        plot_run_memory(data, save, path)


class Run:
    """One invocation over files and directories: what was plotted and what not."""

    def __init__(self, formats, out):
        self.formats = formats
        self.out = out
        self.written = {}
        self.plotted = 0
        self.unrecognised = 0
        self.problems = 0
        self.seen = set()

    def problem(self, msg):
        if plt is not None:
            plt.close("all")
        self.problems += 1
        print("make_plots.py: %s" % msg, file=sys.stderr)

    def file(self, path, out):
        real = os.path.realpath(path)
        if real in self.seen:
            return
        self.seen.add(real)
        kind, data = classify(path)
        if kind is None:
            self.unrecognised += 1
            self.problem("%s: not plotted: %s" % (path, data))
            return
        try:
            before = len(self.written)
            plot_file(path, kind, data, out, self.formats, self.written)
            self.plotted += len(self.written) > before
        except PlotProblem as e:
            self.problem("%s: not plotted: %s" % (path, e))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            self.problem("%s: not plotted: looks like %s results but %s is missing or malformed"
                         % (path, kind, e))

    def directory(self, d, out):
        names = sorted(n for n in os.listdir(d) if n.endswith(".json") and os.path.isfile(os.path.join(d, n)))
        paper = [n for n in PAPER_REQUIRED if n in names]
        skip = set()
        if len(paper) == len(PAPER_REQUIRED):
            try:
                before = len(self.written)
                plot_paper(d, out, self.formats, self.written)
                self.plotted += len(self.written) > before
            except PlotProblem as e:
                self.problem("%s: the paper's figures not plotted: %s" % (d, e))
            skip = set(PAPER_REQUIRED + PAPER_OPTIONAL)
        else:
            if paper:
                print("%s: the paper's figures need %s (missing: %s); plotting %s as results files"
                      % (d, ", ".join(PAPER_REQUIRED), ", ".join(n for n in PAPER_REQUIRED if n not in names),
                         ", ".join(paper)))
            if any(f in names for f, _, _, _ in HOPPER_TABLES):
                # The Hopper validation figure needs none of the paper's files (its tables are plotted as results too).
                try:
                    before = len(self.written)
                    setup_matplotlib()
                    draw_hopper(d, load_paper(), Saver(out, self.formats, source="the Hopper validation",
                                                       written=self.written))
                    self.plotted += len(self.written) > before
                except PlotProblem as e:
                    self.problem("%s: the Hopper validation figure not plotted: %s" % (d, e))
        rest = [n for n in names if n not in skip]
        if not names:
            self.problem("%s: nothing to plot: no .json file in it\n  %s\n  the paper's figures need %s there "
                         "(scripts/demo writes them; plots/README.md gives the commands)"
                         % (d, RECOGNISED, ", ".join(PAPER_REQUIRED)))
            return
        for n in rest:
            self.file(os.path.join(d, n), out)


def plot_paths(paths, out, formats):
    """`make_plots.py PATH...`: each file, or each directory's .json files, by what they hold."""
    run = Run(formats, out)
    for p in paths:
        if os.path.isdir(p):
            run.directory(p, out or p)
        elif os.path.isfile(p):
            run.file(p, out or os.path.dirname(p) or ".")
        else:
            run.problem("%s: no such file or directory" % p)
    if run.unrecognised:
        print("  " + RECOGNISED, file=sys.stderr)
    if not run.plotted:
        print("make_plots.py: error: nothing plotted", file=sys.stderr)
        return 2
    return 0


def parse_formats(spec):
    formats = [f.strip().lower() for f in spec.split(",") if f.strip()]
    if not formats:
        die("--format names no format")
    for f in formats:
        if f not in ("png", "svg", "pdf"):
            die("unsupported format '%s' (use png, svg, pdf)" % f)
    return formats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="results files or directories: `strata run --json`, `strata search "
                                             "--json`, `strata run --timeline` files (recognised by content); a "
                                             "directory: every recognised .json in it, plus the paper's figures "
                                             "when it holds table5.json, table2.json and timeline.json. Without "
                                             "paths: the paper's figures from --inputs")
    ap.add_argument("--out", default=None, help="directory for the figures (default: with paths, next to each "
                                                "input; without, out)")
    ap.add_argument("--inputs", default=None, help="without paths: directory with table5.json, table2.json, "
                                                   "timeline.json and optionally table4.json, 530b-2240.json, "
                                                   "sweep.json, sc21-table1.json (default: same as --out)")
    ap.add_argument("--format", default="png,svg", help="comma-separated figure formats (default: png,svg)")
    args = ap.parse_args()
    try:
        formats = parse_formats(args.format)
        if args.paths:
            if args.inputs is not None:
                die("--inputs is for the paper's figures without paths; give the directory as a path instead")
            return plot_paths(args.paths, args.out, formats)
        out = args.out if args.out is not None else "out"
        plot_paper(args.inputs if args.inputs is not None else out, out, formats)
        return 0
    except PlotProblem as e:
        print("make_plots.py: error: " + str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
