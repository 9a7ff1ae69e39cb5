"""What the validation-table scripts share (tokens-table.py, megatron-h100-table.py, crosscheck-table.py,
validation-table.py, recompute-validation.py): the published figures (plots/paper_values.json), reading a results file with a clear message
when it cannot be read, the checks that it holds the cases of a table's scenario, and the summary line of the signed
errors. Validation only: nothing in strata is fitted to these figures."""
import json
import os

PUBLISHED = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "..", "plots", "paper_values.json")))


def wants_help(argv):
    """True when the command line asks for the usage (-h or --help)."""
    return any(a in ("-h", "--help") for a in argv[1:])


def read_results(path):
    """(the results file's JSON, None), or (None, the message) when `path` cannot be read, is not JSON, or is not
    `strata run --json` output (a "results" list)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        return None, f"{path}: cannot read it: {e.strerror}"
    except json.JSONDecodeError as e:
        return None, f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})"
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        return None, f"{path}: not a strata results file (expected `strata run FILE --json {path}` output)"
    return doc, None


def count_problem(results, expected, source):
    """None when `results` holds the `expected` cases of `source`, else the message."""
    if len(results) == expected:
        return None
    return f"expected the {expected} cases of {source}, got {len(results)}"


def row_problem(r, width, gpus=None):
    """None when case `r` ran (and on `gpus` GPUs, when given), else the line to print."""
    if "error" in r:
        return f"{r['name']:<{width}} error: {r['error']}"
    if gpus is not None and r["execution"]["gpus"] != gpus:
        return f"{r['name']}: {r['execution']['gpus']} GPUs, the published row has {gpus}"
    return None


def summary(errs, what="rows"):
    """Mean absolute, worst and mean signed error over the rows (fractions), as the tables print it."""
    return (f"mean |error| {100*sum(abs(x) for x in errs)/len(errs):.2f}%, worst {100*max(abs(x) for x in errs):.2f}%, "
            f"mean signed {100*sum(errs)/len(errs):+.2f}% over {len(errs)} {what}")
