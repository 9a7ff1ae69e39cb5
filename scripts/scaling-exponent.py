#!/usr/bin/env python3
"""How the simulator's wall time grows with the cluster (issue 13's exponent), measured in one window.

The 2-core machines drift by 20-30% within a quarter of an hour, so the small and the large case are run
interleaved: ROUNDS rounds of (SMALL runs of the 512-GPU case, one run of the 131,072-GPU case, SMALL runs of
the 512-GPU case), each case alone in its own `strata bench` process (a one-case copy of the experiment file
in a temporary directory). Prints every run, the medians and log(wall_large / wall_small) / log(GPUs ratio).

usage: python3 scripts/scaling-exponent.py [--strata build/strata] [--rounds 3] [--small 3]
       [--large-case "1T 131072 GPUs (d=256)"]   (about 2 minutes a round on the 2-core machine)
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ("scenarios/bench/scaling.yaml", "1T 512 GPUs (d=1)")
LARGE_FILE = "scenarios/bench/scaling-large.yaml"


def one_case_copy(path, case, out_dir):
    """The experiment file with only `case` under `cases:`, its part paths made absolute."""
    src = os.path.join(ROOT, path)
    base = os.path.dirname(src)
    head, cases, current = [], [], None
    in_cases = False
    for line in open(src, encoding="utf-8"):
        if line.startswith("cases:"):
            in_cases = True
            continue
        if not in_cases:
            m = re.match(r"^(model|system):\s*(\S+\.yaml)\s*$", line)
            head.append(f"{m.group(1)}: {os.path.normpath(os.path.join(base, m.group(2)))}\n" if m else line)
            continue
        if line.startswith("  - name:"):
            current = [line]
            cases.append(current)
        elif current is not None:
            current.append(line)
    chosen = [c for c in cases if c[0].split("name:", 1)[1].strip() == case]
    if len(chosen) != 1:
        sys.exit(f"{path}: no case named '{case}'")
    out = os.path.join(out_dir, re.sub(r"[^A-Za-z0-9]+", "-", case) + ".yaml")
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(head + ["cases:\n"] + chosen[0])
    return out


def bench(strata, path):
    """(GPUs, wall seconds) of the one case, from `strata bench`."""
    out = subprocess.run([strata, "bench", path], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if line.startswith("1T") and len(fields) >= 7:
            # name ... GPUs tasks events wall events/s iter
            return int(fields[-6]), float(fields[-3])
    sys.exit(f"unexpected output of strata bench {path}:\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=3)
    ap.add_argument("--large-case", default="1T 131072 GPUs (d=256)")
    a = ap.parse_args()
    if a.rounds < 1 or a.small < 1:
        sys.exit("--rounds and --small must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        small = one_case_copy(*SMALL, tmp)
        large = one_case_copy(LARGE_FILE, a.large_case, tmp)
        small_walls, large_walls = [], []
        gpus = {}

        def run(path, walls, round_no):
            n, w = bench(a.strata, path)
            gpus[path] = n
            walls.append(w)
            print(f"round {round_no}: {n} GPUs {w:.3f} s", flush=True)

        for r in range(1, a.rounds + 1):
            for _ in range(a.small):
                run(small, small_walls, r)
            run(large, large_walls, r)
            for _ in range(a.small):
                run(small, small_walls, r)
        gpus_small, gpus_large = gpus[small], gpus[large]
    ms, ml = statistics.median(small_walls), statistics.median(large_walls)
    exponent = math.log(ml / ms) / math.log(gpus_large / gpus_small)
    print(f"median {gpus_small} GPUs {ms:.3f} s "
          f"({len(small_walls)} runs, {min(small_walls):.3f}-{max(small_walls):.3f}); "
          f"median {gpus_large} GPUs {ml:.2f} s "
          f"({len(large_walls)} runs, {min(large_walls):.2f}-{max(large_walls):.2f})")
    print(f"wall time grows as GPUs^{exponent:.3f} (issue 13's bound: 1.05); load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
