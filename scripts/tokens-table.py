#!/usr/bin/env python3
"""Prints simulated vs published pre-training throughput (tokens/s per GPU) with signed errors.

usage: scripts/tokens-table.py KEY RESULTS.json
  KEY: the published table in plots/paper_values.json, in the order of its scenario's cases:
    megatron_bridge_h100  scenarios/validation/megatron-bridge-h100.yaml (Megatron-Bridge, DGX-H100, FP8)
    nemo_h100             scenarios/validation/nemo-h100.yaml (NeMo 24.07, DGX-H100, FP8)
Tokens per second per GPU need no FLOPs convention: global batch x sequence / (iteration time x GPUs).
Validation only: nothing in strata is fitted to them.
"""
import json, sys

from published import PUBLISHED, count_problem, row_problem, summary

NAME_W = 32  # the case column: the longest name, "Llama 3.1 405B on 1024 (25.11)", and two spaces


def main(argv):
    if len(argv) != 3:
        print(__doc__); return 2
    if argv[1] not in PUBLISHED or "tokens_per_s_per_gpu" not in PUBLISHED[argv[1]]:
        print(f"{argv[1]}: not a tokens/s table of plots/paper_values.json"); return 2
    pub_table = PUBLISHED[argv[1]]
    results = json.load(open(argv[2]))["results"]
    problem = count_problem(results, len(pub_table["tokens_per_s_per_gpu"]), f"{argv[1]}'s scenario")
    if problem:
        print(problem); return 2
    print(f"{pub_table['title']} (validation). Error = simulated / published - 1.")
    print(f"{'case':<{NAME_W}} {'t':>2} {'c':>2} {'p':>2} {'v':>2} {'d':>3} {'GPUs':>5} {'iter s':>8} {'tok/s/GPU pub':>14} {'sim':>8} {'err':>7}")
    errs = []
    for r, pub, gpus in zip(results, pub_table["tokens_per_s_per_gpu"], pub_table["gpus"]):
        problem = row_problem(r, NAME_W, gpus)
        if problem:
            print(problem); return 3
        e = r["execution"]
        sim = r["tokens_per_s"] / e["gpus"]
        err = sim / pub - 1
        errs.append(err)
        print(f"{r['name']:<{NAME_W}} {e['tensor']:>2} {e['context_parallel']:>2} {e['pipeline']:>2} {e['interleave']:>2} {e['data']:>3} "
              f"{e['gpus']:>5} {r['iteration_time_s']:>8.3f} {pub:>14.1f} {sim:>8.1f} {100*err:>+6.1f}%")
    print(summary(errs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
