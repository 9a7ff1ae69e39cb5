# Sourced by the shell test scripts (tests/cli/*.sh, tests/mpi/*.sh) after they set `strata` (made absolute here
# when given relative to the current folder): `root` (the repository), `tmp` (a folder
# removed on exit), `check NAME CONDITION` (evaluates CONDITION, counts it, names it when it fails) and
# `finish [PREFIX]` (prints the counts and exits 0 only when every check passed and at least one ran).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# A program path given relative to the caller's folder stays valid after a `cd` (tests run commands in $tmp).
if [[ -n "${strata:-}" && $strata == */* && $strata != /* ]]; then strata=$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata"); fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $1"; fi; }
finish() { echo "${1:+$1: }$pass passed, $fail failed"; [[ $fail -eq 0 && $pass -gt 0 ]]; exit $?; }
