#!/usr/bin/env python3
"""Framework elementwise kernels (PyTorch eager and its fused ops, what Megatron-LM runs beside its GEMMs) timed on
the local GPU at transformer-layer sizes, as achieved HBM bandwidth (bytes read + written per second).

Ops: layer norm forward / backward (torch.nn.functional.layer_norm, fused), GeLU (tanh) forward / backward, dropout
forward (mask + scale), residual add, bias-dropout-add (as Megatron's jit-fused function: x + bias, dropout, + residual,
here in eager PyTorch), softmax forward / backward, cast bf16 -> fp32 (the loss's logits). Sizes: tokens x hidden for
the Megatron-LM H100 rows' and the paper's 22B shapes. Each time: median of 5 repeats of 20 launches, the host
queued ahead (50 ms GPU sleep first). Usage: torch_elementwise.py OUT.json
"""
import json
import sys
import time

from torch_common import cuda_torch, gpu_seconds, script_parser


def main():
    args = script_parser(__doc__).parse_args()
    torch = cuda_torch("torch_elementwise")
    if torch is None:
        return 4
    import torch.nn.functional as F

    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "ops": []}

    def rec(op, shape, nbytes, fn):
        try:
            t = gpu_seconds(torch, fn, ahead=True)
            res["ops"].append({"op": op, "shape": shape, "bytes": nbytes, "time_us": t * 1e6, "gbps": nbytes / t / 1e9})
            print(f"{op:22s} {str(shape):16s} {t * 1e6:8.1f} us {nbytes / t / 1e9:7.0f} GB/s", file=sys.stderr, flush=True)
        except Exception as e:
            res["ops"].append({"op": op, "shape": shape, "error": repr(e)[:200]})

    bf = torch.bfloat16
    for rows, h in ((4096, 2048), (4096, 4096), (4096, 8192), (8192, 6144), (1024, 6144)):
        n = rows * h
        x = torch.randn(rows, h, device=dev, dtype=bf, requires_grad=True)
        w = torch.ones(h, device=dev, dtype=bf, requires_grad=True)
        bias = torch.zeros(h, device=dev, dtype=bf, requires_grad=True)
        g = torch.randn(rows, h, device=dev, dtype=bf)
        r = torch.randn(rows, h, device=dev, dtype=bf)
        shape = [rows, h]
        rec("layernorm_fwd", shape, 2 * n * 2, lambda: F.layer_norm(x, (h,), w, bias))
        y = F.layer_norm(x, (h,), w, bias)
        rec("layernorm_bwd", shape, 3 * n * 2, lambda: torch.autograd.grad(y, (x, w, bias), g, retain_graph=True))
        rec("gelu_fwd", shape, 2 * n * 2, lambda: F.gelu(x, approximate="tanh"))
        yg = F.gelu(x, approximate="tanh")
        rec("gelu_bwd", shape, 3 * n * 2, lambda: torch.autograd.grad(yg, x, g, retain_graph=True))
        rec("dropout_fwd", shape, 2 * n * 2 + n, lambda: F.dropout(r, 0.1, True))
        rec("residual_add", shape, 3 * n * 2, lambda: r + g)
        rec("bias_dropout_add", shape, 3 * n * 2 + n, lambda: F.dropout(r + bias, 0.1, True) + g)
        rec("cast_bf16_fp32", shape, n * 6, lambda: r.float())
        del x, w, bias, g, r, y, yg
    for b_heads, s in ((16, 2048), (32, 2048)):
        sc = torch.randn(b_heads, s, s, device=dev, dtype=bf, requires_grad=True)
        n = b_heads * s * s
        rec("softmax_fwd", [b_heads, s, s], 2 * n * 2, lambda: torch.softmax(sc, -1))
        p = torch.softmax(sc, -1)
        gp = torch.randn_like(p)
        rec("softmax_bwd", [b_heads, s, s], 3 * n * 2, lambda: torch.autograd.grad(p, sc, gp, retain_graph=True))
        del sc, p, gp
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
