// Reads the system part: GPUs per node, memory, device profile, network, optimizer step and variation.
// docs/system-file.md documents every key, its unit, default, range and the default's source; a test holds
// that document and this reader to the same keys, defaults and ranges.
#include "parts.hpp"
#include "strata/scenario.hpp"

#include <array>

namespace strata {

namespace {
constexpr std::array<std::string_view, 35> kSystemKeys = {
    "name",
    "device_profile",
    "gpus_per_node",
    "memory_capacity_bytes",
    "memory_reserved_bytes",
    "network.nvlink_bandwidth_bytes_per_s",
    "network.nvlink_latency_us",
    "network.rails",
    "network.nic_bandwidth_bytes_per_s",
    "network.nic_latency_us",
    "network.device_to_host_bandwidth_bytes_per_s",
    "network.host_to_device_bandwidth_bytes_per_s",
    "network.host_copy_latency_us",
    "network.pcie_bandwidth_bytes_per_s",
    "network.nodes_per_leaf",
    "network.spines_per_rail",
    "network.oversubscription",
    "network.tiers",
    "network.routing",
    "network.switch_latency_us",
    "network.collective_step_latency_intra_us",
    "network.collective_step_latency_inter_us",
    "network.hierarchical_collectives",
    "network.p2p_latency_us",
    "network.nccl_channels_per_nic",
    "optimizer.bytes_per_param_step",
    "optimizer.bytes_per_param_step_fp16",
    "optimizer.fixed_overhead_ms",
    "variation.gpu_sigma",
    "variation.span_sigma",
    "variation.span_hold_ms",
    "variation.seed",
    "power_limit_w",
    "description",
    "sources"};

// Network latencies a system file may leave out: the figures the shipped DGX A100 (selene-a100.yaml) and DGX H100 /
// H200 systems give, the same on both (docs/system-file.md has the sources in full).
constexpr double kNvlinkLatencyUs = 1.0;   // NCCL's tuning model (src/graph/tuning.cc hwLat), NVLink: 0.5-1.9 us per step
constexpr double kNicLatencyUs = 1.0;      // ConnectX-6 HDR end to end ~0.6-1 us; ConnectX-7 NDR order 1 us
constexpr double kSwitchLatencyUs = 0.13;  // NVIDIA QM8700 / QM8790 HDR and QM9700 NDR switches, port to port ~130 ns
constexpr double kCollectiveStepLatencyInterUs = 5.0;  // NCCL's tuning model, network: 2.7-8.5 us per step
constexpr double kP2pLatencyUs = 10.0;     // NCCL send/recv of a small message (nccl-tests sendrecv_perf), order 10 us
// A copy to or from pinned host memory: cudaMemcpyAsync's per-call cost, about 5-7 us (DualPath, arXiv 2602.21548,
// section 5.2); nvbandwidth's figures leave the submission out.
constexpr double kHostCopyLatencyUs = 5.0;
constexpr double kMaxLatencyUs = 1e6;

Time us_field(const yamlio::Fields& f, const std::string& key, double fallback_us) {
    return Time::from_us(f.get_double(key, 0, kMaxLatencyUs, fallback_us));
}
}  // namespace

std::span<const std::string_view> system_keys() { return kSystemKeys; }

namespace {
/// What is wrong with the system's power_limit_w for its device profile ("" if nothing).
std::string power_limit_problem(const SystemSpec& s) {
    if (!s.power_limit_w || *s.power_limit_w <= 0) return "";
    const PowerLimit& p = s.device.power;
    if (!p.present())
        return "a limit of " + yamlio::number_text(*s.power_limit_w) + " W needs a device profile with a power block " +
               "(power.limit_w and measured.gemm_power); " + s.device.file + " has none: give 0 or leave the key out";
    if (*s.power_limit_w <= p.memory_bound_w)
        return "must be above what bandwidth-bound kernels draw (the device profile's power.memory_bound_w, " +
               yamlio::number_text(p.memory_bound_w) + " W), got " + yamlio::number_text(*s.power_limit_w);
    return "";
}
}  // namespace

void SystemSpec::apply_power_limit() {
    if (!power_limit_w) return;
    if (const std::string problem = power_limit_problem(*this); !problem.empty())
        throw InputError("system '" + name + "': power_limit_w: " + problem);
    if (*power_limit_w <= 0)
        device.power = PowerLimit{};
    else
        device.power.limit_w = *power_limit_w;
}

namespace parts {

const DeviceProfile& DeviceProfiles::load(const std::filesystem::path& file) {
    const std::string key = file.lexically_normal().string();
    auto it = loaded_.find(key);
    if (it == loaded_.end()) it = loaded_.emplace(key, load_device_profile(file)).first;
    return it->second;
}

SystemSpec read_system(const yamlio::Fields& f, DeviceProfiles& profiles, std::string* infeasible) {
    f.check_known(kSystemKeys);
    // Keys each valid alone that do not fit together: an error, or in a sweep the case's reason not to run.
    auto inconsistent = [&](const std::string& key, const std::string& message) {
        if (!infeasible) f.fail(key, message);
        if (infeasible->empty()) *infeasible = "system." + key + ": " + message;
    };
    SystemSpec s;
    s.name = f.get_string("name");
    if (f.has("description")) (void)f.get_string("description");
    const std::string profile_rel = f.get_string("device_profile");
    const bool profile_read = !profile_rel.empty();  // empty: missing, reported with the other missing keys
    if (profile_read) {
        const std::filesystem::path profile_path = std::filesystem::path(f.file_of("device_profile")).parent_path() / profile_rel;
        try {
            s.device = profiles.load(profile_path.lexically_normal());
        } catch (const InputError& e) {
            const std::string dir = std::filesystem::path(f.file_of("device_profile")).parent_path().string();
            throw InputError(std::string(e.what()) + " (device profile named at " + f.loc("device_profile") +
                             (std::filesystem::path(profile_rel).is_relative() && !std::filesystem::exists(profile_path)
                                  ? " as '" + profile_rel + "', relative to " + (dir.empty() ? std::string(".") : dir) + "/"
                                  : std::string()) +
                             ")");
        }
    }
    s.gpus_per_node = static_cast<int>(f.get_int("gpus_per_node", 1, 1024));
    s.memory_capacity = Bytes(f.get_int("memory_capacity_bytes", 1LL << 20, 1LL << 50, s.device.memory_capacity_bytes));
    if (infeasible) {  // a sweep may vary the capacity under a reserve the system file gives
        s.memory_reserved = Bytes(f.get_int("memory_reserved_bytes", 0, 1LL << 50, 0));
        if (s.memory_reserved.value >= s.memory_capacity.value)
            inconsistent("memory_reserved_bytes", "the reserve (" + std::to_string(s.memory_reserved.value) +
                                                      " bytes) must be less than memory_capacity_bytes (" +
                                                      std::to_string(s.memory_capacity.value) + ")");
    } else {
        s.memory_reserved = Bytes(f.get_int("memory_reserved_bytes", 0, s.memory_capacity.value - 1, 0));
    }
    NetworkSpec& n = s.network;
    const std::string nvlink = "network.nvlink_bandwidth_bytes_per_s";
    if (s.device.intra_node_bus_bandwidth > 0) {
        n.nvlink_bandwidth = {f.get_double(nvlink, 1e6, 1e15, s.device.intra_node_bus_bandwidth)};
    } else if (profile_read) {
        (void)f.need(nvlink, "a number in [1e6, 1e15]: the device profile " + s.device.file +
                                 " has no intra_node block (calibrated on one GPU), so the system must give the NVLink bandwidth");
        n.nvlink_bandwidth = {f.get_double(nvlink, 1e6, 1e15, 1e6)};  // 1e6 stands in when missing (reported)
        s.use_nvlink_for_missing_intra_node();
    }
    n.nvlink_latency = us_field(f, "network.nvlink_latency_us", kNvlinkLatencyUs);
    // One NIC per GPU, each on its own rail, as in DGX A100 / H100 / H200 (8 compute NICs for 8 GPUs).
    n.rails = static_cast<int>(f.get_int("network.rails", 1, 1024, s.gpus_per_node));
    if (n.rails > s.gpus_per_node)  // the fabric gives each GPU of a node one rail: at most one NIC per GPU
        inconsistent("network.rails", "rails (" + std::to_string(n.rails) + ") must be at most gpus_per_node (" +
                                          std::to_string(s.gpus_per_node) + "): each rail's NIC serves at least one GPU of a node");
    n.nic_bandwidth = {f.get_double("network.nic_bandwidth_bytes_per_s", 1e6, 1e15)};
    n.nic_latency = us_field(f, "network.nic_latency_us", kNicLatencyUs);
    // The host link (PCIe to pinned host memory): only activation offloading uses it, so it may be left out.
    n.device_to_host_bandwidth = {f.get_double("network.device_to_host_bandwidth_bytes_per_s", 1e6, 1e15, 0.0)};
    n.host_to_device_bandwidth = {f.get_double("network.host_to_device_bandwidth_bytes_per_s", 1e6, 1e15, 0.0)};
    n.host_copy_latency = us_field(f, "network.host_copy_latency_us", kHostCopyLatencyUs);
    n.pcie_bandwidth = {f.get_double("network.pcie_bandwidth_bytes_per_s", 1e6, 1e15, 0.0)};
    n.nodes_per_leaf = static_cast<int>(f.get_int("network.nodes_per_leaf", 1, 1 << 16));
    n.spines_per_rail = static_cast<int>(f.get_int("network.spines_per_rail", 0, 1 << 16, 0));
    n.oversubscription = f.get_double("network.oversubscription", 1.0, 64.0, 1.0);
    n.tiers = static_cast<int>(f.get_int("network.tiers", 2, 3, 2));
    constexpr std::array<std::string_view, 2> kRoutings = {"hash", "adaptive"};
    n.routing = *routing_named(f.get_choice("network.routing", kRoutings, "hash"));
    n.switch_latency = us_field(f, "network.switch_latency_us", kSwitchLatencyUs);
    n.collective_step_latency_intra = us_field(f, "network.collective_step_latency_intra_us", s.device.intra_node_step_latency_us);
    n.collective_step_latency_inter = us_field(f, "network.collective_step_latency_inter_us", kCollectiveStepLatencyInterUs);
    n.hierarchical_collectives = f.get_bool("network.hierarchical_collectives", true);
    n.p2p_latency = us_field(f, "network.p2p_latency_us", kP2pLatencyUs);
    n.nccl_channels_per_nic = static_cast<int>(f.get_int("network.nccl_channels_per_nic", 1, 64, 2));
    s.optimizer.bytes_per_param_step = f.get_double("optimizer.bytes_per_param_step", 0, 1e4);
    s.optimizer.bytes_per_param_step_fp16 =
        f.get_double("optimizer.bytes_per_param_step_fp16", 0, 1e4, s.optimizer.bytes_per_param_step);
    s.optimizer.fixed_overhead = Time::from_ms(f.get_double("optimizer.fixed_overhead_ms", 0, 1e6, 0));
    s.variation.gpu_sigma = f.get_double("variation.gpu_sigma", 0, 0.2, 0);
    s.variation.span_sigma = f.get_double("variation.span_sigma", 0, 0.2, 0);
    s.variation.span_hold = Time::from_ms(f.get_double("variation.span_hold_ms", 0, 1e4, 0));
    s.variation.seed = static_cast<std::uint64_t>(f.get_int("variation.seed", 0, std::int64_t{1} << 62, 1));
    if (f.has("power_limit_w")) {
        s.power_limit_w = f.get_double("power_limit_w", 0, 1e5);
        if (profile_read) {
            if (const std::string problem = power_limit_problem(s); !problem.empty()) f.fail("power_limit_w", problem);
            s.apply_power_limit();
        }
    }
    return s;
}

}  // namespace parts

}  // namespace strata
