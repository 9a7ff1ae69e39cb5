#!/usr/bin/env python3
"""Checks that the build and the code follow the architecture's arrows (README "Layout").

usage: tests/architecture/check.py SOURCE_DIR

One table below holds the arrows: which part may use which. The check fails if
  - a CMake library's strata_* link dependencies differ from its part's arrows,
  - a source file of sim/<part>/ (or of a part outside sim/: python/) includes a strata/ header of a part it has no arrow to (directly or
    through other parts), or a header that no part owns,
  - a sim/ or python/ source file is missing from its part's target (explicit source lists), or a sim/ folder has
    no part,
  - a header in include/strata/ names Boost or yaml-cpp,
  - a sim/ source file is longer than 500 lines without saying why in its opening comment ("longer than").
"""
import os, re, sys

# part -> the parts it uses directly (its CMake link dependencies, strata_<part>).
ARROWS = {
    "common":   [],
    "spec":     ["common"],
    "engine":   ["common"],
    "fabric":   ["engine", "spec"],
    "schedule": ["spec"],
    "model":    ["spec", "schedule"],
    "cost":     ["model"],
    "workload": ["engine", "fabric", "schedule", "model", "cost"],
    "scenario": ["spec"],
    "report":   ["model", "cost"],
    "run":      ["scenario", "workload", "report"],
    "search":   ["workload", "report", "model", "cost", "run"],
    "mpi":      ["run"],
    "cli":      ["scenario", "run", "mpi", "search", "report", "workload"],
    "python":   ["scenario", "run", "search", "report"],
}
# Parts outside sim/: folder, and the CMake target (when it is not strata_<part>).
FOLDERS = {"python": "python"}
TARGETS = {"cli": "strata"}
# public header -> the part that owns it. metrics.hpp holds neutral records (no code): common.
OWNER = {
    "units.hpp": "common", "errors.hpp": "common", "parallel.hpp": "common", "metrics.hpp": "common",
    "spec.hpp": "spec", "collective.hpp": "spec", "profile.hpp": "spec",
    "engine.hpp": "engine",
    "fabric.hpp": "fabric",
    "schedule.hpp": "schedule",
    "layer.hpp": "model", "memory.hpp": "model",
    "cost.hpp": "cost", "power.hpp": "cost",
    "simulate.hpp": "workload",
    "scenario.hpp": "scenario",
    "report.hpp": "report",
    "search.hpp": "search",
    "run.hpp": "run",
    "mpi.hpp": "mpi",
}
MAX_LINES = 500


def closure(part):
    seen, todo = set(), [part]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += ARROWS[p]
    return seen


def cmake_targets(text):
    """strata_<part> -> (sources, strata_* dependencies) from add_library / add_executable and
    target_link_libraries calls."""
    targets = {}
    for m in re.finditer(r"(?:add_library|add_executable|pybind11_add_module)\((\w+)\s+(?:STATIC\s+|INTERFACE\s*|MODULE\s+)?([^)]*)\)", text):
        targets.setdefault(m.group(1), [set(), set()])[0].update(
            s for s in m.group(2).split() if s.startswith(("sim/", "python/")))
    for m in re.finditer(r"target_link_libraries\((\w+)\s+([^)]*)\)", text):
        if m.group(1) in targets:
            targets[m.group(1)][1].update(re.findall(r"\bstrata_(\w+)", m.group(2)))
    return targets


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    root = argv[1]
    problems = []
    text = open(os.path.join(root, "CMakeLists.txt")).read()
    targets = cmake_targets(text)
    for part, deps in ARROWS.items():
        name = TARGETS.get(part, "strata_" + part)
        if name not in targets:
            problems.append(f"CMakeLists.txt: no target {name} for part '{part}'")
            continue
        declared = targets[name][1] - {"warnings"}
        if declared != set(deps):
            problems.append(f"CMakeLists.txt: {name} links {sorted(declared)}, the arrows say {sorted(deps)}")
    listed = set().union(*(t[0] for t in targets.values()))

    sim = os.path.join(root, "sim")
    folders = [(f, f"sim/{f}") for f in sorted(os.listdir(sim))] + [(p, d) for p, d in FOLDERS.items()]
    for folder, path in folders:
        if folder not in ARROWS:
            problems.append(f"{path}/: a folder that is no part of the architecture (add it to the table)")
            continue
        allowed = closure(folder)
        for fname in sorted(os.listdir(os.path.join(root, path))):
            rel = f"{path}/{fname}"
            if os.path.isdir(os.path.join(root, rel)):
                continue
            lines = open(os.path.join(root, rel)).read().splitlines()
            if fname.endswith(".cpp") and rel not in listed:
                problems.append(f"{rel}: not in any CMake target's source list")
            if path.startswith("sim/") and len(lines) > MAX_LINES and not any("longer than" in l for l in lines[:30] if l.startswith("//")):
                problems.append(f"{rel}: {len(lines)} lines (over {MAX_LINES}) and no reason in its opening comment")
            for n, line in enumerate(lines, 1):
                m = re.match(r'\s*#\s*include\s+"strata/([\w.]+)"', line)
                if not m:
                    continue
                owner = OWNER.get(m.group(1))
                if owner is None:
                    problems.append(f"{rel}:{n}: strata/{m.group(1)} has no owning part in the table")
                elif owner not in allowed:
                    problems.append(f"{rel}:{n}: part '{folder}' includes strata/{m.group(1)} of part '{owner}' "
                                    f"without an arrow ({folder} -> {' / '.join(sorted(allowed - {folder})) or 'nothing'})")
    inc = os.path.join(root, "include", "strata")
    for fname in sorted(os.listdir(inc)):
        if fname not in OWNER:
            problems.append(f"include/strata/{fname}: no owning part in the table")
        body = open(os.path.join(inc, fname)).read()
        if re.search(r'#\s*include\s*[<"](boost|yaml-cpp)/', body):
            problems.append(f"include/strata/{fname}: a public header includes Boost or yaml-cpp")
    for p in problems:
        print(p)
    print(f"architecture: {len(ARROWS)} parts, {sum(len(d) for d in ARROWS.values())} arrows, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
