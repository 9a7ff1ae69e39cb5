#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then: a project outside the tree finds the package
# (find_package(strata) -> strata::strata), builds, runs a shipped scenario and gets the iteration time the
# build's own strata command reports; the installed strata finds the installed plotting script.
# usage: tests/install/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/strata share/strata/plots/make_plots.py share/strata/plots/paper_values.json \
         share/strata/scenarios/paper/table4.yaml include/strata/run.hpp lib/cmake/strata/strataConfig.cmake \
         share/doc/strata/README.md; do
  [[ -e $prefix/$f ]] || { echo "FAILED: $f not installed"; exit 1; }
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
case="selective + sequence"
got=$("$tmp/consumer/consumer" "$prefix/share/strata/scenarios/paper/table4.yaml" "$case")
echo "consumer: $got"
want=$("$build/strata" run "$src/scenarios/paper/table4.yaml" --case "$case" --json - 2>/dev/null |
       python3 -c 'import json,sys; print("%.6f" % json.load(sys.stdin)["results"][0]["iteration_time_s"])')
[[ $got == "$case: iteration $want s, "* ]] || { echo "FAILED: consumer says '$got', strata says $want s"; exit 1; }
# The installed binary must use the installed plotting script (a stub here that leaves a mark), not the source tree's.
printf 'import sys\nopen(sys.argv[sys.argv.index("--out") + 1] + "/installed-script-ran", "w").close()\n' \
  >"$prefix/share/strata/plots/make_plots.py"
mkdir "$tmp/plots"
"$prefix/bin/strata" plot --out "$tmp/plots"
[[ -e $tmp/plots/installed-script-ran ]] || { echo "FAILED: installed strata did not run the installed plot script"; exit 1; }
# The Python package, when built, imports from the installed tree and runs a case.
if [[ -e $build/python/strata/__init__.py ]]; then
  PYTHONPATH=$prefix/lib/python3/dist-packages /usr/bin/python3 -c '
import sys, strata
assert strata.__file__.startswith(sys.argv[1]), strata.__file__
r = strata.run(sys.argv[2], case="selective + sequence")
print("python: %.6f s" % r[0]["iteration_time_s"])' "$prefix" "$prefix/share/strata/scenarios/paper/table4.yaml" >"$tmp/py" ||
    { echo "FAILED: the installed Python package"; exit 1; }
  cat "$tmp/py"
  [[ $(cat "$tmp/py") == "python: $want s" ]] || { echo "FAILED: installed Python says $(cat "$tmp/py"), strata $want s"; exit 1; }
fi
echo "install: ok"
