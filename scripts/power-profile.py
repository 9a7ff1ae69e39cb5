#!/usr/bin/env python3
"""A device profile's power block from calibrate/torch_power.py's output: the board's limit, what a copy and fused
attention draw, and the GEMMs' speed and power at the clocks the limit set (docs/device-profile.md, "Power limit").

Each GEMM point is one mix phase whose clock the limit lowered (GEMMs a share s of the time, copies the rest): the
GEMMs' own watts are the phase's mean power less the copies' share at the copy-only phase's power,
(W - (1 - s) x W_copy) / s; their speed is the phase's median GEMM rate over the rate at the boost clock (the
1/4-share phase, which stays at the boost clock). Phases at the boost clock give no point. --fp8 FILE: the FP8
curve from a `torch_power.py --fp8 --only mix` run (measured.gemm_power_fp8).

The headroom after rest (power.headroom_j, power.idle_w), from a run with the rest part (torch_power.py --only
mix,attention,rest; or --rest REST.json: the rest part of another run, the curve staying this run's): each burst
after a rest, its GEMMs timed one by one against that run's boost-clock and steady GEMM (rest_series), bought so many
ms at the boost clock; the median over the bursts after a GPU idle gap of 150 ms or more (a full rest), times what
GEMMs draw at the boost clock above the limit (this run's curve), is headroom_j; idle_w is the median power of the
rest run's idle readings at the boost clock, those within 1 s after work left out. A comment line per rest length gives
what its bursts bought (and of it in their first 100 ms), the model's credit for that idle gap, and the first GEMM's
wake-up (it runs slower as the GPU leaves its idle clock).

Without a rest part, from the duty part (session 28's reading; NVML reports the clock about every 100 ms; on the
runs of 2026-11-27d it read 176 and 163 ms where the GEMMs' own times read 152 and 134): the 400 ms GEMM bursts, each
after as long an idle gap, start at the boost clock and settle towards the GEMM-only clock. Each burst's clock readings
(NVML, every 20 ms), as speed on the BF16 curve above that clock's, add up to the seconds at the boost clock the rest
bought (the first burst left out: it follows the 2 s pause before the part, not a gap as long as itself, and bought
220 ms on the H100 against 112-187 ms); the mean over the bursts times what GEMMs draw at the boost clock above the
limit is headroom_j; idle_w as above.

With --profile P (a profile that already has the block) and --strata BIN: power.reference_clock_mhz, the clock at
which the profile's own rates hold, fitted (least squares, relative errors) so that strata's layers at their steady
state match the layers the run measured at theirs (torch_common.gpt_layer: no sequence parallelism, no
communication), as one GPU ran them: `strata explain --clock-from-kernels` of scenarios/validation/megatron-h100.yaml's
rows at those shapes (the clock from the layer's kernels alone), each candidate written into a copy of P whose
bandwidth-bound kernels run at PyTorch's eager speed, in the mix that sets the clock and in the time alike
(--eager-efficiency, default 0.58 of the copy bandwidth: calibrate/torch_elementwise.py's median; the copy drops P's
measured.elementwise). Needs PyYAML.
Usage: power-profile.py POWER.json [--limit-w 700] [--attention-w W] [--fp8 FP8.json] [--rest REST.json]
                        [--profile P --strata BIN [--eager-efficiency 0.58]]
(--attention-w: for a run without the attention part, a figure measured on another GPU of the same chip.)
"""
import argparse
import math
import json
import os
import statistics
import subprocess
import sys
import tempfile

LAYERS = (("1.7B on 48", "1.7B"), ("7.1B on 96", "7.1B"), ("70B on 768", "70B"), ("177B on 2304", "177B"))
SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "validation",
                        "megatron-h100.yaml")


def layer_ms(strata, profile, case):
    """A layer's compute (its kernels; collectives left out) from `strata explain --clock-from-kernels`."""
    out = subprocess.run([strata, "explain", SCENARIO, "--case", case, "--profile", profile, "--clock-from-kernels",
                          "--set", "execution.tp_comm_overlap=false", "--set", "execution.sequence_parallel=false"],
                         capture_output=True, text=True, check=True).stdout
    total = 0.0
    for line in out.splitlines():
        f = line.split()
        if len(f) < 4 or "ms" not in f or f[1] not in ("gemm", "batched-gemm", "flash-attention", "elementwise"):
            continue
        total += float(f[f.index("ms") - 1])
    return total


def eager_profile(profile, eager):
    """(the profile as a dict with its bandwidth-bound kernels at `eager` of the copy bandwidth, as PyTorch's eager
    kernels run, and its fused attention without dropout, as the measured layers' (torch_common.gpt_layer) runs; a
    temporary file beside it to write it to). The caller removes the file."""
    try:
        import yaml
    except ImportError:
        raise SystemExit("power-profile: this needs PyYAML (apt-get install python3-yaml)")
    with open(profile) as f:
        doc = yaml.safe_load(f)
    if "power" not in doc:
        raise SystemExit(f"power-profile: {profile} has no power block")
    doc.setdefault("elementwise", {})["bandwidth_efficiency"] = eager
    doc.get("measured", {}).pop("elementwise", None)
    if "flash_attention" in doc:
        doc["flash_attention"]["dropout_time_factor"] = 1.0
    fd, tmp = tempfile.mkstemp(suffix=".yaml", dir=os.path.dirname(os.path.abspath(profile)))
    os.close(fd)
    return doc, tmp


def fit_reference(strata, profile, measured, eager, lo_clock, hi_clock):
    import yaml
    doc, tmp = eager_profile(profile, eager)
    try:
        def residuals(ref):
            doc["power"]["reference_clock_mhz"] = round(ref, 3)
            with open(tmp, "w") as f:
                yaml.safe_dump(doc, f)
            return [(layer_ms(strata, tmp, case), measured[name], name) for case, name in LAYERS]

        def cost(ref):
            return sum((p / m - 1) ** 2 for p, m, _ in residuals(ref))

        lo, hi = lo_clock, hi_clock  # golden-section search: the sum of squares is unimodal in the reference
        g = (5 ** 0.5 - 1) / 2
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa, fb = cost(a), cost(b)
        for _ in range(40):
            if fa < fb:
                hi, b, fb = b, a, fa
                a = hi - g * (hi - lo)
                fa = cost(a)
            else:
                lo, a, fa = a, b, fb
                b = lo + g * (hi - lo)
                fb = cost(b)
        best = round((lo + hi) / 2)
        return best, residuals(best)
    finally:
        os.unlink(tmp)


def speed_at(points, boost_mhz, mhz):
    """The BF16 curve's speed at a clock, as strata's sustained_clock reads it: linear between points, up to (boost,
    1) above the top one."""
    pts = [(boost_mhz, 1.0, None)] + [(p[0], p[1], p[2]) for p in points]
    if mhz >= pts[1][0]:
        hi, lo = pts[0], pts[1]
    else:
        hi, lo = next(((a, b) for a, b in zip(pts[1:], pts[2:]) if b[0] <= mhz), (pts[-2], pts[-1]))
    return lo[1] + (hi[1] - lo[1]) * (mhz - lo[0]) / (hi[0] - lo[0])


def boost_watts(points, boost_mhz):
    """What GEMMs draw at the boost clock: the curve's top two points extended to it."""
    top, second = points[0], points[1]
    return top[2] + (top[2] - second[2]) / (top[0] - second[0]) * (boost_mhz - top[0])


def headroom(d, points, boost_mhz):
    samples = d.get("samples", [])
    burst = [x for x in samples if x[0] == "duty 400 ms"]
    if not burst:
        return None
    bursts, cur = [], []
    for x in burst:
        if cur and x[1] - cur[-1][1] > 0.06:
            bursts.append(cur)
            cur = []
        cur.append(x)
    bursts.append(cur)
    bursts = bursts[1:]
    if len(bursts) < 3:
        raise SystemExit(f"power-profile: {len(bursts)} 400 ms bursts after an idle gap: too few for the headroom")
    steady = points[-1][1]  # the GEMM-only phase: what the limit leaves GEMMs that run on
    boosted = []
    for b in bursts:
        secs = 0.0
        for i, x in enumerate(b):
            dt = (b[i + 1][1] - x[1]) if i + 1 < len(b) else (x[1] - b[i - 1][1])
            secs += max(0.0, speed_at(points, boost_mhz, x[2]) - steady) / (1 - steady) * dt
        boosted.append(secs)
    idle_w = idle_watts(samples, boost_mhz)  # None without idle readings: the caller says so where it needs it
    return sum(boosted) / len(boosted), idle_w, len(bursts), min(boosted), max(boosted)


FULL_REST_MS = 150.0  # a GPU idle gap at least this long refills the headroom (docs/fidelity.md, "Headroom after rest")
FAST_MS = 100.0  # the part of a burst read apart: the clock's fall from the boost clock


def gemm_flops(d):
    """The run's GEMM flops as it saved them (runs before session 31 did not: 8192^3, the only size they ran)."""
    return d.get("gemm_flops", 2 * 8192 ** 3)


def gemm_label(d):
    """The run's GEMM as its size, n^3 where the flops are 2 n^3 (else the flops)."""
    flops = gemm_flops(d)
    n = round((flops / 2) ** (1 / 3))
    return f"{n}^3" if 2 * n ** 3 == flops else f"{flops:.4g}-flop"


def rest_series(d, s_scale=1.0):
    """The rest part's bursts (torch_power.py --only mix,attention,rest), each GEMM timed: for each rest length, the
    milliseconds at the boost clock each burst bought. A GEMM of t ms counts b (s - t) / (s - b), signed (one slower
    than s gives back), against two references from the same run: s, the GEMM-only steady state (the mix part's
    phase "1": the sustained rate the profile's rates hold at), and b, the boost clock's GEMM (the median of the second
    to sixth GEMMs of the bursts after a full rest, FULL_REST_MS or more). The first GEMM of each burst is left out:
    it runs slower as the GPU wakes from its idle clock (its excess over b, the wake-up, is reported apart). Summed over
    the whole burst (600 ms of work; the clock has not come back to s by its end, and the GEMMs that follow it
    undershoot s on the H100: not a bound either way) and over its first FAST_MS (the fall from the boost clock). s - b
    is about a seventh of s (H100 0.208 of 1.599 ms), so each 1% in s moves the sums by about 20% (s_scale: s times it,
    for that spread).
    (b, s, [(rest ms, idle gaps ms, [ms bought per burst], [of it in the first FAST_MS], [wake-up ms per burst])])."""
    rows = d.get("rest", [])
    mix = {r["gemm_share"]: r for r in d.get("mix", [])}
    if not rows:
        return None, None, []
    if "1" not in mix or not mix["1"].get("gemm_tflops_median"):
        raise SystemExit("power-profile: the rest run has no GEMM-only phase "
                         "(torch_power.py --only mix,attention,rest): no steady state to count the rests against")
    s = gemm_flops(d) / (mix["1"]["gemm_tflops_median"] * 1e12) * 1e3 * s_scale
    for row in rows:
        if len(row.get("idle_ms", [])) != len(row["bursts"]) or any(len(burst) < 6 for burst in row["bursts"]):
            raise SystemExit(f"power-profile: the {row.get('rest_ms')} ms rest's bursts and idle gaps "
                             "do not pair up, or a burst has fewer than six GEMMs")
    firsts = [ms for row in rows for burst, idle in zip(row["bursts"], row["idle_ms"]) if idle >= FULL_REST_MS
              for _, ms in burst[1:6]]
    if not firsts:
        raise SystemExit(f"power-profile: no burst after a GPU idle gap of {FULL_REST_MS:g} ms or more: no boost-clock "
                         "GEMM to count against (torch_power.py --rests with a rest of 200 ms or more)")
    b = statistics.median(firsts)
    if s <= b:
        raise SystemExit(f"power-profile: the steady GEMM ({s:.4f} ms) is no slower than the boost clock's "
                         f"({b:.4f} ms): the limit never held; nothing to read")
    out = []
    for row in rows:
        bought, fast = [], []
        for burst in row["bursts"]:
            bought.append(sum(b * (s - ms) / (s - b) for _, ms in burst[1:]))
            fast.append(sum(b * (s - ms) / (s - b) for start, ms in burst[1:] if start < FAST_MS))
        out.append((row["rest_ms"], row["idle_ms"], bought, fast, [burst[0][1] - b for burst in row["bursts"]]))
    return b, s, out


def rest_headroom(series):
    """What a full rest buys: the medians over the bursts after a GPU idle gap of FULL_REST_MS or more of the ms at the
    boost clock (whole burst, first FAST_MS), with their count, least and most; None without such bursts."""
    full = [(ms, f) for _, idle, bought, fast, _ in series for i, ms, f in zip(idle, bought, fast) if i >= FULL_REST_MS]
    if not full:
        return None
    whole = [ms for ms, _ in full]
    return statistics.median(whole), len(full), min(whole), max(whole), statistics.median(f for _, f in full)


def idle_watts(samples, boost_mhz):
    """The board's power while it waits: the median of the NVML readings of the phase "idle" at the boost clock, those
    within 1 s after a reading of work left out (NVML's power lags the work it follows). None without any."""
    last_work, idle = None, []
    for phase, t, mhz, watts, _ in samples:
        if phase != "idle" and not phase.endswith(" idle"):
            last_work = t
        elif phase == "idle" and mhz >= boost_mhz - 15 and (last_work is None or t - last_work >= 1.0):
            idle.append(watts)
    return statistics.median(idle) if idle else None


def positive(text):
    """An argparse type: a finite number above 0 (watts, a bandwidth share)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def fit_options(parser, required):
    """--profile P --strata BIN [--eager-efficiency 0.58]: what a fit through `strata explain` takes (this script's
    reference clock, headroom-gaps.py's model terms)."""
    parser.add_argument("--profile", metavar="P", required=required)
    parser.add_argument("--strata", metavar="BIN", required=required)
    parser.add_argument("--eager-efficiency", metavar="E", type=positive, default=0.58)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("power", metavar="POWER.json")
    parser.add_argument("--limit-w", metavar="W", type=positive, default=700.0)
    parser.add_argument("--attention-w", metavar="W", type=positive)
    parser.add_argument("--fp8", metavar="FP8.json")
    parser.add_argument("--rest", metavar="REST.json")
    fit_options(parser, required=False)
    args = parser.parse_args()
    if args.profile is not None and args.strata is None:
        parser.error("--profile needs --strata BIN")
    with open(args.power) as f:
        d = json.load(f)
    limit = args.limit_w

    def curve(data):
        mix = {r["gemm_share"]: r for r in data.get("mix", [])}
        need = ("1/4", "1/2", "3/4", "1", "0")
        missing = [n for n in need if n not in mix]
        if missing:
            raise SystemExit(f"power-profile: the run has no mix phase {', '.join(missing)} "
                             "(torch_power.py's mix part)")
        if any("sm_mhz_median" not in mix[n] or "power_w_mean" not in mix[n] for n in need):
            raise SystemExit("power-profile: the run has no NVML readings (clock, power): "
                             "nothing to build a curve from")
        boost = mix["1/4"]
        if boost["sm_mhz_median"] < boost["sm_mhz_max"] - 15:
            raise SystemExit("power-profile: the 1/4 phase was not at the boost clock: no reference rate")
        ref, copy_w = boost["gemm_tflops_median"], mix["0"]["power_w_mean"]
        points = []
        for name in ("1/2", "3/4", "1"):
            r = mix[name]
            if r["sm_mhz_median"] >= boost["sm_mhz_median"] - 10:  # the boost clock: not limited, no point
                continue
            s = r["gemm_time_share"]
            points.append((r["sm_mhz_median"], r["gemm_tflops_median"] / ref,
                           (r["power_w_mean"] - (1 - s) * copy_w) / s, name, s))
        points.sort(key=lambda p: -p[0])
        if len(points) < 2:
            raise SystemExit(f"power-profile: {len(points)} phase(s) below the boost clock: "
                             "a curve needs two")
        for hi, lo in zip(points, points[1:]):
            if not (hi[0] > lo[0] and 1 >= hi[1] > lo[1] and hi[2] > lo[2]):
                raise SystemExit(f"power-profile: the points {hi[3]} and {lo[3]} do not fall together in clock, "
                                 f"speed and watts ({hi[:3]} against {lo[:3]}): a noisy run; measure again")
        if points[-1][2] > limit:
            raise SystemExit(f"power-profile: the slowest point draws {points[-1][2]:.1f} W, "
                             f"above the {limit:g} W limit")
        return boost["sm_mhz_median"], ref, copy_w, points

    boost_mhz, ref, copy_w, points = curve(d)
    att = d.get("attention", {}).get("power_w_mean")
    attention_w = args.attention_w if args.attention_w is not None else att if att else 0.0
    if attention_w <= 0:
        print("power-profile: no attention figure in the file: give --attention-w", file=sys.stderr)
        return 1
    print(f"# calibrate/torch_power.py on {d['device']} ({args.power}): copy-only {copy_w:.1f} W,"
          f" GEMM rate at the boost clock {ref} TF/s ({gemm_label(d)}, 1/4 of the time)")
    print("power:")
    print(f"  limit_w: {limit:g}")
    print(f"  boost_clock_mhz: {boost_mhz:g}")
    print(f"  memory_bound_w: {copy_w:.1f}")
    print(f"  attention_w: {attention_w:.1f}")
    print(f"  reference_clock_mhz: {boost_mhz:g}")
    gemm_boost_w = boost_watts(points, boost_mhz)
    duty = headroom(d, points, boost_mhz)
    rest_file = args.rest
    rd = d
    if rest_file:
        with open(rest_file) as f:
            rd = json.load(f)
        if not rd.get("rest"):
            raise SystemExit(f"power-profile: {rest_file} has no rest part (torch_power.py --only mix,attention,rest)")
        if d.get("rest"):
            print(f"  # (the rest part of {args.power} left aside for {rest_file}'s)")
    b, s, series = rest_series(rd)
    full = rest_headroom(series)  # rest_series refuses a rest part without a full rest
    idle_w = None
    if full:
        med_ms, n, lo, hi, fast_ms = full
        idle_w = idle_watts(rd.get("samples", []), boost_mhz)
        if idle_w is None:
            raise SystemExit("power-profile: no idle readings at the boost clock in the rest run")
        print(f"  # {n} GEMM bursts of 600 ms after a GPU idle gap of {FULL_REST_MS:g} ms or more"
              f"{' (' + rest_file + ')' if rest_file else ''}, each GEMM timed against the run's boost-clock"
              f" ({b:.4f} ms) and steady ({s:.4f} ms) {gemm_label(rd)} GEMM: {med_ms:.0f} ms at the boost clock"
              " (median;"
              f" {lo:.0f}-{hi:.0f}; {fast_ms:.0f} of it in the first {FAST_MS:g} ms), GEMMs there {gemm_boost_w:.0f} W")
        lo_s, hi_s = (rest_headroom(rest_series(rd, k)[2])[0] for k in (0.995, 1.005))
        print(f"  # (with the steady GEMM 0.5% faster or slower: {lo_s:.0f} or {hi_s:.0f} ms)")
        if duty:
            print(f"  # (the duty part's 400 ms bursts{' of ' + args.power if rest_file else ''}, read from NVML's"
                  f" clock: {1e3 * duty[0]:.0f} ms)")
        print(f"  headroom_j: {med_ms / 1e3 * (gemm_boost_w - limit):.1f}")
        print(f"  idle_w: {idle_w:.1f}")
    elif duty:
        mean_s, idle_w, n, lo, hi = duty
        if idle_w is None:
            raise SystemExit("power-profile: no idle readings at the boost clock")
        print(f"  # {n} GEMM bursts of 400 ms after as long an idle gap: {1e3 * mean_s:.0f} ms at the boost clock"
              f" ({1e3 * lo:.0f}-{1e3 * hi:.0f}), GEMMs there {gemm_boost_w:.0f} W")
        print(f"  headroom_j: {mean_s * (gemm_boost_w - limit):.1f}")
        print(f"  idle_w: {idle_w:.1f}")
    # The model's credit for an idle gap: each ms of it buys (limit - idle_w) / (boost_w - limit) ms at the boost
    # clock, up to the full rest's.
    rate = (limit - idle_w) / (gemm_boost_w - limit) if full else None
    for rest_ms, idle, bought, fast, wake in series:
        mean = sum(bought) / len(bought)
        line = (f"  # after {rest_ms:g} ms of rest (idle {', '.join(f'{x:.1f}' for x in idle)} ms): "
                f"{mean:.1f} ms at the boost clock ({', '.join(f'{x:.1f}' for x in bought)}; first {FAST_MS:g} ms"
                f" {', '.join(f'{x:.1f}' for x in fast)}), {mean / 1e3 * (gemm_boost_w - limit):.1f} J;"
                f" first GEMM {', '.join(f'{x:+.2f}' for x in wake)} ms")
        if full:
            line += f"; model {sum(min(full[0], rate * i) for i in idle) / len(idle):.1f} ms"
        print(line)
    print("measured:")

    def show(key, pts):
        print(f"  {key}:")
        for mhz, speed, watts, name, s in pts:
            print(f"    - {{clock_mhz: {mhz:.0f}, speed: {speed:.4f}, watts: {watts:.1f}, "
                  f"note: \"GEMMs {name} of the time ({s:.3f} measured)\"}}")

    show("gemm_power", points)
    if args.fp8:
        with open(args.fp8) as f:
            d8 = json.load(f)
        _, ref8, _, points8 = curve(d8)
        print(f"  # FP8 ({args.fp8}): rate at the boost clock {ref8} TF/s")
        show("gemm_power_fp8", points8)
    if args.profile:
        measured = {r["model"]: r["sustained_ms_per_layer"] for r in d["layers"]}
        ref, res = fit_reference(args.strata, args.profile, measured, args.eager_efficiency, points[-1][0], boost_mhz)
        print(f"# power.reference_clock_mhz fitted to the run's layers at their steady state: {ref}")
        for p, m, name in res:
            print(f"#   {name}: strata {p:.3f} ms, measured {m:.3f} ms ({100 * (p / m - 1):+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
