// The discrete-event workload end to end on small models: memory through the schedule (eq. 5),
// schedules, determinism, out-of-memory reporting, trace output.
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/search.hpp"
#include "strata/report.hpp"
#include "strata/simulate.hpp"
#include "fixtures.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <set>

using namespace strata;

using strata::testing::small_22b;
using strata::testing::with_data;

TEST_CASE("simulated first-stage activation peak equals eq. 5 under 1F1B") {
    const Scenario sc = small_22b(4, 1, 8, true, Recompute::selective);
    const IterationResult r = simulate(sc);
    const Bytes per_layer = activation_bytes_per_layer(sc.model, 8, true, Recompute::selective, 1);
    CHECK(r.first_stage_activation_peak.value == per_layer.value * sc.model.layers);
    // eq. 6: 34 s b h L / t with SP + selective
    CHECK(r.first_stage_activation_peak.value == 34LL * 1024 * 6144 * 24 / 8);
}

TEST_CASE("simulated first-stage peak under the interleaved schedule is eq. 5 x (1 + (p-1)/(p m))") {
    const int p = 4, m = 2;
    const Scenario sc = small_22b(p, m, 8, false, Recompute::none);
    const IterationResult r = simulate(sc);
    const Bytes per_layer = activation_bytes_per_layer(sc.model, 8, false, Recompute::none, 1);
    // L (1 + (p-1)/(p m)) = L (p m + p - 1) / (p m) layers
    CHECK(r.first_stage_activation_peak.value * (p * m) == per_layer.value * sc.model.layers * (p * m + p - 1));
}

TEST_CASE("GPipe keeps every microbatch's activations until the backward passes") {
    Scenario sc = small_22b(4, 1, 8, true, Recompute::selective);
    sc.execution.schedule = Schedule::gpipe;
    const IterationResult r = simulate(sc);
    const Bytes per_layer = activation_bytes_per_layer(sc.model, 8, true, Recompute::selective, 1);
    CHECK(r.first_stage_activation_peak.value == per_layer.value * (sc.model.layers / 4) * 8);
}

TEST_CASE("the same scenario simulates to identical results") {
    const Scenario sc = small_22b(4, 2, 8, true, Recompute::selective);
    const IterationResult a = simulate(sc), b = simulate(sc);
    CHECK(a.iteration_time_s == b.iteration_time_s);
    CHECK(a.events == b.events);
    CHECK(a.peak_memory == b.peak_memory);
    CHECK(a.bubble_fraction == b.bubble_fraction);
}

TEST_CASE("pipeline bubble: more microbatches and interleaving shrink it") {
    const IterationResult few = simulate(small_22b(4, 1, 4, true, Recompute::selective));
    const IterationResult many = simulate(small_22b(4, 1, 16, true, Recompute::selective));
    const IterationResult inter = simulate(small_22b(4, 2, 16, true, Recompute::selective));
    CHECK(few.bubble_fraction > many.bubble_fraction);
    CHECK(many.bubble_fraction > inter.bubble_fraction);
    // 1F1B bubble is about (p-1)/(N+p-1) of the iteration: 3/7 for N = 4, 3/19 for N = 16.
    CHECK(few.bubble_fraction == Approx(3.0 / 7.0).margin(0.08));
    CHECK(many.bubble_fraction == Approx(3.0 / 19.0).margin(0.05));
}

TEST_CASE("full recompute is slower than selective, which is slower than none, per microbatch") {
    const IterationResult none = simulate(small_22b(2, 1, 4, true, Recompute::none));
    const IterationResult sel = simulate(small_22b(2, 1, 4, true, Recompute::selective));
    const IterationResult full = simulate(small_22b(2, 1, 4, true, Recompute::full));
    CHECK(none.iteration_time_s < sel.iteration_time_s);
    CHECK(sel.iteration_time_s < full.iteration_time_s);
    CHECK(full.hfu > full.mfu);
    CHECK(none.hfu == Approx(none.mfu));
}

TEST_CASE("data parallelism adds the gradient reduction but keeps per-replica work") {
    Scenario one = small_22b(2, 1, 4, true, Recompute::selective);
    Scenario two = with_data(one, 2);
    const IterationResult a = simulate(one), b = simulate(two);
    CHECK(b.iteration_time_s > a.iteration_time_s);
    CHECK(b.exposed_comm_s > a.exposed_comm_s);
    CHECK(b.first_stage_activation_peak == a.first_stage_activation_peak);
    two.execution.distributed_optimizer = true;
    const IterationResult c = simulate(two);
    CHECK(c.peak_memory < b.peak_memory);
    // Overlapping the gradient reduction with the last microbatch's backward hides part of it.
    two.execution.distributed_optimizer = false;
    two.execution.overlap_grad_reduce = true;
    const IterationResult o = simulate(two);
    CHECK(o.iteration_time_s < b.iteration_time_s);
    CHECK(o.iteration_time_s > a.iteration_time_s);
}

TEST_CASE("2021 Megatron switches cost time: exposed backward collectives, separate main-gradient adds") {
    const Scenario modern = small_22b(2, 1, 4, false, Recompute::none);
    Scenario sync = modern;
    sync.execution.async_tp_comm = false;
    Scenario unfused = modern;
    unfused.execution.gradient_accumulation_fusion = false;
    const IterationResult m = simulate(modern), s = simulate(sync), u = simulate(unfused);
    CHECK(s.iteration_time_s > m.iteration_time_s);
    CHECK(s.exposed_comm_s > m.exposed_comm_s);
    CHECK(u.iteration_time_s > m.iteration_time_s);
    CHECK(u.exposed_comm_s == Approx(m.exposed_comm_s));
}

TEST_CASE("a case over the memory capacity is flagged with the GPU, the time and the breakdown") {
    Scenario sc = small_22b(2, 1, 4, false, Recompute::none);
    sc.system.memory_capacity = Bytes(8LL << 30);
    const IterationResult r = simulate(sc);
    CHECK(r.oom);
    CHECK_THAT(r.oom_detail, Catch::Contains("GPUs 0-7 (stage 0, replica 0)"));
    CHECK_THAT(r.oom_detail, Catch::Contains("activations"));
    CHECK_THAT(r.oom_detail, Catch::Contains("weights"));
}

TEST_CASE("the simulated peak holds the runtime reserve from the start") {
    Scenario sc = small_22b(2, 1, 4, false, Recompute::none);
    sc.system.memory_reserved = Bytes(0);
    const IterationResult a = simulate(sc);
    sc.system.memory_reserved = Bytes(1LL << 30);
    const IterationResult b = simulate(sc);
    CHECK(b.peak_memory.value - a.peak_memory.value == (1LL << 30));
    CHECK(b.first_stage_activation_peak == a.first_stage_activation_peak);
    CHECK(b.iteration_time_s == a.iteration_time_s);
}

TEST_CASE("the Chrome trace has a process per GPU group and complete events") {
    const std::string path = "strata_test_trace.json";
    SimulationOptions opt;
    opt.keep_trace = true;
    const Scenario sc = small_22b(2, 1, 2, true, Recompute::selective);
    SimulationDetail detail;
    const IterationResult r = simulate(sc, opt, &detail);
    write_chrome_trace(path, detail.trace);
    std::ifstream in(path);
    REQUIRE(in);
    const nlohmann::json j = nlohmann::json::parse(in);
    int processes = 0, complete = 0;
    double last_end_us = 0;
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "process_name") ++processes;
        if (e["ph"] == "X") {
            ++complete;
            last_end_us = std::max(last_end_us, e["ts"].get<double>() + e["dur"].get<double>());
        }
    }
    CHECK(processes == 3);  // two stage groups + data-parallel
    CHECK(complete > 10);
    CHECK(last_end_us == Approx(r.iteration_time_s * 1e6).epsilon(1e-6));
    std::remove(path.c_str());
}

TEST_CASE("a streamed trace: every lane named, args and bytes, send-to-receive arrows, memory counters, chosen groups") {
    // Two stages x two replicas (t = 8: each group one node), streamed span by span as the simulation runs.
    const Scenario sc = with_data(small_22b(2, 1, 4, true, Recompute::selective), 2);
    SimulationOptions opt;
    opt.keep_trace = true;
    std::vector<TraceSpan> spans;
    opt.trace_spans = [&](const TraceSpan& s) { spans.push_back(s); };
    SimulationDetail d;
    simulate(sc, opt, &d);
    CHECK(d.trace.spans.empty());  // streamed, not kept
    REQUIRE(d.trace.processes.size() == 5);  // four groups + data-parallel
    // Every stream that ran a span has a named lane.
    std::set<std::uint32_t> named;
    for (const TraceLane& l : d.trace.lanes) {
        CHECK_FALSE(l.name.empty());
        named.insert(l.id);
    }
    int sends = 0, dp = 0;
    for (const TraceSpan& s : spans) {
        CHECK(named.count(s.lane) == 1);
        if (std::string(s.kind) == "dp-reduce") {
            ++dp;
            CHECK(s.process == 4);
            CHECK(s.bytes.value > 0);
        }
        if (s.has_receiver) {
            ++sends;
            CHECK(std::string(s.kind) == "p2p");
            CHECK(s.bytes.value > 0);
            CHECK(s.receiver_process != s.process);  // the other stage's group
        }
    }
    CHECK(dp > 0);
    CHECK(sends == 2 * 2 * 4);  // 2 replicas x (forward + backward) x 4 microbatches
    REQUIRE(d.trace.memory.size() == 2);  // a counter per stage (replica 0)
    CHECK(d.trace.memory[0].samples.size() > 8);

    // Only stage 1 of replica 0: its spans, no arrows (the partner stage is not traced), one counter.
    opt.trace_first_stage = opt.trace_last_stage = 1;
    opt.trace_first_replica = opt.trace_last_replica = 0;
    std::vector<TraceSpan> some;
    opt.trace_spans = [&](const TraceSpan& s) { some.push_back(s); };
    SimulationDetail d2;
    simulate(sc, opt, &d2);
    CHECK_FALSE(some.empty());
    CHECK(some.size() < spans.size() / 3);
    for (const TraceSpan& s : some) {
        CHECK((s.process == 2 || s.process == 4));  // group (stage 1, replica 0) or data-parallel
        CHECK_FALSE(s.has_receiver);
    }
    CHECK(d2.trace.memory.size() == 1);
    CHECK(d2.trace.processes[0].empty());  // untraced groups have no name
}

TEST_CASE("detail: stage timeline and memory samples for plots") {
    SimulationDetail d;
    const Scenario sc = small_22b(2, 1, 4, true, Recompute::selective);
    const IterationResult r = simulate(sc, {}, &d);
    CHECK(d.stage_peaks.size() == 2);
    CHECK_FALSE(d.stage0_memory.empty());
    int forwards = 0;
    for (const auto& iv : d.intervals) {
        CHECK(iv.end_s <= r.iteration_time_s + 1e-12);
        if (iv.kind == 'F' && iv.stage == 0) ++forwards;
    }
    CHECK(forwards >= 4);
}

TEST_CASE("search: candidates that fit, ranked by simulated time, rejections counted by reason") {
    SearchRequest req;
    req.model = load_model(std::string(STRATA_SOURCE_DIR) + "/scenarios/models/gpt-22b.yaml");
    req.system = load_system(std::string(STRATA_SOURCE_DIR) + "/scenarios/systems/selene-a100.yaml");
    req.gpus = 8;
    req.global_batch = 8;
    req.simulate_top = 4;
    req.margin = 0;   // the 4 best estimates only
    req.jobs = 2;
    const SearchResult r = search(req);
    REQUIRE(r.simulated.size() == 4);
    CHECK(r.enumerated > r.screened);
    CHECK(r.rejected.at("out of memory (analytical)") > 0);
    for (std::size_t i = 0; i < r.simulated.size(); ++i) {
        const auto& c = r.simulated[i];
        CHECK(c.execution.gpus() == 8);
        CHECK(c.result.memory.fits());
        CHECK_FALSE(c.result.iteration->oom);
        if (i > 0) CHECK(r.simulated[i - 1].result.iteration->iteration_time_s <= c.result.iteration->iteration_time_s);
    }
}

TEST_CASE("pipeline sends block like Megatron's p2p calls: the sender waits for the transfer") {
    Scenario sc = small_22b(2, 1, 4, true, Recompute::selective);
    sc.system.network.p2p_latency = Time::from_ms(5);  // make the transfer obvious
    SimulationDetail d;
    simulate(sc, {}, &d);
    double f0_end = 0, f1_start = 1e9;
    for (const auto& iv : d.intervals) {
        if (iv.stage != 0 || iv.kind != 'F') continue;
        if (iv.microbatch == 0) f0_end = std::max(f0_end, iv.end_s);
        if (iv.microbatch == 1) f1_start = std::min(f1_start, iv.start_s);
    }
    // Stage 0 needs no input for microbatch 1, but its send of microbatch 0 holds it for >= 5 ms.
    CHECK(f1_start - f0_end >= 5e-3);
    CHECK(f1_start - f0_end < 6e-3);
}

TEST_CASE("a case too large for memory is refused before it is built, with the estimate") {
    SimulationOptions o;
    o.max_tasks = 100;
    CHECK_THROWS_WITH(simulate(small_22b(2, 1, 4, true, Recompute::selective), o),
                      Catch::Contains("million tasks") && Catch::Contains("--max-tasks"));
}
