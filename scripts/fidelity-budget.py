#!/usr/bin/env python3
"""Error budget over Table 5 (8 iteration times) and SC21 Table 1 (10 TFLOP/s rows), one line per run.

usage: scripts/fidelity-budget.py LABEL=DIR [LABEL=DIR ...]
Each DIR holds table5.json and sc21-table1.json from `strata run` (scenarios/paper/table5.yaml,
scenarios/crosscheck/sc21-table1.yaml). Errors are signed: Table 5 as simulated / published time - 1 (negative:
strata too fast), SC21 as simulated / published TFLOP/s - 1 (positive: strata too fast). The combined figure over
the 18 rows uses one sense, throughput (published time / simulated time - 1 for Table 5): positive = too fast.
Published values are validation data: nothing is fitted to them.
"""
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED = json.load(open(os.path.join(HERE, "..", "plots", "paper_values.json")))
TABLE5 = {m: (v["full_recompute"], v["present_work"]) for m, v in PUBLISHED["table5"].items() if m != "_note"}
SC21 = PUBLISHED["sc21_table1"]["tflops_per_gpu"]


def errors(d):
    res = {r["name"]: r for r in json.load(open(os.path.join(d, "table5.json")))["results"]}
    t5 = []  # time sense
    for m, (full, present) in TABLE5.items():
        t5.append(res[f"{m} full recompute"]["iteration_time_s"] / full - 1)
        t5.append(res[f"{m} present work"]["iteration_time_s"] / present - 1)
    sc = []
    for r, paper in zip(json.load(open(os.path.join(d, "sc21-table1.json")))["results"], SC21):
        sc.append(r["hfu"] * 312 / paper - 1)  # SC21 counts the recompute's FLOPs: HFU x A100 peak
    return t5, sc


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    print(f"{'run':<28} {'T5 signed':>9} {'T5 |e|':>7} {'T5 worst':>8} {'SC21 signed':>11} {'SC21 |e|':>8} "
          f"{'SC21 worst':>10} {'all 18 signed':>13} {'|e|':>6} {'worst':>6}")
    for arg in argv[1:]:
        label, d = arg.split("=", 1)
        t5, sc = errors(d)
        both = [1 / (1 + e) - 1 for e in t5] + sc  # throughput sense
        print(f"{label:<28} {100*mean(t5):>+8.2f}% {100*mean(map(abs, t5)):>6.2f}% {100*max(map(abs, t5)):>7.2f}% "
              f"{100*mean(sc):>+10.2f}% {100*mean(map(abs, sc)):>7.2f}% {100*max(map(abs, sc)):>9.2f}% "
              f"{100*mean(both):>+12.2f}% {100*mean(map(abs, both)):>5.2f}% {100*max(map(abs, both)):>5.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
