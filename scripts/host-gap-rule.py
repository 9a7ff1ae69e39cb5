#!/usr/bin/env python3
"""The host gaps the paper's scenarios carry (execution.host_gap_forward_us / host_gap_backward_us), recomputed from
the measurements by the rule written in scenarios/paper/table5.yaml (session 23):

  forward  = median over Table 5's four shapes x the H200 runs that timed get_batch of (forward gap - get_batch time),
             paired per row, plus get_batch's time per call on A100 runs of Megatron-LM's own timer (A100_GET_BATCH);
  backward = median over Table 5's four shapes x the five runs of calibrate/results/2026-11-26c/;
per recompute mode; the selective rows take the no-recompute figures. Values rounded to 10 us.

usage: scripts/host-gap-rule.py        prints the figures and the values
"""
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "..", "calibrate", "results")

# calibrate/torch_sync_gap.py runs on a lent H200 with get_batch timed (get_batch_us), and the five runs of the first
# lease (the backward gap's source).
WITH_GET_BATCH = ["2026-11-26c/h200-sync-gap-batch.json", "2026-11-26c/h200-sync-gap-sf.json",
                  "2026-11-26c/h200-sync-gap-prelude.json", "2026-11-27/h200-sync-gap-direct.json",
                  "2026-11-27/h200-sync-gap-direct-prelude.json", "2026-11-27/h200-sync-gap-direct2.json"]
FIRST_LEASE = ["2026-11-26c/h200-sync-gap.json", "2026-11-26c/h200-sync-gap-r15.json",
               "2026-11-26c/h200-sync-gap-batch.json", "2026-11-26c/h200-sync-gap-sf.json",
               "2026-11-26c/h200-sync-gap-prelude.json"]

# Megatron-LM's "batch-generator" timer (synchronising, summed over an iteration's microbatches, printed by the last
# rank) in public logs of A100 runs: (ms per iteration, microbatches per iteration, source). Normal runs of NVIDIA's
# Megatron-LM only (README "Fidelity" lists what was left out and why).
A100_GET_BATCH = [
    (1.62, 2, "BERT-345M, 1 GPU, ThetaGPU DGX A100, Megatron-LM e269e200 (xduan7/scalable-transformer "
              "docs/megatron_bert_345m.md)"),
    (2.82, 4, "the same, 8 GPUs, t = 2, p = 2"),
    (3.21, 4, "the same, 32 GPUs"),
    (3.70, 4, "the same, 64 GPUs"),
    (3.88, 4, "the same, 128 GPUs"),
    (527.61, 1024, "GPT 13B, t = 2, p = 4, microbatch 1, sequence 2048, NGC container Megatron-LM 2021-09"),
]


def _load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)["rows"]


def rule():
    """The rule's figures (us) and the values (us, rounded to 10) per recompute mode."""
    get_batch_us = statistics.median(1e3 * ms / n for ms, n, _ in A100_GET_BATCH)
    loaded = {name: _load(name) for name in dict.fromkeys(WITH_GET_BATCH + FIRST_LEASE)}  # each file once
    with_get_batch = [r for name in WITH_GET_BATCH for r in loaded[name]]
    first_lease = [r for name in FIRST_LEASE for r in loaded[name]]
    out = {"a100_get_batch_us": get_batch_us}
    for mode in ("no_recompute", "full_recompute"):
        rest = statistics.median(r[mode]["forward_gap_us"] - r[mode]["get_batch_us"] for r in with_get_batch)
        backward = statistics.median(r[mode]["backward_gap_us"] for r in first_lease)
        out[mode] = {"forward_rest_us": rest, "backward_gap_us": backward,
                     "host_gap_forward_us": 10 * round((rest + get_batch_us) / 10),
                     "host_gap_backward_us": 10 * round(backward / 10)}
    return out


def main():
    r = rule()
    print(f"get_batch per call on A100 runs (median of {len(A100_GET_BATCH)}): {r['a100_get_batch_us']:.0f} us")
    for mode, scenario in (("full_recompute", "full recompute"), ("no_recompute", "selective recompute")):
        m = r[mode]
        print(f"{scenario}: forward {m['forward_rest_us']:.0f} + {r['a100_get_batch_us']:.0f} -> "
              f"host_gap_forward_us: {m['host_gap_forward_us']}; backward {m['backward_gap_us']:.0f} -> "
              f"host_gap_backward_us: {m['host_gap_backward_us']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
