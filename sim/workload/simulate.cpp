// simulate(): the fabric for the scenario's GPUs, the task graph, one engine run, the results.
#include "builder.hpp"

#include <chrono>

namespace strata {

IterationResult simulate(const Scenario& sc, const SimulationOptions& options, SimulationDetail* detail) {
    validate(sc);
    const auto t0 = std::chrono::steady_clock::now();
    engine::Simulator sim;
    const int per_node = sc.system.gpus_per_node;
    fabric::Fabric fab({(sc.execution.gpus() + per_node - 1) / per_node, per_node, sc.system.network}, sim);
    workload::Builder builder(sc, sim, fab, options, detail != nullptr);
    builder.build();
    sim.set_label_formatter([&builder](std::uint32_t l) { return builder.describe(l); });
    const engine::RunStats stats = sim.run(options.progress, 200000);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return builder.collect(detail, wall, stats);
}

}  // namespace strata
