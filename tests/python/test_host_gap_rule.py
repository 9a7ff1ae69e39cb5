"""The paper's scenarios carry the host gaps that scripts/host-gap-rule.py computes from the committed measurements
(the rule in scenarios/paper/table5.yaml): a changed measurement or a hand-edited value fails here."""
import importlib.util
import json
import os
import re
import sys

import pytest

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location("host_gap_rule", os.path.join(SRC, "scripts", "host-gap-rule.py"))
host_gap_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_gap_rule)
sys.path.insert(0, os.path.join(SRC, "calibrate"))
import torch_sync_gap  # noqa: E402  (imports no torch at module level)

GAPS = re.compile(r"recompute: (full|selective)[^}]*?host_gap_forward_us: (\d+), host_gap_backward_us: (\d+)", re.S)


def _expected():
    r = host_gap_rule.rule()
    return {"full": (r["full_recompute"]["host_gap_forward_us"], r["full_recompute"]["host_gap_backward_us"]),
            "selective": (r["no_recompute"]["host_gap_forward_us"], r["no_recompute"]["host_gap_backward_us"])}


def _scenario(name):
    with open(os.path.join(SRC, "scenarios", name)) as f:
        return f.read()


def test_the_rule_gives_the_shipped_figures():
    assert _expected() == {"full": (1260, 760), "selective": (980, 570)}


def test_every_paper_scenario_carries_the_rule():
    expected = _expected()
    for name, count in (("paper/table5.yaml", 8), ("paper/530b-2240.yaml", 2), ("sweeps/microbatch.yaml", 1)):
        found = GAPS.findall(_scenario(name))
        assert len(found) == count, name
        for mode, fwd, bwd in found:
            assert (int(fwd), int(bwd)) == expected[mode], (name, mode)
    # SC21's rows are all full recompute; the gaps sit in the file's execution block.
    sc21 = _scenario("crosscheck/sc21-table1.yaml")
    assert "recompute: full" in sc21
    assert re.findall(r"host_gap_forward_us: (\d+), host_gap_backward_us: (\d+)", sc21) == \
        [tuple(str(v) for v in expected["full"])]


def test_a100_get_batch_per_call():
    # Per call = the timer's sum over an iteration / the iteration's microbatches; the six runs' median.
    assert abs(host_gap_rule.rule()["a100_get_batch_us"] - 806.25) < 1e-9


def test_replay_reproduces_the_measured_idle():
    # [launch, start, duration, class] from the step's start: a lead of 5, a launch gap of 2, a host wait of 40.
    timeline = [[0.0, 5.0, 100.0, "g"], [1.0, 107.0, 10.0, "o"], [100.0, 157.0, 20.0, "g"], [110.0, 177.0, 3.0, "o"]]
    assert host_gap_rule.replay(timeline) == 5.0 + 2.0 + 40.0


def _trace(tmp_path, activities):
    """A profiler trace of one marker window holding activities (name, start, duration, category), times from the
    marker's end."""
    events = [{"ph": "X", "cat": "kernel", "name": "void spin_kernel(long)", "ts": -1.0, "dur": 1.0,
               "args": {"correlation": 0}}]
    for i, (name, ts, dur, cat) in enumerate(activities, 1):
        events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"correlation": i}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts - 5.0, "dur": 2.0,
                       "args": {"correlation": i}})
    end = max(ts + dur for _, ts, dur, _ in activities) + 50.0
    events.append({"ph": "X", "cat": "kernel", "name": "void spin_kernel(long)", "ts": end, "dur": 1.0,
                   "args": {"correlation": 999}})
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


@pytest.mark.parametrize("activities", [
    # back to back, a launch gap, a host wait
    [("gemm", 3.0, 100.0, "kernel"), ("add", 106.0, 10.0, "kernel"), ("gemm", 150.0, 20.0, "kernel")],
    # a copy beside a kernel, then a wait
    [("gemm", 1.0, 100.0, "kernel"), ("Memcpy DtoD", 11.0, 20.0, "gpu_memcpy"), ("gelu", 151.0, 10.0, "kernel")],
    # a copy that outlasts the kernel it started beside
    [("gemm", 1.0, 100.0, "kernel"), ("Memcpy DtoD", 90.0, 20.0, "gpu_memcpy"), ("gelu", 120.0, 10.0, "kernel")],
])
def test_replay_at_scale_one_is_window_breakdowns_idle(tmp_path, activities):
    path = _trace(tmp_path, activities)
    (window,) = torch_sync_gap.window_breakdown(path)
    (timeline,) = torch_sync_gap.window_timelines(path)
    assert host_gap_rule.replay(timeline) == pytest.approx(window["idle"])


def test_replay_keeps_a_copy_beside_its_kernel():
    # The copy ran beside the gemm: a slower GPU runs it beside the gemm still, and the wait of 40 after the gemm
    # (ended at 101, next at 141) is hidden by the gemm's 3x.
    timeline = [[0.0, 1.0, 100.0, "g"], [5.0, 11.0, 20.0, "o"], [130.0, 141.0, 10.0, "o"]]
    assert host_gap_rule.replay(timeline) == 1.0 + 40.0
    assert host_gap_rule.replay(timeline, 3.0, 2.0) == 1.0


def test_replay_with_a_slower_gpu_hides_the_host_waits_not_the_lead_or_the_launch_gaps():
    timeline = [[0.0, 5.0, 100.0, "g"], [1.0, 107.0, 10.0, "o"], [100.0, 157.0, 20.0, "g"], [110.0, 177.0, 3.0, "o"]]
    # Matrix work 3x, the rest 2x: the wait of 40 ends before the first kernels do; the lead and the gap of 2 stay.
    assert host_gap_rule.replay(timeline, 3.0, 2.0) == 5.0 + 2.0
    # A faster GPU would be held by the host's launches, which the replay does not use: refused.
    with pytest.raises(ValueError, match="faster GPU"):
        host_gap_rule.replay(timeline, 0.5, 1.0)


def test_a100_scale_comes_from_the_device_profiles():
    scale = host_gap_rule.a100_scale()
    # H200 calibrated 989.4 TF/s x 0.7774 against A100 312 TF/s x 0.80; 4.814 TB/s x 0.7526 against 2.039 x 0.72.
    assert abs(scale["gemm"] - 989.4e12 * 0.7774 / (312e12 * 0.80)) < 1e-9
    assert abs(scale["other"] - 4.814e12 * 0.7526 / (2039e9 * 0.72)) < 1e-9


def test_an_a100_hides_part_of_the_h200_gaps():
    r = host_gap_rule.rule()
    for mode in ("no_recompute", "full_recompute"):
        assert 0 < r[mode]["a100_hidden_forward_us"] < r[mode]["forward_rest_us"]
        assert 0 < r[mode]["a100_hidden_backward_us"] < r[mode]["backward_gap_us"]
