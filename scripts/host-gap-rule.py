#!/usr/bin/env python3
"""The host gaps the paper's scenarios carry (execution.host_gap_forward_us / host_gap_backward_us), recomputed from
the measurements by the rule written in scenarios/paper/table5.yaml (session 25):

  forward  = median over Table 5's four shapes x the runs of DIRECT of the GPU's idle time in the synchronised
             layers' forward less the same queued steps' idle (their launch gaps), read from the GPU's own timeline
             (calibrate/torch_sync_gap.py's direct figures; each run's median synchronised idle less its median queued
             idle, as the files keep no per-repeat figure for the layers alone), plus get_batch's time per call on A100
             runs of Megatron-LM's own timer (A100_GET_BATCH);
  backward = the median over the same of the backward's direct gap (direct_backward_gap_us: each run's median of
             the synchronised idle less the queued idle, paired repeat by repeat);
per recompute mode; the selective rows take the no-recompute figures; from each, what an A100 hides of it:

  hidden   = median over Table 5's four shapes x the runs of TIMELINES of the GPU's idle time in the synchronised
             layers' forward (backward) as the H200 ran it less the same steps replayed with the A100's kernel times
             (replay(): each activity no earlier than the H200 started it, each matrix kernel's time x
             a100_scale()["gemm"], every other activity's x a100_scale()["other"]; a slower GPU lets the host get
             ahead where the H200 waited for it).

Values rounded to 10 us. Sessions 22-23 took the forward and backward from the difference method (a step's wall time
less the GPU time of the same work queued ahead: WITH_GET_BATCH, FIRST_LEASE), which also counts the synchronised
steps' kernels running longer than the queued ones (a GPU that has just slept runs faster): printed beside, not used.

usage: scripts/host-gap-rule.py        prints the figures and the values
"""
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "..", "calibrate", "results")

# calibrate/torch_sync_gap.py runs on a lent H200 with get_batch timed (get_batch_us), and the five runs of the first
# lease (the backward gap's source).
WITH_GET_BATCH = ["2026-11-26c/h200-sync-gap-batch.json", "2026-11-26c/h200-sync-gap-sf.json",
                  "2026-11-26c/h200-sync-gap-prelude.json", "2026-11-27/h200-sync-gap-direct.json",
                  "2026-11-27/h200-sync-gap-direct-prelude.json", "2026-11-27/h200-sync-gap-direct2.json"]
FIRST_LEASE = ["2026-11-26c/h200-sync-gap.json", "2026-11-26c/h200-sync-gap-r15.json",
               "2026-11-26c/h200-sync-gap-batch.json", "2026-11-26c/h200-sync-gap-sf.json",
               "2026-11-26c/h200-sync-gap-prelude.json"]

# The runs with the direct figures less the queued steps' launch gaps (session 25, a lent H200; the first of them
# before the timelines existed).
DIRECT = ["2026-11-27b/h200-sync-gap.json", "2026-11-27b/h200-sync-gap-timeline.json",
          "2026-11-27b/h200-sync-gap-timeline-2.json"]

# Megatron-LM's "batch-generator" timer (synchronising, summed over an iteration's microbatches, printed by the last
# rank) in public logs of A100 runs: (ms per iteration, microbatches per iteration, source). Normal runs of NVIDIA's
# Megatron-LM only (docs/fidelity.md lists what was left out and why).
A100_GET_BATCH = [
    (1.62, 2, "BERT-345M, 1 GPU, ThetaGPU DGX A100, Megatron-LM e269e200 (xduan7/scalable-transformer "
              "docs/megatron_bert_345m.md)"),
    (2.82, 4, "the same, 8 GPUs, t = 2, p = 2"),
    (3.21, 4, "the same, 32 GPUs"),
    (3.70, 4, "the same, 64 GPUs"),
    (3.88, 4, "the same, 128 GPUs"),
    (527.61, 1024, "GPT 13B, t = 2, p = 4, microbatch 1, sequence 2048, NGC container Megatron-LM 2021-09"),
]


# calibrate/torch_sync_gap.py --timeline on a lent H200 (session 25, two runs on two machines of the same kind): each
# run's synchronised layers' forward and backward, kernel by kernel, with the host's launch times.
TIMELINES = ["2026-11-27b/h200-sync-gap-timeline.json", "2026-11-27b/h200-sync-gap-timeline-2.json"]
DEVICES = os.path.join(HERE, "..", "scenarios", "devices")
H200_PROFILE, A100_PROFILE = "h200-sxm-141gb-calibrated.yaml", "a100-sxm4-80gb.yaml"
# A gap of HOST_WAIT_MIN_US or more between two kernels is the GPU waiting for its host; shorter ones are launch
# latency, which a replay keeps. The measuring script's own threshold (it imports no torch at module level).
sys.path.insert(0, os.path.join(HERE, "..", "calibrate"))
from torch_sync_gap import HOST_WAIT_MIN_US  # noqa: E402


def _profile_value(name, key):
    """A device profile's first `key: number` (the profiles' device, gemm and elementwise blocks each name it once)."""
    with open(os.path.join(DEVICES, name)) as f:
        m = re.search(rf"^\s*{key}:\s*([0-9.eE+-]+)", f.read(), re.M)
    if m is None:
        raise ValueError(f"{name}: no {key}")
    return float(m.group(1))


def a100_scale():
    """How much longer an A100 runs each kernel class than the H200, from the two device profiles strata uses: matrix
    work at peak x efficiency ceiling, the rest at HBM bandwidth x elementwise efficiency."""
    def rate(profile, peak, eff):
        return _profile_value(profile, peak) * _profile_value(profile, eff)
    return {"gemm": rate(H200_PROFILE, "peak_flops", "efficiency_ceiling")
            / rate(A100_PROFILE, "peak_flops", "efficiency_ceiling"),
            "other": rate(H200_PROFILE, "hbm_bandwidth_bytes_per_s", "bandwidth_efficiency")
            / rate(A100_PROFILE, "hbm_bandwidth_bytes_per_s", "bandwidth_efficiency")}


def replay(timeline, scale_gemm=1.0, scale_other=1.0):
    """The GPU's idle time (us) in one synchronised step (calibrate/torch_sync_gap.py window_timelines: per activity
    [launch, start, duration, class], times from the step's start, in start order) when each activity runs its
    duration x the scale of its class, on a GPU no faster (scales >= 1). An activity cannot start before the measured
    GPU started it (where the GPU had idled, the host was late with it; where it had not, a slower GPU reaches it later
    anyway), nor before the activities before it have ended plus the measured gap where that was launch latency (under
    HOST_WAIT_MIN_US); one that ran beside its predecessor (a copy beside a kernel) keeps its offset from that one's
    start. Idle is measured as window_breakdown does: from the step's start to the last activity's end, less the busy
    time. With both scales 1 it gives the measured idle exactly."""
    if scale_gemm < 1.0 or scale_other < 1.0:
        raise ValueError(f"replay: scales {scale_gemm}, {scale_other}: a faster GPU's launches would be bound by the "
                         "host's launch times, which this replay does not use")
    measured_end = replayed_end = idle = 0.0
    previous = None  # the previous activity's measured and replayed start
    for _, start, duration, kind in timeline:
        gap = start - measured_end
        if gap < 0 and previous is not None:  # beside the activity before it
            begin = max(start, previous[1] + (start - previous[0]))
        else:
            begin = max(start, replayed_end + (gap if 0 < gap < HOST_WAIT_MIN_US else 0.0))
        idle += max(0.0, begin - replayed_end)
        replayed_end = max(replayed_end, begin + duration * (scale_gemm if kind == "g" else scale_other))
        measured_end = max(measured_end, start + duration)
        previous = (start, begin)
    return idle


def _load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)["rows"]


def rule():
    """The rule's figures (us) and the values (us, rounded to 10) per recompute mode; also the difference method's
    figures of sessions 22-23 (difference_*), which the values no longer use."""
    get_batch_us = statistics.median(1e3 * ms / n for ms, n, _ in A100_GET_BATCH)
    loaded = {name: _load(name) for name in dict.fromkeys(WITH_GET_BATCH + FIRST_LEASE + DIRECT + TIMELINES)}
    with_get_batch = [r for name in WITH_GET_BATCH for r in loaded[name]]
    first_lease = [r for name in FIRST_LEASE for r in loaded[name]]
    direct = [r for name in DIRECT for r in loaded[name]]
    timelines = [r for name in TIMELINES for r in loaded[name]]
    scale = a100_scale()
    out = {"a100_get_batch_us": get_batch_us, "a100_scale": scale}
    for mode in ("no_recompute", "full_recompute"):
        rest = statistics.median(r[mode]["synced_forward_idle_us"] - r[mode]["queued_forward_idle_us"] for r in direct)
        backward = statistics.median(r[mode]["direct_backward_gap_us"] for r in direct)
        hidden = [statistics.median(replay(run[step]) - replay(run[step], scale["gemm"], scale["other"])
                                    for r in timelines for run in r[mode]["synced_timelines"]) for step in (0, 1)]
        out[mode] = {"forward_rest_us": rest, "backward_gap_us": backward,
                     "difference_forward_rest_us": statistics.median(
                         r[mode]["forward_gap_us"] - r[mode]["get_batch_us"] for r in with_get_batch),
                     "difference_backward_gap_us": statistics.median(r[mode]["backward_gap_us"] for r in first_lease),
                     "a100_hidden_forward_us": hidden[0], "a100_hidden_backward_us": hidden[1],
                     "host_gap_forward_us": 10 * round((rest + get_batch_us - hidden[0]) / 10),
                     "host_gap_backward_us": 10 * round((backward - hidden[1]) / 10)}
    return out


def main():
    r = rule()
    print(f"get_batch per call on A100 runs (median of {len(A100_GET_BATCH)}): {r['a100_get_batch_us']:.0f} us")
    print(f"an A100 runs matrix kernels {r['a100_scale']['gemm']:.3f}x and the others {r['a100_scale']['other']:.3f}x "
          f"as long as the H200 ({A100_PROFILE} against {H200_PROFILE})")
    for mode, scenario in (("full_recompute", "full recompute"), ("no_recompute", "selective recompute")):
        m = r[mode]
        print(f"{scenario}: forward {m['forward_rest_us']:.0f} + {r['a100_get_batch_us']:.0f} - "
              f"{m['a100_hidden_forward_us']:.0f} -> host_gap_forward_us: {m['host_gap_forward_us']}; backward "
              f"{m['backward_gap_us']:.0f} - {m['a100_hidden_backward_us']:.0f} -> "
              f"host_gap_backward_us: {m['host_gap_backward_us']} (the difference method's forward rest "
              f"{m['difference_forward_rest_us']:.0f}, backward {m['difference_backward_gap_us']:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
