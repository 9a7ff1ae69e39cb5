// Exposed communication by kind (strata/metrics.hpp ExposedComm): the three kinds add up to exposed_comm_s, each is
// zero where its parallelism is absent, and each equals what the iteration's trace shows, recomputed here from the
// spans independently of the workload's bookkeeping (pipeline: the union of the transfers each stage's calls wait
// for; data-parallel: stage 0's gap between its last backward and its optimizer step, plus the parameter all-gather
// after the step). The renderings carry the split.
#include "strata/report.hpp"
#include "strata/simulate.hpp"
#include "fixtures.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace strata;

namespace {

using strata::testing::small_22b;
using strata::testing::with_data;

struct Traced {
    IterationResult result;
    SimulationDetail detail;
};

Traced traced(const Scenario& sc) {
    Traced t;
    SimulationOptions opt;
    opt.keep_trace = true;
    t.result = simulate(sc, opt, &t.detail);
    return t;
}

std::string lane_name(const Trace& tr, std::uint32_t lane) {
    for (const TraceLane& l : tr.lanes)
        if (l.id == lane) return l.name;
    return "";
}

/// Pipeline exposure from the trace: for each stage's replica 0, the union of the p2p spans on its own send and
/// tensor-parallel lanes and on the send lanes of the stages that deliver to it; summed, per stage on average.
std::int64_t pipeline_from_trace(const Trace& tr, int p, int d) {
    std::int64_t total = 0;
    for (int s = 0; s < p; ++s) {
        std::vector<std::pair<std::int64_t, std::int64_t>> iv;
        for (const TraceSpan& span : tr.spans) {
            if (std::string(span.kind) != "p2p" || span.end == span.start) continue;
            if (span.process % static_cast<std::uint32_t>(d) != 0 || span.process >= static_cast<std::uint32_t>(p * d))
                continue;  // replica 0's groups only
            const int from = static_cast<int>(span.process) / d;
            const std::string lane = lane_name(tr, span.lane);
            const int to = lane == "send forward" ? (from + 1) % p : lane == "send backward" ? (from + p - 1) % p : -1;
            REQUIRE(lane != "compute");  // a call's post and wait take no time
            if (from == s || to == s) iv.emplace_back(span.start.ps(), span.end.ps());
        }
        std::sort(iv.begin(), iv.end());
        std::int64_t covered = 0, open_start = 0, open_end = -1;
        for (const auto& [a, b] : iv) {
            if (a > open_end) {
                covered += std::max<std::int64_t>(0, open_end - open_start);
                open_start = a;
                open_end = b;
            } else {
                open_end = std::max(open_end, b);
            }
        }
        covered += std::max<std::int64_t>(0, open_end - open_start);
        total += covered;
    }
    return (total + p / 2) / p;
}

/// Stage 0, replica 0: the end of its last backward (compute or tensor-parallel span, or the gradient-averaging
/// pass that follows it: compute, not communication) and its optimizer step.
struct StageZero {
    std::int64_t last_backward_end = 0, optimizer_start = -1, optimizer_end = -1;
};
StageZero stage_zero(const Trace& tr) {
    StageZero z;
    for (const TraceSpan& s : tr.spans)
        if (s.process == 0 && std::string(s.kind) == "optimizer") {
            z.optimizer_start = s.start.ps();
            z.optimizer_end = s.end.ps();
        }
    REQUIRE(z.optimizer_start >= 0);
    for (const TraceSpan& s : tr.spans)
        if (s.process == 0 && s.end.ps() <= z.optimizer_start &&
            (std::string(s.kind) == "backward" || std::string(s.kind) == "tp-collective" ||
             std::string(s.kind) == "gradient-average"))
            z.last_backward_end = std::max(z.last_backward_end, s.end.ps());
    return z;
}

/// Stage 0, replica 0, overlapped parameter all-gather: the time its compute lane waits for a bucket, i.e. the gaps
/// before compute spans that start the instant a gather span of stage 0 ends.
std::int64_t gather_waits(const Trace& tr) {
    std::vector<std::int64_t> gathered;
    std::vector<std::pair<std::int64_t, std::int64_t>> compute;
    for (const TraceSpan& s : tr.spans) {
        const std::string lane = lane_name(tr, s.lane);
        if (lane == "stage 0 parameter all-gather (overlapped)") gathered.push_back(s.end.ps());
        if (s.process == 0 && lane == "compute") compute.emplace_back(s.start.ps(), s.end.ps());
    }
    REQUIRE(!gathered.empty());
    std::sort(compute.begin(), compute.end());
    std::int64_t waits = 0, before = 0;
    for (const auto& [a, b] : compute) {
        if (a > before && std::find(gathered.begin(), gathered.end(), a) != gathered.end()) waits += a - before;
        before = std::max(before, b);
    }
    return waits;
}

void check_sum(const IterationResult& r) {
    CHECK(r.exposed_comm.tensor + r.exposed_comm.pipeline + r.exposed_comm.data_parallel == r.exposed_comm.total());
    CHECK(r.exposed_comm_s == r.exposed_comm.total().seconds());
    CHECK(r.exposed_comm.tensor >= Time::zero());
    CHECK(r.exposed_comm.pipeline >= Time::zero());
    CHECK(r.exposed_comm.data_parallel >= Time::zero());
}

}  // namespace

TEST_CASE("exposed communication: pipeline without data parallelism has no data-parallel part", "[exposed]") {
    for (const int m : {1, 2}) {
        Scenario sc = small_22b(4, m, 8, true, Recompute::selective);
        sc.model.tied_embeddings = false;  // no embedding sync between the first and the last stage
        INFO("interleave " << m);
        const Traced t = traced(sc);
        const IterationResult& r = t.result;
        check_sum(r);
        CHECK(r.exposed_comm.data_parallel == Time::zero());
        CHECK(r.exposed_comm.pipeline > Time::zero());
        CHECK(r.exposed_comm.tensor > Time::zero());  // SP's all-gathers and reduce-scatters block the kernels
        CHECK(r.exposed_comm.pipeline.ps() == pipeline_from_trace(t.detail.trace, 4, 1));
        // Exposed time is time the compute stream is not busy: it never eats into the bubble below zero.
        double busy = 0;
        for (double b : r.stage_busy_s) busy += b;
        busy /= 4;
        CHECK(busy + r.exposed_comm_s < r.iteration_time_s);
        CHECK(r.bubble_fraction == Approx(1.0 - (busy + r.exposed_comm_s) / r.iteration_time_s));
    }
}

TEST_CASE("exposed communication: the tied embedding's sync is the data-parallel part when d = 1", "[exposed]") {
    const Scenario sc = small_22b(4, 1, 8, true, Recompute::selective);
    REQUIRE(sc.model.tied_embeddings);
    const Traced t = traced(sc);
    check_sum(t.result);
    std::int64_t sync = -1;
    for (const TraceSpan& s : t.detail.trace.spans)
        if (std::string(s.kind) == "embedding-grad-sync") sync = (s.end - s.start).ps();
    REQUIRE(sync > 0);
    // The sync starts when stage 0's last backward ends and the optimizer step starts when it is done.
    CHECK(t.result.exposed_comm.data_parallel.ps() == sync);
    const StageZero z = stage_zero(t.detail.trace);
    CHECK(t.result.exposed_comm.data_parallel.ps() == z.optimizer_start - z.last_backward_end);
    CHECK(t.result.exposed_comm.pipeline.ps() == pipeline_from_trace(t.detail.trace, 4, 1));
}

TEST_CASE("exposed communication: data parallelism without a pipeline has no pipeline part", "[exposed]") {
    Scenario sc = with_data(small_22b(1, 1, 4, true, Recompute::selective), 2);
    const Traced t = traced(sc);
    const IterationResult& r = t.result;
    check_sum(r);
    CHECK(r.exposed_comm.pipeline == Time::zero());
    CHECK(r.exposed_comm.data_parallel > Time::zero());
    const StageZero z = stage_zero(t.detail.trace);
    CHECK(r.exposed_comm.data_parallel.ps() == z.optimizer_start - z.last_backward_end);
    // One stage: its compute stream is busy, blocked by a synchronous collective, or waiting for the reduction.
    REQUIRE(r.stage_busy_s.size() == 1);
    CHECK(r.stage_busy_s[0] + r.exposed_comm_s <= r.iteration_time_s * (1 + 1e-12));

    SECTION("overlapping the reduction with the backward hides part of it") {
        sc.execution.overlap_grad_reduce = true;
        const IterationResult o = simulate(sc);
        check_sum(o);
        CHECK(o.exposed_comm.data_parallel < r.exposed_comm.data_parallel);
        CHECK(o.exposed_comm.pipeline == Time::zero());
    }
    SECTION("the distributed optimizer's parameter all-gather after the step is exposed unless overlapped") {
        sc.execution.distributed_optimizer = true;
        const Traced g = traced(sc);
        check_sum(g.result);
        std::int64_t gather_end = -1;
        for (const TraceSpan& s : g.detail.trace.spans)
            if (std::string(s.kind) == "dp-reduce" && s.chunk == 1 && lane_name(g.detail.trace, s.lane) == "stage 0 gradient reduction")
                gather_end = std::max(gather_end, s.end.ps());
        REQUIRE(gather_end > 0);
        const StageZero zg = stage_zero(g.detail.trace);
        CHECK(g.result.exposed_comm.data_parallel.ps() ==
              (zg.optimizer_start - zg.last_backward_end) + (gather_end - zg.optimizer_end));
        // Overlapped, the gather runs under the first forward, whose layers wait for their parameters' buckets.
        sc.execution.overlap_param_gather = true;
        const Traced h = traced(sc);
        check_sum(h.result);
        const StageZero zh = stage_zero(h.detail.trace);
        const std::int64_t waits = gather_waits(h.detail.trace);
        CHECK(waits > 0);  // the first bucket at least: nothing can hide it
        CHECK(h.result.exposed_comm.data_parallel.ps() == zh.optimizer_start - zh.last_backward_end + waits);
        CHECK(h.result.exposed_comm.data_parallel < g.result.exposed_comm.data_parallel);
    }
}

TEST_CASE("exposed communication: without tensor parallelism there is no tensor-parallel part", "[exposed]") {
    Scenario sc = small_22b(2, 1, 4, false, Recompute::full);
    sc.execution.tensor = 1;
    validate(sc);
    const IterationResult r = simulate(sc);
    check_sum(r);
    CHECK(r.exposed_comm.tensor == Time::zero());
    CHECK(r.exposed_comm.pipeline > Time::zero());
    // The synchronous backward collectives of 2021's Megatron add tensor-parallel exposure only.
    Scenario t8 = small_22b(2, 1, 4, false, Recompute::none);
    Scenario sync = t8;
    sync.execution.async_tp_comm = false;
    const IterationResult a = simulate(t8), s = simulate(sync);
    CHECK(s.exposed_comm.tensor > a.exposed_comm.tensor);
    CHECK(s.exposed_comm.data_parallel == a.exposed_comm.data_parallel);
}

TEST_CASE("exposed communication: without SP the receiver's all-gather counts as pipeline", "[exposed]") {
    // Scatter/gather: the activation goes over the t rails in shards and is all-gathered on the receiver's
    // tensor-parallel stream before its call returns.
    const Scenario sc = small_22b(4, 2, 8, false, Recompute::full);
    const Traced t = traced(sc);
    check_sum(t.result);
    bool gather_on_tp = false;
    for (const TraceSpan& s : t.detail.trace.spans)
        gather_on_tp |= std::string(s.kind) == "p2p" && lane_name(t.detail.trace, s.lane) == "tensor-parallel comm";
    CHECK(gather_on_tp);
    CHECK(t.result.exposed_comm.pipeline.ps() == pipeline_from_trace(t.detail.trace, 4, 1));
}

TEST_CASE("exposed communication by kind is in the JSON, the CSV and the table", "[exposed][report]") {
    Scenario sc = with_data(small_22b(2, 1, 4, true, Recompute::selective), 2);
    CaseResult cr = analyze(sc);
    cr.iteration = simulate(sc);
    const IterationResult& it = *cr.iteration;
    REQUIRE(it.exposed_comm.tensor > Time::zero());
    REQUIRE(it.exposed_comm.pipeline > Time::zero());
    REQUIRE(it.exposed_comm.data_parallel > Time::zero());

    const nlohmann::json j = nlohmann::json::parse(to_json("x", {cr})).at("results").at(0);
    CHECK(j.at("exposed_comm_tensor_s").get<double>() == it.exposed_comm.tensor.seconds());
    CHECK(j.at("exposed_comm_pipeline_s").get<double>() == it.exposed_comm.pipeline.seconds());
    CHECK(j.at("exposed_comm_data_parallel_s").get<double>() == it.exposed_comm.data_parallel.seconds());
    const double sum = j["exposed_comm_tensor_s"].get<double>() + j["exposed_comm_pipeline_s"].get<double>() +
                       j["exposed_comm_data_parallel_s"].get<double>();
    CHECK(sum == Approx(j.at("exposed_comm_s").get<double>()).epsilon(1e-12));

    std::istringstream csv(to_csv({cr}));
    std::string header, row;
    std::getline(csv, header);
    std::getline(csv, row);
    CHECK_THAT(header, Catch::Contains("exposed_comm_s,exposed_comm_tensor_s,exposed_comm_pipeline_s,exposed_comm_data_parallel_s"));
    const std::string expected = fmt::format("{:.6f},{:.6f},{:.6f},{:.6f}", it.exposed_comm_s, it.exposed_comm.tensor.seconds(),
                                             it.exposed_comm.pipeline.seconds(), it.exposed_comm.data_parallel.seconds());
    CHECK_THAT(row, Catch::Contains(expected));

    std::ostringstream table;
    print_table(table, "t", {cr});
    const double pct = 100 / it.iteration_time_s;
    CHECK_THAT(table.str(), Catch::Contains("exposed% t/p/d"));
    CHECK_THAT(table.str(), Catch::Contains(fmt::format("{:.1f}/{:.1f}/{:.1f}", pct * it.exposed_comm.tensor.seconds(),
                                                        pct * it.exposed_comm.pipeline.seconds(),
                                                        pct * it.exposed_comm.data_parallel.seconds())));
}

TEST_CASE("overlapped parameter gather: the first forward's pieces wait for their buckets", "[exposed]") {
    // Two replicas on two nodes, the distributed optimizer's gather overlapped with the first forward.
    Scenario sc = with_data(small_22b(1, 1, 2, true, Recompute::selective), 2);
    sc.execution.distributed_optimizer = true;
    sc.execution.overlap_grad_reduce = true;
    sc.execution.overlap_param_gather = true;
    sc.system.variation.gpu_sigma = 0;
    auto first_forward = [](const Trace& tr) {
        // Stage 0 replica 0's first forward (microbatch 0) on its compute lane, and the stage's gather spans.
        struct Spans {
            std::int64_t forward_start = -1, forward_end = -1, last_piece_start = -1, gather_end = -1, gather_busy = 0;
        } s;
        for (const TraceSpan& span : tr.spans) {
            const std::string lane = lane_name(tr, span.lane);
            if (lane == "stage 0 parameter all-gather (overlapped)") {
                s.gather_end = std::max(s.gather_end, span.end.ps());
                s.gather_busy += (span.end - span.start).ps();
            }
            if (span.process == 0 && lane == "compute" && std::string(span.kind) == "forward" && span.microbatch == 0) {
                if (s.forward_start < 0) s.forward_start = span.start.ps();
                s.forward_end = std::max(s.forward_end, span.end.ps());
                s.last_piece_start = std::max(s.last_piece_start, span.start.ps());
            }
        }
        REQUIRE(s.gather_end > 0);
        REQUIRE(s.forward_end > 0);
        return s;
    };
    const auto fast = first_forward(traced(sc).detail.trace);
    // The output layer's piece (the last) waits for the last bucket.
    CHECK(fast.last_piece_start >= fast.gather_end);
    // On a network ten times slower the gather paces the first forward: it cannot end before every bucket arrived,
    // and the time it takes grows with the gather's.
    sc.system.network.nic_bandwidth = BytesPerSecond{sc.system.network.nic_bandwidth.value / 10};
    const Traced slow_run = traced(sc);
    const auto slow = first_forward(slow_run.detail.trace);
    CHECK(slow.forward_end >= slow.gather_end);
    CHECK(slow.forward_end - slow.forward_start > fast.forward_end - fast.forward_start);
    CHECK(slow.forward_end - slow.forward_start >= slow.gather_busy * 9 / 10);
    CHECK(slow_run.result.exposed_comm.data_parallel.ps() >= gather_waits(slow_run.detail.trace));
}

TEST_CASE("overlap_param_gather_with_optimizer_step: the first chunk's gather runs under the later chunks' step",
          "[exposed]") {
    // Two stages of two chunks, two replicas on two nodes, on a network ten times slower: the gather of the first
    // chunk's buckets is exposed at the start of the iteration.
    Scenario sc = with_data(small_22b(2, 2, 4, true, Recompute::selective), 2);
    sc.execution.distributed_optimizer = true;
    sc.execution.overlap_grad_reduce = true;
    sc.execution.overlap_param_gather = true;
    sc.system.variation.gpu_sigma = 0;
    sc.system.network.nic_bandwidth = BytesPerSecond{sc.system.network.nic_bandwidth.value / 10};
    validate(sc);
    // Stage 0 replica 0's optimizer spans: where they start and how long they run.
    auto steps = [](const Trace& tr) {
        std::vector<std::pair<std::int64_t, std::int64_t>> out;
        for (const TraceSpan& span : tr.spans)
            if (span.process == 0 && lane_name(tr, span.lane) == "compute" && std::string(span.kind) == "optimizer")
                out.emplace_back(span.start.ps(), (span.end - span.start).ps());
        std::sort(out.begin(), out.end());
        return out;
    };
    const Traced plain = traced(sc);
    sc.execution.overlap_param_gather_with_optimizer_step = true;
    validate(sc);
    const Traced cut = traced(sc);
    const auto before = steps(plain.detail.trace), after = steps(cut.detail.trace);
    REQUIRE(before.size() == 1);
    REQUIRE(after.size() == 2);
    // The iteration begins with the later chunks' part of the step and ends with the rest: the same step in all, the
    // first part slowed a little by the gather beside it (its NCCL channels hold SMs: 0.7% of the step here).
    CHECK(after[0].first == 0);
    CHECK(after[0].second > 0);
    const std::int64_t both = after[0].second + after[1].second;
    CHECK(both >= before[0].second);
    CHECK(both <= before[0].second + before[0].second / 50);
    // The first chunk's buckets are gathered meanwhile: the iteration is shorter, by no more than that part.
    CHECK(cut.result.iteration_time < plain.result.iteration_time);
    CHECK((plain.result.iteration_time - cut.result.iteration_time).ps() <= after[0].second);
    CHECK(cut.result.exposed_comm.data_parallel < plain.result.exposed_comm.data_parallel);
    CHECK(cut.result.peak_memory == plain.result.peak_memory);
    // Megatron-Core allows it with the overlapped gather and the interleaved schedule only.
    sc.execution.overlap_param_gather = false;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.overlap_param_gather_with_optimizer_step") &&
                                        Catch::Contains("needs overlap_param_gather: true and the interleaved"));
    Scenario plain_schedule = with_data(small_22b(2, 1, 4, true, Recompute::selective), 2);
    plain_schedule.execution.distributed_optimizer = true;
    plain_schedule.execution.overlap_param_gather = true;
    plain_schedule.execution.overlap_param_gather_with_optimizer_step = true;
    CHECK_THROWS_WITH(validate(plain_schedule), Catch::Contains("interleaved schedule"));
}

TEST_CASE("overlap_p2p_comm: asynchronous pipeline calls run every interleaved shape, never slower than blocking ones",
          "[exposed]") {
    bool faster = false;
    for (int p = 2; p <= 4; ++p)
        for (int m = 2; m <= 3; ++m)
            for (int k = 1; k <= 3; ++k) {
                Scenario base = strata::testing::table4_case(0);
                base.model.layers = 72;  // divisible by every p x m here
                base.model.seq_len = 1024;
                Scenario sc = strata::testing::with_pipeline(base, p, m, k * p, true, Recompute::selective);
                sc.system.variation.gpu_sigma = 0;
                validate(sc);
                const IterationResult blocking = simulate(sc);
                sc.execution.overlap_p2p_comm = true;
                validate(sc);
                const IterationResult overlapped = simulate(sc);
                INFO("p=" << p << " m=" << m << " n=" << k * p);
                CHECK(overlapped.iteration_time <= blocking.iteration_time);
                CHECK(overlapped.exposed_comm.pipeline == Time::zero());  // waits for transfers count as bubble
                CHECK(overlapped.peak_memory == blocking.peak_memory);    // the same units in the same order
                faster = faster || overlapped.iteration_time < blocking.iteration_time;
            }
    CHECK(faster);
    // One NCCL stream per pair of ranks (p2p_pair_order, the default): the pair's transfers run in the order both
    // ranks posted them (the simulation checks that the orders agree), never earlier than with a stream per direction;
    // in Megatron's schedule no later either: each rank posts the pair's next op one unit after the transfer before it.
    for (int p = 2; p <= 4; ++p)
        for (int m = 2; m <= 3; ++m) {
            Scenario base = strata::testing::table4_case(0);
            base.model.layers = 72;
            base.model.seq_len = 1024;
            Scenario sc = strata::testing::with_pipeline(base, p, m, 2 * p, true, Recompute::selective);
            sc.system.variation.gpu_sigma = 0;
            sc.execution.overlap_p2p_comm = true;
            const IterationResult pair = simulate(sc);
            sc.execution.p2p_pair_order = false;
            const IterationResult per_direction = simulate(sc);
            INFO("p=" << p << " m=" << m);
            CHECK(pair.iteration_time == per_direction.iteration_time);
        }
    // Megatron overlaps pipeline communication only in the interleaved schedule.
    Scenario plain = small_22b(2, 1, 4, true, Recompute::selective);
    plain.execution.overlap_p2p_comm = true;
    CHECK_THROWS_WITH(validate(plain), Catch::Contains("overlap_p2p_comm needs the interleaved schedule"));
}

TEST_CASE("host_gap_forward_us / _backward_us: the GPU idles before each unit while the host issues it", "[exposed]") {
    // One microbatch, no pipeline: the iteration grows by exactly one forward and one backward gap, and the GPU's busy
    // time does not (the gaps are idle time, counted as host_gap, not as bubble).
    Scenario one = strata::testing::table4_case(4);  // selective + sequence parallelism, 22B, one microbatch
    one.system.variation.gpu_sigma = 0;
    const IterationResult base = simulate(one);
    one.execution.host_gap_forward = Time::from_us(400);
    one.execution.host_gap_backward = Time::from_us(150);
    const IterationResult gapped = simulate(one);
    CHECK(gapped.iteration_time - base.iteration_time == Time::from_us(550));
    CHECK(gapped.stage_busy_s == base.stage_busy_s);
    CHECK(base.host_gap == Time::zero());
    CHECK(gapped.host_gap == Time::from_us(550));
    CHECK(gapped.exposed_comm.total() == base.exposed_comm.total());
    CHECK(std::abs(gapped.bubble_fraction * gapped.iteration_time_s - base.bubble_fraction * base.iteration_time_s) < 1e-9);
    // Pipelined with blocking calls (the 2022 software): each stage's units run one after another, every one after its
    // gap, so the iteration grows by at least one stage's gaps; with the interleaved schedule too.
    for (const int m : {1, 2}) {
        Scenario sc = small_22b(4, m, 8, true, Recompute::selective);
        sc.system.variation.gpu_sigma = 0;
        const IterationResult without = simulate(sc);
        sc.execution.host_gap_forward = Time::from_us(300);
        sc.execution.host_gap_backward = Time::from_us(100);
        const IterationResult with = simulate(sc);
        INFO("m=" << m);
        CHECK(with.iteration_time - without.iteration_time >= Time::from_us(400) * (8 * m));
        CHECK(with.peak_memory == without.peak_memory);
        // Per stage: one forward and one backward gap per microbatch and model chunk.
        CHECK(with.host_gap == Time::from_us(400) * (8 * m));
        CHECK(with.bubble_fraction < 1.0 - (with.host_gap.seconds() + with.exposed_comm_s) / with.iteration_time_s);
    }
    // The keys, and a negative gap refused at its file, line and key.
    const Experiment ok = strata::testing::load_small("host-gap.yaml", ", host_gap_forward_us: 250, host_gap_backward_us: 80.5");
    CHECK(ok.cases.at(0).execution.host_gap_forward == Time::from_us(250));
    CHECK(ok.cases.at(0).execution.host_gap_backward == Time::from_us(80.5));
    CHECK_THROWS_WITH(strata::testing::load_small("host-gap.yaml", ", host_gap_backward_us: -1"),
                      Catch::Contains("host-gap.yaml:3") && Catch::Contains("host_gap_backward_us"));
}

TEST_CASE("exposed communication: a tensor-parallel group across nodes waits for every phase, none of it bubble",
          "[exposed]") {
    // t = 16 on nodes of 8: each all-reduce is hierarchical (reduce-scatter in the node, all-reduce over the rails,
    // all-gather in the node) and the backward's overlapped ones outlast the kernels beside them. With one stage and
    // one replica there is no bubble: the compute stream's idle time is all tensor-parallel communication.
    for (const bool sp : {false, true}) {
        Scenario sc = small_22b(1, 1, 2, sp, Recompute::selective);
        sc.execution.tensor = 16;
        validate(sc);
        const IterationResult r = simulate(sc);
        check_sum(r);
        INFO("sequence_parallel " << sp << ": bubble " << r.bubble_fraction);
        CHECK(r.bubble_fraction < 0.002);
        CHECK(r.exposed_comm.pipeline == Time::zero());
        CHECK(r.exposed_comm.tensor.seconds() > 0.1 * r.iteration_time.seconds());
    }
}

TEST_CASE("exposed communication: overlapped TP collectives with asynchronous pipeline calls count only what the "
          "compute stream waits for", "[exposed]") {
    // A bias-free layer's backward opens with the gradient's all-gather (SP): with overlap_p2p_comm the wait for the
    // unit's input must hold back the kernels beside that all-gather too, or they run before the input arrives and the
    // collective, waiting for it, looks exposed. Exposed TP time is at most the time replica 0's tensor-parallel lane
    // is busy while its compute lane is idle, per stage on average.
    Scenario sc = small_22b(2, 2, 8, true, Recompute::none);
    sc.model.linear_bias = false;
    sc.model.dropout = 0;  // no dropout-add backward before the all-gather: as Llama and Nemotron run
    sc.execution.tp_comm_overlap = true;
    sc.execution.overlap_p2p_comm = true;
    validate(sc);
    const Traced t = traced(sc);
    check_sum(t.result);
    std::int64_t tp_only = 0;
    for (std::uint32_t process = 0; process < 2; ++process) {  // replica 0 of each stage (d = 1)
        std::vector<std::pair<std::int64_t, std::int64_t>> tp, compute;
        for (const TraceSpan& s : t.detail.trace.spans) {
            if (s.process != process || s.end == s.start) continue;
            const std::string lane = lane_name(t.detail.trace, s.lane);
            if (lane == "tensor-parallel comm") tp.emplace_back(s.start.ps(), s.end.ps());
            if (lane == "compute") compute.emplace_back(s.start.ps(), s.end.ps());
        }
        std::sort(compute.begin(), compute.end());
        for (auto [a, b] : tp) {  // each tp span less the compute spans over it (compute spans do not overlap)
            std::int64_t busy = 0;
            for (auto [c, d] : compute) busy += std::max<std::int64_t>(0, std::min(b, d) - std::max(a, c));
            tp_only += (b - a) - busy;
        }
    }
    INFO("exposed tp " << t.result.exposed_comm.tensor.ps() << " ps, tp lane alone " << tp_only / 2 << " ps");
    CHECK(t.result.exposed_comm.tensor.ps() <= tp_only / 2 + 1000);
}
