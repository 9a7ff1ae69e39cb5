// Shared GPU plumbing for strata-calibrate (host-side declarations, usable from .cpp and .cu):
// error types, CUDA error checking, device buffers that check free memory before allocating, the one
// timing loop every benchmark uses (warm-up, timed iterations between cudaEvents, median of repeats),
// and the interfaces of the benchmark stages implemented in the .cu files.
#pragma once

#include "profile_writer.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::calibrate {

enum class DType { bf16, fp16 };
inline const char* dtype_name(DType d) { return d == DType::bf16 ? "bf16" : "fp16"; }
constexpr std::size_t kElem = 2;   // both types are 16-bit

struct CudaError : std::runtime_error { using std::runtime_error::runtime_error; };
struct CheckFailed : std::runtime_error { using std::runtime_error::runtime_error; };
/// A buffer that does not fit: callers skip the size and report it; never a crash.
struct OutOfMemory : std::runtime_error {
    OutOfMemory(std::size_t bytes, std::size_t free_bytes);
    explicit OutOfMemory(const std::string& what) : std::runtime_error(what) {}
};

void cuda_check(cudaError_t e, const char* what, const char* file, int line);   // throws
#define CAL_CUDA(x) ::strata::calibrate::cuda_check((x), #x, __FILE__, __LINE__)

std::string gib(double bytes);   // "1.50 GiB"

/// Makes `dev` current; restores the previous device on scope exit.
class DeviceGuard {
public:
    explicit DeviceGuard(int dev);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int saved_ = 0;
};

/// Device memory owned by one GPU. The constructor checks cudaMemGetInfo first (keeping a margin for
/// cuBLAS/NCCL), and maps cudaErrorMemoryAllocation to OutOfMemory.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(std::size_t bytes, int device);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* get() const { return ptr_; }
    template <class T> T* as() const { return static_cast<T*>(ptr_); }
    std::size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    std::size_t bytes_ = 0;
    int device_ = 0;
};

struct TimingOpts {
    int warmup = 5, iters = 20, repeats = 5;
};

struct StreamOn {
    int device;
    cudaStream_t stream;
};

/// The timing loop: `run()` enqueues one iteration on the given streams (one per GPU). Warm-up, then
/// `repeats` x (event, `iters` x run(), event); a repeat's time is the slowest stream's elapsed / iters.
/// Returns the median repeat, in microseconds.
double time_us(const std::vector<StreamOn>& streams, const std::function<void()>& run, const TimingOpts& t);

/// Everything a stage needs to know about the run.
struct Context {
    DType dtype = DType::bf16;
    int gpus = 1;                       // GPUs usable
    bool quick = false;
    int soak_s = 0;                     // heat soak before the GEMM section, seconds
    double gemm_mix = 0.5;              // memory-bound copies between timed GEMMs, share of the GEMM's time
    TimingOpts timing;
    int heads = 64, hidden = 6144, seq = 2048, microbatch = 4, tensor = 8;
};

struct ElementwiseSummary {
    double copy_bandwidth_bytes_per_s = 0;
    double kernel_launch_us = 0;
};

// ---- stages (each appends to the profile; OutOfMemory is handled inside, as a skip) ----------------
void run_checks(const Context& c);                                   // throws CheckFailed
ElementwiseSummary run_basics(const Context& c, Profile& p);         // launch overhead, memcpy bandwidth
void run_gemms(const Context& c, Profile& p);
void run_elementwise(const Context& c, Profile& p);
void run_attention(const Context& c, Profile& p);
void run_layers(const Context& c, Profile& p);
void run_collectives(const Context& c, Profile& p);                  // needs gpus >= 2
void run_sms_held(const Context& c, Profile& p);                     // GEMMs with SMs held (measured.sms_held)

void progress(const std::string& line);                              // stderr, flushed

}  // namespace strata::calibrate
