#!/usr/bin/env python3
"""Prints simulated vs published pre-training throughput (tokens/s per GPU) with signed errors.

usage: scripts/tokens-table.py KEY RESULTS.json
  KEY: the published table in plots/paper_values.json, in the order of its scenario's cases:
    megatron_bridge_h100  scenarios/validation/megatron-bridge-h100.yaml (Megatron-Bridge, DGX-H100, FP8)
    nemo_h100             scenarios/validation/nemo-h100.yaml (NeMo 24.07, DGX-H100, FP8)
    mlperf_gpt3_h100      scenarios/validation/mlperf-gpt3-h100.yaml (MLPerf Training v3.1 GPT-3 175B, DGX-H100, FP8)
    mlperf_gpt3_h100_v4   scenarios/validation/mlperf-gpt3-h100-v4.yaml (MLPerf Training v4.0 / v4.1, the same)
    mlperf_llama31_405b   scenarios/validation/mlperf-llama31-405b.yaml (MLPerf Training v5.0 Llama 3.1 405B, H100 and
                          H200, FP8)
    dgxc_h100             scenarios/validation/dgxc-h100.yaml (DGX Cloud Benchmarking v25.02, DGX-H100, BF16 and FP8)
    dgxc_h100_v2504       scenarios/validation/dgxc-h100-v2504.yaml (DGX Cloud Benchmarking v25.04, NeMo 2, DGX-H100,
                          BF16 and FP8)
    nemo_long_h100        scenarios/validation/nemo-long-h100.yaml (NeMo 24.03.01, Llama 2 7B at 4K-1,024K tokens with
                          context parallelism, DGX-H100, FP8; tokens/s from the published TFLOP/s by NeMo's FLOPs count)
Tokens per second per GPU need no FLOPs convention: global batch x sequence / (iteration time x GPUs).
Where the table publishes step times of one layout, microbatch size and GPU for several numbers of microbatches per
pipeline (m), the published and the simulated step times are also each split into a fixed part and a part per
microbatch (least squares of time = fixed + per_microbatch x m over those rows; a line per such group): where the two
sides differ says which part strata misses. Where the table has the same case in BF16 and FP8 (names ending in " BF16"
and " FP8"), FP8's speed-up over BF16 is compared too, published against simulated.
Validation only: nothing in strata is fitted to them.
"""
import sys

from published import PUBLISHED, count_problem, read_results, row_problem, summary, wants_help

NAME_W = 32  # the case column: the longest name, "Llama 3.1 405B on 1024 (25.11)", and two spaces
LAYOUT = ("tensor", "context_parallel", "pipeline", "interleave", "microbatch")


def layout_of(r):
    """A result row's (device, t, c, p, v, b, precision): the rows the step-time lines group together share it."""
    e = r["execution"]
    return ((r.get("device_profile", {}).get("name", ""),) + tuple(e.get(k) for k in LAYOUT)
            + (e.get("precision", ""),))


def microbatches_per_pipeline(e):
    return e["global_batch"] // (e["microbatch"] * e["data"])


def main(argv):
    if wants_help(argv):
        print(__doc__); return 0
    if len(argv) != 3:
        print(__doc__); return 2
    if argv[1] not in PUBLISHED or "tokens_per_s_per_gpu" not in PUBLISHED[argv[1]]:
        print(f"{argv[1]}: not a tokens/s table of plots/paper_values.json"); return 2
    pub_table = PUBLISHED[argv[1]]
    doc, problem = read_results(argv[2])
    if problem:
        print(problem, file=sys.stderr); return 2
    results = doc["results"]
    problem = count_problem(results, len(pub_table["tokens_per_s_per_gpu"]), f"{argv[1]}'s scenario")
    if problem:
        print(problem); return 2
    print(f"{pub_table['title']} (validation). Error = simulated / published - 1.")
    print(f"{'case':<{NAME_W}} {'t':>2} {'c':>2} {'p':>2} {'v':>2} {'d':>3} {'GPUs':>5} {'iter s':>8} "
          f"{'tok/s/GPU pub':>14} {'sim':>8} {'err':>7}")
    errs = []
    for i, (r, pub, gpus) in enumerate(zip(results, pub_table["tokens_per_s_per_gpu"], pub_table["gpus"])):
        problem = row_problem(r, NAME_W, gpus)
        if not problem and "cases" in pub_table and not is_published_row(pub_table["cases"][i], r["name"]):
            problem = f"{r['name']}: the published row here is '{pub_table['cases'][i]}'"
        if problem:
            print(problem); return 3
        e = r["execution"]
        sim = r["tokens_per_s"] / e["gpus"]
        err = sim / pub - 1
        errs.append(err)
        print(f"{r['name']:<{NAME_W}} {e['tensor']:>2} {e['context_parallel']:>2} {e['pipeline']:>2} "
              f"{e['interleave']:>2} {e['data']:>3} "
              f"{e['gpus']:>5} {r['iteration_time_s']:>8.3f} {pub:>14.1f} {sim:>8.1f} {100*err:>+6.1f}%")
    print(summary(errs))
    if "step_time_s" in pub_table:
        split_line(results, pub_table["step_time_s"])
        speedup_lines(results, pub_table["step_time_s"])
        scale_lines(results, pub_table["step_time_s"])
    return 0


def is_published_row(published, simulated):
    """Whether a scenario's case is the published row: the row's name starts the case's, and a trailing parenthesis
    ("(25.11)") is the same on both or on neither ("Llama 3 70B (25.11)" is "Llama 3 70B on 64 (25.11)")."""
    def split(name):
        open_at = name.rfind(" (")
        return (name[:open_at], name[open_at:]) if name.endswith(")") and open_at >= 0 else (name, "")
    (p_base, p_paren), (s_base, s_paren) = split(published), split(simulated)
    return p_paren == s_paren and s_base.startswith(p_base)


def line_fit(xs, ys):
    """(intercept, slope) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def split_line(results, published_steps):
    """Prints the fixed and per-microbatch parts of the published and simulated step times: one line per group of rows
    of one layout, precision and device with at least two numbers of microbatches."""
    groups = {}
    for r, pub in zip(results, published_steps):
        groups.setdefault(layout_of(r), []).append((microbatches_per_pipeline(r["execution"]), pub,
                                                    r["iteration_time_s"]))
    devices = {key[0] for key in groups}
    layouts = {key[1:] for key in groups}
    for key, rows in groups.items():
        ms = [m for m, _, _ in rows]
        if len(set(ms)) < 2:
            continue
        pa, pb = line_fit(ms, [pub for _, pub, _ in rows])
        sa, sb = line_fit(ms, [sim for _, _, sim in rows])
        where = f"{key[0]}, " if len(devices) > 1 else ""
        if len(layouts) > 1:
            where += "t {} c {} p {} v {} b {}{}, ".format(*key[1:6], f" {key[6]}" if key[6] else "")
        print(f"step time = fixed + per microbatch x m ({where}m = {sorted(set(ms))}, least squares over the rows): "
              f"published {1e3*pa:.0f} ms + {1e3*pb:.2f} ms x m, simulated {1e3*sa:.0f} ms + {1e3*sb:.2f} ms x m "
              f"(fixed {1e3*(sa-pa):+.0f} ms, per microbatch {100*(sb/pb-1):+.1f}%)")


def speedup_lines(results, published_steps):
    """Prints FP8's speed-up over BF16 (BF16 step time over FP8 step time), published and simulated, for each case
    that the table has in both precisions (names "... BF16" and "... FP8"), and the mean of the differences."""
    pub = {r["name"]: p for r, p in zip(results, published_steps)}
    sim = {r["name"]: r["iteration_time_s"] for r in results}
    diffs = []
    for name in pub:
        if not name.endswith(" BF16") or name[:-4] + "FP8" not in pub:
            continue
        fp8 = name[:-4] + "FP8"
        p, s = pub[name] / pub[fp8], sim[name] / sim[fp8]
        diffs.append(s / p - 1)
        if len(diffs) == 1:
            print("FP8's speed-up over BF16 (BF16 step time / FP8 step time):")
        print(f"  {name[:-5]:<{NAME_W - 2}} published x{p:.3f}, simulated x{s:.3f} ({100*(s/p-1):+.1f}%)")
    if diffs:
        print(f"  mean |difference| {100*sum(abs(x) for x in diffs)/len(diffs):.2f}%, "
              f"mean signed {100*sum(diffs)/len(diffs):+.2f}% over {len(diffs)} pairs")


def scale_lines(results, published_steps):
    """Prints how the step time grows with the GPU count at the same work per GPU (weak scaling: rows of one model,
    layout, precision, device and number of microbatches per pipeline that differ only in data parallelism), published
    and simulated, from the smallest to the largest count: one line per such group, then the mean per precision."""
    groups = {}
    for r, pub in zip(results, published_steps):
        e = r["execution"]
        key = layout_of(r) + (r.get("model", {}).get("name", ""), microbatches_per_pipeline(e))
        groups.setdefault(key, []).append((e["gpus"], pub, r["iteration_time_s"], r["name"]))
    by_precision = {}
    for key, rows in groups.items():
        if len({g for g, _, _, _ in rows}) < 2:
            continue
        rows.sort()
        (g0, p0, s0, n0), (g1, p1, s1, _) = rows[0], rows[-1]
        pg, sg = p1 / p0 - 1, s1 / s0 - 1
        if not by_precision:
            print("Step time with the GPU count at the same work per GPU (weak scaling), smallest to largest:")
        by_precision.setdefault(key[6], []).append(sg - pg)  # layout_of's precision
        label = n0.replace(f" on {g0}", "")
        print(f"  {label:<{NAME_W - 2}} {g0:>5} -> {g1:<5} GPUs: published {100*pg:+.1f}%, simulated {100*sg:+.1f}% "
              f"(difference {100*(sg-pg):+.1f} points)")
    for precision, diffs in sorted(by_precision.items()):
        print(f"  {precision}: simulated minus published growth, mean {100*sum(diffs)/len(diffs):+.2f} points over "
              f"{len(diffs)} groups")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
