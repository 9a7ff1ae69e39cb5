"""strata: simulate large-transformer training from Python.

    import strata
    exp = strata.load("scenarios/paper/table5.yaml")           # or a dict with the YAML file's keys
    results = strata.run(exp)                                  # the results of `strata run --json`, as dicts
    frame = results.to_dataframe()                             # with pandas installed: one row per case
    best = strata.search(model="scenarios/models/gpt-22b.yaml", system="scenarios/systems/selene-a100.yaml",
                         gpus=8, global_batch=4)
    print(strata.explain(exp, case="175B present work"))

Errors are exceptions: InputError (a bad scenario; .file, .line, .column, .key say where) and SimulationError.
Simulations release the GIL, so Python threads run cases in parallel.
"""
import json
import numbers
import os
import re

__all__ = ["Error", "InputError", "SimulationError", "Experiment", "Results", "load", "run", "search", "explain",
           "to_dataframe"]


class Error(Exception):
    """Any error strata raises on purpose."""


class InputError(Error, ValueError):
    """Bad input: a scenario, part or profile that is missing, malformed or inconsistent.

    file, line, column: where (line and column None when unknown); key: the key named, like
    'execution.microbatch' (None when the message names none)."""

    _where = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): (?P<rest>.*)$", re.S)
    _keyed = re.compile(r"^(?P<key>[A-Za-z_][\w\[\]]*(?:\.[\w\[\]]+)+): ")
    _missing = re.compile(r"^(?P<part>\w+): missing required key '(?P<key>[^']+)'")
    _named = re.compile(r"unknown key '(?P<key>[^']+)'")

    def __init__(self, message):
        super().__init__(message)
        self.file = self.line = self.column = self.key = None
        rest = message
        m = self._where.match(message)
        if m:
            # A failed case's message starts with the case's name: "NAME: FILE:LINE:COL: ...".
            self.file, self.line, self.column = m["file"].rsplit(": ", 1)[-1], int(m["line"]), int(m["column"])
            rest = m["rest"]
        else:
            # "FILE: ..." or "NAME: FILE: ...": the first part that names a file (not "search", "--set '...'").
            parts = message.split(": ", 2)
            for i, part in enumerate(parts[:-1][:2]):
                if self._is_file(part):
                    self.file, rest = part, ": ".join(parts[i + 1:])
                    break
        k = self._keyed.match(rest) or self._named.search(rest)
        missing = self._missing.match(rest)
        if missing:
            self.key = missing["part"] + "." + missing["key"]
        elif k:
            self.key = k["key"]


    @staticmethod
    def _is_file(text):
        return text.endswith((".yaml", ".yml", ".json")) or ("/" in text and " " not in text) or os.path.exists(text)


class SimulationError(Error, RuntimeError):
    """A simulation that could not complete (a stalled task graph)."""


from . import _strata  # noqa: E402  (the exception classes above must exist when the module translates errors)

Experiment = _strata.Experiment


def _dict_text(d):
    # JSON is YAML: the loader reads it and reports errors by line (one key per line with indent).
    return json.dumps(d, indent=1)


def _overrides(overrides):
    if isinstance(overrides, str):  # one override, not its characters
        return [overrides]
    if isinstance(overrides, dict):
        return ["%s=%s" % (k, json.dumps(v) if not isinstance(v, str) else v) for k, v in overrides.items()]
    return [str(o) for o in overrides]


def load(source, base_dir=None, overrides=(), only_case=None):
    """An experiment from a YAML file's path, or from a dict with the same keys (name, model, execution, system,
    cases, sweep). A dict's relative part files (model: ../models/x.yaml) are resolved against base_dir (default:
    the current directory). overrides: as `strata run --set`, strings "PART.KEY=VALUE" or a dict
    {"execution.microbatch": 2, ...}: that key's value in every case, over the source's. only_case: build and check
    that case alone (the others are checked for unknown keys only, so an override need fit only it)."""
    if isinstance(source, Experiment):
        if overrides:
            raise InputError("strata.load: overrides apply to a path or a dict, not to a loaded Experiment")
        return source
    if isinstance(source, (str, os.PathLike)):
        return _strata.load_experiment(os.fspath(source), _overrides(overrides), only_case or "")
    if isinstance(source, dict):
        origin = os.path.join(os.path.abspath(base_dir or os.getcwd()), "<dict>")
        return _strata.load_experiment_text(_dict_text(source), origin, _overrides(overrides), only_case or "")
    raise TypeError("strata.load: expected a path or a dict, got %s" % type(source).__name__)


class Results(list):
    """The results of a run, one dict per case as in `strata run --json` (attribute experiment: its name)."""

    def __init__(self, document):
        super().__init__(document["results"])
        self.experiment = document["experiment"]
        self.document = document

    def to_json(self):
        return json.dumps(self.document)

    def to_dataframe(self):
        return to_dataframe(self)


def to_dataframe(results):
    """A pandas DataFrame, one row per case, nested keys flattened with dots (memory.peak_bytes, ...)."""
    try:
        import pandas
    except ImportError as e:
        raise ImportError("strata.to_dataframe needs pandas (apt-get install python3-pandas); "
                          "the results are plain dicts without it") from e
    return pandas.json_normalize(list(results))


def run(source, case=None, *, analytical_only=False, jobs=0, profile=None, max_tasks=1000, base_dir=None,
        check=True, replicas="all", overrides=()):
    """Runs every case of an experiment (a path, a dict or a loaded Experiment), or only `case`, on `jobs`
    threads (0: one per core). Returns Results. replicas: "all" (every GPU group) or "representative" (each
    stage's data-parallel replicas of replica 0's node only, as `strata run --replicas representative`). A case that cannot be evaluated keeps its place with an 'error'
    key; with check=True a case that failed on bad input or in simulation raises afterwards, as the strata command
    exits non-zero (infeasible sweep combinations are not failures). overrides: as `strata run --set` (see load)."""
    jobs = _int_in("strata.run", "jobs", jobs, 0, 1024)
    max_tasks = _int_in("strata.run", "max_tasks", max_tasks, 1, 100000)
    exp = load(source, base_dir, overrides, case)
    text, failures = _strata.run(exp, case or "", bool(analytical_only), jobs, os.fspath(profile or ""),
                                 max_tasks, _replicas(replicas))
    results = Results(json.loads(text))
    if check and failures:
        bad = [r["name"] + ": " + r["error"] for r in results if "error" in r and not r["error"].startswith("infeasible")]
        cls = SimulationError if failures & _strata.CASE_SIMULATION else InputError if failures == _strata.CASE_BAD_INPUT else Error
        raise cls("; ".join(bad))
    return results


def _int_in(where, name, value, lo, hi):
    """value as an int in [lo, hi], else InputError naming the argument (as the strata command checks its flags)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise InputError("%s: %s=%r: expected an integer in [%d, %d]" % (where, name, value, lo, hi))
    return int(value)


def _float_in(where, name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not lo <= value <= hi:  # NaN fails too
        raise InputError("%s: %s=%r: expected a number in [%g, %g]" % (where, name, value, lo, hi))
    return float(value)


def _replicas(value):
    if value not in ("all", "representative"):
        raise InputError("replicas %r: expected 'all' or 'representative'" % (value,))
    return value == "representative"


def _part(source, kind, base_dir, overrides=()):
    """A model or system from a path or a dict, with the overrides of its part (model.KEY=..., system.KEY=...)."""
    if isinstance(source, (str, os.PathLike)):
        return getattr(_strata, "load_" + kind)(os.fspath(source), list(overrides))
    if isinstance(source, dict):
        origin = os.path.join(os.path.abspath(base_dir or os.getcwd()), "<%s dict>" % kind)
        return getattr(_strata, "load_%s_text" % kind)(_dict_text(source), origin, list(overrides))
    raise TypeError("strata.search: %s: expected a path or a dict" % kind)


def search(model, system, gpus, global_batch, *, attention=None, precision=None, microbatches=(1, 2, 4, 8),
           max_interleave=4, top=10, simulate_top=8, jobs=0, fix=(), margin=10.0, simulate_max=64, max_tasks=1000,
           base_dir=None, replicas="all", gradient_average=None, grad_reduce_in_fp32=None, overrides=()):
    """The fastest executions of `model` (path or dict) on `gpus` GPUs of `system` that fit in memory, as in
    `strata search`. attention: "unfused" (the default), "flash" (the device profile's fused attention) or "flash2"
    (FlashAttention-2's kernels), as `--attention`; precision: "bf16" (the default), "fp16" or "fp8". fix: constraints as `--fix` takes them, a dict ({"tensor": 8, "pipeline": "4..16",
    "recompute": "selective,full", "recompute_modules": "core_attn,mlp"}) or strings ("tensor=8"; module sets join
    their modules with +: "recompute_modules=core_attn+mlp"; offloading likewise, with none for off:
    "offload_modules=none,qkv_linear+core_attn+attn_proj", with Transformer Engine's layers
    (overrides=["execution.transformer_impl=transformer_engine"])); margin: percent of the best estimate within which
    every candidate is simulated (`--margin`); replicas: "all" (every GPU group, the default) or "representative"
    (the data-parallel replicas of replica 0's node only, then rank 1 again in full: search["best_in_full_s"]), as
    `--replicas`; gradient_average: "scale" (Megatron-Core, the default), "scale_always" (Megatron-LM's local DDP
    of 2021-2023, the paper's) or "in_collective", as `--gradient-average`; grad_reduce_in_fp32: False keeps every
    candidate's main gradients and their data-parallel reduction in 16 bits, as `--grad-reduce-in-bf16` (default
    True); overrides: every candidate's value of execution keys the search does not vary, and model and system keys
    over the files', as `--set` (an argument of the four above left out (None) takes an override's value; given
    with an override of its key, it is an error, as a flag with `--set`) ({"execution.cross_entropy": "te", "system.network.routing": "hash"} or ["execution.cross_entropy=te"]). Returns a dict: results (the top candidates, best first, named
    'rank 1', ... as in `strata search --json`, each with its "screen": estimate and ranks), search (the JSON's
    summary), enumerated, screened, rejected (reason -> count), within_margin, simulated, overturned_by (the
    estimate rank of the fastest simulated candidate when not 1, else 0), wall_s. Raises InputError when no candidate is
    feasible and fits (the rejections, or the first infeasible candidate's problem), as `strata search` exits 2.
    With attention left out and no override of it, for a model of today's kind (grouped-query attention, SwiGLU,
    RMSNorm or rotary positions) warns (UserWarning) that every candidate runs the paper's unfused attention, as
    `strata search` notes."""
    if isinstance(fix, dict):
        fix = ["%s=%s" % (k, _fix_value(v)) for k, v in fix.items()]
    elif isinstance(fix, str):
        fix = [fix]
    w = "strata.search"
    gpus, global_batch = _int_in(w, "gpus", gpus, 1, 1 << 20), _int_in(w, "global_batch", global_batch, 1, 1 << 30)
    top, simulate_top = _int_in(w, "top", top, 1, 1000), _int_in(w, "simulate_top", simulate_top, 1, 1000)
    simulate_max, jobs = _int_in(w, "simulate_max", simulate_max, 1, 100000), _int_in(w, "jobs", jobs, 0, 1024)
    max_tasks, margin = _int_in(w, "max_tasks", max_tasks, 1, 100000), _float_in(w, "margin", margin, 0.0, 1000.0)
    max_interleave = _int_in(w, "max_interleave", max_interleave, 1, 1 << 16)
    microbatches = [_int_in(w, "microbatches", b, 1, 1 << 30) for b in microbatches]
    overrides = _overrides(overrides)
    r = _strata.search(_part(model, "model", base_dir, overrides), _part(system, "system", base_dir, overrides), gpus,
                       global_batch, attention, precision, microbatches, max_interleave,
                       simulate_top, top, jobs, [str(f) for f in fix], margin,
                       simulate_max, max_tasks, _replicas(replicas),
                       None if gradient_average is None else str(gradient_average),
                       None if grad_reduce_in_fp32 is None else bool(grad_reduce_in_fp32), overrides)
    doc = json.loads(r.pop("json"))
    r["experiment"] = doc["experiment"]
    r["search"] = doc["search"]
    r["results"] = Results(doc)
    return r


def _fix_value(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (list, tuple)):
        return ",".join(_fix_value(x) for x in v)
    return str(v)


def explain(source, case=None, base_dir=None, overrides=()):
    """One transformer layer's kernels and collectives with their costs (`strata explain`), as text. overrides: as
    `strata explain --set` (see load)."""
    return _strata.explain(load(source, base_dir, overrides, case), case or "")
