#!/usr/bin/env python3
"""Turns a fused-attention run of calibrate/torch_bench.py into device-profile entries.

    python3 scripts/attention-profile.py RUN.json [--backend cudnn|flash]

RUN.json is what `calibrate/torch_bench.py RUN.json --attention-grid [--dropout P]` wrote on a GPU. Printed, as YAML to
paste into a device profile (docs/device-profile.md), with the run's provenance in comments:
  - `measured.flash_attention`: each shape's forward and backward time in us, timed without dropout (the grid the cost
    model interpolates; its entries of the most common head_dim must form a full grid, checked here as the profile
    loader checks it);
  - `flash_attention.dropout_time_factor`, where the run timed each shape with dropout too (--dropout P): the median
    over the shapes of the forward + backward time with dropout over the time without, with its range (the factor the
    cost model applies to fused attention kernels of models with dropout > 0).
--backend: the run's SDPA backend to read, cudnn (default: Transformer Engine's fused attention on Hopper) or flash
(FlashAttention-2's kernels, strata's `attention: flash2`; what the cuDNN grid over them is, is printed as a comment).
Exit status 2 with a message for a file that is not such a run, or whose shapes do not form a grid.
"""
import argparse
import json
import statistics
import sys
from collections import Counter


class RunError(Exception):
    """A run file that cannot give profile entries; the message says why."""


def shape_of(r):
    return (r["b"], r["heads"], r["s"], r["d"])


def records(run, backend, path):
    """The run's usable attention records of `backend`, by dropout_p, then by shape."""
    att = run.get("attention") if isinstance(run, dict) else None
    if not isinstance(att, list) or not att:
        raise RunError(f"{path}: no 'attention' records (a run of calibrate/torch_bench.py --attention-grid is needed)")
    out, failed, backends = {}, [], set()
    for i, r in enumerate(att):
        try:
            backends.add(r["backend"])
            if r["backend"] != backend:
                continue
            key = shape_of(r)
            p = float(r.get("dropout_p", 0.0))
            if "error" in r:
                failed.append(f"{r.get('tag', key)} (dropout {p}): {r['error']}")
                continue
            fwd, bwd = float(r["fwd_s"]), float(r["bwd_s"])
        except (KeyError, TypeError, ValueError) as e:
            raise RunError(f"{path}: attention record {i} is not torch_bench's (missing or bad {e})") from None
        if not (fwd > 0 and bwd > 0):
            raise RunError(f"{path}: attention record {i} ({r.get('tag', key)}) has a forward of {fwd} s and a "
                           f"backward of {bwd} s; both must be positive")
        if key in out.setdefault(p, {}):
            raise RunError(f"{path}: shape b={key[0]} heads={key[1]} s={key[2]} d={key[3]} timed twice at dropout {p}")
        out[p][key] = (fwd, bwd)
    if not out:
        raise RunError(f"{path}: no records of backend '{backend}' (the run has: {', '.join(sorted(backends))})")
    if 0.0 not in out:
        raise RunError(f"{path}: backend '{backend}' has no shape timed without dropout")
    return out, failed


def grid_head_dim(shapes):
    """The head_dim whose entries form the grid: the most common, the larger on a tie (as the profile loader picks it,
    flash_grid_head_dim in include/strata/profile.hpp)."""
    count = Counter(k[3] for k in shapes)
    return max(count, key=lambda d: (count[d], d))


def check_grid(shapes, path):
    """The profile loader's rule: the most common head_dim's entries have every batch x heads with every seq_len."""
    d = grid_head_dim(shapes)
    points = {(k[0] * k[1], k[2]) for k in shapes if k[3] == d}
    bh = sorted({p[0] for p in points})
    seqs = sorted({p[1] for p in points})
    missing = [(x, s) for x in bh for s in seqs if (x, s) not in points]
    if missing:
        names = ", ".join(f"batch x heads {x} at s = {s}" for x, s in missing[:6])
        raise RunError(f"{path}: the head_dim {d} shapes do not form a grid (missing {names}"
                       f"{', ...' if len(missing) > 6 else ''}): time them with torch_bench.py --attention-grid")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("run", metavar="RUN.json", help="calibrate/torch_bench.py's output")
    ap.add_argument("--backend", choices=("cudnn", "flash"), default="cudnn",
                    help="the SDPA backend to read (default cudnn)")
    a = ap.parse_args(argv)
    try:
        with open(a.run) as f:
            run = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"attention-profile: {a.run}: {e}", file=sys.stderr)
        return 2
    try:
        by_p, failed = records(run, a.backend, a.run)
        base = by_p[0.0]
        check_grid(base, a.run)
    except RunError as e:
        print(f"attention-profile: {e}", file=sys.stderr)
        return 2
    for line in failed:
        print(f"attention-profile: left out, failed in the run: {line}", file=sys.stderr)

    w = sys.stdout.write
    w(f"# From {a.run}: calibrate/torch_bench.py on {run.get('device', '?')} ({run.get('date', '?')}; torch "
      f"{run.get('torch', '?')}, CUDA {run.get('cuda', '?')}, cuDNN {run.get('cudnn', '?')}), "
      f"SDPA backend {a.backend}, causal BF16; {run.get('method', '')}\n")
    dropouts = sorted(p for p in by_p if p > 0)
    if dropouts:
        w("flash_attention:\n")
        for p in dropouts:
            pairs = [(k, base[k], t) for k, t in sorted(by_p[p].items()) if k in base]
            if not pairs:
                w(f"  # dropout {p}: no shape timed both ways\n")
                continue
            ratios = [sum(t) / sum(b) for _, b, t in pairs]
            fwd = statistics.median(t[0] / b[0] for _, b, t in pairs)
            bwd = statistics.median(t[1] / b[1] for _, b, t in pairs)
            w(f"  # dropout_p {p}: forward + backward with dropout over without, median of {len(ratios)} shapes "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}; forward alone {fwd:.3f}, backward alone {bwd:.3f})\n")
            w(f"  dropout_time_factor: {statistics.median(ratios):.3f}\n")
    else:
        w("# (no shape timed with dropout: run torch_bench.py with --dropout P for "
          "flash_attention.dropout_time_factor)\n")
    if a.backend == "cudnn" and "flash" in {r.get("backend") for r in run["attention"]}:
        try:
            fa2, _ = records(run, "flash", a.run)
            both = [k for k in base if k in fa2[0.0]]
            if both:
                fr = statistics.median(base[k][0] / fa2[0.0][k][0] for k in both)
                br = statistics.median(base[k][1] / fa2[0.0][k][1] for k in both)
                w(f"# FlashAttention-2 (backend flash) over cuDNN, median time ratio cuDNN / FA2 over {len(both)} "
                  f"shapes: "
                  f"forward {fr:.3f}, backward {br:.3f} (flash_attention.flash2_forward_ratio / _backward_ratio)\n")
        except RunError:
            pass
    w("measured:\n  flash_attention:\n")
    grid_d = grid_head_dim(base)
    for (b, h, s, d), (fwd, bwd) in sorted(base.items(), key=lambda kv: (kv[0][3] != grid_d, -kv[0][3], kv[0][0],
                                                                         kv[0][2], kv[0][1])):
        w(f"    - {{batch: {b}, heads: {h}, seq_len: {s}, head_dim: {d}, forward_us: {fwd * 1e6:.1f}, "
          f"backward_us: {bwd * 1e6:.1f}}}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
