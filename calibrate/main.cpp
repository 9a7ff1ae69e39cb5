// strata-calibrate: runs real CUDA / cuBLASLt / NCCL kernels on the local GPUs and writes a calibrated
// device profile for the strata simulator (docs/device-profile.md). Order: parse options, find GPUs
// (none: exit 4), correctness checks (any failure: exit 3, nothing written), benchmarks, derive the
// analytical blocks from the measurements, write the file (atomically, via a temporary file).
#include "gpu.hpp"
#include "options.hpp"
#include "profile_writer.hpp"

#include <cublas_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace strata::calibrate;

namespace {

std::string driver_version() {
    std::ifstream f("/proc/driver/nvidia/version");   // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ..."
    std::string line;
    if (f && std::getline(f, line)) {
        std::istringstream words(line);
        std::string w, prev;
        while (words >> w) {
            if (prev == "Module" && !w.empty() && std::isdigit(static_cast<unsigned char>(w[0]))) return w;
            prev = w;
        }
    }
    int v = 0;
    cudaDriverGetVersion(&v);
    return "CUDA driver API " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string host_name() {
    char buf[256] = {};
    return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

std::string slug(const std::string& s) {
    std::string out;
    for (char ch : s) {
        const unsigned char u = static_cast<unsigned char>(ch);
        if (std::isalnum(u)) out += static_cast<char>(std::tolower(u));
        else if (!out.empty() && out.back() != '-') out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out;
}

Provenance provenance(const Options& o, const cudaDeviceProp& prop, int gpus) {
    Provenance v;
    v.gpu = prop.name;
    v.sm_count = prop.multiProcessorCount;
    v.memory_bytes = prop.totalGlobalMem;
    v.driver = driver_version();
    int rt = 0;
    CAL_CUDA(cudaRuntimeGetVersion(&rt));
    v.cuda_runtime = std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
    int ma = 0, mi = 0, pa = 0;
    cublasGetProperty(MAJOR_VERSION, &ma);
    cublasGetProperty(MINOR_VERSION, &mi);
    cublasGetProperty(PATCH_LEVEL, &pa);
    v.cublas = std::to_string(ma) + "." + std::to_string(mi) + "." + std::to_string(pa);
    int nv = 0;
    ncclGetVersion(&nv);   // 2.9+: X*10000 + Y*100 + Z; older: X*1000 + Y*100 + Z
    v.nccl = nv >= 20900 ? std::to_string(nv / 10000) + "." + std::to_string(nv % 10000 / 100) + "." +
                               std::to_string(nv % 100)
                         : std::to_string(nv / 1000) + "." + std::to_string(nv % 1000 / 100) + "." +
                               std::to_string(nv % 100);
    v.gpus_used = gpus;
    v.command = o.command;
    v.date = utc_now();
    v.host = host_name();
    return v;
}

/// Fills the analytical blocks (device, gemm, elementwise) from the measurements.
void derive(const Options& o, const cudaDeviceProp& prop, const ElementwiseSummary& basics, Profile& p) {
    DeviceBlock& d = p.device;
    d.memory_capacity_bytes = prop.totalGlobalMem;
    d.sm_count = prop.multiProcessorCount;
    d.kernel_launch_us = basics.kernel_launch_us;

    double best = 0;   // FLOP/s
    for (const auto& g : p.gemms) best = std::max(best, g.tflops * 1e12);
    if (o.peak_tflops) {
        d.peak_flops = *o.peak_tflops * 1e12;
        d.peak_flops_source = "--peak-tflops " + format_number(*o.peak_tflops);
    } else if (auto k = known_peak_flops(prop.name)) {
        d.peak_flops = k->flops;
        d.peak_flops_source = k->source;
    } else {
        d.peak_flops = round_sig(best);
        d.peak_flops_source = "unknown GPU and no --peak-tflops: the best measured GEMM rate is used as the peak";
        p.header_comments.push_back("peak_flops is the best measured GEMM rate (GPU not in the known-peak table; "
                                    "pass --peak-tflops to give the datasheet value)");
    }

    int clock_khz = 0, bus_bits = 0;
    const bool have_clock = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
                            cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess &&
                            clock_khz > 0 && bus_bits > 0;
    (void)cudaGetLastError();
    if (have_clock) {
        d.hbm_bandwidth_bytes_per_s = round_sig(hbm_bandwidth_from_clock(clock_khz, bus_bits), 4);
        d.hbm_source = "2 x cudaDevAttrMemoryClockRate (" + std::to_string(clock_khz) +
                       " kHz) x cudaDevAttrGlobalMemoryBusWidth (" + std::to_string(bus_bits) + " bits) / 8";
    } else if (auto k = known_hbm_bandwidth(prop.name)) {
        d.hbm_bandwidth_bytes_per_s = k->flops;
        d.hbm_source = k->source + " (memory clock attributes unavailable)";
    } else {
        d.hbm_bandwidth_bytes_per_s = p.copy_bandwidth_bytes_per_s;
        d.hbm_source = "measured device-to-device copy bandwidth (memory clock attributes unavailable, GPU not in "
                       "the table)";
    }

    // Measured on Hopper only: other generations get none (their cuBLAS and SM counts differ).
    p.gemm.stream_k_efficiency = prop.major == 9 ? kStreamKEfficiencySm90 : 0.0;
    p.gemm.stream_k_fixup = prop.major == 9 ? kStreamKFixupSm90 : 0.0;
    // The ceiling that makes the simulator's shape model give the median layer GEMM its measured time.
    std::vector<std::string> layer_names;
    for (const auto& g : p.gemms)
        if (g.batch == 1 && g.name.rfind("square_", 0) != 0) layer_names.push_back(g.name);
    const double fitted = fit_gemm_ceiling(p.gemms, layer_names, d.peak_flops, d.sm_count, p.gemm);
    if (fitted > 0) {
        p.gemm.efficiency_ceiling = round_sig(std::clamp(fitted, 0.01, 1.0), 4);
        p.gemm.comment = "efficiency_ceiling fitted: median over the " + std::to_string(layer_names.size()) +
                         " layer GEMMs of measured / (peak x the simulator's shape factor); best single GEMM " +
                         format_number(round_sig(best / d.peak_flops, 3)) + " of peak; tile_m, tile_n, k_half not fitted";
    } else {
        p.gemm.efficiency_ceiling = d.peak_flops > 0 ? round_sig(std::clamp(best / d.peak_flops, 0.01, 1.0), 4) : 1.0;
        p.gemm.comment = "efficiency_ceiling = best measured GEMM / peak (no layer GEMM measured); tile_m, tile_n, k_half "
                         "not fitted";
    }

    std::vector<double> bw;
    for (const auto& e : p.elementwise) bw.push_back(e.gbps * 1e9);
    const double hbm = d.hbm_bandwidth_bytes_per_s;
    if (!bw.empty() && hbm > 0) {
        const double med = median(bw);
        p.elementwise_bandwidth_efficiency = round_sig(std::clamp(med / hbm, 0.01, 1.0), 4);
        p.elementwise_comment = "source: median of " + std::to_string(bw.size()) +
                                " measured elementwise kernels (GB/s, read + written) / hbm_bandwidth";
    } else {
        p.elementwise_bandwidth_efficiency =
            hbm > 0 ? round_sig(std::clamp(p.copy_bandwidth_bytes_per_s / hbm, 0.01, 1.0), 4) : 0.8;
        p.elementwise_comment = "source: copy bandwidth / hbm_bandwidth (no elementwise kernel fitted in memory)";
    }
}

}  // namespace

int main(int argc, char** argv) {
    const ParseResult pr = parse_options(argc, argv);
    if (!pr.ok) {
        std::cerr << "strata-calibrate: " << pr.error << "\n(strata-calibrate --help lists the options)\n";
        return kExitUsage;
    }
    const Options& o = pr.options;
    if (o.help) {
        std::cout << usage();
        return kExitOk;
    }
    const std::filesystem::path out(o.out);
    std::error_code ec;
    if (out.has_parent_path() && !std::filesystem::is_directory(out.parent_path(), ec)) {
        std::cerr << "strata-calibrate: --out: directory '" << out.parent_path().string() << "' does not exist\n";
        return kExitUsage;
    }

    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    const DeviceDecision dev = decide_devices(e == cudaSuccess, count, o.gpus,
                                              e == cudaSuccess ? "" : std::string("cudaGetDeviceCount: ") +
                                                                          cudaGetErrorString(e));
    if (dev.exit_code != kExitOk) {
        std::cerr << "strata-calibrate: " << dev.message << "\n";
        return dev.exit_code;
    }

    try {
        Context c;
        c.dtype = o.dtype == "fp16" ? DType::fp16 : DType::bf16;
        c.gpus = dev.gpus;
        c.quick = o.quick;
        c.timing = o.quick ? TimingOpts{2, 5, 3} : TimingOpts{5, 20, 5};
        if (o.iters) c.timing.iters = o.iters;
        c.soak_s = o.soak_s;
        c.gemm_mix = o.gemm_mix;
        c.heads = o.heads, c.hidden = o.hidden, c.seq = o.seq, c.microbatch = o.microbatch, c.tensor = o.tensor;

        cudaDeviceProp prop{};
        CAL_CUDA(cudaGetDeviceProperties(&prop, 0));
        progress(std::string("GPU 0: ") + prop.name + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
                 gib(double(prop.totalGlobalMem)) + "; using " + std::to_string(c.gpus) + " GPU(s), " + o.dtype +
                 (o.quick ? ", quick" : ""));

        Profile p;
        p.name = slug(prop.name) + "-calibrated";
        p.provenance = provenance(o, prop, c.gpus);
        p.header_comments.push_back("Calibrated device profile written by strata-calibrate (docs/device-profile.md).");
        p.header_comments.push_back("dtype " + o.dtype + " (fp32 accumulation); layer dims a=" +
                                    std::to_string(o.heads) + " h=" + std::to_string(o.hidden) + " s=" +
                                    std::to_string(o.seq) + " b=" + std::to_string(o.microbatch) + " t=" +
                                    std::to_string(o.tensor) + "; " + std::to_string(c.timing.iters) +
                                    " timed iterations, median of " + std::to_string(c.timing.repeats) + " repeats.");
        if (c.gpus < c.tensor && c.tensor > 1)
            p.header_comments.push_back("measured.layers ran on one GPU: the tensor-parallel collectives were "
                                        "skipped, so layer times are compute only.");

        if (c.soak_s > 0)
            p.header_comments.push_back("GEMMs measured after a " + std::to_string(c.soak_s) +
                                        " s heat soak (back-to-back 8192^3 GEMMs, --soak).");
        if (c.gemm_mix > 0)
            p.header_comments.push_back("Each timed GEMM follows device-to-device copies lasting " +
                                        format_number(c.gemm_mix) +
                                        " x its time (--gemm-mix): the power and clock of a layer, not of a GEMM-only loop.");
        run_checks(c);
        const ElementwiseSummary basics = run_basics(c, p);
        run_gemms(c, p);
        run_sms_held(c, p);
        run_elementwise(c, p);
        run_attention(c, p);
        run_layers(c, p);
        run_collectives(c, p);
        if (p.gemms.empty()) throw std::runtime_error("no GEMM could be measured (all sizes skipped)");
        derive(o, prop, basics, p);

        std::ostringstream text;
        write_profile(text, p);
        const std::filesystem::path tmp = out.string() + ".tmp";
        {
            std::ofstream f(tmp);
            f << text.str();
            if (!f.flush()) throw std::runtime_error("cannot write " + tmp.string());
        }
        std::filesystem::rename(tmp, out);
        progress("wrote " + out.string() + " (" + std::to_string(p.gemms.size()) + " GEMMs, " +
                 std::to_string(p.elementwise.size()) + " elementwise, " + std::to_string(p.layers.size()) +
                 " layers, " + std::to_string(p.collectives.size()) + " collectives, " +
                 std::to_string(p.skipped.size()) + " skipped)");
        return kExitOk;
    } catch (const CheckFailed& ex) {
        std::cerr << "strata-calibrate: correctness check failed: " << ex.what() << "\nnothing written\n";
        return kExitCheck;
    } catch (const CudaError& ex) {
        std::cerr << "strata-calibrate: CUDA error: " << ex.what() << "\nnothing written\n";
        return kExitCuda;
    } catch (const OutOfMemory& ex) {
        std::cerr << "strata-calibrate: out of device memory: " << ex.what() << "\nnothing written\n";
        return kExitCuda;
    } catch (const std::exception& ex) {
        std::cerr << "strata-calibrate: error: " << ex.what() << "\nnothing written\n";
        return kExitFailure;
    }
}
