#!/usr/bin/env python3
"""Prints simulated vs published Megatron-LM H100 weak scaling (TFLOP/s per GPU) with signed errors.

usage: scripts/megatron-h100-table.py out/megatron-h100.json
Published values: Megatron-LM README, Performance Benchmarking (plots/paper_values.json "megatron_h100").
Validation only: nothing in strata is fitted to them. Both sides use Megatron's FLOPs count, so the ratio of
TFLOP/s per GPU is the inverse ratio of iteration times.
"""
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
PUB = json.load(open(os.path.join(HERE, "..", "plots", "paper_values.json")))["megatron_h100"]

def main(argv):
    if len(argv) != 2:
        print(__doc__); return 2
    results = json.load(open(argv[1]))["results"]
    if len(results) != len(PUB["tflops_per_gpu"]):
        print(f"expected the {len(PUB['tflops_per_gpu'])} cases of scenarios/validation/megatron-h100.yaml, got {len(results)}")
        return 2
    print("Megatron-LM H100 weak scaling (validation). Error = simulated / published - 1.")
    print(f"{'case':<16} {'t':>2} {'p':>3} {'GPUs':>5} {'iter s':>8} {'TF/s pub':>9} {'sim':>7} {'err':>7} {'MFU pub':>8} {'sim':>6}")
    errs = []
    for r, pub, mfu, gpus in zip(results, PUB["tflops_per_gpu"], PUB["mfu_percent"], PUB["gpus"]):
        e = r["execution"]
        if "error" in r:
            print(f"{r['name']:<16} error: {r['error']}"); return 3
        if e["gpus"] != gpus:
            print(f"{r['name']}: {e['gpus']} GPUs, the published row has {gpus}"); return 3
        sim = r["tflops_per_gpu"]
        err = sim / pub - 1
        errs.append(err)
        print(f"{r['name']:<16} {e['tensor']:>2} {e['pipeline']:>3} {e['gpus']:>5} {r['iteration_time_s']:>8.3f} {pub:>9.1f} "
              f"{sim:>7.1f} {100*err:>+6.1f}% {mfu:>7}% {100*r['mfu']:>5.1f}%")
    print(f"mean |error| {100*sum(abs(x) for x in errs)/len(errs):.2f}%, worst {100*max(abs(x) for x in errs):.2f}%, "
          f"mean signed {100*sum(errs)/len(errs):+.2f}% over {len(errs)} rows")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
