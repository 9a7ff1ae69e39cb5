// Tests of the scenario loader (load_experiment, validate) and the device-profile loader
// (load_device_profile): the shipped paper scenarios, the override rules of the experiment format, and
// located error messages for malformed input. Every malformed fixture lives in tests/data/bad/ (files it
// references in tests/data/parts/); each test checks the exact `file:line:col:` prefix, the key and what
// was expected.
#include "strata/errors.hpp"
#include "strata/profile.hpp"
#include "strata/scenario.hpp"

#include "fixtures.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>

using namespace strata;
using Catch::Contains;
using Catch::StartsWith;

namespace {

using testing::data_path;
using testing::source_path;

/// `<tests/data/rel>:line:col: `, the prefix every located message starts with.
std::string at(const std::string& rel, int line, int col) {
    return data_path(rel) + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
}

/// The message of the InputError thrown by loading tests/data/`rel`. Fails the test when the file loads;
/// any other exception type propagates and fails the test too.
std::string load_error(const std::string& rel) {
    try {
        (void)load_experiment(data_path(rel));
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("loading " << rel << " did not throw InputError");
    return {};
}

std::string profile_error(const std::string& rel) {
    try {
        (void)load_device_profile(data_path(rel));
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("loading profile " << rel << " did not throw InputError");
    return {};
}

const Scenario& find_case(const Experiment& ex, const std::string& name) {
    for (const Scenario& sc : ex.cases) {
        if (sc.name == name) return sc;
    }
    FAIL("no case named '" << name << "' in " << ex.name);
    return ex.cases.front();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Shipped scenarios
// ---------------------------------------------------------------------------------------------------

TEST_CASE("table2.yaml loads its 24 cases with the Table 3 models", "[scenario]") {
    const Experiment ex = load_experiment(source_path("scenarios/paper/table2.yaml"));
    CHECK(ex.name == "Table 2 - activation memory per layer");
    REQUIRE(ex.cases.size() == 24);

    std::set<std::string> names;
    for (const Scenario& sc : ex.cases) {
        names.insert(sc.name);
        CHECK(sc.model.seq_len == 2048);
        CHECK(sc.model.vocab == 51200);
        CHECK(sc.model.ffn_hidden == 4 * sc.model.hidden);  // default 4h
        CHECK(sc.model.tied_embeddings);
        CHECK(sc.system.name == "selene-a100");
        CHECK(sc.system.device.name == "a100-sxm4-80gb");
        CHECK(sc.execution.schedule == Schedule::one_f_one_b);
        CHECK(sc.execution.data == 1);
        CHECK(sc.execution.interleave == 1);
        CHECK_NOTHROW(validate(sc));
    }
    CHECK(names.size() == 24);

    CHECK(ex.cases.front().name == "22B no parallelism");
    CHECK_THAT(ex.cases.front().source, Contains("table2.yaml:8:5"));

    const Scenario& gpt3 = find_case(ex, "175B tensor parallel (baseline)");
    CHECK(gpt3.model.name == "gpt3-175b");
    CHECK(gpt3.model.heads == 96);
    CHECK(gpt3.model.hidden == 12288);
    CHECK(gpt3.model.layers == 96);
    CHECK(gpt3.model.ffn_hidden == 49152);
    CHECK(gpt3.execution.tensor == 8);
    CHECK(gpt3.execution.pipeline == 8);
    CHECK(gpt3.execution.microbatch == 1);
    CHECK(gpt3.execution.global_batch == 8);
    CHECK(gpt3.execution.gpus() == 64);
    CHECK(gpt3.execution.microbatches() == 8);
    CHECK_FALSE(gpt3.execution.sequence_parallel);
    CHECK(gpt3.execution.recompute == Recompute::none);

    const Scenario& mtnlg = find_case(ex, "530B tensor + sequence parallel + selective recompute");
    CHECK(mtnlg.model.heads == 128);
    CHECK(mtnlg.model.layers == 105);
    CHECK(mtnlg.execution.pipeline == 35);
    CHECK(mtnlg.execution.sequence_parallel);
    CHECK(mtnlg.execution.recompute == Recompute::selective);

    const Scenario& onet = find_case(ex, "1T full activation recompute");
    CHECK(onet.model.heads == 160);
    CHECK(onet.model.hidden == 25600);
    CHECK(onet.execution.pipeline == 64);
    CHECK(onet.execution.recompute == Recompute::full);

    const Scenario& small = find_case(ex, "22B no parallelism");
    CHECK(small.execution.tensor == 1);
    CHECK(small.execution.pipeline == 1);
    CHECK(small.execution.microbatch == 4);
}

TEST_CASE("table2.yaml resolves the Selene system and the A100 profile", "[scenario]") {
    const Experiment ex = load_experiment(source_path("scenarios/paper/table2.yaml"));
    const SystemSpec& s = ex.cases.at(0).system;
    CHECK(s.gpus_per_node == 8);
    CHECK(s.device.kind == "analytical");
    CHECK(s.device.peak_flops == Approx(312e12));
    CHECK(s.device.sm_count == 108);
    CHECK(s.device.gemm_tile_m == 256);
    CHECK(s.device.gemm_tile_n == 128);
    CHECK_THAT(s.device.file, Contains("a100-sxm4-80gb.yaml"));
    // memory_capacity_bytes and the intra-node figures default to the device profile's.
    CHECK(s.memory_capacity.value == 85899345920LL);
    CHECK(s.memory_capacity.value == s.device.memory_capacity_bytes);
    CHECK(s.network.nvlink_bandwidth.value == Approx(230e9));
    CHECK(s.network.collective_step_latency_intra.us() == Approx(s.device.intra_node_step_latency_us));
    CHECK(s.network.rails == 8);
    CHECK(s.network.nic_bandwidth.value == Approx(24e9));
    CHECK(s.network.nodes_per_leaf == 20);
    CHECK(s.network.oversubscription == 1.0);
    CHECK(s.network.tiers == 2);
    CHECK(s.network.routing == Routing::hash);
    CHECK(s.network.spines_per_rail == 0);
    CHECK(s.network.switch_latency.ps() > 0);
    CHECK(s.network.p2p_latency.ps() > 0);
    CHECK(s.network.hierarchical_collectives);
    CHECK(s.optimizer.bytes_per_param_step == 42);
    CHECK(s.optimizer.bytes_per_param_step_fp16 == 54);
    CHECK(s.optimizer.bytes_per_param(Precision::fp16) == 54);
    CHECK(s.optimizer.bytes_per_param(Precision::bf16) == 42);
    CHECK(s.optimizer.fixed_overhead.ps() > 0);
}

TEST_CASE("table4.yaml: experiment-level parts plus per-case execution overrides", "[scenario]") {
    const Experiment ex = load_experiment(source_path("scenarios/paper/table4.yaml"));
    CHECK(ex.name == "Table 4 - per-layer time, 22B");
    REQUIRE(ex.cases.size() == 5);

    struct Expected {
        const char* name;
        bool sp;
        Recompute recompute;
    };
    const Expected expected[] = {{"baseline no recompute", false, Recompute::none},
                                 {"sequence parallelism", true, Recompute::none},
                                 {"baseline with recompute", false, Recompute::full},
                                 {"selective recompute", false, Recompute::selective},
                                 {"selective + sequence", true, Recompute::selective}};
    for (std::size_t i = 0; i < 5; ++i) {
        const Scenario& sc = ex.cases[i];
        INFO(sc.name);
        CHECK(sc.name == expected[i].name);
        CHECK(sc.execution.sequence_parallel == expected[i].sp);
        CHECK(sc.execution.recompute == expected[i].recompute);
        // Inherited from the experiment level.
        CHECK(sc.model.name == "gpt-22b");
        CHECK(sc.model.heads == 64);
        CHECK(sc.model.hidden == 6144);
        CHECK(sc.model.layers == 48);
        CHECK(sc.model.ffn_hidden == 4 * 6144);
        CHECK(sc.execution.tensor == 8);
        CHECK(sc.execution.pipeline == 1);
        CHECK(sc.execution.data == 1);
        CHECK(sc.execution.microbatch == 4);
        CHECK(sc.execution.global_batch == 4);
        CHECK(sc.execution.precision == Precision::bf16);
        CHECK(sc.system.name == "selene-a100");
    }
}

// ---------------------------------------------------------------------------------------------------
// Override rules (tests/data/valid/experiment.yaml)
// ---------------------------------------------------------------------------------------------------

TEST_CASE("experiment-level parts and defaults reach a case without overrides", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    CHECK(ex.name == "override rules");
    REQUIRE(ex.cases.size() == 8);
    const Scenario& sc = find_case(ex, "inherits");
    CHECK_THAT(sc.source, Contains("experiment.yaml:8:5"));
    // `file:` + override at the experiment level: model-small.yaml with layers replaced.
    CHECK(sc.model.name == "small");
    CHECK(sc.model.layers == 16);
    CHECK(sc.model.heads == 8);
    CHECK(sc.model.hidden == 512);
    CHECK(sc.model.ffn_hidden == 2048);  // 4h default
    CHECK(sc.model.tied_embeddings);
    // Defaults of the execution part.
    CHECK(sc.execution.tensor == 2);
    CHECK(sc.execution.pipeline == 2);
    CHECK(sc.execution.data == 1);
    CHECK(sc.execution.interleave == 1);
    CHECK(sc.execution.schedule == Schedule::one_f_one_b);
    CHECK_FALSE(sc.execution.sequence_parallel);
    CHECK(sc.execution.recompute == Recompute::selective);
    CHECK_FALSE(sc.execution.distributed_optimizer);
    CHECK_FALSE(sc.execution.overlap_grad_reduce);
    CHECK(sc.execution.gradient_accumulation_fusion);
    CHECK(sc.execution.async_tp_comm);
    CHECK(sc.execution.precision == Precision::bf16);
    // System file with its profile (relative to the system file) and profile-derived defaults.
    CHECK(sc.system.name == "test-cluster");
    CHECK(sc.system.device.name == "test-gpu");
    CHECK(sc.system.device.gemm_tile_m == 256);
    CHECK(sc.system.device.gemm_tile_n == 128);
    CHECK(sc.system.memory_capacity.value == 17179869184LL);
    CHECK(sc.system.memory_reserved.value == 0);  // not given: nothing reserved
    CHECK(sc.system.network.nvlink_bandwidth.value == Approx(100e9));
    CHECK(sc.system.network.collective_step_latency_intra.us() == Approx(2.0));
    CHECK(sc.system.network.rails == 4);
    CHECK(sc.system.network.oversubscription == 1.0);
    CHECK(sc.system.network.tiers == 2);
    CHECK(sc.system.network.hierarchical_collectives);
    CHECK(sc.system.optimizer.bytes_per_param_step == 40);
    CHECK(sc.system.optimizer.bytes_per_param_step_fp16 == 40);  // defaults to the bf16 figure
    CHECK(sc.system.optimizer.fixed_overhead.ps() == 0);
}

TEST_CASE("an inline override in a case wins over the experiment-level value", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "inline override");
    CHECK(sc.execution.tensor == 4);              // case value
    CHECK(sc.execution.sequence_parallel);        // case value
    CHECK(sc.execution.pipeline == 2);            // experiment value kept
    CHECK(sc.execution.recompute == Recompute::selective);
    CHECK(sc.model.layers == 16);
    // A key the experiment level does not set is added for this case only.
    CHECK_FALSE(find_case(ex, "inherits").execution.sequence_parallel);
    CHECK_FALSE(find_case(ex, "path replaces model").execution.sequence_parallel);
}

// Regression: YAML::Node::operator= writes through a node shared with the experiment-level part, so an
// override assigned that way leaked into every later case ("inline override" sets tensor: 4; the later
// cases must still see the experiment's tensor: 2).
TEST_CASE("a case override of an experiment-level key does not leak into later cases", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    CHECK(find_case(ex, "inline override").execution.tensor == 4);
    CHECK(find_case(ex, "path replaces model").execution.tensor == 2);
    CHECK(find_case(ex, "file plus override").execution.tensor == 2);
    CHECK(find_case(ex, "scientific notation").execution.tensor == 2);
    // global_batch: 1.6e1 in the last case must not change the experiment's 8 for the cases before it
    // (they are already built), nor its own value.
    CHECK(find_case(ex, "system override").execution.global_batch == 8);
    CHECK(find_case(ex, "scientific notation").execution.global_batch == 16);
}

TEST_CASE("a case giving a path replaces the whole part", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "path replaces model");
    CHECK(sc.model.name == "other");
    CHECK(sc.model.layers == 4);  // the experiment-level `layers: 16` override is gone with the part
    CHECK(sc.model.heads == 16);
    CHECK(sc.model.hidden == 1024);
    CHECK(sc.model.seq_len == 512);
    CHECK(sc.model.vocab == 2048);
    CHECK(sc.model.ffn_hidden == 2816);  // given explicitly, not 4h
    CHECK_FALSE(sc.model.tied_embeddings);
}

TEST_CASE("`file:` plus overrides in a case loads the file then overrides keys", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "file plus override");
    CHECK(sc.model.name == "other");
    CHECK(sc.model.heads == 8);       // override
    CHECK(sc.model.hidden == 1024);   // from the file
    CHECK(sc.model.layers == 4);      // from the file, not the experiment's 16
    CHECK(sc.model.ffn_hidden == 2816);
}

TEST_CASE("schedule defaults to interleaved when interleave > 1", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "interleaved by default");
    CHECK(sc.execution.interleave == 2);
    CHECK(sc.execution.schedule == Schedule::interleaved);
    CHECK(sc.execution.pipeline == 2);
    CHECK(sc.execution.microbatches() == 8);
    CHECK_NOTHROW(validate(sc));
}

TEST_CASE("nested system overrides replace single network keys", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "system override");
    CHECK(sc.system.gpus_per_node == 4);
    CHECK(sc.system.network.oversubscription == 2.0);
    CHECK(sc.system.network.tiers == 3);
    CHECK(sc.system.network.routing == Routing::adaptive);
    CHECK(sc.system.network.rails == 4);                 // other network keys kept from the file
    CHECK(sc.system.network.nodes_per_leaf == 16);
    CHECK(sc.system.name == "test-cluster");
    CHECK(sc.system.device.name == "test-gpu");
}

TEST_CASE("a device_profile override is resolved relative to the file that names it", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "profile override");
    CHECK(sc.system.name == "test-cluster");
    CHECK(sc.system.device.name == "a100-sxm4-80gb");
    CHECK(sc.system.memory_capacity.value == 85899345920LL);        // now the A100's default
    CHECK(sc.system.network.nvlink_bandwidth.value == Approx(230e9));
}

TEST_CASE("integers in scientific notation, choices and YAML booleans", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/experiment.yaml"));
    const Scenario& sc = find_case(ex, "scientific notation");
    CHECK(sc.execution.global_batch == 16);  // 1.6e1
    CHECK(sc.execution.precision == Precision::fp16);
    CHECK(sc.execution.distributed_optimizer);  // yes
    CHECK_FALSE(sc.execution.gradient_accumulation_fusion);
    CHECK_FALSE(sc.execution.async_tp_comm);
}

TEST_CASE("an experiment without cases is a single case named after the file", "[scenario]") {
    const Experiment ex = load_experiment(data_path("valid/single.yaml"));
    CHECK(ex.name == "single");
    CHECK(ex.file == data_path("valid/single.yaml"));
    REQUIRE(ex.cases.size() == 1);
    const Scenario& sc = ex.cases[0];
    CHECK(sc.name == "single");
    CHECK_THAT(sc.source, StartsWith(data_path("valid/single.yaml") + ":2:1"));
    CHECK(sc.model.name == "small");
    CHECK(sc.model.layers == 8);
    CHECK(sc.execution.tensor == 8);
    CHECK(sc.execution.data == 4);
    CHECK(sc.execution.gpus() == 32);
    CHECK(sc.execution.microbatches() == 2);
    CHECK(sc.execution.recompute == Recompute::full);
    CHECK(sc.execution.schedule == Schedule::one_f_one_b);
}

TEST_CASE("to_string of the enums matches the YAML spellings", "[scenario]") {
    CHECK(std::string(to_string(Recompute::none)) == "none");
    CHECK(std::string(to_string(Recompute::selective)) == "selective");
    CHECK(std::string(to_string(Recompute::full)) == "full");
    CHECK(std::string(to_string(Schedule::one_f_one_b)) == "1f1b");
    CHECK(std::string(to_string(Schedule::interleaved)) == "interleaved");
    CHECK(std::string(to_string(Schedule::gpipe)) == "gpipe");
    CHECK(std::string(to_string(Precision::bf16)) == "bf16");
    CHECK(std::string(to_string(Precision::fp16)) == "fp16");
}

TEST_CASE("validate() rejects a scenario made inconsistent after loading", "[scenario]") {
    const Experiment ex = load_experiment(source_path("scenarios/paper/table4.yaml"));
    Scenario sc = ex.cases.at(0);
    REQUIRE_NOTHROW(validate(sc));
    sc.execution.tensor = 3;
    REQUIRE_THROWS_AS(validate(sc), InputError);
    REQUIRE_THROWS_WITH(validate(sc), StartsWith(sc.source + ": execution.tensor: tensor (3) must divide model.heads (64)"));

    sc = ex.cases.at(0);
    sc.execution.schedule = Schedule::gpipe;
    sc.execution.interleave = 2;
    REQUIRE_THROWS_WITH(validate(sc), Contains("execution.interleave: interleave = 2 needs schedule: interleaved (got gpipe)"));
}

// ---------------------------------------------------------------------------------------------------
// Malformed scenarios: unknown keys
// ---------------------------------------------------------------------------------------------------

TEST_CASE("unknown key in the model part names it and suggests the closest key", "[scenario][errors]") {
    const std::string msg = load_error("bad/unknown_model_key.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/unknown_model_key.yaml", 6, 3)));
    CHECK_THAT(msg, Contains("unknown key 'hiden' in model."));
    CHECK_THAT(msg, Contains("Did you mean 'hidden'?"));
    CHECK_THAT(msg, Contains("Valid keys: name, heads, hidden, layers, seq_len, vocab, ffn_hidden, tied_embeddings, kv_heads, mlp, norm, "
                            "linear_bias, dropout, position_embedding, description."));
}

TEST_CASE("unknown key in the execution part", "[scenario][errors]") {
    const std::string msg = load_error("bad/unknown_execution_key.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/unknown_execution_key.yaml", 9, 3)));
    CHECK_THAT(msg, Contains("unknown key 'tensr' in execution."));
    CHECK_THAT(msg, Contains("Did you mean 'tensor'?"));
    CHECK_THAT(msg, Contains("Valid keys: tensor, pipeline, data, interleave"));
}

TEST_CASE("unknown nested key in the system part is reported with its dotted name", "[scenario][errors]") {
    const std::string msg = load_error("bad/unknown_system_key.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/unknown_system_key.yaml", 8, 5)));
    CHECK_THAT(msg, Contains("unknown key 'network.rail' in system."));
    CHECK_THAT(msg, Contains("Did you mean 'network.rails'?"));
    CHECK_THAT(msg, Contains("network.oversubscription"));
}

TEST_CASE("unknown top-level key in the experiment", "[scenario][errors]") {
    const std::string msg = load_error("bad/unknown_experiment_key.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/unknown_experiment_key.yaml", 3, 1)));
    CHECK_THAT(msg, Contains("unknown key 'modle' in experiment."));
    CHECK_THAT(msg, Contains("Did you mean 'model'?"));
    CHECK_THAT(msg, Contains("Valid keys: name, description, model, execution, system, cases, sweep."));
}

TEST_CASE("unknown key in a case names the case index", "[scenario][errors]") {
    const std::string msg = load_error("bad/unknown_case_key.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/unknown_case_key.yaml", 9, 5)));
    CHECK_THAT(msg, Contains("unknown key 'exectuion' in cases[1]."));
    CHECK_THAT(msg, Contains("Did you mean 'execution'?"));
    CHECK_THAT(msg, Contains("Valid keys: name, description, model, execution, system."));
}

// ---------------------------------------------------------------------------------------------------
// Missing required keys
// ---------------------------------------------------------------------------------------------------

TEST_CASE("missing 'heads' in a referenced model file points at that file", "[scenario][errors]") {
    const std::string msg = load_error("bad/missing_heads.yaml");
    CHECK_THAT(msg, StartsWith(at("parts/model-no-heads.yaml", 2, 1)));
    CHECK_THAT(msg, Contains("model: missing required key 'heads' (expected an integer in [1, 65536])"));
}

TEST_CASE("missing 'tensor' in an inline execution part", "[scenario][errors]") {
    const std::string msg = load_error("bad/missing_tensor.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/missing_tensor.yaml", 2, 1)));
    CHECK_THAT(msg, Contains("execution: missing required key 'tensor' (expected an integer in [1, 65536])"));
}

TEST_CASE("missing 'recompute' lists the valid choices", "[scenario][errors]") {
    const std::string msg = load_error("bad/missing_recompute.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/missing_recompute.yaml", 2, 1)));
    CHECK_THAT(msg, Contains("execution: missing required key 'recompute' (expected one of: none, selective, full)"));
}

TEST_CASE("missing 'device_profile' in a referenced system file", "[scenario][errors]") {
    const std::string msg = load_error("bad/missing_device_profile.yaml");
    CHECK_THAT(msg, StartsWith(at("parts/system-no-profile.yaml", 2, 1)));
    CHECK_THAT(msg, Contains("system: missing required key 'device_profile' (expected a string)"));
}

TEST_CASE("a case without a name", "[scenario][errors]") {
    const std::string msg = load_error("bad/case_without_name.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/case_without_name.yaml", 8, 5)));
    CHECK_THAT(msg, Contains("cases[1]: missing required key 'name' (a string)"));
}

// ---------------------------------------------------------------------------------------------------
// Wrong types
// ---------------------------------------------------------------------------------------------------

TEST_CASE("a string where an integer is expected", "[scenario][errors]") {
    const std::string msg = load_error("bad/string_for_int.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/string_for_int.yaml", 5, 11)));
    CHECK_THAT(msg, Contains("model.layers: expected an integer in [1, 65536], got 'many'"));
}

TEST_CASE("a list where an integer is expected", "[scenario][errors]") {
    const std::string msg = load_error("bad/list_for_int.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/list_for_int.yaml", 5, 11)));
    CHECK_THAT(msg, Contains("execution.tensor: expected an integer in [1, 65536], got a list"));
}

TEST_CASE("a fractional number where an integer is expected", "[scenario][errors]") {
    const std::string msg = load_error("bad/float_for_int.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/float_for_int.yaml", 7, 15)));
    CHECK_THAT(msg, Contains("execution.microbatch: expected an integer in [1, 1048576], got '1.5'"));
}

TEST_CASE("a non-boolean where true/false is expected", "[scenario][errors]") {
    const std::string msg = load_error("bad/non_bool.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/non_bool.yaml", 10, 22)));
    CHECK_THAT(msg, Contains("execution.sequence_parallel: expected true or false, got 'maybe'"));
}

TEST_CASE("a wrong value inside a referenced model file names that file", "[scenario][errors]") {
    const std::string msg = load_error("bad/bad_model_file.yaml");
    CHECK_THAT(msg, StartsWith(at("parts/model-bad-vocab.yaml", 7, 8)));
    CHECK_THAT(msg, Contains("model.vocab: expected an integer in [1, 67108864], got 'fifty thousand'"));
}

TEST_CASE("a part that is neither a path nor a mapping", "[scenario][errors]") {
    const std::string msg = load_error("bad/part_is_list.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/part_is_list.yaml", 3, 8)));
    CHECK_THAT(msg, Contains("model: expected a file path or a mapping of keys"));
}

// ---------------------------------------------------------------------------------------------------
// Out of range
// ---------------------------------------------------------------------------------------------------

TEST_CASE("tensor 0 is out of range", "[scenario][errors]") {
    const std::string msg = load_error("bad/tensor_zero.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/tensor_zero.yaml", 5, 11)));
    CHECK_THAT(msg, Contains("execution.tensor: expected an integer in [1, 65536], got '0'"));
}

TEST_CASE("negative layers in a case override point at the case line", "[scenario][errors]") {
    const std::string msg = load_error("bad/negative_layers.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/negative_layers.yaml", 9, 21)));
    CHECK_THAT(msg, Contains("model.layers: expected an integer in [1, 65536], got '-4'"));
}

TEST_CASE("a runtime reserve as large as the device memory is out of range", "[scenario][errors]") {
    const std::string msg = load_error("bad/reserved_over_capacity.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/reserved_over_capacity.yaml", 7, 26)));
    CHECK_THAT(msg, Contains("system.memory_reserved_bytes: expected an integer in [0, 17179869183]"));
}

TEST_CASE("async_tp_comm must be a boolean", "[scenario][errors]") {
    const std::string msg = load_error("bad/async_not_bool.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/async_not_bool.yaml", 4, 101)));
    CHECK_THAT(msg, Contains("execution.async_tp_comm: expected true or false, got 'sometimes'"));
}

TEST_CASE("oversubscription below 1 is out of range", "[scenario][errors]") {
    const std::string msg = load_error("bad/oversubscription.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/oversubscription.yaml", 8, 23)));
    CHECK_THAT(msg, Contains("system.network.oversubscription: expected a number in [1, 64], got '0.5'"));
}

// ---------------------------------------------------------------------------------------------------
// Invalid choices
// ---------------------------------------------------------------------------------------------------

TEST_CASE("recompute: partial lists the valid choices", "[scenario][errors]") {
    const std::string msg = load_error("bad/recompute_partial.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/recompute_partial.yaml", 9, 14)));
    CHECK_THAT(msg, Contains("execution.recompute: 'partial' is not valid; expected one of: none, selective, full"));
    CHECK_THAT(msg, !Contains("did you mean"));
}

TEST_CASE("a misspelt recompute choice gets a suggestion", "[scenario][errors]") {
    const std::string msg = load_error("bad/recompute_typo.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/recompute_typo.yaml", 4, 80)));
    CHECK_THAT(msg, Contains("execution.recompute: 'selectve' is not valid; expected one of: none, selective, full"));
    CHECK_THAT(msg, Contains("(did you mean 'selective'?)"));
}

TEST_CASE("schedule: zigzag lists the valid schedules", "[scenario][errors]") {
    const std::string msg = load_error("bad/schedule_zigzag.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/schedule_zigzag.yaml", 10, 13)));
    CHECK_THAT(msg, Contains("execution.schedule: 'zigzag' is not valid; expected one of: 1f1b, interleaved, gpipe"));
}

TEST_CASE("network.routing: ecmp lists the valid choices", "[scenario][errors]") {
    const std::string msg = load_error("bad/routing_ecmp.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/routing_ecmp.yaml", 13, 22)));
    CHECK_THAT(msg, Contains("network.routing: 'ecmp' is not valid; expected one of: hash, adaptive"));
}

TEST_CASE("gradient_average: mean lists the valid choices", "[scenario][errors]") {
    const std::string msg = load_error("bad/gradient_average_mean.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/gradient_average_mean.yaml", 11, 21)));
    CHECK_THAT(msg, Contains("execution.gradient_average: 'mean' is not valid; expected one of: scale, scale_always, in_collective"));
}

// ---------------------------------------------------------------------------------------------------
// Inconsistent sizes (located at the offending key, naming the case)
// ---------------------------------------------------------------------------------------------------

TEST_CASE("hidden not divisible by heads", "[scenario][errors]") {
    const std::string msg = load_error("bad/hidden_heads.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/hidden_heads.yaml", 5, 3)));
    CHECK_THAT(msg, Contains("model.hidden: hidden (500) must be divisible by heads (8)"));
    CHECK_THAT(msg, Contains("(case 'hidden vs heads' at " + data_path("bad/hidden_heads.yaml") + ":2:1)"));
}

TEST_CASE("heads not divisible by tensor", "[scenario][errors]") {
    const std::string msg = load_error("bad/heads_tensor.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/heads_tensor.yaml", 5, 3)));
    CHECK_THAT(msg, Contains("execution.tensor: tensor (4) must divide model.heads (6)"));
    CHECK_THAT(msg, Contains("case 'heads vs tensor'"));
}

TEST_CASE("vocab not divisible by tensor suggests padding", "[scenario][errors]") {
    const std::string msg = load_error("bad/vocab_tensor.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/vocab_tensor.yaml", 4, 13)));
    CHECK_THAT(msg, Contains("execution.tensor: tensor (8) must divide model.vocab (1001); pad the vocabulary"));
}

TEST_CASE("layers not divisible by pipeline", "[scenario][errors]") {
    const std::string msg = load_error("bad/layers_pipeline.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/layers_pipeline.yaml", 6, 3)));
    CHECK_THAT(msg, Contains("execution.pipeline: model.layers (8) must be divisible by pipeline x interleave (3 x 1)"));
}

TEST_CASE("layers not divisible by pipeline x interleave", "[scenario][errors]") {
    const std::string msg = load_error("bad/layers_interleave.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/layers_interleave.yaml", 6, 3)));
    CHECK_THAT(msg, Contains("execution.pipeline: model.layers (8) must be divisible by pipeline x interleave (2 x 3)"));
}

TEST_CASE("global_batch not divisible by microbatch x data", "[scenario][errors]") {
    const std::string msg = load_error("bad/global_batch.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/global_batch.yaml", 9, 3)));
    CHECK_THAT(msg, Contains("execution.global_batch: global_batch (10) must be divisible by microbatch x data (2 x 3)"));
}

TEST_CASE("sequence parallelism needs seq_len divisible by tensor", "[scenario][errors]") {
    const std::string msg = load_error("bad/sequence_parallel.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/sequence_parallel.yaml", 10, 3)));
    CHECK_THAT(msg, Contains("execution.sequence_parallel: sequence parallelism needs model.seq_len (100) divisible by tensor (8)"));
}

TEST_CASE("interleave > 1 with schedule 1f1b", "[scenario][errors]") {
    const std::string msg = load_error("bad/interleave_1f1b.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/interleave_1f1b.yaml", 7, 3)));
    CHECK_THAT(msg, Contains("execution.interleave: interleave = 2 needs schedule: interleaved (got 1f1b)"));
}

TEST_CASE("interleaved schedule with microbatches not a multiple of pipeline", "[scenario][errors]") {
    const std::string msg = load_error("bad/interleaved_microbatches.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/interleaved_microbatches.yaml", 9, 3)));
    CHECK_THAT(msg, Contains("execution.global_batch: the interleaved schedule needs the number of microbatches"));
    CHECK_THAT(msg, Contains("= 3) to be a multiple of pipeline (2)"));
}

TEST_CASE("tensor and gpus_per_node must divide one another", "[scenario][errors]") {
    const std::string msg = load_error("bad/tensor_gpus_per_node.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/tensor_gpus_per_node.yaml", 5, 3)));
    CHECK_THAT(msg, Contains("execution.tensor: tensor (4) and system.gpus_per_node (6) must divide one another"));
}

// ---------------------------------------------------------------------------------------------------
// Files: missing, directories, syntax, empty, wrong top-level shape
// ---------------------------------------------------------------------------------------------------

TEST_CASE("a missing referenced file names the path and where it was referenced", "[scenario][errors]") {
    const std::string msg = load_error("bad/missing_file.yaml");
    CHECK_THAT(msg, Contains("no-such-model.yaml: file not found"));
    CHECK_THAT(msg, Contains("(referenced as model at " + data_path("bad/missing_file.yaml") + ":9:12)"));
}

TEST_CASE("a directory where a file is expected", "[scenario][errors]") {
    const std::string msg = load_error("bad/directory.yaml");
    CHECK_THAT(msg, Contains("parts: is a directory, expected a YAML file"));
    CHECK_THAT(msg, Contains("(referenced as system at " + data_path("bad/directory.yaml") + ":5:9)"));
}

TEST_CASE("a missing experiment file", "[scenario][errors]") {
    const std::string msg = load_error("bad/does-not-exist.yaml");
    CHECK(msg == data_path("bad/does-not-exist.yaml") + ": file not found");
}

TEST_CASE("an experiment path that is a directory", "[scenario][errors]") {
    const std::string msg = load_error("bad");
    CHECK(msg == data_path("bad") + ": is a directory, expected a YAML file");
}

TEST_CASE("a YAML syntax error (unclosed flow mapping) is located", "[scenario][errors]") {
    const std::string msg = load_error("bad/syntax_error.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/syntax_error.yaml", 5, 7)));
    CHECK_THAT(msg, Contains("YAML syntax error: end of map flow not found"));
}

TEST_CASE("an empty file", "[scenario][errors]") {
    const std::string msg = load_error("bad/empty.yaml");
    CHECK(msg == at("bad/empty.yaml", 1, 1) + "the file is empty, expected a YAML mapping");
}

TEST_CASE("a top-level list instead of a mapping", "[scenario][errors]") {
    const std::string msg = load_error("bad/top_level_list.yaml");
    CHECK(msg == at("bad/top_level_list.yaml", 2, 1) + "expected a YAML mapping (key: value lines)");
}

// ---------------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------------

TEST_CASE("duplicate case names point at both cases", "[scenario][errors]") {
    const std::string msg = load_error("bad/duplicate_case.yaml");
    CHECK_THAT(msg, StartsWith(at("bad/duplicate_case.yaml", 10, 11)));
    CHECK_THAT(msg, Contains("cases[2].name: duplicate case name 'same'"));
    CHECK_THAT(msg, Contains("(first at " + data_path("bad/duplicate_case.yaml") + ":7:5)"));
}

TEST_CASE("cases that are not a list", "[scenario][errors]") {
    const std::string msg = load_error("bad/cases_not_list.yaml");
    CHECK(msg == at("bad/cases_not_list.yaml", 7, 3) + "cases: expected a non-empty list of cases");
}

TEST_CASE("cases that are an empty list", "[scenario][errors]") {
    const std::string msg = load_error("bad/cases_empty.yaml");
    CHECK(msg == at("bad/cases_empty.yaml", 6, 8) + "cases: expected a non-empty list of cases");
}

TEST_CASE("a case that is not a mapping", "[scenario][errors]") {
    const std::string msg = load_error("bad/case_not_mapping.yaml");
    CHECK(msg == at("bad/case_not_mapping.yaml", 7, 5) + "cases[0]: expected a mapping");
}

// ---------------------------------------------------------------------------------------------------
// Device profiles referenced from systems
// ---------------------------------------------------------------------------------------------------

TEST_CASE("a device profile with an unknown key, referenced from a system file", "[scenario][errors][profile]") {
    const std::string msg = load_error("bad/profile_unknown_key.yaml");
    CHECK_THAT(msg, StartsWith(at("parts/profile-unknown-key.yaml", 6, 3)));
    CHECK_THAT(msg, Contains("unknown key 'device.peak_flop' in profile."));
    CHECK_THAT(msg, Contains("Did you mean 'device.peak_flops'?"));
    CHECK_THAT(msg, Contains("(device profile named at " + data_path("parts/system-bad-profile-key.yaml") + ":3:1)"));
}

TEST_CASE("a device profile with an unsupported format string", "[scenario][errors][profile]") {
    const std::string msg = load_error("bad/profile_format.yaml");
    CHECK_THAT(msg, StartsWith(at("parts/profile-bad-format.yaml", 2, 9)));
    CHECK_THAT(msg, Contains("profile.format: 'strata-device-profile/2' is not valid; expected one of: strata-device-profile/1"));
    // The profile was named by the experiment's inline system override, so that is where it points.
    CHECK_THAT(msg, Contains("(device profile named at " + data_path("bad/profile_format.yaml") + ":7:3)"));
}

TEST_CASE("a device profile that does not exist: where it was named and the directory it is relative to",
          "[scenario][errors][profile]") {
    const std::string msg = load_error("bad/profile_missing.yaml");
    CHECK_THAT(msg, StartsWith(data_path("parts/no-such-profile.yaml") + ": file not found"));
    CHECK_THAT(msg, Contains("(device profile named at " + data_path("bad/profile_missing.yaml") +
                             ":7:3 as '../parts/no-such-profile.yaml', relative to " + data_path("bad") + "/)"));
}

// ---------------------------------------------------------------------------------------------------
// load_device_profile
// ---------------------------------------------------------------------------------------------------

TEST_CASE("load_device_profile reads the shipped A100 profile", "[profile]") {
    const DeviceProfile p = load_device_profile(source_path("scenarios/devices/a100-sxm4-80gb.yaml"));
    CHECK(p.name == "a100-sxm4-80gb");
    CHECK(p.kind == "analytical");
    CHECK_THAT(p.file, Contains("a100-sxm4-80gb.yaml"));
    CHECK(p.peak_flops == Approx(312e12));
    CHECK(p.hbm_bandwidth == Approx(2039e9));
    CHECK(p.memory_capacity_bytes == 85899345920LL);
    CHECK(p.sm_count == 108);
    CHECK(p.kernel_launch_us > 0);
    CHECK(p.gemm_tile_m == 256);
    CHECK(p.gemm_tile_n == 128);
    // Fitted parameters (scripts/fit-table4) may be refitted: check only that they were read and are sane.
    CHECK(p.gemm_efficiency_ceiling > 0.01);
    CHECK(p.gemm_efficiency_ceiling <= 1.0);
    CHECK(p.gemm_k_half >= 0);
    CHECK(p.elementwise_bandwidth_efficiency > 0.01);
    CHECK(p.elementwise_bandwidth_efficiency <= 1.0);
    CHECK(p.intra_node_bus_bandwidth == Approx(230e9));
    CHECK(p.intra_node_step_latency_us > 0);
    CHECK(p.measured_gemms.empty());
    CHECK(p.measured_elementwise.empty());
    CHECK(p.measured_collectives.empty());
}

TEST_CASE("load_device_profile reads measured tables of a calibrated profile", "[profile]") {
    const DeviceProfile p = load_device_profile(data_path("parts/profile-measured.yaml"));
    CHECK(p.kind == "calibrated");
    REQUIRE(p.measured_gemms.size() == 2);
    CHECK(p.measured_gemms[0].m == 1024);
    CHECK(p.measured_gemms[0].batch == 1);  // default
    CHECK(p.measured_gemms[0].time_us == Approx(30.0));
    CHECK(p.measured_gemms[1].m == 2048);
    CHECK(p.measured_gemms[1].k == 512);
    CHECK(p.measured_gemms[1].batch == 4);
    REQUIRE(p.measured_elementwise.size() == 1);
    CHECK(p.measured_elementwise[0].op == "gelu_fwd");
    CHECK(p.measured_elementwise[0].bytes == 1048576);
    CHECK(p.measured_elementwise[0].time_us == Approx(3.5));
    REQUIRE(p.measured_collectives.size() == 1);
    CHECK(p.measured_collectives[0].op == "all_reduce");
    CHECK(p.measured_collectives[0].ranks == 8);
    CHECK(p.measured_collectives[0].alpha_us == Approx(10));
    CHECK(p.measured_collectives[0].beta_bytes_per_s == Approx(2e11));
    REQUIRE(p.measured_collective_points.size() == 1);  // measured.collectives: used inside a node
    CHECK(p.measured_collective_points[0].op == "all_reduce");
    CHECK(p.measured_collective_points[0].bytes == 1048576);
    CHECK(p.measured_collective_points[0].time_us == Approx(20.0));
}

// Regression: once one measured list had been read, an absent later list made yaml-cpp throw
// YAML::InvalidNode (a node assigned through, then indexed as a zombie) instead of being skipped.
TEST_CASE("load_device_profile accepts a profile with only some measured lists", "[profile]") {
    const DeviceProfile p = load_device_profile(data_path("parts/profile-measured-partial.yaml"));
    CHECK(p.measured_gemms.size() == 1);
    CHECK(p.measured_elementwise.empty());
    CHECK(p.measured_collectives.size() == 1);
}

TEST_CASE("a calibrated profile must give provenance.gpu", "[profile][errors]") {
    const std::string msg = profile_error("parts/profile-calibrated-no-provenance.yaml");
    // Located in the mapping it belongs in: at provenance's first written key (date, line 6).
    CHECK(msg == at("parts/profile-calibrated-no-provenance.yaml", 6, 3) +
                     "profile: missing required key 'provenance.gpu' (expected a string)");
}

TEST_CASE("an unknown key in a measured GEMM entry names the entry", "[profile][errors]") {
    const std::string msg = profile_error("parts/profile-bad-measured.yaml");
    CHECK_THAT(msg, StartsWith(at("parts/profile-bad-measured.yaml", 25, 26)));
    CHECK_THAT(msg, Contains("unknown key 'kk' in measured.gemm[1]."));
    CHECK_THAT(msg, Contains("Did you mean 'k'?"));
}

TEST_CASE("load_device_profile on a missing file and on a non-profile file", "[profile][errors]") {
    CHECK(profile_error("parts/no-such-profile.yaml") == data_path("parts/no-such-profile.yaml") + ": file not found");
    // A model file is a mapping but not a profile: its first foreign key is reported.
    const std::string msg = profile_error("valid/model-small.yaml");
    CHECK_THAT(msg, StartsWith(at("valid/model-small.yaml", 3, 1)));
    CHECK_THAT(msg, Contains("unknown key 'heads' in profile."));
}

TEST_CASE("sweep: cartesian product in written order, infeasible combinations kept with the reason") {
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/sweeps/microbatch.yaml");
    REQUIRE(ex.cases.size() == 4 * 5);
    CHECK(ex.cases[0].name == "microbatch=1, interleave=1");
    CHECK(ex.cases[1].name == "microbatch=1, interleave=2");
    CHECK(ex.cases[5].name == "microbatch=2, interleave=1");
    CHECK(ex.cases[5].execution.microbatch == 2);
    CHECK(ex.cases[6].execution.interleave == 2);
    CHECK(ex.cases[6].execution.schedule == Schedule::interleaved);
    int infeasible = 0;
    for (const auto& c : ex.cases) {
        if (c.execution.interleave == 5) {
            CHECK_THAT(c.infeasible, Catch::Contains("divisible by pipeline x interleave"));
            ++infeasible;
        } else {
            CHECK(c.infeasible.empty());
        }
    }
    CHECK(infeasible == 4);
}

TEST_CASE("sweep: a key that is no model, execution or system key is an error with its location") {
    const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/data/bad/";
    CHECK_THROWS_WITH(load_experiment(dir + "sweep_unknown_key.yaml"),
                      Catch::Contains("sweep_unknown_key.yaml:6:3") && Catch::Contains("unknown execution key 'microbatches'") &&
                          Catch::Contains("Did you mean 'microbatch'?"));
    CHECK_THROWS_WITH(load_experiment(dir + "sweep_not_list.yaml"),
                      Catch::Contains("sweep_not_list.yaml:6:25") && Catch::Contains("expected a non-empty list"));
}

TEST_CASE("load_model / load_system take the --set overrides of their own part", "[scenario]") {
    const std::vector<std::string> set = {"system.network.routing=adaptive", "model.seq_len=1024", "execution.tensor=2"};
    const SystemSpec sys = load_system(source_path("scenarios/systems/selene-a100.yaml"), set);
    CHECK(sys.network.routing == Routing::adaptive);
    CHECK(sys.network.nodes_per_leaf == 20);  // the file's other keys stay
    const ModelSpec model = load_model(source_path("scenarios/models/gpt-22b.yaml"), set);
    CHECK(model.seq_len == 1024);
    CHECK(model.hidden == 6144);
    CHECK(load_model(source_path("scenarios/models/gpt-22b.yaml")).seq_len == 2048);
    CHECK_THROWS_WITH(load_system(source_path("scenarios/systems/selene-a100.yaml"), {"system.network.routing=ecmp"}),
                      Contains("--set 'system.network.routing=ecmp'") && Contains("expected one of: hash, adaptive"));
    CHECK_THROWS_WITH(load_model(source_path("scenarios/models/gpt-22b.yaml"), {"model.hiden=4"}),
                      Contains("unknown model key 'hiden'"));
}

TEST_CASE("every shipped experiment file loads and validates", "[scenario]") {
    namespace fs = std::filesystem;
    int files = 0;
    for (const char* dir : {"scenarios/paper", "scenarios/crosscheck", "scenarios/sweeps", "scenarios/bench", "scenarios/llama",
                            "scenarios/validation"}) {
        for (const auto& entry : fs::directory_iterator(source_path(dir))) {
            if (entry.path().extension() != ".yaml") continue;
            INFO(entry.path().string());
            const Experiment ex = load_experiment(entry.path());
            CHECK_FALSE(ex.cases.empty());
            for (const auto& c : ex.cases)
                if (c.infeasible.empty()) CHECK_NOTHROW(validate(c));
            ++files;
        }
    }
    CHECK(files >= 11);
    // Every model and system part file too.
    for (const auto& entry : fs::directory_iterator(source_path("scenarios/models"))) {
        INFO(entry.path().string());
        CHECK(load_model(entry.path()).layers > 0);
    }
    for (const auto& entry : fs::directory_iterator(source_path("scenarios/systems"))) {
        INFO(entry.path().string());
        CHECK(load_system(entry.path()).gpus_per_node > 0);
    }
}

TEST_CASE("the SC21 cross-check encodes the published models and configurations", "[scenario]") {
    const Experiment ex = load_experiment(source_path("scenarios/crosscheck/sc21-table1.yaml"));
    REQUIRE(ex.cases.size() == 10);
    // Published parameter counts (billions, rounded to 0.1) and GPU counts of SC21 Table 1; parameters by the paper's eq. 2,
    // P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)).
    const double billions[] = {1.7, 3.6, 7.5, 18.4, 39.1, 76.1, 145.6, 310.1, 529.6, 1008.0};
    const int gpus[] = {32, 64, 128, 256, 512, 1024, 1536, 1920, 2520, 3072};
    for (std::size_t i = 0; i < ex.cases.size(); ++i) {
        const auto& c = ex.cases[i];
        INFO(c.name);
        const double l = c.model.layers, h = c.model.hidden, V = c.model.vocab, s = c.model.seq_len;
        const double params = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
        CHECK(params / 1e9 == Approx(billions[i]).margin(0.05));  // the table rounds to 0.1B
        CHECK(c.execution.gpus() == gpus[i]);
        CHECK(c.execution.recompute == Recompute::full);
        CHECK(c.execution.precision == Precision::fp16);
        CHECK_FALSE(c.execution.gradient_accumulation_fusion);
        CHECK_FALSE(c.execution.async_tp_comm);
        // PyTorch DDP (overlapped gradient all-reduce) exactly for the rows without pipeline parallelism.
        CHECK(c.execution.overlap_grad_reduce == (c.execution.pipeline == 1));
    }
}

TEST_CASE("overrides (--set): a key's value in every case, over the experiment's and the cases' own", "[scenario]") {
    const std::string t4 = std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table4.yaml";
    const Experiment plain = load_experiment(t4);
    const Experiment set = load_experiment(t4, {"execution.recompute=none", "model.layers=24",
                                                "system.network.rails=4", "execution.host_gap_forward_us=250"});
    REQUIRE(set.cases.size() == plain.cases.size());
    for (std::size_t i = 0; i < set.cases.size(); ++i) {
        CHECK(set.cases[i].execution.recompute == Recompute::none);  // the cases set it themselves
        CHECK(set.cases[i].model.layers == 24);
        CHECK(set.cases[i].system.network.rails == 4);
        CHECK(set.cases[i].execution.host_gap_forward == Time::from_us(250));
        CHECK(set.cases[i].execution.tensor == plain.cases[i].execution.tensor);  // the rest as written
    }
    CHECK(plain.cases[2].execution.recompute == Recompute::full);
    // Errors name the override: its form, its part, its key (with a hint), its value; a swept key cannot be set.
    CHECK_THROWS_WITH(load_experiment(t4, {"execution.microbatch"}), Catch::Contains("--set 'execution.microbatch': expected PART.KEY=VALUE"));
    CHECK_THROWS_WITH(load_experiment(t4, {"exec.microbatch=2"}), Catch::Contains("'exec' is not a part"));
    CHECK_THROWS_WITH(load_experiment(t4, {"model.layer=2"}), Catch::Contains("Did you mean 'layers'?"));
    CHECK_THROWS_WITH(load_experiment(t4, {"execution.tensor=eight"}),
                      Catch::Contains("--set 'execution.tensor=eight':1:") && Catch::Contains("expected an integer"));
    CHECK_THROWS_WITH(load_experiment(data_path("valid/sweep-system.yaml"), {"system.gpus_per_node=8"}),
                      Catch::Contains("is swept by the experiment") && Catch::Contains("sweep-system.yaml:9:"));
    // A device profile named in an override is relative to the working directory, as a command-line path.
    const std::filesystem::path cwd = std::filesystem::current_path();
    std::filesystem::current_path(STRATA_SOURCE_DIR);
    const Experiment h100 = load_experiment(t4, {"system.device_profile=scenarios/devices/h100-sxm5-80gb.yaml"});
    std::filesystem::current_path(cwd);
    CHECK(h100.cases.at(0).system.device.name == "h100-sxm5-80gb");
}
