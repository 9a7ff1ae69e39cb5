"""Shared by calibrate/torch_*.py: the GPU check and the one timing loop (CUDA events, median of repeats)."""
import statistics
import sys


def cuda_torch(tool):
    """torch with a CUDA device, or None after saying so on stderr (the caller exits 4, as strata-calibrate does)."""
    import torch

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
