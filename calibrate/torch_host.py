#!/usr/bin/env python3
"""Host (CPU) time against GPU time of a GPT layer's forward and backward in eager PyTorch, on the local GPU.

A layer (pre-LN GPT: layer norm, QKV, cuDNN fused attention, projection, dropout + residual, layer norm, fc1, GeLU,
fc2, dropout + residual) is stacked `layers` deep at one GPU's shapes of a Megatron-LM H100 row (s = 4096, b = 1,
heads and widths divided by t). Three times per step (forward + backward over the stack):
  gpu_s    the GPU's time with the host queued ahead (a 200 ms GPU sleep first): what the kernels take;
  wall_s   the step as it runs (events around it, no sleep): gpu_s plus any time the GPU waited for the host;
  host_s   the host's time to issue the step (perf_counter around it, before synchronising).
wall_s > gpu_s means the GPU idled waiting for the host. This is PyTorch eager, not Transformer Engine: its host
costs are a proxy for Megatron's. Usage: torch_host.py OUT.json
"""
import json
import statistics
import sys

from torch_common import cuda_torch, gpt_layer, script_parser, wall_and_host


def main():
    args = script_parser(__doc__).parse_args()
    torch = cuda_torch("torch_host")
    if torch is None:
        return 4
    import torch.nn as nn
    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "rows": []}

    for name, h, heads, t, layers in (("1.7B", 2048, 16, 1, 8), ("7.1B", 4096, 32, 2, 8), ("70B", 8192, 64, 8, 8)):
        torch.manual_seed(0)
        stack = nn.Sequential(*[gpt_layer(torch, h, heads, t) for _ in range(layers)]).to(dev, torch.bfloat16)
        x = torch.randn(4096, h, device=dev, dtype=torch.bfloat16, requires_grad=True)

        def step():
            y = stack(x)
            y.backward(torch.ones_like(y))

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        gpu, wall, host = [], [], []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(400_000_000)
            a.record()
            step()
            b.record()
            b.synchronize()
            gpu.append(a.elapsed_time(b) / 1e3)
            torch.cuda.synchronize()
            w, h_s = wall_and_host(torch, step)
            wall.append(w)
            host.append(h_s)
        row = {"model": name, "hidden": h, "heads": heads, "tensor": t, "layers": layers, "seq": 4096,
               "gpu_s_per_layer": statistics.median(gpu) / layers, "wall_s_per_layer": statistics.median(wall) / layers,
               "host_s_per_layer": statistics.median(host) / layers}
        res["rows"].append(row)
        print(f"{name} t={t}: per layer fwd+bwd gpu {row['gpu_s_per_layer'] * 1e3:.3f} ms, wall "
              f"{row['wall_s_per_layer'] * 1e3:.3f} ms, host {row['host_s_per_layer'] * 1e3:.3f} ms", file=sys.stderr,
              flush=True)
        del stack, x
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
