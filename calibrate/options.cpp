// Command-line parsing for strata-calibrate and the GPU-presence decision (see options.hpp).
#include "options.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace strata::calibrate {

std::string usage() {
    return R"(usage: strata-calibrate --out FILE [options]

Runs CUDA / cuBLASLt / NCCL microbenchmarks on the local GPUs and writes a calibrated device profile
(docs/device-profile.md, format strata-device-profile/1).

  --out FILE           profile to write (required; written only if every check passes)
  --quick              fewer sizes and iterations (a few minutes)
  --heads N            attention heads a            (default 64)
  --hidden N           hidden size h                (default 6144)
  --seq N              sequence length s            (default 2048)
  --microbatch N       micro-batch size b           (default 4)
  --tensor N           tensor-parallel size t       (default 8)
  --dtype bf16|fp16    GEMM / kernel input type     (default bf16; fp32 accumulation)
  --peak-tflops X      dense tensor-core peak in TFLOP/s (default: known-GPU table)
  --gpus N             use the first N GPUs         (default: all)
  --iters N            timed iterations per repeat  (default 20; 5 with --quick)
  --gemm-mix F         before each timed GEMM, device-to-device copies lasting F x the GEMM's time, so
                       that the GPU's power and clock are those of a layer (GEMMs among memory-bound
                       kernels), not of a GEMM-only loop (default 0.5; 0 = GEMMs back to back)
  --soak S             seconds of back-to-back 8192^3 GEMMs before the GEMM measurements (default 0)
  --help               this text

exit codes: 0 ok, 1 error writing output, 2 bad option, 3 correctness check failed,
            4 no CUDA device, 5 CUDA/cuBLAS/NCCL runtime error
)";
}

namespace {
bool parse_int(std::string_view s, int& v) {
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
}  // namespace

ParseResult parse_options(int argc, const char* const* argv) {
    ParseResult r;
    Options& o = r.options;
    for (int i = 0; i < argc; ++i) {
        if (i) o.command += ' ';
        o.command += argv[i];
    }
    auto fail = [&](std::string msg) {
        r.ok = false;
        r.error = std::move(msg);
        return r;
    };
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_value = false;
        if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        auto flag = [&](bool& target) -> bool {
            if (has_value) return false;
            target = true;
            return true;
        };
        auto need_value = [&]() -> bool {
            if (has_value) return true;
            if (i + 1 >= argc) return false;
            value = argv[++i];
            return true;
        };
        auto positive = [&](int& target, int max) -> std::optional<std::string> {
            if (!need_value()) return arg + ": missing value (expected an integer in [1, " + std::to_string(max) + "])";
            int v = 0;
            if (!parse_int(value, v) || v < 1 || v > max)
                return arg + ": invalid value '" + value + "' (expected an integer in [1, " + std::to_string(max) +
                       "])";
            target = v;
            return std::nullopt;
        };
        std::optional<std::string> err;
        if (arg == "--help" || arg == "-h") {
            if (!flag(o.help)) return fail(arg + " takes no value");
        } else if (arg == "--quick") {
            if (!flag(o.quick)) return fail("--quick takes no value");
        } else if (arg == "--out") {
            if (!need_value() || value.empty()) return fail("--out: missing file name (expected --out FILE)");
            o.out = value;
        } else if (arg == "--heads") {
            err = positive(o.heads, 1 << 16);
        } else if (arg == "--hidden") {
            err = positive(o.hidden, 1 << 20);
        } else if (arg == "--seq") {
            err = positive(o.seq, 1 << 20);
        } else if (arg == "--microbatch") {
            err = positive(o.microbatch, 1 << 16);
        } else if (arg == "--tensor") {
            err = positive(o.tensor, 1024);
        } else if (arg == "--gpus") {
            err = positive(o.gpus, 1024);
        } else if (arg == "--iters") {
            err = positive(o.iters, 100000);
        } else if (arg == "--soak") {
            if (!need_value()) return fail("--soak: missing value (expected an integer in [0, 600], seconds)");
            int v = 0;
            if (!parse_int(value, v) || v < 0 || v > 600)
                return fail("--soak: invalid value '" + value + "' (expected an integer in [0, 600], seconds)");
            o.soak_s = v;
        } else if (arg == "--gemm-mix") {
            if (!need_value()) return fail("--gemm-mix: missing value (expected a number in [0, 4])");
            char* end = nullptr;
            const double v = std::strtod(value.c_str(), &end);
            if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 4)
                return fail("--gemm-mix: invalid value '" + value + "' (expected a number in [0, 4])");
            o.gemm_mix = v;
        } else if (arg == "--dtype") {
            if (!need_value()) return fail("--dtype: missing value (valid: bf16, fp16)");
            if (value != "bf16" && value != "fp16")
                return fail("--dtype: invalid value '" + value + "' (valid: bf16, fp16)");
            o.dtype = value;
        } else if (arg == "--peak-tflops") {
            if (!need_value()) return fail("--peak-tflops: missing value (expected a number > 0, in TFLOP/s)");
            char* end = nullptr;
            double v = std::strtod(value.c_str(), &end);
            if (value.empty() || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 1e6)
                return fail("--peak-tflops: invalid value '" + value + "' (expected a number > 0, in TFLOP/s)");
            o.peak_tflops = v;
        } else {
            return fail("unknown option '" + arg + "' (valid: --out, --quick, --heads, --hidden, --seq, "
                        "--microbatch, --tensor, --dtype, --peak-tflops, --gpus, --iters, --gemm-mix, --soak, --help)");
        }
        if (err) return fail(*err);
    }
    if (o.help) {
        r.ok = true;
        return r;
    }
    if (o.out.empty()) return fail("--out FILE is required");
    // Shapes the kernels support: 16-byte vectors (multiples of 8 elements), register-cached rows.
    const int a = o.heads, h = o.hidden, s = o.seq, t = o.tensor;
    if (h % a != 0) return fail("--hidden " + std::to_string(h) + " must be a multiple of --heads " + std::to_string(a));
    if (a % t != 0) return fail("--heads " + std::to_string(a) + " must be a multiple of --tensor " + std::to_string(t));
    if ((h / a) % 8 != 0) return fail("--hidden / --heads (head size) must be a multiple of 8");
    if (h > 32768) return fail("--hidden: at most 32768 (layer-norm kernel keeps a row in registers)");
    if (s % 8 != 0 || s % t != 0)
        return fail("--seq " + std::to_string(s) + " must be a multiple of 8 and of --tensor (sequence parallelism)");
    if (s > 32768) return fail("--seq: at most 32768 (softmax kernel keeps a row in registers)");
    r.ok = true;
    return r;
}

DeviceDecision decide_devices(bool runtime_ok, int count, int requested, std::string_view runtime_error) {
    DeviceDecision d;
    if (!runtime_ok || count < 1) {
        d.exit_code = kExitNoDevice;
        d.message = std::string(kNoDeviceMessage);
        if (!runtime_error.empty()) d.message += " (" + std::string(runtime_error) + ")";
        return d;
    }
    if (requested > count) {
        d.exit_code = kExitNoDevice;
        d.message = "--gpus " + std::to_string(requested) + " requested but only " + std::to_string(count) +
                    " CUDA device(s) found";
        return d;
    }
    d.gpus = requested > 0 ? requested : count;
    return d;
}

}  // namespace strata::calibrate
