"""scripts/attention-profile.py: a torch_bench.py fused-attention run -> the device profile's entries.

The shipped Hopper profiles' measured.flash_attention grid must be what the script makes of the committed run (a
hand-edited entry or a changed run fails here); the dropout factor is the median ratio of the shapes' forward + backward
times; a run that cannot give a grid is refused with exit status 2 and a message."""
import importlib.util
import json
import os
import re

import pytest

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location("attention_profile",
                                               os.path.join(SRC, "scripts", "attention-profile.py"))
attention_profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(attention_profile)

GRID_RUN = os.path.join(SRC, "calibrate", "results", "2026-11-26", "h200-attention-grid.json")
ENTRY = re.compile(r"^\s*- \{batch: .*forward_us: .*\}\s*$")


def _entries(text):
    return sorted(line.strip() for line in text.splitlines() if ENTRY.match(line))


def _run(capsys, *argv):
    rc = attention_profile.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("profile", ["h100-sxm5-80gb.yaml", "h200-sxm-141gb.yaml", "h100-sxm5-80gb-calibrated.yaml",
                                     "h200-sxm-141gb-calibrated.yaml"])
def test_the_shipped_grid_is_the_committed_run(capsys, profile):
    rc, out, _ = _run(capsys, GRID_RUN)
    assert rc == 0
    made = _entries(out)
    assert len(made) == 20
    with open(os.path.join(SRC, "scenarios", "devices", profile)) as f:
        shipped = _entries(f.read())
    assert made == shipped


def _record(backend, b, h, s, d, fwd_us, bwd_us, p=0.0):
    return {"backend": backend, "tag": f"grid d={d} s={s} {h} heads", "b": b, "heads": h, "s": s, "d": d,
            "causal": True, "dropout_p": p, "fwd_s": fwd_us * 1e-6, "bwd_s": bwd_us * 1e-6,
            "fwd_bwd_s": (fwd_us + bwd_us) * 1e-6}


def _write(tmp_path, recs, name="run.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"device": "fake", "date": "today", "attention": recs}))
    return str(path)


def test_dropout_factor_is_the_median_ratio_of_forward_plus_backward(tmp_path, capsys):
    recs = []
    # A 2 x 2 grid; with dropout forward + backward 1.02, 1.04, 1.06, 1.10 times as long: median 1.05.
    for (h, s), r in zip(((8, 1024), (16, 1024), (8, 2048), (16, 2048)), (1.02, 1.04, 1.06, 1.10)):
        recs.append(_record("cudnn", 1, h, s, 128, 100.0, 300.0))
        recs.append(_record("cudnn", 1, h, s, 128, 100.0 * r, 300.0 * r, p=0.1))
    rc, out, _ = _run(capsys, _write(tmp_path, recs))
    assert rc == 0
    assert "  dropout_time_factor: 1.050\n" in out
    assert "range 1.020-1.100" in out
    # The grid is the shapes timed without dropout only.
    assert len(_entries(out)) == 4
    assert all("forward_us: 100.0, backward_us: 300.0" in e for e in _entries(out))


def test_without_dropout_no_factor_is_written(tmp_path, capsys):
    recs = [_record("cudnn", 1, h, s, 128, 10.0, 30.0) for h in (8, 16) for s in (1024, 2048)]
    rc, out, _ = _run(capsys, _write(tmp_path, recs))
    assert rc == 0
    assert "dropout_time_factor" not in out.replace("flash_attention.dropout_time_factor", "")
    assert "no shape timed with dropout" in out


def test_backend_flash_reads_the_flash_records(tmp_path, capsys):
    recs = [_record(be, 1, h, s, 128, t, 3 * t) for be, t in (("cudnn", 10.0), ("flash", 20.0))
            for h in (8, 16) for s in (1024, 2048)]
    path = _write(tmp_path, recs)
    rc, out, _ = _run(capsys, path)
    assert rc == 0 and "forward 0.500, backward 0.500" in out   # cuDNN over FA2, for information
    rc, out, _ = _run(capsys, path, "--backend", "flash")
    assert rc == 0 and all("forward_us: 20.0" in e for e in _entries(out))


@pytest.mark.parametrize("recs, message", [
    ([], "no 'attention' records"),
    ([_record("flash", 1, 8, 1024, 128, 1, 1)], "no records of backend 'cudnn' (the run has: flash)"),
    ([_record("cudnn", 1, 8, 1024, 128, 1, 1, p=0.1)], "no shape timed without dropout"),
    ([_record("cudnn", 1, 8, 1024, 128, 1, 1), _record("cudnn", 1, 16, 2048, 128, 1, 1)],
     "do not form a grid (missing batch x heads 8 at s = 2048, batch x heads 16 at s = 1024)"),
    ([_record("cudnn", 1, 8, 1024, 128, 1, -1)], "both must be positive"),
    ([_record("cudnn", 1, 8, 1024, 128, 1, 1), _record("cudnn", 1, 8, 1024, 128, 2, 2)], "timed twice"),
    ([{"backend": "cudnn", "b": 1}], "is not torch_bench's"),
])
def test_a_run_that_gives_no_grid_is_refused(tmp_path, capsys, recs, message):
    rc, out, err = _run(capsys, _write(tmp_path, recs))
    assert rc == 2 and out == ""
    assert message in err


def test_failed_records_are_left_out_and_said(tmp_path, capsys):
    recs = [_record("cudnn", 1, h, 1024, 128, 10.0, 30.0) for h in (8, 16)]
    recs.append(dict(_record("cudnn", 1, 32, 1024, 128, 0, 0), error="RuntimeError('out of memory')"))
    rc, out, err = _run(capsys, _write(tmp_path, recs))
    assert rc == 0 and len(_entries(out)) == 2
    assert "left out, failed in the run" in err and "out of memory" in err


def test_unreadable_files_and_bad_options_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{")
    assert _run(capsys, str(tmp_path / "bad.json"))[0] == 2
    assert _run(capsys, str(tmp_path / "missing.json"))[0] == 2
    with pytest.raises(SystemExit) as e:
        attention_profile.main([GRID_RUN, "--backend", "triton"])
    assert e.value.code == 2
