// Golden scenarios: tests/golden/cases.yaml simulated, each case's exact iteration time (picoseconds), simulated
// peak memory, peak stage, events, tasks and exposed communication by kind (picoseconds) compared with
// tests/golden/expected.json. Any change of behaviour fails here and must be explained in its commit;
// STRATA_UPDATE_GOLDEN=1 rewrites expected.json instead.
#include "strata/report.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>

using namespace strata;

namespace {

const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/tests/golden/";

nlohmann::ordered_json pin(const IterationResult& r) {
    nlohmann::ordered_json j;
    j["iteration_time_ps"] = r.iteration_time.ps();
    j["peak_memory_bytes"] = r.peak_memory.value;
    j["peak_memory_stage"] = r.peak_memory_stage;
    j["first_stage_activation_peak_bytes"] = r.first_stage_activation_peak.value;
    j["events"] = r.events;
    j["tasks"] = r.tasks;
    j["exposed_comm_tensor_ps"] = r.exposed_comm.tensor.ps();
    j["exposed_comm_pipeline_ps"] = r.exposed_comm.pipeline.ps();
    j["exposed_comm_data_parallel_ps"] = r.exposed_comm.data_parallel.ps();
    return j;
}

}  // namespace

TEST_CASE("golden scenarios: iteration time, peak memory and event counts are pinned exactly") {
    const Experiment ex = load_experiment(kDir + "cases.yaml");
    REQUIRE(ex.cases.size() >= 5);
    nlohmann::ordered_json got;
    for (const Scenario& sc : ex.cases) {
        SimulationOptions opt;
        opt.keep_timeline = false;
        got[sc.name] = pin(simulate(sc, opt));
    }
    const char* update = std::getenv("STRATA_UPDATE_GOLDEN");
    if (update && std::string(update) == "1") {
        std::ofstream(kDir + "expected.json") << got.dump(2) << "\n";
        WARN("rewrote tests/golden/expected.json");
        return;
    }
    std::ifstream in(kDir + "expected.json");
    REQUIRE(in);
    const nlohmann::ordered_json want = nlohmann::ordered_json::parse(in);
    CHECK(want.size() == got.size());
    for (const auto& [name, values] : got.items()) {
        INFO("case '" << name << "'");
        REQUIRE(want.contains(name));
        for (const auto& [key, value] : values.items()) {
            INFO(key);
            CHECK(want[name][key] == value);
        }
    }
}

TEST_CASE("golden scenarios: the pinned cases cover the schedules' edge cases and every switch") {
    const Experiment ex = load_experiment(kDir + "cases.yaml");
    bool gpipe = false, all_warmup = false, few = false, dist_opt = false, nodes = false, switches = false;
    bool overlap_p2p = false, overlap_all_warmup = false, host_gaps = false, embedding_all_reduce = false;
    for (const Scenario& sc : ex.cases) {
        const ExecutionSpec& e = sc.execution;
        gpipe |= e.schedule == Schedule::gpipe;
        all_warmup |= e.schedule == Schedule::interleaved && e.microbatches() == e.pipeline;
        few |= e.schedule == Schedule::one_f_one_b && e.microbatches() < e.pipeline;
        dist_opt |= e.distributed_optimizer && e.overlap_grad_reduce && e.data > 1;
        nodes |= e.gpus() > sc.system.gpus_per_node && e.data > 1;
        switches |= !e.async_tp_comm && !e.gradient_accumulation_fusion;
        overlap_p2p |= e.overlap_p2p_comm && e.microbatches() > e.pipeline;
        overlap_all_warmup |= e.overlap_p2p_comm && e.microbatches() == e.pipeline;
        host_gaps |= e.host_gaps();
        embedding_all_reduce |= e.sequence_parallel && e.tensor > 1 && !e.embedding_reduce_scatter;
    }
    CHECK(gpipe);
    CHECK(all_warmup);
    CHECK(few);
    CHECK(dist_opt);
    CHECK(nodes);
    CHECK(switches);
    CHECK(overlap_p2p);
    CHECK(overlap_all_warmup);
    CHECK(host_gaps);
    CHECK(embedding_all_reduce);
}
