// CPU tests for strata-calibrate's pure-C++ parts (no GPU, no CUDA): the calibrated profile writer
// (documented keys only, numbers round-trip, provenance, skipped sizes as comments, intra_node omission),
// the alpha-beta fit, nccl-tests bus-bandwidth factors, the paper's Table 2 formula, the known-GPU
// tables, option parsing and the "no GPU" decision.
// Sources: calibrate/profile_writer.cpp calibrate/options.cpp (include path: calibrate/).
#include <catch2/catch.hpp>

#include "options.hpp"
#include "profile_writer.hpp"

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace strata::calibrate;

namespace {

Profile sample_profile() {
    Profile p;
    p.name = "nvidia-h100-80gb-hbm3-calibrated";
    p.header_comments = {"written by a test"};
    p.provenance = {"NVIDIA H100 80GB HBM3", 132, 85017755648ULL, "550.54.15", "13.0", "13.0.0", "2.28.9", 8,
                    "strata-calibrate --out \"x y.yaml\"", "2026-11-21T10:00:00Z", "node-1"};
    p.device = {989.4e12, "NVIDIA H100 SXM datasheet", 3.352e12, "memory clock", 85017755648ULL, 132, 2.47};
    p.gemm.efficiency_ceiling = 0.7731;
    p.elementwise_bandwidth_efficiency = 0.8123;
    p.intra_node = IntraNodeBlock{361.3e9, 3.9, "from the all_reduce fit"};
    p.copy_bandwidth_bytes_per_s = 2.9871e12;
    p.gemms.push_back({"qkv_fwd", 8192, 2304, 6144, 1, "bf16", 512.3, 226.4});
    p.gemms.push_back({"attn_qk_fwd", 2048, 2048, 96, 32, "bf16", 0.1 + 0.2, 123.456789012345});
    p.elementwise.push_back({"layernorm_fwd", 50331648, 201359360, 120.0, 1677.7});
    p.collectives.push_back({"all_reduce", 8, 100663296, 780.0, 129.1, 225.9});
    p.collective_fits.push_back({"all_reduce", 8, 12.0, 129e9});
    p.layers.push_back({64, 6144, 2048, 4, 8, true, "selective", 7.7, 11.9, 352321536, 352321536, "8 GPUs"});
    p.sms_held.push_back({2, 1.1, "median of 12 GEMMs"});
    p.sms_held.push_back({16, 1.216, ""});
    p.skipped = {"gemm square_16384 m=16384 n=16384 k=16384: needs 1.50 GiB, 0.90 GiB free"};
    return p;
}

std::string write(const Profile& p) {
    std::ostringstream o;
    write_profile(o, p);
    return o.str();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
}

std::string strip_comment(const std::string& l) {   // outside quotes
    bool q = false;
    for (std::size_t i = 0; i < l.size(); ++i) {
        if (l[i] == '"' && (i == 0 || l[i - 1] != '\\')) q = !q;
        if (l[i] == '#' && !q) return l.substr(0, i);
    }
    return l;
}

/// Minimal reader for what write_profile emits: "block.key" -> value, and per measured list the flow
/// mappings as key -> value maps. Enough to check the documented keys and values.
struct Parsed {
    std::map<std::string, std::string> scalars;
    std::map<std::string, std::vector<std::map<std::string, std::string>>> lists;
};

Parsed parse(const std::string& text) {
    Parsed out;
    std::string block, list, flow;
    for (const std::string& raw : lines_of(text)) {
        std::string l = strip_comment(raw);
        while (!l.empty() && l.back() == ' ') l.pop_back();
        if (l.empty()) continue;
        const std::size_t indent = l.find_first_not_of(' ');
        std::string body = l.substr(indent);
        if (!flow.empty() || body.rfind("- {", 0) == 0) {   // flow mapping, possibly over two lines
            flow += (flow.empty() ? body.substr(2) : " " + body);
            if (flow.back() != '}') continue;
            std::map<std::string, std::string> m;
            std::string inner = flow.substr(1, flow.size() - 2);
            std::istringstream parts(inner);
            for (std::string kv; std::getline(parts, kv, ',');) {
                const auto c = kv.find(':');
                auto trim = [](std::string s) {
                    s.erase(0, s.find_first_not_of(' '));
                    s.erase(s.find_last_not_of(' ') + 1);
                    return s;
                };
                m[trim(kv.substr(0, c))] = trim(kv.substr(c + 1));
            }
            out.lists[list].push_back(m);
            flow.clear();
            continue;
        }
        const auto c = body.find(':');
        std::string key = body.substr(0, c), value = c + 1 < body.size() ? body.substr(c + 2) : "";
        if (indent == 0) {
            block = key;
            if (!value.empty()) out.scalars[key] = value;
        } else if (indent == 2) {
            if (value.empty() || value == "[]") {
                list = block + "." + key;
                out.lists[list];
            } else {
                out.scalars[block + "." + key] = value;
            }
        }
    }
    return out;
}

const std::set<std::string> kKeys = {
    "format", "name", "kind", "provenance.gpu", "provenance.sm_count", "provenance.memory_bytes",
    "provenance.driver", "provenance.cuda_runtime", "provenance.cublas", "provenance.nccl", "provenance.gpus_used",
    "provenance.command", "provenance.date", "provenance.host", "device.peak_flops",
    "device.hbm_bandwidth_bytes_per_s", "device.memory_capacity_bytes", "device.sm_count", "device.kernel_launch_us",
    "gemm.tile_m", "gemm.tile_n", "gemm.efficiency_ceiling", "gemm.k_half", "gemm.stream_k_efficiency", "gemm.stream_k_fixup",
    "elementwise.bandwidth_efficiency",
    "intra_node.bus_bandwidth_bytes_per_s", "intra_node.step_latency_us", "measured.copy_bandwidth_bytes_per_s"};

const std::map<std::string, std::set<std::string>> kListKeys = {
    {"measured.gemm", {"m", "n", "k", "batch", "dtype", "time_us", "tflops"}},
    {"measured.elementwise", {"op", "elements", "bytes", "time_us", "gbps"}},
    {"measured.collectives", {"op", "ranks", "bytes", "time_us", "algbw_gbps", "busbw_gbps"}},
    {"measured.collective_fit", {"op", "ranks", "alpha_us", "beta_bytes_per_s"}},
    {"measured.layers", {"heads", "hidden", "seq_len", "microbatch", "tensor", "sequence_parallel", "recompute",
                         "forward_ms", "backward_ms", "activation_bytes", "formula_bytes", "note"}},
    {"measured.sms_held", {"sms", "slowdown", "note"}}};

}  // namespace

TEST_CASE("calibrate: profile has the documented header, blocks and only documented keys", "[calibrate]") {
    const std::string text = write(sample_profile());
    const Parsed p = parse(text);
    CHECK(p.scalars.at("format") == "strata-device-profile/1");
    CHECK(p.scalars.at("kind") == "calibrated");
    CHECK(p.scalars.at("name") == "\"nvidia-h100-80gb-hbm3-calibrated\"");
    for (const auto& k : kKeys) CHECK(p.scalars.count(k) == 1);
    for (const auto& [k, v] : p.scalars) {
        INFO("key " << k);
        CHECK(kKeys.count(k) == 1);
    }
    for (const auto& [list, entries] : p.lists) {
        INFO("list " << list);
        REQUIRE(kListKeys.count(list) == 1);
        REQUIRE(entries.size() >= 1);
        for (const auto& e : entries)
            for (const auto& [k, v] : e) {
                INFO("key " << k);
                CHECK(kListKeys.at(list).count(k) == 1);
            }
    }
    CHECK(p.lists.size() == kListKeys.size());
    CHECK(text.rfind("# written by a test\n", 0) == 0);
}

TEST_CASE("calibrate: provenance fields are written and quoted", "[calibrate]") {
    const Parsed p = parse(write(sample_profile()));
    CHECK(p.scalars.at("provenance.gpu") == "\"NVIDIA H100 80GB HBM3\"");
    CHECK(p.scalars.at("provenance.sm_count") == "132");
    CHECK(p.scalars.at("provenance.memory_bytes") == "85017755648");
    CHECK(p.scalars.at("provenance.driver") == "\"550.54.15\"");
    CHECK(p.scalars.at("provenance.cuda_runtime") == "\"13.0\"");
    CHECK(p.scalars.at("provenance.cublas") == "\"13.0.0\"");
    CHECK(p.scalars.at("provenance.nccl") == "\"2.28.9\"");
    CHECK(p.scalars.at("provenance.gpus_used") == "8");
    CHECK(p.scalars.at("provenance.command") == "\"strata-calibrate --out \\\"x y.yaml\\\"\"");
    CHECK(p.scalars.at("provenance.date") == "\"2026-11-21T10:00:00Z\"");
    CHECK(p.scalars.at("provenance.host") == "\"node-1\"");
}

TEST_CASE("calibrate: numbers round-trip exactly", "[calibrate]") {
    for (double v : {0.0, 1.0, 0.1 + 0.2, 989.4e12, 3.352e12, 1e-7, 123.456789012345, 2.5e-310, 6.02214076e23}) {
        const std::string s = format_number(v);
        CHECK(std::strtod(s.c_str(), nullptr) == v);
        CHECK(s.find(' ') == std::string::npos);
    }
    CHECK(format_number(NAN) == "0");
    CHECK(format_number(256) == "256");
    CHECK(round_sig(123.456789, 5) == 123.46);
    CHECK(round_sig(0.0) == 0.0);

    const Parsed p = parse(write(sample_profile()));
    CHECK(std::strtod(p.scalars.at("device.peak_flops").c_str(), nullptr) == 989.4e12);
    CHECK(std::strtod(p.scalars.at("measured.copy_bandwidth_bytes_per_s").c_str(), nullptr) == 2.9871e12);
    const auto& g = p.lists.at("measured.gemm").at(1);
    CHECK(std::strtod(g.at("time_us").c_str(), nullptr) == 0.1 + 0.2);
    CHECK(std::strtod(g.at("tflops").c_str(), nullptr) == 123.456789012345);
    CHECK(g.at("batch") == "32");
    CHECK(g.at("dtype") == "bf16");
    const auto& l = p.lists.at("measured.layers").at(0);
    CHECK(l.at("sequence_parallel") == "true");
    CHECK(l.at("recompute") == "selective");
    CHECK(l.at("activation_bytes") == "352321536");
    CHECK(std::strtod(l.at("backward_ms").c_str(), nullptr) == 11.9);
}

TEST_CASE("calibrate: skipped sizes and GEMM names become comments", "[calibrate]") {
    const std::string text = write(sample_profile());
    CHECK(text.find("\n  # skipped: gemm square_16384 m=16384 n=16384 k=16384: needs 1.50 GiB, 0.90 GiB free\n") !=
          std::string::npos);
    CHECK(text.find("}  # qkv_fwd\n") != std::string::npos);
    Profile q = sample_profile();
    q.skipped = {"line one\nline two"};
    const std::string t2 = write(q);
    CHECK(t2.find("# skipped: line one line two\n") != std::string::npos);
}

TEST_CASE("calibrate: one GPU leaves intra_node out with a comment, empty lists are []", "[calibrate]") {
    Profile p = sample_profile();
    p.intra_node.reset();
    p.intra_node_missing_comment = "Only 1 GPU was used";
    p.collectives.clear();
    p.collective_fits.clear();
    const std::string text = write(p);
    const Parsed parsed = parse(text);
    CHECK(parsed.scalars.count("intra_node.bus_bandwidth_bytes_per_s") == 0);
    CHECK(text.find("\nintra_node:") == std::string::npos);
    CHECK(text.find("# intra_node: omitted. Only 1 GPU was used\n") != std::string::npos);
    CHECK(text.find("  collectives: []\n") != std::string::npos);
    CHECK(text.find("  collective_fit: []\n") != std::string::npos);
}

TEST_CASE("calibrate: alpha-beta fit recovers alpha and beta", "[calibrate]") {
    const double alpha = 12.0, beta = 129e9;
    std::vector<double> bytes, t;
    for (double b = 1 << 20; b <= (1 << 30); b *= 2) {
        bytes.push_back(b);
        t.push_back(alpha + b / beta * 1e6);
    }
    AlphaBeta f = fit_alpha_beta(bytes, t);
    REQUIRE(f.ok);
    CHECK(f.alpha_us == Approx(alpha).epsilon(1e-9));
    CHECK(f.beta_bytes_per_s == Approx(beta).epsilon(1e-9));

    std::vector<double> noisy = t;   // +-2% deterministic noise
    for (std::size_t i = 0; i < noisy.size(); ++i) noisy[i] *= (i % 2 ? 1.02 : 0.98);
    f = fit_alpha_beta(bytes, noisy);
    REQUIRE(f.ok);
    CHECK(f.alpha_us == Approx(alpha).epsilon(0.1));
    CHECK(f.beta_bytes_per_s == Approx(beta).epsilon(0.05));

    // a negative intercept is clamped to zero, beta refitted through the origin
    f = fit_alpha_beta({1e6, 2e6, 4e6}, {9.0, 19.0, 39.0});
    REQUIRE(f.ok);
    CHECK(f.alpha_us == 0.0);
    CHECK(f.beta_bytes_per_s == Approx(1.0644e11).epsilon(1e-3));   // weighted fit through the origin

    CHECK_FALSE(fit_alpha_beta({1e6}, {10.0}).ok);                    // one size
    CHECK_FALSE(fit_alpha_beta({1e6, 1e6}, {10.0, 11.0}).ok);         // no spread
    CHECK_FALSE(fit_alpha_beta({1e6, 2e6}, {10.0, 5.0}).ok);          // decreasing
    CHECK_FALSE(fit_alpha_beta({1e6, 2e6}, {10.0, 0.0}).ok);          // zero time
    CHECK_FALSE(fit_alpha_beta({1e6, 2e6}, {10.0}).ok);               // length mismatch
}

TEST_CASE("calibrate: nccl-tests bus bandwidth factors", "[calibrate]") {
    CHECK(busbw_factor(CollOp::all_reduce, 8) == Approx(1.75));
    CHECK(busbw_factor(CollOp::all_gather, 8) == Approx(0.875));
    CHECK(busbw_factor(CollOp::reduce_scatter, 8) == Approx(0.875));
    CHECK(busbw_factor(CollOp::send_recv, 8) == 1.0);
    CHECK(busbw_factor(CollOp::all_reduce, 2) == Approx(1.0));
    CHECK(busbw_factor(CollOp::all_reduce, 1) == 0.0);
    CHECK(algbw_gbps(1e9, 1e6) == Approx(1.0));
    CHECK(algbw_gbps(100663296, 780.0) == Approx(129.06).epsilon(1e-3));
    CHECK(algbw_gbps(1, 0) == 0.0);
    CHECK(std::string(coll_name(CollOp::reduce_scatter)) == "reduce_scatter");
}

TEST_CASE("calibrate: Table 2 activation memory per layer", "[calibrate]") {
    const double s = 2048, b = 4, h = 6144, a = 64, t = 8, sbh = s * b * h;
    const double att = 5 * a * s / (h * t);   // 13.33
    CHECK(table2_activation_bytes(s, b, h, a, t, false, "none") == Approx(sbh * (10 + 24 / t + att)));
    CHECK(table2_activation_bytes(s, b, h, a, t, true, "none") == Approx(sbh * (34 / t + att)));
    CHECK(table2_activation_bytes(s, b, h, a, t, false, "selective") == Approx(sbh * (10 + 24 / t)));
    CHECK(table2_activation_bytes(s, b, h, a, t, true, "selective") == Approx(sbh * 34 / t));
    CHECK(table2_activation_bytes(s, b, h, a, t, false, "full") == Approx(2 * sbh));
    CHECK(table2_activation_bytes(s, b, h, a, t, true, "full") == Approx(2 * sbh / t));
    CHECK(table2_activation_bytes(s, b, h, a, 1, false, "none") == Approx(sbh * (34 + 5 * a * s / h)));
}

TEST_CASE("calibrate: known GPU peaks and HBM bandwidth", "[calibrate]") {
    CHECK(known_peak_flops("NVIDIA A100-SXM4-80GB")->flops == 312e12);
    CHECK(known_peak_flops("NVIDIA H100 80GB HBM3")->flops == 989.4e12);
    CHECK(known_peak_flops("NVIDIA H100 PCIe")->flops == 756e12);
    CHECK(known_peak_flops("NVIDIA H200")->flops == 989.4e12);
    CHECK_FALSE(known_peak_flops("Tesla V100-SXM2-32GB").has_value());
    CHECK_FALSE(known_peak_flops("NVIDIA H100 NVL").has_value());
    CHECK(!known_peak_flops("NVIDIA A100-SXM4-80GB")->source.empty());
    CHECK(hbm_bandwidth_from_clock(2619000, 5120) == Approx(3.352e12).epsilon(1e-3));   // H100 SXM
    CHECK(hbm_bandwidth_from_clock(1593000, 5120) == Approx(2.039e12).epsilon(1e-3));   // A100 80GB
    CHECK(known_hbm_bandwidth("NVIDIA A100-SXM4-80GB")->flops == 2.039e12);
    CHECK_FALSE(known_hbm_bandwidth("Tesla T4").has_value());
}

TEST_CASE("calibrate: quote escapes", "[calibrate]") {
    CHECK(quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
    CHECK(quote("x\ny") == "\"xy\"");
}

namespace {
ParseResult parse_args(std::vector<const char*> args) {
    args.insert(args.begin(), "strata-calibrate");
    return parse_options(static_cast<int>(args.size()), args.data());
}
}  // namespace

TEST_CASE("calibrate: options", "[calibrate]") {
    ParseResult r = parse_args({"--out", "p.yaml", "--quick", "--dtype=fp16", "--tensor", "4", "--peak-tflops", "500"});
    REQUIRE(r.ok);
    CHECK(r.options.out == "p.yaml");
    CHECK(r.options.quick);
    CHECK(r.options.dtype == "fp16");
    CHECK(r.options.tensor == 4);
    CHECK(r.options.heads == 64);
    CHECK(r.options.hidden == 6144);
    CHECK(*r.options.peak_tflops == 500.0);
    CHECK(r.options.command == "strata-calibrate --out p.yaml --quick --dtype=fp16 --tensor 4 --peak-tflops 500");

    r = parse_args({"--out", "p.yaml", "--dtype", "fp32"});
    CHECK_FALSE(r.ok);
    CHECK(r.error.find("--dtype") != std::string::npos);
    CHECK(r.error.find("bf16, fp16") != std::string::npos);

    CHECK_FALSE(parse_args({"--quick"}).ok);   // --out missing
    CHECK(parse_args({"--quick"}).error.find("--out") != std::string::npos);
    r = parse_args({"--out", "p.yaml", "--bogus"});
    CHECK_FALSE(r.ok);
    CHECK(r.error.find("--bogus") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--heads", "0"}).error.find("--heads") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--iters", "x"}).error.find("--iters") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--peak-tflops", "-1"}).error.find("--peak-tflops") != std::string::npos);
    CHECK_FALSE(parse_args({"--out", "p.yaml", "--hidden", "6000"}).ok);   // not a multiple of heads
    CHECK_FALSE(parse_args({"--out", "p.yaml", "--tensor", "3"}).ok);      // heads not a multiple of t
    CHECK(parse_args({"--help"}).ok);
    CHECK(parse_args({"--help"}).options.help);
    // GEMM timing among copies (default half the GEMM's time) and the optional heat soak (default none).
    r = parse_args({"--out", "p.yaml"});
    CHECK(r.options.gemm_mix == 0.5);
    CHECK(r.options.soak_s == 0);
    r = parse_args({"--out", "p.yaml", "--gemm-mix", "0", "--soak=10"});
    REQUIRE(r.ok);
    CHECK(r.options.gemm_mix == 0.0);
    CHECK(r.options.soak_s == 10);
    CHECK(parse_args({"--out", "p.yaml", "--gemm-mix", "-0.5"}).error.find("--gemm-mix: invalid value '-0.5'") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--gemm-mix", "5"}).error.find("[0, 4]") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--soak", "601"}).error.find("--soak") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--soak"}).error.find("--soak: missing value") != std::string::npos);
    CHECK(parse_args({"--out", "p.yaml", "--bogus"}).error.find("--gemm-mix, --soak") != std::string::npos);
}

TEST_CASE("calibrate: no GPU gives the documented error and exit code 4", "[calibrate]") {
    DeviceDecision d = decide_devices(false, 0, 0, "cudaGetDeviceCount: no CUDA-capable device is detected");
    CHECK(d.exit_code == kExitNoDevice);
    CHECK(kExitNoDevice == 4);
    CHECK(d.message.rfind("no CUDA device found: strata-calibrate needs at least one GPU", 0) == 0);
    d = decide_devices(true, 0, 0);
    CHECK(d.exit_code == 4);
    CHECK(d.message == "no CUDA device found: strata-calibrate needs at least one GPU");
    d = decide_devices(true, 2, 4);
    CHECK(d.exit_code == 4);
    CHECK(d.message.find("--gpus 4") != std::string::npos);
    d = decide_devices(true, 8, 0);
    CHECK(d.exit_code == 0);
    CHECK(d.gpus == 8);
    CHECK(decide_devices(true, 8, 2).gpus == 2);
}

// ---- the GEMM ceiling fit: the simulator's shape model, the median layer GEMM --------------------------------
#include "strata/cost.hpp"
#include "strata/scenario.hpp"

TEST_CASE("calibrate: gemm_shape_factor is the simulator's GEMM model without its ceiling", "[calibrate]") {
    const strata::DeviceProfile d =
        strata::load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml");
    const strata::CostModel cost(d);
    const std::int64_t shapes[][4] = {{8192, 2304, 6144, 1}, {8192, 6144, 768, 1}, {2048, 2048, 96, 32},
                                      {4096, 131072, 2048, 1}, {1000, 37, 5, 3}, {512, 896, 7168, 1}};
    for (const auto& s : shapes) {
        const strata::GemmShape g{s[0], s[1], s[2], s[3]};
        CHECK(d.gemm_efficiency_ceiling * gemm_shape_factor(s[0], s[1], s[2], s[3], d.sm_count, d.gemm_tile_m,
                                                            d.gemm_tile_n, d.gemm_k_half, d.gemm_stream_k_efficiency,
                                                            d.gemm_stream_k_fixup) ==
              Approx(cost.gemm_efficiency(g)));
    }
}

TEST_CASE("calibrate: median", "[calibrate]") {
    CHECK(median({}) == 0);
    CHECK(median({3.0}) == 3.0);
    CHECK(median({5.0, 1.0, 3.0}) == 3.0);
    CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
}

TEST_CASE("calibrate: the GEMM ceiling is the median layer GEMM's, not the best one", "[calibrate]") {
    GemmBlock block;
    const double peak = 1000e12;
    // Layer GEMMs whose measured efficiency is ceiling x shape factor with ceilings 0.70, 0.72, 0.74 and one
    // cold-clock outlier at 0.90; a square sweep entry (not in the names) at 0.95.
    std::vector<GemmResult> g;
    const double ceilings[] = {0.70, 0.72, 0.74, 0.90};
    const std::int64_t dims[][3] = {{8192, 2304, 6144}, {8192, 6144, 2304}, {8192, 3072, 6144}, {8192, 6144, 768}};
    for (int i = 0; i < 4; ++i) {
        const auto [m, n, k] = std::tuple{dims[i][0], dims[i][1], dims[i][2]};
        const double eff = ceilings[i] * gemm_shape_factor(m, n, k, 1, 132, block.tile_m, block.tile_n, block.k_half);
        g.push_back({"layer" + std::to_string(i), m, n, k, 1, "bf16", 2.0 * double(m) * double(n) * double(k) / (peak * eff) * 1e6, 0});
    }
    const double eff_sq = 0.95 * gemm_shape_factor(4096, 4096, 4096, 1, 132, block.tile_m, block.tile_n, block.k_half);
    g.push_back({"square_4096", 4096, 4096, 4096, 1, "bf16", 2.0 * 4096.0 * 4096 * 4096 / (peak * eff_sq) * 1e6, 0});
    const std::vector<std::string> names = {"layer0", "layer1", "layer2", "layer3"};
    CHECK(fit_gemm_ceiling(g, names, peak, 132, block) == Approx(0.73));   // median of 0.70, 0.72, 0.74, 0.90
    CHECK(fit_gemm_ceiling(g, {"layer1"}, peak, 132, block) == Approx(0.72));
    CHECK(fit_gemm_ceiling(g, {"nothing"}, peak, 132, block) == 0);
}

TEST_CASE("calibrate: the committed calibrated profiles' ceilings follow from their measured layer GEMMs", "[calibrate]") {
    for (const char* file : {"h100-sxm5-80gb-calibrated.yaml", "h200-sxm-141gb-calibrated.yaml"}) {
        const strata::DeviceProfile d =
            strata::load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/" + file);
        std::vector<GemmResult> g;
        std::vector<std::string> names;
        for (const auto& m : d.measured_gemms) {
            if (m.batch != 1 || (m.m == m.n && m.n == m.k)) continue;   // attention's batched GEMMs, the square sweep
            names.push_back("g" + std::to_string(g.size()));
            g.push_back({names.back(), m.m, m.n, m.k, 1, "bf16", m.time_us, 0});
        }
        REQUIRE(g.size() == 12);
        GemmBlock block;
        block.tile_m = d.gemm_tile_m, block.tile_n = d.gemm_tile_n, block.k_half = d.gemm_k_half;
        block.stream_k_efficiency = d.gemm_stream_k_efficiency;
        block.stream_k_fixup = d.gemm_stream_k_fixup;
        INFO(file);
        CHECK(round_sig(fit_gemm_ceiling(g, names, d.peak_flops, d.sm_count, block), 4) == Approx(d.gemm_efficiency_ceiling));
    }
}
