#!/usr/bin/env python3
"""One GPU's forward and backward of a Megatron-LM H100 row's whole GPT model in eager PyTorch, on the local GPU.

The model as Megatron builds it for the small rows (1.7B: t = 1; 7.1B: one GPU's half at t = 2, no communication):
word and position embeddings (untied output), embedding dropout, `layers` GPT layers (torch_common.gpt_layer), the
final layer norm, the output GEMM over the vocabulary (131,072 / t) and Megatron's vocab-parallel cross-entropy on
the fp32 logits as its code runs it (megatron/core/tensor_parallel/cross_entropy.py: max, subtract, gather of the
target logit, exp in place, sum, log; backward: softmax in place, minus one at the target, times the output
gradient; then the cast back to BF16). Sequence 4096, microbatch 1, gradients accumulated over `microbatches`.
Per row, per microbatch (median of repeats; "gpu": each microbatch after a GPU sleep that lets the host queue it, the kernels' time
alone;
"wall": as it runs):
  whole      the model's forward + backward;
  no_layers  the same with 0 layers: embedding, output GEMMs and loss (what strata adds to the first and last stage);
  per_layer  (whole - no_layers) / layers.
For comparison with strata's trace of the same rows (scenarios/validation/megatron-h100.yaml). Usage:
torch_gpt_step.py OUT.json
"""
import json
import statistics
import sys

from torch_common import cuda_torch, gpt_layer, script_parser, wall_and_host

ROWS = (("1.7B", 2048, 16, 1, 24), ("7.1B", 4096, 32, 2, 30))
SEQ, VOCAB, MICROBATCHES = 4096, 131072, 4


def main():
    args = script_parser(__doc__).parse_args()
    torch = cuda_torch("torch_gpt_step")
    if torch is None:
        return 4
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device("cuda")

    class VocabParallelCrossEntropy(torch.autograd.Function):
        """Megatron-Core's cross-entropy over one GPU's vocabulary shard, without the all-reduces (t = 1 here or one
        GPU's shard): the same passes over the fp32 logits."""

        @staticmethod
        def forward(ctx, logits, target):
            logits_max = torch.max(logits, dim=-1)[0]
            logits -= logits_max.unsqueeze(-1)
            predicted = logits.gather(1, target.unsqueeze(-1)).squeeze(-1)
            exp_logits = torch.exp(logits, out=logits)
            sum_exp = exp_logits.sum(dim=-1)
            loss = torch.log(sum_exp) - predicted
            exp_logits.div_(sum_exp.unsqueeze(-1))
            ctx.save_for_backward(exp_logits, target)
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            softmax, target = ctx.saved_tensors
            grad = softmax
            grad[torch.arange(grad.shape[0], device=grad.device), target] -= 1.0
            grad.mul_(grad_output.unsqueeze(-1))
            return grad, None

    class GPT(nn.Module):
        def __init__(self, h, heads, t, layers):
            super().__init__()
            self.word = nn.Embedding(VOCAB // t, h)
            self.pos = nn.Embedding(SEQ, h)
            self.layers = nn.ModuleList(gpt_layer(torch, h, heads, t) for _ in range(layers))
            self.ln = nn.LayerNorm(h)
            self.out = nn.Linear(h, VOCAB // t, bias=False)

        def forward(self, tokens, target):
            x = F.dropout(self.word(tokens) + self.pos.weight, 0.1, True)
            for layer in self.layers:
                x = layer(x)
            logits = self.out(self.ln(x))
            return VocabParallelCrossEntropy.apply(logits.float(), target).mean()

    res = {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "seq": SEQ,
           "vocab": VOCAB, "microbatches": MICROBATCHES, "rows": []}
    for name, h, heads, t, layers in ROWS:
        row = {"model": name, "hidden": h, "heads": heads, "tensor": t, "layers": layers}
        for key, n_layers in (("no_layers", 0), ("whole", layers)):
            torch.manual_seed(0)
            model = GPT(h, heads, t, n_layers).to(dev, torch.bfloat16)
            g = torch.Generator(device=dev).manual_seed(1)
            tokens = torch.randint(0, VOCAB // t, (MICROBATCHES, SEQ), device=dev, generator=g)
            target = torch.randint(0, VOCAB // t, (MICROBATCHES, SEQ), device=dev, generator=g)

            def microbatch(i):
                model(tokens[i], target[i]).backward()

            for _ in range(2):
                for i in range(MICROBATCHES):
                    microbatch(i)
            torch.cuda.synchronize()
            gpu, wall, host = [], [], []
            for _ in range(3):
                # gpu: each microbatch after a GPU sleep (~0.2 s) that lets the host queue all of its kernels
                times = []
                for i in range(MICROBATCHES):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda._sleep(400_000_000)
                    a.record()
                    microbatch(i)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) / 1e3)
                gpu.append(sum(times) / MICROBATCHES)
                # wall: the microbatches back to back, as a training step runs them
                w, h_s = wall_and_host(torch, lambda: [microbatch(i) for i in range(MICROBATCHES)])
                wall.append(w / MICROBATCHES)
                host.append(h_s / MICROBATCHES)
            row[key] = {"gpu_ms": round(statistics.median(gpu) * 1e3, 3), "wall_ms": round(statistics.median(wall) * 1e3, 3),
                        "host_ms": round(statistics.median(host) * 1e3, 3),
                        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
            print(f"{name} {key}: per microbatch gpu {row[key]['gpu_ms']:.2f} ms, wall {row[key]['wall_ms']:.2f} ms, "
                  f"host {row[key]['host_ms']:.2f} ms", flush=True)
            del model, tokens, target
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        row["per_layer_gpu_ms"] = round((row["whole"]["gpu_ms"] - row["no_layers"]["gpu_ms"]) / layers, 4)
        res["rows"].append(row)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
