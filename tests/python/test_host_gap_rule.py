"""The paper's scenarios carry the host gaps that scripts/host-gap-rule.py computes from the committed measurements
(the rule in scenarios/paper/table5.yaml): a changed measurement or a hand-edited value fails here."""
import importlib.util
import os
import re

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location("host_gap_rule", os.path.join(SRC, "scripts", "host-gap-rule.py"))
host_gap_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_gap_rule)

GAPS = re.compile(r"recompute: (full|selective)[^}]*?host_gap_forward_us: (\d+), host_gap_backward_us: (\d+)", re.S)


def _expected():
    r = host_gap_rule.rule()
    return {"full": (r["full_recompute"]["host_gap_forward_us"], r["full_recompute"]["host_gap_backward_us"]),
            "selective": (r["no_recompute"]["host_gap_forward_us"], r["no_recompute"]["host_gap_backward_us"])}


def _scenario(name):
    with open(os.path.join(SRC, "scenarios", name)) as f:
        return f.read()


def test_the_rule_gives_the_shipped_figures():
    assert _expected() == {"full": (1770, 930), "selective": (1340, 740)}


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
