// The schedule module (sim/schedule) on its own, and the property that ties it to both of its users: the
// analytical per-stage memory (walked from the schedule) equals the simulated per-stage peak (the task graph
// built from the same schedule), byte for byte and category by category, for every schedule over a grid.
#include "strata/errors.hpp"
#include "strata/memory.hpp"
#include "strata/schedule.hpp"
#include "strata/simulate.hpp"
#include "fixtures.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <map>
#include <set>
#include <string>
#include <tuple>

using namespace strata;
using schedule::Instruction;
using schedule::Shape;
using schedule::Unit;

namespace {

std::vector<Unit> units_of(const std::vector<Instruction>& prog) {
    std::vector<Unit> out;
    for (const auto& i : prog)
        if (i.kind == Instruction::Kind::unit) out.push_back(i.unit);
    return out;
}

std::string name(const Shape& s) {
    return std::string(to_string(s.kind)) + " p=" + std::to_string(s.stages) + " m=" + std::to_string(s.chunks) +
           " n=" + std::to_string(s.microbatches) + (s.overlap_p2p ? " overlapped" : "");
}

/// Every schedule shape the grid covers: p in 1..4 (GPipe, 1F1B) with n from 1 to 2p + 1, and the interleaved
/// schedule (p >= 2, m in 2..3) with n = p, 2p, 3p (it needs n to be a multiple of p).
std::vector<Shape> grid() {
    std::vector<Shape> out;
    for (int p = 1; p <= 4; ++p) {
        for (int n = 1; n <= 2 * p + 1; ++n) {
            out.push_back({Schedule::one_f_one_b, p, 1, n});
            out.push_back({Schedule::gpipe, p, 1, n});
        }
        if (p < 2) continue;
        for (int m = 2; m <= 3; ++m)
            for (int k = 1; k <= 3; ++k) {
                out.push_back({Schedule::interleaved, p, m, k * p});
                out.push_back({Schedule::interleaved, p, m, k * p, true});  // overlapped pipeline communication
            }
    }
    return out;
}

}  // namespace

TEST_CASE("schedule: every stage runs each unit once, a chunk's forward before its backward") {
    for (const Shape& s : grid()) {
        INFO(name(s));
        for (int r = 0; r < s.stages; ++r) {
            const std::vector<Unit> units = units_of(schedule::stage_program(s, r));
            CHECK(units == schedule::unit_order(s, r));
            REQUIRE(units.size() == std::size_t(2 * s.chunks * s.microbatches));
            std::set<std::tuple<bool, int, int>> seen;
            for (const Unit& u : units) {
                CHECK(seen.insert({u.forward, u.chunk, u.microbatch}).second);
                if (!u.forward) CHECK(seen.count({true, u.chunk, u.microbatch}) == 1);
            }
        }
    }
}

TEST_CASE("schedule: every message sent by one stage's call is received by its neighbour's, and no call is empty") {
    for (const Shape& s : grid()) {
        INFO(name(s));
        // (direction, destination virtual stage, microbatch) -> sent / received count
        std::map<std::tuple<bool, int, int>, int> sent, received;
        for (int r = 0; r < s.stages; ++r) {
            for (const Instruction& i : schedule::stage_program(s, r)) {
                if (i.kind != Instruction::Kind::call) continue;
                CHECK(i.call.send_count + i.call.receive_count > 0);
                for (int k = 0; k < i.call.send_count; ++k) {
                    const Unit& u = i.call.sends[std::size_t(k)];
                    CHECK(schedule::sends_output(s, r, u));
                    const int v = schedule::virtual_stage(s, r, u.chunk);
                    ++sent[{u.forward, u.forward ? v + 1 : v - 1, u.microbatch}];
                }
                for (int k = 0; k < i.call.receive_count; ++k) {
                    const Unit& u = i.call.receives[std::size_t(k)];
                    CHECK(schedule::needs_input(s, r, u));
                    ++received[{u.forward, schedule::virtual_stage(s, r, u.chunk), u.microbatch}];
                }
            }
        }
        CHECK(sent == received);
        const std::size_t messages = std::size_t(2 * (s.virtual_stages() - 1) * s.microbatches);
        CHECK(sent.size() == messages);
        for (const auto& [key, count] : sent) CHECK(count == 1);
    }
}

TEST_CASE("schedule: a receive comes before the unit that needs it, a send after the unit that produced it") {
    for (const Shape& s : grid()) {
        INFO(name(s));
        for (int r = 0; r < s.stages; ++r) {
            std::set<std::tuple<bool, int, int>> ran, received;
            for (const Instruction& i : schedule::stage_program(s, r)) {
                if (i.kind == Instruction::Kind::unit) {
                    if (schedule::needs_input(s, r, i.unit))
                        CHECK(received.count({i.unit.forward, i.unit.chunk, i.unit.microbatch}) == 1);
                    ran.insert({i.unit.forward, i.unit.chunk, i.unit.microbatch});
                    continue;
                }
                for (int k = 0; k < i.call.send_count; ++k) {
                    const Unit& u = i.call.sends[std::size_t(k)];
                    CHECK(ran.count({u.forward, u.chunk, u.microbatch}) == 1);
                }
                for (int k = 0; k < i.call.receive_count; ++k) {
                    const Unit& u = i.call.receives[std::size_t(k)];
                    received.insert({u.forward, u.chunk, u.microbatch});
                }
            }
        }
    }
}

TEST_CASE("schedule: warm-up depth and units in flight as Megatron-LM orders them") {
    // 1F1B: stage r holds min(p - r, n) microbatches; with fewer microbatches than stages, all of them.
    for (int r = 0; r < 4; ++r) CHECK(schedule::peak_in_flight({Schedule::one_f_one_b, 4, 1, 8}, r) == 4 - r);
    for (int r = 0; r < 4; ++r) CHECK(schedule::peak_in_flight({Schedule::one_f_one_b, 4, 1, 2}, r) == std::min(2, 4 - r));
    // GPipe: every microbatch.
    for (int r = 0; r < 3; ++r) CHECK(schedule::peak_in_flight({Schedule::gpipe, 3, 1, 5}, r) == 5);
    // Interleaved, n > p: 2(p - r - 1) + (m - 1)p + 1 chunks.
    for (int r = 0; r < 4; ++r)
        CHECK(schedule::peak_in_flight({Schedule::interleaved, 4, 2, 8}, r) == 2 * (4 - r - 1) + 4 + 1);
    // Interleaved, n = p: Megatron runs every forward first (all warm-up), so every stage holds all n m chunks.
    for (int r = 0; r < 4; ++r) CHECK(schedule::peak_in_flight({Schedule::interleaved, 4, 2, 4}, r) == 8);
    // First stage's order under the interleaved schedule: p microbatches of chunk 0, then p of chunk 1, ...
    const std::vector<Unit> u = schedule::unit_order({Schedule::interleaved, 2, 2, 4}, 0);
    CHECK(u[0] == Unit{true, 0, 0});
    CHECK(u[1] == Unit{true, 0, 1});
    CHECK(u[2] == Unit{true, 1, 0});
    CHECK(u[3] == Unit{true, 1, 1});
    CHECK(u[4] == Unit{true, 0, 2});
    CHECK(u[5] == Unit{false, 1, 0});
}

TEST_CASE("schedule: overlapped interleaved calls as Megatron-Core posts them, in one order on both ranks of a pair") {
    // PyTorch runs the single isend / irecv ops between two ranks on one NCCL stream and NCCL matches a pair's sends
    // and receives by their order, so both ranks must post a pair's ops in the same order. With p > 2 a pair's
    // stream carries both directions; with p = 2 Megatron-Core puts one direction on the world group (a stream each).
    for (int p = 2; p <= 6; ++p)
        for (int m = 2; m <= 4; ++m)
            for (int k = 1; k <= 3; ++k) {
                const Shape s{Schedule::interleaved, p, m, k * p, true};
                INFO(name(s));
                using Message = std::tuple<bool, int, int>;  // forward, destination virtual stage, microbatch
                // [channel][side]: the messages in the order each side posted its op.
                std::vector<std::array<std::vector<Message>, 2>> posted(static_cast<std::size_t>(p));
                for (int r = 0; r < p; ++r) {
                    const std::vector<Instruction> prog = schedule::stage_program(s, r);
                    const int total = m * s.microbatches, warm = schedule::interleaved_warmup(s, r);
                    const bool steady = warm < total;
                    const int cooldown = 2 * total - warm;  // the index of its first cool-down backward
                    int units = 0;
                    const std::vector<Unit> order = schedule::unit_order(s, r);
                    const Unit first_backward = order[std::size_t(steady ? warm + 1 : warm)];
                    REQUIRE(!first_backward.forward);
                    bool first_backward_received = false;
                    for (std::size_t i = 0; i < prog.size(); ++i) {
                        const Instruction& ins = prog[i];
                        if (ins.kind == Instruction::Kind::unit) {
                            ++units;
                            continue;
                        }
                        bool expect_async = units > 0 && units - 1 < cooldown;  // after a warm-up or steady unit
                        for (int j = 0; j < ins.call.receive_count; ++j) {
                            if (!(ins.call.receives[std::size_t(j)] == first_backward)) continue;
                            first_backward_received = true;
                            // The first backward's receive has a call of its own: right after the last warm-up
                            // forward's exchange, or, with every forward warm-up, blocking before the first backward.
                            CHECK(ins.call.send_count == 0);
                            CHECK(ins.call.receive_count == 1);
                            if (steady) {
                                CHECK(units == warm);
                                CHECK(prog[i - 1].kind == Instruction::Kind::call);
                            } else {
                                expect_async = false;
                                REQUIRE(i + 1 < prog.size());
                                CHECK(prog[i + 1].kind == Instruction::Kind::unit);
                                CHECK(!prog[i + 1].unit.forward);
                            }
                        }
                        CHECK(ins.call.asynchronous == expect_async);
                        auto record = [&](const Unit& u, bool send) {
                            const int v = schedule::virtual_stage(s, r, u.chunk);
                            const Message msg{u.forward, send ? (u.forward ? v + 1 : v - 1) : v, u.microbatch};
                            const int peer = u.forward == send ? (r + 1) % p : (r + p - 1) % p;
                            if (p == 2) {  // a stream per direction: the channel of the sender
                                posted[std::size_t(send ? r : peer)][send ? 0 : 1].push_back(msg);
                            } else {       // a stream per pair: the channel of its lower stage (p - 1 for the wrap)
                                const bool lower = peer == (r + 1) % p;
                                posted[std::size_t(lower ? r : peer)][lower ? 0 : 1].push_back(msg);
                            }
                        };
                        for (int j = 0; j < ins.call.send_count; ++j) record(ins.call.sends[std::size_t(j)], true);
                        for (int j = 0; j < ins.call.receive_count; ++j) record(ins.call.receives[std::size_t(j)], false);
                    }
                    CHECK(first_backward_received == schedule::needs_input(s, r, first_backward));
                }
                for (int c = 0; c < p; ++c) {
                    INFO("channel " << c);
                    CHECK(!posted[std::size_t(c)][0].empty());
                    CHECK(posted[std::size_t(c)][0] == posted[std::size_t(c)][1]);
                }
            }
}

TEST_CASE("schedule: an impossible shape is an error, not a crash") {
    CHECK_THROWS_AS(schedule::unit_order({Schedule::one_f_one_b, 0, 1, 4}, 0), Error);
    CHECK_THROWS_AS(schedule::unit_order({Schedule::one_f_one_b, 2, 1, 4}, 2), Error);
    CHECK_THROWS_AS(schedule::unit_order({Schedule::gpipe, 2, 1, 0}, 0), Error);
}

namespace {

/// A small GPT that every grid point divides: 72 layers split over p x m virtual stages for p <= 4, m <= 3.
Scenario tiny(const Shape& s, int tensor, int data, bool sp, Recompute rc) {
    Scenario sc = strata::testing::table4_case(0);
    sc.name = name(s);
    sc.model.heads = 8;
    sc.model.hidden = 512;
    sc.model.ffn_hidden = 2048;
    sc.model.layers = 72;
    sc.model.seq_len = 512;
    sc.model.vocab = 8192;
    ExecutionSpec& e = sc.execution;
    e.tensor = tensor;
    e.pipeline = s.stages;
    e.data = data;
    e.interleave = s.chunks;
    e.schedule = s.kind;
    e.microbatch = 1;
    e.global_batch = s.microbatches * data;
    e.sequence_parallel = sp;
    e.recompute = rc;
    validate(sc);
    return sc;
}

void check_equal(const Scenario& sc) {
    INFO(sc.name << ", t=" << sc.execution.tensor << ", d=" << sc.execution.data << ", SP=" << sc.execution.sequence_parallel
                 << ", recompute=" << to_string(sc.execution.recompute));
    SimulationDetail detail;
    SimulationOptions opt;
    opt.keep_timeline = false;
    simulate(sc, opt, &detail);
    REQUIRE(detail.stage_peaks.size() == std::size_t(sc.execution.pipeline));
    for (int s = 0; s < sc.execution.pipeline; ++s) {
        INFO("stage " << s);
        const StageMemory a = stage_memory(sc.model, sc.execution, sc.system.device_memory(), s);
        const StagePeak& sim = detail.stage_peaks[std::size_t(s)];
        CHECK(a.total() == sim.total);
        REQUIRE(sim.by_category.size() == kMemoryCategoryCount);
        for (std::uint32_t c = 0; c < kMemoryCategoryCount; ++c) {
            INFO(to_string(static_cast<MemoryCategory>(c)));
            CHECK(a.bytes(static_cast<MemoryCategory>(c)) == sim.by_category[c]);
        }
    }
}

}  // namespace

TEST_CASE("property: analytical stage memory equals the simulated stage peak, every schedule, p, m and n") {
    const Recompute policies[] = {Recompute::none, Recompute::selective, Recompute::full};
    int i = 0;
    for (const Shape& s : grid()) {
        // Vary the other memory-relevant switches along the grid so every combination appears somewhere.
        const Recompute rc = policies[i % 3];
        const bool sp = (i / 3) % 2 == 1;
        const int data = (i / 6) % 2 + 1;
        ++i;
        check_equal(tiny(s, 2, data, sp, rc));
    }
}

TEST_CASE("property: the interleaved n = p case the old analytical model got wrong (8, 8, 7, 5 chunks)") {
    const Shape s{Schedule::interleaved, 4, 2, 4};
    for (const Recompute rc : {Recompute::none, Recompute::full}) {
        const Scenario sc = tiny(s, 2, 1, true, rc);
        check_equal(sc);
        for (int r = 0; r < 4; ++r)
            CHECK(stage_memory(sc.model, sc.execution, sc.system.device_memory(), r).units_in_flight == 8);
    }
}

TEST_CASE("property: the distributed optimizer and fp16 shard and size the states the same in both") {
    Scenario sc = tiny({Schedule::interleaved, 2, 3, 4}, 2, 2, true, Recompute::selective);
    sc.execution.distributed_optimizer = true;
    check_equal(sc);
    sc.execution.precision = Precision::fp16;
    sc.execution.overlap_grad_reduce = true;
    check_equal(sc);
}

TEST_CASE("property: today's model keys (GQA, SwiGLU, RMSNorm, no biases or dropout, RoPE, untied, flash) too") {
    int i = 0;
    for (const Shape& s : {Shape{Schedule::one_f_one_b, 4, 1, 6}, Shape{Schedule::interleaved, 4, 2, 4},
                           Shape{Schedule::interleaved, 2, 3, 6}, Shape{Schedule::gpipe, 3, 1, 2}}) {
        Scenario sc = tiny(s, 2, 2, i % 2 == 0, i % 3 == 0 ? Recompute::selective : Recompute::none);
        sc.model.kv_heads = 2;
        sc.model.mlp = Mlp::swiglu;
        sc.model.norm = Norm::rmsnorm;
        sc.model.linear_bias = false;
        sc.model.dropout = 0;
        sc.model.position_embedding = PositionEmbedding::rope;
        sc.model.tied_embeddings = false;
        sc.execution.attention = i % 2 == 0 ? Attention::flash : Attention::unfused;
        validate(sc);
        check_equal(sc);
        ++i;
    }
}

TEST_CASE("property: uneven pipeline splits (first / last stage layers) hold too") {
    for (const Shape& s : {Shape{Schedule::one_f_one_b, 4, 1, 6}, Shape{Schedule::one_f_one_b, 4, 1, 2},
                           Shape{Schedule::interleaved, 4, 2, 8}, Shape{Schedule::interleaved, 4, 3, 4},
                           Shape{Schedule::gpipe, 4, 1, 3}}) {
        for (const auto& [first, last] : {std::pair{12, 24}, std::pair{6, 0}, std::pair{0, 30}}) {
            Scenario sc = tiny(s, 2, 2, true, Recompute::selective);
            sc.execution.first_stage_layers = first;
            sc.execution.last_stage_layers = last;
            if (find_problem(sc)) continue;  // e.g. 6 layers over interleave 4: not a split
            const int total = [&] {
                int n = 0;
                for (int r = 0; r < 4; ++r) n += sc.execution.layers_on_stage(72, r);
                return n;
            }();
            CHECK(total == 72);
            check_equal(sc);
        }
    }
}

TEST_CASE("uneven split: Megatron's rule, and clear errors for splits that do not add up") {
    Scenario sc = tiny({Schedule::one_f_one_b, 4, 1, 8}, 2, 1, false, Recompute::none);
    sc.execution.first_stage_layers = 12;
    sc.execution.last_stage_layers = 24;
    REQUIRE_FALSE(find_problem(sc));
    CHECK(sc.execution.layers_on_stage(72, 0) == 12);
    CHECK(sc.execution.layers_on_stage(72, 1) == 18);
    CHECK(sc.execution.layers_on_stage(72, 2) == 18);
    CHECK(sc.execution.layers_on_stage(72, 3) == 24);
    sc.execution.last_stage_layers = 0;  // the last stage takes an even share of what is left: 60 / 3
    CHECK(sc.execution.layers_on_stage(72, 3) == 20);
    sc.execution.first_stage_layers = 13;  // 59 over 3 stages
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.first_stage_layers") && Catch::Contains("share them evenly"));
    sc.execution.first_stage_layers = 80;  // more than the model has
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("leave -8 of model.layers (72)"));
    sc.execution.first_stage_layers = 0;
    sc.execution.last_stage_layers = 9;   // 63 over 3: 21 each; with interleave 2 they do not split into chunks
    sc.execution.interleave = 2;
    sc.execution.schedule = Schedule::interleaved;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("divisible by interleave (2)"));
}

TEST_CASE("property: the embedding and the loss counted in the pipeline split hold too") {
    // 70 or 71 layers plus the counted ends: 72 places over the grid's p x m chunks.
    struct Ends { bool embedding, loss; };
    int i = 0;
    for (const Shape& s : {Shape{Schedule::one_f_one_b, 4, 1, 6}, Shape{Schedule::interleaved, 4, 2, 8},
                           Shape{Schedule::interleaved, 4, 3, 4}, Shape{Schedule::interleaved, 2, 3, 4},
                           Shape{Schedule::gpipe, 4, 1, 3}}) {
        for (const Ends ends : {Ends{true, true}, Ends{true, false}, Ends{false, true}}) {
            Scenario sc = tiny(s, 2, 2, true, i % 3 == 2 ? Recompute::full : Recompute::selective);
            sc.model.layers = 72 - int(ends.embedding) - int(ends.loss);
            sc.execution.embedding_in_pipeline_split = ends.embedding;
            sc.execution.loss_in_pipeline_split = ends.loss;
            if (i % 3 == 2) sc.execution.recompute_layers = 2;
            ++i;
            validate(sc);
            int total = 0;
            for (int r = 0; r < s.stages; ++r) total += sc.execution.layers_on_stage(sc.model.layers, r);
            CHECK(total == sc.model.layers);
            check_equal(sc);
        }
    }
}

TEST_CASE("embedding and loss in the split: Megatron-Core's rule, the same as the per-stage split without interleaving") {
    // Llama 3.1 405B as Megatron-Bridge runs it: 126 layers + 2 over 8 x 8 chunks of 2; the first and the last 1.
    Scenario sc = tiny({Schedule::interleaved, 4, 2, 8}, 8, 1, true, Recompute::none);
    sc.model.layers = 126;
    sc.execution.pipeline = 8;
    sc.execution.interleave = 8;
    sc.execution.embedding_in_pipeline_split = true;
    sc.execution.loss_in_pipeline_split = true;
    REQUIRE_FALSE(find_problem(sc));
    CHECK(sc.execution.layers_in_chunk(126, 0) == 1);
    CHECK(sc.execution.layers_in_chunk(126, 1) == 2);
    CHECK(sc.execution.layers_in_chunk(126, 62) == 2);
    CHECK(sc.execution.layers_in_chunk(126, 63) == 1);
    CHECK(sc.execution.layers_on_stage(126, 0) == 15);
    CHECK(sc.execution.layers_on_stage(126, 3) == 16);
    CHECK(sc.execution.layers_on_stage(126, 7) == 15);
    // The first stage holds one layer fewer than the second, the embedding besides.
    const double layer = layer_parameters_per_gpu(sc.model, 8);
    CHECK(parameters_on_stage(sc.model, sc.execution, 1) - parameters_on_stage(sc.model, sc.execution, 0) ==
          Approx(layer - embedding_parameters_per_gpu(sc.model, 8)));

    // Without interleaving the rule is Megatron-LM's per-stage split with one layer fewer at each counted end:
    // the same simulation, to the picosecond and the byte.
    Scenario counted = tiny({Schedule::one_f_one_b, 4, 1, 6}, 2, 1, true, Recompute::selective);
    counted.model.layers = 70;
    Scenario staged = counted;
    counted.execution.embedding_in_pipeline_split = true;
    counted.execution.loss_in_pipeline_split = true;
    staged.execution.first_stage_layers = 17;
    staged.execution.last_stage_layers = 17;
    validate(counted);
    validate(staged);
    SimulationOptions opt;
    opt.keep_timeline = false;
    const IterationResult a = simulate(counted, opt), b = simulate(staged, opt);
    CHECK(a.iteration_time == b.iteration_time);
    CHECK(a.peak_memory == b.peak_memory);
    CHECK(a.first_stage_activation_peak == b.first_stage_activation_peak);

    // Errors name the key and say what would fit.
    sc.model.layers = 125;  // 127 places over 64 chunks
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.account_for_embedding_in_pipeline_split") &&
                                        Catch::Contains("= 127 must be divisible by pipeline x interleave (8 x 8)"));
    sc.model.layers = 62;   // 64 places: one per chunk, none left for the first chunk's layers
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("model chunk 0 would hold no transformer layer"));
    sc.model.layers = 126;
    sc.execution.embedding_in_pipeline_split = false;  // 127 places
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.account_for_loss_in_pipeline_split"));
    staged.execution.loss_in_pipeline_split = true;
    CHECK_THROWS_WITH(validate(staged), Catch::Contains("cannot be combined with first_stage_layers"));
}

TEST_CASE("embedding and loss in the split: the YAML keys, and a bad one at its file and line") {
    const std::string head = "model: model-small.yaml\nsystem: system-small.yaml\n";
    const auto load = [&](const std::string& exec) {
        return load_experiment_text(head + "execution: {tensor: 1, pipeline: 2, interleave: 3, recompute: none, microbatch: 1, "
                                           "global_batch: 4" + exec + "}\n",
                                    strata::testing::data_path("valid/x.yaml"));
    };
    // The small model's 8 layers cannot be split over 6 chunks; counting both ends (10 places) cannot either.
    CHECK_THROWS_WITH(load(""), Catch::Contains("divisible by pipeline x interleave"));
    CHECK_THROWS_WITH(load(", account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true"),
                      Catch::Contains("x.yaml:3:") && Catch::Contains("= 10 must be divisible"));
    // 8 + 1 + 1 places over 2 stages of 5: 4 layers and the embedding, 4 layers and the loss.
    const Experiment ok = load_experiment_text(head + "execution: {tensor: 1, pipeline: 2, recompute: none, microbatch: 1, "
                                                      "global_batch: 4, account_for_loss_in_pipeline_split: true, "
                                                      "account_for_embedding_in_pipeline_split: true}\n",
                                               strata::testing::data_path("valid/x.yaml"));
    const ExecutionSpec& e = ok.cases.at(0).execution;
    CHECK(e.embedding_in_pipeline_split);
    CHECK(e.loss_in_pipeline_split);
    CHECK(e.layers_on_stage(8, 1) == 4);
    CHECK(e.layers_on_stage(8, 0) == 4);
}

TEST_CASE("property: partial full recompute (recompute_layers, uniform and block) holds too") {
    for (const Shape& s : {Shape{Schedule::one_f_one_b, 4, 1, 6}, Shape{Schedule::interleaved, 4, 2, 8}}) {
        for (const RecomputeMethod method : {RecomputeMethod::uniform, RecomputeMethod::block}) {
            for (const int n : {1, 3, 9}) {
                Scenario sc = tiny(s, 2, 2, true, Recompute::full);
                sc.execution.recompute_layers = n;
                sc.execution.recompute_method = method;
                sc.execution.first_stage_layers = 18;  // with an uneven split, stages differ
                validate(sc);
                check_equal(sc);
            }
        }
    }
}

TEST_CASE("property: context parallelism holds too") {
    int i = 0;
    for (const Shape& s : {Shape{Schedule::one_f_one_b, 2, 1, 4}, Shape{Schedule::interleaved, 2, 2, 4},
                           Shape{Schedule::gpipe, 3, 1, 2}}) {
        Scenario sc = tiny(s, 2, 2, i % 2 == 0, i == 1 ? Recompute::selective : Recompute::none);
        sc.model.kv_heads = 4;
        sc.model.dropout = 0;
        sc.execution.attention = Attention::flash;
        sc.execution.context = 2;
        sc.execution.distributed_optimizer = i == 2;
        validate(sc);
        check_equal(sc);
        ++i;
    }
}

TEST_CASE("property: selective recompute of the norms and the MLP holds too") {
    for (const Shape& s : {Shape{Schedule::one_f_one_b, 4, 1, 6}, Shape{Schedule::interleaved, 2, 3, 4}}) {
        Scenario sc = tiny(s, 2, 2, true, Recompute::selective);
        sc.execution.recompute_modules = {true, true, true};
        check_equal(sc);
        sc.execution.recompute_modules = {false, false, true};
        sc.execution.attention = Attention::flash;
        check_equal(sc);
    }
}
