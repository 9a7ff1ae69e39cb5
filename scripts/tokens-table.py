#!/usr/bin/env python3
"""Prints simulated vs published pre-training throughput (tokens/s per GPU) with signed errors.

usage: scripts/tokens-table.py KEY RESULTS.json
  KEY: the published table in plots/paper_values.json, in the order of its scenario's cases:
    megatron_bridge_h100  scenarios/validation/megatron-bridge-h100.yaml (Megatron-Bridge, DGX-H100, FP8)
    nemo_h100             scenarios/validation/nemo-h100.yaml (NeMo 24.07, DGX-H100, FP8)
Tokens per second per GPU need no FLOPs convention: global batch x sequence / (iteration time x GPUs).
Validation only: nothing in strata is fitted to them.
"""
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    if len(argv) != 3:
        print(__doc__); return 2
    tables = json.load(open(os.path.join(HERE, "..", "plots", "paper_values.json")))
    if argv[1] not in tables or "tokens_per_s_per_gpu" not in tables[argv[1]]:
        print(f"{argv[1]}: not a tokens/s table of plots/paper_values.json"); return 2
    pub_table = tables[argv[1]]
    results = json.load(open(argv[2]))["results"]
    if len(results) != len(pub_table["tokens_per_s_per_gpu"]):
        print(f"expected the {len(pub_table['tokens_per_s_per_gpu'])} cases of {argv[1]}'s scenario, got {len(results)}")
        return 2
    print(f"{pub_table['title']} (validation). Error = simulated / published - 1.")
    print(f"{'case':<24} {'t':>2} {'c':>2} {'p':>2} {'v':>2} {'d':>3} {'GPUs':>5} {'iter s':>8} {'tok/s/GPU pub':>14} {'sim':>8} {'err':>7}")
    errs = []
    for r, pub, gpus in zip(results, pub_table["tokens_per_s_per_gpu"], pub_table["gpus"]):
        if "error" in r:
            print(f"{r['name']:<24} error: {r['error']}"); return 3
        e = r["execution"]
        if e["gpus"] != gpus:
            print(f"{r['name']}: {e['gpus']} GPUs, the published row has {gpus}"); return 3
        sim = r["tokens_per_s"] / e["gpus"]
        err = sim / pub - 1
        errs.append(err)
        print(f"{r['name']:<24} {e['tensor']:>2} {e['context_parallel']:>2} {e['pipeline']:>2} {e['interleave']:>2} {e['data']:>3} "
              f"{e['gpus']:>5} {r['iteration_time_s']:>8.3f} {pub:>14.1f} {sim:>8.1f} {100*err:>+6.1f}%")
    print(f"mean |error| {100*sum(abs(x) for x in errs)/len(errs):.2f}%, worst {100*max(abs(x) for x in errs):.2f}%, "
          f"mean signed {100*sum(errs)/len(errs):+.2f}% over {len(errs)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
