#!/usr/bin/env python3
"""The headroom model (docs/fidelity.md, "Headroom after rest") against calibrate/torch_power.py's gaps part: whole GPT
layers stepped with waits of 2-100 ms between steps, as a pipeline's waits leave them.

The gaps are idle (the host sleeps) or, with torch_power.py --gap-fill spin, a one-block spin kernel: the GPU waits
busy, as a stage waits in NCCL's polling kernels, so the step pays no wake-up from the idle clock.
For each shape the run measured (four layers at the 177B row's t = 8 shape and at the 1.7B row's t = 1, one GPU, no
sequence parallelism, no communication, forward + backward per step) it prints, per gap, the step's median time, the
GPU's median idle before it and the time it saved against back-to-back steps, beside what strata's model gives a step
after that idle: min(idle x the accrual, the full rest's saving, the step x the saving fraction), the three terms from
`strata explain --clock-from-kernels` of the row's layer with the profile's bandwidth-bound kernels at PyTorch's eager
speed (as power-profile.py's fit runs them; --eager-efficiency, default 0.58). The step's own length is the measured
back-to-back step, so the comparison is of the saving alone. Savings are counted against the gap-0 series (each step
waited for, no sleep) where an idle run has one, the model's for that series' own idle taken off likewise; a spin
run's against the back-to-back series (its steps queue behind the spin: no launch lead-in).

Usage: headroom-gaps.py GAPS.json --profile P --strata BIN [--eager-efficiency 0.58]   (needs PyYAML)
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {"177B": "177B on 2304", "1.7B": "1.7B on 48"}  # torch_power.py's gaps shapes: the rows they are taken from


def _power_profile():
    spec = importlib.util.spec_from_file_location("power_profile", os.path.join(HERE, "power-profile.py"))
    pp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pp)
    return pp


def parse_terms(text):
    """(saving fraction, the full rest's saving in ms, ms saved per ms idle) from explain's "after rest" line."""
    line = next((l for l in text.splitlines() if "after rest (power.headroom_j, idle_w):" in l), None)
    if line is None:
        raise SystemExit("headroom-gaps: strata explain printed no headroom line "
                         "(the profile needs power.headroom_j and power.idle_w)")
    try:
        fraction = float(line.split("): ")[1].split("% less time")[0]) / 100
        full_ms = float(line.split("saves up to ")[1].split(" ms")[0])
        accrual = float(line.split("gives back ")[1].split(" ms")[0])
    except (IndexError, ValueError):
        raise SystemExit(f"headroom-gaps: cannot read explain's headroom line: {line.strip()}")
    return fraction, full_ms, accrual


def model_saving(terms, idle_ms, step_ms):
    fraction, full_ms, accrual = terms
    return min(accrual * idle_ms, full_ms, fraction * step_ms)


def compare(rows, terms_by_model):
    """[(model, gap ms, step ms, idle ms, measured saving ms, model saving ms)] from the run's gaps rows. The savings
    are counted against the gap-0 series where the run has one (each step waited for, no sleep: the same launch lead-in
    and wake-up as the other gaps' steps, which back-to-back steps hide) and the model's saving for that series' own
    idle taken off likewise; else against the back-to-back series. A spin run's (torch_power.py --gap-fill spin) count
    against the back-to-back series: there each step's launches queue behind the spin kernel, so it carries no launch
    lead-in and no wake-up, and its gap-0 series (the host's lead-in alone) is left out. The step's saving fraction
    applies to the back-to-back step (the steady state)."""
    out = []
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    for model, rs in by_model.items():
        base = next((r for r in rs if r["gap_ms"] is None), None)
        if base is None or base.get("step_ms_median") is None:
            raise SystemExit(f"headroom-gaps: the {model} shape has no back-to-back series to compare with")
        if model not in terms_by_model:
            raise SystemExit(f"headroom-gaps: no model terms for the {model} shape ({', '.join(sorted(CASES))})")
        steady = base["step_ms_median"]
        spin = any(r.get("gap_fill") == "spin" for r in rs)
        control = None if spin else next((r for r in rs if r["gap_ms"] == 0 and r.get("step_ms_median") is not None
                                          and r.get("idle_ms_median") is not None), None)
        t0 = control["step_ms_median"] if control else steady
        m0 = model_saving(terms_by_model[model], control["idle_ms_median"], steady) if control else 0.0
        for r in rs:
            if r is control or r["gap_ms"] is None or (spin and r["gap_ms"] == 0) or r.get("step_ms_median") is None \
                    or r.get("idle_ms_median") is None:
                continue
            out.append((model, r["gap_ms"], r["step_ms_median"], r["idle_ms_median"], t0 - r["step_ms_median"],
                        model_saving(terms_by_model[model], r["idle_ms_median"], steady) - m0))
    return out


def main():
    pp = _power_profile()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("gaps", metavar="GAPS.json")
    pp.fit_options(parser, required=True)
    args = parser.parse_args()
    with open(args.gaps) as f:
        rows = json.load(f).get("gaps", [])
    if not rows:
        raise SystemExit(f"headroom-gaps: {args.gaps} has no gaps part (torch_power.py OUT.json --only gaps)")
    strata, profile, eager = args.strata, args.profile, args.eager_efficiency
    doc, tmp = pp.eager_profile(profile, eager)  # says so if PyYAML is missing
    import yaml
    try:
        with open(tmp, "w") as f:
            yaml.safe_dump(doc, f)
        terms = {}
        for model in sorted({r["model"] for r in rows}):
            if model not in CASES:
                raise SystemExit(f"headroom-gaps: the run's shape {model} is none of {', '.join(sorted(CASES))}")
            text = subprocess.run([strata, "explain", os.path.join(HERE, "..", "scenarios", "validation",
                                                                   "megatron-h100.yaml"),
                                   "--case", CASES[model], "--profile", tmp, "--clock-from-kernels",
                                   "--set", "execution.tp_comm_overlap=false", "--set",
                                   "execution.sequence_parallel=false"],
                                  capture_output=True, text=True, check=True).stdout
            terms[model] = parse_terms(text)
    finally:
        os.unlink(tmp)
    fills = sorted({r.get("gap_fill", "idle") for r in rows if r["gap_ms"] is not None})
    print(f"# headroom after rest against {args.gaps} (profile {profile}; bandwidth-bound kernels at {eager:g}; gaps "
          f"{' and '.join(fills)})")
    for model, (fraction, full_ms, accrual) in sorted(terms.items()):
        print(f"# {model}: the model saves {100 * fraction:.1f}% of a step at the boost clock, up to {full_ms:.1f} ms "
              f"after a full rest, {accrual:.2f} ms per ms idle")
    print(f"{'shape':<6} {'gap ms':>6} {'wait ms':>8} {'step ms':>8} {'saved ms':>9} {'model ms':>9}")
    diffs = []
    for model, gap, step, idle, saved, pred in compare(rows, terms):
        print(f"{model:<6} {gap:>6g} {idle:>8.2f} {step:>8.3f} {saved:>9.3f} {pred:>9.3f}")
        diffs.append(pred - saved)
    if diffs:
        print(f"model - measured saving: median {statistics.median(diffs):+.3f} ms, "
              f"{min(diffs):+.3f} to {max(diffs):+.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
