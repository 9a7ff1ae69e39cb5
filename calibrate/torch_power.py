#!/usr/bin/env python3
"""The GPU's power-limited clock against the work it runs: how fast a GEMM runs when it is a given share of the
time, and how much slower a whole layer runs sustained than in its first steps, on the local GPU.

A GEMM-bound loop holds an H100 / H200 at its 700 W limit and the SM clock falls from 1,980 MHz to 1,200-1,400
(calibrate/results/2026-11-26/h100-dmon.log); memory-bound kernels draw less, so the clock a GEMM gets depends on
what runs around it. Six parts, each sampled by NVML every 20 ms (SM clock, power, temperature):
  mix     8192^3 BF16 GEMMs interleaved with device-to-device copies of about a GEMM's length, in patterns giving
          the GEMMs a time share of 1, 3/4, 1/2, 1/4 (and 1/2 again last: drift), `--mix-s` seconds each after a
          host pause; each GEMM timed by its own CUDA events; figures over the last 60% of each phase.
  layers  a stack of GPT layers (torch_common.gpt_layer: one GPU's shapes at tensor size t, no communication, no
          sequence parallelism) at the Megatron-LM H100 rows' shapes 1.7B (t = 1), 7.1B (t = 2), 70B and 177B
          (t = 8), forward + backward step after step for `--layer-s` seconds after a host pause: the first steps
          (cold) against the last 40% (sustained), each step timed by CUDA events; then the 177B stack for three
          times as long (the GPU warmer).
  duty    8192^3 GEMMs in bursts of 5-400 ms, each followed by as long a host pause (the GPU idle): whether a
          gap lets the clock recover, and over what time the limiter averages.
  rest    what a rest of each length buys (docs/fidelity.md, "Headroom after rest"): for rests of 50, 100, 200,
          400, 800 and 2,000 ms (`--rests`), three times each: 1 s of 8192^3 GEMMs (the
          limiter settling; not yet at its steady state), the rest (the GPU idle), then a 600 ms burst; every GEMM of the settling
          run and of the burst timed by its own CUDA events and saved (start within its burst and length, ms), so
          scripts/power-profile.py reads each rest's boost-clock time from the GEMMs themselves, not from NVML's
          clock readings. The lengths are counted in GEMMs at the cold (boost-clock) time, so at the settled clock the
          settling runs last about 1.15 s and the bursts 0.65 s: about 45 s in all.
  gaps    four GPT layers at the 177B (t = 8) and 1.7B (t = 1) rows' shapes, forward + backward step after step,
          each step waited for and then a gap (`--gaps`, default 0-50 ms; 0: waited for, no sleep, the control
          whose step carries the same launch lead-in and wake-up as the others) with the GPU idle or, with
          `--gap-fill spin`, busy in a spin kernel, `--mix-s` seconds per gap, after back-to-back steps (the steady
          state): each step's time and the GPU's wait before it, read against the headroom model by
          scripts/headroom-gaps.py (a pipeline's waits give the clock back).
  attention  cuDNN's fused attention alone (12 heads, s = 4,096, d = 128, causal), forward + backward.
--fp8: the mix's and duty's GEMMs in FP8 (E4M3, per-tensor scales, torch._scaled_mm); --only PART[,PART]: those
parts alone (mix, duty, rest, attention, layers, gaps; all but rest and gaps by default).
--rests MS[,MS]: the rest part's rest lengths in ms (default 50,100,200,400,800,2000); --gaps MS[,MS]: the gaps
part's (default 0,2,5,10,20,50); --gap-fill spin: each gap a one-block spin kernel (torch.cuda._sleep) instead of
the host's sleep, so the GPU waits busy as a stage does in NCCL's polling kernels (no idle clock, no wake-up).
Usage: torch_power.py OUT.json [--mix-s 8] [--layer-s 10] [--quick] [--fp8] [--only PARTS] [--rests MS,...]
                        [--gaps MS,...] [--gap-fill idle|spin]
(the rest part, read with the mix and the attention's power, which power-profile.py needs: torch_power.py OUT.json
 --only mix,attention,rest --mix-s 4, about 90 s)
"""
import argparse
import json
import statistics
import sys
import threading
import time

from torch_common import cuda_torch, gpt_layer, ms_list, positive_float, script_parser


class Sampler:
    """NVML readings every `period` seconds on a thread, each tagged with the phase in force."""

    def __init__(self, uuid=None, period=0.02):
        self.samples, self.phase, self.period = [], "idle", period
        self.ok = False
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            # The GPU torch runs on (CUDA_VISIBLE_DEVICES may renumber): by its UUID, else NVML's first.
            self.h = None
            if uuid:
                try:
                    self.h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                except Exception:  # noqa: BLE001 - an older NVML binding: by index
                    self.h = None
            if self.h is None:
                self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.ok = True
        except Exception as e:  # noqa: BLE001 - no NVML: timings only
            print(f"torch_power: NVML unavailable ({e}); no clock or power readings", file=sys.stderr)
        self.stop = threading.Event()
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        nv, h = self.nv, self.h
        while not self.stop.is_set():
            try:
                self.samples.append((self.phase, time.perf_counter() - self.t0,
                                     nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                     nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                                     nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
            except Exception:  # noqa: BLE001 - a missed reading
                pass
            time.sleep(self.period)

    def start(self):
        if self.ok:
            self.thread.start()

    def summary(self, phase, after, until=None):
        """Median SM MHz, mean W and last temperature of the samples of `phase` taken at or after time `after`."""
        s = [x for x in self.samples if x[0] == phase and x[1] >= after and (until is None or x[1] <= until)]
        if not s:
            return {}
        return {"sm_mhz_median": statistics.median(x[2] for x in s), "sm_mhz_min": min(x[2] for x in s),
                "sm_mhz_max": max(x[2] for x in s), "power_w_mean": round(statistics.fmean(x[3] for x in s), 1),
                "temp_c_last": s[-1][4], "samples": len(s)}

    def now(self):
        return time.perf_counter() - self.t0


PARTS = ("mix", "duty", "rest", "attention", "layers", "gaps")


def parts_list(text):
    """An argparse type: comma-separated parts of PARTS."""
    parts = set(text.split(","))
    unknown = parts - set(PARTS)
    if unknown:
        raise argparse.ArgumentTypeError(f"no part {', '.join(sorted(unknown))} ({', '.join(PARTS)})")
    return parts


def main():
    parser = script_parser(__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fp8", action="store_true")
    parser.add_argument("--only", metavar="PARTS", type=parts_list, default={"mix", "duty", "attention", "layers"})
    parser.add_argument("--mix-s", metavar="S", type=positive_float)
    parser.add_argument("--layer-s", metavar="S", type=positive_float)
    parser.add_argument("--gaps", metavar="MS,...", type=ms_list(zero_ok=True), default=[0, 2, 5, 10, 20, 50])
    parser.add_argument("--gap-fill", choices=("idle", "spin"), default="idle")
    parser.add_argument("--rests", metavar="MS,...", type=ms_list(zero_ok=False),
                        default=[50, 100, 200, 400, 800, 2000])
    args = parser.parse_args()
    out, fp8, parts, gaps, fill, rests = args.out, args.fp8, args.only, args.gaps, args.gap_fill, args.rests
    mix_s = args.mix_s if args.mix_s is not None else 2.0 if args.quick else 8.0
    layer_s = args.layer_s if args.layer_s is not None else 3.0 if args.quick else 10.0
    torch = cuda_torch("torch_power")
    if torch is None:
        return 4
    import torch.nn as nn

    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "mix_s": mix_s,
           "layer_s": layer_s, "gemm_dtype": "fp8_e4m3" if fp8 else "bf16", "mix": [], "layers": []}
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    sampler = Sampler(f"GPU-{uuid}" if uuid is not None else None)
    sampler.start()

    def save():
        res["samples"] = [[p, round(t, 3), c, round(w, 1), g] for p, t, c, w, g in sampler.samples]
        with open(out, "w") as f:
            json.dump(res, f, indent=1)

    def ev():
        return torch.cuda.Event(enable_timing=True)

    def queued(fn, n):
        """n calls of fn queued, each between two CUDA events: [(start, end)]."""
        block = []
        for _ in range(n):
            x, y = ev(), ev()
            x.record()
            fn()
            y.record()
            block.append((x, y))
        return block

    def timed_loop(fn, seconds, per_block):
        """fn() again and again for `seconds`, each call between CUDA events, a block of `per_block` calls queued before
        the block ahead is read back (the GPU never waits for the host): [(seconds since the sampler began, ms)]."""
        out, pending = [], None

        def collect(block):
            block[-1][1].synchronize()
            when = sampler.now()
            out.extend((when, x.elapsed_time(y)) for x, y in block)

        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            block = queued(fn, per_block)
            if pending:
                collect(pending)
            pending = block
        if pending:
            collect(pending)
        return out

    # --- mix: GEMMs among copies ---------------------------------------------------------------------------------
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * n**3
    if fp8:
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev, dtype=torch.float32)

        def mm():
            torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def mm():
            torch.mm(a, b, out=c)
    for _ in range(5):
        mm()
    torch.cuda.synchronize()
    e0, e1 = ev(), ev()
    e0.record()
    for _ in range(10):
        mm()
    e1.record()
    e1.synchronize()
    gemm_ms = e0.elapsed_time(e1) / 10
    # A copy of about one GEMM's length: bytes read + written at the device's copy speed, measured here.
    src = torch.empty(256 << 20, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(10):
        dst.copy_(src)
    e1.record()
    e1.synchronize()
    copy_bw = 2 * src.numel() * 10 / (e0.elapsed_time(e1) / 1e3)
    copy_bytes = int(min(max(gemm_ms * 1e-3 * copy_bw / 2, 1 << 20), 4 << 30)) // 4096 * 4096
    src = torch.empty(copy_bytes, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    res.update(gemm_flops=flops, gemm_cold_ms=round(gemm_ms, 4),
               gemm_cold_tflops=round(flops / (gemm_ms * 1e-3) / 1e12, 1),
               copy_bandwidth_bytes_per_s=round(copy_bw), copy_bytes=copy_bytes)
    print(f"8192^3 GEMM cold {gemm_ms:.3f} ms ({res['gemm_cold_tflops']} TF/s); copy {copy_bw / 1e12:.2f} TB/s, "
          f"{copy_bytes >> 20} MiB per copy", file=sys.stderr, flush=True)

    patterns = (("1/4", "GCCC"), ("1/2", "GC"), ("3/4", "GGGC"), ("1", "G"), ("0", "C"), ("1/2 again", "GC"))
    for name, pat in patterns if "mix" in parts else ():
        time.sleep(2.0)
        phase = f"mix {name}"
        sampler.phase = phase
        t_start = sampler.now()
        t_end = time.perf_counter() + mix_s
        g_ms, c_ms, pending = [], [], None

        def collect(block):
            block[-1][2].synchronize()
            when = sampler.now()
            for k, x, y in block:
                (g_ms if k == "G" else c_ms).append((when, x.elapsed_time(y)))

        while time.perf_counter() < t_end:
            block = []
            for _ in range(max(1, 24 // len(pat))):
                for k in pat:
                    x, y = ev(), ev()
                    x.record()
                    if k == "G":
                        mm()
                    else:
                        dst.copy_(src)
                    y.record()
                    block.append((k, x, y))
            if pending:   # the block before this one: the GPU has this one queued meanwhile
                collect(pending)
            pending = block
        collect(pending)
        sampler.phase = "idle"
        cut = t_start + 0.4 * (sampler.now() - t_start)
        gl = [v for w, v in g_ms if w >= cut]
        cl = [v for w, v in c_ms if w >= cut]
        row = {"gemm_share": name, "pattern": pat,
               "gemm_tflops_median": round(flops / (statistics.median(gl) * 1e-3) / 1e12, 1) if gl else None,
               "gemm_tflops_first": round(flops / (g_ms[0][1] * 1e-3) / 1e12, 1) if g_ms else None,
               "copy_tb_per_s_median": round(2 * copy_bytes / (statistics.median(cl) * 1e-3) / 1e12, 3) if cl else None,
               "gemm_time_share": round(sum(gl) / (sum(gl) + sum(cl)), 3) if gl or cl else None}
        row.update(sampler.summary(phase, cut))
        res["mix"].append(row)
        print(f"mix {name}: {row}", file=sys.stderr, flush=True)
        save()

    # --- duty: GEMM bursts between idle gaps of the same length (the power limiter's memory) --------------------------
    for burst_ms in (5, 25, 100, 400) if "duty" in parts else ():
        time.sleep(2.0)
        phase = f"duty {burst_ms} ms"
        per_burst = max(1, round(burst_ms / gemm_ms))
        t_end = time.perf_counter() + mix_s
        g_ms = []
        while time.perf_counter() < t_end:
            sampler.phase = phase
            block = queued(mm, per_burst)
            block[-1][1].synchronize()
            busy = block[0][0].elapsed_time(block[-1][1])
            g_ms += [x.elapsed_time(y) for x, y in block]
            sampler.phase = phase + " idle"
            time.sleep(busy / 1e3)
        sampler.phase = "idle"
        late = g_ms[len(g_ms) * 2 // 5:]
        row = {"burst_ms": burst_ms, "gemms_per_burst": per_burst,
               "gemm_tflops_median": round(flops / (statistics.median(late) * 1e-3) / 1e12, 1) if late else None}
        row.update(sampler.summary(phase, 0.0))
        res.setdefault("duty", []).append(row)
        print(f"duty {burst_ms} ms: {row}", file=sys.stderr, flush=True)
        save()

    # --- rest: every GEMM of a burst after a rest of each length, after the limiter has settled -------------------------
    def burst(n):
        """n GEMMs queued and waited for: their events, and [(start within the burst, length)] in ms."""
        block = queued(mm, n)
        block[-1][1].synchronize()
        t0 = block[0][0]
        return block, [(round(t0.elapsed_time(x), 4), round(x.elapsed_time(y), 4)) for x, y in block]

    settle_n, burst_n = max(1, round(1000 / gemm_ms)), max(1, round(600 / gemm_ms))
    for rest_ms in rests if "rest" in parts else ():
        row = {"rest_ms": rest_ms, "settle": [], "bursts": [], "idle_ms": []}
        for _ in range(3):
            sampler.phase = f"rest {rest_ms} ms settle"
            settled, times = burst(settle_n)
            row["settle"].append(times)
            sampler.phase = f"rest {rest_ms} ms idle"
            time.sleep(rest_ms / 1e3)
            sampler.phase = f"rest {rest_ms} ms burst"
            block, times = burst(burst_n)
            row["bursts"].append(times)
            row["idle_ms"].append(round(settled[-1][1].elapsed_time(block[0][0]), 3))  # the GPU's own idle gap
        sampler.phase = "idle"
        res.setdefault("rest", []).append(row)
        print(f"rest {rest_ms} ms: first GEMMs of each burst "
              f"{[[ms for _, ms in b[:3]] for b in row['bursts']]} ms, settled {row['settle'][-1][-1][1]} ms",
              file=sys.stderr, flush=True)
        save()

    # --- attention: cuDNN's fused attention alone (one GPU of the 177B row at t = 8), forward + backward ---------------
    try:
        if "attention" not in parts:
            raise LookupError("not asked for (--only)")
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (torch.randn(1, 12, 4096, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        go = torch.randn(1, 12, 4096, 128, device=dev, dtype=torch.bfloat16)

        def attn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(go)

        for _ in range(3):
            attn()
        torch.cuda.synchronize()
        time.sleep(2.0)
        sampler.phase = "attention"
        t_start = sampler.now()
        times = timed_loop(attn, mix_s, 8)
        sampler.phase = "idle"
        cut = t_start + 0.4 * (sampler.now() - t_start)
        late = [v for w, v in times if w >= cut]
        row = {"shape": "1 x 12 heads x 4096 x 128, causal, forward + backward",
               "first_ms": round(times[0][1], 4) if times else None,
               "sustained_ms": round(statistics.median(late), 4) if late else None}
        row.update(sampler.summary("attention", cut))
        res["attention"] = row
        print(f"attention: {row}", file=sys.stderr, flush=True)
        del q, k, v, go
        save()
    except Exception as e:  # noqa: BLE001 - no cuDNN attention here: the other parts stand
        print(f"attention: skipped ({e})", file=sys.stderr, flush=True)
    del a, b, c, src, dst
    torch.cuda.empty_cache()

    # --- layers: cold against sustained ----------------------------------------------------------------------------
    # The 177B stack once more for three times as long at the end (the GPU warmer: drift over a longer run).
    shapes = (("1.7B", 2048, 16, 1, 4, 1), ("7.1B", 4096, 32, 2, 4, 1), ("70B", 8192, 64, 8, 4, 1),
              ("177B", 12288, 96, 8, 4, 1), ("177B long", 12288, 96, 8, 4, 3))
    def layer_step(h, heads, t, depth):
        """Forward + backward of `depth` GPT layers at one GPU's shapes for tensor size t, on 4,096 tokens, warmed up
        (two steps, waited for): (step, what to delete after)."""
        torch.manual_seed(0)
        stack = nn.Sequential(*[gpt_layer(torch, h, heads, t) for _ in range(depth)]).to(dev, torch.bfloat16)
        x = torch.randn(4096, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        gy = torch.ones(4096, h, device=dev, dtype=torch.bfloat16)

        def step():
            stack(x).backward(gy)

        for _ in range(2):
            step()
        torch.cuda.synchronize()
        return step, [stack, x, gy]

    for name, h, heads, t, depth, longer in shapes if "layers" in parts else ():
        step, held = layer_step(h, heads, t, depth)
        time.sleep(3.0)
        phase = f"layer {name}"
        sampler.phase = phase
        t_start = sampler.now()
        steps = [(when, ms / depth) for when, ms in timed_loop(step, layer_s * longer, 2)]
        sampler.phase = "idle"
        cut = t_start + 0.6 * (sampler.now() - t_start)
        late = [v for w, v in steps if w >= cut]
        cold = [v for _, v in steps[:3]]
        row = {"model": name, "hidden": h, "heads": heads, "tensor": t, "layers": depth, "seq": 4096,
               "steps": len(steps), "cold_ms_per_layer": round(statistics.median(cold), 4),
               "sustained_ms_per_layer": round(statistics.median(late), 4) if late else None,
               "series_ms_per_layer": [round(v, 4) for _, v in steps]}
        if late:
            row["sustained_over_cold"] = round(row["sustained_ms_per_layer"] / row["cold_ms_per_layer"], 4)
        row["cold_readings"] = sampler.summary(phase, t_start, t_start + 0.5)
        row.update(sampler.summary(phase, cut))
        res["layers"].append(row)
        print(f"layers {name}: cold {row['cold_ms_per_layer']} ms, sustained {row['sustained_ms_per_layer']} ms, "
              f"{ {k: v for k, v in row.items() if k.startswith(('sm_', 'power', 'temp'))} }", file=sys.stderr,
              flush=True)
        save()
        del step, held
        torch.cuda.empty_cache()
    # --- gaps: a layer stack's steps with waits between them (the headroom a pipeline's waits give back) ------------
    spin_cycles_per_ms = None
    # torch.cuda._sleep counts SM clock cycles: its rate is measured once, at the idle GPU's boost clock, so after a
    # step at a power-limited clock a spin lasts longer than its nominal gap (each wait is timed by events anyway).
    if "gaps" in parts and fill == "spin":
        torch.cuda._sleep(1000000)
        a, b = ev(), ev()
        a.record()
        torch.cuda._sleep(20000000)
        b.record()
        b.synchronize()
        spin_cycles_per_ms = 20000000 / a.elapsed_time(b)
        res["spin_cycles_per_ms"] = round(spin_cycles_per_ms)
    for name, h, heads, t in (("177B", 12288, 96, 8), ("1.7B", 2048, 16, 1)) if "gaps" in parts else ():
        step, held = layer_step(h, heads, t, 4)
        for gap_ms in [None] + gaps:
            time.sleep(2.0)
            phase = f"gaps {name} {gap_ms if gap_ms is not None else 'none'}"
            sampler.phase = phase
            t_start = sampler.now()
            if gap_ms is None:  # back to back, the GPU never waiting: the steady state
                series = [(0.0, ms) for _, ms in timed_loop(step, mix_s, 2)]
            else:   # each step waited for, then gap_ms idle or spinning: [(the GPU's wait before it, its ms)]
                series, prev, t_end = [], None, time.perf_counter() + mix_s
                while time.perf_counter() < t_end:
                    if fill == "spin" and gap_ms > 0 and prev is not None:  # the wait on the GPU, one block spinning
                        torch.cuda._sleep(int(gap_ms * spin_cycles_per_ms))
                    (a0, a1), = queued(step, 1)
                    a1.synchronize()
                    series.append((round(prev.elapsed_time(a0), 4) if prev else None, round(a0.elapsed_time(a1), 4)))
                    prev = a1
                    if fill == "idle":
                        time.sleep(gap_ms / 1e3)
            sampler.phase = "idle"
            late = series[len(series) * 2 // 5:]
            row = {"model": name, "hidden": h, "heads": heads, "tensor": t, "layers": 4, "seq": 4096,
                   "gap_ms": gap_ms, "gap_fill": fill, "steps": len(series),
                   "step_ms_median": round(statistics.median(ms for _, ms in late), 4) if late else None,
                   "idle_ms_median": round(statistics.median(i for i, _ in late if i is not None), 4)
                   if any(i is not None for i, _ in late) else None,
                   "series": series}
            row.update(sampler.summary(phase, 0.0))
            res.setdefault("gaps", []).append(row)
            print(f"gaps ({fill}) {name} {gap_ms} ms: step {row['step_ms_median']} ms, "
                  f"GPU {'idle' if fill == 'idle' else 'waiting'} {row['idle_ms_median']} ms, "
                  f"{ {k: v for k, v in row.items() if k.startswith(('sm_', 'power'))} }", file=sys.stderr, flush=True)
            save()
        del step, held
        torch.cuda.empty_cache()
    sampler.stop.set()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
