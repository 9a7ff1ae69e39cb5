"""Shared by calibrate/torch_*.py: the GPU check and the one timing loop (CUDA events, median of repeats)."""
import statistics
import sys


def cuda_torch(tool):
    """torch with a CUDA device, or None after saying why not on stderr (the caller exits 4, as strata-calibrate does)."""
    try:
        import torch
    except ImportError:
        print(f"{tool}: PyTorch is not installed (python3 -m pip install torch)", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{tool}: no CUDA device found", file=sys.stderr)
        return None
    return torch


def gpu_seconds(torch, fn, n=20, ahead=False, warmup=3, repeats=5):
    """Median seconds per call: `repeats` runs of `n` calls between CUDA events, after `warmup` calls. ahead: a 50 ms
    GPU sleep first, so that the host queues all n calls before the GPU starts them and the time is the GPU's alone,
    not the host's launch cost (small kernels)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if ahead:
            torch.cuda._sleep(100_000_000)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / n)
    return statistics.median(times)


def wall_and_host(torch, fn):
    """One call of fn as it runs: (wall seconds between CUDA events around it, host seconds until fn returned)."""
    import time

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    c0 = time.perf_counter()
    fn()
    host = time.perf_counter() - c0
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3, host


def gpt_layer(torch, h, heads, t):
    """One GPU's share (t-way tensor parallel, no communication) of a Megatron GPT layer in eager PyTorch: layer
    norm, QKV, cuDNN fused causal attention, projection, dropout + residual, layer norm, fc1, GeLU (tanh), fc2,
    dropout + residual. Input and output [s, h]."""
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.hd = heads // t
            self.d = h // heads
            self.ln1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h // t)
            self.proj = nn.Linear(h // t, h)
            self.ln2 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, 4 * h // t)
            self.fc2 = nn.Linear(4 * h // t, h)

        def forward(self, x):
            s = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).view(s, 3, self.hd, self.d).permute(1, 2, 0, 3)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                a = F.scaled_dot_product_attention(q[None].contiguous(), k[None].contiguous(), v[None].contiguous(),
                                                   is_causal=True)
            a = a[0].permute(1, 0, 2).reshape(s, self.hd * self.d)
            x = x + F.dropout(self.proj(a), 0.1, True)
            return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")), 0.1, True)

    return Layer()
