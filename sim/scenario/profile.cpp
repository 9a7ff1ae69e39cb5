// Reads a device profile (docs/device-profile.md) strictly.
#include "strata/errors.hpp"
#include "strata/profile.hpp"
#include "strata/scenario.hpp"
#include "parts.hpp"
#include "yaml_fields.hpp"

#include <algorithm>
#include <array>

namespace strata {

namespace {
using yamlio::Fields;

constexpr std::array<std::string_view, 47> kProfileKeys = {
    "format", "name", "kind",
    "provenance.gpu", "provenance.sm_count", "provenance.memory_bytes", "provenance.driver",
    "provenance.cuda_runtime", "provenance.cublas", "provenance.nccl", "provenance.gpus_used",
    "provenance.command", "provenance.date", "provenance.host", "provenance.timing_reference_gpus",
    "device.peak_flops", "device.hbm_bandwidth_bytes_per_s", "device.memory_capacity_bytes",
    "device.sm_count", "device.kernel_launch_us",
    "gemm.tile_m", "gemm.tile_n", "gemm.efficiency_ceiling", "gemm.k_half", "gemm.stream_k_efficiency", "gemm.stream_k_fixup",
    "elementwise.bandwidth_efficiency", "intra_node.nccl_channels",
    "intra_node.bus_bandwidth_bytes_per_s", "intra_node.step_latency_us",
    "measured.copy_bandwidth_bytes_per_s", "measured",
    "flash_attention.forward_efficiency", "flash_attention.backward_efficiency",
    "flash_attention.flash2_forward_ratio", "flash_attention.flash2_backward_ratio", "flash_attention.dropout_time_factor",
    "device.peak_flops_fp8", "gemm.efficiency_ceiling_fp8", "intra_node.nvls_bus_bandwidth_bytes_per_s",
    "power.limit_w", "power.memory_bound_w", "power.attention_w", "power.boost_clock_mhz", "power.reference_clock_mhz",
    "power.headroom_j", "power.idle_w"};

/// The cost model interpolates a fused-attention kernel's efficiency bilinearly over the entries of the most
/// common head_dim (the grid), so those must cover every (batch x heads, seq_len) pair of the grid.
void check_flash_grid(const YAML::Node& measured, const std::string& file, const std::vector<MeasuredFlashAttention>& all) {
    if (all.empty()) return;
    const FlashGridAxes axes = flash_grid_axes(all);
    const std::int64_t d = axes.head_dim;
    for (std::int64_t x : axes.batch_heads)
        for (std::int64_t s : axes.seq_lens) {
            const bool found = std::any_of(all.begin(), all.end(), [&](const MeasuredFlashAttention& a) {
                return a.head_dim == d && a.batch * a.heads == x && a.seq_len == s;
            });
            if (!found)
                throw InputError(yamlio::where_value(file, measured, "flash_attention") +
                                 ": profile.measured.flash_attention: the head_dim " + std::to_string(d) +
                                 " entries must form a grid (every batch x heads with every seq_len: the cost model "
                                 "interpolates in it); missing batch x heads = " + std::to_string(x) +
                                 " with seq_len = " + std::to_string(s));
        }
}

void read_measured(const YAML::Node& root, const std::string& file, DeviceProfile& p) {
    const YAML::Node measured = root["measured"];
    if (measured && !measured.IsNull() && !measured.IsMap()) {
        throw InputError(
            yamlio::where_value(file, root, "measured") +
            ": profile.measured: expected a mapping (copy_bandwidth_bytes_per_s, gemm, elementwise, "
            "collectives, collective_fit, layers, flash_attention, sms_held, attention_sms_held, gemm_power, "
            "gemm_power_fp8), got " +
            (measured.IsSequence() ? "a list" : "'" + measured.Scalar() + "'"));
    }
    auto each = [&](const char* name, auto&& fn, std::span<const std::string_view> keys) {
        if (!measured || !measured.IsMap()) return;
        const YAML::Node list = measured[name];
        if (!list || list.IsNull()) return;
        if (!list.IsSequence()) {
            throw InputError(yamlio::where_value(file, measured, name) + ": profile.measured." + name +
                             ": expected a list of mappings");
        }
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (!list[i].IsMap()) {
                throw InputError(yamlio::where(file, list[i].IsNull() ? list.Mark() : list[i].Mark()) + ": profile.measured." +
                                 name + "[" + std::to_string(i) + "]: expected a mapping of keys (" + yamlio::join(keys) + ")");
            }
            Fields f("measured." + std::string(name) + "[" + std::to_string(i) + "]",
                     yamlio::where(file, list[i].Mark()));
            f.reset(list[i], file);
            f.check_known(keys);
            fn(f);
        }
    };
    constexpr std::array<std::string_view, 7> gemm_keys = {"m", "n", "k", "batch", "dtype", "time_us", "tflops"};
    each("gemm", [&](const Fields& f) {
        MeasuredGemm g;
        g.m = f.get_int("m", 1, 1LL << 40);
        g.n = f.get_int("n", 1, 1LL << 40);
        g.k = f.get_int("k", 1, 1LL << 40);
        g.batch = f.get_int("batch", 1, 1LL << 40, 1);
        g.time_us = f.get_double("time_us", 1e-6, 1e12);
        constexpr std::array<std::string_view, 2> dtypes = {"bf16", "fp16"};
        if (f.has("dtype")) (void)f.get_choice("dtype", dtypes);
        if (f.has("tflops")) (void)f.get_double("tflops", 0, 1e6);
        p.measured_gemms.push_back(g);
    }, gemm_keys);
    constexpr std::array<std::string_view, 5> elem_keys = {"op", "elements", "bytes", "time_us", "gbps"};
    constexpr std::array<std::string_view, 10> elem_ops = {
        "layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd", "bias_dropout_add_fwd",
        "bias_dropout_add_bwd", "softmax_fwd", "softmax_bwd", "dropout_fwd", "dropout_bwd"};
    each("elementwise", [&](const Fields& f) {
        MeasuredElementwise e;
        e.op = f.get_choice("op", elem_ops);
        e.bytes = f.get_int("bytes", 1, 1LL << 50);
        e.time_us = f.get_double("time_us", 1e-6, 1e12);
        if (f.has("elements")) (void)f.get_int("elements", 1, 1LL << 50);
        if (f.has("gbps")) (void)f.get_double("gbps", 0, 1e6);
        p.measured_elementwise.push_back(e);
    }, elem_keys);
    constexpr std::array<std::string_view, 6> coll_keys = {"op", "ranks", "bytes", "time_us", "algbw_gbps",
                                                           "busbw_gbps"};
    constexpr std::array<std::string_view, 4> coll_ops = {"all_reduce", "all_gather", "reduce_scatter",
                                                          "send_recv"};
    // Collectives inside one node: interpolated by message size (measured_collective_time); send_recv is kept for
    // the record only.
    each("collectives", [&](const Fields& f) {
        MeasuredCollective c;
        c.op = f.get_choice("op", coll_ops);
        c.ranks = static_cast<int>(f.get_int("ranks", 1, 1 << 20));
        c.bytes = f.get_int("bytes", 1, 1LL << 50);
        c.time_us = f.get_double("time_us", 1e-6, 1e12);
        if (f.has("algbw_gbps")) (void)f.get_double("algbw_gbps", 0, 1e6);
        if (f.has("busbw_gbps")) (void)f.get_double("busbw_gbps", 0, 1e6);
        for (const MeasuredCollective& o : p.measured_collective_points)
            if (o.op == c.op && o.ranks == c.ranks && o.bytes == c.bytes)
                f.fail("bytes", "a second " + c.op + " over " + std::to_string(c.ranks) + " ranks of " +
                                    std::to_string(c.bytes) + " bytes: one time per size");
        if (c.op != "send_recv") p.measured_collective_points.push_back(c);
    }, coll_keys);
    constexpr std::array<std::string_view, 4> fit_keys = {"op", "ranks", "alpha_us", "beta_bytes_per_s"};
    each("collective_fit", [&](const Fields& f) {
        MeasuredCollectiveFit c;
        c.op = f.get_choice("op", coll_ops);
        c.ranks = static_cast<int>(f.get_int("ranks", 1, 1 << 20));
        c.alpha_us = f.get_double("alpha_us", 0, 1e9);
        c.beta_bytes_per_s = f.get_double("beta_bytes_per_s", 1, 1e18);
        p.measured_collectives.push_back(c);
    }, fit_keys);
    constexpr std::array<std::string_view, 12> layer_keys = {
        "heads", "hidden", "seq_len", "microbatch", "tensor", "sequence_parallel", "recompute",
        "forward_ms", "backward_ms", "activation_bytes", "formula_bytes", "note"};
    constexpr std::array<std::string_view, 3> recompute_choices = {"none", "selective", "full"};
    each("layers", [&](const Fields& f) {
        MeasuredLayer l;
        l.heads = static_cast<int>(f.get_int("heads", 1, 1 << 16));
        l.hidden = static_cast<int>(f.get_int("hidden", 1, 1 << 24));
        l.seq_len = static_cast<int>(f.get_int("seq_len", 1, 1 << 24));
        l.microbatch = static_cast<int>(f.get_int("microbatch", 1, 1 << 20));
        l.tensor = static_cast<int>(f.get_int("tensor", 1, 1 << 16));
        l.sequence_parallel = f.get_bool("sequence_parallel", false);
        l.recompute = f.get_choice("recompute", recompute_choices, "none");
        l.forward_ms = f.get_double("forward_ms", 0, 1e9);
        l.backward_ms = f.get_double("backward_ms", 0, 1e9);
        l.activation_bytes = f.get_int("activation_bytes", 0, 1LL << 50, 0);
        l.formula_bytes = f.get_int("formula_bytes", 0, 1LL << 50, 0);
        if (f.has("note")) (void)f.get_string("note");
        p.measured_layers.push_back(l);
    }, layer_keys);
    constexpr std::array<std::string_view, 8> flash_keys = {"batch", "heads", "seq_len", "head_dim", "causal",
                                                            "forward_us", "backward_us", "note"};
    each("flash_attention", [&](const Fields& f) {
        MeasuredFlashAttention a;
        a.batch = f.get_int("batch", 1, 1 << 20, 1);
        a.heads = f.get_int("heads", 1, 1 << 16);
        a.seq_len = f.get_int("seq_len", 1, 1 << 24);
        a.head_dim = f.get_int("head_dim", 1, 1 << 12);
        if (!f.get_bool("causal", true))
            f.fail("causal", "only causal attention is modelled (the layer model's attention is causal): causal: true");
        a.forward_us = f.get_double("forward_us", 1e-3, 1e12);
        a.backward_us = f.get_double("backward_us", 1e-3, 1e12);
        if (f.has("note")) (void)f.get_string("note");
        p.measured_flash_attention.push_back(a);
    }, flash_keys);
    check_flash_grid(measured, file, p.measured_flash_attention);
    // An SMs-held entry's sms (below the device's SMs, after the table's previous entry) and slowdown (>= 1).
    const auto held_entry = [&](const Fields& f, const std::vector<MeasuredSmsHeld>& table) {
        MeasuredSmsHeld h;
        h.sms = static_cast<int>(f.get_int("sms", 1, 1 << 16));
        if (p.sm_count > 0 && h.sms >= p.sm_count)
            f.fail("sms", "must be below device.sm_count (" + std::to_string(p.sm_count) + "): SMs held by another kernel");
        if (!table.empty() && h.sms <= table.back().sms)
            f.fail("sms", "entries must be in increasing order of sms without repeats (the previous one has " +
                              std::to_string(table.back().sms) + ")");
        h.slowdown = f.get_double("slowdown", 1.0, 100.0);
        if (f.has("note")) (void)f.get_string("note");
        return h;
    };
    constexpr std::array<std::string_view, 5> held_keys = {"sms", "slowdown", "base", "per_wave", "note"};
    each(
        "sms_held",
        [&](const Fields& f) {
            MeasuredSmsHeld h = held_entry(f, p.measured_sms_held);
            if (f.has("base") != f.has("per_wave"))
                f.fail(f.has("base") ? "base" : "per_wave",
                       "base and per_wave go together (slowdown = base + per_wave / waves)");
            if (f.has("base")) {
                h.base = f.get_double("base", 1.0, 100.0);
                h.per_wave = f.get_double("per_wave", 0.0, 100.0);
            }
            p.measured_sms_held.push_back(h);
        },
        held_keys);
    constexpr std::array<std::string_view, 3> attention_held_keys = {"sms", "slowdown", "note"};
    each(
        "attention_sms_held",
        [&](const Fields& f) { p.measured_attention_sms_held.push_back(held_entry(f, p.measured_attention_sms_held)); },
        attention_held_keys);
    constexpr std::array<std::string_view, 4> power_keys = {"clock_mhz", "speed", "watts", "note"};
    const std::array<std::pair<const char*, std::vector<MeasuredGemmPower>*>, 2> curves = {
        {{"gemm_power", &p.power.gemm}, {"gemm_power_fp8", &p.power.gemm_fp8}}};
    for (const auto& named : curves) {
        std::vector<MeasuredGemmPower>* const curve = named.second;  // a plain variable: lambdas capture no bindings (clang 14)
        each(named.first, [&, curve](const Fields& f) {
            MeasuredGemmPower g;
            g.clock_mhz = f.get_double("clock_mhz", 1, 1e5);
            if (p.power.boost_clock_mhz > 0 && g.clock_mhz > p.power.boost_clock_mhz)
                f.fail("clock_mhz", "must be at most power.boost_clock_mhz (" + yamlio::number_text(p.power.boost_clock_mhz) + ")");
            g.speed = f.get_double("speed", 0.05, 1.0);
            g.watts = f.get_double("watts", 1, 1e5);
            if (!curve->empty()) {
                const MeasuredGemmPower& before = curve->back();
                if (g.clock_mhz >= before.clock_mhz)
                    f.fail("clock_mhz", "entries must be in decreasing order of clock_mhz without repeats (the previous one has " +
                                            yamlio::number_text(before.clock_mhz) + ")");
                if (g.speed >= before.speed)
                    f.fail("speed", "must fall with the clock (the previous entry has " + yamlio::number_text(before.speed) + ")");
                if (g.watts >= before.watts)
                    f.fail("watts", "must fall with the clock: a lower clock draws less (the previous entry has " +
                                        yamlio::number_text(before.watts) + " W)");
            }
            if (f.has("note")) (void)f.get_string("note");
            curve->push_back(g);
        }, power_keys);
    }
    const bool has_curve = !p.power.gemm.empty();
    if (has_curve != p.power.present() || (!has_curve && !p.power.gemm_fp8.empty())) {
        const bool power_block = root["power"] && root["power"].IsMap();
        const YAML::Node at = power_block ? root["power"] : measured ? measured : root;
        throw InputError(yamlio::where(file, at.Mark()) + ": profile: the power block (power.limit_w, boost_clock_mhz, " +
                         "memory_bound_w, attention_w) and measured.gemm_power go together (the board's limit and the BF16 " +
                         "GEMMs' power at the clocks it sets; gemm_power_fp8 beside them): " +
                         (p.power.present() ? std::string("measured.gemm_power is missing")
                          : has_curve       ? std::string("the power block is missing")
                                            : std::string("the power block and measured.gemm_power are missing")));
    }
    for (const auto& [name, curve] : curves) {
        const auto at = [&, n = name] { return yamlio::where_value(file, measured, n) + ": profile.measured." + n; };
        if (curve->size() == 1)
            throw InputError(at() + ": needs at least two points (the curve's slope in watts per MHz sets the clock above "
                                  "and below them)");
        if (!curve->empty() && curve->back().watts > p.power.limit_w)
            throw InputError(at() + ": its slowest point draws " + yamlio::number_text(curve->back().watts) +
                             " W, above power.limit_w (" + yamlio::number_text(p.power.limit_w) +
                             " W): the curve must reach the limit (a GEMM-only loop settles there)");
    }
    if (has_curve && p.power.reference_clock_mhz < p.power.gemm.back().clock_mhz)
        throw InputError(yamlio::where_value(file, root["power"], "reference_clock_mhz") +
                         ": profile.power.reference_clock_mhz: must be at least measured.gemm_power's slowest clock (" +
                         yamlio::number_text(p.power.gemm.back().clock_mhz) + " MHz): the profile's rates hold on the curve, got " +
                         yamlio::number_text(p.power.reference_clock_mhz));
}

DeviceProfile read_device(const Fields& f, const std::string& file);

DeviceProfile profile_from(const YAML::Node& root, const std::string& file) {
    Fields f("profile", yamlio::where(file, root.Mark()));
    // The lists under `measured` stay opaque values here (measured.gemm, ...); read_measured() reads them.
    f.reset(root, file);
    std::vector<std::string_view> known(kProfileKeys.begin(), kProfileKeys.end());
    constexpr std::array<std::string_view, 10> lists = {
        "measured.gemm",       "measured.elementwise",     "measured.collectives", "measured.collective_fit",
        "measured.layers",     "measured.flash_attention", "measured.sms_held",    "measured.attention_sms_held",
        "measured.gemm_power", "measured.gemm_power_fp8"};
    known.insert(known.end(), lists.begin(), lists.end());
    f.check_known(known);

    // Every missing required key is reported at once (parts::read_collecting); the measured lists after that.
    std::vector<yamlio::MissingKey> missing;
    DeviceProfile p = parts::read_collecting(f, missing, [&](const Fields& fr) { return read_device(fr, file); });
    yamlio::throw_missing(missing);
    read_measured(root, file, p);
    return p;
}

/// The profile's scalar keys (format, device, gemm, elementwise, intra_node, flash_attention, provenance).
DeviceProfile read_device(const Fields& f, const std::string& file) {
    constexpr std::array<std::string_view, 1> formats = {"strata-device-profile/1"};
    (void)f.get_choice("format", formats);
    DeviceProfile p;
    p.file = file;
    p.name = f.get_string("name");
    constexpr std::array<std::string_view, 2> kinds = {"analytical", "calibrated"};
    p.kind = f.get_choice("kind", kinds);
    p.gpus_used = static_cast<int>(f.get_int("provenance.gpus_used", 0, 1 << 20, 0));
    p.timing_reference_gpus = static_cast<int>(f.get_int("provenance.timing_reference_gpus", 1, 1 << 20, 1));
    if (p.kind == "calibrated") {
        (void)f.get_string("provenance.gpu");
        (void)f.get_string("provenance.date");
    }
    p.peak_flops = f.get_double("device.peak_flops", 1e9, 1e18);
    p.hbm_bandwidth = f.get_double("device.hbm_bandwidth_bytes_per_s", 1e9, 1e15);
    p.memory_capacity_bytes = f.get_int("device.memory_capacity_bytes", 1LL << 20, 1LL << 50);
    p.sm_count = static_cast<int>(f.get_int("device.sm_count", 1, 100000));
    p.kernel_launch_us = f.get_double("device.kernel_launch_us", 0, 1000);
    p.gemm_tile_m = static_cast<int>(f.get_int("gemm.tile_m", 8, 4096, 256));
    p.gemm_tile_n = static_cast<int>(f.get_int("gemm.tile_n", 8, 4096, 128));
    p.gemm_efficiency_ceiling = f.get_double("gemm.efficiency_ceiling", 0.01, 1.0);
    p.gemm_k_half = f.get_double("gemm.k_half", 0, 1e6);
    p.gemm_stream_k_efficiency = f.get_double("gemm.stream_k_efficiency", 0, 1.0, 0.0);
    p.gemm_stream_k_fixup = f.get_double("gemm.stream_k_fixup", 0, 100.0, 0.0);
    if (p.gemm_stream_k_fixup > 0 && p.gemm_stream_k_efficiency <= 0)
        f.fail("gemm.stream_k_fixup", "is stream-K's fixup cost: it needs gemm.stream_k_efficiency > 0");
    p.elementwise_bandwidth_efficiency = f.get_double("elementwise.bandwidth_efficiency", 0.01, 1.0);
    p.nccl_channels = static_cast<int>(f.get_int("intra_node.nccl_channels", 0, 1024, 0));
    if (p.nccl_channels >= p.sm_count)  // one SM each: the compute beside a collective needs some left
        f.fail("intra_node.nccl_channels", "must be below device.sm_count (" + std::to_string(p.sm_count) +
                                               "): NCCL runs one channel per SM (got " + std::to_string(p.nccl_channels) + ")");
    // Optional: a profile calibrated on one GPU has no collective measurements; the system's
    // network.nvlink_bandwidth_bytes_per_s then has to say it.
    p.intra_node_bus_bandwidth = f.get_double("intra_node.bus_bandwidth_bytes_per_s", 1e6, 1e15, 0.0);
    p.intra_node_step_latency_us = f.get_double("intra_node.step_latency_us", 0, 1e6, 0.0);
    p.intra_node_nvls_bus_bandwidth = f.get_double("intra_node.nvls_bus_bandwidth_bytes_per_s", 1e6, 1e15, 0.0);
    p.peak_flops_fp8 = f.get_double("device.peak_flops_fp8", 1e9, 1e18, 0.0);
    p.gemm_efficiency_ceiling_fp8 =
        f.get_double("gemm.efficiency_ceiling_fp8", 0.01, 1.0, p.peak_flops_fp8 > 0 ? p.gemm_efficiency_ceiling : 0.0);
    p.flash_forward_efficiency = f.get_double("flash_attention.forward_efficiency", 0.01, 1.0, 0.0);
    p.flash_backward_efficiency = f.get_double("flash_attention.backward_efficiency", 0.01, 1.0, 0.0);
    if ((p.flash_forward_efficiency > 0) != (p.flash_backward_efficiency > 0))
        f.fail(p.flash_forward_efficiency > 0 ? "flash_attention.backward_efficiency" : "flash_attention.forward_efficiency",
               "missing: the flash_attention block needs both forward_efficiency and backward_efficiency");
    p.flash2_forward_ratio = f.get_double("flash_attention.flash2_forward_ratio", 0.05, 2.0, 0.0);
    p.flash2_backward_ratio = f.get_double("flash_attention.flash2_backward_ratio", 0.05, 2.0, 0.0);
    if ((p.flash2_forward_ratio > 0) != (p.flash2_backward_ratio > 0))
        f.fail(p.flash2_forward_ratio > 0 ? "flash_attention.flash2_backward_ratio" : "flash_attention.flash2_forward_ratio",
               "missing: FlashAttention-2 needs both flash2_forward_ratio and flash2_backward_ratio");
    p.flash_dropout_time_factor = f.get_double("flash_attention.dropout_time_factor", 1.0, 4.0, 1.0);
    if (f.has("measured.copy_bandwidth_bytes_per_s"))
        (void)f.get_double("measured.copy_bandwidth_bytes_per_s", 1e6, 1e15);
    if (f.has("power.limit_w") || f.has("power.memory_bound_w") || f.has("power.attention_w") ||
        f.has("power.boost_clock_mhz") || f.has("power.reference_clock_mhz")) {
        p.power.limit_w = f.get_double("power.limit_w", 1, 1e5);
        p.power.boost_clock_mhz = f.get_double("power.boost_clock_mhz", 1, 1e5);
        p.power.memory_bound_w = f.get_double("power.memory_bound_w", 1, 1e5);
        p.power.attention_w = f.get_double("power.attention_w", 1, 1e5);
        p.power.reference_clock_mhz =
            f.get_double("power.reference_clock_mhz", 1, p.power.boost_clock_mhz, p.power.boost_clock_mhz);
        if (p.power.memory_bound_w >= p.power.limit_w)
            f.fail("power.memory_bound_w", "must be below power.limit_w (" + yamlio::number_text(p.power.limit_w) +
                                                " W): a copy does not reach the limit");
    }
    if (f.has("power.headroom_j") || f.has("power.idle_w")) {
        if (!p.power.present())
            f.fail(f.has("power.headroom_j") ? "power.headroom_j" : "power.idle_w",
                   "needs the power block (power.limit_w and the rest): the headroom is above the board's limit");
        if (!f.has("power.headroom_j") || !f.has("power.idle_w"))
            f.fail(f.has("power.headroom_j") ? "power.idle_w" : "power.headroom_j",
                   "missing: power.headroom_j and power.idle_w go together (what rest gives and how fast)");
        p.power.headroom_j = f.get_double("power.headroom_j", 0.001, 1e5);
        p.power.idle_w = f.get_double("power.idle_w", 0, 1e5);
        if (p.power.idle_w >= p.power.memory_bound_w)
            f.fail("power.idle_w", "must be below power.memory_bound_w (" + yamlio::number_text(p.power.memory_bound_w) +
                                       " W): a waiting board draws less than a copying one");
    }
    return p;
}
}  // namespace

DeviceProfile load_device_profile(const std::filesystem::path& path) {
    return profile_from(yamlio::load_file(path), path.string());
}

DeviceProfile load_device_profile_text(const std::string& text, const std::filesystem::path& origin) {
    return profile_from(yamlio::load_text(text, origin.string()), origin.string());
}

}  // namespace strata
