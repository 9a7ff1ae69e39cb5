#!/usr/bin/env python3
"""Prints what each recompute policy costs, simulated against Megatron-Bridge's measurement (Llama 3 70B fine-tuning
on 32 H100s, FP8, recompute_modules core_attn / mlp / mlp + core_attn; plots/paper_values.json
"bridge_recompute_h100"), as ratios: every case has the same model FLOPs, so a case's published TFLOP/s over the
reference's is the reference's step time over the case's. Two references: the core_attn run (paired with the others in
one experiment) and the recipe's golden no-recompute figure (not a paired run). The absolute level is printed for
information, not compared: the runs' per-step host cost is not modelled (issue 12).

usage: scripts/recompute-validation.py RESULTS.json
  RESULTS.json: `strata run scenarios/validation/bridge-recompute-h100.yaml --json RESULTS.json`
Validation only: nothing in strata is fitted to it.
"""
import sys

from published import PUBLISHED, count_problem, read_results, row_problem, summary, wants_help

KEY = "bridge_recompute_h100"
SCENARIO = "scenarios/validation/bridge-recompute-h100.yaml"
NAME_W = 34


def main(argv):
    if wants_help(argv):
        print(__doc__)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    doc, problem = read_results(argv[1])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    pub = PUBLISHED[KEY]
    results = doc["results"]
    problem = count_problem(results, len(pub["cases"]), SCENARIO)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # The cases in the published order: what each recomputes.
    expected = [("none", []), ("selective", ["core_attn"]), ("selective", ["mlp"]), ("selective", ["core_attn", "mlp"])]
    for r, (recompute, modules) in zip(results, expected):
        problem = row_problem(r, NAME_W, 32)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
        e = r["execution"]
        if (e.get("recompute"), e.get("recompute_modules", [])) != (recompute, modules):
            print(f"error: {r['name']}: recompute {e.get('recompute')} {e.get('recompute_modules')}, the published "
                  f"row's is {recompute} {modules} (the cases of {SCENARIO}, in order)", file=sys.stderr)
            return 2
    print(pub["title"])
    print("ratio = the case's throughput over the reference's (published TFLOP/s; simulated 1 / iteration time);")
    print("error = simulated ratio / published ratio - 1")
    times = [r["iteration_time_s"] for r in results]
    tflops = pub["tflops_per_gpu"]
    for ref, label in ((1, "core_attn (paired)"), (0, "no recompute (golden)")):
        print(f"\nagainst {label}:")
        print(f"{'case':<{NAME_W}} {'published':>9} {'simulated':>9} {'error':>7}")
        errs = []
        for i, r in enumerate(results):
            if i == ref:
                continue
            published = tflops[i] / tflops[ref]
            simulated = times[ref] / times[i]
            err = simulated / published - 1
            errs.append(err)
            print(f"{r['name']:<{NAME_W}} {published:>9.4f} {simulated:>9.4f} {100*err:>+6.2f}%")
        print("  " + summary(errs, "ratios"))
    sim_tf = [r.get("tflops_per_gpu") for r in results]
    if all(isinstance(x, (int, float)) for x in sim_tf):
        print("\nlevel, for information (strata's model TFLOP/s per GPU, its own FLOPs count, against the published):")
        for r, s, p in zip(results, sim_tf, tflops):
            print(f"  {r['name']:<{NAME_W}} {s:7.1f} vs {p:7.1f} ({100*(s/p-1):+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
