#!/usr/bin/env python3
"""The paper's question on today's models and hardware: what to store and what to recompute for Llama 3 70B and
Llama 3.1 405B on DGX H100, in BF16 and FP8 (a prediction of strata's model, not a validation).

For each model, GPU count and precision, and each recompute policy (none; selective of the attention core, the paper's;
selective of the MLP, Megatron-Core's other module for these layers, which re-runs the whole MLP with the norm fused
into fc1; full; block, full recompute of only the fewest first layers of each model chunk that fit; then every policy
and module set at once, the search's own answer, which names the policy it chose, and the same with Megatron-FSDP
among the layouts (pipeline 1; in FP8 its candidates gather FP8 parameters); and what to store on the host:
Megatron-Core's fine-grained activation offloading of the layer input, the norm's output and the attention's tensors,
alone and with MLP recompute, which the search's own answer may choose too),
`strata search` finds the fastest execution that fits in memory (tensor, context 1, pipeline, data, interleave,
microbatch, SP, distributed optimizer and overlaps searched; FlashAttention; Megatron-Core with Transformer Engine's
layers, transformer_impl transformer_engine, whose norms are fused into the linear layers, so that Megatron-Core's
layernorm module has nothing to recompute; its defaults otherwise; representative replicas, the best again in full). The
table gives its simulated iteration time, its MFU against the BF16 peak, its peak memory and its shape, or why nothing
fits. Long context: Llama 3 70B at sequence 32,768 and 131,072 (2M tokens per batch per 64 GPUs, as at 8,192),
context parallelism searched too (c = 1, 2, 4, 8, 16), where activations, not the weights, decide what fits.

usage: scripts/recompute-today.py [--strata build/strata] [--jobs N] [--quick | --quick-long] [--no-long-context]
                                  [--plot FILE.png] [--set PART.KEY=VALUE ...]
  --quick: Llama 3 70B on 32 GPUs in BF16 alone (what the command-line test runs)
  --quick-long: Llama 3 70B at 131,072 tokens on 64 GPUs in BF16 alone (likewise)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# (model file, label, GPUs, global batch): Megatron-Bridge's DGX-H100 batch per GPU count for 70B (256 on 64) and
# 405B (1,536 on 1,024), halved with the GPUs.
# Long context (sequence, last): the model file's 8,192 unless given; then context parallelism is searched as well.
RUNS = [
    ("scenarios/models/llama3-70b.yaml", "Llama 3 70B", 32, 128, None),
    ("scenarios/models/llama3-70b.yaml", "Llama 3 70B", 64, 256, None),
    ("scenarios/models/llama3-405b.yaml", "Llama 3.1 405B", 512, 768, None),
    ("scenarios/models/llama3-405b.yaml", "Llama 3.1 405B", 1024, 1536, None),
]
LONG_CONTEXT = [
    ("scenarios/models/llama3-70b.yaml", "Llama 3 70B", 64, 64, 32768),
    ("scenarios/models/llama3-70b.yaml", "Llama 3 70B", 64, 16, 131072),
    ("scenarios/models/llama3-70b.yaml", "Llama 3 70B", 128, 32, 131072),
]
OFFLOAD = "qkv_linear+core_attn+attn_proj"
POLICIES = [
    ("none", ["--fix", "recompute=none"]),
    ("selective: attention core", ["--fix", "recompute=selective", "--fix", "recompute_modules=core_attn"]),
    ("selective: MLP", ["--fix", "recompute=selective", "--fix", "recompute_modules=mlp"]),
    ("full", ["--fix", "recompute=full"]),
    ("block: full, fewest layers", ["--fix", "recompute=block"]),   # the fewest first layers of each chunk that fit
    # What to store, on the host: Megatron-Core's fine-grained activation offloading of every dense module Transformer
    # Engine's layers offer (the layer input and the norm's output, the attention's q, k, v and output, the
    # projection's input), alone and with MLP recompute (which together leave little of a layer on the GPU).
    ("offload: qkv + attention", ["--fix", "recompute=none", "--fix", f"offload_modules={OFFLOAD}"]),
    ("offload + selective: MLP", ["--fix", "recompute=selective", "--fix", "recompute_modules=mlp",
                                  "--fix", f"offload_modules={OFFLOAD}"]),
    # every policy, selective module set and offloading or not: the search's own answer
    ("searched", ["--fix", f"offload_modules=none,{OFFLOAD}"]),
    # and with Megatron-FSDP among the layouts (pipeline 1; in FP8 its candidates gather FP8 parameters, as it needs)
    ("searched, with FSDP", ["--fix", f"offload_modules=none,{OFFLOAD}", "--fix", "fsdp=off,on"]),
]


def search(strata, model, gpus, batch, seq, precision, policy_args, jobs, sets=()):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = [strata, "search", "--model", model, "--system", "scenarios/systems/dgx-h100.yaml", "--gpus", str(gpus),
                "--global-batch", str(batch), "--attention", "flash", "--precision", precision, "--top", "1",
                "--replicas", "representative", "--jobs", str(jobs), "--json", out.name,
                "--set", "execution.transformer_impl=transformer_engine"] + policy_args
        for setting in sets:
            args += ["--set", setting]
        if seq:
            args += ["--set", f"model.seq_len={seq}", "--fix", "context_parallel=1,2,4,8,16"]
        p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            first = [line for line in p.stderr.splitlines() if line.startswith("error")]
            reason = "out of memory" if "fits in memory" in p.stderr and "out of memory" in p.stderr else "nothing fits"
            return None, reason if first else p.stderr.strip()[-200:]
        doc = json.load(open(out.name))
        return doc["results"][0], None


def policy_name(r):
    """What the search chose, as the rows above name it."""
    e = r["execution"]
    if e.get("fsdp"):
        return "FSDP, " + policy_name({**r, "execution": {**e, "fsdp": False}})
    off = "offload + " if e.get("offload_modules") else ""
    if e["recompute"] == "full" and e["recompute_method"] == "block" and e["recompute_layers"] > 0:
        return f"block: full, first {e['recompute_layers']} layers per chunk"
    if e["recompute"] != "selective":
        return "offload: qkv + attention" if off and e["recompute"] == "none" else off + e["recompute"]
    mods = e["recompute_modules"]
    return off + "selective: " + " + ".join({"core_attn": "attention core", "mlp": "MLP"}[m] for m in mods)


def shape(r):
    e = r["execution"]
    c = f" c{e['context_parallel']}" if e["context_parallel"] > 1 else ""
    s = f"t{e['tensor']}{c} p{e['pipeline']} d{e['data']}"
    if e["interleave"] > 1:
        s += f" m{e['interleave']}"
    return s + f" b{e['microbatch']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--jobs", type=int, default=0)
    quick = ap.add_mutually_exclusive_group()
    quick.add_argument("--quick", action="store_true", help="Llama 3 70B on 32 GPUs in BF16 alone")
    quick.add_argument("--quick-long", action="store_true",
                       help="Llama 3 70B at 131,072 tokens on 64 GPUs in BF16 alone")
    ap.add_argument("--no-long-context", action="store_true", help="leave out the long-context rows")
    ap.add_argument("--plot", metavar="FILE.png", help="also draw each policy's time over the search's best (matplotlib)")
    ap.add_argument("--set", action="append", default=[], metavar="PART.KEY=VALUE",
                    help="passed to every search (e.g. system.network.device_to_host_bandwidth_bytes_per_s=26e9: a "
                         "what-if on the host link)")
    a = ap.parse_args()
    if a.plot:
        a.plot = os.path.abspath(a.plot)  # given relative to the caller's folder
        # `python3` may be an interpreter without matplotlib (pyenv, venv): retry once with the system one, which has
        # Debian's python3-matplotlib, before any search runs (as plots/make_plots.py does).
        import importlib.util
        system = "/usr/bin/python3"
        if (importlib.util.find_spec("matplotlib") is None and os.path.exists(system)
                and not os.environ.get("STRATA_PLOTS_REEXEC")
                and os.path.realpath(sys.executable) != os.path.realpath(system)):
            os.environ["STRATA_PLOTS_REEXEC"] = "1"
            os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])
    runs, precisions = (RUNS[:1], ("bf16",)) if a.quick else (RUNS, ("bf16", "fp8"))
    if a.quick_long:
        runs, precisions = LONG_CONTEXT[1:2], ("bf16",)
    elif not a.quick and not a.no_long_context:
        runs = runs + LONG_CONTEXT
    if os.sep in a.strata:
        a.strata = os.path.abspath(a.strata)  # given relative to the caller's folder
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    print("| model, GPUs, batch | precision | recompute | iteration s | vs none | MFU | peak GiB | shape |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    rows = []   # (case, {policy: seconds or None}, the searched policy's name) for --plot
    for model, label, gpus, batch, seq in runs:
        for precision in precisions:
            base = None
            at = f" x {seq // 1024}k" if seq else ""
            times = {}
            rows.append((f"{label}, {gpus} GPUs{at}, {precision}", times, None))
            for name, policy in POLICIES:
                r, why = search(a.strata, model, gpus, batch, seq, precision, policy, a.jobs, a.set)
                times[name] = r["iteration_time_s"] if r else None
                # The best found over every policy (with Megatron-FSDP where that search is faster).
                if r is not None and name.startswith("searched") and min(t for t in times.values() if t) == times[name]:
                    rows[-1] = (rows[-1][0], times, policy_name(r))
                head = f"| {label}, {gpus}, {batch}{at} | {precision} | {name} |"
                if r is None:
                    print(f"{head} - | - | - | - | {why} |")
                    continue
                if name.startswith("searched"):
                    head = f"| {label}, {gpus}, {batch}{at} | {precision} | {name}: {policy_name(r)} |"
                t = r["iteration_time_s"]
                base = t if name == "none" else base
                rel = f"{(t / base - 1) * 100:+.1f}%" if base and name != "none" else "-"
                print(f"{head} {t:.2f} | {rel} | {r['mfu'] * 100:.1f}% | {r['memory']['peak_bytes'] / 2**30:.1f} | "
                      f"{shape(r)} |")
                sys.stdout.flush()
    if a.plot:
        plot(rows, a.plot)
    return 0


def plot(rows, path):
    """Each policy's iteration time over the best any search found for the case (1 = the best), a bar per policy and a
    group per case; a policy with nothing that fits is marked instead of drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"recompute-today.py: error: --plot needs matplotlib (Debian's python3-matplotlib), not available to "
                 f"{sys.executable}")
    policies = [name for name, _ in POLICIES if name != "searched"]
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.2))
    height = 0.8 / len(policies)
    for i, (case, times, chosen) in enumerate(rows):
        best = min((t for t in times.values() if t), default=None)
        for j, name in enumerate(policies):
            y = i + (j - (len(policies) - 1) / 2) * height
            t = times.get(name)
            if t is None or best is None:
                ax.text(1.0, y, " does not fit", va="center", fontsize=6, color=colors[j])
                continue
            ax.barh(y, t / best, height=height, color=colors[j], label=name if i == 0 else None)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{case}\n(best: {chosen or '-'})" for case, _, chosen in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlim(0.95, max(1.3, max((t / min(x for x in ts.values() if x) for _, ts, _ in rows for t in ts.values() if t),
                                   default=1.3) + 0.02))
    ax.axvline(1.0, color="black", linewidth=0.6)
    ax.set_xlabel("iteration time / the best the search finds over every policy (strata's model, DGX H100)")
    ax.set_title("What to recompute or offload on Llama 3 today: each policy's best layout", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, dpi=150, bbox_inches="tight")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
