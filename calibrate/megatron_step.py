#!/usr/bin/env python3
"""Megatron-Core's own training step for the Megatron-LM H100 table's 1.7B row, on one GPU: how much host (Python)
time its modules and schedule add, against the same model in eager PyTorch (calibrate/torch_gpt_step.py).

Megatron-Core is not shipped with strata: point MEGATRON_PATH at a checkout (the H100 runs were made with the
core_r0.8 era; `git archive core_v0.8.0 megatron/core` of NVIDIA/Megatron-LM is what this was run with). Transformer
Engine is not needed (nor used): the layers are Megatron-Core's local spec (its ColumnParallelLinear /
RowParallelLinear, torch layer norm, its bias-dropout-add, its MLP) with the core attention replaced by cuDNN's
fused attention through torch (what TE runs on Hopper), so that the GPU work matches strata's model; the GPU time
of Transformer Engine's own kernels and the host time of its modules are not in it. The step: GPTModel (24 layers,
h = 2048, 16 heads, ffn 8192, vocabulary 131,072, learned positions, untied output, dropout 0.1, BF16) wrapped in
Megatron-Core's DistributedDataParallel (Float16Module as Megatron's --bf16 wraps it, fp32 gradient buffer, \
overlap_grad_reduce, distributed optimizer layout:
the gradient hooks Megatron runs; one rank, so the reductions are trivial), 4 microbatches of 1 x 4096 through
get_forward_backward_func() (no pipelining), finalize_model_grads. No optimizer step (one rank would step the
whole model, where the 48-rank run steps a 48th). Per microbatch: wall (CUDA events around the step), host (the
step's host time) and gpu_busy (the sum of the step's kernel times from torch.profiler, one profiled step).
Usage: MEGATRON_PATH=DIR megatron_step.py OUT.json
"""
import json
import os
import statistics
import sys

from torch_common import cuda_torch, script_parser, wall_and_host

H, HEADS, FFN, LAYERS, SEQ, VOCAB, MICROBATCHES = 2048, 16, 8192, 24, 4096, 131072, 4


def main():
    args = script_parser(__doc__).parse_args()
    torch = cuda_torch("megatron_step")
    if torch is None:
        return 4
    path = os.environ.get("MEGATRON_PATH")
    if not path or not os.path.isdir(os.path.join(path, "megatron", "core")):
        print("megatron_step: set MEGATRON_PATH to a Megatron-LM checkout (megatron/core inside)", file=sys.stderr)
        return 2
    sys.path.insert(0, path)
    # Megatron-Core 0.8 calls the private collectives that later torch releases renamed.
    dist = torch.distributed
    if not hasattr(dist, "_reduce_scatter_base"):
        dist._reduce_scatter_base = dist.reduce_scatter_tensor
    if not hasattr(dist, "_all_gather_base"):
        dist._all_gather_base = dist.all_gather_into_tensor
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module, MegatronModule
    from megatron.core.transformer.transformer_config import TransformerConfig

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(123)

    class CudnnAttention(MegatronModule):
        """Drop-in for DotProductAttention: cuDNN's fused causal attention (as TE runs on Hopper)."""

        def __init__(self, config, layer_number, attn_mask_type, attention_type, attention_dropout=None):
            super().__init__(config=config)

        def forward(self, query, key, value, attention_mask, attn_mask_type=None, packed_seq_params=None):
            s, b, n, d = query.shape  # [s, b, heads, head dim]
            q, k, v = (x.permute(1, 2, 0, 3) for x in (query, key, value))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return out.permute(2, 0, 1, 3).reshape(s, b, n * d)

    config = TransformerConfig(num_layers=LAYERS, hidden_size=H, num_attention_heads=HEADS, ffn_hidden_size=FFN,
                               hidden_dropout=0.1, attention_dropout=0.1, bf16=True, params_dtype=torch.bfloat16,
                               pipeline_dtype=torch.bfloat16, add_bias_linear=True)
    spec = get_gpt_layer_local_spec()
    spec.submodules.self_attention.submodules.core_attention = CudnnAttention
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=SEQ,
                     position_embedding_type="learned_absolute", share_embeddings_and_output_weights=False).cuda()
    model = Float16Module(config, model)  # as Megatron's training loop wraps it for --bf16
    ddp = DistributedDataParallel(config, DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                                         overlap_grad_reduce=True,
                                                                         use_distributed_optimizer=True), model)
    config.no_sync_func = ddp.no_sync
    config.finalize_model_grads_func = finalize_model_grads

    g = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, VOCAB, (MICROBATCHES, 1, SEQ), device="cuda", generator=g)
    labels = torch.randint(0, VOCAB, (MICROBATCHES, 1, SEQ), device="cuda", generator=g)
    position_ids = torch.arange(SEQ, device="cuda").unsqueeze(0)

    def data():
        for i in range(MICROBATCHES):
            yield tokens[i], labels[i]

    def forward_step(data_iterator, model):
        tok, lab = next(data_iterator)
        losses = model(tok, position_ids, None, labels=lab)

        def loss_func(output):
            loss = output.float().mean()
            return loss, {"lm loss": loss.detach()}

        return losses, loss_func

    fb = get_forward_backward_func()

    def step():
        ddp.zero_grad_buffer()
        fb(forward_step_func=forward_step, data_iterator=data(), model=[ddp], num_microbatches=MICROBATCHES,
           seq_length=SEQ, micro_batch_size=1, forward_only=False)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    wall, host = [], []
    for _ in range(5):
        w, host_s = wall_and_host(torch, step)
        wall.append(w)
        host.append(host_s)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    busy_us = sum(e.self_device_time_total for e in prof.key_averages())
    res = {"device": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "model": "1.7B",
           "layers": LAYERS, "hidden": H, "microbatches": MICROBATCHES,
           "wall_ms_per_microbatch": round(statistics.median(wall) * 1e3 / MICROBATCHES, 3),
           "host_ms_per_microbatch": round(statistics.median(host) * 1e3 / MICROBATCHES, 3),
           "gpu_busy_ms_per_microbatch": round(busy_us / 1e3 / MICROBATCHES, 3)}
    print(json.dumps(res), flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
