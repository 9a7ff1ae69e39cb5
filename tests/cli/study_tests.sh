#!/usr/bin/env bash
# The paper's question on today's models (scripts/recompute-today.py, README): the claims its table is read for, on the
# study's two quick cases (eighteen searches). Apart from tests/cli/cli_tests.sh so that CTest runs the two side by
# side; not run under the sanitizers (minutes there; the Release pass runs it, and fuzz_search and the CLI checks
# take the search through ASan and UBSan).
# usage: tests/cli/study_tests.sh path/to/strata
set -u
strata=$1
source "$(dirname "$0")/../check.sh"

# The paper's question on today's models (scripts/recompute-today.py, README): the claims its table is read for.
python3 "$root/scripts/recompute-today.py" --strata "$strata" --quick --plot "$tmp/recompute.png" >"$tmp/recompute.md" 2>"$tmp/err"; rc=$?
check "recompute-today --plot draws the policies against the search's best" '[[ $rc -eq 0 ]] && [[ "$(head -c 4 "$tmp/recompute.png" | tail -c 3)" == PNG ]] && grep -q "^wrote .*recompute.png$" "$tmp/err"'
check "recompute-today: five recompute policies, two with offloading and the search over all, with Megatron-FSDP too; with FlashAttention the paper's selective recompute saves no memory and costs time, full costs most, offloading lets a faster layout fit, the search finds the fastest" '[[ $rc -eq 0 ]] && python3 -c "
import sys
rows = [[c.strip() for c in l.split(\"|\")[1:-1]] for l in open(sys.argv[1]) if l.startswith(\"| Llama\")]
assert [r[2] for r in rows[:7]] == [\"none\", \"selective: attention core\", \"selective: MLP\", \"full\", \"block: full, fewest layers\", \"offload: qkv + attention\", \"offload + selective: MLP\"], rows
assert len(rows) == 9 and rows[7][2].startswith(\"searched: \") and rows[8][2].startswith(\"searched, with FSDP: \"), rows
t = [float(r[3]) for r in rows]; peak = [float(r[6]) for r in rows]
assert abs(peak[1] - peak[0]) <= 0.1 and t[1] > t[0] and t[3] == max(t[:8]) and t[4] < t[3] and t[5] < t[0], rows
assert t[7] <= min(t[:7]) * 1.005 and t[8] <= t[7] * 1.005, rows
" "$tmp/recompute.md"'
python3 "$root/scripts/recompute-today.py" --strata "$strata" --quick-long >"$tmp/recompute-long.md" 2>"$tmp/err"; rc=$?
check "recompute-today at 128k tokens on 64 GPUs: without recompute (or the paper's, or offloading alone) nothing fits; recomputing the MLP fits, faster than full or block; offloading beside it faster still, and what the search over every policy picks" '[[ $rc -eq 0 ]] && python3 -c "
import sys
rows = [[c.strip() for c in l.split(\"|\")[1:-1]] for l in open(sys.argv[1]) if l.startswith(\"| Llama\")]
assert [r[0] for r in rows] == [\"Llama 3 70B, 64, 16 x 128k\"] * 9, rows
assert rows[0][7] == rows[1][7] == rows[5][7] == \"out of memory\", rows
assert \" c\" in rows[2][7] and float(rows[2][3]) < float(rows[3][3]) and float(rows[2][3]) < float(rows[4][3]), rows
assert float(rows[6][3]) < float(rows[2][3]), rows
assert rows[7][2] == \"searched: offload + selective: MLP\" and rows[7][3] == rows[6][3], rows
assert rows[8][2].startswith(\"searched, with FSDP: \") and float(rows[8][3]) <= float(rows[7][3]) * 1.005, rows
" "$tmp/recompute-long.md"'

finish study
