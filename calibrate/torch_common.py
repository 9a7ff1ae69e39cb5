"""Shared by calibrate/*.py: their command line, the GPU check and the one timing loop (CUDA events, median of
repeats)."""
import argparse
import math
import statistics
import sys


def script_parser(doc):
    """The command line of a calibrate/ script: the output file, then the options the caller adds; its docstring `doc`
    is the help, as written. Options are spelled out in full (no abbreviations): argparse refuses a mistyped or unknown
    one, and a bad value, with exit status 2 before any GPU work."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("out", metavar="OUT.json", help="the JSON file the results are written to")
    return parser


def _checked(text, convert, ok, what):
    """convert(text) where that works and ok() holds for it, else argparse's refusal saying it is not `what`."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def probability(text):
    """An argparse type: a probability strictly between 0 and 1."""
    return _checked(text, float, lambda p: 0.0 < p < 1.0, "a probability between 0 and 1 (exclusive), e.g. 0.1")


def positive_float(text):
    """An argparse type: a finite number above 0."""
    return _checked(text, float, lambda x: 0.0 < x < math.inf, "a number above 0")


def at_least(least):
    """An argparse type: an integer of `least` or more."""
    def integer(text):
        return _checked(text, int, lambda n: n >= least, f"an integer of {least} or more")
    return integer


def ms_list(zero_ok):
    """An argparse type: comma-separated milliseconds, each in [0, 60000] (zero_ok) or (0, 60000]."""
    what = (f"milliseconds, comma-separated, each in {'[0' if zero_ok else '(0'}, 60000], "
            f"e.g. {'0,2,5,10' if zero_ok else '2,5,10,50'}")

    def values(text):
        return _checked(text, lambda t: [float(x) for x in t.split(",")],
                        lambda ms: all((0 <= v if zero_ok else 0 < v) and v <= 60000 for v in ms), what)
    return values


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
