#!/usr/bin/env bash
# The strata command under mpirun with 2 ranks on this machine: a sweep and a search spread over the ranks
# (each rank evaluates some), and write output byte-identical to a single-process run; an unwritable output
# stops every rank with exit code 2 (no rank left waiting).
# usage: tests/mpi/mpi_test.sh path/to/strata path/to/mpirun [SWEEP.yaml]
#   SWEEP: default scenarios/sweeps/microbatch.yaml (20 cases); the sanitizer build passes a lighter one
set -u
strata=$1
mpirun=$2
source "$(dirname "$0")/../check.sh"
flags=(-n 2 --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none   # containers often forbid the cross-memory attach
mpi() { timeout 300 "$mpirun" "${flags[@]}" "$strata" "$@"; }

sweep=${3:-$root/scenarios/sweeps/microbatch.yaml}
cases=$(grep -c "^" <("$strata" run "$sweep" --analytical-only --csv - 2>/dev/null | tail -n +2))
mkdir "$tmp/one" "$tmp/two"
(cd "$tmp/one" && "$strata" run "$sweep" --jobs 1 --json s.json --csv s.csv >table 2>err); rc1=$?
(cd "$tmp/two" && mpi run "$sweep" --json s.json --csv s.csv >table 2>err); rc2=$?
check "sweep runs in one process and on 2 ranks" '[[ $rc1 -eq 0 && $rc2 -eq 0 ]]'
check "sweep JSON byte-identical" 'cmp "$tmp/one/s.json" "$tmp/two/s.json"'
check "sweep CSV byte-identical" 'cmp "$tmp/one/s.csv" "$tmp/two/s.csv"'
check "table byte-identical (printed once, by rank 0)" 'cmp "$tmp/one/table" "$tmp/two/table"'
check "JSON has all $cases cases" '[[ $cases -gt 2 && $(grep -c "\"name\": \"microbatch=" "$tmp/two/s.json") -eq $cases ]]'
check "both ranks evaluated cases" 'grep -Eq "mpi: 2 ranks, cases per rank: [1-9][0-9]* [1-9][0-9]*$" "$tmp/two/err"'
check "rank 0 shows progress" 'grep -q "progress: $cases/$cases cases on 2 ranks" "$tmp/two/err"'

# Enough candidates (16, about 0.5 s on one core) that rank 0's own thread cannot finish them all before the other
# rank's first request arrives: cases are handed out on request (with 4 candidates of a few ms each it sometimes did).
search=(search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml"
        --gpus 64 --global-batch 64 --simulate-top 16 --top 4)
"$strata" "${search[@]}" --jobs 1 --json "$tmp/one/search.json" >"$tmp/one/search.out" 2>&1; rc1=$?
mpi "${search[@]}" --json "$tmp/two/search.json" >"$tmp/two/search.out" 2>"$tmp/two/search.err"; rc2=$?
check "search runs in one process and on 2 ranks" '[[ $rc1 -eq 0 && $rc2 -eq 0 ]]'
check "search JSON byte-identical" 'cmp "$tmp/one/search.json" "$tmp/two/search.json"'
check "search ranking printed once, identical" 'diff <(grep -v "search took\|wrote" "$tmp/one/search.out") <(grep -v "search took\|wrote" "$tmp/two/search.out")'
check "both ranks simulated candidates" 'grep -Eq "cases per rank: [1-9][0-9]* [1-9][0-9]*$" "$tmp/two/search.err"'
# With representative replicas the search runs a second, collective step (rank 1 again in full).
"$strata" "${search[@]}" --replicas representative --jobs 1 --json "$tmp/one/rsearch.json" >/dev/null 2>&1; rc1=$?
mpi "${search[@]}" --replicas representative --json "$tmp/two/rsearch.json" >"$tmp/two/rsearch.out" 2>/dev/null; rc2=$?
check "representative search: one process and 2 ranks, JSON byte-identical, rank 1 again in full" '[[ $rc1 -eq 0 && $rc2 -eq 0 ]] && cmp "$tmp/one/rsearch.json" "$tmp/two/rsearch.json" && grep -q "best_in_full_s" "$tmp/two/rsearch.json" && grep -q "rank 1 again with every GPU group" "$tmp/two/rsearch.out"'

unwritable() {
    mpi run "$sweep" --json "$tmp/no/such/dir/s.json" >/dev/null 2>"$tmp/err"; rc=$?
    [[ $rc -eq 2 ]] && grep -q "cannot be written" "$tmp/err"
}
# Once in CI (session 28, a fresh clone's first ctest run beside other tests) this check failed and 28 runs by hand,
# under load, did not repeat it: Open MPI's mpirun aborts a job when a rank exits non-zero and can drop the last output
# of another. Only that case (exit 2, the message missing) gets a second try, with what the first gave printed; a
# hang (124) or another exit code fails at once.
if ! unwritable && [[ $rc -eq 2 ]]; then
    echo "unwritable output, first try: exit 2 without the message; stderr:"
    cat "$tmp/err"
    unwritable
fi
check "unwritable output: exit 2 on every rank, no hang" '[[ $rc -eq 2 ]] && grep -q "cannot be written" "$tmp/err"'
finish mpi
