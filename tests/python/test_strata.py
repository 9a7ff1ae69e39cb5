"""The Python module (python/strata): same results as the strata command's JSON, dicts as input, errors as
exceptions with their location, the GIL released while simulating, pandas optional.

Run by CTest (test "python") with PYTHONPATH=build/python, STRATA_BIN (the strata command) and STRATA_SOURCE_DIR."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import strata

SRC = os.environ.get("STRATA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("STRATA_BIN", os.path.join(SRC, "build", "strata"))
TABLE4 = os.path.join(SRC, "scenarios", "paper", "table4.yaml")
SWEEP = os.path.join(SRC, "scenarios", "sweeps", "microbatch.yaml")
TABLE5 = os.path.join(SRC, "scenarios", "paper", "table5.yaml")


def cli_json(*args):
    out = subprocess.run([BIN, *args, "--json", "-"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_run_from_path_matches_the_command():
    results = strata.run(TABLE4)
    assert isinstance(results, list) and len(results) == 5
    cli = cli_json("run", TABLE4)
    # The command adds its provenance (version, revision, SHA-256 of each input file); the results are the same.
    assert cli.pop("provenance")["inputs"][0]["file"].endswith("table4.yaml")
    assert {"experiment": results.experiment, "results": list(results)} == cli
    assert all(r["iteration_time_s"] > 0 for r in results)


def test_run_one_case_analytical_only():
    results = strata.run(TABLE4, case="selective + sequence", analytical_only=True)
    assert [r["name"] for r in results] == ["selective + sequence"]
    assert "iteration_time_s" not in results[0] and results[0]["memory"]["activation_bytes_per_layer"] > 0


def test_exposed_communication_by_kind():
    doc = {
        "model": {"file": "models/gpt-22b.yaml", "layers": 8, "tied_embeddings": False},
        "system": "systems/selene-a100.yaml",
        "execution": {"tensor": 8, "pipeline": 2, "data": 1, "microbatch": 1, "global_batch": 4,
                      "sequence_parallel": True, "recompute": "selective"},
        "cases": [{"name": "p2 d1"}, {"name": "p1 d2", "execution": {"pipeline": 1, "data": 2}}],
    }
    pipelined, replicated = strata.run(doc, base_dir=os.path.join(SRC, "scenarios"))
    for r in (pipelined, replicated):
        parts = [r["exposed_comm_tensor_s"], r["exposed_comm_pipeline_s"], r["exposed_comm_data_parallel_s"]]
        assert sum(parts) == pytest.approx(r["exposed_comm_s"], rel=1e-12) and r["exposed_comm_tensor_s"] > 0
    assert pipelined["exposed_comm_pipeline_s"] > 0 and pipelined["exposed_comm_data_parallel_s"] == 0
    assert replicated["exposed_comm_pipeline_s"] == 0 and replicated["exposed_comm_data_parallel_s"] > 0
    assert pipelined["host_gap_s"] == 0
    # Host gaps (the 2022 software's synchronisations): their own figure, per stage, not bubble. p = 2 with 4
    # microbatches: each stage runs 4 forward and 4 backward units.
    gapped, = strata.run(doc, base_dir=os.path.join(SRC, "scenarios"), case="p2 d1",
                         overrides={"execution.host_gap_forward_us": 300, "execution.host_gap_backward_us": 100})
    assert gapped["host_gap_s"] == pytest.approx(4 * 400e-6, rel=1e-12)
    busy = sum(gapped["stage_busy_s"]) / 2
    assert gapped["bubble_fraction"] == pytest.approx(
        1 - (busy + gapped["exposed_comm_s"] + gapped["host_gap_s"]) / gapped["iteration_time_s"], abs=1e-12)


def test_load_from_a_dict_equals_the_file():
    doc = {
        "name": "Table 4 - per-layer time, 22B",
        "model": "../models/gpt-22b.yaml",
        "system": "../systems/selene-a100.yaml",
        "execution": {"tensor": 8, "pipeline": 1, "data": 1, "microbatch": 4, "global_batch": 4,
                      "gradient_average": "scale_always", "embedding_reduce_scatter": False},
        "cases": [{"name": "selective + sequence", "execution": {"sequence_parallel": True, "recompute": "selective"}}],
    }
    exp = strata.load(doc, base_dir=os.path.join(SRC, "scenarios", "paper"))
    assert exp.cases == ["selective + sequence"]
    from_dict = strata.run(exp)
    from_file = strata.run(TABLE4, case="selective + sequence")
    assert list(from_dict) == list(from_file)


def test_a_bad_file_raises_input_error_with_file_line_and_key():
    bad = os.path.join(SRC, "tests", "data", "bad", "float_for_int.yaml")
    with pytest.raises(strata.InputError) as e:
        strata.load(bad)
    assert e.value.file == bad
    assert (e.value.line, e.value.column) == (7, 15)
    assert e.value.key == "execution.microbatch"
    assert isinstance(e.value, ValueError)


def test_a_bad_dict_names_the_key_and_its_line():
    doc = {"model": "../models/gpt-22b.yaml", "system": "../systems/selene-a100.yaml",
           "execution": {"tensor": 8, "pipeline": 1, "microbatch": "four", "global_batch": 4, "recompute": "none"}}
    with pytest.raises(strata.InputError) as e:
        strata.run(doc, base_dir=os.path.join(SRC, "scenarios", "paper"))
    assert e.value.file.endswith("<dict>")
    assert e.value.key == "execution.microbatch"
    assert e.value.line == json.dumps(doc, indent=1).splitlines().index('  "microbatch": "four",') + 1


def test_unknown_key_and_unknown_case():
    with pytest.raises(strata.InputError) as e:
        strata.load({"nmae": "x"})
    assert e.value.key == "nmae" and "Did you mean 'name'" in str(e.value)
    with pytest.raises(strata.InputError, match="no case named 'nope'"):
        strata.run(TABLE4, case="nope")
    with pytest.raises(strata.InputError, match="no case named 'nope'; the cases are: '22B full recompute'"):
        strata.run(TABLE5, case="nope", overrides={"execution.interleave": 2})
    # run's numeric arguments in the command's ranges; one override given as a string is that override.
    for bad in ({"jobs": -1}, {"jobs": 10 ** 12}, {"max_tasks": -1}):
        with pytest.raises(strata.InputError, match="strata.run: %s=" % next(iter(bad))):
            strata.run(TABLE4, **bad)
    # .file names a file or nothing: not an argument or a case's name.
    with pytest.raises(strata.InputError) as e:
        strata.run(TABLE4, jobs=-1)
    assert e.value.file is None
    with pytest.raises(strata.InputError, match="would run about") as e:
        strata.run(TABLE5, case="530B present work", max_tasks=1)
    assert e.value.file == TABLE5, e.value.file
    one = strata.run(TABLE5, case="22B present work", analytical_only=True, overrides="execution.microbatch=2")
    assert one[0]["execution"]["microbatch"] == 2


def test_case_with_overrides_that_fit_it_alone():
    # Interleave 3 fits 530B (105 layers over 35 stages: 3 each) but not 22B (one stage) nor 1T (128 over 64: 2 each):
    # with a case named, the override need fit only that case, as `strata run --case` with `--set`.
    with pytest.raises(strata.InputError, match="interleaved schedule needs pipeline >= 2"):
        strata.load(TABLE5, overrides={"execution.interleave": 3})
    results = strata.run(TABLE5, case="530B present work", analytical_only=True, overrides={"execution.interleave": 3})
    assert [r["name"] for r in results] == ["530B present work"]
    assert results[0]["execution"]["interleave"] == 3
    with pytest.raises(TypeError):
        strata.load(42)


def test_search_matches_the_command(tmp_path):
    model = os.path.join(SRC, "scenarios", "models", "gpt-22b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "selene-a100.yaml")
    r = strata.search(model, system, gpus=8, global_batch=4, top=3, simulate_top=4, jobs=1)
    subprocess.run([BIN, "search", "--model", model, "--system", system, "--gpus", "8", "--global-batch", "4", "--top",
                    "3", "--simulate-top", "4", "--json", str(tmp_path / "s.json")], check=True, capture_output=True)
    cli = json.loads((tmp_path / "s.json").read_text())
    # The command's JSON has every simulated candidate; --top and top= bound the table and the results here.
    assert list(r["results"]) == cli["results"][:3] and r["experiment"] == cli["experiment"]
    assert r["search"] == cli["search"] and r["simulated"] == cli["search"]["simulated"] == len(cli["results"])
    assert [c["name"] for c in r["results"]] == ["rank 1", "rank 2", "rank 3"]
    times = [c["iteration_time_s"] for c in r["results"]]
    assert times == sorted(times)
    assert r["enumerated"] >= r["screened"] >= 4 and r["rejected"]


def test_search_constraints_and_margin():
    model = os.path.join(SRC, "scenarios", "models", "gpt-22b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "selene-a100.yaml")
    r = strata.search(model, system, gpus=16, global_batch=16, top=20, simulate_top=2, jobs=1, margin=5,
                      fix={"tensor": 8, "pipeline": "1..2", "recompute": ["none", "selective"], "overlap_grad_reduce": True})
    assert r["search"]["constraints"] == ["tensor=8", "pipeline=1..2", "recompute=none,selective", "overlap_grad_reduce=on"]
    assert r["simulated"] == len(r["results"]) >= 2 and r["search"]["margin"] == 0.05
    for c in r["results"]:
        e = c["execution"]
        assert e["tensor"] == 8 and e["pipeline"] in (1, 2) and e["overlap_grad_reduce"] and e["data"] > 1, e
        assert c["screen"]["estimate_rank"] >= 1 and c["tokens_per_s"] > 0
    assert r["overturned_by"] in (0, r["results"][0]["screen"]["estimate_rank"])
    with pytest.raises(strata.InputError, match="unknown key 'tensr'; keys: tensor"):
        strata.search(model, system, gpus=16, global_batch=16, fix=["tensr=8"])
    # Selective recompute's module sets, a list of them (each joined by +).
    m = strata.search(model, system, gpus=16, global_batch=16, top=20, simulate_top=4, jobs=1,
                      fix={"tensor": 8, "recompute": "selective", "recompute_modules": ["mlp", "core_attn+mlp"]})
    assert m["search"]["constraints"][-1] == "recompute_modules=mlp,core_attn+mlp"
    assert {tuple(c["execution"]["recompute_modules"]) for c in m["results"]} <= {("mlp",), ("core_attn", "mlp")}
    with pytest.raises(strata.InputError, match="'norms' is not a set of modules joined by"):
        strata.search(model, system, gpus=16, global_batch=16, fix={"recompute_modules": "norms"})


def test_search_offload_modules():
    model = os.path.join(SRC, "scenarios", "models", "llama3-70b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "dgx-h100.yaml")
    te = ["execution.transformer_impl=transformer_engine"]
    r = strata.search(model, system, gpus=32, global_batch=128, attention="flash", replicas="representative", top=4,
                      simulate_top=4, jobs=1, fix={"recompute": "none", "microbatch": 1,
                                                   "offload_modules": ["none", "qkv_linear+core_attn+attn_proj"]},
                      overrides=te)
    assert r["search"]["constraints"][-1] == "offload_modules=none,qkv_linear+core_attn+attn_proj"
    sets = {tuple(c["execution"]["offload_modules"]) for c in r["results"]}
    assert sets <= {(), ("qkv_linear", "core_attn", "attn_proj")}
    for c in r["results"]:
        if c["execution"]["offload_modules"]:
            assert c["layer"]["offload"]["copied_bytes"] > 0 and c["host_copies_busy_s"]["device_to_host"] > 0
    # The search varies it: an override is refused with the --fix to use instead.
    with pytest.raises(strata.InputError, match="offload_modules"):
        strata.search(model, system, gpus=32, global_batch=128, overrides=te + ["execution.offload_modules=[qkv_linear]"])


def test_search_warns_when_attention_is_left_at_the_paper_default():
    import warnings
    llama = os.path.join(SRC, "scenarios", "models", "llama3-8b.yaml")
    h100 = os.path.join(SRC, "scenarios", "systems", "dgx-h100.yaml")
    args = dict(gpus=8, global_batch=32, top=1, simulate_top=1, jobs=1,
                fix={"tensor": 2, "pipeline": 1, "microbatch": 1, "recompute": "full"})
    with pytest.warns(UserWarning, match="attention left at its default, 'unfused'"):
        strata.search(llama, h100, **args)
    # Also when nothing fits (unfused attention's s x s scores without recompute): the warning comes first.
    nothing = dict(args, fix=dict(args["fix"], recompute="none"))
    with pytest.warns(UserWarning, match="attention left at its default"), pytest.raises(strata.InputError):
        strata.search(llama, h100, **nothing)
    for chosen in (dict(attention="unfused"), dict(overrides={"execution.attention": "flash"})):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any warning fails the call
            strata.search(llama, h100, **args, **chosen)
    # The paper's own GPT: its unfused attention is meant, nothing to warn about.
    gpt = os.path.join(SRC, "scenarios", "models", "gpt-22b.yaml")
    a100 = os.path.join(SRC, "scenarios", "systems", "selene-a100.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strata.search(gpt, a100, gpus=8, global_batch=4, top=1, simulate_top=1, jobs=1,
                      fix={"tensor": 8, "pipeline": 1, "microbatch": 4})


def test_search_gradient_average():
    model = os.path.join(SRC, "scenarios", "models", "gpt-22b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "selene-a100.yaml")
    fix = {"tensor": 8, "pipeline": 1, "microbatch": 4, "recompute": "selective", "sequence_parallel": True}
    paper = strata.search(model, system, gpus=8, global_batch=4, top=1, simulate_top=1, jobs=1, fix=fix,
                          gradient_average="scale_always")
    core = strata.search(model, system, gpus=8, global_batch=4, top=1, simulate_top=1, jobs=1, fix=fix)
    assert paper["results"][0]["execution"]["gradient_average"] == "scale_always"
    assert core["results"][0]["execution"]["gradient_average"] == "scale"
    # One replica: only the paper's software averages (a pass over the gradients), so it is slower.
    assert paper["results"][0]["iteration_time_s"] > core["results"][0]["iteration_time_s"]
    # Table 5's file also names the paper's embedding all-reduce and its host gaps: the search takes them as overrides.
    table5 = {r["name"]: r for r in strata.run(os.path.join(SRC, "scenarios", "paper", "table5.yaml"),
                                                 case="22B present work")}
    assert paper["results"][0]["iteration_time_s"] != table5["22B present work"]["iteration_time_s"]
    exact = strata.search(model, system, gpus=8, global_batch=4, top=1, simulate_top=1, jobs=1, fix=fix,
                          gradient_average="scale_always",
                          overrides={"execution.embedding_reduce_scatter": False,
                                     "execution.host_gap_forward_us": 980, "execution.host_gap_backward_us": 570})
    assert exact["results"][0]["iteration_time_s"] == table5["22B present work"]["iteration_time_s"]
    assert exact["results"][0]["execution"]["embedding_reduce_scatter"] is False
    # Model and system keys over the files, as `strata search --set model.KEY=... --set system.KEY=...`.
    parts = strata.search(model, system, gpus=8, global_batch=4, top=1, simulate_top=1, jobs=1, fix=fix,
                          overrides={"model.seq_len": 1024, "system.network.routing": "adaptive"})
    assert parts["results"][0]["model"]["seq_len"] == 1024
    assert parts["results"][0]["system_spec"]["network"]["routing"] == "adaptive"
    with pytest.raises(strata.InputError, match="varies 'tensor': restrict it with --fix"):
        strata.search(model, system, gpus=8, global_batch=4, overrides=["execution.tensor=4"])
    with pytest.raises(strata.InputError, match="keep one"):
        strata.search(model, system, gpus=8, global_batch=4, precision="fp16", overrides=["execution.precision=bf16"])
    # As a flag with --set: an argument given, even at its default value, conflicts with an override of its key.
    with pytest.raises(strata.InputError, match="keep one"):
        strata.search(model, system, gpus=8, global_batch=4, precision="bf16", overrides=["execution.precision=fp16"])
    with pytest.raises(strata.InputError, match="keep one"):
        strata.search(model, system, gpus=8, global_batch=4, grad_reduce_in_fp32=True,
                      overrides={"execution.grad_reduce_in_fp32": False})
    with pytest.raises(strata.InputError, match="expected unfused, flash or flash2"):
        strata.search(model, system, gpus=8, global_batch=4, attention="flash3")
    # Nothing feasible is an error, as `strata search` exits 2, with the reason.
    with pytest.raises(strata.InputError, match="none to try .*within the constraints"):
        strata.search(model, system, gpus=8, global_batch=4, fix={"tensor": 3})
    with pytest.raises(strata.InputError, match=r"hidden \(6144\) must be divisible by heads \(7\)"):
        strata.search(model, system, gpus=8, global_batch=4, overrides={"model.heads": 7})
    # Arguments out of the command's ranges: an InputError naming them, not pybind11's TypeError.
    for bad in ({"top": 0}, {"margin": float("nan")}, {"margin": float("inf")}, {"max_tasks": 0}, {"jobs": -1},
                {"gpus": 2 ** 62}, {"microbatches": (0,)}, {"simulate_top": True}):
        name = next(iter(bad))
        with pytest.raises(strata.InputError, match="strata.search: %s=" % name):
            strata.search(model, system, **{"gpus": 8, "global_batch": 4, **bad})
    with pytest.raises(strata.InputError, match="expected scale, scale_always or in_collective"):
        strata.search(model, system, gpus=8, global_batch=4, gradient_average="mean")


def test_search_grad_reduce_in_fp32():
    model = os.path.join(SRC, "scenarios", "models", "gpt-22b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "selene-a100.yaml")
    fix = {"tensor": 8, "pipeline": 1, "microbatch": 1, "recompute": "selective", "sequence_parallel": True,
           "distributed_optimizer": False, "overlap_grad_reduce": False}  # d = 2 on two nodes, reduced after backward
    fp32 = strata.search(model, system, gpus=16, global_batch=16, top=1, simulate_top=1, jobs=1, fix=fix)
    half = strata.search(model, system, gpus=16, global_batch=16, top=1, simulate_top=1, jobs=1, fix=fix,
                         grad_reduce_in_fp32=False)
    assert fp32["results"][0]["execution"]["grad_reduce_in_fp32"]
    assert not half["results"][0]["execution"]["grad_reduce_in_fp32"]
    assert half["results"][0]["iteration_time_s"] < fp32["results"][0]["iteration_time_s"]


def test_representative_replicas():
    model = os.path.join(SRC, "scenarios", "models", "gpt-22b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "selene-a100.yaml")
    fix = {"tensor": 4, "pipeline": 1, "microbatch": 1, "recompute": "selective"}  # every candidate has d = 2
    rep = strata.search(model, system, gpus=8, global_batch=4, top=2, simulate_top=2, jobs=1, fix=fix,
                        replicas="representative")
    full = strata.search(model, system, gpus=8, global_batch=4, top=2, simulate_top=2, jobs=1, fix=fix)
    assert rep["search"]["replicas"] == "representative" and full["search"]["replicas"] == "all"
    assert rep["results"][0]["engine"]["replicas"] == "representative"
    assert "replicas" not in full["results"][0]["engine"] and "best_in_full_s" not in full["search"]
    # The winner simulated again in full is the full search's time for the same configuration.
    same = [c for c in full["results"] if c["execution"] == rep["results"][0]["execution"]]
    assert len(same) == 1 and rep["search"]["best_in_full_s"] == same[0]["iteration_time_s"]
    with pytest.raises(strata.InputError, match="expected 'all' or 'representative'"):
        strata.search(model, system, gpus=8, global_batch=4, replicas="some")
    with pytest.raises(strata.InputError, match="expected 'all' or 'representative'"):
        strata.run(TABLE4, replicas="one")


def test_explain_matches_the_command():
    text = strata.explain(TABLE4, case="selective recompute")
    cli = subprocess.run([BIN, "explain", TABLE4, "--case", "selective recompute"], check=True, capture_output=True,
                         text=True).stdout
    assert text == cli and "fc1" in text


def test_simulation_releases_the_gil():
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.002)

    t = threading.Thread(target=tick)
    t.start()
    try:
        t0 = time.monotonic()
        strata.run(TABLE5, jobs=1)  # eight cases, one thread: long enough to tell (about a second or more)
        t1 = time.monotonic()
    finally:
        stop.set()
        t.join()
    during = [x for x in ticks if t0 + 0.05 < x < t1 - 0.05]
    assert t1 - t0 > 0.3, "the sweep is too short to tell"
    # With the GIL held for the whole run, the ticker could not run at all in between.
    assert len(during) > (t1 - t0) / 0.02, (len(during), t1 - t0)


def test_threads_run_cases_in_parallel_with_the_same_results():
    names = strata.load(SWEEP).cases[:4]
    serial = [strata.run(SWEEP, case=n, check=False)[0] for n in names]
    out = [None] * len(names)

    def one(i):
        out[i] = strata.run(SWEEP, case=names[i], check=False)[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == serial


def test_dataframe():
    pandas = pytest.importorskip("pandas")
    frame = strata.run(TABLE4).to_dataframe()
    assert isinstance(frame, pandas.DataFrame) and len(frame) == 5
    assert list(frame["name"]) == strata.load(TABLE4).cases
    assert (frame["memory.peak_bytes"] > 0).all() and "mfu" in frame.columns


def test_works_without_pandas():
    code = ("import sys; sys.modules['pandas'] = None\n"
            "import strata\n"
            "r = strata.run(%r, analytical_only=True)\n"
            "assert len(r) == 5\n"
            "try:\n"
            "    r.to_dataframe()\n"
            "except ImportError as e:\n"
            "    assert 'python3-pandas' in str(e)\n"
            "    print('ok')\n" % TABLE4)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "ok"


def test_the_worked_example_runs_and_plots(tmp_path):
    script = os.path.join(SRC, "examples", "llama_sweep.py")
    out = subprocess.run([sys.executable, script, "--out", str(tmp_path)], check=True, capture_output=True,
                         text=True).stdout
    png = tmp_path / "llama_sweep.png"
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"
    table = [l for l in out.splitlines() if l.split()[:1] and l.split()[0] in ("none", "selective", "full")]
    assert len(table) == 12, out


def test_a_missing_key_is_named_with_its_part():
    with pytest.raises(strata.InputError) as e:
        strata.load({"execution": {"microbatch": 1}})
    assert e.value.key == "model.heads" and e.value.line == 1


def test_search_flash2_and_ends_in_split():
    # FlashAttention-2's kernels and the embedding / loss counted in the pipeline split reach the search from Python.
    model = os.path.join(SRC, "scenarios", "models", "llama3-8b.yaml")
    system = os.path.join(SRC, "scenarios", "systems", "dgx-h100.yaml")
    fix = {"tensor": 1, "pipeline": 3, "microbatch": 1, "interleave": 1, "recompute": "none", "context_parallel": 1}
    r = strata.search(model, system, gpus=3, global_batch=3, top=2, simulate_top=2, jobs=1, attention="flash2", fix=fix)
    assert r["results"], r["rejected"]
    # 32 layers do not split over 3 stages; 33 places do, with the embedding or the loss counted: both ways tried.
    # Counting the loss leaves 11 layers and the embedding on stage 0, which holds 3 microbatches at 8k tokens: it does
    # not fit on an 80 GB H100; counting the embedding (10 layers there) does.
    assert r["enumerated"] == 3 and r["screened"] == 1
    assert r["rejected"] == {"infeasible sizes (divisibility, schedule)": 1, "out of memory (analytical)": 1}
    e = r["results"][0]["execution"]
    assert e["attention"] == "flash2"
    assert e["account_for_embedding_in_pipeline_split"] and not e["account_for_loss_in_pipeline_split"], e
    assert (e["first_stage_layers"], e["last_stage_layers"]) == (10, 11), e
    with pytest.raises(strata.InputError, match=r"must be divisible by pipeline x interleave \(3 x 1\)"):
        strata.search(model, system, gpus=3, global_batch=3, top=2, simulate_top=2, jobs=1, attention="flash2",
                      fix=dict(fix, ends_in_split=False))


def test_overrides_as_the_commands_set():
    args = ["execution.host_gap_forward_us=300", "model.layers=24"]
    results = strata.run(TABLE4, case="selective + sequence", overrides=args)
    cli = cli_json("run", TABLE4, "--case", "selective + sequence", "--set", args[0], "--set", args[1])
    cli.pop("provenance")
    assert {"experiment": results.experiment, "results": list(results)} == cli
    assert results[0]["execution"]["host_gap_forward_us"] == 300 and results[0]["model"]["layers"] == 24
    # A dict of values too; a loaded Experiment takes none; a bad key names the override.
    same = strata.run(TABLE4, case="selective + sequence", overrides={"execution.host_gap_forward_us": 300, "model.layers": 24})
    assert list(same) == list(results)
    with pytest.raises(strata.InputError, match="not to a loaded Experiment"):
        strata.load(strata.load(TABLE4), overrides=args)
    with pytest.raises(strata.InputError, match="--set 'execution.microbach=2'.*Did you mean 'microbatch'"):
        strata.load(TABLE4, overrides=["execution.microbach=2"])
