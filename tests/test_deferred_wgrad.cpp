// Megatron-Core's defer_embedding_wgrad_compute: the last stage's output-layer weight gradients deferred to a drain
// after its last backward (docs/execution.md).
#include "fixtures.hpp"
#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace strata;
using Catch::Contains;

namespace {

/// The steps' kernel and collective names, in order (a collective prefixed "C:", overlapped ones "C~:").
std::vector<std::string> names(const std::vector<Step>& steps) {
    std::vector<std::string> out;
    for (const Step& s : steps) {
        if (s.kind == Step::Kind::collective) {
            out.push_back((s.overlapped ? "C~:" : "C:") + s.collective.name);
            continue;
        }
        for (const Kernel& k : s.kernels) out.push_back(k.name);
    }
    return out;
}

bool has(const std::vector<std::string>& v, const std::string& name) {
    for (const std::string& x : v)
        if (x == name) return true;
    return false;
}

/// The trace process of replica 0 of `stage`.
std::uint32_t process_of(const Trace& trace, int stage) {
    const std::string name = "stage " + std::to_string(stage) + " replica 0";
    for (std::size_t i = 0; i < trace.processes.size(); ++i)
        if (trace.processes[i].ends_with(name)) return static_cast<std::uint32_t>(i);
    FAIL("no trace process for " << name);
    return ~0u;
}

/// A traced run of a two-stage scenario: the last stage's gradient-reduction lane and its replica 0's process.
struct LastStageTrace {
    SimulationDetail detail;
    std::uint32_t reduction_lane = ~0u, process = ~0u;
};

LastStageTrace last_stage_trace(const Scenario& sc) {
    SimulationOptions opt;
    opt.keep_trace = true;
    LastStageTrace t;
    simulate(sc, opt, &t.detail);
    for (const TraceLane& l : t.detail.trace.lanes)
        if (l.name == "stage 1 gradient reduction") t.reduction_lane = l.id;
    REQUIRE(t.reduction_lane != ~0u);
    t.process = process_of(t.detail.trace, 1);
    return t;
}

/// The small 22B (t = 8, SP), two stages of 1F1B (or `chunks` per stage interleaved), eight microbatches, the
/// deferral's limit `limit` (-1: off).
Scenario deferring(int limit, bool sp = true, int chunks = 1) {
    Scenario sc = strata::testing::small_22b(2, chunks, 8, sp, Recompute::selective);
    if (limit >= 0) {
        sc.execution.defer_embedding_wgrad_compute = true;
        sc.execution.wgrad_deferral_limit = limit;
    }
    validate(sc);
    return sc;
}

}  // namespace

TEST_CASE("deferred embedding wgrad: refused without a pipeline or gradient-accumulation fusion, a limit alone refused") {
    Scenario sc = deferring(-1);
    sc.execution.defer_embedding_wgrad_compute = true;
    validate(sc);
    sc.execution.gradient_accumulation_fusion = false;
    CHECK_THROWS_WITH(validate(sc), Contains("execution.defer_embedding_wgrad_compute") && Contains("gradient_accumulation_fusion"));
    Scenario one = strata::testing::small_22b(1, 1, 8, true, Recompute::selective);
    one.execution.defer_embedding_wgrad_compute = true;
    CHECK_THROWS_WITH(validate(one), Contains("execution.defer_embedding_wgrad_compute") && Contains("pipeline > 1"));
    Scenario alone = deferring(-1);
    alone.execution.wgrad_deferral_limit = 4;
    CHECK_THROWS_WITH(validate(alone), Contains("execution.wgrad_deferral_limit") && Contains("defer_embedding_wgrad_compute"));
    // From a file: the keys load, and a negative limit names the key.
    const auto load = [](const std::string& extra) {
        return strata::testing::load_small("defer.yaml", extra);
    };
    CHECK_THROWS_WITH(load(", defer_embedding_wgrad_compute: true"), Contains("defer.yaml") && Contains("pipeline > 1"));
    CHECK_THROWS_WITH(load(", wgrad_deferral_limit: -1"), Contains("defer.yaml:3:") && Contains("execution.wgrad_deferral_limit"));
    // One deferred microbatch crashes Megatron-Core's drain: refused.
    Scenario single = deferring(-1);
    single.execution.defer_embedding_wgrad_compute = true;
    single.execution.wgrad_deferral_limit = 1;
    CHECK_THROWS_WITH(validate(single), Contains("execution.wgrad_deferral_limit") && Contains("drain_idx"));
    // How many microbatches defer: the limit, all of them with 0, never more than there are.
    CHECK(deferring(3).execution.deferred_wgrad_microbatches() == 3);
    CHECK(deferring(0).execution.deferred_wgrad_microbatches() == 8);
    CHECK(deferring(50).execution.deferred_wgrad_microbatches() == 8);
    CHECK(deferring(-1).execution.deferred_wgrad_microbatches() == 0);
}

TEST_CASE("deferred embedding wgrad: the output layer's backward without its weight gradient, the drain's gathers beside its GEMMs") {
    for (const bool sp : {true, false}) {
        INFO("sequence parallel " << sp);
        const Scenario sc = deferring(3, sp);
        const LayerConfig lc = layer_config(sc.model, sc.execution);
        const OutputPlan o = build_output(lc);
        const auto plain = names(o.backward), deferred = names(o.backward_deferred);
        CHECK(has(plain, "logits.wgrad"));
        CHECK_FALSE(has(deferred, "logits.wgrad"));
        CHECK(has(deferred, "logits.dgrad"));
        CHECK(has(deferred, "final-ln.bwd"));
        CHECK(has(plain, "C~:logits.input-all-gather") == sp);
        CHECK_FALSE(has(deferred, "C~:logits.input-all-gather"));
        // The data gradient's reduction: beside the weight gradient, or alone when that is deferred.
        const std::string reduce = sp ? "logits.grad-reduce-scatter" : "logits.grad-all-reduce";
        CHECK(has(plain, "C~:" + reduce));
        CHECK(has(deferred, "C:" + reduce));
        // The drain: under SP the first gather alone, then each GEMM with the next input's gather beside it.
        const auto drain = names(build_deferred_wgrad(lc, 3));
        const std::vector<std::string> expected =
            sp ? std::vector<std::string>{"C:logits.deferred-input-all-gather", "C~:logits.deferred-input-all-gather", "logits.wgrad",
                                          "C~:logits.deferred-input-all-gather", "logits.wgrad", "logits.wgrad"}
               : std::vector<std::string>{"logits.wgrad", "logits.wgrad", "logits.wgrad"};
        CHECK(drain == expected);
        CHECK(build_deferred_wgrad(lc, 0).empty());
        // What a deferred microbatch keeps: its input as saved (s b h / t under SP, else s b h) and its logits'
        // 16-bit gradient (s b v / t), 2 bytes each; the drain's two gather buffers (2 x s b h x 2) under SP.
        const std::int64_t tokens = std::int64_t(sc.model.seq_len) * sc.execution.microbatch;
        const std::int64_t input = sp ? tokens * sc.model.hidden / sc.execution.tensor : tokens * sc.model.hidden;
        CHECK(o.deferred_per_microbatch == Bytes(2 * input + 2 * tokens * sc.model.vocab / sc.execution.tensor));
        CHECK(o.deferral_buffers == Bytes(sp ? 2 * 2 * tokens * sc.model.hidden : 0));
    }
}

TEST_CASE("deferred embedding wgrad: the last stage keeps each deferred microbatch's operands until the drain") {
    const Scenario off = deferring(-1);
    const DeviceMemory dev = off.system.device_memory();
    const LayerConfig lc = layer_config(off.model, off.execution);
    const OutputPlan o = build_output(lc);
    const Bytes base = stage_memory(off.model, off.execution, dev, 1).total();
    for (const int limit : {0, 3}) {
        INFO("limit " << limit);
        const Scenario sc = deferring(limit);
        // Under 1F1B the last stage holds one microbatch whole at a time; its peak is at a backward's start with the
        // most deferred operands kept beside it: all eight deferred (0), the last one's start with seven; three, any
        // backward after them with three. And the gather buffers throughout.
        const int kept = limit == 0 ? 7 : 3;
        CHECK(stage_memory(sc.model, sc.execution, dev, 1).total() ==
              base + o.deferred_per_microbatch * kept + o.deferral_buffers);
        // The first stage holds no output layer: unchanged.
        CHECK(stage_memory(sc.model, sc.execution, dev, 0).total() == stage_memory(off.model, off.execution, dev, 0).total());
    }
    // The simulation holds the same as the analytical walk, stage by stage, 1F1B and interleaved, one replica or two.
    for (const int chunks : {1, 2})
        for (const int d : {1, 2})
            for (const int limit : {0, 3}) {
                INFO("chunks " << chunks << ", d " << d << ", limit " << limit);
                const Scenario sc = strata::testing::with_data(deferring(limit, true, chunks), d);
                SimulationOptions opt;
                SimulationDetail detail;
                simulate(sc, opt, &detail);
                for (int st = 0; st < 2; ++st)
                    CHECK(stage_memory(sc.model, sc.execution, dev, st).total() == detail.stage_peaks[std::size_t(st)].total);
                // Over half of the deferred microbatches' operands are held at the last stage's peak.
                const Scenario plain = strata::testing::with_data(deferring(-1, true, chunks), d);
                const Bytes half(o.deferred_per_microbatch.value * (limit == 0 ? 8 : 3) / 2);
                CHECK(stage_memory(sc.model, sc.execution, dev, 1).total() >
                      stage_memory(plain.model, plain.execution, dev, 1).total() + half);
            }
}

namespace {

struct Spans {
    Time last_backward_end, drain_start, drain_end, optimizer_start, embedding_sync_start, first_backward_end;
    Time deferred_backward, plain_backward;  // the last stage's backward of microbatch 0 and of microbatch 7
    int drains = 0;
};

Spans spans_of(const Scenario& sc) {
    const LastStageTrace t = last_stage_trace(sc);
    const SimulationDetail& detail = t.detail;
    Spans s;
    const std::uint32_t first = process_of(detail.trace, 0), last = t.process;  // replica 0 of each stage
    for (const TraceSpan& span : detail.trace.spans) {
        const std::string kind = span.kind;
        if (kind == "embedding-grad-sync") s.embedding_sync_start = span.start;
        if (kind == "backward" && span.process == first) s.first_backward_end = std::max(s.first_backward_end, span.end);
        if (span.process != last) continue;
        if (kind == "backward") {
            s.last_backward_end = std::max(s.last_backward_end, span.end);
            if (span.microbatch == 0) s.deferred_backward += span.end - span.start;
            if (span.microbatch == 7) s.plain_backward += span.end - span.start;
        }
        if (kind == "deferred-wgrad") {
            if (s.drains++ == 0) s.drain_start = span.start;
            s.drain_end = std::max(s.drain_end, span.end);
        }
        if (kind == "optimizer") s.optimizer_start = span.start;
    }
    return s;
}

}  // namespace

TEST_CASE("deferred embedding wgrad: the drain runs after the last backward, before the optimizer and the tied sum") {
    const Scenario off = deferring(-1);
    REQUIRE(off.model.tied_embeddings);
    const Spans none = spans_of(off);
    CHECK(none.drains == 0);
    const Scenario sc = deferring(4);
    const Spans s = spans_of(sc);
    REQUIRE(s.drains > 0);
    CHECK(s.drain_start >= s.last_backward_end);
    CHECK(s.optimizer_start >= s.drain_end);
    CHECK(s.embedding_sync_start >= s.drain_end);  // finalize_model_grads' embedding sum follows the drain
    // The drain runs the four GEMMs the backwards left: at least their time on this device.
    const CostModel cost(sc.system.device);
    const LayerConfig lc = layer_config(sc.model, sc.execution);
    std::vector<Step> gemms;
    for (const Step& st : build_deferred_wgrad(lc, 4))
        if (st.kind == Step::Kind::compute) gemms.push_back(st);
    const Time gemm_time = cost.pass_time(gemms, sc.execution.tensor);
    CHECK(s.drain_end - s.drain_start >= gemm_time);
    // A deferred microbatch's backward is shorter than a plain one's by about its weight gradient; without the
    // deferral the two are the same work.
    CHECK(none.deferred_backward == none.plain_backward);
    CHECK((s.plain_backward - s.deferred_backward).ps() * 8 > gemm_time.ps());  // over half of one of the four GEMMs
    CHECK(s.plain_backward == none.plain_backward);
    // The tied embeddings' sum waits for the drain where the drain ends last: a vocabulary ten times larger and every
    // microbatch deferred make it outlast the first stage's backward.
    Scenario wide = deferring(0);
    wide.model.vocab *= 10;
    validate(wide);
    const Spans w = spans_of(wide);
    REQUIRE(w.drain_end > w.first_backward_end);
    CHECK(w.embedding_sync_start >= w.drain_end);
    // Interleaved, with two replicas (the sum waits for both replicas' drains).
    const Scenario two = strata::testing::with_data(deferring(0, true, 2), 2);
    Scenario wide2 = two;
    wide2.model.vocab *= 10;
    validate(wide2);
    const Spans w2 = spans_of(wide2);
    REQUIRE(w2.drains > 0);
    CHECK(w2.drain_start >= w2.last_backward_end);
    CHECK(w2.optimizer_start >= w2.drain_end);
    CHECK(w2.embedding_sync_start >= w2.drain_end);
}

TEST_CASE("deferred embedding wgrad: the reduction starts before the drain with overlap_grad_reduce, after it without") {
    // Megatron-Core launches the last stage's reduction before the deferred GEMMs when it overlaps (the hooks, or
    // grad_sync_func after the cool-down) and in finalize_model_grads, after them, when it does not.
    for (const bool overlap : {false, true}) {
        INFO("overlap_grad_reduce " << overlap);
        Scenario sc = strata::testing::with_data(deferring(4), 2);
        sc.execution.overlap_grad_reduce = overlap;
        validate(sc);
        const LastStageTrace last = last_stage_trace(sc);
        const SimulationDetail& detail = last.detail;
        const std::uint32_t lane = last.reduction_lane, process = last.process;
        Time reduce_start = Time::max(), drain_end;
        int drains = 0;
        for (const TraceSpan& span : detail.trace.spans) {
            if (span.lane == lane && std::string(span.kind) == "dp-reduce" && span.end > span.start)
                reduce_start = std::min(reduce_start, span.start);
            if (span.process == process && std::string(span.kind) == "deferred-wgrad") {
                drain_end = std::max(drain_end, span.end);
                ++drains;
            }
        }
        REQUIRE(drains > 0);
        REQUIRE(reduce_start < Time::max());
        if (overlap) {
            CHECK(reduce_start < drain_end);
        } else {
            CHECK(reduce_start >= drain_end);
        }
    }
}

TEST_CASE("deferred embedding wgrad: NeMo with Apex reduces the group it holds back after the drain, the rest before") {
    // NeMo marks the sequence-parallel norms (and a tied last-stage embedding) _disable_overlap_grad_sync; Apex's hooks
    // never launch the group holding them (the first layer's), NeMo's _finish_bucket_grad_sync does, after the drain.
    // Every microbatch deferred and a vocabulary ten times larger: a drain longer than the layers' groups' reductions.
    Scenario sc = strata::testing::with_data(deferring(0), 2);
    sc.model.vocab *= 10;
    sc.execution.distributed_optimizer = true;
    sc.execution.overlap_grad_reduce = true;
    sc.execution.grad_buckets = GradBuckets::nemo_apex_layers;
    validate(sc);
    const LastStageTrace last = last_stage_trace(sc);
    const SimulationDetail& detail = last.detail;
    const std::uint32_t lane = last.reduction_lane, process = last.process;
    Time drain_start = Time::max(), drain_end;
    Time first_reduce = Time::max(), held_start;
    Bytes held_bytes;  // the held group is the largest: the first layer's, the norms and the tied word embedding
    for (const TraceSpan& span : detail.trace.spans) {
        if (span.process == process && std::string(span.kind) == "deferred-wgrad") {
            drain_start = std::min(drain_start, span.start);
            drain_end = std::max(drain_end, span.end);
        }
        // The reductions (the parameter all-gather after the step is "dp-reduce" chunk 1).
        if (span.lane != lane || std::string(span.kind) != "dp-reduce" || span.chunk != 0 || span.end == span.start) continue;
        first_reduce = std::min(first_reduce, span.start);
        if (span.bytes > held_bytes) held_bytes = span.bytes, held_start = span.start;
    }
    REQUIRE(drain_end > Time::zero());
    REQUIRE(held_bytes > Bytes(0));
    CHECK(first_reduce < drain_start);  // the layers' groups, under the backward
    CHECK(held_start >= drain_end);     // the held group, after the drain
}
