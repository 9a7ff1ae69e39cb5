// Bad input (issue 15): every malformed input is an InputError with file:line:col and the key, never a crash,
// a hang, an exhausted memory or a silent wrong answer. One test per class of problem; the texts are loaded
// with an origin in tests/data/valid/, so `model: model-small.yaml` and `system: system-small.yaml` resolve.
#include "strata/errors.hpp"
#include "strata/profile.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"
#include "strata/spec.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

using namespace strata;
using Catch::Contains;
using Catch::StartsWith;

namespace {

const std::string kValid = std::string(STRATA_SOURCE_DIR) + "/tests/data/valid/";
const std::string kOrigin = kValid + "hardening.yaml";

/// `origin:line:col: `
std::string at(int line, int col) { return kOrigin + ":" + std::to_string(line) + ":" + std::to_string(col) + ": "; }

/// The message of the InputError thrown by loading `text` as an experiment.
std::string error_of(const std::string& text) {
    try {
        (void)load_experiment_text(text, kOrigin);
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("the text loaded without an InputError:\n" << text);
    return {};
}

/// The message of the InputError thrown by simulating `sc` with `options`.
std::string simulation_error_of(const Scenario& sc, const SimulationOptions& options) {
    try {
        (void)simulate(sc, options);
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("the simulation ran");
    return {};
}

std::string profile_error_of(const std::string& text) {
    try {
        (void)load_device_profile_text(text, kOrigin);
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("the profile loaded without an InputError:\n" << text);
    return {};
}

/// A valid experiment's first lines (5 lines): parts by file, then an execution mapping to extend.
const std::string kHead =
    "model: model-small.yaml\n"
    "system: system-small.yaml\n"
    "execution:\n"
    "  tensor: 1\n"
    "  pipeline: 1\n";
const std::string kRest =
    "  recompute: full\n"
    "  microbatch: 2\n"
    "  global_batch: 16\n";

std::string read(const std::string& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The error `fn` returns (the limits keep these to milliseconds; time is a benchmark matter, not asserted here:
/// the fuzzer's per-input timeout and the CLI test's `timeout` catch a hang).
template <typename F>
std::string quick_error(F&& fn) {
    return fn();
}

}  // namespace

TEST_CASE("hardening: the base text loads", "[hardening]") {
    const Experiment ex = load_experiment_text(kHead + kRest, kOrigin);
    REQUIRE(ex.cases.size() == 1);
    CHECK(ex.cases[0].execution.microbatch == 2);
}

TEST_CASE("hardening: a key given twice in one mapping", "[hardening]") {
    const std::string msg = error_of(kHead + kRest + "  tensor: 2\n");
    CHECK_THAT(msg, StartsWith(at(9, 3)));
    CHECK_THAT(msg, Contains("duplicate key 'tensor'"));
    CHECK_THAT(msg, Contains("first at " + at(4, 3).substr(0, at(4, 3).size() - 2)));
    // Top level too.
    CHECK_THAT(error_of(kHead + kRest + "model: model-other.yaml\n"), StartsWith(at(9, 1)));
}

TEST_CASE("hardening: a key written dotted and nested in one mapping", "[hardening]") {
    const std::string msg = error_of(
        "model: model-small.yaml\nsystem:\n  file: system-small.yaml\n  network.rails: 2\n  network: {rails: 4}\n"
        "execution: {tensor: 1, pipeline: 1, recompute: full, microbatch: 2, global_batch: 16}\n");
    CHECK_THAT(msg, StartsWith(at(5, 13) + "system.network.rails: given twice (first at " + kOrigin + ":4:3)"));
}

TEST_CASE("hardening: a second YAML document", "[hardening]") {
    const std::string msg = error_of(kHead + kRest + "---\nname: other\n");
    CHECK_THAT(msg, StartsWith(at(9, 1)));
    CHECK_THAT(msg, Contains("a second YAML document"));
    // yaml-cpp's LoadAll looped forever on this (found by the fuzzer): a document that makes no progress.
    const std::string comma = quick_error([] { return error_of(","); });
    CHECK_THAT(comma, StartsWith(at(1, 1)));
    CHECK_THAT(comma, Contains("YAML syntax error: unexpected ','"));
}

TEST_CASE("hardening: a quote left open at the end of the file", "[hardening]") {
    for (const char* q : {"\"", "'"}) {
        const std::string msg = error_of(kHead + kRest + "name: " + q + "abc\n");
        CHECK_THAT(msg, StartsWith(at(9, 7)));
        CHECK_THAT(msg, Contains("unclosed quote"));
    }
    // Closed quotes, with escapes, still load.
    CHECK_NOTHROW(load_experiment_text(kHead + kRest + "name: \"a \\\" b\"\n", kOrigin));
    CHECK_NOTHROW(load_experiment_text(kHead + kRest + "name: 'it''s'\n", kOrigin));
}

TEST_CASE("hardening: name and description must be strings", "[hardening]") {
    std::string msg = error_of(kHead + kRest + "name: {a: 1}\n");
    CHECK_THAT(msg, StartsWith(at(9, 7)));
    CHECK_THAT(msg, Contains("experiment.name: expected a non-empty string, got a mapping"));
    msg = error_of(kHead + kRest + "description: [a, b]\n");
    CHECK_THAT(msg, Contains("experiment.description: expected a non-empty string, got a list"));
    msg = error_of(kHead + kRest + "cases:\n  - name: [x]\n");
    CHECK_THAT(msg, StartsWith(at(10, 11)));
    CHECK_THAT(msg, Contains("cases[0].name"));
}

TEST_CASE("hardening: an empty value is located at its key, not at the next token", "[hardening]") {
    // In the middle of the file: the next token is on the next line.
    std::string msg = error_of("model: model-small.yaml\nsystem: system-small.yaml\nexecution:\n  tensor:\n  pipeline: 1\n" + kRest);
    CHECK_THAT(msg, StartsWith(at(4, 3)));
    CHECK_THAT(msg, Contains("execution.tensor: expected an integer"));
    CHECK_THAT(msg, Contains("got nothing"));
    // At the end of the file: yaml-cpp would point past it.
    msg = error_of(kHead + kRest + "  data:");
    CHECK_THAT(msg, StartsWith(at(9, 3)));
    msg = error_of("model:\nsystem: system-small.yaml\n");
    CHECK_THAT(msg, StartsWith(at(1, 1)));
    CHECK_THAT(msg, Contains("model: expected a file path or a mapping"));
    msg = error_of(kHead + kRest + "sweep:\n");
    CHECK_THAT(msg, StartsWith(at(9, 1)));
}

TEST_CASE("hardening: an empty list item is located at its dash or comma, with its path", "[hardening]") {
    // A block item with nothing after its '-' (yaml-cpp marks it at the next token): at the dash.
    std::string msg = error_of(kHead + kRest + "sweep:\n  execution.microbatch:\n    - 1\n    -   # none\n    - 2\n");
    CHECK_THAT(msg, StartsWith(at(12, 5)));
    CHECK_THAT(msg, Contains("sweep.execution.microbatch[1]: empty list item"));
    // The last item of the file (yaml-cpp marks it past the end).
    msg = error_of(kHead + kRest + "cases:\n  - name: a\n  -\n");
    CHECK_THAT(msg, StartsWith(at(11, 3)));
    CHECK_THAT(msg, Contains("cases[1]: empty list item"));
    // A flow item between two commas: at the comma before it.
    msg = error_of(kHead + kRest + "sweep: {execution.microbatch: [1, , 2]}\n");
    CHECK_THAT(msg, StartsWith(at(9, 33)));
    CHECK_THAT(msg, Contains("sweep.execution.microbatch[1]"));
    // An explicit null is where it is written.
    msg = error_of(kHead + kRest + "cases:\n  - ~\n");
    CHECK_THAT(msg, StartsWith(at(10, 5)));
}

TEST_CASE("hardening: the same sweep axis twice", "[hardening]") {
    const std::string msg =
        error_of(kHead + kRest + "sweep:\n  execution.microbatch: [1, 2]\n  execution:\n    microbatch: [4]\n");
    CHECK_THAT(msg, StartsWith(at(12, 5)));
    CHECK_THAT(msg, Contains("'execution.microbatch' is swept twice"));
}

TEST_CASE("hardening: of several unknown keys the first written is named, and the others counted", "[hardening]") {
    const std::string msg = error_of(kHead + "  zeta: 1\n" + kRest + "  alpha: 2\n  beta: 3\n");
    CHECK_THAT(msg, StartsWith(at(6, 3)));
    CHECK_THAT(msg, Contains("unknown key 'zeta' in execution."));
    CHECK_THAT(msg, Contains("(2 more unknown keys after it.)"));
}

TEST_CASE("hardening: a sweep value listed twice (two cases of one name)", "[hardening]") {
    const std::string msg = error_of(kHead + kRest + "sweep:\n  execution.microbatch: [1, 2, 1]\n");
    CHECK_THAT(msg, StartsWith(at(10, 32)));  // the second 1
    CHECK_THAT(msg, Contains("sweep.execution.microbatch: the value 1 is listed twice (items 1 and 3)"));
    REQUIRE_NOTHROW(load_experiment_text(kHead + kRest + "sweep:\n  execution.microbatch: [1, 2]\n", kOrigin));
}

TEST_CASE("hardening: a sweep whose case count overflows 64 bits", "[hardening]") {
    // 16 axes of 16 values: 2^64 cases, which a plain product wraps to 0.
    std::string sweep = "sweep:\n";
    const char* keys[] = {"heads", "hidden", "layers", "seq_len", "vocab", "ffn_hidden", "kv_heads", "dropout"};
    for (const char* k : keys) {
        sweep += std::string("  model.") + k + ": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\n";
    }
    const char* exec_keys[] = {"tensor", "pipeline", "data", "interleave", "microbatch", "global_batch",
                               "first_stage_layers", "last_stage_layers"};
    for (const char* k : exec_keys) {
        sweep += std::string("  execution.") + k + ": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\n";
    }
    const std::string msg = quick_error([&] { return error_of(kHead + kRest + sweep); });
    CHECK_THAT(msg, StartsWith(at(9, 1)));
    CHECK_THAT(msg, Contains("more than the limit of 10000 cases"));
    CHECK_THAT(msg, Contains("1 case(s) x 16 x 16"));
}

TEST_CASE("hardening: a cases list over the case limit", "[hardening]") {
    std::string text = kHead + kRest + "cases:\n";
    for (int i = 0; i < 10001; ++i) text += "  - {name: c" + std::to_string(i) + "}\n";
    const std::string msg = quick_error([&] { return error_of(text); });
    CHECK_THAT(msg, StartsWith(at(9, 1) + "cases: 10001 cases, more than the limit of 10000"));
}

TEST_CASE("hardening: alias expansion (billion laughs) stops at the value limit", "[hardening]") {
    std::string text = kHead + kRest + "cases:\n  - name: a\n    model: &a0 {heads: 8, hidden: 512}\n";
    // Each level names the previous one 10 times: 10^8 values once expanded.
    std::string prev = "a0";
    for (int i = 1; i <= 8; ++i) {
        const std::string name = "a" + std::to_string(i);
        text += "  - name: " + name + "\n    description: d\n    execution: &" + name + " {";
        for (int j = 0; j < 10; ++j) text += (j ? ", " : "") + std::string("k") + std::to_string(j) + ": *" + prev;
        text += "}\n";
        prev = name;
    }
    const std::string msg = quick_error([&] { return error_of(text); });
    CHECK_THAT(msg, Contains("YAML values (an alias counts at each use)"));
    CHECK_THAT(msg, StartsWith(kOrigin + ":"));
}

TEST_CASE("hardening: a huge file or list is refused before it is parsed", "[hardening]") {
    // 2 MB: over the size limit.
    std::string big = kHead + kRest + "sweep:\n  execution.microbatch: [" + std::string(2 << 20, '1') + "]\n";
    std::string msg = quick_error([&] { return error_of(big); });
    CHECK_THAT(msg, Contains("longer than the loader's limit"));
    CHECK_THAT(msg, StartsWith(kOrigin + ":10:"));
    // Under the size limit but with more values than the limit: refused by the separator count.
    std::string list = kHead + kRest + "sweep:\n  execution.microbatch:\n";
    for (int i = 0; i < 150000; ++i) list += "  - 1\n";
    msg = quick_error([&] { return error_of(list); });
    CHECK_THAT(msg, Contains("more YAML values than the loader's limit"));
    // Deep nesting.
    msg = error_of(kHead + kRest + "description: " + std::string(100, '[') + std::string(100, ']') + "\n");
    CHECK_THAT(msg, Contains("nested more than"));
}

TEST_CASE("hardening: a part file that is not a regular file", "[hardening]") {
    const std::string msg = error_of("model: /dev/zero\nsystem: system-small.yaml\n");
    CHECK_THAT(msg, Contains("/dev/zero: not a regular file"));
    CHECK_THAT(msg, Contains("referenced as model at " + at(1, 8).substr(0, at(1, 8).size() - 2)));
}

TEST_CASE("hardening: a long unknown key gets no quadratic hint", "[hardening]") {
    const std::string key(200000, 'x');
    // An explicit key (`? key`): yaml-cpp refuses plain keys over 1024 characters, not these.
    const std::string msg = quick_error([&] { return error_of(kHead + kRest + "? " + key + "\n: 1\n"); });
    CHECK_THAT(msg, StartsWith(at(9, 3)));
    CHECK_THAT(msg, Contains("unknown key"));
    CHECK_THAT(msg, !Contains("Did you mean"));
    // A short typo still gets its hint.
    CHECK_THAT(error_of(kHead + kRest + "sweeep: {}\n"), Contains("Did you mean 'sweep'?"));
}

TEST_CASE("hardening: a device profile's measured block is checked", "[hardening]") {
    const std::string base = read(kValid + "profile-small.yaml");
    REQUIRE_NOTHROW(load_device_profile_text(base, kOrigin));
    const int line = 1 + static_cast<int>(std::count(base.begin(), base.end(), '\n'));
    std::string msg = profile_error_of(base + "measured: 5\n");
    CHECK_THAT(msg, StartsWith(at(line, 11)));
    CHECK_THAT(msg, Contains("profile.measured: expected a mapping"));
    msg = profile_error_of(base + "measured:\n  gemm: 3\n");
    CHECK_THAT(msg, StartsWith(at(line + 1, 9)));
    CHECK_THAT(msg, Contains("measured.gemm: expected a list"));
    msg = profile_error_of(base + "measured:\n  collectives:\n    - {op: all_gahter, ranks: 8, bytes: 1024, time_us: 5}\n");
    CHECK_THAT(msg, StartsWith(at(line + 2, 12)));
    CHECK_THAT(msg, Contains("'all_gahter' is not valid"));
    CHECK_THAT(msg, Contains("did you mean 'all_gather'?"));
    msg = profile_error_of(base + "measured:\n  collectives:\n    - {op: all_gather, ranks: 8, bytes: lots, time_us: 5}\n");
    CHECK_THAT(msg, Contains("measured.collectives[0].bytes: expected an integer"));
    msg = profile_error_of(base + "measured:\n  gemm:\n    - 7\n");
    CHECK_THAT(msg, Contains("measured.gemm[0]: expected a mapping"));
    msg = profile_error_of(base + "measured:\n  copy_bandwidth_bytes_per_s: fast\n");
    CHECK_THAT(msg, Contains("measured.copy_bandwidth_bytes_per_s: expected a number"));
    // Fused attention: the head_dim 128 entries must form a grid; only causal attention is modelled.
    const std::string grid = "measured:\n  flash_attention:\n"
                             "    - {heads: 8, seq_len: 1024, head_dim: 128, forward_us: 10, backward_us: 30}\n"
                             "    - {heads: 8, seq_len: 2048, head_dim: 128, forward_us: 20, backward_us: 60}\n"
                             "    - {heads: 16, seq_len: 1024, head_dim: 128, forward_us: 15, backward_us: 45}\n";
    msg = profile_error_of(base + grid);
    CHECK_THAT(msg, StartsWith(at(line + 2, 5)));
    CHECK_THAT(msg, Contains("must form a grid"));
    CHECK_THAT(msg, Contains("missing batch x heads = 16 with seq_len = 2048"));
    REQUIRE_NOTHROW(load_device_profile_text(
        base + grid + "    - {batch: 2, heads: 8, seq_len: 2048, head_dim: 128, forward_us: 30, backward_us: 90}\n", kOrigin));
    msg = profile_error_of(base + grid + "    - {heads: 16, seq_len: 2048, head_dim: 128, causal: false, forward_us: 1, backward_us: 2}\n");
    CHECK_THAT(msg, Contains("measured.flash_attention[3].causal"));
    CHECK_THAT(msg, Contains("only causal attention"));
    // SMs held, a GEMM's table and fused attention's alike: fewer than the device's SMs, in increasing order, a
    // slowdown of at least 1, no unknown key; both load.
    for (const std::string table : {"sms_held", "attention_sms_held"}) {
        INFO(table);
        const std::string held = "measured:\n  " + table + ":\n    - {sms: 2, slowdown: 1.1}\n";
        const std::string key = "measured." + table + "[1]";
        const DeviceProfile loaded =
            load_device_profile_text(base + held + "    - {sms: 16, slowdown: 1.2}\n", kOrigin);
        CHECK((table == "sms_held" ? loaded.measured_sms_held : loaded.measured_attention_sms_held).size() == 2);
        msg = profile_error_of(base + held + "    - {sms: 2, slowdown: 1.2}\n");
        CHECK_THAT(msg, StartsWith(at(line + 3, 8)));  // the value of sms
        CHECK_THAT(msg, Contains(key + ".sms: entries must be in increasing order"));
        msg = profile_error_of(base + held + "    - {sms: 64, slowdown: 1.2}\n");
        CHECK_THAT(msg, Contains(key + ".sms: must be below device.sm_count (64)"));
        msg = profile_error_of(base + held + "    - {sms: 8, slowdown: 0.9}\n");
        CHECK_THAT(msg, Contains(key + ".slowdown"));
        msg = profile_error_of(base + held + "    - {sms: 8, slowdwn: 1.2}\n");
        CHECK_THAT(msg, Contains("unknown key"));
    }
    // Fused attention's table has a slowdown alone, no per-wave line.
    msg = profile_error_of(
        base + "measured:\n  attention_sms_held:\n    - {sms: 8, slowdown: 1.2, base: 1.1, per_wave: 0.5}\n");
    CHECK_THAT(msg, Contains("unknown key"));
    // NCCL's channels hold one SM each: fewer than the device has.
    const std::string intra = "intra_node:\n  bus_bandwidth_bytes_per_s: 100e9\n  step_latency_us: 2.0\n";
    REQUIRE(base.find(intra) != std::string::npos);
    auto with_channels = [&](int n) {
        std::string text = base;
        text.replace(text.find(intra), intra.size(), intra + "  nccl_channels: " + std::to_string(n) + "\n");
        return text;
    };
    REQUIRE_NOTHROW(load_device_profile_text(with_channels(63), kOrigin));
    msg = profile_error_of(with_channels(64));
    CHECK_THAT(msg, Contains("intra_node.nccl_channels: must be below device.sm_count (64)"));
}

TEST_CASE("hardening: rails larger than GPUs per node is a load error at the system file's line", "[hardening]") {
    const std::string msg = error_of("model: model-small.yaml\nexecution:\n  tensor: 1\n  pipeline: 1\n" + kRest +
                                     "system:\n  file: system-small.yaml\n  gpus_per_node: 2\n");
    // system-small.yaml gives rails: 4 on its line 7; the override of gpus_per_node is here.
    CHECK_THAT(msg, StartsWith(kValid + "system-small.yaml:7:3: system.network.rails: rails (4) must be at most "
                                        "gpus_per_node (2)"));
}

// ---------------------------------------------------------------------------------------------------
// Sizes that multiply (checked by find_problem, located at the key by the loader)
// ---------------------------------------------------------------------------------------------------

namespace {
/// An experiment on the small model and system with this execution block (one line of flow mapping, line 3).
std::string with_execution(const std::string& flow, const std::string& model = "model-small.yaml") {
    return "model: " + model + "\nsystem: system-small.yaml\nexecution: {recompute: full, " + flow + "}\n";
}
}  // namespace

TEST_CASE("hardening: microbatch x data overflowing int is a divisibility error, not SIGFPE", "[hardening]") {
    // 65536 x 65536 = 2^32 wraps to 0 in int: a division by zero before.
    const std::string msg =
        error_of(with_execution("tensor: 1, pipeline: 1, microbatch: 65536, data: 65536, global_batch: 65536"));
    CHECK_THAT(msg, StartsWith(at(3, 86)));
    CHECK_THAT(msg, Contains("execution.global_batch: global_batch (65536) must be divisible by microbatch x data (65536 x 65536)"));
}

TEST_CASE("hardening: a GPU count overflowing int", "[hardening]") {
    const std::string model = "{name: deep, heads: 8, hidden: 512, layers: 65536, seq_len: 256, vocab: 1024}";
    const std::string msg = error_of(
        "model: " + model + "\nsystem: system-small.yaml\nexecution: {recompute: full, tensor: 8, pipeline: 65536, "
        "data: 1048576, microbatch: 1, global_batch: 1048576}\n");
    CHECK_THAT(msg, StartsWith(at(3, 58)));
    CHECK_THAT(msg, Contains("execution.data: tensor x context_parallel x pipeline x data = 8 x 1 x 65536 x 1048576 = "
                             "549755813888 GPUs, more than the simulator's limit of 1048576"));
}

TEST_CASE("hardening: activation sizes overflowing 64 bits", "[hardening]") {
    const std::string model = "{name: wide, heads: 65536, hidden: 16777216, layers: 1, seq_len: 16777216, vocab: 65536}";
    const std::string msg = error_of("model: " + model +
                                     "\nsystem: system-small.yaml\nexecution: {recompute: none, tensor: 8, pipeline: 1, "
                                     "microbatch: 1048576, global_batch: 1048576}\n");
    CHECK_THAT(msg, StartsWith(at(3, 54)));
    CHECK_THAT(msg, Contains("execution.microbatch: a microbatch's largest activation"));
}

TEST_CASE("hardening: too many microbatches or schedule units are refused before any program is built", "[hardening]") {
    std::string msg = quick_error([] {
        return error_of(with_execution("tensor: 1, pipeline: 1, microbatch: 1, global_batch: 1073741824"));
    });
    CHECK_THAT(msg, Contains("execution.global_batch: global_batch / (microbatch x data) = 1073741824 microbatches per "
                             "pipeline, more than the simulator's limit of 1048576"));
    const std::string deep = "{name: deep, heads: 8, hidden: 512, layers: 4096, seq_len: 256, vocab: 1024}";
    msg = quick_error([&] {
        return error_of("model: " + deep + "\nsystem: system-small.yaml\nexecution: {recompute: full, tensor: 1, "
                        "pipeline: 4096, microbatch: 1, global_batch: 1048576}\n");
    });
    CHECK_THAT(msg, Contains("forward and backward units in the schedule, more than the simulator's limit"));
}

TEST_CASE("hardening: the task limit is checked before the stage programs are built", "[hardening]") {
    // 2^20 microbatches on 8 stages: 251 million tasks, over a limit of 100 million: refused with the case's location
    // (before 2^20-unit programs exist; how fast is a benchmark matter, not asserted here).
    const Experiment ex =
        load_experiment_text(with_execution("tensor: 1, pipeline: 8, microbatch: 1, global_batch: 1048576"), kOrigin);
    REQUIRE(ex.cases.size() == 1);
    SimulationOptions o;
    o.max_tasks = 100'000'000;
    const std::string msg = simulation_error_of(ex.cases[0], o);
    CHECK_THAT(msg, StartsWith(kOrigin + ":1:1: case"));
    CHECK_THAT(msg, Contains("251 million tasks"));
}

TEST_CASE("hardening: the fewest tasks a run can have are checked before its fabric is built", "[hardening]") {
    // 2^20 GPUs (t = 8, d = 131,072), one microbatch per replica: at least 2 x 131,072 units, over a limit of 0.1
    // million, refused before a fabric of 131,072 nodes is built (Builder::check_task_limit comes after it).
    const Experiment ex = load_experiment_text(
        with_execution("tensor: 8, pipeline: 1, data: 131072, microbatch: 1, global_batch: 131072"), kOrigin);
    REQUIRE(ex.cases.size() == 1);
    SimulationOptions o;
    o.max_tasks = 100'000;
    const std::string msg = simulation_error_of(ex.cases[0], o);
    CHECK_THAT(msg, StartsWith(kOrigin + ":1:1: case"));
    CHECK_THAT(msg, Contains("would run at least 0.262 million tasks, more than the limit of 0.1 million"));
}

TEST_CASE("hardening: a fabric too large names the case", "[hardening]") {
    const Experiment ex = load_experiment_text(
        "model: model-small.yaml\nsystem:\n  file: system-small.yaml\n  network: {nodes_per_leaf: 1, spines_per_rail: 65536}\n"
        "execution: {tensor: 8, pipeline: 8, data: 2048, recompute: full, microbatch: 1, global_batch: 2048}\n",
        kOrigin);
    REQUIRE(ex.cases.size() == 1);
    CHECK_THAT(simulation_error_of(ex.cases[0], SimulationOptions{}),
               StartsWith(kOrigin + ":1:1: case 'hardening' (system test-cluster): fabric: the fabric size"));
}

TEST_CASE("hardening: an iteration too long for 64-bit picoseconds", "[hardening]") {
    const std::string big = "{name: big, heads: 128, hidden: 131072, layers: 1024, seq_len: 65536, vocab: 1024}";
    const std::string msg = error_of("model: " + big +
                                     "\nsystem: system-small.yaml\nexecution: {recompute: full, tensor: 1, pipeline: 1, "
                                     "microbatch: 1, global_batch: 65536}\n");
    CHECK_THAT(msg, Contains("one iteration would take at least"));
    CHECK_THAT(msg, Contains("more than the simulator's limit of 1e+05 s"));
}

TEST_CASE("hardening: a result's failure kind is the one evaluate_case gave it", "[hardening]") {
    // What strata search reads from a candidate's result (also after the MPI runner carried it): bad input (over the
    // task limit) as bad input, an evaluated case and an infeasible one as no failure.
    const Experiment ex =
        load_experiment_text(with_execution("tensor: 1, pipeline: 8, microbatch: 1, global_batch: 1024"), kOrigin);
    REQUIRE(ex.cases.size() == 1);
    CaseOptions tight;
    tight.simulation.max_tasks = 1000;
    int failure = 0;
    const CaseResult refused = evaluate_case(ex.cases[0], tight, &failure);
    CHECK(failure == kCaseBadInput);
    CHECK(refused.failure == kCaseBadInput);
    failure = 0;
    const CaseResult done = evaluate_case(ex.cases[0], CaseOptions{}, &failure);
    REQUIRE(done.iteration);
    CHECK(failure == 0);
    CHECK(done.failure == 0);
    Scenario infeasible = ex.cases[0];
    infeasible.infeasible = "a sweep combination";
    CHECK(evaluate_case(infeasible, CaseOptions{}).failure == 0);
}

TEST_CASE("hardening: communication too slow for 64-bit picoseconds is refused before simulating", "[hardening]") {
    // 16 layers of hidden 131,072 over t = 8 (412 G parameters per GPU) and d = 2 on two nodes: the data-parallel
    // reduction brings each node at least half of 824 GB of gradients, more than 1e5 s through one NIC of 1 MB/s, where
    // the compute would take well under a second.
    const std::string model = "model: {name: wide, heads: 64, hidden: 131072, layers: 16, seq_len: 8, vocab: 1024}\n";
    const std::string slow = "system: {file: system-small.yaml, network: {rails: 1, nic_bandwidth_bytes_per_s: 1e6}}\n";
    const std::string dp = error_of(model + slow + "execution: {recompute: none, tensor: 8, pipeline: 1, data: 2, "
                                                   "microbatch: 1, global_batch: 2}\n");
    CHECK_THAT(dp, Contains("one iteration would take at least"));
    CHECK_THAT(dp, Contains("the gradients' reduction and the tensor-parallel collectives at the fastest link's"));
    // The same model at the shipped 12 GB/s per NIC is no problem for the loader.
    CHECK_NOTHROW(load_experiment_text(model + "system: system-small.yaml\nexecution: {recompute: none, tensor: 8, "
                                               "pipeline: 1, data: 2, microbatch: 1, global_batch: 2}\n", kOrigin));
    // A tensor-parallel group across nodes (16 > 8 GPUs per node) at 1 MB/s per NIC: its collectives alone.
    const std::string tp = error_of("model: {name: long, heads: 64, hidden: 8192, layers: 64, seq_len: 65536, vocab: "
                                    "1024}\n" + slow + "execution: {recompute: full, tensor: 16, pipeline: 1, data: 1, "
                                    "microbatch: 1, global_batch: 64}\n");
    CHECK_THAT(tp, Contains("one iteration would take at least"));
    CHECK_NOTHROW(load_experiment_text("model: {name: long, heads: 64, hidden: 8192, layers: 64, seq_len: 65536, vocab: "
                                       "1024}\nsystem: system-small.yaml\nexecution: {recompute: full, tensor: 16, "
                                       "pipeline: 1, data: 1, microbatch: 1, global_batch: 64}\n", kOrigin));
}

TEST_CASE("hardening: a device profile's missing keys are reported all at once", "[hardening]") {
    const std::string msg = profile_error_of("format: strata-device-profile/1\nname: x\nkind: analytical\ndevice:\n  sm_count: 10\n");
    for (const char* key : {"device.peak_flops", "device.hbm_bandwidth_bytes_per_s", "device.memory_capacity_bytes",
                            "gemm.efficiency_ceiling", "gemm.k_half", "elementwise.bandwidth_efficiency"}) {
        INFO(key);
        CHECK_THAT(msg, Contains(std::string("missing required key '") + key + "'"));
    }
    // Each at the mapping it belongs in (device.* at sm_count, the only key written under device:), one line per
    // key, none about the stand-in values the reader went on with.
    CHECK_THAT(msg, Contains(at(5, 3) + "profile: missing required key 'device.peak_flops'"));
    CHECK(std::count(msg.begin(), msg.end(), '\n') == 6);
    CHECK_THAT(msg, !Contains("sm_count"));
}

TEST_CASE("hardening: an integer written with digits then a huge exponent is refused before any conversion",
          "[hardening]") {
    // Found by the fuzzer: "17179861e30" read as 1.7e37 was converted to an integer before the check that it fits
    // (UBSan float-cast-overflow); now it is an InputError naming the key.
    const std::string base = read(kValid + "../parts/profile-measured.yaml");
    REQUIRE_FALSE(base.empty());
    std::string text = base;
    const std::string key = "memory_capacity_bytes: ";
    const std::size_t at_key = text.find(key);
    REQUIRE(at_key != std::string::npos);
    text.replace(at_key + key.size(), text.find('\n', at_key) - at_key - key.size(), "17179861e30");
    const std::string msg = profile_error_of(text);
    CHECK_THAT(msg, Contains("device.memory_capacity_bytes: expected an integer"));
    CHECK_THAT(msg, Contains("17179861e30"));
}

TEST_CASE("hardening: two times for one collective size are refused at the second", "[hardening]") {
    std::string text = read(kValid + "../parts/profile-measured.yaml");
    const std::string line = "    - {op: all_reduce, ranks: 8, bytes: 1048576, time_us: 20.0}\n";
    const std::size_t at_line = text.find(line);
    REQUIRE(at_line != std::string::npos);
    text.insert(at_line + line.size(), "    - {op: all_reduce, ranks: 8, bytes: 1048576, time_us: 25.0}\n");
    const std::string msg = profile_error_of(text);
    CHECK_THAT(msg, Contains("measured.collectives[1]"));
    CHECK_THAT(msg, Contains("one time per size"));
}

TEST_CASE("hardening: Transformer Engine's reduce-scatter methods name a method", "[hardening]") {
    // Line 6 is the key's line: the head's five, then the key.
    const std::string bad = error_of(kHead + "  tp_overlap_proj_fprop: ring\n" + kRest);
    CHECK_THAT(bad, StartsWith(at(6, 26)) && Contains("execution.tp_overlap_proj_fprop") && Contains("pipeline") &&
                        Contains("ring_exchange"));
    // Without tp_comm_overlap they are read and change nothing (as TE's ub_cfg without --tp-comm-overlap).
    const Experiment ex = load_experiment_text(kHead + "  tp_overlap_fc2_fprop: ring_exchange\n" + kRest, kOrigin);
    CHECK(ex.cases[0].execution.tp_overlap_fc2_fprop == TpOverlapRs::ring_exchange);
    CHECK_FALSE(ex.cases[0].execution.tp_comm_overlap);
    const Experiment plain = load_experiment_text(kHead + kRest, kOrigin);
    CHECK(simulate(ex.cases[0]).iteration_time_s == simulate(plain.cases[0]).iteration_time_s);
}

TEST_CASE("hardening: Transformer Engine's userbuffer SMs and aggregation are checked against the case", "[hardening]") {
    const std::string head = "model: model-small.yaml\nsystem: system-small.yaml\nexecution:\n  tensor: 8\n  pipeline: 1\n"
                             "  sequence_parallel: true\n  tp_comm_overlap: true\n";
    // An overlap name that is not TE's, and aggregation of what is not a ring all-gather.
    CHECK_THAT(error_of(head + "  tp_overlap_num_sm: {fc3_fprop: 8}\n" + kRest),
               Contains("unknown key 'tp_overlap_num_sm.fc3_fprop' in execution") && Contains("Did you mean 'tp_overlap_num_sm."));
    CHECK_THAT(error_of(head + "  tp_overlap_aggregate: [proj_fprop]\n" + kRest),
               Contains("execution.tp_overlap_aggregate") && Contains("qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad"));
    // FP8 userbuffers only for the forward reduce-scatters, and only under FP8 (TE ignores fp8_buf otherwise).
    CHECK_THAT(error_of(head + "  tp_overlap_fp8_buf: [qkv_fprop]\n" + kRest),
               Contains("execution.tp_overlap_fp8_buf") && Contains("proj_fprop, fc2_fprop"));
    const Experiment buf = load_experiment_text(head + "  tp_overlap_fp8_buf: [fc2_fprop]\n" + kRest, kOrigin);
    CHECK(buf.cases[0].execution.tp_overlap_config.fp8_buf[std::size_t(TpOverlap::fc2_fprop)]);
    CHECK_FALSE(buf.cases[0].execution.tp_overlap_config.fp8_buf[std::size_t(TpOverlap::proj_fprop)]);
    CHECK_THAT(error_of(head + "  tp_overlap_sm_margin: proj\n" + kRest),
               Contains("execution.tp_overlap_sm_margin") && Contains("proj_fprop"));
    CHECK_THAT(error_of(head + "  tp_overlap_num_sm: {qkv_dgrad: 0}\n" + kRest), Contains("expected an integer in [1, 1024]"));
    // As many SMs as the device has leave the GEMM none.
    const std::string all = error_of(head + "  tp_overlap_num_sm: {qkv_dgrad: 1000}\n" + kRest);
    CHECK_THAT(all, Contains("tp_overlap_num_sm.qkv_dgrad (1000) must be below the device's SMs"));
    // Pairs of ranks need an even tensor size.
    const std::string odd = "model: model-small.yaml\nsystem: system-small.yaml\nexecution:\n  tensor: 1\n  pipeline: 1\n"
                            "  tp_overlap_aggregate: [fc2_dgrad]\n";
    CHECK_NOTHROW(load_experiment_text(odd + kRest, kOrigin));  // without tp_comm_overlap it changes nothing
    // Nor is num_sm checked against the device then; and where it is, only where it is used (a ring exchange's num_sm
    // matters only with a margin).
    CHECK_NOTHROW(load_experiment_text(odd + "  tp_overlap_num_sm: {qkv_dgrad: 1000}\n" + kRest, kOrigin));
    CHECK_NOTHROW(load_experiment_text(head + "  tp_overlap_num_sm: {qkv_fprop: 1000}\n" + kRest, kOrigin));
    CHECK_THAT(error_of(head + "  tp_overlap_num_sm: {qkv_fprop: 1000}\n  tp_overlap_sm_margin: [qkv_fprop]\n" + kRest),
               Contains("tp_overlap_num_sm.qkv_fprop (1000) must be below the device's SMs"));
    // The lists' default, [], can be written (the JSON echo writes it; a case can clear an experiment's list).
    const Experiment cleared = load_experiment_text(head + "  tp_overlap_sm_margin: []\n  tp_overlap_aggregate: []\n" + kRest, kOrigin);
    CHECK(cleared.cases[0].execution.tp_overlap_config == TpOverlapConfig{});
    const Experiment ok = load_experiment_text(head + "  tp_overlap_num_sm: {qkv_dgrad: 8, fc1_wgrad: 2}\n"
                                               "  tp_overlap_sm_margin: [proj_fprop]\n  tp_overlap_aggregate: [fc2_dgrad]\n" + kRest,
                                               kOrigin);
    const TpOverlapConfig& cfg = ok.cases[0].execution.tp_overlap_config;
    CHECK(cfg.sms(TpOverlap::qkv_dgrad) == 8);
    CHECK(cfg.sms(TpOverlap::fc1_wgrad) == 2);
    CHECK(cfg.sms(TpOverlap::proj_fprop) == 16);  // TE 1.x's default
    CHECK(cfg.margin(TpOverlap::proj_fprop) == 16);
    CHECK(cfg.margin(TpOverlap::fc2_fprop) == 0);
    CHECK(cfg.aggregated(TpOverlap::fc2_dgrad));
    CHECK_FALSE(cfg.aggregated(TpOverlap::qkv_fprop));
}

TEST_CASE("hardening: a companion key at its default value needs nothing, any other value names what it needs",
          "[hardening]") {
    // kRest has recompute: full and no recompute_layers.
    CHECK_NOTHROW(load_experiment_text(kHead + "  recompute_method: uniform\n" + kRest, kOrigin));
    CHECK_THAT(error_of(kHead + "  recompute_method: block\n" + kRest),
               Contains("execution.recompute_method") && Contains("needs recompute_layers"));
    // Without selective recompute only [] (no module, as the results echo it); with it, at least one.
    CHECK_NOTHROW(load_experiment_text(kHead + "  recompute_modules: []\n" + kRest, kOrigin));
    CHECK_THAT(error_of(kHead + "  recompute_modules: [core_attn]\n" + kRest),
               Contains("execution.recompute_modules") && Contains("needs recompute: selective"));
    CHECK_THAT(error_of(kHead + "  recompute_modules: []\n  recompute: selective\n  microbatch: 2\n  global_batch: 16\n"),
               Contains("execution.recompute_modules") && Contains("at least one module"));
    // recompute_layers 0 is every layer, one at a time (the default).
    const Experiment zero = load_experiment_text(kHead + "  recompute_layers: 0\n" + kRest, kOrigin);
    CHECK(zero.cases[0].execution.recompute_layers == 0);
    CHECK_THAT(error_of(kHead + "  recompute_layers: -1\n" + kRest), Contains("expected an integer in [0, 65536]"));
    // A one-stage "split" of every layer is the even split; any other first stage is an error.
    const Experiment one =
        load_experiment_text(kHead + "  first_stage_layers: 8\n  last_stage_layers: 8\n" + kRest, kOrigin);
    CHECK(one.cases[0].execution.first_stage_layers == 0);
    CHECK_THAT(error_of(kHead + "  first_stage_layers: 7\n" + kRest),
               Contains("execution.first_stage_layers") && Contains("needs pipeline >= 2"));
    // With p = 4 (even: 2 each) a first stage of the even share beside an uneven last stage stays as given.
    const std::string p4 = "model: model-small.yaml\nsystem: system-small.yaml\nexecution:\n  tensor: 1\n  pipeline: 4\n";
    const Experiment uneven = load_experiment_text(p4 + "  first_stage_layers: 2\n  last_stage_layers: 4\n" + kRest, kOrigin);
    CHECK(uneven.cases[0].execution.first_stage_layers == 2);
    CHECK(uneven.cases[0].execution.last_stage_layers == 4);
    CHECK(uneven.cases[0].execution.layers_on_stage(8, 1) == 1);
    const Experiment even = load_experiment_text(p4 + "  first_stage_layers: 2\n  last_stage_layers: 2\n" + kRest, kOrigin);
    CHECK(even.cases[0].execution.first_stage_layers == 0);
    CHECK(even.cases[0].execution.layers_on_stage(8, 1) == 2);
}
