#!/usr/bin/env python3
"""Validates strata's JSON results against docs/results.schema.json (CTest `results_schema`).

Runs `strata run --json -` on every shipped experiment (every YAML file under scenarios/ except the part files in
models/, systems/ and devices/), simulated where that is quick and --analytical-only elsewhere, and one small
`strata search --json -`; validates each document against the schema (JSON Schema draft 2020-12, every object
closed, so a key the output gains without the schema fails here); fails when the schema describes a key that no
output wrote (so the schema cannot keep a key the output lost); and checks what a schema cannot say: the exposed
communication by kind adds up to exposed_comm_s, busy time, exposed communication and host gaps fit in the iteration
and the bubble is what they leave, and every per-stage array has one entry per pipeline stage.

usage: check_results.py STRATA_BIN SOURCE_DIR [--quick]
--quick (sanitizer builds): simulates only the two smallest experiments and the offloading one.
Exit codes: 0 valid, 1 invalid, 77 no validator (python3-jsonschema is not installed: scripts/install-deps).
"""
import json
import os
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:
    print("results_schema: skipped: the Python module jsonschema is missing (apt-get install python3-jsonschema, "
          "or scripts/install-deps)")
    sys.exit(77)

# Simulated event by event (a few seconds together in a Release build); every other experiment runs
# --analytical-only (the scaling benches, the 2240- and 6144-GPU runs and the 24-case Hopper table take minutes).
SIMULATED = {
    "paper/table4.yaml", "sweeps/microbatch.yaml", "paper/175b-on-h100.yaml", "llama/llama3-h100.yaml",
    "paper/table5.yaml", "paper/table2.yaml", "paper/table2-hopper.yaml", "llama/offload-h100.yaml",
    "llama/fsdp-h100.yaml",
}
SIMULATED_QUICK = {"paper/table4.yaml", "sweeps/microbatch.yaml", "llama/offload-h100.yaml", "llama/fsdp-h100.yaml"}
PARTS = {"models", "systems", "devices"}


def experiments(source):
    root = os.path.join(source, "scenarios")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir.split(os.sep)[0] in PARTS:
            continue
        dirnames.sort()
        found += [os.path.normpath(os.path.join(rel_dir, f)) for f in sorted(filenames) if f.endswith(".yaml")]
    return found


def strata_json(args, cwd):
    p = subprocess.run(args + ["--json", "-"], cwd=cwd, capture_output=True, text=True)
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"results_schema: {' '.join(args)} wrote no JSON (exit {p.returncode}):\n{p.stderr[-2000:]}")
    # A run whose cases all evaluated exits 0; one with infeasible cases (sweeps) says why in each case's "error".
    if p.returncode != 0 and not any("error" in r for r in doc.get("results", [])):
        raise SystemExit(f"results_schema: {' '.join(args)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return doc


class Coverage:
    """The schema's object keys (named def.key, or parent.key for inline objects) and those the documents used."""

    def __init__(self, schema):
        self.schema = schema
        self.described = set()
        self.seen = set()
        self._describe(schema, "root", set())

    def _resolve(self, node, label):
        while "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            node, label = self.schema["$defs"][name], name
        return node, label

    def _describe(self, node, label, done):
        node, label = self._resolve(node, label)
        if label in done:
            return
        done.add(label)
        for key, sub in node.get("properties", {}).items():
            self.described.add(f"{label}.{key}")
            self._describe(sub, f"{label}.{key}", done)
        if isinstance(node.get("items"), dict):
            self._describe(node["items"], f"{label}[]", done)

    def visit(self, node, label, value):
        node, label = self._resolve(node, label)
        if isinstance(value, dict):
            for key, v in value.items():
                if key in node.get("properties", {}):
                    self.seen.add(f"{label}.{key}")
                    self.visit(node["properties"][key], f"{label}.{key}", v)
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for v in value:
                self.visit(node["items"], f"{label}[]", v)


def extra_checks(name, doc):
    problems = []
    for r in doc["results"]:
        p = r["execution"]["pipeline"]
        per_stage = {}
        if "error" not in r:
            per_stage = dict(r["memory"]["by_stage"], parameters_per_gpu_by_stage=r["parameters_per_gpu_by_stage"])
        if "stage_busy_s" in r:
            per_stage["stage_busy_s"] = r["stage_busy_s"]
        for key, values in per_stage.items():
            if len(values) != p:
                problems.append(f"{name}: case '{r['name']}': {key} has {len(values)} entries for {p} pipeline stages")
        if "iteration_time_s" not in r:
            continue
        parts = r["exposed_comm_tensor_s"] + r["exposed_comm_pipeline_s"] + r["exposed_comm_data_parallel_s"]
        # Each part is a whole number of picoseconds and the total is their sum: equal up to double rounding.
        if abs(parts - r["exposed_comm_s"]) > 1e-12 * max(1.0, r["exposed_comm_s"]):
            problems.append(f"{name}: case '{r['name']}': the exposed communication by kind adds up to {parts!r}, "
                            f"not exposed_comm_s {r['exposed_comm_s']!r}")
        if r["exposed_comm_s"] > r["iteration_time_s"]:
            problems.append(f"{name}: case '{r['name']}': more exposed communication than iteration time")
        busy = sum(r["stage_busy_s"]) / p
        accounted = busy + r["exposed_comm_s"] + r["host_gap_s"]
        if accounted > r["iteration_time_s"] * (1 + 1e-12):
            problems.append(f"{name}: case '{r['name']}': busy time, exposed communication and host gaps exceed the "
                            f"iteration time")
        bubble = max(0.0, 1.0 - accounted / r["iteration_time_s"])
        if abs(bubble - r["bubble_fraction"]) > 1e-9:
            problems.append(f"{name}: case '{r['name']}': bubble_fraction {r['bubble_fraction']!r} is not "
                            f"1 - (busy + exposed + host gaps) / iteration time = {bubble!r}")
    return problems


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    strata, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    quick = "--quick" in sys.argv[3:]
    with open(os.path.join(source, "docs", "results.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    coverage = Coverage(schema)

    runs = []
    for rel in experiments(source):
        simulate = rel in (SIMULATED_QUICK if quick else SIMULATED)
        args = [strata, "run", os.path.join("scenarios", rel)] + ([] if simulate else ["--analytical-only"])
        runs.append((f"{rel} ({'simulated' if simulate else 'analytical'})", args))
    runs.append(("SC21 Table 1, representative replicas", [strata, "run", "scenarios/crosscheck/sc21-table1.yaml",
                                                           "--replicas", "representative"] + (["--case", "1.7B on 32 GPUs"] if quick else [])))
    runs.append(("search 22B on 8 GPUs", [strata, "search", "--model", "scenarios/models/gpt-22b.yaml", "--system",
                                          "scenarios/systems/selene-a100.yaml", "--gpus", "8", "--global-batch", "4"]))
    # One stage and t = 4: every candidate has 2 replicas, so the winner is simulated again in full (best_in_full_s).
    runs.append(("search 22B on 8 GPUs, representative replicas",
                 [strata, "search", "--model", "scenarios/models/gpt-22b.yaml", "--system", "scenarios/systems/selene-a100.yaml",
                  "--gpus", "8", "--global-batch", "4", "--replicas", "representative", "--fix", "tensor=4",
                  "--fix", "pipeline=1"]))
    if len(runs) < 12:
        raise SystemExit(f"results_schema: only {len(runs) - 1} experiment files found under scenarios/")

    problems = []
    simulated_cases = 0
    for name, args in runs:
        start = time.monotonic()
        doc = strata_json(args, source)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors[:20]:
            where = "/".join(str(p) for p in e.absolute_path) or "(document)"
            problems.append(f"{name}: {where}: {e.message}")
        if len(errors) > 20:
            problems.append(f"{name}: ... and {len(errors) - 20} more schema errors")
        if not errors:
            problems += extra_checks(name, doc)
        coverage.visit(schema, "root", doc)
        cases = len(doc["results"])
        simulated_cases += sum("iteration_time_s" in r for r in doc["results"])
        print(f"{name}: {cases} cases, {len(errors)} schema errors ({time.monotonic() - start:.1f} s)")

    unseen = sorted(coverage.described - coverage.seen)
    if unseen:
        problems.append("keys the schema describes but no output wrote (stale schema, or a case missing here): " +
                        ", ".join(unseen))
    if simulated_cases == 0:
        problems.append("no case was simulated: the simulated keys were not checked")
    for p in problems:
        print("FAIL " + p)
    print(f"{len(runs)} documents, {simulated_cases} simulated cases, {len(coverage.described)} keys described: "
          + ("invalid" if problems else "valid"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
