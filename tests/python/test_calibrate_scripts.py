"""The calibration scripts' pure-Python parts (no GPU, no PyTorch needed): what they compute from what they read."""
import json
import os
import sys

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "calibrate"))

import torch_sync_gap  # noqa: E402  (imports no torch at module level)


def test_idle_between_markers(tmp_path):
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
    assert torch_sync_gap.idle_between_markers(str(path)) == [15.0, 9.0]


def test_idle_between_markers_skips_the_holding_sleep(tmp_path):
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
    assert torch_sync_gap.idle_between_markers(str(path)) == [2.0, 0.0]


def test_idle_between_markers_without_markers(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 5}]}))
    assert torch_sync_gap.idle_between_markers(str(path)) == []
