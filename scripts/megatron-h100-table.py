#!/usr/bin/env python3
"""Prints simulated vs published Megatron-LM H100 weak or strong scaling (TFLOP/s per GPU) with signed errors.

usage: scripts/megatron-h100-table.py out/megatron-h100.json          (scenarios/validation/megatron-h100.yaml)
       scripts/megatron-h100-table.py out/megatron-h100-strong.json   (scenarios/validation/megatron-h100-strong.yaml)
Published values: Megatron-LM README, Performance Benchmarking (plots/paper_values.json "megatron_h100" and
"megatron_h100_strong"; the file is recognised by its experiment name).
Validation only: nothing in strata is fitted to them. Both sides use Megatron's FLOPs count, so the ratio of
TFLOP/s per GPU is the inverse ratio of iteration times.
"""
import sys

from published import PUBLISHED, count_problem, read_results, row_problem, summary, wants_help

def main(argv):
    if wants_help(argv):
        print(__doc__); return 0
    if len(argv) != 2:
        print(__doc__); return 2
    doc, problem = read_results(argv[1])
    if problem:
        print(problem, file=sys.stderr); return 2
    results = doc["results"]
    strong = "strong" in doc.get("experiment", "")
    PUB = PUBLISHED["megatron_h100_strong" if strong else "megatron_h100"]
    source = "scenarios/validation/megatron-h100" + ("-strong" if strong else "") + ".yaml"
    problem = count_problem(results, len(PUB["tflops_per_gpu"]), source)
    if problem:
        print(problem); return 2
    print(f"Megatron-LM H100 {'strong' if strong else 'weak'} scaling (validation). Error = simulated / published - 1.")
    print(f"{'case':<16} {'t':>2} {'p':>3} {'GPUs':>5} {'iter s':>8} "
          f"{'TF/s pub':>9} {'sim':>7} {'err':>7} {'MFU pub':>8} {'sim':>6}")
    errs = []
    for r, pub, mfu, gpus in zip(results, PUB["tflops_per_gpu"], PUB["mfu_percent"], PUB["gpus"]):
        problem = row_problem(r, 16, gpus)
        if problem:
            print(problem); return 3
        e = r["execution"]
        sim = r["tflops_per_gpu"]
        err = sim / pub - 1
        errs.append(err)
        print(f"{r['name']:<16} {e['tensor']:>2} {e['pipeline']:>3} {e['gpus']:>5} "
              f"{r['iteration_time_s']:>8.3f} {pub:>9.1f} "
              f"{sim:>7.1f} {100*err:>+6.1f}% {mfu:>7}% {100*r['mfu']:>5.1f}%")
    print(summary(errs))
    if strong:
        first, last = results[0], results[-1]
        print(f"scaling efficiency {last['execution']['gpus']} vs {first['execution']['gpus']} GPUs "
              f"(MFU ratio): published "
              f"{PUB['mfu_percent'][-1] / PUB['mfu_percent'][0]:.3f}, simulated {last['mfu'] / first['mfu']:.3f}")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
