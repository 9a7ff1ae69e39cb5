"""The validation-table scripts (scripts/*-table.py) on bad input: a clear message and exit 2, never a traceback; the
usage with -h / --help and exit 0; and tokens-table.py's split of step times into a fixed and a per-microbatch part
on a results file made up here (no simulator needed)."""
import json
import os
import re
import subprocess
import sys

import pytest

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = {  # script: the arguments before the results file
    "validation-table.py": [],
    "crosscheck-table.py": [],
    "megatron-h100-table.py": [],
    "tokens-table.py": ["mlperf_gpt3_h100"],
    "recompute-validation.py": [],
}


def _run(script, *args):
    return subprocess.run([sys.executable, os.path.join(SRC, "scripts", script), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_prints_the_usage(script):
    p = _run(script, "--help")
    assert p.returncode == 0
    assert "usage:" in p.stdout


# A bad results file (its text, or None for a missing file) and what the message must say after the file's name.
BAD_FILES = [(None, "cannot read it"), ('{\n  "results": [\n', "not JSON (line 3"),
             ('{"name": "not strata"}\n', "not a strata results file")]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
@pytest.mark.parametrize("text, message", BAD_FILES)
def test_a_bad_results_file_is_named_with_what_is_wrong(script, text, message, tmp_path):
    path = tmp_path / "results.json"
    if text is not None:
        path.write_text(text)
    p = _run(script, *SCRIPTS[script], str(path))
    assert p.returncode == 2
    assert f"{path}: {message}" in p.stderr
    assert "Traceback" not in p.stderr


def test_validation_table_names_the_missing_cases(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": [{"name": "22B full recompute", "iteration_time_s": 1.5}]}))
    p = _run("validation-table.py", str(other))
    assert p.returncode == 2
    assert "no simulated result for 22B present work, 175B full recompute" in p.stderr


def _mlperf_results(step_times):
    """A results file with the MLPerf v3.1 table's cases, each simulated in the given step time."""
    with open(os.path.join(SRC, "plots", "paper_values.json")) as f:
        table = json.load(f)["mlperf_gpt3_h100"]
    results = []
    for name, gpus, batch, step in zip(table["cases"], table["gpus"], table["global_batch"], step_times):
        data = gpus // 32
        execution = {"tensor": 4, "context_parallel": 1, "pipeline": 8, "interleave": 12, "data": data,
                     "microbatch": 1, "global_batch": batch, "gpus": gpus}
        results.append({"name": name, "execution": execution, "iteration_time_s": step,
                        "tokens_per_s": batch * 2048 / step})
    return table, {"results": results}


def test_tokens_table_splits_step_times_into_fixed_and_per_microbatch(tmp_path):
    # Simulated steps of exactly 0.1 s + 0.08 s x m: the split must give those back, against the published line.
    table, _ = _mlperf_results([1.0] * 7)
    ms = [batch // (gpus // 32) for gpus, batch in zip(table["gpus"], table["global_batch"])]
    _, doc = _mlperf_results([0.1 + 0.08 * m for m in ms])
    path = tmp_path / "mlperf.json"
    path.write_text(json.dumps(doc))
    p = _run("tokens-table.py", "mlperf_gpt3_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert "m = [8, 16, 128]" in p.stdout
    assert "simulated 100 ms + 80.00 ms x m" in p.stdout
    assert "published 280 ms + 84.39 ms x m" in p.stdout


def test_tokens_table_splits_each_layout_and_device_apart(tmp_path):
    # One row at microbatch 2: it has no partner, so the split is over the other six rows (m = 8, 16 and 128), named by
    # their layout; rows of a second device get a line of their own, named by it.
    _, doc = _mlperf_results([1.0] * 7)
    doc["results"][0]["execution"]["microbatch"] = 2
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    p = _run("tokens-table.py", "mlperf_gpt3_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("step time = fixed") == 1
    assert "(t 4 c 1 p 8 v 12 b 1, m = [8, 16, 128]" in p.stdout

    _, doc = _mlperf_results([1.0] * 7)
    for i, r in enumerate(doc["results"]):
        r["device_profile"] = {"name": "gpu-a" if i % 2 else "gpu-b"}
    path.write_text(json.dumps(doc))
    p = _run("tokens-table.py", "mlperf_gpt3_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("step time = fixed") == 2
    assert "(gpu-a, m = " in p.stdout and "(gpu-b, m = " in p.stdout


def _dgxc_results(fp8_factor):
    """Simulated results equal to the published DGX Cloud table, its FP8 steps times `fp8_factor`."""
    with open(os.path.join(SRC, "plots", "paper_values.json")) as f:
        table = json.load(f)["dgxc_h100"]
    results = []
    for name, gpus, batch, seq, step in zip(table["cases"], table["gpus"], table["global_batch"], table["seq_len"],
                                            table["step_time_s"]):
        step = step * fp8_factor if name.endswith(" FP8") else step
        execution = {"tensor": 1, "context_parallel": 1, "pipeline": 1, "interleave": 1, "data": gpus,
                     "microbatch": 1, "global_batch": batch, "gpus": gpus}
        results.append({"name": name, "execution": execution, "iteration_time_s": step,
                        "tokens_per_s": batch * seq / step})
    return {"results": results}


def test_tokens_table_compares_fp8_speedups_of_bf16_fp8_pairs(tmp_path):
    # Simulated = published: every pair's speed-up equal; FP8 steps 0.9 x: every simulated speed-up 1 / 0.9 - 1 higher.
    path = tmp_path / "dgxc.json"
    path.write_text(json.dumps(_dgxc_results(1.0)))
    p = _run("tokens-table.py", "dgxc_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert "mean |difference| 0.00%, mean signed +0.00% over 10 pairs" in p.stdout
    path.write_text(json.dumps(_dgxc_results(0.9)))
    p = _run("tokens-table.py", "dgxc_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert "mean |difference| 11.11%, mean signed +11.11% over 10 pairs" in p.stdout
    assert re.search(r"\n  Llama 3\.1 70B on 64 +published x1\.397, simulated x1\.552 \(\+11\.1%\)\n", p.stdout)


def test_tokens_table_refuses_a_case_that_is_not_the_published_row(tmp_path):
    # A BF16 / FP8 pair has one GPU count: swapped, only the names tell them apart.
    doc = _dgxc_results(1.0)
    doc["results"][0], doc["results"][1] = doc["results"][1], doc["results"][0]
    path = tmp_path / "swapped.json"
    path.write_text(json.dumps(doc))
    p = _run("tokens-table.py", "dgxc_h100", str(path))
    assert p.returncode == 3
    assert "Llama 3.1 8B on 8 FP8: the published row here is 'Llama 3.1 8B on 8 BF16'" in p.stdout


def test_tokens_table_compares_the_growth_with_gpus_at_the_same_work_per_gpu(tmp_path):
    # Rows of one model, layout, precision and microbatches per pipeline that differ in GPUs only: the step's growth
    # from the smallest to the largest count, published against simulated, and the mean difference per precision.
    doc = _dgxc_results(1.0)
    for r in doc["results"]:
        r["execution"]["precision"] = "fp8" if r["name"].endswith(" FP8") else "bf16"
        r["model"] = {"name": r["name"].split(" on ")[0]}
    path = tmp_path / "same.json"
    path.write_text(json.dumps(doc))
    p = _run("tokens-table.py", "dgxc_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert "  bf16: simulated minus published growth, mean +0.00 points over 5 groups" in p.stdout
    assert "  fp8: simulated minus published growth, mean +0.00 points over 5 groups" in p.stdout
    assert re.search(r"\n  Llama 3\.1 70B FP8 +64 -> 2048 +GPUs: published \+5\.1%, simulated \+5\.1% "
                     r"\(difference \+0\.0 points\)\n", p.stdout)
    # Each model's largest FP8 run 5% slower in the simulation: its growth 5% x (its published growth + 1) higher.
    with open(os.path.join(SRC, "plots", "paper_values.json")) as f:
        steps = json.load(f)["dgxc_h100"]["step_time_s"]
    diffs = []
    for i in range(2, len(steps), 4):  # the cases come as smallest BF16, FP8, largest BF16, FP8 per model
        doc["results"][i + 1]["iteration_time_s"] *= 1.05
        diffs.append(0.05 * steps[i + 1] / steps[i - 1])
    path.write_text(json.dumps(doc))
    p = _run("tokens-table.py", "dgxc_h100", str(path))
    assert p.returncode == 0, p.stderr
    assert f"  fp8: simulated minus published growth, mean {100 * sum(diffs) / len(diffs):+.2f} points" in p.stdout
    assert "  bf16: simulated minus published growth, mean +0.00 points over 5 groups" in p.stdout


def test_recompute_validation_compares_ratios_not_levels(tmp_path):
    # Simulated steps whose ratios are the published ones exactly, at twice the level: every error 0.
    with open(os.path.join(SRC, "plots", "paper_values.json")) as f:
        table = json.load(f)["bridge_recompute_h100"]
    policies = [("none", []), ("selective", ["core_attn"]), ("selective", ["mlp"]), ("selective", ["core_attn", "mlp"])]
    results = [{"name": name, "execution": {"gpus": 32, "recompute": rc, "recompute_modules": mods},
                "iteration_time_s": 1000.0 / tf / 2}
               for name, tf, (rc, mods) in zip(table["cases"], table["tflops_per_gpu"], policies)]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": results}))
    p = _run("recompute-validation.py", str(path))
    assert p.returncode == 0, p.stderr
    errors = re.findall(r"([+-]\d+\.\d\d)%$", p.stdout, re.M)
    assert len(errors) == 6 and all(float(e) == 0 for e in errors), p.stdout
    # Cases out of order: named with what they recompute.
    path.write_text(json.dumps({"results": [results[1], results[0]] + results[2:]}))
    p = _run("recompute-validation.py", str(path))
    assert p.returncode == 2 and "the published row's is none []" in p.stderr, p.stderr
    # One case short: the scenario's case count is named.
    path.write_text(json.dumps({"results": results[:3]}))
    p = _run("recompute-validation.py", str(path))
    assert p.returncode == 2 and "expected the 4 cases of scenarios/validation/bridge-recompute-h100.yaml" in p.stderr


def test_nemo_long_tokens_are_the_published_tflops_by_nemos_llama2_flops_count():
    """The long-sequence table publishes TFLOP/s; its tokens/s are derived by NeMo's own count (flops_formulas.py llama2:
    the whole s^2 attention), to 0.1, and the rows are the scenario's cases in order."""
    with open(os.path.join(SRC, "plots", "paper_values.json")) as f:
        t = json.load(f)["nemo_long_h100"]
    layers, h, groups, heads, ffn, vocab = 32, 4096, 32, 32, 11008, 32000
    assert len(t["tokens_per_s_per_gpu"]) == len(t["nemo_tflops_per_gpu"]) == len(t["seq_len"]) == len(t["cases"]) == 9
    for tflops, s, tokens, case in zip(t["nemo_tflops_per_gpu"], t["seq_len"], t["tokens_per_s_per_gpu"], t["cases"]):
        per_token = layers * h * h * (12 + 12 * groups / heads + 18 * ffn / h + 12 * s / h + 6 * vocab / (layers * h))
        assert abs(tflops * 1e12 / per_token - tokens) <= 0.05 + 1e-9, case
        assert case.startswith(f"{s // 1024}K on ")
