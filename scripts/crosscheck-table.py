#!/usr/bin/env python3
"""Prints simulated vs published SC21 Table 1 (achieved TFLOP/s per GPU) with errors, from strata's JSON.

usage: scripts/crosscheck-table.py out/sc21-table1.json
Published values: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC21), Table 1. Their FLOPs count includes the full recompute, so achieved TFLOP/s per GPU is
strata's HFU x 312 TF/s. A cross-check only: nothing in strata is fitted to it.
"""
import sys

from published import PUBLISHED, count_problem, read_results, row_problem, summary, wants_help

PAPER_TFLOPS = PUBLISHED["sc21_table1"]["tflops_per_gpu"]
PEAK_TFLOPS = 312

def main(argv):
    if wants_help(argv):
        print(__doc__); return 0
    if len(argv) != 2:
        print(__doc__); return 2
    doc, problem = read_results(argv[1])
    if problem:
        print(problem, file=sys.stderr); return 2
    results = doc["results"]
    problem = count_problem(results, len(PAPER_TFLOPS), "scenarios/crosscheck/sc21-table1.yaml")
    if problem:
        print(problem); return 2
    print("SC21 Table 1 cross-check (A100, Selene, Megatron-LM 2021). Error = simulated / published - 1.")
    print(f"{'case':<22} {'t':>2} {'p':>3} {'d':>3} {'m':>2} {'b':>3} "
          f"{'iter s':>8} {'TF/s paper':>10} {'sim':>6} {'err':>7}")
    errs = []
    for r, paper in zip(results, PAPER_TFLOPS):
        problem = row_problem(r, 22)
        if problem:
            print(problem); return 3
        e = r["execution"]
        sim = r["hfu"] * PEAK_TFLOPS
        err = sim / paper - 1
        errs.append(err)
        print(f"{r['name']:<22} {e['tensor']:>2} {e['pipeline']:>3} {e['data']:>3} "
              f"{e['interleave']:>2} {e['microbatch']:>3} "
              f"{r['iteration_time_s']:>8.3f} {paper:>10} {sim:>6.1f} {100*err:>+6.1f}%")
    print(summary(errs))
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
