// simulate(): the fabric for the scenario's GPUs, the task graph, one engine run, the results.
#include "builder.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

namespace strata {

int representative_replicas(const Scenario& sc) {
    // The replicas that share replica 0's first node (with several groups per node their tensor-parallel and
    // reduction flows meet on its NVLink links): all d when a stage fits on one node, gpus_per_node / (t x c)
    // when that divides evenly and every stage starts on a node boundary, else one.
    const ExecutionSpec& e = sc.execution;
    const int group = e.tensor * e.context, per_node = sc.system.gpus_per_node;
    if (group >= per_node || per_node % group != 0) return 1;
    if (static_cast<std::int64_t>(e.data) * group <= per_node) return e.data;
    if ((static_cast<std::int64_t>(e.data) * group) % per_node != 0) return 1;
    return per_node / group;
}

IterationResult simulate(const Scenario& sc, const SimulationOptions& options, SimulationDetail* detail) {
    validate(sc);
    const auto t0 = std::chrono::steady_clock::now();
    // The fewest tasks the run can have (every group runs a forward and a backward unit of each chunk for every
    // microbatch, each at least one task), against the limit before the fabric, which grows with the GPUs, is built;
    // Builder::check_task_limit then counts them from the programs.
    const ExecutionSpec& e = sc.execution;
    const double fewest = 2.0 * e.pipeline * e.interleave * double(e.global_batch / (std::int64_t{e.microbatch} * e.data)) *
                          (options.representative_replicas ? representative_replicas(sc) : e.data);
    workload::check_task_limit(sc, options, fewest, "at least");
    engine::Simulator sim;
    const int per_node = sc.system.gpus_per_node;
    // The fabric checks the sizes that need the GPU count too (links of the whole fat tree): its errors name the
    // case, whose system and execution together are too large.
    std::optional<fabric::Fabric> built;
    try {
        // With activation offloading each GPU's PCIe link is one of the fabric's, shared by its copies and its NIC.
        const bool pcie = sc.execution.offload_modules.any() && sc.system.network.pcie_bandwidth.value > 0;
        built.emplace(
            fabric::FabricSpec{(sc.execution.gpus() + per_node - 1) / per_node, per_node, sc.system.network, pcie}, sim);
    } catch (const InputError& error) {
        throw InputError(sc.source + ": case '" + sc.name + "' (system " + sc.system.name + "): " + error.what());
    }
    fabric::Fabric& fab = *built;
    workload::Builder builder(sc, sim, fab, options, detail != nullptr);
    builder.build();
    sim.set_label_formatter([&builder](std::uint32_t l) { return builder.describe(l); });
    const engine::RunStats stats = sim.run(options.progress, options.progress_every);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return builder.collect(detail, wall, stats);
}

}  // namespace strata
