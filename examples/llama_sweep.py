#!/usr/bin/python3
"""Notebook-style example: how microbatch size and activation recomputation trade speed for memory when
training Llama 3 8B on one DGX H100 (8 GPUs), with strata's Python module.

    PYTHONPATH=build/python /usr/bin/python3 examples/llama_sweep.py --out out

Each cell below would be a notebook cell. Writes OUT/llama_sweep.png (MFU and peak memory per GPU against the
microbatch size, one line per recompute policy) and prints the table.
"""
import argparse
import os

import strata

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "..", "scenarios")

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--out", default="out", help="directory for llama_sweep.png (default: out)")
args = ap.parse_args()

# --- 1. The experiment, as a dict: the same keys as a YAML file, the parts named by path (relative to base_dir).
experiment = {
    "name": "Llama 3 8B on a DGX H100: microbatch x recompute",
    "model": "models/llama3-8b.yaml",
    "system": "systems/dgx-h100.yaml",
    "execution": {"tensor": 2, "pipeline": 1, "data": 4, "global_batch": 32, "sequence_parallel": True,
                  "attention": "flash", "distributed_optimizer": True, "microbatch": 1, "recompute": "none"},
    "sweep": {"execution.recompute": ["none", "selective", "full"], "execution.microbatch": [1, 2, 4, 8]},
}

# --- 2. Run it: one dict per case, exactly what `strata run --json` writes (cases run on every core).
results = strata.run(experiment, base_dir=SCENARIOS)
GiB = 2 ** 30
rows = {}
for r in results:
    e = r["execution"]
    rows.setdefault(e["recompute"], []).append(
        (e["microbatch"], 100 * r["mfu"], r["memory"]["peak_bytes"] / GiB, r["memory"]["fits"]))
print(f"{'recompute':<10} {'b':>2} {'MFU %':>6} {'peak GiB':>9} fits")
for policy, points in rows.items():
    for b, mfu, peak, fits in points:
        print(f"{policy:<10} {b:>2} {mfu:>6.1f} {peak:>9.1f} {'yes' if fits else 'NO'}")

# --- 3. The same as a DataFrame, when pandas is installed.
try:
    frame = results.to_dataframe()
    print(frame[["name", "mfu", "memory.peak_bytes"]].to_string(index=False))
except ImportError:
    pass

# --- 4. Plot MFU and memory against the microbatch size.
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for policy, points in rows.items():
    bs = [p[0] for p in points]
    left.plot(bs, [p[1] for p in points], marker="o", label=policy)
    right.plot(bs, [p[2] for p in points], marker="o", label=policy)
capacity = results[0]["memory"]["capacity_bytes"] / GiB
right.axhline(capacity, color="grey", linestyle="--", label=f"HBM {capacity:.0f} GiB")
for ax, title in ((left, "MFU (%)"), (right, "peak memory per GPU (GiB)")):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("microbatch size")
    ax.set_title(title)
    ax.legend()
fig.suptitle(results.experiment)
fig.tight_layout()
os.makedirs(args.out, exist_ok=True)
path = os.path.join(args.out, "llama_sweep.png")
fig.savefig(path, dpi=120)
print("wrote", path)
