#!/usr/bin/env python3
"""The GPU's idle time at the start of a pipeline unit when the host synchronises before it (strata's execution keys
host_gap_forward_us / host_gap_backward_us), measured on the local GPU in eager PyTorch.

Megatron-LM before August 2022 (the software of the paper's Table 5 and of SC21's Table 1) wrapped every forward and
backward step in timers whose start and stop call torch.cuda.synchronize() (megatron/global_vars.py, _Timer), and
synchronised after every pipeline call (p2p_communication.py). Each unit therefore starts from an empty GPU queue:
the GPU waits while the host runs the step's Python before the first kernel and wherever the host issues slower
than the GPU runs. This script replays those steps on one GPU, the host path as Megatron-LM 2022 ran it:
  forward:  synchronise; get_batch on every stage (a DataLoader batch, the sizes broadcast, .cpu(), the tokens
            copied and broadcast, the causal mask, loss mask and positions built on the GPU); the chunk's layers;
            synchronise;
  backward: synchronise; torch.autograd.backward of the chunk's output with the received gradient (full recompute:
            each layer re-run by a reentrant checkpoint first); synchronise.
A layer is one GPU's share (t-way tensor parallel, no communication) of a 2022 Megatron GPT layer, [s, b, h], with
unfused attention (baddbmm, masked softmax, dropout, bmm), bf16. Each step's gap is its wall time (CUDA events from
just after the synchronise to its end) less the GPU time of the same work queued ahead of the GPU (a sleep kernel
first). The broadcasts run on a one-rank NCCL group (no peer to wait for): the gap measured is a lower bound for a
group of 8. A current host and PyTorch issue faster than a 2020-22 DGX A100 host with PyTorch 1.x did.

--sc21: SC21 Table 1's shapes instead (full recompute, fp16). --synced-first: each round runs the synchronised steps
before the queued ones (default after): the order's effect on the GPU's clocks shows in the difference.
--prelude: the queued GPU times after the same forward and backward run untimed behind the sleep (a GPU that has
just slept may run its first tens of ms at higher clocks than one working, as in the synchronised steps).
Unless --no-direct: also the same synchronised steps, and then the queued ones, under PyTorch's profiler (CUDA activity
alone), a marker kernel where each step starts, and the GPU's idle time read from its own timeline between the
markers: direct_forward_gap_us / direct_backward_gap_us are the synchronised steps' idle (synced_*_idle_us) less the
queued steps' (queued_*_idle_us, the launch gaps between back-to-back kernels): idle against idle, no GPU time of
two runs subtracted; the profiler adds its per-launch host cost (a microsecond or two per kernel) to what it measures.
A third marker where the layers start, after get_batch's synchronisation, splits the forward: synced_batch_idle_us
is get_batch's (host work), and of the layers' and the backward's idle synced_*_lead_us is the host's time to the
first kernel (a slower GPU would not hide it) and synced_*_waits_us the later gaps of 10 us or more (the host behind
the kernels: a slower GPU would hide them).
--timeline: with the direct figures, each run's synchronised layers' forward and backward as the GPU ran them
(synced_timelines: per activity its launch and start from the step's start, its duration, its class, as
window_timelines gives them), for replaying the steps with a slower GPU's kernel times (scripts/host-gap-rule.py).
Usage: torch_sync_gap.py OUT.json [--repeats N] [--sc21] [--synced-first] [--prelude] [--no-direct] [--timeline]
"""
import json
import os
import statistics
import sys

from torch_common import at_least, cuda_torch, script_parser

# (name, hidden, heads, tensor, layers per chunk, microbatch, sequence): Table 5's shapes per GPU, one chunk (22B: 8 of
# its 48 layers, so that they fit without recompute; the gap is the unit's start and wherever the host falls behind).
SHAPES = (("22B", 6144, 48, 8, 8, 4, 2048), ("175B", 12288, 96, 8, 4, 1, 2048), ("530B", 20480, 128, 8, 1, 1, 2048),
          ("1T", 25600, 160, 8, 2, 1, 2048))
# --sc21: SC21 Table 1's ten rows (Megatron-LM's examples/sc21/run_table_1.sh: t, layers per model chunk, microbatch),
# full recompute only, fp16 as they ran; the pipelined rows first (many units per iteration: where a gap adds up).
SHAPES_SC21 = (("39.1B", 8192, 64, 8, 24, 4, 2048), ("76.1B", 10240, 80, 8, 5, 2, 2048),
               ("145.6B", 12288, 96, 8, 5, 2, 2048), ("310.1B", 16384, 128, 8, 3, 1, 2048),
               ("529.6B", 20480, 128, 8, 1, 1, 2048), ("1008B", 25600, 160, 8, 2, 1, 2048),
               ("18.4B", 6144, 48, 8, 40, 8, 2048), ("7.5B", 4096, 32, 4, 36, 16, 2048),
               ("3.6B", 3072, 32, 2, 30, 16, 2048), ("1.7B", 2304, 24, 1, 24, 16, 2048))


def layer_2022(torch, h, heads, t):
    """One GPU's share of Megatron-LM's 2022 ParallelTransformerLayer, [s, b, h], unfused attention."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.hd, self.d = heads // t, h // heads
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h // t), nn.Linear(h // t, h)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h // t), nn.Linear(4 * h // t, h)

        def forward(self, x, mask):
            s, b, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(s, b, self.hd, 3 * self.d).split(self.d, dim=-1)
            q = q.reshape(s, b * self.hd, self.d).transpose(0, 1)
            k = k.reshape(s, b * self.hd, self.d).transpose(0, 1)
            v = v.reshape(s, b * self.hd, self.d).transpose(0, 1)
            scores = torch.baddbmm(torch.empty(b * self.hd, s, s, dtype=x.dtype, device=x.device), q,
                                   k.transpose(1, 2), beta=0.0, alpha=1.0 / self.d ** 0.5)
            probs = F.dropout(torch.softmax(scores.view(b, self.hd, s, s).masked_fill(mask, -10000.0), dim=-1), 0.1,
                              True)
            ctx = torch.bmm(probs.view(b * self.hd, s, s), v).transpose(0, 1).reshape(s, b, self.hd * self.d)
            x = x + F.dropout(self.proj(ctx), 0.1, True)
            return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), 0.1, True)

    return Layer()


# A marker is torch.cuda._sleep(MARKER_CYCLES) (about 1 us); the queued steps' holding sleep, 2 x 10^8 cycles, lasts
# about 0.1 s. (The lease of 2026-11-27 ran direct() on the queued steps with every spin kernel a marker: three windows,
# no result.)
MARKER_CYCLES = 1000
MARKER_MAX_US = 1000.0
# A profiler trace's GPU activities (what the windows' idle and timelines are made of).
GPU_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")


def is_marker(name, dur_us):
    """A marker kernel: a spin kernel shorter than MARKER_MAX_US (the queued steps' holding sleep is longer)."""
    return "spin_kernel" in name and dur_us < MARKER_MAX_US


# A gap between two kernels longer than this is the GPU waiting for its host; shorter ones are launch latency.
HOST_WAIT_MIN_US = 10.0


def window_breakdown(trace_path):
    """The GPU's idle time in each window between consecutive marker kernels (torch.cuda._sleep's spin_kernel) of a
    PyTorch profiler trace holding CUDA activity alone, in us: "idle", from a marker's end to the last GPU activity
    (kernel, copy, set) before the next marker, less the union of those activities; of it "lead", before the first
    activity (the host's time from its synchronisation to the first kernel), and "waits", the later gaps of at least
    HOST_WAIT_MIN_US (the host behind the kernels; the shorter ones are launch latency); "activities", their count.
    A marker is a spin kernel shorter than MARKER_MAX_US; the queued steps' holding sleep (about 0.1 s) is a spin
    kernel too, but no marker."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    acts = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                   is_marker(e.get("name", ""), float(e.get("dur", 0))))
                  for e in events if e.get("ph") == "X" and e.get("cat") in GPU_ACTIVITY)
    marks = [i for i, a in enumerate(acts) if a[2]]
    windows = []
    for m0, m1 in zip(marks, marks[1:]):
        start, end, busy, cover = acts[m0][1], acts[m0][1], 0.0, acts[m0][1]
        inside = acts[m0 + 1:m1]
        lead = max(0.0, inside[0][0] - start) if inside else 0.0
        waits = 0.0
        for a0, a1, _ in inside:
            if a0 - cover >= HOST_WAIT_MIN_US and cover > start:
                waits += a0 - cover
            a0 = max(a0, cover)
            if a1 > a0:
                busy += a1 - a0
                cover = a1
            end = max(end, a1)
        windows.append({"idle": end - start - busy, "lead": lead, "waits": waits, "activities": len(inside)})
    return windows


# Kernel names of matrix work (cuBLAS, cuBLASLt, CUTLASS on Hopper and Ampere): the class a slower GPU scales by its
# matrix rate; every other activity (elementwise, softmax, copies) by its memory bandwidth.
GEMM_NAME_PARTS = ("gemm", "nvjet", "xmma", "cutlass", "wgmma", "s16816", "s1688")


def window_timelines(trace_path):
    """Each marker window's activities as [launch, start, duration, class] in us, launch and start from the marker's
    end (launch: the host's cudaLaunchKernel / memcpy / memset call of the same correlation id, None when the trace
    holds no runtime event for it), class "g" matrix work, "o" any other: what a replay with a slower GPU's kernel
    times needs (scripts/host-gap-rule.py)."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    launch = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            c = e["args"]["correlation"]
            launch[c] = min(launch.get(c, float(e["ts"])), float(e["ts"]))  # the earliest call of that id
    acts = sorted((float(e["ts"]), float(e.get("dur", 0)), e.get("name", ""), e.get("args", {}).get("correlation"))
                  for e in events if e.get("ph") == "X" and e.get("cat") in GPU_ACTIVITY)
    marks = [i for i, a in enumerate(acts) if is_marker(a[2], a[1])]
    out = []
    for m0, m1 in zip(marks, marks[1:]):
        t0 = acts[m0][0] + acts[m0][1]
        out.append([[None if launch.get(c) is None else round(launch[c] - t0, 2), round(ts - t0, 2), round(dur, 2),
                     "g" if any(k in name.lower() for k in GEMM_NAME_PARTS) else "o"]
                    for ts, dur, name, c in acts[m0 + 1:m1]])
    return out


def direct_summary(windows):
    """direct()'s figures from its runs: windows holds, per run, window_breakdown of the synchronised steps' trace
    and of the queued steps' (each three windows: get_batch, the forward's layers, the backward). Medians over the
    runs, in us: the gaps (synchronised idle less queued idle; the forward's = get_batch's window and the layers'),
    get_batch's synchronised idle, and of the layers' and the backward's synchronised idle the lead (the host's time
    from the synchronisation to the first kernel: a slower GPU does not hide it) and the waits (the host behind the
    kernels: a slower GPU hides them)."""
    if not windows or not all(len(ws) == 3 and len(wq) == 3 for ws, wq in windows):
        return {"direct_error": f"marker kernels not found ({[(len(ws), len(wq)) for ws, wq in windows]})"}

    def med(f):
        return statistics.median(f(ws, wq) for ws, wq in windows)

    def gap(ws, wq, js):
        return sum(ws[j]["idle"] - wq[j]["idle"] for j in js)

    out = {"direct_forward_gap_us": med(lambda ws, wq: gap(ws, wq, (0, 1))),
           "direct_backward_gap_us": med(lambda ws, wq: gap(ws, wq, (2,))),
           "synced_batch_idle_us": med(lambda ws, wq: ws[0]["idle"])}
    for j, step in ((1, "forward"), (2, "backward")):
        out.update({f"synced_{step}_idle_us": med(lambda ws, wq: ws[j]["idle"]),
                    f"synced_{step}_lead_us": med(lambda ws, wq: ws[j]["lead"]),
                    f"synced_{step}_waits_us": med(lambda ws, wq: ws[j]["waits"]),
                    f"queued_{step}_idle_us": med(lambda ws, wq: wq[j]["idle"]),
                    f"{step}_kernels": med(lambda ws, wq: ws[j]["activities"])})
    return out


def main():
    parser = script_parser(__doc__)
    parser.add_argument("--repeats", metavar="N", type=at_least(1), default=7)
    for flag in ("--sc21", "--synced-first", "--prelude", "--no-direct", "--timeline"):
        parser.add_argument(flag, action="store_true")
    args = parser.parse_args()
    torch = cuda_torch("torch_sync_gap")
    if torch is None:
        return 4
    import torch.distributed as dist
    import torch.utils.checkpoint as cp
    from torch.utils.data import DataLoader, Dataset

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "rows": []}

    sc21, synced_first, prelude = args.sc21, args.synced_first, args.prelude
    with_direct = not args.no_direct
    with_timeline = with_direct and args.timeline
    res["direct"] = with_direct
    res["prelude"] = prelude
    res["synced_first"] = synced_first
    dtype = torch.float16 if sc21 else torch.bfloat16
    res["dtype"] = str(dtype)
    for name, h, heads, t, layers, b, s in SHAPES_SC21 if sc21 else SHAPES:
        class Tokens(Dataset):
            def __len__(self):
                return 1 << 20

            def __getitem__(self, i):
                return {"text": torch.randint(0, 50000, (s + 1,), dtype=torch.int64)}

        loader = iter(DataLoader(Tokens(), batch_size=b, num_workers=2, pin_memory=True))  # Megatron's --num-workers 2

        # For the queued steps: a pinned batch and its sizes already on the GPU. A tensor built from a list on the
        # device, or any copy from pageable memory, waits for the GPU (the stream is synchronised first): the host
        # would stall behind the sleep and the queued time would include its issue time.
        kept = next(loader)
        kept_sizes = torch.tensor(list(kept["text"].size()) + [0] * 30, dtype=torch.long, device=dev)

        def get_batch(queued=False):
            """pretrain_gpt.get_batch with mpu.broadcast_data, as in 2022 (every stage calls it). queued: its GPU work
            alone, nothing that waits for the GPU (no .cpu(), no copy from pageable memory: the sizes cloned on the
            GPU, the pinned batch copied asynchronously)."""
            data = kept if queued else next(loader)
            sizes = (kept_sizes.clone() if queued
                     else torch.tensor(list(data["text"].size()) + [0] * 30, dtype=torch.long, device=dev))
            dist.broadcast(sizes, 0)
            if not queued:
                sizes.cpu()
            flat = (data["text"].view(-1).cuda(non_blocking=True) if queued
                    else torch.cat([data["text"].contiguous().view(-1)], dim=0).cuda())
            dist.broadcast(flat, 0)
            tokens_ = flat.view(b, s + 1).long()
            labels, tokens = tokens_[:, 1:].contiguous(), tokens_[:, :-1].contiguous()
            mask = torch.tril(torch.ones((1, s, s), device=dev)).view(1, 1, s, s) < 0.5
            loss_mask = torch.ones(tokens.size(), dtype=torch.float, device=dev)
            positions = torch.arange(s, dtype=torch.long, device=dev).unsqueeze(0).expand_as(tokens)
            return mask, labels, loss_mask, positions

        torch.manual_seed(0)
        stack = torch.nn.ModuleList([layer_2022(torch, h, heads, t) for _ in range(layers)]).to(dev, dtype)
        x = torch.randn(s, b, h, device=dev, dtype=dtype, requires_grad=True)  # the received activation
        row = {"model": name, "hidden": h, "heads": heads, "tensor": t, "layers": layers, "microbatch": b, "seq": s}
        for recompute in (True,) if sc21 else (False, True):
            def run(inp, mask):
                y = inp
                for layer in stack:
                    y = cp.checkpoint(layer, y, mask, use_reentrant=True) if recompute else layer(y, mask)
                return y

            grad = torch.randn(s, b, h, device=dev, dtype=dtype)
            fwd_gap, bwd_gap, batch = [], [], []

            def marker(on):
                """A marker kernel for direct()'s trace, when on."""
                if on:
                    torch.cuda._sleep(MARKER_CYCLES)

            def queued(markers=False):
                """GPU times, queued ahead: the forward (get_batch's kernels included) and the backward. (The runs in
                calibrate/results/2026-11-26c/ built the mask alone here, not get_batch's copy and broadcasts.)
                markers: a marker kernel where each step starts, where the layers start after get_batch, and after the
                last (for direct())."""
                torch.cuda.synchronize()
                e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
                torch.cuda._sleep(200_000_000)
                if prelude:  # the same work untimed first, so that the timed GPU runs as warm as the synchronised one
                    torch.autograd.backward(run(x, get_batch(queued=True)[0]), grad_tensors=grad)
                e[0].record()
                marker(markers)
                mask, _, _, _ = get_batch(queued=True)
                marker(markers)
                y = run(x, mask)
                e[1].record()
                marker(markers)
                torch.autograd.backward(y, grad_tensors=grad)
                e[2].record()
                marker(markers)
                e[2].synchronize()
                return e[0].elapsed_time(e[1]), e[1].elapsed_time(e[2])

            def synced(markers=False):
                """As Megatron-LM 2022 runs them: synchronised before and after each step. markers: a marker kernel
                where each step starts, where the layers start after get_batch, and after the last (for direct())."""
                torch.cuda.synchronize()
                w = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
                w[0].record()
                marker(markers)  # the forward step starts
                mask, _, _, _ = get_batch()
                torch.cuda.synchronize()  # the batch-generator timer's stop
                w[4].record()
                marker(markers)  # the layers start
                y = run(x, mask)
                w[1].record()
                torch.cuda.synchronize()  # forward-compute stop; then the pipeline call's synchronise
                w[2].record()
                marker(markers)  # the backward step starts
                torch.autograd.backward(y, grad_tensors=grad)
                w[3].record()
                torch.cuda.synchronize()
                if markers:
                    marker(markers)  # the end
                    torch.cuda.synchronize()
                return w

            def direct():
                """The synchronised steps, then the queued ones, each under the profiler (CUDA activity alone) with a
                marker kernel where each step starts: the GPU's idle time in each step read from its own timeline.
                The queued steps' idle is the gaps between back-to-back kernels (launch latency), which the GPU
                times of the difference method hold as work: subtracted, so that both methods measure the same."""
                import tempfile
                from torch.profiler import ProfilerActivity, profile
                idle = []
                for steps in (synced, queued):
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        steps(markers=True)
                    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                        prof.export_chrome_trace(tmp.name)
                        idle.append(window_breakdown(tmp.name))
                        if with_timeline and steps is synced:
                            found = window_timelines(tmp.name)
                            if len(found) == 3:  # get_batch, the layers' forward, the backward
                                timelines.append(found[1:])
                return idle

            for i in range(args.repeats + 2):
                # Which runs first: a GPU that has just worked runs warmer (power, clocks) than one after a sleep.
                if synced_first:
                    w = synced()
                    gpu_f, gpu_b = queued()
                else:
                    gpu_f, gpu_b = queued()
                    w = synced()
                if i >= 2:  # two warm-up rounds
                    fwd_gap.append(w[0].elapsed_time(w[1]) - gpu_f)
                    bwd_gap.append(w[2].elapsed_time(w[3]) - gpu_b)
                    batch.append(w[0].elapsed_time(w[4]))
            key = "full_recompute" if recompute else "no_recompute"
            measured_directly = {}
            if with_direct:
                try:
                    timelines = []
                    windows = [direct() for _ in range(args.repeats + 1)][1:]  # the first one warms the profiler up
                    measured_directly = direct_summary(windows)
                    if with_timeline and "direct_error" not in measured_directly:
                        if len(timelines) == len(windows) + 1:  # each run's three windows found
                            measured_directly["synced_timelines"] = timelines[1:]
                        else:
                            measured_directly["timeline_error"] = (f"timelines of {len(timelines)} of "
                                                                   f"{len(windows) + 1} runs found")
                except Exception as err:  # the profiler is optional: the difference method stands without it
                    measured_directly = {"direct_error": f"{type(err).__name__}: {err}"}
            row[key] = {**measured_directly, "forward_gap_us": 1e3 * statistics.median(fwd_gap),
                        "backward_gap_us": 1e3 * statistics.median(bwd_gap),
                        "get_batch_us": 1e3 * statistics.median(batch),
                        "forward_gpu_ms": gpu_f, "backward_gpu_ms": gpu_b}
            print(f"{name} {key}: gap forward {row[key]['forward_gap_us']:.0f} us (get_batch "
                  f"{row[key]['get_batch_us']:.0f} us; GPU {gpu_f:.2f} ms), "
                  f"backward {row[key]['backward_gap_us']:.0f} us (GPU {gpu_b:.2f} ms)"
                  + (f"; directly {row[key]['direct_forward_gap_us']:.0f} / {row[key]['direct_backward_gap_us']:.0f} us"
                     f" (get_batch idle {row[key]['synced_batch_idle_us']:.0f}; layers' / backward's idle"
                     f" {row[key]['synced_forward_idle_us']:.0f} / {row[key]['synced_backward_idle_us']:.0f}, of it"
                     f" before the first kernel {row[key]['synced_forward_lead_us']:.0f} /"
                     f" {row[key]['synced_backward_lead_us']:.0f}, host waits {row[key]['synced_forward_waits_us']:.0f} /"
                     f" {row[key]['synced_backward_waits_us']:.0f}; queued idle"
                     f" {row[key]['queued_forward_idle_us']:.0f} / {row[key]['queued_backward_idle_us']:.0f})"
                     if "direct_forward_gap_us" in row[key] else f"; {row[key].get('direct_error', '')}"), flush=True)
        res["rows"].append(row)
        with open(args.out, "w") as f:  # after every row: a run cut short keeps what it measured
            json.dump(res, f, indent=1)
        del stack, x
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
