// The loss's kernels (ExecutionSpec::cross_entropy): Megatron-LM's eager fp32 vocabulary-parallel cross-entropy
// (unfused, 38 + 14 bytes per logit), Megatron-Core's compiled version of it (fused, 22 + 10) or Transformer Engine's fused Triton kernels (te: an online softmax reading each
// 16-bit logit once, the per-token statistics all-gathered over the tensor-parallel group, a backward pass reading
// each logit and writing its gradient in place: 2 + 4 bytes per logit; the 16-bit logits kept instead of fp32).
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace strata;
using Catch::Contains;

namespace {

Experiment load(const std::string& execution_extra) { return strata::testing::load_small("cross-entropy.yaml", execution_extra); }

struct LossBytes {
    std::int64_t forward = 0, backward = 0, gathered = 0;
};

LossBytes loss_bytes(const OutputPlan& o) {
    LossBytes b;
    for (const Step& s : o.forward) {
        for (const Kernel& k : s.kernels)
            if (k.name.rfind("cross-entropy", 0) == 0) b.forward += k.bytes.value;
        if (s.kind == Step::Kind::collective && s.collective.name == "cross-entropy.stats-all-gather")
            b.gathered = s.collective.message.value;
    }
    for (const Step& s : o.backward)
        for (const Kernel& k : s.kernels)
            if (k.name.rfind("cross-entropy", 0) == 0) b.backward += k.bytes.value;
    return b;
}

}  // namespace

TEST_CASE("cross_entropy: the key, its default and its choices", "[cross_entropy]") {
    CHECK(load("").cases.at(0).execution.cross_entropy == CrossEntropy::unfused);
    CHECK(load(", cross_entropy: te").cases.at(0).execution.cross_entropy == CrossEntropy::te);
    CHECK(std::string(to_string(CrossEntropy::te)) == "te");
    CHECK(load(", cross_entropy: fused").cases.at(0).execution.cross_entropy == CrossEntropy::fused);
    CHECK(cross_entropy_named("unfused") == CrossEntropy::unfused);
    CHECK(cross_entropy_named("fused") == CrossEntropy::fused);
    CHECK_FALSE(cross_entropy_named("triton").has_value());
    try {
        (void)load(", cross_entropy: triton");
        FAIL("an unknown cross_entropy loaded");
    } catch (const InputError& e) {
        CHECK_THAT(e.what(), Contains("cross-entropy.yaml:3:") && Contains("cross_entropy") && Contains("unfused") &&
                                 Contains("fused") && Contains("te"));
    }
}

TEST_CASE("cross_entropy te: 2 bytes per logit forward, 4 backward, statistics gathered, 16-bit logits kept",
          "[cross_entropy]") {
    Scenario sc = strata::testing::small_22b(1, 1, 1, true, Recompute::selective);  // t = 8, SP
    const LayerConfig unfused = layer_config(sc.model, sc.execution);
    sc.execution.cross_entropy = CrossEntropy::te;
    const LayerConfig te = layer_config(sc.model, sc.execution);
    const std::int64_t logits = std::int64_t{sc.model.seq_len} * sc.execution.microbatch * sc.model.vocab / sc.execution.tensor;
    const OutputPlan a = build_output(unfused), b = build_output(te);
    const LossBytes la = loss_bytes(a), lb = loss_bytes(b);
    CHECK(la.forward == 38 * logits);
    CHECK(la.backward == 14 * logits);
    CHECK(la.gathered == 0);
    CHECK(lb.forward == 2 * logits);
    CHECK(lb.backward == 4 * logits);
    CHECK(lb.gathered == 3 * 4 * std::int64_t{sc.model.seq_len} * sc.execution.microbatch * sc.execution.tensor);
    CHECK(a.stored_per_microbatch.value - b.stored_per_microbatch.value == 2 * logits);
}

TEST_CASE("cross_entropy fused (Megatron-Core's native fusion): 22 bytes per logit forward, 10 backward, fp32 kept",
          "[cross_entropy]") {
    Scenario sc = strata::testing::small_22b(1, 1, 1, true, Recompute::selective);  // t = 8, SP
    const OutputPlan unfused = build_output(layer_config(sc.model, sc.execution));
    sc.execution.cross_entropy = CrossEntropy::fused;
    const OutputPlan fused = build_output(layer_config(sc.model, sc.execution));
    const std::int64_t logits = std::int64_t{sc.model.seq_len} * sc.execution.microbatch * sc.model.vocab / sc.execution.tensor;
    const LossBytes lf = loss_bytes(fused);
    CHECK(lf.forward == 22 * logits);
    CHECK(lf.backward == 10 * logits);
    CHECK(lf.gathered == 0);
    CHECK(fused.stored_per_microbatch == unfused.stored_per_microbatch);  // the fp32 softmax is saved as unfused
}

TEST_CASE("cross_entropy te: a large-vocabulary model at t = 1 runs faster and keeps less", "[cross_entropy]") {
    Scenario sc = strata::testing::small_22b(1, 1, 2, false, Recompute::selective);
    sc.execution.tensor = 1;
    sc.model.vocab = 128256;
    sc.system.variation.gpu_sigma = 0;
    validate(sc);
    Scenario te = sc;
    te.execution.cross_entropy = CrossEntropy::te;
    const IterationResult a = simulate(sc), b = simulate(te);
    CHECK(b.iteration_time < a.iteration_time);
    CHECK(b.peak_memory < a.peak_memory);
}

TEST_CASE("output layer under SP: its input all-gathered in the forward and again in the backward, before the "
          "data-gradient GEMM", "[cross_entropy]") {
    // Megatron's LinearWithGradAccumulationAndAsyncCommunication keeps the output layer's input as each rank's
    // sequence shard and all-gathers it again in its backward for the weight gradient, overlapped with the data
    // gradient's GEMM (2022's megatron/mpu/layers.py and Megatron-Core alike).
    auto gathers = [](const std::vector<Step>& pass) {
        std::vector<std::pair<std::string, bool>> g;  // name, overlapped
        for (const Step& s : pass)
            if (s.kind == Step::Kind::collective && s.collective.kind == CollectiveKind::all_gather)
                g.emplace_back(s.collective.name, s.overlapped);
        return g;
    };
    for (const CrossEntropy ce : {CrossEntropy::unfused, CrossEntropy::fused, CrossEntropy::te}) {
        INFO(to_string(ce));
        Scenario sc = strata::testing::small_22b(1, 1, 1, true, Recompute::selective);  // t = 8, SP
        sc.execution.cross_entropy = ce;
        const OutputPlan o = build_output(layer_config(sc.model, sc.execution));
        const std::int64_t msg = 2 * std::int64_t{sc.model.seq_len} * sc.execution.microbatch * sc.model.hidden;
        const auto back = gathers(o.backward);
        REQUIRE(back.size() == 1);
        CHECK(back[0].first == "logits.input-all-gather");
        CHECK(back[0].second);  // overlapped with the next compute step...
        std::size_t i = 0;
        while (o.backward[i].kind != Step::Kind::collective) ++i;
        CHECK(o.backward[i].collective.message.value == msg);
        REQUIRE(i + 1 < o.backward.size());
        REQUIRE(o.backward[i + 1].kind == Step::Kind::compute);  // ...which is the data-gradient GEMM alone
        REQUIRE(o.backward[i + 1].kernels.size() == 1);
        CHECK(o.backward[i + 1].kernels[0].name == "logits.dgrad");
        CHECK(gathers(o.forward).size() == std::size_t(ce == CrossEntropy::te ? 2 : 1));  // + the loss statistics
        // Without SP nothing is gathered: the input is whole on every rank.
        sc.execution.sequence_parallel = false;
        CHECK(gathers(build_output(layer_config(sc.model, sc.execution)).backward).empty());
    }
}

TEST_CASE("embedding under SP: reduce-scattered (Megatron-Core since 2024-04) or all-reduced and split (2022)",
          "[cross_entropy]") {
    auto forward_collectives = [](const EmbeddingPlan& e) {
        std::vector<CollectiveKind> kinds;
        for (const Step& s : e.forward)
            if (s.kind == Step::Kind::collective) kinds.push_back(s.collective.kind);
        return kinds;
    };
    Scenario sc = strata::testing::small_22b(1, 1, 1, true, Recompute::selective);  // t = 8, SP
    CHECK(load("").cases.at(0).execution.embedding_reduce_scatter);  // the default (table4.yaml, behind small_22b, sets false)
    sc.execution.embedding_reduce_scatter = true;
    using V = std::vector<CollectiveKind>;
    CHECK(forward_collectives(build_embedding(layer_config(sc.model, sc.execution))) == V{CollectiveKind::reduce_scatter});
    sc.execution.embedding_reduce_scatter = false;
    const EmbeddingPlan old = build_embedding(layer_config(sc.model, sc.execution));
    CHECK(forward_collectives(old) == V{CollectiveKind::all_reduce});
    // The whole output either way, and the backward gathers the shards' gradients either way.
    std::int64_t gathered = 0;
    for (const Step& s : old.backward)
        if (s.kind == Step::Kind::collective && s.collective.kind == CollectiveKind::all_gather) gathered = s.collective.message.value;
    CHECK(gathered == 2 * std::int64_t{sc.model.seq_len} * sc.execution.microbatch * sc.model.hidden);
    // Without SP the key changes nothing: an all-reduce.
    sc.execution.sequence_parallel = false;
    sc.execution.embedding_reduce_scatter = true;
    CHECK(forward_collectives(build_embedding(layer_config(sc.model, sc.execution))) == V{CollectiveKind::all_reduce});
    // The key loads, and a non-boolean is refused at its line.
    CHECK_FALSE(load(", embedding_reduce_scatter: false").cases.at(0).execution.embedding_reduce_scatter);
    CHECK_THROWS_WITH(load(", embedding_reduce_scatter: maybe"),
                      Contains("cross-entropy.yaml:3:") && Contains("execution.embedding_reduce_scatter"));
}
