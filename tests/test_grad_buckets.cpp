// Megatron-Core's gradient buckets (ExecutionSpec::grad_buckets megatron_core, megatron_gradient_buckets): a chunk's
// parameter tensors in reverse order, a bucket closed once it holds bucket_size parameters, the output layer first and
// the input embedding last; one bucket per chunk after the first and with overlap_param_gather_with_optimizer_step.
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/memory.hpp"
#include "strata/report.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace strata;
using Catch::Contains;

namespace {

Experiment load(const std::string& execution_extra) { return testing::load_small("buckets.yaml", execution_extra); }

double sum(const std::vector<GradientBucket>& buckets, bool weights_only = false) {
    double s = 0;
    for (const GradientBucket& b : buckets) s += weights_only ? b.linear_weights : b.parameters;
    return s;
}

/// The small 22B (t = 8, one node per tensor group) on p stages and d replicas with bf16 gradients, the distributed
/// optimizer with both overlaps, `buckets`, no variation; validated.
Scenario replicated(int p, int d, int seq_len, bool tied, GradBuckets buckets, double bucket_size = 0) {
    Scenario sc = testing::small_22b(p, 1, 4, true, Recompute::selective);
    sc.model.seq_len = seq_len;
    sc = testing::with_data(sc, d);
    sc.model.tied_embeddings = tied;
    sc.execution.grad_reduce_in_fp32 = false;
    sc.system.gpus_per_node = 8;
    sc.system.variation.gpu_sigma = 0;
    sc.execution.distributed_optimizer = true;
    sc.execution.overlap_grad_reduce = true;
    sc.execution.overlap_param_gather = true;
    sc.execution.grad_buckets = buckets;
    sc.execution.bucket_size = bucket_size;
    validate(sc);
    return sc;
}

/// A data-parallel case whose reduction keeps up with the backward (a layer's bf16 gradients reduced in less time than
/// its backward), so that what is left after the last backward shows: 4 replicas on 4 nodes (t = 8), sequence 4,096,
/// the overlapped reduction and gather, an untied output layer, no variation.
Scenario four_nodes(GradBuckets buckets, double bucket_size) { return replicated(1, 4, 4096, false, buckets, bucket_size); }

}  // namespace

TEST_CASE("grad_buckets: the keys, their defaults and their errors", "[buckets]") {
    const ExecutionSpec plain = load("").cases.at(0).execution;
    CHECK(plain.grad_buckets == GradBuckets::layer);
    const ExecutionSpec mc = load(", data: 4, grad_buckets: megatron_core").cases.at(0).execution;
    CHECK(mc.grad_buckets == GradBuckets::megatron_core);
    CHECK(mc.megatron_bucket_size() == 40e6);  // max(40 M, 1 M x 4)
    ExecutionSpec wide = mc;
    wide.data = 512;
    CHECK(wide.megatron_bucket_size() == 512e6);  // 1 M x d past 40 replicas
    CHECK(load(", grad_buckets: megatron_core, bucket_size: 134217728").cases.at(0).execution.megatron_bucket_size() ==
          134217728.0);
    try {
        (void)load(", bucket_size: 1000000");
        FAIL("bucket_size without megatron_core loaded");
    } catch (const InputError& e) {
        CHECK_THAT(e.what(), Contains("buckets.yaml:3:") && Contains("bucket_size") && Contains("grad_buckets: megatron_core"));
    }
    try {
        (void)load(", grad_buckets: apex");
        FAIL("an unknown bucketing loaded");
    } catch (const InputError& e) {
        CHECK_THAT(e.what(), Contains("grad_buckets") && Contains("layer") && Contains("megatron_core"));
    }
    // 0 is Megatron-Core's default (what the results echo where no size is in force), with any bucketing; below 0 not.
    CHECK(load(", grad_buckets: megatron_core, bucket_size: 0").cases.at(0).execution.megatron_bucket_size() == 40e6);
    CHECK(load(", bucket_size: 0").cases.at(0).execution.grad_buckets == GradBuckets::layer);
    CHECK_THROWS_AS(load(", grad_buckets: megatron_core, bucket_size: -1"), InputError);
}

TEST_CASE("megatron_gradient_buckets: Megatron-Core's walk over a chunk's tensors", "[buckets]") {
    Scenario sc = testing::small_22b(1, 1, 1, true, Recompute::none);
    sc.model.tied_embeddings = false;
    const ModelSpec& m = sc.model;
    const ExecutionSpec& e = sc.execution;
    const int layers = m.layers;
    const double h = m.hidden, f = m.ffn_hidden, t = e.tensor;
    const double layer = layer_parameters_per_gpu(m, e.tensor), word = double(m.vocab) * m.hidden / e.tensor;
    const double weights = (h * (h + 2.0 * m.query_groups() * m.head_dim()) + h * h + 2.0 * h * f) / t;  // GeLU MLP
    // Pieces as the backward runs them: 0 the output layer, 1..L the layers last to first, L + 1 the embedding.
    const int last_piece = layers + 1;
    SECTION("one bucket") {
        const auto one = megatron_gradient_buckets(m, e, layers, true, true, 0.0);
        REQUIRE(one.size() == 1);
        CHECK(one[0].parameters == Approx(parameters_on_stage(m, e, 0)).epsilon(1e-12));
        CHECK(one[0].linear_weights == Approx(layers * weights).epsilon(1e-12));
        CHECK(one[0].first_piece == 0);
        CHECK(one[0].last_piece == last_piece);
    }
    SECTION("buckets of a quarter layer") {
        const double size = layer / 4;
        const auto b = megatron_gradient_buckets(m, e, layers, true, true, size);
        CHECK(sum(b) == Approx(parameters_on_stage(m, e, 0)).epsilon(1e-12));
        CHECK(sum(b, true) == Approx(layers * weights).epsilon(1e-12));
        // The output layer's word matrix (more than a bucket) is the first bucket, alone, complete with its pass.
        REQUIRE(b.size() > static_cast<std::size_t>(layers));
        CHECK(b.front().parameters == word);
        CHECK(b.front().last_piece == 0);
        // Every bucket but the last is closed at bucket_size or past it, by less than a layer's largest tensor (fc1).
        const double fc1 = double(m.hidden) * m.ffn_hidden / e.tensor;
        for (std::size_t i = 0; i + 1 < b.size(); ++i) {
            CAPTURE(i);
            CHECK(b[i].parameters >= size);
            CHECK(b[i].parameters < size + std::max(fc1, word));
            CHECK(b[i + 1].first_piece >= b[i].last_piece);  // in backward order
        }
        // The last holds the input embedding, completed by the embedding's backward.
        CHECK(b.back().last_piece == last_piece);
        CHECK(b.back().parameters >= word);
    }
    SECTION("a layer's tensors in reverse registration order, each complete at its gradient event") {
        // One bucket per tensor: fc2's bias and weight (event 0), fc1's bias and weight and its norm (1: Transformer
        // Engine's LayerNormLinear returns them after the norm's backward), QKV's bias, weight and norm (3), the
        // projection's bias and weight (2: Megatron-Core registers linear_proj before linear_qkv).
        const auto b = megatron_gradient_buckets(m, e, 1, false, false, 1.0);
        std::vector<int> events;
        for (const GradientBucket& x : b) events.push_back(x.ready_event);
        CHECK(events == std::vector<int>{0, 0, 1, 1, 1, 3, 3, 3, 2, 2});
        REQUIRE(b.size() == 10);
        CHECK(b[1].parameters == f * h / t);      // fc2's weight
        CHECK(b[9].parameters == h * h / t);      // the projection's, last
        CHECK(b[9].linear_weights == h * h / t);
        CHECK(b[7].linear_weights == 0);          // a norm
    }
    SECTION("a tied embedding's copies are buckets of their own (p > 1, distributed optimizer)") {
        ModelSpec tied = m;
        tied.tied_embeddings = true;
        ExecutionSpec two = e;
        two.pipeline = 2;
        two.distributed_optimizer = true;
        const auto first = megatron_gradient_buckets(tied, two, 12, true, false, 0.0);
        REQUIRE(first.size() == 2);  // the layers, then the word embedding alone
        CHECK(first.back().parameters == word);
        CHECK(first.back().linear_weights == 0);
        const auto last = megatron_gradient_buckets(tied, two, 12, false, true, 0.0);
        REQUIRE(last.size() == 2);  // the output copy alone, then the final norm with the layers
        CHECK(last.front().parameters == word);
        CHECK(last.front().last_piece == 0);
        two.distributed_optimizer = false;  // Megatron-Core splits it only for the reduce-scatter
        CHECK(megatron_gradient_buckets(tied, two, 12, true, false, 0.0).size() == 1);
    }
    SECTION("FP8 parameters: the weights bucketed alone, the 16-bit rest with the last FP8 bucket") {
        ExecutionSpec f8 = e;
        f8.precision = Precision::fp8;
        f8.distributed_optimizer = true;
        f8.fp8_param_gather = true;
        const auto b = megatron_gradient_buckets(m, f8, layers, true, true, layer / 4);
        REQUIRE(b.size() > 2);
        CHECK(sum(b) == Approx(parameters_on_stage(m, f8, 0)).epsilon(1e-12));
        // The first buckets hold FP8 weights only (no output layer: it is in the last group, reduced at the end).
        for (std::size_t i = 0; i + 1 < b.size(); ++i) CHECK(b[i].parameters == b[i].linear_weights);
        CHECK(b.front().first_piece == 1);
        CHECK(b.back().parameters - b.back().linear_weights ==
              Approx(parameters_on_stage(m, f8, 0) - layers * weights).epsilon(1e-12));
        CHECK(b.back().first_piece == 0);
        CHECK(b.back().last_piece == last_piece);
    }
}

TEST_CASE("megatron_chunk_bucket_size: where Megatron-Core turns bucketing off", "[buckets]") {
    ExecutionSpec e;
    e.data = 64;
    e.pipeline = 4;
    e.interleave = 2;
    e.overlap_grad_reduce = true;
    CHECK(megatron_chunk_bucket_size(e, 0, 0) == 64e6);
    CHECK(megatron_chunk_bucket_size(e, 1, 0) == 0);  // a stage after the first
    CHECK(megatron_chunk_bucket_size(e, 0, 1) == 0);  // a chunk after the first
    e.overlap_param_gather_with_optimizer_step = true;
    CHECK(megatron_chunk_bucket_size(e, 0, 0) == 0);
    e.overlap_param_gather_with_optimizer_step = false;
    e.overlap_grad_reduce = false;  // bucket_size None without the overlapped reduction
    CHECK(megatron_chunk_bucket_size(e, 0, 0) == 0);
    e.grad_buckets = GradBuckets::megatron_core;
    CHECK(e.bucket_size_in_force() == 0);
    e.overlap_grad_reduce = true;
    CHECK(e.bucket_size_in_force() == 64000000);
}

TEST_CASE("grad_buckets megatron_core: the output layer reduced first, one bucket waits for the whole backward",
          "[buckets][simulate]") {
    const Scenario layer = four_nodes(GradBuckets::layer, 0);
    const Scenario mc = four_nodes(GradBuckets::megatron_core, 0);  // max(40 M, 4 M): a bucket per ~0.7 layer
    const Scenario whole = four_nodes(GradBuckets::megatron_core, 1e12);  // one bucket for the stage
    const IterationResult a = simulate(layer), b = simulate(mc), c = simulate(whole);
    CAPTURE(a.exposed_comm.data_parallel.seconds(), b.exposed_comm.data_parallel.seconds(),
            c.exposed_comm.data_parallel.seconds());
    // One bucket: nothing is reduced under the backward, nothing gathered before the whole stage is: the most exposed.
    CHECK(c.exposed_comm.data_parallel > b.exposed_comm.data_parallel);
    CHECK(c.exposed_comm.data_parallel > a.exposed_comm.data_parallel);
    CHECK(c.iteration_time > b.iteration_time);
    // Megatron-Core reduces the output layer first, under the layers' backward, where the per-layer model leaves it
    // (with the embedding) to after the last backward.
    CHECK(b.exposed_comm.data_parallel < a.exposed_comm.data_parallel);
    CHECK(b.iteration_time < a.iteration_time);
    CHECK(simulate(mc).iteration_time == b.iteration_time);  // deterministic
    // Without overlap_grad_reduce the buckets change nothing (one reduction after the backward), as in Megatron-Core.
    Scenario plain_layer = layer, plain_mc = mc;
    plain_layer.execution.overlap_grad_reduce = plain_mc.execution.overlap_grad_reduce = false;
    plain_layer.execution.overlap_param_gather = plain_mc.execution.overlap_param_gather = false;
    CHECK(simulate(plain_layer).iteration_time == simulate(plain_mc).iteration_time);
    // The report carries the bucket size in force.
    CaseResult r;
    r.scenario = mc;
    r.iteration = b;
    const auto e = nlohmann::json::parse(to_json("buckets", {r}))["results"][0]["execution"];
    CHECK(e["grad_buckets"] == "megatron_core");
    CHECK(e["bucket_size"].get<double>() == 40e6);
}

TEST_CASE("grad_buckets megatron_core: later chunks, and every chunk with the optimizer-step overlap, one bucket",
          "[buckets][simulate]") {
    Scenario sc = testing::with_data(testing::small_22b(2, 2, 4, true, Recompute::none), 4);
    sc.system.gpus_per_node = 8;
    sc.system.variation.gpu_sigma = 0;
    sc.execution.distributed_optimizer = true;
    sc.execution.overlap_grad_reduce = true;
    sc.execution.overlap_param_gather = true;
    sc.execution.grad_buckets = GradBuckets::megatron_core;
    sc.execution.bucket_size = 1e6;  // a bucket per tensor where bucketing is on
    Scenario with_step = sc;
    with_step.execution.overlap_param_gather_with_optimizer_step = true;
    validate(sc);
    validate(with_step);
    const IterationResult a = simulate(sc), b = simulate(with_step);
    // Chunk 0's tensors are reduced and gathered one by one in `sc`, as one bucket in `with_step`: fewer collectives,
    // and the first forward waits for its chunk's whole gather.
    CAPTURE(a.tasks, b.tasks);
    CHECK(b.tasks < a.tasks);
    CHECK(simulate(with_step).iteration_time == b.iteration_time);
}

TEST_CASE("grad_buckets nemo_apex: the keys and what they refuse", "[buckets]") {
    CHECK(load(", data: 4, distributed_optimizer: true, grad_buckets: nemo_apex").cases.at(0).execution.grad_buckets ==
          GradBuckets::nemo_apex);
    CHECK(load(", data: 4, distributed_optimizer: true, grad_buckets: nemo_apex_layers").cases.at(0).execution.grad_buckets ==
          GradBuckets::nemo_apex_layers);
    const auto refused = [](const std::string& extra, const std::string& key, const std::string& why) {
        try {
            (void)load(extra);
            FAIL("loaded: " << extra);
        } catch (const InputError& e) {
            CHECK_THAT(e.what(), Contains(key) && Contains(why));
        }
    };
    // Apex's optimizer is a sharded one; it has no NaN check and steps its first group first by itself.
    refused(", data: 4, grad_buckets: nemo_apex", "grad_buckets", "distributed_optimizer: true");
    refused(", data: 4, distributed_optimizer: true, grad_buckets: nemo_apex, check_for_nan_in_grad: true",
            "check_for_nan_in_grad", "Apex");
    refused(", data: 4, distributed_optimizer: true, grad_buckets: nemo_apex, bucket_size: 1000000", "bucket_size",
            "bucket_cap_mb sets no boundary");
    refused(", grad_buckets: apex", "grad_buckets", "nemo_apex_layers");
    {
        // Apex overlaps its first group's gather with the step by itself; Megatron-Core's switch for it is refused.
        Scenario sc = testing::with_data(testing::small_22b(2, 2, 4, true, Recompute::selective), 2);
        sc.execution.distributed_optimizer = true;
        sc.execution.overlap_param_gather = true;
        sc.execution.overlap_param_gather_with_optimizer_step = true;
        validate(sc);  // valid with the default buckets
        sc.execution.grad_buckets = GradBuckets::nemo_apex;
        CHECK_THROWS_WITH(validate(sc), Contains("overlap_param_gather_with_optimizer_step") && Contains("Megatron-Core's"));
    }
    // NeMo's fp32 embedding gradients belong to its Apex path.
    CHECK(load(", data: 4, distributed_optimizer: true, grad_buckets: nemo_apex, fp32_embedding_grads: true")
              .cases.at(0)
              .execution.fp32_embedding_grads);
    CHECK_FALSE(load("").cases.at(0).execution.fp32_embedding_grads);
    refused(", data: 4, distributed_optimizer: true, fp32_embedding_grads: true", "fp32_embedding_grads", "nemo_apex");
    refused(", data: 4, distributed_optimizer: true, grad_buckets: megatron_core, fp32_embedding_grads: true",
            "fp32_embedding_grads", "with_fp32_embedding_grads");
}

TEST_CASE("nemo_apex_gradient_buckets: NeMo's groups for Apex, by layer or by chunk", "[buckets]") {
    Scenario sc = testing::small_22b(1, 1, 1, false, Recompute::none);
    sc.model.tied_embeddings = false;
    const ModelSpec& m = sc.model;
    ExecutionSpec e = sc.execution;
    e.distributed_optimizer = true;
    e.grad_buckets = GradBuckets::nemo_apex;
    const int layers = m.layers;
    const double h = m.hidden, t = e.tensor;
    const double layer = layer_parameters_per_gpu(m, e.tensor), word = double(m.vocab) * h / t;
    const double marked = 2 * 2 * h + 2 * h;  // two LayerNorms (gamma, beta) and the row-parallel biases: 6h
    const double final_norm = 2 * h;         // LayerNorm
    const auto total = [](const std::vector<std::vector<GradientBucket>>& chunks) {
        double s = 0;
        for (const auto& c : chunks) s += sum(c);
        return s;
    };
    SECTION("one chunk: a group per layer, the first layer's with everything outside the layers") {
        const auto g = nemo_apex_gradient_buckets(m, e, {{layers, true, true}});
        REQUIRE(g.size() == 1);
        REQUIRE(g[0].size() == static_cast<std::size_t>(layers));
        CHECK(total(g) == Approx(parameters_on_stage(m, e, 0)).epsilon(1e-12));
        // Backward order: the last layer first (piece 1, after the output layer's pass 0), each whole at its end.
        for (int i = 0; i + 1 < layers; ++i) {
            CAPTURE(i);
            CHECK(g[0][static_cast<std::size_t>(i)].parameters == Approx(layer));
            CHECK(g[0][static_cast<std::size_t>(i)].last_piece == i + 1);
            CHECK(g[0][static_cast<std::size_t>(i)].ready_event == 3);
        }
        // The first layer's group: the layer, both embeddings' words, the final norm; complete with the embedding's pass.
        CHECK(g[0].back().parameters - layer >= 2 * word);
        CHECK(g[0].back().last_piece == layers + 1);
        CHECK(g[0].back().first_piece == 0);
    }
    SECTION("sequence parallelism: the norms and the row-parallel biases join the first group") {
        ExecutionSpec sp = e;
        sp.sequence_parallel = true;
        const auto plain = nemo_apex_gradient_buckets(m, e, {{layers, true, true}});
        const auto g = nemo_apex_gradient_buckets(m, sp, {{layers, true, true}});
        CHECK(total(g) == Approx(total(plain)).epsilon(1e-12));
        CHECK(g[0].front().parameters == Approx(layer - marked));
        CHECK(g[0].back().parameters == Approx(plain[0].back().parameters + (layers - 1) * marked));
    }
    SECTION("interleaved: a group per chunk; nemo_apex_layers keeps a group per layer") {
        ExecutionSpec two = e;
        two.pipeline = 2;
        two.interleave = 2;
        two.sequence_parallel = true;
        const int per = layers / 4;
        // Stage 1 of p = 2: chunk 0 (virtual stage 1), chunk 1 (virtual stage 3, the last: the output layer).
        const std::vector<ChunkContents> stage1 = {{per, false, false}, {per, false, true}};
        const auto g = nemo_apex_gradient_buckets(m, two, stage1);
        REQUIRE(g.size() == 2);
        REQUIRE(g[0].size() == 1);
        REQUIRE(g[1].size() == 1);
        // Chunk 1 keeps its layers less what sequence parallelism marks, and the output layer's words (untied); its
        // marked parameters and the final norm go to chunk 0's group, complete last.
        CHECK(g[1][0].parameters == Approx(per * (layer - marked) + word));
        CHECK(g[0][0].parameters == Approx(per * layer + per * marked + final_norm));
        CHECK(g[1][0].last_piece == per);      // output layer's pass, then per layers
        CHECK(g[0][0].last_piece == per - 1);
        two.grad_buckets = GradBuckets::nemo_apex_layers;
        const auto l = nemo_apex_gradient_buckets(m, two, stage1);
        REQUIRE(l[0].size() == static_cast<std::size_t>(per));
        REQUIRE(l[1].size() == static_cast<std::size_t>(per));
        CHECK(total(l) == Approx(total(g)).epsilon(1e-12));
        // By layer, everything outside the layers (here the output layer and the final norm) is with the first group.
        CHECK(l[1].front().parameters == Approx(layer - marked));
        CHECK(l[0].back().parameters == Approx(layer + (2 * per - 1) * marked + word + final_norm));
    }
    SECTION("FP8 parameters: a group holds its layers' FP8 weights, the first one the rest") {
        ExecutionSpec f8 = e;
        f8.precision = Precision::fp8;
        f8.fp8_param_gather = true;
        const auto g = nemo_apex_gradient_buckets(m, f8, {{layers, true, true}});
        CHECK(total(g) == Approx(parameters_on_stage(m, f8, 0)).epsilon(1e-12));
        for (std::size_t i = 0; i + 1 < g[0].size(); ++i) CHECK(g[0][i].parameters == g[0][i].linear_weights);
        CHECK(g[0].back().parameters - g[0].back().linear_weights ==
              Approx(parameters_on_stage(m, f8, 0) - sum(g[0], true)).epsilon(1e-12));
    }
}

TEST_CASE("grad_buckets nemo_apex: Apex steps the first group first and gathers it under the rest of the step",
          "[buckets][simulate]") {
    const Scenario layer = four_nodes(GradBuckets::layer, 0);
    Scenario apex = four_nodes(GradBuckets::layer, 0);
    apex.execution.grad_buckets = GradBuckets::nemo_apex;
    validate(apex);
    const IterationResult a = simulate(layer), b = simulate(apex);
    CAPTURE(a.exposed_comm.data_parallel.seconds(), b.exposed_comm.data_parallel.seconds(), a.tasks, b.tasks);
    // The first forward no longer waits for the first layer's (and the embedding's) gather after the whole step: less
    // exposed data-parallel time and a shorter iteration; one more optimizer task (the step in two parts).
    CHECK(b.exposed_comm.data_parallel < a.exposed_comm.data_parallel);
    CHECK(b.iteration_time < a.iteration_time);
    CHECK(simulate(apex).iteration_time == b.iteration_time);  // deterministic
    CaseResult r;
    r.scenario = apex;
    r.iteration = b;
    const auto j = nlohmann::json::parse(to_json("buckets", {r}))["results"][0]["execution"];
    CHECK(j["grad_buckets"] == "nemo_apex");
    CHECK(j["bucket_size"].get<double>() == 0);
}

TEST_CASE("steps first part first: what follows the first group on the gather stream waits for the rest of the step",
          "[buckets][simulate]") {
    // Apex steps the first group first and gathers it under the rest of the step; the next groups' parameters are made
    // by that rest, so their gathers start after it (as Megatron-Core's later chunks' do), not after the first gather.
    Scenario apex = four_nodes(GradBuckets::layer, 0);
    apex.execution.grad_buckets = GradBuckets::nemo_apex;
    validate(apex);
    SimulationOptions opt;
    opt.keep_trace = true;
    SimulationDetail detail;
    (void)simulate(apex, opt, &detail);
    Time rest_end = Time::zero();
    std::vector<Time> gathers;
    for (const TraceSpan& s : detail.trace.spans) {
        const std::string kind = s.kind;
        if (kind == "optimizer" && s.start == Time::zero()) rest_end = std::max(rest_end, s.end);
        if (kind == "dp-reduce" && s.chunk == 1) gathers.push_back(s.start);  // the parameter all-gathers
    }
    std::sort(gathers.begin(), gathers.end());
    REQUIRE(rest_end > Time::zero());
    REQUIRE(gathers.size() > 2);
    CAPTURE(rest_end.seconds(), gathers[0].seconds(), gathers[1].seconds());
    CHECK(gathers[0] < rest_end);   // the first group's, under the rest of the step
    CHECK(gathers[1] >= rest_end);  // the next, after it
}

TEST_CASE("fp32_embedding_grads: NeMo's embeddings keep and reduce fp32 gradients in their group", "[buckets]") {
    Scenario sc = testing::small_22b(1, 1, 1, false, Recompute::none);
    const ModelSpec& m = sc.model;  // tied embeddings, learned positions
    ExecutionSpec e = sc.execution;
    e.distributed_optimizer = true;
    e.grad_buckets = GradBuckets::nemo_apex;
    e.grad_reduce_in_fp32 = false;
    e.pipeline = 2;
    e.interleave = 2;
    const int per = m.layers / 4;
    const double word = double(m.vocab) * m.hidden / e.tensor, positions = double(m.seq_len) * m.hidden;
    const std::vector<ChunkContents> first = {{per, true, false}, {per, false, false}};
    const std::vector<ChunkContents> last = {{per, false, false}, {per, false, true}};
    const auto fp32 = [](const std::vector<std::vector<GradientBucket>>& chunks) {
        double s = 0;
        for (const auto& c : chunks)
            for (const GradientBucket& b : c) s += b.fp32_parameters;
        return s;
    };
    CHECK(fp32(nemo_apex_gradient_buckets(m, e, first)) == 0);  // off by default
    CHECK(fp32_embedding_parameters(m, e, 0) == 0);
    ExecutionSpec on = e;
    on.fp32_embedding_grads = true;
    SECTION("the first stage's word embedding and positions, the last stage's tied copy, in the first chunk's group") {
        for (const GradBuckets buckets : {GradBuckets::nemo_apex, GradBuckets::nemo_apex_layers}) {
            on.grad_buckets = buckets;
            const auto g0 = nemo_apex_gradient_buckets(m, on, first), g1 = nemo_apex_gradient_buckets(m, on, last);
            CHECK(fp32_embedding_parameters(m, on, 0) == Approx(word + positions));
            CHECK(fp32_embedding_parameters(m, on, 1) == Approx(word));
            CHECK(fp32(g0) == Approx(word + positions));
            CHECK(fp32(g1) == Approx(word));
            // The tied word embedding (p > 1) is kept out of its chunk's group: with the stage's last complete.
            CHECK(g0[0].back().fp32_parameters == Approx(word + positions));
            CHECK(g1[0].back().fp32_parameters == Approx(word));
            // Nothing else moves: the groups hold the same parameters as without the key.
            ExecutionSpec off = on;
            off.fp32_embedding_grads = false;
            const auto plain = nemo_apex_gradient_buckets(m, off, first);
            for (std::size_t c = 0; c < g0.size(); ++c)
                for (std::size_t i = 0; i < g0[c].size(); ++i) CHECK(g0[c][i].parameters == plain[c][i].parameters);
        }
    }
    SECTION("an untied output layer stays 16-bit; untied, the first stage's embedding joins its chunk's group") {
        ModelSpec untied = m;
        untied.tied_embeddings = false;
        const auto g0 = nemo_apex_gradient_buckets(untied, on, first), g1 = nemo_apex_gradient_buckets(untied, on, last);
        CHECK(fp32(g1) == 0);
        CHECK(fp32_embedding_parameters(untied, on, 1) == 0);
        CHECK(g0[0][0].fp32_parameters == Approx(word + positions));
    }
    SECTION("inert where every gradient is fp32 anyway") {
        ExecutionSpec f32 = on;
        f32.grad_reduce_in_fp32 = true;
        CHECK(fp32(nemo_apex_gradient_buckets(m, f32, first)) == 0);
        CHECK(fp32_embedding_parameters(m, f32, 0) == 0);
    }
    SECTION("memory: 2 bytes more per such parameter of the gradient buffer") {
        const DeviceMemory device = sc.system.device_memory();
        const Bytes off = stage_state(m, e, device, 0).gradients, with = stage_state(m, on, device, 0).gradients;
        CHECK(double((with - off).value) == Approx(2 * (word + positions)).epsilon(1e-9));
    }
}

TEST_CASE("fp32_embedding_grads: the first group's reduction and the tied copies' all-reduce move fp32 bytes",
          "[buckets][simulate]") {
    // Each half alone: one stage on four replicas (the first group's reduce-scatter carries the embedding at 4 bytes a
    // parameter instead of 2, after the last backward), and two stages with one replica (no data-parallel reduction;
    // the tied copies' all-reduce between the stages moves the fp32 main gradient). Either way the iteration grows.
    const auto scenario = [](int p, int d) { return replicated(p, d, 1024, true, GradBuckets::nemo_apex); };
    const auto with_key = [](Scenario sc) {
        sc.execution.fp32_embedding_grads = true;
        validate(sc);
        return sc;
    };
    SECTION("the reduce-scatter of the first group") {
        const Scenario sc = scenario(1, 4);
        const IterationResult a = simulate(sc), b = simulate(with_key(sc));
        CAPTURE(a.exposed_comm.data_parallel.seconds(), b.exposed_comm.data_parallel.seconds());
        CHECK(b.exposed_comm.data_parallel > a.exposed_comm.data_parallel);
        CHECK(b.iteration_time > a.iteration_time);
        CHECK(b.tasks == a.tasks);  // the same tasks, larger messages
    }
    SECTION("the tied copies' all-reduce between the first and the last stage") {
        const Scenario sc = scenario(2, 1);
        const IterationResult a = simulate(sc), b = simulate(with_key(sc));
        CAPTURE(a.iteration_time.seconds(), b.iteration_time.seconds());
        // No replicas: what is exposed is the tied copies' sum (counted as data-parallel communication).
        CHECK(b.exposed_comm.data_parallel > a.exposed_comm.data_parallel);
        CHECK(b.iteration_time > a.iteration_time);
        CHECK(b.tasks == a.tasks);
    }
}

TEST_CASE("grad_buckets nemo_apex: Apex's optimizer state per parameter of the shard", "[buckets][memory]") {
    // Apex's DistributedFusedAdam as NeMo sets it up keeps m and v in fp32, the bf16 weight's int16 remainder and the
    // reduced gradient shard: 12 bytes per parameter of the shard with 16-bit gradients, 14 with fp32 ones, where
    // Megatron-Core's distributed optimizer keeps 16 and 12; an fp32 copy instead of the remainder with FP8 parameters.
    Scenario sc = testing::small_22b(1, 1, 1, false, Recompute::none);
    const ModelSpec& m = sc.model;
    ExecutionSpec e = sc.execution;
    e.data = 4;
    e.distributed_optimizer = true;
    const DeviceMemory device = sc.system.device_memory();
    const double params = parameters_on_stage(m, e, 0);
    const auto optimizer = [&](const ExecutionSpec& x) { return double(stage_state(m, x, device, 0).optimizer.value); };
    e.grad_reduce_in_fp32 = false;
    CHECK(optimizer(e) == Approx(params * 16 / 4));  // Megatron-Core's
    ExecutionSpec apex = e;
    apex.grad_buckets = GradBuckets::nemo_apex;
    CHECK(optimizer(apex) == Approx(params * 12 / 4));
    apex.grad_reduce_in_fp32 = true;
    CHECK(optimizer(apex) == Approx(params * 14 / 4));
    e.grad_reduce_in_fp32 = true;
    CHECK(optimizer(e) == Approx(params * 12 / 4));
    // FP8 parameters (NeMo's fp8_params sets store_params for all): an fp32 copy of every parameter, not the remainder;
    // fp16 weights the same (Apex's remainders are for bf16 only).
    apex.grad_reduce_in_fp32 = false;
    apex.precision = Precision::fp8;
    apex.fp8_param_gather = true;
    CHECK(optimizer(apex) == Approx(params * 14 / 4));
    apex.fp8_param_gather = false;
    CHECK(optimizer(apex) == Approx(params * 12 / 4));  // FP8 without FP8 parameters: bf16 weights
    apex.precision = Precision::fp16;
    CHECK(optimizer(apex) == Approx(params * 14 / 4));
    // Over data x context: the shard of each replica.
    ExecutionSpec cp = apex;
    cp.precision = Precision::bf16;
    cp.data = 2;
    cp.context = 2;
    CHECK(optimizer(cp) == Approx(params * 12 / 4));
    // fp32 embedding gradients: a 4-byte gradient shard for the embeddings.
    apex.precision = Precision::bf16;
    apex.fp32_embedding_grads = true;
    CHECK(fp32_embedding_parameters(m, apex, 0) > 0);
    CHECK(optimizer(apex) == Approx((params * 12 + fp32_embedding_parameters(m, apex, 0) * 2) / 4));
}
