// Shared GPU plumbing (see gpu.hpp): error checks, checked allocation, the timing loop, progress lines.
#include "gpu.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace strata::calibrate {

OutOfMemory::OutOfMemory(std::size_t b, std::size_t f)
    : std::runtime_error("needs " + gib(static_cast<double>(b)) + ", " + gib(static_cast<double>(f)) + " free") {}

std::string gib(double bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e == cudaSuccess) return;
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();   // clear the sticky-free error so later calls work
        throw OutOfMemory(std::string(what) + ": out of device memory");
    }
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cudaGetErrorName(e) +
                    " (" + cudaGetErrorString(e) + ")");
}

DeviceGuard::DeviceGuard(int dev) {   // never throws (also used in destructors); errors surface at the next check
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = 0;
    cudaSetDevice(dev);
}
DeviceGuard::~DeviceGuard() { cudaSetDevice(saved_); }

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
    if (bytes == 0) return;
    DeviceGuard g(device);
    std::size_t free_b = 0, total_b = 0;
    CAL_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const std::size_t margin = (std::size_t{512} << 20) + total_b / 50;   // cuBLAS/NCCL workspaces
    if (bytes + margin > free_b) throw OutOfMemory(bytes, free_b);
    cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        ptr_ = nullptr;
        throw OutOfMemory(bytes, free_b);
    }
    CAL_CUDA(e);
}

DeviceBuffer::~DeviceBuffer() {
    if (!ptr_) return;
    int saved = 0;
    cudaGetDevice(&saved);
    cudaSetDevice(device_);
    cudaFree(ptr_);
    cudaSetDevice(saved);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        DeviceBuffer tmp(std::move(*this));
        ptr_ = o.ptr_;
        bytes_ = o.bytes_;
        device_ = o.device_;
        o.ptr_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

double time_us(const std::vector<StreamOn>& streams, const std::function<void()>& run, const TimingOpts& t) {
    const std::size_t n = streams.size();
    std::vector<cudaEvent_t> start(n), stop(n);
    for (std::size_t i = 0; i < n; ++i) {
        CAL_CUDA(cudaSetDevice(streams[i].device));
        CAL_CUDA(cudaEventCreate(&start[i]));
        CAL_CUDA(cudaEventCreate(&stop[i]));
    }
    auto sync_all = [&] {
        for (const auto& s : streams) {
            CAL_CUDA(cudaSetDevice(s.device));
            CAL_CUDA(cudaStreamSynchronize(s.stream));
        }
    };
    std::vector<double> samples;
    std::string error;
    try {
        for (int w = 0; w < t.warmup; ++w) run();
        sync_all();
        for (int r = 0; r < std::max(1, t.repeats); ++r) {
            for (std::size_t i = 0; i < n; ++i) {
                CAL_CUDA(cudaSetDevice(streams[i].device));
                CAL_CUDA(cudaEventRecord(start[i], streams[i].stream));
            }
            for (int it = 0; it < std::max(1, t.iters); ++it) run();
            double worst_ms = 0;
            for (std::size_t i = 0; i < n; ++i) {
                CAL_CUDA(cudaSetDevice(streams[i].device));
                CAL_CUDA(cudaEventRecord(stop[i], streams[i].stream));
            }
            for (std::size_t i = 0; i < n; ++i) {
                CAL_CUDA(cudaSetDevice(streams[i].device));
                CAL_CUDA(cudaEventSynchronize(stop[i]));
                float ms = 0;
                CAL_CUDA(cudaEventElapsedTime(&ms, start[i], stop[i]));
                worst_ms = std::max(worst_ms, static_cast<double>(ms));
            }
            samples.push_back(worst_ms * 1e3 / std::max(1, t.iters));
        }
    } catch (...) {
        for (std::size_t i = 0; i < n; ++i) {
            cudaEventDestroy(start[i]);
            cudaEventDestroy(stop[i]);
        }
        throw;
    }
    for (std::size_t i = 0; i < n; ++i) {
        cudaEventDestroy(start[i]);
        cudaEventDestroy(stop[i]);
    }
    return median(std::move(samples));
}

void progress(const std::string& line) { std::cerr << "strata-calibrate: " << line << std::endl; }

}  // namespace strata::calibrate
