#!/usr/bin/env python3
"""Prints simulated vs published Table 5 (iteration time, MFU, speedup) with errors, from strata's JSON.

usage: scripts/validation-table.py out/table5.json [out/530b-2240.json]
Published values: Korthikanti et al. 2023, Table 5 and section 6.3 (validation only; nothing is fitted to them).
"""
import sys

from published import PUBLISHED, read_results, summary, wants_help

# Table 5 (iteration seconds full recompute, present work; MFU %) and section 6.3's 530B on 2,240 GPUs (MFU %).
PAPER = {m: (v["full_recompute"], v["present_work"], v["mfu"])
         for m, v in PUBLISHED["table5"].items() if not m.startswith("_")}
PAPER_2240 = {"full recompute": PUBLISHED["section6_3_530b_2240gpus"]["full_recompute_mfu"],
              "present work": PUBLISHED["section6_3_530b_2240gpus"]["present_work_mfu"]}

def main(argv):
    if wants_help(argv):
        print(__doc__); return 0
    if len(argv) not in (2, 3):
        print(__doc__); return 2
    docs = []
    for path in argv[1:]:
        doc, problem = read_results(path)
        if problem:
            print(problem, file=sys.stderr); return 2
        docs.append(doc)
    res = {r["name"]: r for r in docs[0]["results"]}
    missing = [f"{m} {kind}" for m in PAPER for kind in ("full recompute", "present work")
               if f"{m} {kind}" not in res or "iteration_time_s" not in res[f"{m} {kind}"]]
    if missing:
        print(f"{argv[1]}: no simulated result for {', '.join(missing)} "
              "(expected `strata run scenarios/paper/table5.yaml --json` output)", file=sys.stderr)
        return 2
    print("Table 5 validation (A100, Selene). Error = simulated / published - 1.")
    print(f"{'model':<6} {'full: paper':>11} {'sim':>8} {'err':>7} {'present: paper':>14} {'sim':>8} {'err':>7} "
          f"{'MFU paper':>9} {'sim':>6} {'speedup paper':>13} {'sim':>6} {'diff':>6}")
    errs = []
    for m, (pf, pp, mfu) in PAPER.items():
        f, p = res[f"{m} full recompute"], res[f"{m} present work"]
        sf, sp = f["iteration_time_s"], p["iteration_time_s"]
        ef, ep = sf / pf - 1, sp / pp - 1
        errs += [ef, ep]
        su_paper, su_sim = pf / pp - 1, sf / sp - 1
        print(f"{m:<6} {pf:>11.2f} {sf:>8.2f} {100*ef:>6.1f}% {pp:>14.2f} {sp:>8.2f} {100*ep:>6.1f}% "
              f"{mfu:>8.1f}% {100*p['mfu']:>5.1f}% {100*su_paper:>12.1f}% {100*su_sim:>5.1f}% "
              f"{100*(su_sim-su_paper):>+5.1f}")
    print(summary(errs, "iteration times"))
    if len(docs) > 1:
        for r in docs[1]["results"]:
            kind = "present work" if "present" in r["name"] else "full recompute"
            print(f"530B on {r['execution']['gpus']} GPUs, {kind}: MFU {100*r['mfu']:.1f}% "
                  f"(paper {PAPER_2240[kind]}%), "
                  f"iteration {r['iteration_time_s']:.2f} s")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
