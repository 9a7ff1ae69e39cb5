// `strata explain`: one transformer layer's kernels and collectives with their costs (print_layer_breakdown), a
// line each, consecutive identical elementwise kernels (FP8 delayed scaling's per-module updates) as one line with
// their count.
#include "strata/report.hpp"

#include "strata/cost.hpp"
#include "strata/layer.hpp"
#include "strata/power.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace strata {

void print_layer_breakdown(std::ostream& out, const Scenario& sc, bool clock_from_kernels) {
    const auto& e = sc.execution;
    const LayerPlan plan = build_layer(layer_config(sc.model, e));
    CostModel cost(sc.system.device);
    const SustainedClock clock = sustain_for(cost, sc.model, e, !clock_from_kernels);
    const DeviceProfile& dev = sc.system.device;
    // What is recomputed: selective's modules, full's partial method and layers.
    std::string recompute = to_string(e.recompute);
    if (e.recompute == Recompute::selective)
        recompute += fmt::format(" [{}]", fmt::join(names_of(e.recompute_modules), ", "));
    if (e.recompute == Recompute::full && e.recompute_layers > 0)
        recompute += fmt::format(" ({} {})", to_string(e.recompute_method), e.recompute_layers);
    out << fmt::format("{}: model {}, t={}, SP={}, recompute={}, b={}, attention {}{}{}\n", sc.name, sc.model.name,
                       e.tensor, e.sequence_parallel ? "on" : "off", recompute, e.microbatch, to_string(e.attention),
                       e.gradient_accumulation_fusion ? "" : ", no gradient-accumulation fusion",
                       e.async_tp_comm ? "" : ", synchronous backward collectives");
    if (plan.offload.any())
        out << fmt::format(
            "  offloaded to host memory [{}]: {} tensors, {:.1f} MB copied out and back each layer and "
            "microbatch, {:.1f} MB of GPU memory freed (of {:.1f} MB stored)\n",
            fmt::join(names_of(e.offload_modules), ", "), plan.offload.copies, double(plan.offload.copied.value) / 1e6,
            double(plan.offload.freed.value) / 1e6, double(plan.stored_bytes.value) / 1e6);
    if (plan.attention_workspace_forward.value > 0 || plan.attention_workspace_backward.value > 0)
        out << fmt::format(
            "  the context-parallel ring's transient buffers while the attention runs: {:.1f} MB forward, {:.1f} MB "
            "backward (peak memory's 'attention workspace'; {:.1f} MB stored per layer)\n",
            double(plan.attention_workspace_forward.value) / 1e6, double(plan.attention_workspace_backward.value) / 1e6,
            double(plan.stored_bytes.value) / 1e6);
    // The SMs each collective's kernels hold: the context-parallel ring's by where its GPUs sit.
    // Where a ring's neighbours sit on different nodes its bytes cross a NIC at each such step: its lines give that
    // time (as pass_time takes it) and the intra-node figure beside it.
    const ContextRing ring = cost.context_ring(e, sc.system);
    const auto sms_held = [&](const TpCollective& c) {
        return c.context_group ? ring.sms(c.message) : cost.sms_held(c);
    };
    const auto across_nodes = [&](const TpCollective& c) -> std::string {
        if (!c.context_group || ring.across_nodes.value <= 0) return "";
        return fmt::format(" (across nodes at {:.0f} GB/s per GPU's NIC share; {:.1f} ms inside a node)",
                           ring.across_nodes.value / 1e9, cost.tp_collective(c.kind, e.context, c.message).ms());
    };
    for (const auto& [title, pass] : {std::pair{"forward", &plan.forward}, std::pair{"backward", &plan.backward}}) {
        out << fmt::format("  {} pass: {:.3f} ms\n", title, cost.pass_time(*pass, e.tensor, ring).ms());
        for (std::size_t i = 0; i < pass->size(); ++i) {
            const Step& step = (*pass)[i];
            if (step.kind == Step::Kind::collective) {
                // The kernels paired with it lose this share of their speed while it runs (each GEMM at its waves).
                const bool paired =
                    step.overlapped && i + 1 < pass->size() && (*pass)[i + 1].kind == Step::Kind::compute;
                const double speed =
                    paired ? 1.0 - cost.step_sm_fraction((*pass)[i + 1], sms_held(step.collective)) : 1.0;
                out << fmt::format(
                    "    {:<34} {:>14} {:>10.1f} MB {:>9.3f} ms{}{}\n", step.collective.name,
                    to_string(step.collective.kind), double(step.collective.message.value) / 1e6,
                    cost.collective_time(step.collective, e.tensor, ring).ms(), across_nodes(step.collective),
                    !step.overlapped ? ""
                    : step.collective.engine == CommEngine::copy_engine
                        ? std::string("  (overlapped with the next step; copy engines, no SM)")
                        : fmt::format("  (overlapped with the next step, at {:.1f}% speed beside its {} SMs{})",
                                      100.0 * speed, sms_held(step.collective),
                                      step.collective.engine == CommEngine::userbuffers ? ", userbuffers"
                                      : step.collective.context_group                   ? ", NCCL point-to-point"
                                                                                        : ""));
                continue;
            }
            for (std::size_t j = 0; j < step.kernels.size(); ++j) {
                const Kernel& k = step.kernels[j];
                const KernelCost c = cost.kernel(k);
                if (k.kind == KernelKind::elementwise) {
                    // Consecutive identical kernels (a run of FP8 scale updates) as one line: their count and sums.
                    std::size_t same = 1;
                    while (j + same < step.kernels.size() && step.kernels[j + same].kind == k.kind &&
                           step.kernels[j + same].name == k.name && step.kernels[j + same].op_class == k.op_class &&
                           step.kernels[j + same].bytes == k.bytes)
                        ++same;
                    const auto n = static_cast<double>(same);
                    out << fmt::format("    {:<34} {:>14} {:>10.1f} MB {:>9.3f} ms  {}\n",
                                       same > 1 ? fmt::format("{} x {}", k.name, same) : k.name, "elementwise",
                                       n * double(k.bytes.value) / 1e6, n * c.time.ms(), to_string(c.source));
                    j += same - 1;
                } else if (k.is_fused_attention()) {
                    const double eff = cost.flash_efficiency(k);
                    out << fmt::format(
                        "    {:<34} {:>14} {:>5}x{:>5}x{:>5}x{:<4} {:>9.3f} ms  {} eff {:.2f} ({:.0f} TF/s, "
                        "causal{})\n",
                        k.name, "flash-attention", k.gemm.m, k.gemm.n, k.gemm.k, k.gemm.batch, c.time.ms(),
                        to_string(c.source), eff, flash_attention_flops(k).value / c.time.seconds() / 1e12,
                        k.dropout ? ", dropout" : "");
                } else {
                    // A chunked GEMM (Transformer Engine's overlap): its whole shape, each chunk's efficiency.
                    const std::int64_t parts = k.gemm.chunk_parts();
                    const GemmShape chunk = k.gemm.largest_chunk();
                    const std::int64_t largest = k.gemm.chunk_columns ? chunk.n : chunk.m;
                    out << fmt::format(
                        "    {:<34} {:>14} {:>5}x{:>5}x{:>5}x{:<4} {:>9.3f} ms  {} eff {:.2f} ({:.0f} TF/s){}{}\n",
                        k.name, "gemm", k.gemm.m, k.gemm.n, k.gemm.k, k.gemm.batch, c.time.ms(), to_string(c.source),
                        cost.gemm_efficiency(chunk), k.gemm.flops().value / c.time.seconds() / 1e12,
                        parts > 1 ? fmt::format(", as {} chunks of {} {}", parts, largest,
                                                k.gemm.chunk_columns ? "columns" : "rows")
                                  : "",
                        k.gemm.sm_margin > 0
                            ? fmt::format(", on {} SMs (margin {})", cost.gemm_sms(k.gemm), k.gemm.sm_margin)
                            : "");
                }
            }
        }
    }
    // NCCL's collectives (the context-parallel ring's point-to-point kernels say their own SMs on their lines).
    const auto nccl_overlapped = [](const Step& s) {
        return s.overlapped && s.collective.engine == CommEngine::nccl && !s.collective.context_group;
    };
    const bool overlapped = std::any_of(plan.forward.begin(), plan.forward.end(), nccl_overlapped) ||
                            std::any_of(plan.backward.begin(), plan.backward.end(), nccl_overlapped);
    if (overlapped && dev.nccl_channels > 0)
        out << fmt::format(
            "  compute overlapped with an NCCL collective runs at {:.1f}% speed while it holds {} SMs ({}{}{})\n",
            100.0 * (1.0 - cost.comm_sm_fraction()), dev.nccl_channels,
            dev.measured_sms_held.empty() ? "the share of the SMs left" : "the profile's measured.sms_held",
            std::any_of(dev.measured_sms_held.begin(), dev.measured_sms_held.end(),
                        [](const MeasuredSmsHeld& h) { return h.per_wave > 0; })
                ? "; a GEMM at its waves' rate: each step's speed above"
                : "",
            dev.measured_attention_sms_held.empty() || e.attention != Attention::flash
                ? ""
                : ", cuDNN's fused attention at measured.attention_sms_held");
    if (dev.power.present())
        out << fmt::format(
            "  power limit {:.0f} W: at the boost clock this layer's kernels would draw {:.0f} W on average; "
            "{}SM clock about {:.0f} MHz{}: BF16 GEMMs and fused attention at {:.1f}% of the profile's rates"
            "{}, as timed above (power.*, measured.gemm_power)\n",
            dev.power.limit_w, clock.boost_w, clock.clock_mhz >= dev.power.boost_clock_mhz ? "under the limit: " : "",
            clock.clock_mhz, clock.extrapolated ? " (extrapolated below the measured curve)" : "", 100.0 * clock.speed,
            e.precision == Precision::fp8 ? fmt::format(", FP8 GEMMs at {:.1f}%", 100.0 * clock.speed_fp8) : "");
    if (clock.headroom_s > 0)  // simulated only: not in the passes above
        out << fmt::format(
            "  after rest (power.headroom_j, idle_w): {:.1f}% less time at the boost clock, a full rest saves up to "
            "{:.1f} ms; "
            "each ms idle between units gives back {:.2f} ms (in the simulation)\n",
            100.0 * clock.saving_fraction, 1e3 * clock.headroom_s, clock.headroom_accrual);
    if (e.host_gaps())
        out << fmt::format(
            "  before each unit (a model chunk's pass for one microbatch) the GPU idles {:.3f} ms (forward) / {:.3f} "
            "ms\n"
            "  (backward) while its host, synchronised with it, issues the unit (execution.host_gap_*_us; not in\n"
            "  the passes above)\n",
            e.host_gap_forward.ms(), e.host_gap_backward.ms());
    // (A context-parallel ring across nodes gets its NIC time on its lines.)
    const int per_node = sc.system.gpus_per_node;
    if (per_node > 0 && e.tensor > per_node)
        out << fmt::format(
            "  the tensor-parallel group (t = {}) spans {} nodes of {} GPUs: its collectives are costed here, and in "
            "the\n"
            "  table's fwd / bwd ms, at the intra-node figures; the simulation routes them over the fabric\n",
            e.tensor, (e.tensor + per_node - 1) / per_node, per_node);
}

}  // namespace strata
