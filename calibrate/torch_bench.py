#!/usr/bin/env python3
"""Microbenchmarks strata-calibrate does not run itself, measured through PyTorch on the local GPU:

- BF16 and FP8 (E4M3, per-tensor scales, torch._scaled_mm = cuBLASLt) GEMMs at the linear-layer shapes of the
  Megatron-LM H100 table's models (forward, data-gradient and weight-gradient GEMM of QKV, proj, fc1, fc2 on one
  GPU of a t-way tensor-parallel group, s*b = 4096 tokens), square sizes, and a K sweep (M = N = 8192) that shows
  how the efficiency falls with a short inner dimension (the cost model's k_half);
- fused attention (torch SDPA, causal, BF16) with the flash and the cuDNN backends, forward and forward+backward.

Each time is the median of 5 repeats of N timed launches (CUDA events) after warm-up. Output: one JSON file
with the device, the versions and one record per measurement. Usage: torch_bench.py OUT.json [--quick] [--attention-grid]
[--dropout P] (--attention-grid: fused attention only, over heads per GPU x sequence length; --dropout P: each fused
attention shape timed twice in the same run, without dropout and with dropout_p = P on its probabilities, the records
saying which: what a profile's flash_attention.dropout_time_factor is, measured)
Exit 4 without a CUDA device (as strata-calibrate).
"""
import json
import sys
import time

from torch_common import cuda_torch, gpu_seconds, probability, script_parser


def main():
    parser = script_parser(__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--attention-grid", action="store_true")  # only the fused-attention grid (no GEMMs)
    parser.add_argument("--dropout", metavar="P", type=probability, default=0.0)
    args = parser.parse_args()
    out, quick, grid, dropout = args.out, args.quick, args.attention_grid, args.dropout
    torch = cuda_torch("torch_bench")
    if torch is None:
        return 4
    dev = torch.device("cuda")
    prop = torch.cuda.get_device_properties(0)
    res = {
        "device": prop.name,
        "sm_count": prop.multi_processor_count,
        "memory_bytes": prop.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": "CUDA events around N launches, median of 5 repeats after 3 warm-up launches",
        "gemm": [],
        "attention": [],
        "errors": [],
    }
    iters = 5 if quick else 20

    def timed(fn, n=iters, ahead=False):
        return gpu_seconds(torch, fn, n, ahead)

    def save():
        with open(out, "w") as f:
            json.dump(res, f, indent=1)

    def section(name, fn):
        """Runs one measurement; an error is recorded and the next one still runs."""
        try:
            fn()
        except Exception as e:
            res["errors"].append(f"{name}: " + repr(e)[:300])
        save()

    fp8 = getattr(torch, "float8_e4m3fn", None)

    def gemm(tag, m, n, k):
        """C[m,n] = A[m,k] B[k,n]: bf16 and fp8 (A row-major, B column-major as cuBLASLt's TN wants)."""
        rec = {"tag": tag, "m": m, "n": n, "k": k, "flop": 2.0 * m * n * k}
        try:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            bt = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
            b = bt.t()
            t = timed(lambda: torch.mm(a, b))
            rec["bf16_s"] = t
            rec["bf16_tflops"] = rec["flop"] / t / 1e12
            if fp8 is not None and m % 16 == 0 and n % 16 == 0 and k % 16 == 0:
                a8, b8 = a.to(fp8), bt.to(fp8).t()
                one = torch.ones((), device=dev, dtype=torch.float32)
                t8 = timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
                rec["fp8_s"] = t8
                rec["fp8_tflops"] = rec["flop"] / t8 / 1e12
            del a, bt, b
        except Exception as e:  # record and go on: one shape must not cost the rest
            rec["error"] = repr(e)[:300]
        res["gemm"].append(rec)
        print(f"gemm {tag} {m}x{n}x{k}: bf16 {rec.get('bf16_tflops', 0):.0f} TF/s, fp8 {rec.get('fp8_tflops', 0):.0f} TF/s",
              file=sys.stderr, flush=True)

    tokens = 4096
    # (name, hidden, ffn, t): the Megatron-LM README H100 table's models (GPT, 4h MLP, MHA).
    rows = [("1.7B", 2048, 8192, 1), ("7.1B", 4096, 16384, 2), ("16B", 6144, 24576, 4), ("32B", 7168, 28672, 8),
            ("70B", 8192, 32768, 8), ("177B", 12288, 49152, 8), ("462B", 18432, 73728, 8), ("22B-paper", 6144, 24576, 8)]
    if quick:
        rows = rows[:2]
    if grid:
        rows = []
    for name, h, f, t in rows:
        for lin, k_in, n_out in (("qkv", h, 3 * h // t), ("proj", h // t, h), ("fc1", h, f // t), ("fc2", f // t, h)):
            gemm(f"{name} t={t} {lin} fwd", tokens, n_out, k_in)
            gemm(f"{name} t={t} {lin} dgrad", tokens, k_in, n_out)
            gemm(f"{name} t={t} {lin} wgrad", n_out, k_in, tokens)
        save()
    for s in ([] if grid else [4096, 8192] if quick else [1024, 2048, 4096, 8192, 16384]):
        gemm("square", s, s, s)
    for k in ([] if grid else [256, 1024] if quick else [128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384]):
        gemm("k-sweep", 8192, 8192, k)
    save()

    # Burst against sustained: 8192^3 BF16 GEMMs back to back for about 6 s, TF/s per block of 20 launches.
    # A GEMM-only loop draws the board's power limit; the clocks (and TF/s) settle below the first seconds' figure.
    def sustained():
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        torch.cuda.synchronize()
        blocks, t_end = [], time.time() + (2 if quick else 6)
        while time.time() < t_end:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                torch.mm(a, b)
            e1.record()
            e1.synchronize()
            blocks.append(round(20 * 2.0 * 8192**3 / (e0.elapsed_time(e1) / 1e3) / 1e12, 1))
        res["sustained_8192_bf16_tflops_per_block"] = blocks
        print(f"sustained 8192^3 bf16: first block {blocks[0]} TF/s, last {blocks[-1]} TF/s, {len(blocks)} blocks",
              file=sys.stderr, flush=True)
        del a, b

    if not grid:
        section("sustained", sustained)

    # Run-to-run jitter of a compute span (the simulator's variation.span_sigma): one "span" is the 12 GEMMs of a
    # layer's forward and backward at the paper's 22B shapes on one GPU of t = 8 (sb = 8192) plus a GeLU, timed one
    # by one with CUDA events, 1,500 spans back to back on the heat-soaked GPU.
    def span_jitter():
        h, t, sb = 6144, 8, 8192
        dims = [(sb, 3 * h // t, h), (sb, h, h // t), (sb, 4 * h // t, h), (sb, h, 4 * h // t)]
        mats = []
        for m, n, k in dims:
            mats.append((torch.randn(m, k, device=dev, dtype=torch.bfloat16),
                         torch.randn(k, n, device=dev, dtype=torch.bfloat16),
                         torch.randn(m, n, device=dev, dtype=torch.bfloat16)))
        act = torch.randn(sb, 4 * h // t, device=dev, dtype=torch.bfloat16)

        def span():
            for x, w, dy in mats:
                torch.mm(x, w)           # forward
                torch.mm(dy, w.t())      # data gradient
                torch.mm(x.t(), dy)      # weight gradient
            torch.nn.functional.gelu(act, approximate="tanh")

        for _ in range(20):
            span()
        n_spans = 300 if quick else 1500
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(n_spans + 1)]
        ev[0].record()
        for i in range(n_spans):
            span()
            ev[i + 1].record()
        ev[-1].synchronize()
        ts = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(n_spans))
        mean = sum(ts) / len(ts)
        sd = (sum((x - mean) ** 2 for x in ts) / (len(ts) - 1)) ** 0.5
        q = lambda f: ts[min(len(ts) - 1, int(f * len(ts)))]
        res["span_jitter"] = {"what": "12 GEMMs (22B layer, t = 8, sb = 8192, fwd + dgrad + wgrad) + GeLU, per span",
                              "spans": n_spans, "mean_ms": mean, "sd_ms": sd, "cv": sd / mean,
                              "p01_ms": q(0.01), "p50_ms": q(0.5), "p99_ms": q(0.99), "min_ms": ts[0], "max_ms": ts[-1],
                              "ms_in_order_first_200": [round(ev[i].elapsed_time(ev[i + 1]), 4) for i in range(200)]}
        print(f"span jitter: mean {mean:.3f} ms, sd {sd:.4f} ms (cv {sd / mean:.4f}), p01 {q(0.01):.3f}, "
              f"p99 {q(0.99):.3f}, max {ts[-1]:.3f}", file=sys.stderr, flush=True)
        del mats, act

    if not grid:
        section("span jitter", span_jitter)

    # Fused attention, causal, BF16: q, k, v [b, heads per GPU, s, d].
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    shapes = [("22B-paper t=8", 4, 8, 2048, 96), ("megatron d=128 s=4096 16 heads", 1, 16, 4096, 128),
              ("megatron d=128 s=4096 8 heads", 1, 8, 4096, 128), ("d=128 s=2048 b*s=16k 16 heads", 8, 16, 2048, 128)]
    if grid:   # the shapes of one GPU of a tensor-parallel group: heads per GPU x sequence, b = 1, and a few b > 1
        shapes = [(f"grid d=128 s={sq} {hd} heads", 1, hd, sq, 128) for sq in (1024, 2048, 4096, 8192)
                  for hd in (4, 8, 16, 32)]
        shapes += [("grid d=128 s=4096 8 heads b=2", 2, 8, 4096, 128), ("grid d=128 s=4096 8 heads b=4", 4, 8, 4096, 128),
                   ("grid d=96 s=2048 8 heads b=4", 4, 8, 2048, 96), ("grid d=64 s=4096 16 heads", 1, 16, 4096, 64)]
    if quick:
        shapes = shapes[1:2]
    runs = [(backend_name, backend, p) for backend_name, backend in
            (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
            for p in ((0.0, dropout) if dropout > 0 else (0.0,))]
    for backend_name, backend, p in runs:
        for tag, b, hd, s, d in shapes:
            rec = {"backend": backend_name, "tag": tag, "b": b, "heads": hd, "s": s, "d": d, "causal": True,
                   "dropout_p": p,
                   # matmul FLOPs with the causal half skipped: forward 2 GEMMs, backward 5 (FlashAttention counts)
                   "fwd_flop": 4.0 * b * hd * s * s * d / 2, "bwd_flop": 10.0 * b * hd * s * s * d / 2}
            try:
                q, k_, v = (torch.randn(b, hd, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                            for _ in range(3))

                def attention():
                    return F.scaled_dot_product_attention(q, k_, v, dropout_p=p, is_causal=True)

                with sdpa_kernel([backend]):
                    o = attention()
                    g = torch.randn_like(o)
                    tf = timed(attention, ahead=True)

                    def fb():
                        y = attention()
                        y.backward(g)

                    tfb = timed(fb, ahead=True)
                    # host seconds per call (launch cost): a GPU time near it would have been host-bound
                    torch.cuda.synchronize()
                    c0 = time.perf_counter()
                    for _ in range(10):
                        fb()
                    rec["host_fwd_bwd_s"] = (time.perf_counter() - c0) / 10
                    torch.cuda.synchronize()
                rec["fwd_s"], rec["fwd_bwd_s"] = tf, tfb
                rec["bwd_s"] = tfb - tf
                rec["fwd_tflops"] = rec["fwd_flop"] / tf / 1e12
                rec["bwd_tflops"] = rec["bwd_flop"] / (tfb - tf) / 1e12
            except Exception as e:
                rec["error"] = repr(e)[:300]
            res["attention"].append(rec)
            print(f"attention {backend_name} {tag}{f' dropout {p}' if p else ''}: fwd {rec.get('fwd_tflops', 0):.0f} TF/s, "
                  f"bwd {rec.get('bwd_tflops', 0):.0f} TF/s {rec.get('error', '')}", file=sys.stderr, flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
