// Command-line options of strata-calibrate (hand-written parser, no dependencies), the exit codes, and
// the decision "is there a usable GPU?" as a pure function so it can be tested without CUDA.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata::calibrate {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;     // output not writable, unexpected error
constexpr int kExitUsage = 2;       // bad command line
constexpr int kExitCheck = 3;       // a kernel's output failed its correctness check
constexpr int kExitNoDevice = 4;    // no CUDA device (or fewer than --gpus)
constexpr int kExitCuda = 5;        // CUDA / cuBLAS / NCCL runtime error

struct Options {
    std::string out;
    bool quick = false;
    int heads = 64, hidden = 6144, seq = 2048, microbatch = 4, tensor = 8;   // the paper's 22B model
    std::string dtype = "bf16";
    std::optional<double> peak_tflops;
    int gpus = 0;                  // 0: all local GPUs
    int iters = 0;                 // 0: default (20, or 5 with --quick)
    int soak_s = 0;                // seconds of back-to-back GEMMs before the GEMM section (default none)
    double gemm_mix = 0.5;         // memory-bound copy time between timed GEMMs, as a share of the GEMM's time
    bool help = false;
    std::string command;           // argv joined, for provenance
};

struct ParseResult {
    bool ok = false;
    Options options;
    std::string error;             // names the option and the valid values
};

ParseResult parse_options(int argc, const char* const* argv);
std::string usage();

struct DeviceDecision {
    int exit_code = kExitOk;       // kExitOk or kExitNoDevice
    int gpus = 0;                  // how many to use
    std::string message;           // empty when ok
};

/// `runtime_ok`: cudaGetDeviceCount succeeded; `count`: what it reported; `requested`: --gpus (0 = all).
DeviceDecision decide_devices(bool runtime_ok, int count, int requested, std::string_view runtime_error = {});

inline constexpr std::string_view kNoDeviceMessage =
    "no CUDA device found: strata-calibrate needs at least one GPU";

}  // namespace strata::calibrate
