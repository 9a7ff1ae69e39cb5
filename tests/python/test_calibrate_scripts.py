"""The calibration scripts' pure-Python parts (no GPU, no PyTorch needed): what they compute from what they read."""
import importlib
import json
import os
import sys

import pytest

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "calibrate"))

import torch_sync_gap  # noqa: E402  (imports no torch at module level)


def test_window_breakdown_idle(tmp_path):
    def x(name, ts, dur, cat="kernel"):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}

    events = [
        x("void spin_kernel(long)", 0, 1),            # marker: window 1 from t = 1
        x("gemm", 11, 10),                            # idle 10 before it
        x("memcpy HtoD", 15, 10, "gpu_memcpy"),       # overlaps the gemm: 4 more busy (21..25)
        x("softmax", 30, 5),                          # idle 5
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 100},  # host events do not count
        x("void spin_kernel(long)", 50, 1),           # marker: window 2 from t = 51 (the 15 before it is not idle
        x("bwd", 51, 20),                             # of window 1: its last activity ended at 35)
        x("bwd2", 80, 5),                             # idle 9
        x("void spin_kernel(long)", 100, 1),          # marker: the end
        x("after", 200, 1),                           # after the last marker: no window
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    # Window 1: from 1 to 35 = 34, busy 10 + 4 + 5 = 19, idle 15. Window 2: from 51 to 85 = 34, busy 25, idle 9.
    assert [w["idle"] for w in torch_sync_gap.window_breakdown(str(path))] == [15.0, 9.0]


def test_window_breakdown_skips_the_holding_sleep(tmp_path):
    # The queued steps: a 0.1 s sleep holds the queue, then a marker at each step's start and one at the end.
    def x(name, ts, dur):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}

    events = [x("void spin_kernel(long)", 0, 100_000),   # the holding sleep: not a marker
              x("void spin_kernel(long)", 100_000, 1),    # forward starts at 100001
              x("gemm", 100_003, 10),                     # idle 2 (a launch gap)
              x("void spin_kernel(long)", 100_014, 1),    # backward starts at 100015 (the 1 before: not a window's)
              x("bwd", 100_015, 20),
              x("void spin_kernel(long)", 100_036, 1)]    # the end
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert [w["idle"] for w in torch_sync_gap.window_breakdown(str(path))] == [2.0, 0.0]


def test_window_breakdown_without_markers(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 5}]}))
    assert [w["idle"] for w in torch_sync_gap.window_breakdown(str(path))] == []


def _trace(tmp_path, name, events):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": dur} for n, ts, dur in events]}))
    return str(path)


def test_window_breakdown_lead_and_waits(tmp_path):
    path = _trace(tmp_path, "synced.json", [
        ("void spin_kernel(long)", 0, 1),       # forward starts at 1
        ("sizes copy", 1001, 2),                # lead 1000 (the host's time to its first kernel)
        ("mask", 1005, 10),                     # a launch gap of 2: not a wait
        ("ln", 1065, 5),                        # a gap of 50: the host behind
        ("void spin_kernel(long)", 1070, 1),    # backward starts at 1071
        ("bwd", 1071, 100),                     # no lead
        ("bwd2", 1191, 9),                      # a wait of 20
        ("void spin_kernel(long)", 1200, 1)])
    assert torch_sync_gap.window_breakdown(path) == [
        {"idle": 1052.0, "lead": 1000.0, "waits": 50.0, "activities": 3},
        {"idle": 20.0, "lead": 0.0, "waits": 20.0, "activities": 2}]


def test_direct_summary_subtracts_the_queued_launch_gaps(tmp_path):
    synced = _trace(tmp_path, "synced.json", [
        ("void spin_kernel(long)", 0, 1), ("copy", 301, 4),                     # get_batch: lead 300
        ("void spin_kernel(long)", 405, 1),                                      # the layers start at 406
        ("a", 506, 10), ("b", 517, 10), ("c", 557, 10),                          # lead 100, launch gap 1, wait 30
        ("void spin_kernel(long)", 600, 1), ("d", 801, 10), ("e", 812, 10),      # backward: lead 200, launch gap 1
        ("void spin_kernel(long)", 900, 1)])
    queued = _trace(tmp_path, "queued.json", [
        ("void spin_kernel(long)", 0, 100_000),                                  # the holding sleep
        ("void spin_kernel(long)", 100_000, 1), ("copy", 100_001, 4),
        ("void spin_kernel(long)", 100_005, 1),
        ("a", 100_006, 10), ("b", 100_017, 10), ("c", 100_027, 10),
        ("void spin_kernel(long)", 100_037, 1), ("d", 100_038, 10), ("e", 100_049, 10),
        ("void spin_kernel(long)", 100_059, 1)])
    run = (torch_sync_gap.window_breakdown(synced), torch_sync_gap.window_breakdown(queued))
    out = torch_sync_gap.direct_summary([run, run, run])
    assert out["synced_batch_idle_us"] == 300.0
    assert out["synced_forward_idle_us"] == 131.0 and out["queued_forward_idle_us"] == 1.0
    assert out["synced_forward_lead_us"] == 100.0 and out["synced_forward_waits_us"] == 30.0
    assert out["direct_forward_gap_us"] == 300.0 + 130.0
    assert out["direct_backward_gap_us"] == 200.0 and out["synced_backward_waits_us"] == 0.0
    assert out["forward_kernels"] == 3 and out["backward_kernels"] == 2


def test_direct_summary_reports_missing_markers():
    assert "direct_error" in torch_sync_gap.direct_summary([([{"idle": 1}], [])])
    assert "direct_error" in torch_sync_gap.direct_summary([])


def test_window_timelines_pair_each_kernel_with_its_launch(tmp_path):
    def k(name, ts, dur, corr, cat="kernel"):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr}}

    def launch(ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 3,
                "args": {"correlation": corr}}

    events = [k("void spin_kernel(long)", 0, 1, 1), launch(-5, 1),       # marker: the window starts at 1
              launch(20, 2), k("sm90_xmma_gemm_bf16", 30, 100, 2),       # matrix work
              launch(25, 3), k("vectorized_elementwise_kernel", 130, 4, 3),
              k("Memcpy DtoD", 140, 2, 9, "gpu_memcpy"),                 # no runtime event in the trace
              k("void spin_kernel(long)", 150, 1, 4)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert torch_sync_gap.window_timelines(str(path)) == [
        [[19.0, 29.0, 100.0, "g"], [24.0, 129.0, 4.0, "o"], [None, 139.0, 2.0, "o"]]]


def _power_profile(*args):
    import subprocess
    script = os.path.join(SRC, "scripts", "power-profile.py")
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=True).stdout


def test_power_profile_block_from_the_committed_runs():
    runs = os.path.join(SRC, "calibrate", "results", "2026-11-27c")
    out = _power_profile(os.path.join(runs, "h100-power.json"), "--fp8", os.path.join(runs, "h100-power-fp8.json"))
    lines = out.splitlines()
    assert "  limit_w: 700" in lines and "  boost_clock_mhz: 1980" in lines
    # The 1/2 phase: 687.5 W mean with GEMMs 0.512 of the time and copies at 395.4 W: (687.5 - 0.488 x 395.4) / 0.512.
    with open(os.path.join(runs, "h100-power.json")) as f:
        d = json.load(f)
    mix = {r["gemm_share"]: r for r in d["mix"]}
    half, copy_w = mix["1/2"], mix["0"]["power_w_mean"]
    s = half["gemm_time_share"]
    watts = (half["power_w_mean"] - (1 - s) * copy_w) / s
    assert f"watts: {watts:.1f}" in out
    assert out.count("{clock_mhz:") == 6  # three BF16 points, three FP8
    # The GEMM-only phase is the slowest point, at or under the limit as the profile loader requires.
    last16 = [l for l in lines if "{clock_mhz" in l][2]
    assert "GEMMs 1 of the time" in last16 and float(last16.split("watts: ")[1].split(",")[0]) <= 700


def test_power_blocks_in_the_hopper_profiles_are_the_scripts_output():
    runs = os.path.join(SRC, "calibrate", "results", "2026-11-27c")
    rests = os.path.join(SRC, "calibrate", "results", "2026-11-27d")
    # The curves from session 27's runs; the headroom from session 30's rest runs (a second H100 and H200).
    h100 = ["--fp8", os.path.join(runs, "h100-power-fp8.json"), "--rest", os.path.join(rests, "h100-rest.json")]
    h200 = ["--attention-w", "658.6", "--rest", os.path.join(rests, "h200-rest.json")]
    for profile, run, extra, lines in (("h100-sxm5-80gb", "h100-power.json", h100, 12),
                                       ("h100-sxm5-80gb-calibrated", "h100-power.json", h100, 12),
                                       ("h200-sxm-141gb", "h200-power.json", h200, 9),
                                       ("h200-sxm-141gb-calibrated", "h200-power.json", h200, 9)):
        out = _power_profile(os.path.join(runs, run), *extra)
        with open(os.path.join(SRC, "scenarios", "devices", profile + ".yaml")) as f:
            text = f.read().splitlines()
        checked = 0
        for line in out.splitlines():
            if line.startswith("    - {clock_mhz") or line.strip().startswith(("memory_bound_w", "attention_w", "limit_w",
                                                                                  "boost_clock_mhz", "headroom_j", "idle_w")):
                assert line in text, (profile, line)
                checked += 1
        assert checked == lines, (profile, checked)  # six keys and the curves' points
        # The comment's figures are the script's: the bursts' median and range, and the GEMMs' watts at the boost clock.
        note = next(l for l in out.splitlines() if "GEMM bursts of 600 ms" in l)
        ms = note.split(": ")[1].split(" ms at the boost clock")[0]
        spread = note.split("(median; ")[1].split(";")[0]
        watts = note.split("GEMMs there ")[1].split(" W")[0]
        comment = " ".join(l.strip("# ") for l in text if l.startswith("  #"))
        assert f"{ms} ms at the boost clock (median; {spread})" in comment, (profile, ms, spread)
        assert f"GEMMs there {watts} W" in comment, (profile, watts)


def test_power_profile_counts_the_rests_with_the_runs_own_gemm_flops(tmp_path):
    # The steady GEMM's time comes from the run's saved flops (torch_power.py saves gemm_flops since session 31); a run
    # without them is an 8192^3 run. Saved as 8192^3 the reading is the same; saved 1% larger, s is 1% longer and
    # every burst counts for more.
    runs = os.path.join(SRC, "calibrate", "results", "2026-11-27c")
    rest = os.path.join(SRC, "calibrate", "results", "2026-11-27d", "h100-rest.json")
    with open(rest) as f:
        d = json.load(f)
    base = _power_profile(os.path.join(runs, "h100-power.json"), "--rest", rest)

    def headroom(flops):
        d["gemm_flops"] = flops
        run = tmp_path / "rest.json"
        run.write_text(json.dumps(d))
        out = _power_profile(os.path.join(runs, "h100-power.json"), "--rest", str(run))
        return out, float(next(l for l in out.splitlines() if "headroom_j:" in l).split(":")[1])

    same, j = headroom(2 * 8192**3)
    assert same.replace(str(tmp_path / "rest.json"), rest) == base
    more, j_more = headroom(2 * 8192**3 * 1.01)
    assert j_more > j * 1.1  # 46.0 -> 55.4 J: s - b is a seventh of s, and most GEMMs run near s
    assert " 8192^3 GEMM:" in same and " 8192^3 GEMM:" not in more and "1.111e+12-flop GEMM:" in more
    pp = _headroom_gaps()._power_profile()  # the labels: n^3 where the flops are 2 n^3
    assert [pp.gemm_label({"gemm_flops": f}) for f in (2 * 4096**3, 2 * 8192**3, 1e12)] == ["4096^3", "8192^3",
                                                                                          "1e+12-flop"]
    assert pp.gemm_label({}) == "8192^3"  # a run from before session 31


def test_power_profile_headroom_from_the_bursts_after_idle_gaps():
    # 8 bursts of 400 ms GEMMs (the first, after the mix, left out) from the boost clock towards the GEMM-only clock:
    # their seconds at the boost clock times what GEMMs draw there above 700 W.
    runs = os.path.join(SRC, "calibrate", "results", "2026-11-27c")
    out = _power_profile(os.path.join(runs, "h100-power.json"))
    note = next(l for l in out.splitlines() if "GEMM bursts of 400 ms" in l)
    assert note.strip().startswith("# 8 GEMM bursts")
    boosted_ms = float(note.split(": ")[1].split(" ms")[0])
    boost_w = float(note.split("GEMMs there ")[1].split(" W")[0])
    joules = float(next(l for l in out.splitlines() if l.strip().startswith("headroom_j:")).split(": ")[1])
    assert 100 <= boosted_ms <= 200 and 950 <= boost_w <= 1050
    assert abs(joules - boosted_ms / 1e3 * (boost_w - 700)) < 0.5
    # A run without the duty part (the H200's) gives no headroom lines.
    assert "headroom_j" not in _power_profile(os.path.join(runs, "h200-power.json"), "--attention-w", "658.6")


def test_power_profile_refuses_a_run_without_readings(tmp_path):
    import subprocess
    run = {"device": "x", "mix": [{"gemm_share": n, "gemm_tflops_median": 700.0, "gemm_time_share": 0.5}
                                  for n in ("1/4", "1/2", "3/4", "1", "0")]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    r = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "power-profile.py"), str(path)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "no NVML readings" in (r.stdout + r.stderr)


def test_power_profile_reads_each_rest_from_the_bursts_own_gemms(tmp_path):
    # The rest part (torch_power.py --only mix,attention,rest), each GEMM timed. References from the same run: s, the
    # GEMM-only steady state (the mix part's phase "1": 2 x 8192^3 flops at its rate), and b, the boost clock's GEMM
    # (the median of the second to sixth GEMMs of the bursts after a full rest, 150 ms or more). A burst whose first
    # GEMM woke the GPU (0.3 ms over b), whose next k ran at b and the rest at s, bought k x b ms at the boost clock; one
    # halfway between, b / 2; one as far above s as b is below it (the limiter's undershoot), -b.
    import importlib.util
    spec = importlib.util.spec_from_file_location("power_profile", os.path.join(SRC, "scripts", "power-profile.py"))
    pp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pp)
    b = 1.4
    rate = 700.0  # TF/s: s = 2 x 8192^3 / 700e12 s
    s = 2 * 8192 ** 3 / (rate * 1e12) * 1e3
    def burst(k, halfway=0, under=0):
        times = [b + 0.3] + [b] * k + [(b + s) / 2] * halfway + [2 * s - b] * under
        times += [s] * (400 - len(times))
        out, t = [], 0.0
        for ms in times:  # (start within the burst, length)
            out.append((t, ms))
            t += ms
        return out
    run = {"mix": [{"gemm_share": "1", "gemm_tflops_median": rate}], "rest": [
        {"rest_ms": 200, "idle_ms": [200.1, 200.3], "settle": [], "bursts": [burst(10), burst(20)]},
        {"rest_ms": 2000, "idle_ms": [2000.2], "settle": [], "bursts": [burst(100, halfway=2, under=3)]},
        {"rest_ms": 5, "idle_ms": [7.0] * 4, "settle": [], "bursts": [burst(0)] * 4}]}
    # The short rests' bursts (at s from their second GEMM, the majority of the 2nd-6th GEMMs) do not enter b.
    b_got, s_got, got = pp.rest_series(run)
    assert abs(b_got - b) < 1e-12 and abs(s_got - s) < 1e-12
    assert [r[0] for r in got] == [200, 2000, 5]
    assert abs(got[0][2][0] - 10 * b) < 1e-9 and abs(got[0][2][1] - 20 * b) < 1e-9
    assert abs(got[1][2][0] - (100 * b + b - 3 * b)) < 1e-9
    # The first 100 ms: the 100-GEMM burst's boost GEMMs that start within it (1.7 ms of wake-up, then 1.4 ms each:
    # the 71 starting at 1.7, 3.1, ..., 99.7 ms).
    assert abs(got[1][3][0] - 71 * b) < 1e-9
    assert all(abs(w - 0.3) < 1e-9 for r in got for w in r[4])
    # A full rest: the median of 14, 28 and 137.2 ms (odd count) and of 14 and 28 (even: their mean); the 7 ms gap is not one.
    median, n, lo, hi, fast = pp.rest_headroom(got)
    assert n == 3 and abs(median - 20 * b) < 1e-9 and abs(lo - 10 * b) < 1e-9 and abs(hi - 98 * b) < 1e-9
    assert abs(pp.rest_headroom(got[:1])[0] - 15 * b) < 1e-9
    assert pp.rest_headroom(got[2:]) is None and all(abs(x) < 1e-9 for x in got[2][2])
    for bad in (dict(run["rest"][0], idle_ms=[200.1]), dict(run["rest"][0], bursts=[burst(10)[:5], burst(20)])):
        try:
            pp.rest_series(dict(run, rest=[bad]))
            assert False, "accepted"
        except SystemExit as e:
            assert "do not pair up" in str(e)
    # The idle power: the idle readings at the boost clock, those within 1 s after work left out (NVML's power lags).
    samples = [("mix 1", 0.0, 1400, 700.0, 60), ("idle", 0.5, 1980, 400.0, 60), ("idle", 0.9, 1980, 300.0, 60),
               ("idle", 1.2, 1980, 130.0, 60), ("idle", 1.5, 1980, 126.0, 60), ("idle", 2.0, 1400, 120.0, 60),
               ("rest 50 ms idle", 2.1, 1980, 200.0, 60), ("idle", 2.5, 1980, 128.0, 60)]
    assert pp.idle_watts(samples, 1980) == 128.0
    assert pp.idle_watts(samples[:3], 1980) is None
    # Through the script, with the committed H100 run's mix for the curve: a line per rest, joules above the limit.
    with open(os.path.join(SRC, "calibrate", "results", "2026-11-27c", "h100-power.json")) as f:
        d = json.load(f)
    d.update(run, mix=d["mix"])  # the run's own mix: its GEMM-only phase is s
    s = 2 * 8192 ** 3 / (next(r for r in d["mix"] if r["gemm_share"] == "1")["gemm_tflops_median"] * 1e12) * 1e3
    def burst2(k):
        return [(i * b, b + 0.3 if i == 0 else b if i <= k else s) for i in range(400)]
    d["rest"] = [{"rest_ms": 200, "idle_ms": [200.1, 200.3], "settle": [], "bursts": [burst2(10), burst2(20)]},
                 {"rest_ms": 5, "idle_ms": [7.0], "settle": [], "bursts": [burst2(4)]}]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(d))
    out = _power_profile(str(path))
    lines = [l for l in out.splitlines() if "ms of rest" in l]
    assert len(lines) == 2 and "after 200 ms of rest (idle 200.1, 200.3 ms): 21.0 ms at the boost clock (14.0, 28.0;" in lines[0]
    assert "first GEMM +0.30, +0.30 ms" in lines[0]
    # The headroom from the rest part (the run's duty part only noted): the full rests' median, 21 ms, in joules above
    # the limit; the 5 ms row's model credit: 7 ms of idle at (700 - idle_w) / (boost_w - 700) per ms.
    note = next(l for l in out.splitlines() if "GEMM bursts of 600 ms after a GPU idle gap of 150 ms or more" in l)
    assert note.strip().startswith("# 2 GEMM bursts") and "21 ms at the boost clock (median; 14-28;" in note
    boost_w = float(note.split("GEMMs there ")[1].split(" W")[0])
    headroom_j = float(next(l for l in out.splitlines() if l.strip().startswith("headroom_j:")).split(": ")[1])
    idle_w = float(next(l for l in out.splitlines() if l.strip().startswith("idle_w:")).split(": ")[1])
    assert abs(headroom_j - 0.021 * (boost_w - 700)) < 0.06 and "read from NVML's clock" in out
    model = float(lines[1].split("model ")[1].split(" ms")[0])
    assert abs(model - 7.0 * (700 - idle_w) / (boost_w - 700)) < 0.06
    # --rest: the rests from another run, the curve this one's; a rest run without a full rest is refused.
    rest_only = tmp_path / "rest.json"
    rest_only.write_text(json.dumps({k: d[k] for k in ("mix", "rest", "samples")}))
    runs = os.path.join(SRC, "calibrate", "results", "2026-11-27c")
    out2 = _power_profile(os.path.join(runs, "h100-power.json"), "--rest", str(rest_only))
    assert f"headroom_j: {headroom_j:.1f}" in out2 and "rest.json), each GEMM timed" in out2
    rest_only.write_text(json.dumps({"mix": d["mix"], "rest": d["rest"][1:], "samples": d["samples"]}))
    import subprocess
    r = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "power-profile.py"),
                        os.path.join(runs, "h100-power.json"), "--rest", str(rest_only)], capture_output=True, text=True)
    assert r.returncode != 0 and "no burst after a GPU idle gap of 150 ms or more" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "power-profile.py"),
                        os.path.join(runs, "h100-power.json"), "--rest"], capture_output=True, text=True)
    assert r.returncode == 2 and "argument --rest: expected one argument" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "power-profile.py"), os.path.join(runs, "h100-power.json"),
                        "--rest", os.path.join(runs, "h100-power-2.json")], capture_output=True, text=True)
    assert r.returncode != 0 and "has no rest part" in r.stderr
    # A run of the mix and the rest parts alone has no attention figure: the script asks for one (so the documented run
    # is --only mix,attention,rest), and reads the rests once it has it.
    alone = {k: v for k, v in d.items() if k not in ("attention", "duty", "layers")}
    path.write_text(json.dumps(alone))
    script = os.path.join(SRC, "scripts", "power-profile.py")
    r = subprocess.run([sys.executable, script, str(path)], capture_output=True, text=True)
    assert r.returncode != 0 and "--attention-w" in r.stderr
    assert len([l for l in _power_profile(str(path), "--attention-w", "658.6").splitlines() if "ms of rest" in l]) == 2
    # A steady GEMM no slower than the boost clock's: the limit never held, and the script says so; a run without the
    # mix part's GEMM-only phase has no steady state.
    bad = dict(run, mix=[{"gemm_share": "1", "gemm_tflops_median": 2 * 8192 ** 3 / (b * 1e-3) / 1e12 * 1.01}])
    try:
        pp.rest_series(bad)
        assert False, "accepted"
    except SystemExit as e:
        assert "the limit never held" in str(e)
    try:
        pp.rest_series(dict(run, mix=[]))
        assert False, "accepted"
    except SystemExit as e:
        assert "no GEMM-only phase" in str(e)


def _headroom_gaps():
    import importlib.util
    spec = importlib.util.spec_from_file_location("headroom_gaps", os.path.join(SRC, "scripts", "headroom-gaps.py"))
    hg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hg)
    return hg


def test_headroom_gaps_compares_each_gap_with_the_model():
    # The model's saving after an idle gap: the accrual times the idle, capped by the full rest's saving and by the
    # step's own saving at the boost clock; the measured one: the back-to-back step less the step after the gap.
    hg = _headroom_gaps()
    line = ("  after rest (power.headroom_j, idle_w): 8.8% less time at the boost clock, a full rest saves up to 13.3 ms; "
            "each ms idle between units gives back 0.31 ms (in the simulation)")
    terms = hg.parse_terms("x\n" + line + "\n")
    assert all(abs(a - b) < 1e-12 for a, b in zip(terms, (0.088, 13.3, 0.31)))
    rows = [{"model": "177B", "gap_ms": None, "step_ms_median": 43.0, "idle_ms_median": None},
            {"model": "177B", "gap_ms": 2, "step_ms_median": 42.6, "idle_ms_median": 2.4},
            {"model": "177B", "gap_ms": 50, "step_ms_median": 40.1, "idle_ms_median": 50.3}]
    got = hg.compare(rows, {"177B": terms})
    assert [g[1] for g in got] == [2, 50]
    assert abs(got[0][4] - 0.4) < 1e-9 and abs(got[0][5] - 0.31 * 2.4) < 1e-9      # the accrual binds
    assert abs(got[1][4] - 2.9) < 1e-9 and abs(got[1][5] - 0.088 * 43.0) < 1e-9    # the step's own saving binds
    assert abs(hg.model_saving((0.5, 13.3, 0.31), 100.0, 43.0) - 13.3) < 1e-9     # the full rest binds
    for bad, what in ((rows[1:], "no back-to-back series"), (rows, None)):
        try:
            hg.compare(bad, {} if what is None else {"177B": terms})
            assert False, "accepted"
        except SystemExit as e:
            assert (what or "no model terms") in str(e)
    # With a gap-0 series (waited for, no sleep: 0.3 ms idle, 42.9 ms a step) the savings count from it, the model's
    # for its idle taken off: the 50 ms gap saved 2.8 ms, the model 0.088 x 43 - 0.31 x 0.3.
    control = {"model": "177B", "gap_ms": 0, "step_ms_median": 42.9, "idle_ms_median": 0.3}
    got = hg.compare(rows + [control], {"177B": terms})
    assert [g[1] for g in got] == [2, 50]
    assert abs(got[1][4] - 2.8) < 1e-9 and abs(got[1][5] - (0.088 * 43.0 - 0.31 * 0.3)) < 1e-9
    # A spin run (--gap-fill spin) counts from the back-to-back step: its steps queue behind the spin, with no launch
    # lead-in, so its gap-0 series (the lead-in alone) is no control and is not compared.
    spun = [dict(r, gap_fill="spin") for r in rows + [control]]
    got = hg.compare(spun, {"177B": terms})
    assert [g[1] for g in got] == [2, 50]
    assert abs(got[1][4] - 2.9) < 1e-9 and abs(got[1][5] - 0.088 * 43.0) < 1e-9
    try:
        hg.parse_terms("no such line")
        assert False, "accepted"
    except SystemExit as e:
        assert "no headroom line" in str(e)


def test_headroom_gaps_through_strata(tmp_path):
    # End to end on the shipped H100 profile: the terms come from strata explain of the rows' layers, and each printed
    # model saving follows from them and the run's figures.
    import subprocess
    strata = os.environ.get("STRATA_BIN", os.path.join(SRC, "build", "strata"))
    if not os.path.exists(strata):
        import pytest
        pytest.skip("no strata binary")
    run = {"gaps": [{"model": "177B", "gap_ms": None, "step_ms_median": 43.0, "idle_ms_median": None},
                    {"model": "177B", "gap_ms": 5, "step_ms_median": 42.0, "idle_ms_median": 5.6},
                    {"model": "1.7B", "gap_ms": None, "step_ms_median": 12.5, "idle_ms_median": None},
                    {"model": "1.7B", "gap_ms": 50, "step_ms_median": 11.9, "idle_ms_median": 50.2}]}
    path = tmp_path / "gaps.json"
    path.write_text(json.dumps(run))
    out = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "headroom-gaps.py"), str(path), "--profile",
                          os.path.join(SRC, "scenarios", "devices", "h100-sxm5-80gb.yaml"), "--strata", strata],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0].endswith("; gaps idle)")  # rows without gap_fill: a run from before --gap-fill
    terms = {}
    for l in out.splitlines():
        if l.startswith("# 177B:") or l.startswith("# 1.7B:"):
            f = l.split()
            terms[f[1][:-1]] = (float(f[5][:-1]) / 100, float(l.split("up to ")[1].split(" ms")[0]),
                                float(l.split("rest, ")[1].split(" ms")[0]))
    assert set(terms) == {"177B", "1.7B"} and all(0 < t[0] < 0.3 and t[1] > 0 and t[2] > 0 for t in terms.values())
    table = {l.split()[0] + " " + l.split()[1]: l.split() for l in out.splitlines() if l.startswith(("177B ", "1.7B "))}
    hg = _headroom_gaps()
    for key, idle, t0 in (("177B 5", 5.6, 43.0), ("1.7B 50", 50.2, 12.5)):
        want = hg.model_saving(terms[key.split()[0]], idle, t0)
        assert abs(float(table[key][5]) - want) < 0.002, (key, table[key], want)


class _FakeTorch:
    """Enough of torch for calibrate/torch_power.py's control flow: tensors that do nothing, and CUDA events on a GPU
    clock that each kernel advances by a fixed time (GEMM 1.4 ms, copy 1.0 ms, layer forward 3 ms, backward 6 ms)."""

    def __init__(self):
        import types
        fake = self
        self.clock_ms = 0.0
        self.__version__ = "fake"
        self.bfloat16, self.float32, self.uint8, self.float8_e4m3fn = "bf16", "fp32", "u8", "fp8"

        class Tensor:
            def __init__(self, n=1 << 20):
                self.n = n

            def numel(self):
                return self.n

            def to(self, *a, **k):
                return self

            def t(self):
                return self

            def contiguous(self):
                return self

            def copy_(self, src):
                fake.clock_ms += 1.0
                return self

            def backward(self, grad=None):
                fake.clock_ms += 6.0

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = fake.clock_ms

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.t - self.t

        class Stack:
            def __init__(self, *mods):
                pass

            def to(self, *a, **k):
                return self

            def __call__(self, x):
                fake.clock_ms += 3.0
                return Tensor()

        self.Tensor = Tensor
        def sleep_cycles(cycles):  # torch.cuda._sleep: a spin kernel, here 1,000 cycles per fake ms
            fake.clock_ms += cycles / 1000.0

        self.cuda = types.SimpleNamespace(
            Event=Event, synchronize=lambda: None, empty_cache=lambda: None, _sleep=sleep_cycles,
            get_device_properties=lambda i: types.SimpleNamespace(name="Fake GPU"), is_available=lambda: True)
        self.nn = types.ModuleType("torch.nn")
        self.nn.Sequential = Stack

    def device(self, name):
        return name

    def randn(self, *shape, **k):
        return self.Tensor()

    def empty(self, *shape, **k):
        return self.Tensor(shape[0] if len(shape) == 1 else 1 << 20)

    def empty_like(self, x):
        return self.Tensor(x.n)

    def ones(self, *shape, **k):
        return self.Tensor()

    def manual_seed(self, s):
        pass

    def mm(self, a, b, out=None):
        self.clock_ms += 1.4

    def _scaled_mm(self, *a, **k):
        self.clock_ms += 0.8


def test_torch_power_runs_every_part_on_a_fake_gpu(tmp_path, monkeypatch):
    # Every part of torch_power.py (the rest and gaps parts too) runs to its end and writes what power-profile.py and
    # headroom-gaps.py read, on a fake torch whose kernels advance a GPU clock: a GPU lease is not spent on a typo.
    import types
    import torch_power
    fake = _FakeTorch()
    module = types.ModuleType("torch")
    module.nn = fake.nn
    monkeypatch.setitem(sys.modules, "torch", module)
    monkeypatch.setitem(sys.modules, "torch.nn", fake.nn)
    monkeypatch.setattr(torch_power, "cuda_torch", lambda tool: fake)
    monkeypatch.setattr(torch_power, "gpt_layer", lambda torch, h, heads, t: None)
    slept = []
    monkeypatch.setattr(torch_power.time, "sleep", slept.append)
    monkeypatch.setattr(torch_power.Sampler, "start", lambda self: None)  # no NVML thread spinning without sleeps
    out = tmp_path / "power.json"
    for bad in (["--rests", "0,5"], ["--rests", "a"], ["--rests"], ["--gaps", "-1"], ["--gaps", "x,2"], ["--only", "nope"]):
        assert _exit_status(monkeypatch, torch_power, str(out), *bad) == 2, bad
    monkeypatch.setattr(sys, "argv", ["torch_power.py", str(out), "--only", "mix,duty,rest,attention,layers,gaps",
                                      "--mix-s", "0.02", "--layer-s", "0.02", "--rests", "5,50", "--gaps", "0,10"])
    rc = torch_power.main()
    assert rc == 0
    d = json.loads(out.read_text())
    assert [r["gemm_share"] for r in d["mix"]] == ["1/4", "1/2", "3/4", "1", "0", "1/2 again"]
    assert [r["burst_ms"] for r in d["duty"]] == [5, 25, 100, 400]
    assert [r["rest_ms"] for r in d["rest"]] == [5.0, 50.0] and all(len(r["bursts"]) == 3 for r in d["rest"])
    assert abs(d["gemm_cold_ms"] - 1.4) < 1e-9 and d["gemm_flops"] == 2.0 * 8192**3  # power-profile.py reads it
    # gaps: per shape the back-to-back series, then one per gap, each step 9 ms on the fake clock.
    assert [(r["model"], r["gap_ms"]) for r in d["gaps"]] == [("177B", None), ("177B", 0.0), ("177B", 10.0),
                                                            ("1.7B", None), ("1.7B", 0.0), ("1.7B", 10.0)]
    assert all(abs(r["step_ms_median"] - 9.0) < 1e-9 for r in d["gaps"])
    assert all(r["idle_ms_median"] == 0.0 for r in d["gaps"] if r["gap_ms"] is not None)
    assert "attention" not in d  # the fake has no torch.nn.functional: the part says so and the others stand
    assert len(d["layers"]) == 5
    assert all(r["gap_fill"] == "idle" for r in d["gaps"])
    assert 0.01 in slept  # the idle fill: the host sleeps each 10 ms gap
    # --gap-fill spin: each gap a spin kernel on the GPU (its rate measured first: 1,000 cycles per fake ms), so the
    # GPU's wait before each step is the gap itself; a bad fill is refused before any GPU work.
    for bad in (["--gap-fill", "busy"], ["--gap-fill"]):
        assert _exit_status(monkeypatch, torch_power, str(out), "--only", "gaps", *bad) == 2, bad
    monkeypatch.setattr(sys, "argv", ["torch_power.py", str(out), "--only", "gaps", "--mix-s", "0.02", "--gaps",
                                      "0,10", "--gap-fill", "spin"])
    slept.clear()
    assert torch_power.main() == 0
    assert 0.01 not in slept and slept  # only the pauses before each series: the gaps are spent on the GPU
    d = json.loads(out.read_text())
    assert d["spin_cycles_per_ms"] == 1000 and all(r["gap_fill"] == "spin" for r in d["gaps"])
    assert [r["idle_ms_median"] for r in d["gaps"]] == [0.0, 0.0, 10.0, 0.0, 0.0, 10.0]


def test_torch_bench_times_attention_with_and_without_dropout(tmp_path, monkeypatch):
    # torch_bench.py --attention-grid --dropout P: every fused-attention shape timed at p = 0 and at p = P in the same
    # run, each record saying which (what a profile's flash_attention.dropout_time_factor is), on a fake torch whose
    # attention advances the GPU clock by 1.0 ms without dropout and 1.1 ms with it. A bad P is refused before any GPU.
    import contextlib
    import types
    import torch_bench
    fake = _FakeTorch()
    calls = []

    def sdpa(q, k, v, dropout_p=0.0, is_causal=False):
        calls.append(dropout_p)
        fake.clock_ms += 1.1 if dropout_p > 0 else 1.0
        return fake.Tensor()

    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="flash", CUDNN_ATTENTION="cudnn")
    attention.sdpa_kernel = lambda backends: contextlib.nullcontext()
    functional = types.ModuleType("torch.nn.functional")
    functional.scaled_dot_product_attention = sdpa
    fake.nn.attention, fake.nn.functional = attention, functional
    fake.randn_like = lambda x: fake.Tensor()
    fake.version = types.SimpleNamespace(cuda="fake")
    fake.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 0))
    fake.cuda.get_device_properties = lambda i: types.SimpleNamespace(name="Fake GPU", multi_processor_count=132,
                                                                       total_memory=80 << 30)
    module = types.ModuleType("torch")
    module.nn = fake.nn
    for name, mod in (("torch", module), ("torch.nn", fake.nn), ("torch.nn.attention", attention),
                      ("torch.nn.functional", functional)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch_bench, "cuda_torch", lambda tool: fake)
    out = tmp_path / "bench.json"
    for bad in (["--dropout"], ["--dropout", "0"], ["--dropout", "1.5"], ["--dropout", "x"], ["--dropout=1"],
                ["--dropout", "--quick"]):
        assert _exit_status(monkeypatch, torch_bench, str(out), "--attention-grid", *bad) == 2, bad
    assert not calls and not out.exists()
    monkeypatch.setattr(sys, "argv", ["torch_bench.py", str(out), "--attention-grid", "--quick", "--dropout", "0.1"])
    assert torch_bench.main() == 0
    recs = json.loads(out.read_text())["attention"]
    assert [(r["backend"], r["dropout_p"]) for r in recs] == [("flash", 0.0), ("flash", 0.1), ("cudnn", 0.0),
                                                              ("cudnn", 0.1)]
    assert all("error" not in r for r in recs)
    for plain, drop in ((recs[0], recs[1]), (recs[2], recs[3])):
        assert abs(drop["fwd_s"] / plain["fwd_s"] - 1.1) < 1e-9
    # --dropout=P is --dropout P: the same kernels run, the same records written.
    spaced = list(calls)
    calls.clear()
    monkeypatch.setattr(sys, "argv", ["torch_bench.py", str(out), "--attention-grid", "--quick", "--dropout=0.1"])
    assert torch_bench.main() == 0
    assert calls == spaced
    assert [(r["backend"], r["dropout_p"]) for r in json.loads(out.read_text())["attention"]] == \
        [(r["backend"], r["dropout_p"]) for r in recs]
    # Without --dropout: p = 0 only, as before.
    monkeypatch.setattr(sys, "argv", ["torch_bench.py", str(out), "--attention-grid", "--quick"])
    assert torch_bench.main() == 0
    assert [r["dropout_p"] for r in json.loads(out.read_text())["attention"]] == [0.0, 0.0]


def _exit_status(monkeypatch, module, *argv):
    """main()'s exit status with the command line argv: what it returns, or argparse's exit."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    try:
        return module.main()
    except SystemExit as e:
        return e.code


def _no_gpu(tool):
    raise AssertionError(f"{tool} went on to the GPU")


CALIBRATE_SCRIPTS = ("torch_bench", "torch_power", "torch_sync_gap", "torch_tp_overlap", "torch_elementwise",
                     "torch_host", "torch_gpt_step", "megatron_step")
# A mistyped option, an unknown one, a second output file (every script); an abbreviation and a bad value of each
# checked option.
REFUSED = [(name, bad) for name in CALIBRATE_SCRIPTS for bad in (["--atention-grid"], ["--quik"], ["OTHER.json"])] + [
    ("torch_bench", ["--attention"]), ("torch_bench", ["--dropout", "0"]), ("torch_bench", ["--dropout", "1"]),
    ("torch_bench", ["--dropout", "nan"]), ("torch_bench", ["--dropout"]), ("torch_bench", ["--quick=1"]),
    ("torch_power", ["--only", "mix,nope"]), ("torch_power", ["--only", ""]), ("torch_power", ["--only"]),
    ("torch_power", ["--mix-s", "0"]), ("torch_power", ["--mix-s", "x"]), ("torch_power", ["--layer-s", "-3"]),
    ("torch_power", ["--layer-s", "inf"]), ("torch_power", ["--gaps", "0,60001"]), ("torch_power", ["--gaps", ""]),
    ("torch_power", ["--rests", "0"]), ("torch_power", ["--rests", "5,x"]), ("torch_power", ["--gap-fill", "busy"]),
    ("torch_power", ["--gap-fill"]), ("torch_power", ["--fp8=yes"]), ("torch_power", ["--rest", "5"]),
    ("torch_sync_gap", ["--repeats", "0"]), ("torch_sync_gap", ["--repeats", "2.5"]), ("torch_sync_gap", ["--repeats"]),
    ("torch_sync_gap", ["--sync"]),
    ("torch_tp_overlap", ["--rows", "-1"]), ("torch_tp_overlap", ["--rows", "x"]), ("torch_tp_overlap", ["--rows"]),
    ("torch_tp_overlap", ["--sweeps"]),
]


@pytest.mark.parametrize("name, bad", REFUSED)
def test_calibrate_scripts_refuse_bad_options_before_any_gpu_work(tmp_path, monkeypatch, capsys, name, bad):
    module = importlib.import_module(name)
    monkeypatch.setattr(module, "cuda_torch", _no_gpu)
    out = tmp_path / "out.json"
    assert _exit_status(monkeypatch, module, str(out), *bad) == 2
    assert f"{name}.py: error: " in capsys.readouterr().err and not out.exists()


# The documented runs, and every option at once with --opt=value spellings: read, then exit 4 without a CUDA device.
ACCEPTED = [(name, []) for name in CALIBRATE_SCRIPTS] + [
    ("torch_bench", ["--attention-grid", "--dropout", "0.1"]), ("torch_bench", ["--quick", "--dropout=0.5"]),
    ("torch_power", ["--only", "mix,attention,rest", "--mix-s", "4"]), ("torch_power", ["--fp8", "--only", "mix"]),
    ("torch_power", ["--only", "gaps", "--mix-s", "4", "--gaps", "0,2,5,10,20,50,100", "--gap-fill", "spin"]),
    ("torch_power", ["--quick", "--fp8", "--only=mix,duty,rest,attention,layers,gaps", "--mix-s=0.5", "--layer-s=1",
                     "--gaps=0", "--gap-fill=idle", "--rests=2,60000"]),
    ("torch_sync_gap", ["--timeline"]),
    ("torch_sync_gap", ["--repeats=1", "--sc21", "--synced-first", "--prelude", "--no-direct", "--timeline"]),
    ("torch_tp_overlap", ["--rows", "0"]), ("torch_tp_overlap", ["--sweep"]), ("torch_tp_overlap", ["--kinds"]),
    ("torch_tp_overlap", ["--rows=9", "--sweep", "--kinds"]),
]


@pytest.mark.parametrize("name, argv", ACCEPTED)
def test_calibrate_scripts_exit_4_without_a_gpu(tmp_path, monkeypatch, name, argv):
    module = importlib.import_module(name)
    asked = []
    monkeypatch.setattr(module, "cuda_torch", asked.append)  # None: no CUDA device
    assert _exit_status(monkeypatch, module, str(tmp_path / "out.json"), *argv) == 4 and asked == [name]


@pytest.mark.parametrize("name", CALIBRATE_SCRIPTS)
def test_calibrate_scripts_usage_and_help(monkeypatch, capsys, name):
    module = importlib.import_module(name)
    monkeypatch.setattr(module, "cuda_torch", _no_gpu)
    assert _exit_status(monkeypatch, module) == 2  # no output file: the usage, refused
    assert capsys.readouterr().err.startswith(f"usage: {name}.py ")
    assert _exit_status(monkeypatch, module, "--help") == 0
    assert module.__doc__.strip() in capsys.readouterr().out  # the docstring as written


@pytest.mark.parametrize("script, args", [
    ("power-profile.py", ["--limit-w", "0"]), ("power-profile.py", ["--limit-w", "nan"]),
    ("power-profile.py", ["--attention-w", "-5"]), ("power-profile.py", ["--eager-efficiency", "inf"]),
    ("power-profile.py", ["--limit", "700"]),  # abbreviations are refused
    ("headroom-gaps.py", []),  # --profile and --strata are required
    ("headroom-gaps.py", ["--profile", "p.yaml", "--strata", "strata", "--eager-efficiency", "0"]),
])
def test_power_scripts_refuse_bad_options_with_exit_2(script, args):
    import subprocess
    runs = os.path.join(SRC, "calibrate", "results", "2026-11-27c")
    p = subprocess.run([sys.executable, os.path.join(SRC, "scripts", script), os.path.join(runs, "h100-power.json"),
                        *args], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert "error:" in p.stderr
