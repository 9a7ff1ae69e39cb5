#!/usr/bin/env python3
"""How far representative replicas (`strata run --replicas representative`) are from the full simulation.

Runs each experiment twice, with every GPU group and with representative replicas, and prints per simulated case:
GPUs, data-parallel replicas d, the two iteration times, their difference (signed: positive = the
representative run is slower), the two wall times (whole processes, as `strata run FILE` takes them) and the
tasks. Ends with the worst and mean |difference| over the cases with more than one replica per stage.

usage: scripts/representative-check.py [--strata build/strata] [--case NAME] [FILE...]
Default FILES: every shipped experiment that the engine simulates in minutes (scenarios/bench/scaling-large.yaml,
whose full run of 131,072 GPUs takes many minutes, only when named). Exit 1 if a run fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

DEFAULT = [
    "scenarios/paper/table4.yaml", "scenarios/paper/table5.yaml", "scenarios/paper/530b-2240.yaml",
    "scenarios/paper/175b-on-h100.yaml", "scenarios/paper/table5-hopper.yaml", "scenarios/crosscheck/sc21-table1.yaml",
    "scenarios/validation/megatron-h100.yaml", "scenarios/validation/megatron-h100-strong.yaml",
    "scenarios/validation/mlperf-gpt3-h100.yaml", "scenarios/validation/mlperf-gpt3-h100-v4.yaml",
    "scenarios/validation/mlperf-llama31-405b.yaml", "scenarios/validation/dgxc-h100-v2504.yaml",
    "scenarios/llama/llama3-h100.yaml", "scenarios/sweeps/microbatch.yaml", "scenarios/sweeps/oversubscription.yaml",
    "scenarios/bench/scaling.yaml",
]


def run(strata, path, replicas, case):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = [strata, "run", path, "--replicas", replicas, "--json", out.name] + (["--case", case] if case else [])
        t0 = time.monotonic()
        p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.monotonic() - t0
        # A sweep with infeasible combinations exits non-zero but writes every case (with its reason).
        try:
            doc = json.load(open(out.name))
        except (OSError, json.JSONDecodeError):
            sys.exit(f"{' '.join(args)} failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return doc, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--case")
    a = ap.parse_args()
    diffs = []
    print(f"{'file / case':58} {'GPUs':>6} {'d':>4} {'full s':>10} {'repr s':>10} {'diff %':>8} "
          f"{'tasks full':>11} {'tasks repr':>10}")
    for path in a.files or DEFAULT:
        full, wall_full = run(a.strata, path, "all", a.case)
        rep, wall_rep = run(a.strata, path, "representative", a.case)
        print(f"{os.path.basename(path)}: whole file {wall_full:.2f} s full, {wall_rep:.2f} s representative "
              f"(ratio {wall_rep / max(wall_full, 1e-9):.3f})")
        file_diffs = []
        for f, r in zip(full["results"], rep["results"]):
            if "iteration_time_s" not in f:
                continue
            e = f["execution"]
            replicas = e["data"]   # context-parallel ranks are inside a simulated group
            d = r["iteration_time_s"] / f["iteration_time_s"] - 1
            if replicas > 1:
                diffs.append(d)
                file_diffs.append(d)
            print(f"  {f['name'][:56]:56} {e['gpus']:6d} {replicas:4d} {f['iteration_time_s']:10.4f} "
                  f"{r['iteration_time_s']:10.4f} {100 * d:+8.3f} {f['engine']['tasks']:11d} "
                  f"{r['engine']['tasks']:10d}")
        if file_diffs:
            print(f"  {len(file_diffs)} case(s) with d > 1: "
                  f"{100 * min(file_diffs):+.3f} .. {100 * max(file_diffs):+.3f}%")
    if diffs:
        print(f"{len(diffs)} cases with d > 1: mean |diff| {100 * sum(map(abs, diffs)) / len(diffs):.3f}%, "
              f"worst {100 * max(map(abs, diffs)):.3f}%, mean signed {100 * sum(diffs) / len(diffs):+.3f}%")


if __name__ == "__main__":
    main()
