#!/usr/bin/env python3
"""The GEMM side of Transformer Engine's tensor-parallel communication overlap (userbuffers), on one GPU.

With `--tp-comm-overlap` Megatron-Core hands a layer's eight sequence-parallel collectives to Transformer Engine,
which splits or shares the GEMMs they overlap. TE's defaults (transformer_engine/pytorch/module/base.py,
`initialize_ub`, `get_default_config`), per GEMM:
  ring_exchange  qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad: the GEMM runs as t GEMMs of n / t rows, one per ring
                 step, while the copy engines pass the next chunk on (num_sm 1, no SM margin);
  pipeline       proj_fprop, fc2_fprop: the GEMM runs as 4 GEMMs of n / 4 rows on the SMs less 16
                 (set_sm_margin), each chunk's reduce-scatter on the 16 SMs during the next chunk;
  bulk           qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad: one GEMM on the SMs less 16 while the collective
                 (the input's all-gather, the input gradient's reduce-scatter) runs in bulk on the 16;
  (none)         proj_wgrad, fc2_wgrad: plain GEMMs.
One GPU cannot run the collectives, but it can run what they do to the GEMMs. Per GEMM of each Megatron-LM H100
row with t > 1 (b = 1, s = 4096, BF16), the median time of
  full     the whole GEMM, as without the overlap (full_lt: through cuBLASLt, as TE calls it);
  split    TE's chunks (t or 4 GEMMs writing slices of one output), all SMs;
  te       ring_exchange: the chunks with device-to-device copies of each chunk on a side stream (a ring step's
           local memory traffic; te_lt through cuBLASLt); pipeline and bulk: the chunks with 16 SMs held for the
           whole GEMM by a kernel that also copies the collective's local bytes (200 KB of shared memory per block,
           so that no GEMM block fits beside it);
  held     pipeline and bulk: the same with no bytes copied;
  te1      pipeline and bulk as TE 1.x runs them (set_sm_margin False): cuBLASLt, 16 SMs held in clusters of 2
           (TE's cga_size) for as long as the collective itself takes on 8 x H100 NVLink (360 GB/s bus bandwidth;
           pipeline: its 3 overlapped quarters), the bytes copied meanwhile;
  te2      as te1 with cuBLASLt told to leave 16 SMs (torch's SM carve-out): TE >= 2.0's set_sm_margin;
  carve    split with the carve-out alone.
Each call is timed by CUDA events around its GEMMs alone, after a GPU sleep that lets the host queue them and the
holder take its SMs first (the holder's clock starts when the GEMMs do); variants alternate round by round (same
clocks). Before the rows: one GEMM (4096 x 8192 x 8192) with 0-66 SMs held.
--sweep: instead of the rows, ten GEMM shapes with 2-32 SMs held for the whole GEMM by the holder launched plainly
or in clusters of 2 or 4 (NCCL launches its kernels in clusters of 4 on sm90 by default), 16 SMs held for a quarter
and a half of the GEMM, and cuBLASLt with the carve-out, with 16 SMs held, and both.
--kinds: bandwidth-bound kernels (add, copy, layer norm, GeLU) and cuDNN's fused attention with 2, 16, 32 SMs held.
Usage: torch_tp_overlap.py OUT.json [--rows N | --sweep | --kinds]
"""
import json
import statistics
import sys

from torch_common import at_least, cuda_torch, script_parser

ROWS = (("7.1B", 4096, 2), ("16B", 6144, 4), ("32B", 7168, 8), ("70B", 8192, 8), ("119B", 10240, 8),
        ("177B", 12288, 8), ("314B", 16384, 8), ("462B", 18432, 8))
TOKENS = 4096
COMM_SMS = 16

HOLD = r"""
extern "C" __global__ void hold(const float4* __restrict__ src, float4* __restrict__ dst, long long n4,
                                const volatile int* flag, const volatile int* go, long long max_ns) {
  extern __shared__ float4 reserved[];  // only reserved: no GEMM block fits on the SM beside this one
  __shared__ unsigned long long start;
  if (threadIdx.x == 0) {
    reserved[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {  // until the GEMMs start (bounded: 50 ms)
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (*go == 0 && t - t0 < 50000000ull);
    start = t;
  }
  __syncthreads();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x)
    dst[i] = src[i];  // the collective's local bytes, while the GEMMs run
  if (threadIdx.x == 0) {
    unsigned long long t;
    do {  // until the GEMMs end or max_ns after they started
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (*flag == 0 && (long long)(t - start) < max_ns);
  }
  __syncthreads();
}
"""


def gemms(h, t):
    """(name, method, m, n, k) of a layer's twelve GEMMs at one GPU's shapes: out[m, n] = a[m, k] b[k, n]."""
    n = TOKENS
    return (("qkv_fprop", "ring", n, 3 * h // t, h), ("proj_fprop", "pipeline", n, h, h // t),
            ("fc1_fprop", "ring", n, 4 * h // t, h), ("fc2_fprop", "pipeline", n, h, 4 * h // t),
            ("fc2_dgrad", "ring", n, 4 * h // t, h), ("fc2_wgrad", "none", h, 4 * h // t, n),
            ("fc1_dgrad", "bulk", n, h, 4 * h // t), ("fc1_wgrad", "bulk", 4 * h // t, h, n),
            ("proj_dgrad", "ring", n, h // t, h), ("proj_wgrad", "none", h, h // t, n),
            ("qkv_dgrad", "bulk", n, h, 3 * h // t), ("qkv_wgrad", "bulk", 3 * h // t, h, n))


def main():
    parser = script_parser(__doc__)
    parser.add_argument("--rows", metavar="N", type=at_least(0), default=len(ROWS))
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--kinds", action="store_true")
    args = parser.parse_args()
    rows = ROWS[:args.rows]
    torch = cuda_torch("torch_tp_overlap")
    if torch is None:
        return 4
    import cupy as cp

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    # The holder launched plainly, and in clusters of 2 and 4 SMs (TE's userbuffers kernels run in clusters of
    # cga_size = 2; NCCL's on Hopper in clusters of 4 by default): a cluster takes SMs of one GPC together.
    smem = 200 * 1024
    kernels = {}
    for c in (1, 2, 4):
        src = HOLD if c == 1 else HOLD.replace("__global__ void hold", f"__global__ void __cluster_dims__({c},1,1) hold")
        kernels[c] = cp.RawKernel(src, "hold")
        kernels[c].max_dynamic_shared_size_bytes = smem
    carve = getattr(torch._C, "_set_sm_carveout_experimental", None)
    res = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "cupy": cp.__version__, "tokens": TOKENS, "comm_sms": COMM_SMS, "carveout_api": carve is not None,
           "rows": []}
    main_s = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    flag = torch.zeros(1, dtype=torch.int32, device=dev)
    go = torch.zeros(1, dtype=torch.int32, device=dev)
    start = torch.cuda.Event()
    # A GPU sleep before each call's GEMMs lets the host queue them all (and the holder take its SMs) before they
    # run; the call is timed by events after the sleep, so the sleep's length (in cycles: it varies with the clock)
    # does not enter.
    sleep_cycles = 400_000  # ~0.2 ms at 1.98 GHz
    forever = 200_000_000  # ns: the holder gives up 0.2 s after the GEMMs started whatever happens
    buf_src = torch.empty(64 << 20, dtype=torch.float32, device=dev)  # 256 MiB for the collectives' local bytes
    buf_dst = torch.empty_like(buf_src)
    hold_args = (cp.asarray(buf_src), cp.asarray(buf_dst), cp.asarray(flag), cp.asarray(go))
    side_cp = cp.cuda.ExternalStream(side.cuda_stream)

    def run(ev, chunks, a, b, out, hold=None, ring_copies=None, sms=COMM_SMS, hold_ns=forever, cluster=1, work=None):
        """One call: hold (bytes to copy, 0 for none) = the holder on `sms` SMs on the side stream, holding them
        until the GEMMs end or hold_ns after they start; ring_copies = the ring's chunk copies on the side stream;
        the GEMM chunks on the main stream between ev[0] and ev[1]."""
        flag.zero_()
        go.zero_()
        start.record(main_s)
        side.wait_event(start)
        if hold is not None:
            src, dst, fl, g = hold_args
            with side_cp:
                kernels[cluster]((sms,), (1024,), (src, dst, cp.int64(hold // 16), fl, g, cp.int64(hold_ns)),
                       shared_mem=smem)
        torch.cuda._sleep(sleep_cycles)
        ev[0].record(main_s)
        go.fill_(1)
        if ring_copies:
            side.wait_event(ev[0])
            with torch.cuda.stream(side):
                for dst, src in ring_copies:
                    dst.copy_(src)
        if work is not None:
            work()
        for lo, hi in chunks:
            torch.mm(a[lo:hi], b, out=out[lo:hi])
        ev[1].record(main_s)
        flag.fill_(1)
        main_s.wait_stream(side)

    def time_variants(variants, calls=6, rounds=7):
        """Median microseconds of each variant's GEMMs, the variants taken in turn round by round."""
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for fn in variants.values():  # warm-up, cuBLAS heuristics
            for _ in range(2):
                fn(evs[0])
        torch.cuda.synchronize()
        times = {k: [] for k in variants}
        for _ in range(rounds):
            for name, fn in variants.items():
                for ev in evs:
                    fn(ev)
                torch.cuda.synchronize()
                times[name] += [a.elapsed_time(b) * 1e3 for a, b in evs]
        return {k: statistics.median(v) for k, v in times.items()}

    print(f"{props.name}: {props.multi_processor_count} SMs, carve-out API {carve is not None}", flush=True)

    def lt(ev, *a, cut=0, **kw):
        """run() through cuBLASLt (as Transformer Engine's GEMMs), with `cut` SMs carved out (TE's set_sm_margin)."""
        torch.backends.cuda.preferred_blas_library("cublaslt")
        if cut:
            carve(cut)
        try:
            run(ev, *a, **kw)
        finally:
            if cut:
                carve(None)
            torch.backends.cuda.preferred_blas_library("cublas")
    if carve is not None:
        try:
            carve(COMM_SMS)
            carve(None)
        except Exception as e:  # noqa: BLE001 - an experimental call: note why and go on without it
            print(f"carve-out API unusable: {e}", flush=True)
            res["carveout_api"] = str(e)
            carve = None

    # SMs held against one GEMM (4096 x 8192 x 8192): is the loss the held share of the SMs (strata's collective
    # contention model), or stepped by waves?
    a = torch.randn(4096, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16).t()
    out = torch.empty(4096, 8192, device=dev, dtype=torch.bfloat16)
    sweep = {}
    for held in (0, 2, 8, 16, 24, 32, 66):
        def fn(ev, held=held):
            run(ev, [(0, 4096)], a, b, out, hold=0 if held else None, sms=held)
        sweep[str(held)] = fn
    times = time_variants(sweep)
    res["sm_sweep"] = {"m": 4096, "n": 8192, "k": 8192, "us_by_sms_held": {k: round(v, 2) for k, v in times.items()}}
    print("SMs held -> us: " + " ".join(f"{k}:{v:.1f}" for k, v in times.items()), flush=True)
    del a, b, out
    if args.kinds:
        # Kernels other than GEMMs with SMs held (clusters as NCCL's): is a bandwidth-bound kernel slowed by the
        # share of the SMs (or less), and is fused attention slowed like a GEMM?
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        x = torch.randn(8192, 6144, device=dev, dtype=torch.bfloat16)
        y = torch.randn_like(x)
        w = torch.ones(6144, device=dev, dtype=torch.bfloat16)
        big = torch.randn(8192, 24576, device=dev, dtype=torch.bfloat16)
        big_out = torch.empty_like(big)
        q = torch.randn(1, 16, 4096, 128, device=dev, dtype=torch.bfloat16)
        k_, v_ = torch.randn_like(q), torch.randn_like(q)

        def attention():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, k_, v_, is_causal=True)

        ops = {"add [8192 x 6144]": lambda: x.add_(y), "copy [8192 x 24576]": lambda: big_out.copy_(big),
               "layer_norm [8192 x 6144]": lambda: F.layer_norm(x, (6144,), w, w),
               "gelu [8192 x 24576]": lambda: torch.nn.functional.gelu(big, approximate="tanh"),
               "cuDNN attention fwd (16 heads, s 4096, d 128)": attention}
        res["kinds"] = []
        for name, op in ops.items():
            v = {"0": lambda ev, op=op: run(ev, [], None, None, None, work=op)}
            for held in (2, 16, 32):
                v[str(held)] = (lambda ev, op=op, held=held:
                                run(ev, [], None, None, None, hold=0, sms=held, cluster=2 if held == 2 else 4, work=op))
            times = time_variants(v)
            entry = {"op": name, "us": {key: round(us, 2) for key, us in times.items()}}
            res["kinds"].append(entry)
            print(f"{name}: alone {times['0']:.1f} us; held " +
                  " ".join(f"{key} -> {us / times['0']:.3f}" for key, us in times.items() if key != "0"), flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    if args.sweep:
        # Per shape, all variants in one alternating loop: 2-32 SMs held for the whole GEMM by the holder launched
        # plainly or in clusters of 2 or 4; 16 SMs (clusters of 2) held for a quarter and a half of the GEMM's
        # time (does a late SM join the GEMM's work?); cuBLASLt, with 16 SMs carved out (TE's set_sm_margin),
        # with 16 held, and both.
        shapes = ((4096, 8192, 8192), (4096, 4608, 12288), (4096, 6144, 12288), (4096, 12288, 6144),
                  (4096, 12288, 1536), (12288, 6144, 4096), (4096, 2048, 4096), (8192, 8192, 8192),
                  (4096, 3072, 7168), (4096, 7168, 3584))
        res["sweep"] = []
        for m, n, k in shapes:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            whole = [(0, m)]
            v = {"held0": lambda ev: run(ev, whole, a, b, out)}
            est = time_variants(v, calls=2, rounds=2)["held0"]
            for c in (1, 2, 4):
                for held in (2, 4, 16, 32):
                    if held % c == 0:
                        v[f"held{held}_c{c}"] = (lambda ev, held=held, c=c:
                                                 run(ev, whole, a, b, out, hold=0, sms=held, cluster=c))
            for frac in (0.25, 0.5):
                v[f"held16_c2_for{frac}"] = (lambda ev, ns=int(frac * est * 1e3):
                                             run(ev, whole, a, b, out, hold=0, sms=16, cluster=2, hold_ns=ns))
            v["lt"] = lambda ev: lt(ev, whole, a, b, out)
            v["lt_held16_c2"] = lambda ev: lt(ev, whole, a, b, out, hold=0, sms=16, cluster=2)
            if carve is not None:
                v["lt_carve16"] = lambda ev: lt(ev, whole, a, b, out, cut=16)
                v["lt_carve16_held16_c2"] = lambda ev: lt(ev, whole, a, b, out, hold=0, sms=16, cluster=2, cut=16)
            times = time_variants(v)
            base = times["held0"]
            entry = {"m": m, "n": n, "k": k, "us": {key: round(us, 2) for key, us in times.items()}}
            res["sweep"].append(entry)
            print(f"{m}x{n}x{k}: " + " ".join(f"{key}={us / base:.3f}" for key, us in entry["us"].items()) +
                  f" (held0 {base:.1f} us)", flush=True)
            del a, b, out
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    for row, h, t in rows:
        if args.sweep or args.kinds:
            break
        entry = {"name": row, "hidden": h, "tensor": t, "gemms": []}
        for name, method, m, n, k in gemms(h, t):
            torch.manual_seed(0)
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()  # x W^T, as a linear layer
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            whole = [(0, m)]
            parts = t if method == "ring" else 4 if method == "pipeline" else 1
            split = [(i * m // parts, (i + 1) * m // parts) for i in range(parts)]
            v = {"full": lambda ev: run(ev, whole, a, b, out)}
            if method != "none":
                v["split"] = lambda ev: run(ev, split, a, b, out)
            msg = 2 * TOKENS * h  # the collective's whole message (bytes), as strata counts it
            if method == "ring":
                rows_per = TOKENS // t
                src = torch.empty(rows_per * h, dtype=torch.bfloat16, device=dev)
                dsts = [torch.empty_like(src) for _ in range(t)]
                v["te"] = lambda ev: run(ev, split, a, b, out, ring_copies=[(d, src) for d in dsts])
                v["full_lt"] = lambda ev: lt(ev, whole, a, b, out)
                v["te_lt"] = lambda ev: lt(ev, split, a, b, out, ring_copies=[(d, src) for d in dsts])
            elif method in ("pipeline", "bulk"):
                # Local bytes of a reduce-scatter / all-gather of `msg`: (t-1)/t of it read and written here.
                hold_bytes = min(msg * (t - 1) // t, buf_src.numel() * 4)
                v["te"] = lambda ev: run(ev, split, a, b, out, hold=hold_bytes)
                v["held"] = lambda ev: run(ev, split, a, b, out, hold=0)
                # The collective's own time on 8 x H100 NVLink (360 GB/s bus bandwidth, nccl-tests class): the
                # holder keeps its SMs that long (pipeline: the 3 overlapped quarters), in clusters of 2 as TE's.
                ns = int(msg * (t - 1) / t / 360e9 * 1e9 * (0.75 if method == "pipeline" else 1.0))
                v["full_lt"] = lambda ev: lt(ev, whole, a, b, out)
                v["te1"] = lambda ev: lt(ev, split, a, b, out, hold=hold_bytes, hold_ns=ns, cluster=2)
                if carve is not None:
                    v["te2"] = lambda ev: lt(ev, split, a, b, out, hold=hold_bytes, hold_ns=ns, cluster=2, cut=COMM_SMS)
                if carve is not None:
                    def carved(ev, split=split, a=a, b=b, out=out):
                        carve(COMM_SMS)
                        try:
                            run(ev, split, a, b, out)
                        finally:
                            carve(None)
                    v["carve"] = carved
            times = time_variants(v)
            g = {"name": name, "method": method, "m": m, "n": n, "k": k, "parts": parts}
            for key, us in times.items():
                g[key + "_us"] = round(us, 2)
            flops = 2.0 * m * n * k
            g["full_tflops"] = round(flops / (g["full_us"] * 1e-6) / 1e12, 1)
            entry["gemms"].append(g)
            print(f"{row} {name:11s} {method:8s} " + " ".join(f"{key}={g[key + '_us']:.1f}" for key in times) +
                  f"  te/full={g.get('te_us', g['full_us']) / g['full_us']:.3f}", flush=True)
            del a, b, out
        res["rows"].append(entry)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
