#!/usr/bin/env bash
# `strata plot` on results files and directories (plots/make_plots.py, python3 + matplotlib): the figures each kind
# of file gives, the message and exit status 2 when nothing can be plotted, and where the script is found.
# usage: tests/cli/plot_tests.sh path/to/strata sweep|search|timeline|directory|hopper|unrecognised|script
# Exit 77 (CTest SKIP_RETURN_CODE) when a test that draws finds no matplotlib; scripts/install-deps installs it.
set -u
strata=$1
what=$2
source "$(dirname "$0")/../check.sh"
is_png() { [[ -s $1 ]] && [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; }
is_svg() { [[ -s $1 ]] && head -c 2000 "$1" | grep -q "<svg"; }
# A build outside the source tree cannot find plots/ above itself: point it there.
[[ $(cd "$(dirname "$strata")" && pwd) == "$root"/* ]] || export STRATA_PLOTS=$root/plots

if [[ $what == script ]]; then
  # No matplotlib needed: a stub script stands in for make_plots.py.
  check "the binary holds no path of the source tree's plots/" '! grep -q -a "$root/plots" "$strata"'
  mkdir "$tmp/stub" "$tmp/bin"
  printf 'import sys\nopen(sys.argv[sys.argv.index("--out") + 1] + "/stub-ran", "w").write(" ".join(sys.argv[1:]))\n' \
    >"$tmp/stub/make_plots.py"
  STRATA_PLOTS=$tmp/stub "$strata" plot "$tmp/a.json" --out "$tmp" --format svg; rc=$?
  check "STRATA_PLOTS names the script's folder" '[[ $rc -eq 0 ]] && grep -q "a.json --out $tmp --format svg" "$tmp/stub-ran"'
  STRATA_PLOTS=$tmp/nowhere "$strata" plot "$tmp/a.json" >/dev/null 2>"$tmp/err"; rc=$?
  check "a STRATA_PLOTS without the script exits 2 and names it" '[[ $rc -eq 2 ]] && grep -q "STRATA_PLOTS=$tmp/nowhere" "$tmp/err"'
  cp "$strata" "$tmp/bin/strata"
  (unset STRATA_PLOTS; "$tmp/bin/strata" plot "$tmp/a.json" >/dev/null 2>"$tmp/err"); rc=$?
  check "without the script nearby: exit 2 and every place looked" \
    '[[ $rc -eq 2 ]] && grep -q "looked in:" "$tmp/err" && grep -q "^  $tmp/share/strata/plots/make_plots.py$" "$tmp/err" && grep -q "^  $tmp/bin/plots/make_plots.py$" "$tmp/err" && grep -q "^  $tmp/plots/make_plots.py$" "$tmp/err"'
  finish
fi

# Telling what a file is needs no matplotlib (the unrecognised test runs without it); drawing does.
if [[ $what != unrecognised ]] && ! python3 -c "import matplotlib" 2>/dev/null &&
   ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  echo "matplotlib is missing (apt-get install python3-matplotlib): skipped"
  exit 77
fi
small=$root/tests/data/valid/mpi-sweep.yaml   # 12 cases, a few hundredths of a second each
m22=$root/scenarios/models/gpt-22b.yaml
sel=$root/scenarios/systems/selene-a100.yaml
case $what in
  sweep)
    "$strata" run "$small" --json "$tmp/s.json" >/dev/null; rc=$?
    check "the sweep runs" '[[ $rc -eq 0 ]]'
    "$strata" plot "$tmp/s.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "a sweep plots with exit 0" '[[ $rc -eq 0 ]]'
    for f in s-sweep s-memory; do
      check "$f.png written next to the input" 'is_png "$tmp/$f.png"'
      check "$f.svg written next to the input" 'is_svg "$tmp/$f.svg"'
      check "$f.png is listed" 'grep -qx "$tmp/$f.png" "$tmp/out"'
    done
    check "a sweep gives no per-case bar chart" '[[ ! -e $tmp/s-cases.png ]]'
    touch "$tmp/a-file"
    "$strata" plot "$tmp/s.json" --out "$tmp/a-file" >/dev/null 2>"$tmp/err"; rc=$?
    check "an --out that is a file exits 2 naming it, no traceback" '[[ $rc -eq 2 ]] && grep -q "out $tmp/a-file: cannot create" "$tmp/err" && ! grep -q Traceback "$tmp/err"'
    ;;
  search)
    "$strata" search --model "$m22" --system "$sel" --gpus 8 --global-batch 8 --simulate-top 4 --margin 0 \
      --json "$tmp/found.json" >/dev/null; rc=$?
    check "the search runs" '[[ $rc -eq 0 ]]'
    mkdir "$tmp/figs"
    "$strata" plot "$tmp/found.json" --out "$tmp/figs" --format png,svg >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "a search plots with exit 0 into --out" '[[ $rc -eq 0 ]] && is_png "$tmp/figs/found-search.png" && is_svg "$tmp/figs/found-search.svg"'
    check "a search gives only the search figure" '[[ $(ls "$tmp/figs" | wc -l) -eq 2 ]]'
    ;;
  timeline)
    "$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" --timeline "$tmp/tl.json" \
      --json "$tmp/one.json" >/dev/null; rc=$?
    check "the case runs" '[[ $rc -eq 0 ]]'
    "$strata" plot "$tmp/tl.json" "$tmp/one.json" --format png >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "a timeline and a single run plot with exit 0" '[[ $rc -eq 0 ]]'
    check "the timeline gives the per-stage Gantt chart" 'is_png "$tmp/tl-timeline.png"'
    check "the timeline gives the memory over time" 'is_png "$tmp/tl-memory_timeline.png"'
    check "a single run gives its memory by stage, no per-case figure" 'is_png "$tmp/one-memory.png" && [[ ! -e $tmp/one-cases.png && ! -e $tmp/one-sweep.png ]]'
    check "--format png writes no SVG" '! ls "$tmp"/*.svg >/dev/null 2>&1'
    ;;
  directory)
    d=$tmp/results
    mkdir "$d"
    "$strata" run "$small" --json "$d/sweep-small.json" >/dev/null &&
      "$strata" run "$root/scenarios/paper/table2.yaml" --analytical-only --json "$d/table2.json" >/dev/null &&
      "$strata" search --model "$m22" --system "$sel" --gpus 8 --global-batch 8 --simulate-top 2 --margin 0 \
        --json "$d/search.json" >/dev/null &&
      "$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" --timeline "$d/tl.json" \
        --trace "$d/trace.json" >/dev/null; rc=$?
    check "the inputs are written" '[[ $rc -eq 0 ]]'
    echo "not json" >"$d/notes.json"
    echo "a,b" >"$d/table.csv"
    "$strata" plot "$d" --format png >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "a directory plots with exit 0 although some files are not results" '[[ $rc -eq 0 ]]'
    for f in sweep-small-sweep sweep-small-memory table2-cases table2-memory search-search tl-timeline tl-memory_timeline; do
      check "$f.png written in the directory" 'is_png "$d/$f.png"'
    done
    check "exactly these figures" '[[ $(ls "$d"/*.png | wc -l) -eq 7 ]]'
    check "the Chrome trace is named and pointed to Perfetto" 'grep -q "trace.json: not plotted: a Chrome trace" "$tmp/err"'
    check "a .json that is not JSON is named" 'grep -q "notes.json: not plotted: not JSON" "$tmp/err"'
    check "files not ending in .json are left alone" '! grep -q "table.csv" "$tmp/err"'
    check "the paper figures are named as missing their other files" 'grep -q "the paper.s figures need table5.json, table2.json, timeline.json (missing: table5.json, timeline.json)" "$tmp/out"'
    ;;
  hopper)
    # A directory with the Hopper validation results: the Hopper validation figure (it needs none of the paper's
    # files) beside each file's own figures.
    d=$tmp/hopper
    mkdir "$d"
    # NeMo's table alone (a fifth of a second; Megatron-Bridge's 1,024-GPU row takes minutes under the sanitizers).
    "$strata" run "$root/scenarios/validation/nemo-h100.yaml" --json "$d/nemo-h100.json" >/dev/null
    rc=$?
    check "the inputs are written" '[[ $rc -eq 0 ]]'
    "$strata" plot "$d" --format png >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "the directory plots with exit 0" '[[ $rc -eq 0 ]]'
    check "the Hopper validation figure is written" 'is_png "$d/validation_hopper.png" && grep -qx "$d/validation_hopper.png" "$tmp/out"'
    check "the table is also plotted as results" 'is_png "$d/nemo-h100-memory.png"'
    check "the missing tables are no error" '! grep -q "megatron-h100.json\|megatron-bridge-h100.json" "$tmp/err"'
    rm "$d"/*.png
    python3 - "$d/nemo-h100.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["results"] = d["results"][:-1]
json.dump(d, open(sys.argv[1], "w"))
PY
    "$strata" plot "$d" --format png >"$tmp/out" 2>"$tmp/err"
    check "a results file that does not match its published table is named with both" \
      'grep -q "NeMo (tokens/s, FP8): 10 results, expected the 11 published rows of nemo_h100" "$tmp/err" && [[ ! -e $d/validation_hopper.png ]]'
    ;;
  unrecognised)
    printf '{"name": "not strata", "values": [1, 2]}\n' >"$tmp/other.json"
    "$strata" plot "$tmp/other.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
    check "an unrecognised file exits 2" '[[ $rc -eq 2 ]]'
    check "the message names the file and why" 'grep -q "other.json: not plotted: JSON, but not strata.s" "$tmp/err"'
    check "the message lists what is recognised" 'grep -q "recognised: .strata run --json. results" "$tmp/err" && grep -q "strata search --json" "$tmp/err" && grep -q "strata run --timeline" "$tmp/err"'
    check "nothing is written" '[[ $(ls "$tmp" | grep -c -v -x -e err -e out -e other.json) -eq 0 ]]'
    mkdir "$tmp/none"
    "$strata" plot "$tmp/none" >/dev/null 2>"$tmp/err"; rc=$?
    check "an empty directory exits 2 and names the paper's files" '[[ $rc -eq 2 ]] && grep -q "no .json file in it" "$tmp/err" && grep -q "table5.json" "$tmp/err"'
    "$strata" plot "$tmp/missing.json" >/dev/null 2>"$tmp/err"; rc=$?
    check "a missing file exits 2 and is named" '[[ $rc -eq 2 ]] && grep -q "missing.json: no such file or directory" "$tmp/err"'
    ;;
  *) echo "unknown test $what"; exit 2 ;;
esac
finish
