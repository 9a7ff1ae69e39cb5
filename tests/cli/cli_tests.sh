#!/usr/bin/env bash
# Command-line behaviour: exit codes, deterministic output whatever the thread count, files written.
# usage: tests/cli/cli_tests.sh path/to/strata
set -u
strata=$1
source "$(dirname "$0")/../check.sh"

"$strata" run "$root/tests/data/bad/unknown_execution_key.yaml" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bad input exits with 2" '[[ $rc -eq 2 ]]'
check "bad input message names file and line" 'grep -q "unknown_execution_key.yaml:[0-9]*:[0-9]*:" "$tmp/err"'
"$strata" run "$tmp/missing.yaml" >/dev/null 2>"$tmp/err"; rc=$?
check "missing file exits with 2" '[[ $rc -eq 2 ]]'
check "missing file is named" 'grep -q "missing.yaml: file not found" "$tmp/err"'
"$strata" run >/dev/null 2>&1; rc=$?
check "missing argument exits with 2" '[[ $rc -eq 2 ]]'
"$strata" run "$root/scenarios/paper/table4.yaml" --case "no such case" >/dev/null 2>"$tmp/err"; rc=$?
check "unknown case exits with 2 and lists the cases" '[[ $rc -eq 2 ]] && grep -q "selective + sequence" "$tmp/err"'

# Bad input (issue 15): exit 2 with file:line:col, never a signal, a hang or an exhausted memory.
cp "$root/tests/data/valid/model-small.yaml" "$root/tests/data/valid/system-small.yaml" "$root/tests/data/valid/profile-small.yaml" "$tmp/"
printf 'model: model-small.yaml\nsystem: system-small.yaml\nexecution: {tensor: 1, pipeline: 1, recompute: full, microbatch: 65536, data: 65536, global_batch: 65536}\n' >"$tmp/fpe.yaml"
"$strata" run "$tmp/fpe.yaml" >/dev/null 2>"$tmp/err"; rc=$?
check "microbatch x data overflowing int exits 2 at the key (was SIGFPE)" '[[ $rc -eq 2 ]] && grep -q "fpe.yaml:3:[0-9]*: execution.global_batch" "$tmp/err"'
python3 - "$tmp/laughs.yaml" <<"PY"
import sys
lines = ["model: model-small.yaml", "system: system-small.yaml", "execution:", "  a0: &a0 {x: 1, y: 2, z: 3}"]
lines += [f"  a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i-1}" for j in range(10)) + "}" for i in range(1, 9)]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
timeout 10 "$strata" run "$tmp/laughs.yaml" >/dev/null 2>"$tmp/err"; rc=$?
check "alias expansion (billion laughs) exits 2 at once" '[[ $rc -eq 2 ]] && grep -q "laughs.yaml:[0-9]*:[0-9]*: more than" "$tmp/err"'
printf 'model: /dev/zero\nsystem: system-small.yaml\n' >"$tmp/zero.yaml"
timeout 10 "$strata" run "$tmp/zero.yaml" >/dev/null 2>"$tmp/err"; rc=$?
check "a part naming /dev/zero exits 2" '[[ $rc -eq 2 ]] && grep -q "not a regular file" "$tmp/err"'

"$strata" run "$root/scenarios/sweeps/oversubscription.yaml" --analytical-only >"$tmp/out" 2>&1; rc=$?
check "the table shows a sweep case's whole name (was cut at 48 characters)" '[[ $rc -eq 0 ]] && grep -q "^network.nodes_per_leaf=2, network.oversubscription=4 " "$tmp/out"'
"$strata" run "$root/scenarios/bench/scaling.yaml" --case "1T 2048 GPUs (d=4)" >/dev/null 2>"$tmp/err"; rc=$?
check "a long case off a terminal prints a progress line at every tenth" '[[ $rc -eq 0 && $(grep -c "^progress: 1T 2048 GPUs (d=4): [1-9]0% of [0-9]* tasks, simulated" "$tmp/err") -eq 9 ]]'
"$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" >/dev/null 2>"$tmp/err"; rc=$?
check "a short case off a terminal prints no progress" '[[ $rc -eq 0 ]] && ! grep -q "^progress:" "$tmp/err"'
"$strata" bench "$root/scenarios/sweeps/microbatch.yaml" >"$tmp/out" 2>&1; rc=$?
check "bench lists a sweep's infeasible combinations and times the rest (exited 2 at the first)" '[[ $rc -eq 0 ]] && grep -q "^microbatch=8, interleave=5 *infeasible: execution.pipeline" "$tmp/out" && grep -q "^total:" "$tmp/out"'
# --set: a key's value in every case, over the file's; a wrong one exits 2 naming the override.
"$strata" run "$root/scenarios/paper/table4.yaml" --analytical-only --set execution.microbatch=2 --set execution.microbatch=4 >/dev/null 2>"$tmp/err"; rc=$?
check "one key set twice exits 2 naming both (the last won silently)" '[[ $rc -eq 2 ]] && grep -q "execution.microbatch is set twice (also --set .execution.microbatch=2.): keep one" "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --case "baseline no recompute" --analytical-only --json "$tmp/set0.json" >/dev/null 2>&1
"$strata" run "$root/scenarios/paper/table4.yaml" --case "baseline no recompute" --analytical-only --set model.layers=24 \
    --set execution.recompute=full --json "$tmp/set1.json" >/dev/null 2>&1; rc=$?
check "--set overrides model and execution keys in the cases" '[[ $rc -eq 0 ]] && python3 -c "
import json, sys
a, b = (json.load(open(f))[\"results\"][0] for f in sys.argv[1:])
assert a[\"model\"][\"layers\"] == 48 and b[\"model\"][\"layers\"] == 24
assert a[\"execution\"][\"recompute\"] == \"none\" and b[\"execution\"][\"recompute\"] == \"full\"" "$tmp/set0.json" "$tmp/set1.json"'
# With --case the override need fit only that case: 92 layers over 4 stages fit interleave 23, the other rows do not.
"$strata" run "$root/scenarios/validation/megatron-h100.yaml" --set execution.interleave=23 >/dev/null 2>"$tmp/err"; rc=$?
check "an override that does not fit a case exits 2 naming it" '[[ $rc -eq 2 ]] && grep -q "must be divisible by pipeline x interleave" "$tmp/err"'
"$strata" run "$root/scenarios/validation/megatron-h100.yaml" --case "119B on 1536" --analytical-only --set execution.interleave=23 \
    --json "$tmp/case-set.json" >/dev/null 2>"$tmp/err"; rc=$?
check "--case with --set builds and checks only that case" '[[ $rc -eq 0 ]] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[\"results\"]
assert len(r) == 1 and r[0][\"name\"] == \"119B on 1536\" and r[0][\"execution\"][\"interleave\"] == 23" "$tmp/case-set.json"'
"$strata" run "$root/scenarios/validation/megatron-h100.yaml" --case "no such case" --set execution.interleave=23 >/dev/null 2>"$tmp/err"; rc=$?
check "an unknown case with --set still lists the cases" '[[ $rc -eq 2 ]] && grep -q "no case named .no such case.; the cases are: .1.7B on 48., .7.1B on 96." "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --set execution.microbach=2 >/dev/null 2>"$tmp/err"; rc=$?
check "a misspelt --set key exits 2 with a hint" '[[ $rc -eq 2 ]] && grep -q "^error: --set .execution.microbach=2.: unknown execution key .microbach.. Did you mean .microbatch." "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --set execution.microbatch=abc >/dev/null 2>"$tmp/err"; rc=$?
check "a bad --set value exits 2 at the override" '[[ $rc -eq 2 ]] && grep -q "execution.microbatch=abc.:1:[0-9]*: execution.microbatch: expected an integer" "$tmp/err"'

"$strata" run "$root/scenarios/paper/table4.yaml" --replicas some >/dev/null 2>"$tmp/err"; rc=$?
check "a bad --replicas exits 2 naming the choices" '[[ $rc -eq 2 ]] && grep -q "all, representative\|{all,representative}" "$tmp/err"'
"$strata" run "$root/scenarios/crosscheck/sc21-table1.yaml" --case "1.7B on 32 GPUs" --replicas representative >"$tmp/rep.txt" 2>&1; rc=$?
check "--replicas representative marks its rows and says what the mark means" '[[ $rc -eq 0 ]] && grep -q "  \*$" "$tmp/rep.txt" && grep -q "^\* = simulated with representative replicas" "$tmp/rep.txt"'

"$strata" run "$root/scenarios/sweeps/microbatch.yaml" --jobs 1 --csv "$tmp/a.csv" --json "$tmp/a.json" >/dev/null; rc1=$?
"$strata" run "$root/scenarios/sweeps/microbatch.yaml" --jobs 2 --csv "$tmp/b.csv" --json "$tmp/b.json" >/dev/null; rc2=$?
check "sweep runs" '[[ $rc1 -eq 0 && $rc2 -eq 0 ]]'
check "sweep CSV identical for 1 and 2 threads" 'cmp -s "$tmp/a.csv" "$tmp/b.csv"'
check "sweep JSON identical for 1 and 2 threads" 'cmp -s "$tmp/a.json" "$tmp/b.json"'
check "sweep CSV has a row per case (20) plus header" '[[ $(wc -l < "$tmp/a.csv") -eq 21 ]]'
check "sweep CSV and JSON agree case by case" 'python3 - "$tmp/a.csv" "$tmp/a.json" <<"PY"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
res = json.load(open(sys.argv[2]))["results"]
assert len(rows) == len(res)
for row, r in zip(rows, res):
    assert row["name"] == r["name"], (row["name"], r["name"])  # RFC 4180: names with commas stay intact
    if "error" in r:
        assert row["error"] and r["error"] in row["error"], row
        continue
    assert abs(float(row["iteration_time_s"]) - r["iteration_time_s"]) < 1e-6, row["name"]
    assert abs(float(row["mfu"]) - r["mfu"]) < 1e-5
    assert int(row["activation_bytes_per_layer"]) == r["memory"]["activation_bytes_per_layer"]
    assert (row["oom"] == "true") == r["simulated_memory"]["oom"]
PY'
check "infeasible combinations are reported, not dropped" '[[ $(grep -c "infeasible" "$tmp/a.csv") -eq 4 ]]'

# From 4,096 GPUs on the command re-executes itself with glibc's heap on huge pages (sim/cli/huge_heap.hpp).
big=(run "$root/scenarios/bench/scaling.yaml" --case "1T 4096 GPUs (d=8)" --json)
"$strata" "${big[@]}" "$tmp/h1.json" >/dev/null; rc_huge=$?
STRATA_HUGE_HEAP=0 "$strata" "${big[@]}" "$tmp/h0.json" >/dev/null; rc_plain=$?
check "4,096 GPUs: output identical with the huge-page heap and the ordinary one (STRATA_HUGE_HEAP=0)" '[[ $rc_huge -eq 0 && $rc_plain -eq 0 ]] && cmp -s "$tmp/h1.json" "$tmp/h0.json"'

"$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" --trace "$tmp/t.json" --timeline "$tmp/tl.json" >/dev/null; rc=$?
check "trace and timeline written" '[[ $rc -eq 0 && -s "$tmp/t.json" && -s "$tmp/tl.json" ]]'
"$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" --trace "$tmp/t2.json" --trace-groups "stages=0,replicas=0-1" >/dev/null; rc=$?
check "trace of chosen groups written" '[[ $rc -eq 0 && -s "$tmp/t2.json" ]]'
"$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" --trace "$tmp/t3.json" --trace-groups "stage=0" 2>"$tmp/err.txt" >/dev/null; rc=$?
check "a bad --trace-groups exits 2 naming the valid keys" '[[ $rc -eq 2 ]] && grep -q "valid: stages, replicas" "$tmp/err.txt"'
echo keep >"$tmp/keep.json"
"$strata" run "$root/scenarios/sweeps/microbatch.yaml" --case "microbatch=8, interleave=5" --trace "$tmp/keep.json" >"$tmp/out" 2>&1; rc=$?
check "a case not simulated (infeasible) leaves an existing --trace file as it was, and says no 'wrote'" '[[ "$(cat "$tmp/keep.json")" == keep ]] && ! grep -q "wrote" "$tmp/out" && [[ ! -e "$tmp/keep.json.partial" ]]'
"$strata" run "$root/scenarios/paper/table4.yaml" --case "selective recompute" --analytical-only --trace "$tmp/keep.json" >/dev/null 2>"$tmp/err"; rc=$?
check "--trace with --analytical-only exits 2 (nothing to record)" '[[ $rc -eq 2 && "$(cat "$tmp/keep.json")" == keep ]] && grep -q "not with --analytical-only" "$tmp/err"'
(cd "$tmp" && "$strata" run "$root/scenarios/paper/table4.yaml" --analytical-only --json same.json --csv ./same.json >/dev/null 2>"$tmp/err"); rc=$?
check "one file named for two outputs exits 2" '[[ $rc -eq 2 ]] && grep -q "named for two outputs" "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --analytical-only --json "" >/dev/null 2>"$tmp/err"; rc=$?
check "an empty --json exits 2" '[[ $rc -eq 2 ]] && grep -q "expected a file name" "$tmp/err"'
"$strata" frobnicate >/dev/null 2>"$tmp/err"; rc=$?
check "an unknown command exits 2 listing the commands" '[[ $rc -eq 2 ]] && grep -q "unknown command .frobnicate.: expected one of run, explain, search" "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --analytical-only --seed -1 >/dev/null 2>"$tmp/err"; rc=$?
check "a negative --seed exits 2 (was wrapped to 2^64 - 1)" '[[ $rc -eq 2 ]]'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" \
  --gpus 8 --global-batch 8 --top 3 --simulate-top 4 >"$tmp/s.txt"; rc=$?
check "search runs and prints a ranking" '[[ $rc -eq 0 ]] && grep -q "^   1 " "$tmp/s.txt"'
check "search: no column for a switch every printed candidate has alike" '! grep -q " tpo \| opg " "$tmp/s.txt"'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" \
  --gpus 8 --global-batch 8 --fix tensor=8 --fix pipeline=1 --fix microbatch=1 --fix recompute=selective --fix recompute_modules=core_attn \
  --fix sequence_parallel=on --fix tp_comm_overlap=off,on --top 2 --simulate-top 2 >"$tmp/s-tpo.txt"; rc=$?
check "search: a searched switch the candidates differ in gets a column (tp_comm_overlap: tpo, off and on)" \
  '[[ $rc -eq 0 ]] && grep -q "^tpo tp_comm_overlap$" "$tmp/s-tpo.txt" && grep -q "^rank .* ogr tpo " "$tmp/s-tpo.txt" && [[ $(grep -cE "^   [12] .* (on|off) +(on|off) +(on|off) +(on|off) +[0-9]" "$tmp/s-tpo.txt") -eq 2 ]] && grep -qE "^   [12] .* off +on +[0-9.]+ +[0-9.]+" "$tmp/s-tpo.txt" && grep -qE "^   [12] .* off +off +[0-9.]+ +[0-9.]+" "$tmp/s-tpo.txt"'

"$strata" search --model "$root/scenarios/models/llama3-8b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" \
  --gpus 8 --global-batch 32 --attention flash --precision fp8 --top 2 --simulate-top 2 >"$tmp/s2.txt"; rc=$?
check "search with flash attention and FP8 for a Llama model" '[[ $rc -eq 0 ]] && grep -q "^   1 " "$tmp/s2.txt"'
check "search names the settings every candidate shares" 'grep -q "^every candidate: attention unfused, precision bf16, gradient average scale, gradients reduced in fp32$" "$tmp/s.txt" && grep -q "^every candidate: attention flash, precision fp8, " "$tmp/s2.txt"'
l8=("$strata" search --model "$root/scenarios/models/llama3-8b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" \
  --gpus 8 --global-batch 32 --fix tensor=2 --fix pipeline=1 --fix microbatch=1 --fix recompute=full --top 1 --simulate-top 1)
"${l8[@]}" >"$tmp/s-l8.txt"; rc=$?
"${l8[@]}" --attention unfused >"$tmp/s-l8-unf.txt"; rc2=$?
"${l8[@]}" --set execution.attention=unfused >"$tmp/s-l8-set.txt"; rc3=$?
check "search notes the paper's unfused attention by default for a model of today's kind, only when neither --attention nor --set chose it" '[[ $rc -eq 0 && $rc2 -eq 0 && $rc3 -eq 0 ]] && grep -q "^note: attention unfused is the default" "$tmp/s-l8.txt" && grep -q "^every candidate: attention unfused," "$tmp/s-l8-unf.txt" && ! grep -q "^note: attention" "$tmp/s-l8-unf.txt" "$tmp/s-l8-set.txt" "$tmp/s2.txt"'
"${l8[@]}" --attention flash --set model.seq_len=32768 >"$tmp/s-l8-32k.txt"; rc=$?
"${l8[@]}" --attention flash --set model.seq_len=32768 --fix context_parallel=1,2 >"$tmp/s-l8-32k-cp.txt"; rc2=$?
check "search notes at a long sequence that context parallelism is searched only when asked, not once --fix asks" '[[ $rc -eq 0 && $rc2 -eq 0 ]] && grep -q "^note: context parallelism is not searched unless asked (--fix context_parallel=1,2,4,8); at sequence 32768$" "$tmp/s-l8-32k.txt" && ! grep -q "^note: context" "$tmp/s-l8-32k-cp.txt" "$tmp/s-l8.txt"'
check "search: no attention note for the paper's own GPT" '! grep -q "^note: attention" "$tmp/s.txt" && grep -q "^every candidate: attention unfused," "$tmp/s.txt"'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" \
  --gpus 8 --global-batch 8 --precision fp8 >/dev/null 2>"$tmp/err"; rc=$?
check "search in FP8 on an A100 exits 2 and says why" '[[ $rc -eq 2 ]] && grep -q "peak_flops_fp8" "$tmp/err"'
"$strata" search --model "$root/scenarios/models/llama3-8b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" \
  --gpus 16 --global-batch 64 --attention flash --set execution.grad_buckets=nemo_apex --top 1 --simulate-top 1 \
  --margin 0 >"$tmp/s-apex.txt" 2>"$tmp/err"; rc=$?
check "search: candidates a --set key cannot run with are counted under that key, not as sizes" \
  '[[ $rc -eq 0 ]] && grep -qE "rejected: [0-9]+ x incompatible with execution.grad_buckets \(.*needs distributed_optimizer: true\)" "$tmp/s-apex.txt" && grep -qE "rejected: [0-9]+ x infeasible sizes" "$tmp/s-apex.txt"'

mkdir "$tmp/empty"
"$strata" plot --out "$tmp/empty" >/dev/null 2>"$tmp/err"; rc=$?
check "plot without inputs exits 2 and names the missing file" '[[ $rc -eq 2 ]] && grep -q "table5.json" "$tmp/err"'

"$strata" --version >"$tmp/v.txt"; rc=$?
check "--version prints the version and revision" '[[ $rc -eq 0 ]] && grep -q "^strata [0-9.]* (git " "$tmp/v.txt"'
cal="$root/scenarios/devices/h100-sxm5-80gb-calibrated.yaml"
"$strata" run "$root/scenarios/llama/llama3-h100.yaml" --case "8B t2 d4 flash, no recompute" --profile "$cal" >"$tmp/out" 2>&1; rc=$?
check "run --profile with a one-GPU calibrated profile takes the system's NVLink bandwidth" '[[ $rc -eq 0 ]] && grep -q "8B t2 d4 flash" "$tmp/out" && ! grep -q "error" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/megatron-h100.yaml" --case "1.7B on 48" --profile "$cal" >"$tmp/out" 2>&1; rc=$?
check "explain --profile shows the calibrated profile's measured kernels" '[[ $rc -eq 0 ]] && grep -q "attn.flash .* measured" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/bridge-recompute-h100.yaml" --case "Llama 3 70B SFT, mlp" >"$tmp/out" 2>&1; rc=$?
check "explain names what is recomputed and lists the MLP's whole forward again (fused norm, fc1, fc2, its reduce-scatter)" '[[ $rc -eq 0 ]] && grep -q "recompute=selective \[mlp\], b=1" "$tmp/out" && grep -q "^    recompute.ln2 " "$tmp/out" && grep -q "^    recompute.fc2 " "$tmp/out" && grep -q "^    recompute.mlp.reduce-scatter " "$tmp/out"'
"$strata" explain "$root/scenarios/paper/table5.yaml" --case "530B present work" >"$tmp/out" 2>&1; rc=$?
check "explain names the host gaps before each unit when a case has them" '[[ $rc -eq 0 ]] && grep -q "the GPU idles 0.980 ms (forward) / 0.570 ms" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/megatron-h100.yaml" --case "177B on 2304" >"$tmp/out" 2>&1; rc=$?
check "explain says nothing of host gaps without them" '[[ $rc -eq 0 ]] && ! grep -q "GPU idles" "$tmp/out"'
check "explain says what moves each Transformer Engine overlap's bytes and how fast the GEMM beside it runs" '[[ $rc -eq 0 ]] && grep -q "attn.all-gather .*(overlapped with the next step; copy engines, no SM)" "$tmp/out" && grep -q "attn.reduce-scatter .*(overlapped with the next step, at 64.5% speed beside its 16 SMs, userbuffers)" "$tmp/out" && ! grep -q "NCCL collective runs at" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/nemo-h100.yaml" --case "GPT3-175B on 128" >"$tmp/out" 2>&1; rc=$?
check "explain says how fast compute overlapped with an NCCL collective runs, and from what" '[[ $rc -eq 0 ]] && grep -q "runs at 74.2% speed while it holds 32 SMs (the profile.s measured.sms_held; a GEMM at its waves. rate" "$tmp/out" && grep -q "qkv.input-all-gather .*(overlapped with the next step, at 74.0% speed beside its 32 SMs)" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/nemo-long-h100.yaml" --case "1024K on 1024" >"$tmp/out" 2>&1; rc=$?
check "explain gives the context-parallel ring's transient buffers, forward and backward" '[[ $rc -eq 0 ]] && grep -q "ring.s transient buffers while the attention runs: 3238.0 MB forward, 419.4 MB backward" "$tmp/out"'
check "explain gives the context-parallel ring the SMs of NCCL's point-to-point kernels by where its neighbours are" '[[ $rc -eq 0 ]] && grep -q "attn.cp-kv-ring .*beside its 4 SMs, NCCL point-to-point)" "$tmp/out"'
check "explain gives a ring across nodes its time through the NIC, the intra-node figure beside it, and counts it in the pass" '[[ $rc -eq 0 ]] && grep -q "attn.cp-kv-ring .* 43.341 ms (across nodes at 48 GB/s per GPU.s NIC share. 5.8 ms inside a node)" "$tmp/out" && grep -q "forward pass: 103.488 ms" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/nemo-long-h100.yaml" --case "32K on 32" >"$tmp/out" 2>&1; rc=$?
check "explain: a ring of two GPUs in one node holds half the 2-rank communicator's channels, no NIC time" '[[ $rc -eq 0 ]] && grep -q "attn.cp-kv-ring .*beside its 16 SMs, NCCL point-to-point)" "$tmp/out" && ! grep -q "across nodes" "$tmp/out"'
"$strata" explain "$root/scenarios/paper/table4.yaml" --case "baseline no recompute" >"$tmp/out" 2>&1; rc=$?
check "explain names no ring buffers without context parallelism" '[[ $rc -eq 0 ]] && ! grep -q "transient buffers" "$tmp/out"'
"$strata" explain "$root/scenarios/validation/nemo-h100.yaml" --case "LLAMA2-70B on 64" >"$tmp/out" 2>&1; rc=$?
check "explain shows a GEMM's SM margin (set_sm_margin)" '[[ $rc -eq 0 ]] && grep -q "proj .*as 4 chunks of 2048 columns, on 108 SMs (margin 24)" "$tmp/out" && grep -q "fc1.input-all-gather .*beside its 2 SMs, userbuffers)" "$tmp/out"'
"$strata" explain "$root/scenarios/paper/table4.yaml" --case "baseline no recompute" --set execution.tensor=16 >"$tmp/out" 2>&1; rc=$?
check "explain says when the tensor-parallel group spans nodes (its costs are the intra-node figures)" '[[ $rc -eq 0 ]] && grep -q "(t = 16) spans 2 nodes of 8 GPUs" "$tmp/out"'
"$strata" explain "$root/scenarios/paper/table4.yaml" --case "baseline no recompute" >"$tmp/out" 2>&1
check "explain says nothing of spanning nodes for a group inside one" '! grep -q "spans .* nodes" "$tmp/out"'
"$strata" explain "$root/scenarios/paper/table4.yaml" --profile "$tmp/no-such-profile.yaml" >/dev/null 2>"$tmp/err"; rc=$?
check "explain --profile with a missing file exits 2 and names it" '[[ $rc -eq 2 ]] && grep -q "no-such-profile.yaml" "$tmp/err"'
"$strata" explain "$root/scenarios/paper/table4.yaml" --case "no such case" >/dev/null 2>"$tmp/err"; rc=$?
check "explain with an unknown case exits 2 and lists the cases" '[[ $rc -eq 2 ]] && grep -q "selective + sequence" "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --analytical-only --json - >"$tmp/stdout.json" 2>"$tmp/err"; rc=$?
check "--json - writes the JSON alone to standard output, the table to standard error" '[[ $rc -eq 0 ]] && python3 -c "import json,sys; assert len(json.load(open(sys.argv[1]))[\"results\"]) == 5" "$tmp/stdout.json" && grep -q "selective + sequence" "$tmp/err"'
"$strata" run "$root/scenarios/paper/table4.yaml" --csv - >"$tmp/stdout.csv" 2>/dev/null; rc=$?
check "--csv - writes the CSV to standard output" '[[ $rc -eq 0 && $(wc -l < "$tmp/stdout.csv") -eq 6 ]] && head -1 "$tmp/stdout.csv" | grep -q "^name,model,"'
"$strata" run "$root/scenarios/paper/table5.yaml" --json "$tmp/no/such/dir/x.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "an unwritable output exits 2 before simulating" '[[ $rc -eq 2 ]] && grep -q "cannot be written" "$tmp/err" && ! grep -q "175B" "$tmp/out"'

"$strata" bench "$root/scenarios/paper/table4.yaml" --baseline "$strata" --runs 1 >"$tmp/bench.txt" 2>"$tmp/err"; rc=$?
check "bench --baseline runs both binaries and prints the ratios" '[[ $rc -eq 0 ]] && grep -q "geometric mean over 5 case(s): A/B wall" "$tmp/bench.txt" && grep -q "^selective + sequence" "$tmp/bench.txt"'
"$strata" bench "$root/scenarios/llama/llama3-h100.yaml" --replicas representative --baseline "$strata" --runs 1 >"$tmp/bench-rep.txt" 2>"$tmp/err"; rc=$?
check "bench --replicas representative --baseline: this binary with representative replicas, the baseline in full" '[[ $rc -eq 0 ]] && grep -q "^A = .* --replicas representative$" "$tmp/bench-rep.txt" && grep -q "geometric mean over 8 case(s)" "$tmp/bench-rep.txt"'
"$strata" bench "$root/scenarios/paper/table4.yaml" --baseline "$tmp/no-such-strata" >/dev/null 2>"$tmp/err"; rc=$?
check "bench --baseline with a missing binary exits 2 and names it" '[[ $rc -eq 2 ]] && grep -q "no-such-strata: not an executable file" "$tmp/err"'
srch=("$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" --gpus 8 --global-batch 4 --gradient-average scale_always --fix tensor=8 --fix pipeline=1 --fix microbatch=4 --fix recompute=selective --fix sequence_parallel=on --top 1 --simulate-top 1)
"${srch[@]}" --set execution.embedding_reduce_scatter=false --set execution.host_gap_forward_us=980 --set execution.host_gap_backward_us=570 --json "$tmp/search-set.json" >/dev/null 2>"$tmp/err"; rc=$?
"$strata" run "$root/scenarios/paper/table5.yaml" --case "22B present work" --json "$tmp/t5-22b.json" >/dev/null 2>&1
check "search --set: every candidate with the override (the paper's software: Table 5's 22B row exactly)" '[[ $rc -eq 0 ]] && python3 -c "
import json, sys
a = json.load(open(sys.argv[1]))[\"results\"][0]; b = json.load(open(sys.argv[2]))[\"results\"][0]
assert a[\"execution\"][\"embedding_reduce_scatter\"] is False and a[\"iteration_time_s\"] == b[\"iteration_time_s\"]
" "$tmp/search-set.json" "$tmp/t5-22b.json"'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" --gpus 8 --global-batch 4 --fix tensor=8 --fix pipeline=1 --fix recompute=selective --fix recompute_modules=core_attn+mlp --top 1 --simulate-top 1 --json "$tmp/search-mods.json" >"$tmp/search-mods.txt" 2>"$tmp/err"; rc=$?
check "search --fix recompute_modules: the module set applied, named in the table and its legend" '[[ $rc -eq 0 ]] && grep -q "^recompute sel:X selective recompute of the modules X" "$tmp/search-mods.txt" && grep -Eq "^   1 .* sel:attn\+mlp " "$tmp/search-mods.txt" && python3 -c "
import json, sys
e = json.load(open(sys.argv[1]))[\"results\"][0][\"execution\"]
assert e[\"recompute\"] == \"selective\" and e[\"recompute_modules\"] == [\"core_attn\", \"mlp\"], e
" "$tmp/search-mods.json"'
"$strata" search --model "$root/scenarios/models/llama3-70b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 32 --global-batch 128 --attention flash --set execution.transformer_impl=transformer_engine --fix recompute=none --fix offload_modules=qkv_linear+core_attn+attn_proj --fix microbatch=1 --fix tensor=4 --fix pipeline=8 --top 1 --simulate-top 1 --replicas representative --json "$tmp/search-off.json" >"$tmp/search-off.txt" 2>"$tmp/err"; rc=$?
check "search --fix offload_modules: every candidate offloads those modules, the JSON says which and what each layer moves" '[[ $rc -eq 0 ]] && grep -q "offload_modules=qkv_linear+core_attn+attn_proj" "$tmp/search-off.txt" && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[\"results\"][0]
assert r[\"execution\"][\"offload_modules\"] == [\"qkv_linear\", \"core_attn\", \"attn_proj\"], r[\"execution\"]
o = r[\"layer\"][\"offload\"]
assert 0 < o[\"freed_bytes\"] <= o[\"copied_bytes\"] == o[\"reloaded_bytes\"] and o[\"tensors\"] > 0, o
assert r[\"host_copies_busy_s\"][\"device_to_host\"] > 0 and r[\"host_copies_busy_s\"][\"host_to_device\"] > 0
" "$tmp/search-off.json"'
"$strata" explain "$root/scenarios/llama/offload-h100.yaml" --case "70B t4 p4 d2, offload qkv + attention, FP8" >"$tmp/explain-off.txt" 2>"$tmp/err"; rc=$?
check "explain names the offloaded modules and what each layer copies and frees" '[[ $rc -eq 0 ]] && grep -Eq "^  offloaded to host memory \[qkv_linear, core_attn, attn_proj\]: 7 tensors, [0-9.]+ MB copied out and back each layer and microbatch, [0-9.]+ MB of GPU memory freed" "$tmp/explain-off.txt"'
"$strata" search --model "$root/scenarios/models/llama3-70b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 32 --global-batch 128 --set 'execution.offload_modules=[qkv_linear]' >/dev/null 2>"$tmp/err"; rc=$?
"$strata" search --model "$root/scenarios/models/llama3-70b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 32 --global-batch 128 --fix offload_modules=none,mlp >/dev/null 2>"$tmp/err2"; rc2=$?
check "search: offload_modules is searched (--set refused, pointing at --fix), and an unknown module named" '[[ $rc -eq 2 && $rc2 -eq 2 ]] && grep -q "fix offload_modules=VALUES" "$tmp/err" && grep -q "'"'"'mlp'"'"' is not none or a set of modules" "$tmp/err2"'
"$strata" search --model "$root/scenarios/models/llama3-8b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 8 --global-batch 32 --attention flash >"$tmp/s-norms.txt" 2>&1; rc=$?
"$strata" search --model "$root/scenarios/models/llama3-8b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 8 --global-batch 32 --attention flash --set execution.transformer_impl=transformer_engine >"$tmp/s-norms-te.txt" 2>&1; rc2=$?
check "search notes that recomputing the norms needs local layers where a printed candidate does, and never tries it with Transformer Engine's" '[[ $rc -eq 0 && $rc2 -eq 0 ]] && grep -Eq "^ +[0-9]+ .* sel:[a-z+]*ln" "$tmp/s-norms.txt" && grep -q "^note: recomputing the norms (ln) needs Megatron-Core.s local layers" "$tmp/s-norms.txt" && ! grep -Eq "sel:[a-z+]*ln|^note: recomputing the norms" "$tmp/s-norms-te.txt" && grep -q "^   1 " "$tmp/s-norms-te.txt"'
"$strata" search --model "$root/scenarios/models/llama3-70b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 64 --global-batch 16 --attention flash --set model.seq_len=131072 --fix context_parallel=8 --fix recompute=full,block --replicas representative --top 3 >"$tmp/s-block.txt" 2>&1; rc=$?
check "search --fix recompute=full,block: block recompute of the fewest first layers that fit, named block:K, beats full at 128k tokens" '[[ $rc -eq 0 ]] && grep -Eq "^   1 .* block:[0-9]+ " "$tmp/s-block.txt" && grep -q "^block:K full recompute of the first K layers" "$tmp/s-block.txt"'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" --gpus 8 --global-batch 4 --set execution.recompute_layers=2 >/dev/null 2>"$tmp/err"; rc=$?
check "search --set execution.recompute_layers exits 2: block recompute is the search's (--fix recompute=...,block)" '[[ $rc -eq 2 ]] && grep -q "varies .recompute_layers.: restrict it with --fix recompute=VALUES instead (block: full recompute of the fewest" "$tmp/err"'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" --gpus 8 --global-batch 4 --set 'execution.recompute_modules=[mlp]' >/dev/null 2>"$tmp/err"; rc=$?
check "search --set execution.recompute_modules exits 2: the search varies it (--fix)" '[[ $rc -eq 2 ]] && grep -q "varies .recompute_modules.: restrict it with --fix recompute_modules=VALUES" "$tmp/err"'
"$strata" search --model "$root/scenarios/models/llama3-8b.yaml" --system "$root/scenarios/systems/dgx-h100.yaml" --gpus 8 --global-batch 8 --attention flash --precision fp8 --fix tensor=8 --fix recompute=selective --fix recompute_modules=layernorm+mlp,mlp >"$tmp/s-ln.txt" 2>"$tmp/err"; rc=$?
check "search in FP8 (Transformer Engine's fused norms): layernorm asked for is rejected with the reason, mlp tried" '[[ $rc -eq 0 ]] && grep -q "rejected: [0-9]* x incompatible with execution.recompute_modules (recompute_modules: layernorm has no effect" "$tmp/s-ln.txt" && grep -Eq "^   1 .* sel:mlp " "$tmp/s-ln.txt"'
"${srch[@]}" --set execution.tensor=4 >/dev/null 2>"$tmp/err"; rc=$?
check "search --set of a key the search varies exits 2 and says to use --fix" '[[ $rc -eq 2 ]] && grep -q "varies .tensor.: restrict it with --fix tensor=VALUES" "$tmp/err"'
"${srch[@]}" --set execution.global_batch=8 >/dev/null 2>"$tmp/err"; rc=$?
"${srch[@]}" --set execution.account_for_loss_in_pipeline_split=true >/dev/null 2>"$tmp/err2"; rc2=$?
check "search --set of a key the search derives exits 2 and names what to give instead (not a --fix key that does not exist)" '[[ $rc -eq 2 && $rc2 -eq 2 ]] && grep -q "varies .global_batch.: it is the search.s own (--global-batch" "$tmp/err" && grep -q "varies .account_for_loss_in_pipeline_split.: restrict it with --fix ends_in_split=VALUES" "$tmp/err2"'
"${srch[@]}" --set model.seq_len=1024 --set system.network.routing=adaptive --json "$tmp/search-parts.json" >/dev/null 2>"$tmp/err"; rc=$?
check "search --set of model and system keys: over the files, for every candidate" '[[ $rc -eq 0 ]] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[\"results\"][0]
assert r[\"model\"][\"seq_len\"] == 1024 and r[\"system_spec\"][\"network\"][\"routing\"] == \"adaptive\", r[\"model\"]
" "$tmp/search-parts.json"'
"${srch[@]}" --set system.network.routnig=hash >/dev/null 2>"$tmp/err"; rc=$?
check "search --set of a misspelt system key exits 2 with a hint" '[[ $rc -eq 2 ]] && grep -q "unknown system key .network.routnig.. Did you mean .network.routing." "$tmp/err"'
"${srch[@]}" --set execution.precision=fp16 --precision bf16 >/dev/null 2>"$tmp/err"; rc=$?
check "search --precision with --set execution.precision exits 2" '[[ $rc -eq 2 ]] && grep -q "keep one" "$tmp/err"'
"$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" --gpus 8 --global-batch 4 --set model.heads=7 >/dev/null 2>"$tmp/err"; rc=$?
check "a search over a model of impossible shape names the model's problem" '[[ $rc -eq 2 ]] && grep -q "hidden (6144) must be divisible by heads (7)" "$tmp/err"'
"${srch[@]}" --set execution.fp8_recipe=current >/dev/null 2>"$tmp/err"; rc=$?
check "search: when no candidate is feasible, the first one's error is printed" '[[ $rc -eq 2 ]] && grep -q "the first infeasible candidate: .*fp8_recipe applies to precision: fp8" "$tmp/err"'
"$strata" bench "$root/scenarios/paper/table4.yaml" >"$tmp/bench-plain.txt" 2>&1
"$strata" bench "$root/scenarios/paper/table4.yaml" --set execution.microbatch=2 --set execution.global_batch=2 >"$tmp/bench-set.txt" 2>"$tmp/err"; rc=$?
check "bench --set: every case with the override (another iteration time)" '[[ $rc -eq 0 ]] && [[ "$(grep "^selective + sequence" "$tmp/bench-set.txt" | awk "{print \$NF}")" != "$(grep "^selective + sequence" "$tmp/bench-plain.txt" | awk "{print \$NF}")" ]]'
"$strata" bench "$root/scenarios/paper/table4.yaml" --set execution.micrbatch=2 >/dev/null 2>"$tmp/err"; rc=$?
check "bench --set with an unknown key exits 2 and names the override" '[[ $rc -eq 2 ]] && grep -q "execution.micrbatch" "$tmp/err" && grep -q "microbatch" "$tmp/err"'
printf '#!/bin/sh\necho "$@" >> "%s"\n' "$tmp/baseline-args" > "$tmp/args-strata"; chmod +x "$tmp/args-strata"
"$strata" bench "$root/scenarios/paper/table4.yaml" --set execution.microbatch=2 --set execution.global_batch=2 --baseline "$tmp/args-strata" --runs 1 >/dev/null 2>"$tmp/err"; rc=$?
check "bench --set --baseline runs the baseline with the same overrides" '[[ $rc -eq 0 ]] && grep -q "^run .*table4.yaml --case selective + sequence --set execution.microbatch=2 --set execution.global_batch=2$" "$tmp/baseline-args"'
printf '#!/bin/sh\necho "error: x.yaml:1:1: unknown key" >&2\nexit 2\n' > "$tmp/old-strata"; chmod +x "$tmp/old-strata"
"$strata" bench "$root/scenarios/paper/table4.yaml" --baseline "$tmp/old-strata" >/dev/null 2>"$tmp/err"; rc=$?
check "bench --baseline reports why the baseline failed" '[[ $rc -eq 2 ]] && grep -q "the baseline exited with status 2" "$tmp/err" && grep -q "unknown key" "$tmp/err"'

printf 'name: minimal\nmodel: %s\nsystem: %s\nexecution: {tensor: 8, pipeline: 1, recompute: none, microbatch: 1, global_batch: 1}\n' "$root/scenarios/models/gpt-22b.yaml" "$root/scenarios/systems/selene-a100.yaml" > "$tmp/min.yaml"
"$strata" run "$tmp/min.yaml" --analytical-only --json "$tmp/min.json" >/dev/null 2>&1
check "docs/execution.md: every execution key once, with the loader's values, ranges and defaults" 'python3 - "$strata" "$tmp/min.yaml" "$root/docs/execution.md" "$tmp/min.json" <<"PY"
import json, re, subprocess, sys
strata, minimal, doc, echoed = sys.argv[1:5]
def error_of(setting):
    r = subprocess.run([strata, "run", minimal, "--analytical-only", "--set", setting], capture_output=True, text=True)
    assert r.returncode == 2, setting
    return r.stderr
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(doc) if l.startswith("| `")]
keys = [r[0].strip("`") for r in rows]
loader = re.search(r"Valid keys: (.*)\.", error_of("execution.zzz=1")).group(1).split(", ")
assert sorted(keys) == sorted(loader) and len(set(keys)) == len(keys), set(keys) ^ set(loader)
echo = json.load(open(echoed))["results"][0]["execution"]
def echoed_value(key):  # a dotted key (a flattened mapping) names an entry of a nested object
    v = echo
    for part in key.split("."):
        v = v[part]
    return v
def num(s):
    m = re.fullmatch(r"2\^(\d+)", s)
    return 2 ** int(m.group(1)) if m else float(s)
for cell, values, default, _ in rows:
    key = cell.strip("`")
    rng = re.fullmatch(r"(integer|number) in \[(\S+), (\S+)\]", values)
    if values == "true, false":
        assert "expected true or false" in error_of("execution.%s=maybe" % key), key
    elif rng:
        lo, hi = num(rng.group(2)), num(rng.group(3))
        shown = ("%d" % lo, "%d" % hi) if rng.group(1) == "integer" else (rng.group(2), rng.group(3))
        article = "an integer" if rng.group(1) == "integer" else "a number"
        assert "expected %s in [%s, %s]" % ((article,) + shown) in error_of("execution.%s=-5" % key), key
    elif values.startswith("a list of "):
        assert "expected a list of: " + values[len("a list of "):] in error_of("execution.%s=[zzz]" % key), key
    else:
        assert "expected one of: " + values in error_of("execution.%s=zzz" % key), key
    if default in ("true", "false"):
        assert echoed_value(key) == (default == "true"), key
    elif default.startswith("["):  # "[a, b]", or "[a] with X, [] without": the echo is one of the lists
        lists = [[d for d in l.split(", ") if d] for l in re.findall(r"\[([^\]]*)\]", default)]
        assert echoed_value(key) in lists, (key, echoed_value(key), lists)
    elif re.fullmatch(r"[0-9.]+", default):
        assert echoed_value(key) == float(default), key
    elif default == "auto":  # resolved where the case is built: the echo says the value in force
        assert echoed_value(key) in values.split(", ") and echoed_value(key) != "auto", (key, echoed_value(key))
    elif re.fullmatch(r"[a-z0-9_]+", default) and default != "required":
        assert echoed_value(key) == default, (key, echoed_value(key), default)
PY'
"$strata" run "$root/scenarios/paper/table4.yaml" --analytical-only --json "$tmp/prov.json" >/dev/null 2>&1
check "JSON provenance: version, revision and each input's SHA-256 as sha256sum has it" 'python3 - "$tmp/prov.json" <<"PY"
import hashlib, json, sys
p = json.load(open(sys.argv[1]))["provenance"]
assert p["strata"] and p["git_revision"]
files = [i["file"] for i in p["inputs"]]
assert files[0].endswith("table4.yaml") and any(f.endswith("gpt-22b.yaml") for f in files), files
assert any(f.endswith("a100-sxm4-80gb.yaml") for f in files), files
for i in p["inputs"]:
    assert hashlib.sha256(open(i["file"], "rb").read()).hexdigest() == i["sha256"], i
PY'

(cd "$tmp" && "$strata" search --model "$root/scenarios/models/gpt-22b.yaml" --system "$root/scenarios/systems/selene-a100.yaml" \
   --gpus 16 --global-batch 16 --simulate-top 2 --top 2 --margin 0 --json - >"$tmp/search.json" 2>"$tmp/search.err"); rc=$?
check "search --json - writes the JSON alone to standard output (no file named -)" '[[ $rc -eq 0 && ! -e "$tmp/-" ]] && python3 -c "import json,sys; assert len(json.load(open(sys.argv[1]))[\"results\"]) == 2" "$tmp/search.json" && grep -q "search took" "$tmp/search.err"'

# The search's constraints, margin and outputs.
m22=$root/scenarios/models/gpt-22b.yaml sel=$root/scenarios/systems/selene-a100.yaml
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --fix tensor=8 --fix pipeline=1..2 \
  --fix recompute=none,selective --margin 5 --simulate-top 2 --top 3 --jobs 1 --csv - --json "$tmp/fix.json" >"$tmp/fix.csv" 2>"$tmp/fix.err"; rc=$?
check "search --fix with a range and a list, --csv - and --json" '[[ $rc -eq 0 ]] && grep -q "^constraints: tensor=8 pipeline=1..2 recompute=none,selective$" "$tmp/fix.err"'
check "search prints the legend, estimate and simulation side by side, and whether the screen held" \
  'grep -q "^t tensor, c context" "$tmp/fix.err" && grep -q "estim s     sim s   err% est#" "$tmp/fix.err" && grep -Eq "^screen ranking (held|overturned: #[0-9]+ by estimate is fastest simulated)" "$tmp/fix.err"'
check "search says how many were simulated and why" 'grep -Eq "^simulated [0-9]+ of [0-9]+: the best 3 estimates and every other within 5% of the best estimate \([0-9]+ within it\), at most 64$" "$tmp/fix.err"'
check "search CSV and JSON: every simulated candidate, within the constraints, with estimate, ranks, tokens/s and TF/s" 'python3 - "$tmp/fix.csv" "$tmp/fix.json" <<"PY"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
doc = json.load(open(sys.argv[2]))
res, s = doc["results"], doc["search"]
assert len(rows) == len(res) == s["simulated"] >= 3, (len(rows), len(res), s)
assert s["constraints"] == ["tensor=8", "pipeline=1..2", "recompute=none,selective"] and s["margin"] == 0.05
assert s["simulated"] <= max(s["simulate_top"], s["simulate_max"]) and s["screened"] >= s["within_margin"]
best = min(r["screen"]["estimate_s"] for r in res)
for i, (row, r) in enumerate(zip(rows, res)):
    assert row["name"] == r["name"] == "rank %d" % (i + 1)
    assert row["tensor"] == "8" and row["pipeline"] in ("1", "2") and row["recompute"] in ("none", "selective"), row
    assert row["overlap_grad_reduce"] == "false" or int(row["data"]) > 1, row
    sc = r["screen"]
    assert sc["simulated_rank"] == i + 1 and int(row["simulated_rank"]) == i + 1
    assert int(row["estimate_rank"]) == sc["estimate_rank"]
    assert abs(float(row["estimate_s"]) - sc["estimate_s"]) < 1e-6
    assert abs(sc["estimate_error"] - (sc["estimate_s"] / r["iteration_time_s"] - 1)) < 1e-9
    assert abs(float(row["tokens_per_s"]) - r["tokens_per_s"]) < 0.1 and float(row["tflops_per_gpu"]) > 0
    if sc["estimate_rank"] > s["simulate_top"]:
        assert sc["estimate_s"] <= best * 1.05 + 1e-12, sc   # simulated for the margin
overturned = res[0]["screen"]["estimate_rank"]
assert s["overturned_by_estimate_rank"] == (overturned if overturned > 1 else 0)
PY'
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --fix tensr=8 >/dev/null 2>"$tmp/err"; rc=$?
check "search --fix with an unknown key exits 2 and lists the keys" '[[ $rc -eq 2 ]] && grep -q "unknown key .tensr.; keys: tensor, context_parallel, pipeline, data" "$tmp/err"'
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --fix pipeline=16..4 >/dev/null 2>"$tmp/err"; rc=$?
check "search --fix with a reversed range exits 2" '[[ $rc -eq 2 ]] && grep -q "pipeline=16..4" "$tmp/err"'
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --fix tensor=3 >/dev/null 2>"$tmp/err"; rc=$?
check "search with constraints nothing satisfies exits 2 and says so (none to try, not 'the rejections above')" '[[ $rc -eq 2 ]] && grep -q "none to try (tensor x context x pipeline x data = the GPUs.*within the constraints)" "$tmp/err"'
"$strata" search --model "$m22" --system "$sel" --gpus 1024 --global-batch 4096 --fix tensor=8 --fix pipeline=1 \
  --fix microbatch=1 --fix interleave=1 --max-tasks 1 >/dev/null 2>"$tmp/err"; rc=$?
check "a candidate over the task limit names strata search --max-tasks and the model and system files" \
  '[[ $rc -eq 2 ]] && grep -q "(strata search --max-tasks)" "$tmp/err" && grep -q "gpt-22b.yaml on .*selene-a100.yaml: case .t=8 p=1 d=128" "$tmp/err"'
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --json - --csv - >/dev/null 2>"$tmp/err"; rc=$?
check "search --json - with --csv - exits 2" '[[ $rc -eq 2 ]] && grep -q "cannot both write to standard output" "$tmp/err"'
"$strata" search --model "$m22" --system "$sel" --gpus 8 --global-batch 4 --fix tensor=8 --gradient-average scale_always \
  --top 1 --simulate-top 1 --margin 0 --json "$tmp/ga.json" >/dev/null 2>&1; rc=$?
check "search --gradient-average scale_always: the paper's 22B configuration as in Table 5" \
  '[[ $rc -eq 0 ]] && python3 -c "import json,sys; r = json.load(open(sys.argv[1]))[\"results\"][0]; assert r[\"execution\"][\"gradient_average\"] == \"scale_always\", r[\"execution\"]" "$tmp/ga.json"'
"$strata" search --model "$m22" --system "$sel" --gpus 8 --global-batch 4 --gradient-average mean >/dev/null 2>"$tmp/err"; rc=$?
check "search --gradient-average with a bad value exits 2 and lists the choices" '[[ $rc -eq 2 ]] && grep -q "scale_always" "$tmp/err"'
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --fix tensor=8 --fix pipeline=1 --fix microbatch=1 \
  --fix recompute=selective --fix sequence_parallel=on --fix distributed_optimizer=off --fix overlap_grad_reduce=off \
  --top 1 --simulate-top 1 --margin 0 --json "$tmp/g32.json" >/dev/null 2>&1; rc32=$?
"$strata" search --model "$m22" --system "$sel" --gpus 16 --global-batch 16 --fix tensor=8 --fix pipeline=1 --fix microbatch=1 \
  --fix recompute=selective --fix sequence_parallel=on --fix distributed_optimizer=off --fix overlap_grad_reduce=off \
  --top 1 --simulate-top 1 --margin 0 --grad-reduce-in-bf16 --json "$tmp/g16.json" >/dev/null 2>&1; rc16=$?
check "search --grad-reduce-in-bf16: 16-bit gradient reduction, faster than fp32's on two nodes" \
  '[[ $rc32 -eq 0 && $rc16 -eq 0 ]] && python3 -c "import json,sys; a, b = (json.load(open(f))[\"results\"][0] for f in sys.argv[1:]); assert a[\"execution\"][\"grad_reduce_in_fp32\"] and not b[\"execution\"][\"grad_reduce_in_fp32\"], (a, b); assert b[\"iteration_time_s\"] < a[\"iteration_time_s\"]" "$tmp/g32.json" "$tmp/g16.json"'
"$strata" search --help >"$tmp/help"; rc=$?
check "search --help shows the defaults and the --fix keys" '[[ $rc -eq 0 ]] && grep -q -- "--margin FLOAT.*=10" "$tmp/help" && grep -q -- "--simulate-top INT.*=8" "$tmp/help" && grep -q "overlap_grad_reduce: off,on" "$tmp/help"'

finish
