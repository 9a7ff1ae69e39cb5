// Tests of the result renderings (to_json, to_csv, print_table) on the analytical results of the
// paper's Table 4 cases: the JSON schema, agreement with the CaseResult values, one CSV row per case,
// and byte-identical output across runs.
#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/report.hpp"
#include "strata/scenario.hpp"

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

using namespace strata;
using Catch::Contains;
using nlohmann::json;

namespace {

std::string table4_path() { return std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table4.yaml"; }

std::vector<CaseResult> analyze_table4() {
    const Experiment ex = load_experiment(table4_path());
    std::vector<CaseResult> results;
    for (const Scenario& sc : ex.cases) results.push_back(analyze(sc));
    return results;
}

/// Splits on `sep`, except inside double quotes (CSV quoting; the quotes are kept).
std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::string cur;
    bool quoted = false;
    for (char c : text) {
        if (c == '"') quoted = !quoted;
        if (c == sep && !quoted) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

/// Non-empty lines of `text`.
std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    for (auto& l : split(text, '\n')) {
        if (!l.empty() && l.back() == '\r') l.pop_back();  // RFC 4180 rows end in CRLF
        if (!l.empty()) out.push_back(l);
    }
    return out;
}

std::size_t column(const std::vector<std::string>& header, const std::string& name) {
    for (std::size_t i = 0; i < header.size(); ++i) {
        if (header[i] == name) return i;
    }
    FAIL("CSV header has no column '" << name << "'");
    return 0;
}

}  // namespace

TEST_CASE("analyze gives positive per-layer times and Table 2 activation memory for Table 4", "[report]") {
    const auto results = analyze_table4();
    REQUIRE(results.size() == 5);
    for (const CaseResult& r : results) {
        INFO(r.scenario.name);
        CHECK_FALSE(r.error.has_value());
        CHECK_FALSE(r.iteration.has_value());
        CHECK(r.layer.forward_ms > 0);
        CHECK(r.layer.backward_ms > r.layer.forward_ms * 0.9);
        CHECK(r.layer.cost_source == "analytical");
        CHECK(r.memory.activation_per_layer.value > 0);
        CHECK(r.memory.capacity.value == 85899345920LL);
    }
    // Table 2 (s = 2048, b = 4, h = 6144, a = 64, t = 8): sbh (10 + 24/t + 5as/(ht)) for the baseline.
    const std::int64_t s = 2048, b = 4, h = 6144, a = 64, t = 8;
    CHECK(results[0].memory.activation_per_layer.value == s * b * h * (10 + 24 / t) + 5 * a * s * s * b / t);
    // Sequence parallelism and recomputation only ever reduce the activation memory of a layer.
    CHECK(results[1].memory.activation_per_layer < results[0].memory.activation_per_layer);
    CHECK(results[2].memory.activation_per_layer < results[3].memory.activation_per_layer);
    CHECK(results[3].memory.activation_per_layer < results[0].memory.activation_per_layer);
    CHECK(results[4].memory.activation_per_layer < results[3].memory.activation_per_layer);
    // Full recomputation repeats the forward pass in the backward pass.
    CHECK(results[2].layer.backward_ms > results[0].layer.backward_ms + 0.5 * results[0].layer.forward_ms);
}

TEST_CASE("to_json has the documented schema and the CaseResult values", "[report][json]") {
    const auto results = analyze_table4();
    const std::string text = to_json("Table 4", results);
    json root;
    REQUIRE_NOTHROW(root = json::parse(text));

    REQUIRE(root.is_object());
    CHECK(root.at("experiment") == "Table 4");
    REQUIRE(root.contains("results"));
    REQUIRE(root["results"].is_array());
    REQUIRE(root["results"].size() == results.size());

    for (std::size_t i = 0; i < results.size(); ++i) {
        const CaseResult& r = results[i];
        const json& j = root["results"][i];
        INFO(r.scenario.name);
        REQUIRE(j.is_object());
        CHECK(j.at("name") == r.scenario.name);
        CHECK(j.at("system") == "selene-a100");
        CHECK_FALSE(j.contains("error"));

        const json& m = j.at("model");
        for (const char* key : {"heads", "hidden", "layers", "seq_len", "vocab"}) {
            INFO(key);
            REQUIRE(m.contains(key));
            CHECK(m[key].is_number_integer());
        }
        CHECK(m["heads"] == r.scenario.model.heads);
        CHECK(m["hidden"] == r.scenario.model.hidden);
        CHECK(m["layers"] == r.scenario.model.layers);
        CHECK(m["seq_len"] == r.scenario.model.seq_len);
        CHECK(m["vocab"] == r.scenario.model.vocab);
        CHECK(m["heads"] == 64);
        CHECK(m["hidden"] == 6144);

        const json& e = j.at("execution");
        for (const char* key : {"tensor", "pipeline", "data", "context_parallel", "interleave", "microbatch", "global_batch"}) {
            INFO(key);
            REQUIRE(e.contains(key));
            CHECK(e[key].is_number_integer());
        }
        CHECK(e["tensor"] == r.scenario.execution.tensor);
        CHECK(e["pipeline"] == r.scenario.execution.pipeline);
        CHECK(e["data"] == r.scenario.execution.data);
        CHECK(e["context_parallel"] == r.scenario.execution.context);
        CHECK(e["interleave"] == r.scenario.execution.interleave);
        CHECK(e["microbatch"] == r.scenario.execution.microbatch);
        CHECK(e["global_batch"] == r.scenario.execution.global_batch);
        REQUIRE(e.contains("sequence_parallel"));
        CHECK(e["sequence_parallel"].is_boolean());
        CHECK(e["sequence_parallel"] == r.scenario.execution.sequence_parallel);
        REQUIRE(e.contains("recompute"));
        CHECK(e["recompute"] == to_string(r.scenario.execution.recompute));

        const json& mem = j.at("memory");
        for (const char* key : {"activation_bytes_per_layer", "activation_bytes_first_stage", "weights_bytes",
                                "gradients_bytes", "optimizer_bytes", "peak_bytes", "capacity_bytes"}) {
            INFO(key);
            REQUIRE(mem.contains(key));
            CHECK(mem[key].is_number_integer());
            CHECK(mem[key].get<std::int64_t>() > 0);
        }
        CHECK(mem["activation_bytes_per_layer"].get<std::int64_t>() == r.memory.activation_per_layer.value);
        CHECK(mem["activation_bytes_first_stage"].get<std::int64_t>() == r.memory.activation_first_stage.value);
        CHECK(mem["weights_bytes"].get<std::int64_t>() == r.memory.peak_stage.weights.value);
        CHECK(mem["gradients_bytes"].get<std::int64_t>() == r.memory.peak_stage.gradients.value);
        CHECK(mem["optimizer_bytes"].get<std::int64_t>() == r.memory.peak_stage.optimizer.value);
        CHECK(mem["peak_bytes"].get<std::int64_t>() == r.memory.peak_stage.total().value);
        CHECK(mem["capacity_bytes"].get<std::int64_t>() == r.memory.capacity.value);
        REQUIRE(mem.contains("fits"));
        CHECK(mem["fits"].is_boolean());
        CHECK(mem["fits"] == r.memory.fits());
        // The peak includes the parameter state.
        CHECK(mem["peak_bytes"].get<std::int64_t>() >= mem["weights_bytes"].get<std::int64_t>() +
                                                           mem["gradients_bytes"].get<std::int64_t>() +
                                                           mem["optimizer_bytes"].get<std::int64_t>());

        const json& layer = j.at("layer");
        REQUIRE(layer.contains("forward_ms"));
        REQUIRE(layer.contains("backward_ms"));
        CHECK(layer["forward_ms"].get<double>() == Approx(r.layer.forward_ms));
        CHECK(layer["backward_ms"].get<double>() == Approx(r.layer.backward_ms));

        // Without an engine run there are no iteration results.
        CHECK_FALSE(j.contains("iteration_time_s"));
    }
}

TEST_CASE("to_csv has a header and one row per case with the same values", "[report][csv]") {
    const auto results = analyze_table4();
    const std::string text = to_csv(results);
    const auto rows = lines(text);
    REQUIRE(rows.size() == results.size() + 1);

    const auto header = split(rows[0], ',');
    CHECK(header.front() == "name");
    const std::size_t c_act = column(header, "activation_bytes_per_layer");
    const std::size_t c_first = column(header, "activation_bytes_first_stage");
    const std::size_t c_tensor = column(header, "tensor");
    const std::size_t c_sp = column(header, "sequence_parallel");
    const std::size_t c_rc = column(header, "recompute");
    const std::size_t c_peak = column(header, "peak_bytes");
    const std::size_t c_fits = column(header, "fits");
    const std::size_t c_fwd = column(header, "forward_ms");
    const std::size_t c_bwd = column(header, "backward_ms");
    const std::size_t c_err = column(header, "error");

    for (std::size_t i = 0; i < results.size(); ++i) {
        const CaseResult& r = results[i];
        INFO(rows[i + 1]);
        const auto f = split(rows[i + 1], ',');
        REQUIRE(f.size() == header.size());
        CHECK(f[0] == r.scenario.name);
        CHECK(f[1] == "gpt-22b");
        CHECK(f[c_tensor] == "8");
        CHECK(f[c_sp] == (r.scenario.execution.sequence_parallel ? "true" : "false"));
        CHECK(f[c_rc] == to_string(r.scenario.execution.recompute));
        CHECK(std::stoll(f[c_act]) == r.memory.activation_per_layer.value);
        CHECK(std::stoll(f[c_first]) == r.memory.activation_first_stage.value);
        CHECK(std::stoll(f[c_peak]) == r.memory.peak_stage.total().value);
        CHECK(f[c_fits] == (r.memory.fits() ? "true" : "false"));
        CHECK(std::stod(f[c_fwd]) == Approx(r.layer.forward_ms).margin(1e-4));
        CHECK(std::stod(f[c_bwd]) == Approx(r.layer.backward_ms).margin(1e-4));
        CHECK(f[c_err].empty());
    }
}

TEST_CASE("JSON and CSV agree on the activation bytes", "[report][json][csv]") {
    const auto results = analyze_table4();
    const json root = json::parse(to_json("Table 4", results));
    const auto rows = lines(to_csv(results));
    const std::size_t c_act = column(split(rows[0], ','), "activation_bytes_per_layer");
    REQUIRE(rows.size() == root["results"].size() + 1);
    for (std::size_t i = 0; i < results.size(); ++i) {
        CHECK(std::stoll(split(rows[i + 1], ',')[c_act]) ==
              root["results"][i]["memory"]["activation_bytes_per_layer"].get<std::int64_t>());
        CHECK(split(rows[i + 1], ',')[0] == root["results"][i]["name"].get<std::string>());
    }
}

TEST_CASE("JSON memory.by_stage: every pipeline stage by category, its largest total the peak", "[report][json]") {
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table5.yaml");
    const auto it = std::find_if(ex.cases.begin(), ex.cases.end(), [](const Scenario& c) { return c.name == "175B present work"; });
    REQUIRE(it != ex.cases.end());
    const Scenario& sc = *it;
    const json r = json::parse(to_json("Table 5", {analyze(sc)}))["results"][0];
    const json& by_stage = r["memory"]["by_stage"];
    const std::size_t p = std::size_t(sc.execution.pipeline);
    const char* categories[] = {
        "weights_bytes",          "activations_bytes", "gradients_bytes",           "optimizer_bytes",
        "embedding_output_bytes", "recompute_bytes",   "attention_workspace_bytes", "reserved_bytes"};
    for (const char* k : categories) REQUIRE(by_stage[k].size() == p);
    REQUIRE(by_stage["total_bytes"].size() == p);
    REQUIRE(by_stage["units_in_flight"].size() == p);
    std::int64_t largest = 0;
    for (std::size_t s = 0; s < p; ++s) {
        std::int64_t sum = 0;
        for (const char* k : categories) sum += by_stage[k][s].get<std::int64_t>();
        CHECK(sum == by_stage["total_bytes"][s].get<std::int64_t>());
        CHECK(by_stage["activations_bytes"][s].get<std::int64_t>() > 0);
        largest = std::max(largest, sum);
    }
    CHECK(largest == r["memory"]["peak_bytes"].get<std::int64_t>());
    CHECK(by_stage["total_bytes"][r["memory"]["peak_stage"].get<std::size_t>()] == r["memory"]["peak_bytes"]);
    CHECK(by_stage["embedding_output_bytes"][0].get<std::int64_t>() > 0);   // embedding masks on the first stage
    // Interleaved 1F1B (m = 3): stage r holds its warm-up's 2(p - r - 1) + (m - 1)p chunks and one more at its peak.
    REQUIRE(sc.execution.interleave == 3);
    for (std::size_t s = 0; s < p; ++s)
        CHECK(by_stage["units_in_flight"][s].get<std::size_t>() == 2 * (p - s - 1) + 2 * p + 1);
}

TEST_CASE("renderings are deterministic", "[report]") {
    const auto a = analyze_table4();
    const auto b = analyze_table4();
    CHECK(to_json("Table 4", a) == to_json("Table 4", b));
    CHECK(to_csv(a) == to_csv(b));
    std::ostringstream ta, tb;
    print_table(ta, "Table 4", a);
    print_table(tb, "Table 4", b);
    CHECK(ta.str() == tb.str());
    CHECK_FALSE(ta.str().empty());
}

TEST_CASE("a case that failed is rendered with its error and without results", "[report]") {
    auto results = analyze_table4();
    results.resize(2);
    results[1].error = "stalled, see details";
    const json root = json::parse(to_json("with error", results));
    REQUIRE(root["results"].size() == 2);
    CHECK(root["results"][0].contains("memory"));
    const json& failed = root["results"][1];
    CHECK(failed.at("name") == results[1].scenario.name);
    CHECK(failed.at("error") == "stalled, see details");
    CHECK_FALSE(failed.contains("memory"));
    CHECK_FALSE(failed.contains("layer"));

    const auto rows = lines(to_csv(results));
    REQUIRE(rows.size() == 3);
    CHECK_THAT(rows[2], Contains("\"stalled, see details\""));
    const auto failed_fields = split(rows[2], ',');
    REQUIRE(failed_fields.size() == split(rows[0], ',').size());
    CHECK(failed_fields.back() == "\"stalled, see details\"");
    CHECK(failed_fields[column(split(rows[0], ','), "activation_bytes_per_layer")].empty());

    std::ostringstream table;
    print_table(table, "with error", results);
    CHECK_THAT(table.str(), Contains("error: stalled, see details"));
}

TEST_CASE("print_table lists every case", "[report]") {
    const auto results = analyze_table4();
    std::ostringstream out;
    print_table(out, "Table 4 - per-layer time, 22B", results);
    const std::string text = out.str();
    CHECK_THAT(text, Contains("Table 4 - per-layer time, 22B"));
    CHECK_THAT(text, Contains("act/layer MB"));
    for (const CaseResult& r : results) CHECK_THAT(text, Contains(r.scenario.name));
    CHECK(lines(text).size() >= results.size() + 3);  // title, header, rule, rows
}

TEST_CASE("print_table notes a model of today's kind run with the paper's unfused attention", "[report]") {
    const auto note = [](const std::vector<CaseResult>& results) {
        std::ostringstream out;
        print_table(out, "t", results);
        return out.str();
    };
    // The paper's GPT with unfused attention (Table 4): no note.
    CHECK(note(analyze_table4()).find("note: ") == std::string::npos);
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/llama/llama3-h100.yaml");
    std::vector<CaseResult> flash, unfused;
    for (const Scenario& sc : ex.cases)
        (sc.execution.attention == Attention::unfused ? unfused : flash).push_back(analyze(sc));
    REQUIRE(unfused.size() == 1);
    REQUIRE(flash.size() >= 2);
    CHECK(note(flash).find("note: ") == std::string::npos);
    std::vector<CaseResult> both = flash;
    both.push_back(unfused.front());
    both.push_back(unfused.front());
    const std::string text = note(both);
    CHECK_THAT(text, Contains("note: '" + unfused.front().scenario.name + "' and 1 more:\n  a model of today's kind"));
    CHECK_THAT(text, Contains("(execution.attention: flash)"));
}

TEST_CASE("print_layer_breakdown shows both passes", "[report]") {
    const Experiment ex = load_experiment(table4_path());
    std::ostringstream out;
    print_layer_breakdown(out, ex.cases.at(0));
    const std::string text = out.str();
    CHECK_THAT(text, Contains("baseline no recompute"));
    CHECK_THAT(text, Contains("forward pass"));
    CHECK_THAT(text, Contains("backward pass"));
    CHECK_THAT(text, Contains("gemm"));
}

TEST_CASE("print_layer_breakdown: consecutive identical kernels as one line with their count and sums", "[report]") {
    // MLPerf v3.1 (TE's TransformerLayer, fp8_scale_update per_module): three modules x three updates before each pass.
    const Experiment ex =
        load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/mlperf-gpt3-h100.yaml");
    const Scenario& sc = ex.cases.at(0);
    std::ostringstream out;
    print_layer_breakdown(out, sc);
    const std::string text = out.str();
    const std::vector<std::string> all = lines(text);
    const auto grouped = std::count_if(all.begin(), all.end(), [](const std::string& l) {
        return l.find("fp8.scale-update x 9 ") != std::string::npos;
    });
    CHECK(grouped == 2);                                          // forward and backward
    CHECK(text.find("fp8.scale-update  ") == std::string::npos);  // no ungrouped line left
    // The grouped line's own time is the nine kernels' sum.
    const LayerPlan plan = build_layer(layer_config(sc.model, sc.execution));
    const Kernel& update = plan.forward.front().kernels.front();
    REQUIRE(update.name == "fp8.scale-update");
    const double ms = 9 * CostModel(sc.system.device).kernel(update).time.ms();
    const auto line = std::find_if(all.begin(), all.end(), [](const std::string& l) {
        return l.find("fp8.scale-update x 9 ") != std::string::npos;
    });
    REQUIRE(line != all.end());
    CHECK_THAT(*line, Contains(fmt::format("{:>9.3f} ms", ms)));
    // Every kernel and collective of each pass is printed, a run of identical elementwise kernels once: as many lines
    // between the pass headers as the plan has such entries (nothing skipped after a group).
    auto entries = [](const std::vector<Step>& pass) {
        std::size_t n = 0;
        for (const Step& st : pass) {
            if (st.kind == Step::Kind::collective) {
                ++n;
                continue;
            }
            for (std::size_t j = 0; j < st.kernels.size(); ++j) {
                const Kernel& k = st.kernels[j];
                const Kernel* before = j > 0 ? &st.kernels[j - 1] : nullptr;
                const bool same = before && k.kind == KernelKind::elementwise && before->kind == k.kind &&
                                  before->name == k.name && before->op_class == k.op_class && before->bytes == k.bytes;
                if (!same) ++n;
            }
        }
        return n;
    };
    const auto starts = [](const char* prefix) {
        return [prefix](const std::string& l) { return l.rfind(prefix, 0) == 0; };
    };
    const auto fwd = std::find_if(all.begin(), all.end(), starts("  forward pass"));
    const auto bwd = std::find_if(all.begin(), all.end(), starts("  backward pass"));
    REQUIRE(fwd != all.end());
    REQUIRE(bwd != all.end());
    CHECK(static_cast<std::size_t>(std::count_if(fwd + 1, bwd, starts("    "))) == entries(plan.forward));
    CHECK(static_cast<std::size_t>(std::count_if(bwd + 1, all.end(), starts("    "))) == entries(plan.backward));
}

TEST_CASE("to_csv quotes as RFC 4180 and names what each case varies", "[report][csv]") {
    auto results = analyze_table4();
    results.resize(1);
    results[0].scenario.name = "t=8, \"fast\" case";
    results[0].error = "line one\nline two";
    const std::string text = to_csv(results);
    // Header and row end in CRLF; the name keeps its comma and quotes (doubled inside the quoted field); the
    // multi-line error is one quoted field.
    CHECK(text.find("\r\n") != std::string::npos);
    CHECK_THAT(text, Contains("\"t=8, \"\"fast\"\" case\""));
    CHECK_THAT(text, Contains("\"line one\nline two\""));
    const auto header = split(lines(text)[0], ',');
    for (const char* col : {"system", "gpus", "schedule", "precision", "attention", "distributed_optimizer",
                            "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "context_parallel",
                            "nic_bandwidth_bytes_per_s", "oversubscription", "variation_seed", "tokens_per_s",
                            "tflops_per_gpu"}) {
        INFO(col);
        CHECK(column(header, col) < header.size());
    }
}

TEST_CASE("JSON echoes the system as simulated, so cases differing only there differ in the output", "[report][json]") {
    auto results = analyze_table4();
    results.resize(2);
    results[1].scenario.system.network.oversubscription = 2.0;
    results[1].scenario.system.variation.seed = 7;
    const json root = json::parse(to_json("systems", results));
    const json& a = root["results"][0];
    const json& b = root["results"][1];
    CHECK(a["system_spec"]["network"]["oversubscription"].get<double>() == 1.0);
    CHECK(b["system_spec"]["network"]["oversubscription"].get<double>() == 2.0);
    CHECK(a["system_spec"]["network"]["rails"].get<int>() == results[0].scenario.system.network.rails);
    CHECK(a["system_spec"]["gpus_per_node"].get<int>() == 8);
    CHECK(b["variation"]["seed"].get<std::uint64_t>() == 7);
    CHECK(a["device_profile"]["name"] == results[0].scenario.system.device.name);
}

TEST_CASE("JSON names the context-parallel size, which the GPU count includes", "[report][json]") {
    auto results = analyze_table4();
    results.resize(1);
    results[0].scenario.execution.context = 2;
    const json e = json::parse(to_json("cp", results))["results"][0]["execution"];
    CHECK(e["context_parallel"].get<int>() == 2);
    CHECK(e["gpus"].get<int>() == 16);  // t x c x p x d
}

TEST_CASE("to_csv adds a column for a quantity the cases vary that has none of its own, only then", "[report][csv]") {
    auto results = analyze_table4();
    results.resize(2);
    // Table 4's cases share the model and the system: none of the conditional columns appears.
    auto header = split(lines(to_csv(results))[0], ',');
    for (const char* col : {"p2p_latency_us", "memory_capacity_bytes", "model_seq_len", "optimizer_fixed_overhead_ms"}) {
        INFO(col);
        CHECK(std::find(header.begin(), header.end(), col) == header.end());
    }
    // A system latency and the sequence length differ: their columns appear before the results, with each value.
    results[1].scenario.system.network.p2p_latency = Time::from_us(100);
    results[1].scenario.model.seq_len = 4096;
    const auto rows = lines(to_csv(results));
    header = split(rows[0], ',');
    const std::size_t p2p = column(header, "p2p_latency_us"), seq = column(header, "model_seq_len");
    CHECK(p2p < column(header, "activation_bytes_per_layer"));
    CHECK(split(rows[2], ',')[p2p] == "100");
    CHECK(split(rows[2], ',')[seq] == "4096");
    CHECK(split(rows[1], ',')[seq] == std::to_string(results[0].scenario.model.seq_len));
    CHECK(std::find(header.begin(), header.end(), "memory_capacity_bytes") == header.end());
}

TEST_CASE("JSON and CSV echo tp_overlap_fp8_buf, and the echo loads back", "[report][json]") {
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/nemo-h100.yaml");
    const auto it = std::find_if(ex.cases.begin(), ex.cases.end(),
                                 [](const Scenario& c) { return c.name == "GPT3-175B on 512 (25.02)"; });
    REQUIRE(it != ex.cases.end());
    const std::vector<CaseResult> results = {analyze(*it)};
    const json e = json::parse(to_json("NeMo", results))["results"][0]["execution"];
    CHECK(e["tp_overlap_fp8_buf"] == json::array({"proj_fprop"}));
    const auto rows = lines(to_csv(results));
    REQUIRE(rows.size() == 2);
    const std::vector<std::string> header = split(rows[0], ','), row = split(rows[1], ',');
    const auto column = std::find(header.begin(), header.end(), "tp_overlap_fp8_buf");
    REQUIRE(column != header.end());
    CHECK(row.at(std::size_t(column - header.begin())) == "proj_fprop");
    // The echoed list is a valid value of the key.
    const std::string again =
        "model: {file: ../models/gpt-22b.yaml}\nsystem: ../systems/dgx-h100.yaml\n"
        "execution: {tensor: 4, pipeline: 1, data: 1, microbatch: 1, global_batch: 1, recompute: none, "
        "sequence_parallel: true, tp_comm_overlap: true, precision: fp8, tp_overlap_fp8_buf: " +
        e["tp_overlap_fp8_buf"].dump() + "}\n";
    const Experiment back =
        load_experiment_text(again, std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/echo.yaml");
    CHECK(back.cases.at(0).execution.tp_overlap_config.fp8_buf == it->execution.tp_overlap_config.fp8_buf);
}

TEST_CASE("JSON and CSV echo transformer_impl as in force, and the echo loads back", "[report][json]") {
    const Experiment ex =
        load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/mlperf-gpt3-h100.yaml");
    const Experiment table5 = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table5.yaml");
    const std::vector<CaseResult> results = {analyze(ex.cases.at(0)), analyze(table5.cases.at(0))};
    const json r = json::parse(to_json("echo", results))["results"];
    CHECK(r[0]["execution"]["transformer_impl"] == "te_transformer_layer");
    CHECK(r[1]["execution"]["transformer_impl"] == "local");  // auto without FP8
    const auto rows = lines(to_csv(results));
    REQUIRE(rows.size() == 3);
    const std::vector<std::string> header = split(rows[0], ',');
    const auto column = std::size_t(std::find(header.begin(), header.end(), "transformer_impl") - header.begin());
    REQUIRE(column < header.size());
    CHECK(split(rows[1], ',').at(column) == "te_transformer_layer");
    CHECK(split(rows[2], ',').at(column) == "local");
    const std::string again =
        "model: {file: ../models/gpt-22b.yaml}\nsystem: ../systems/dgx-h100.yaml\n"
        "execution: {tensor: 4, pipeline: 1, data: 1, microbatch: 1, global_batch: 1, recompute: none, "
        "precision: fp8, transformer_impl: " +
        r[0]["execution"]["transformer_impl"].get<std::string>() + "}\n";
    const Experiment back =
        load_experiment_text(again, std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/echo.yaml");
    CHECK(back.cases.at(0).execution.transformer_impl == ex.cases.at(0).execution.transformer_impl);
}

TEST_CASE("the results' model and execution echo load back as the same case", "[report][json]") {
    // Cases that echo what was not given: a bucket size not in force (0), recompute keys without recompute, a one-stage
    // split (first = last = every layer), Megatron-Core's split with the embedding and loss counted, an uneven split
    // with block recompute, selective recompute of the norms and the MLP.
    const std::string dir = std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/";
    // Table 5's present work: biases, SP and transformer_impl auto echoed as local (the paper's layers); a TE echo
    // there would move its backward.
    struct Pick {
        std::string file;
        std::size_t index;
        std::string system;
    };
    const std::string h100 = "../systems/dgx-h100.yaml";
    const std::vector<Pick> picks = {{"megatron-h100.yaml", 0, h100},
                                     {"nemo-h100.yaml", 0, h100},
                                     {"dgxc-h100-v2504.yaml", 0, h100},
                                     {"mlperf-llama31-405b.yaml", 0, h100},
                                     {"mlperf-gpt3-h100.yaml", 0, h100},
                                     {"../llama/llama3-h100.yaml", 5, h100},
                                     {"../llama/llama3-h100.yaml", 6, h100},
                                     {"../paper/table5.yaml", 1, "../systems/selene-a100.yaml"}};
    for (const auto& [file, index, system] : picks) {
        INFO(file << " case " << index);
        const Experiment ex = load_experiment(dir + file);
        const CaseResult first = analyze(ex.cases.at(index));
        const json echo = json::parse(to_json("echo", {first}))["results"][0];
        json model = echo["model"];
        model.erase("parameters");
        json execution = echo["execution"];
        execution.erase("gpus");
        const std::string text =
            "model: " + model.dump() + "\nsystem: " + system + "\nexecution: " + execution.dump() + "\n";
        const Experiment back = load_experiment_text(text, dir + "echo.yaml");
        REQUIRE(back.cases.size() == 1);
        const CaseResult again = analyze(back.cases[0]);
        CHECK(json::parse(to_json("echo", {again}))["results"][0]["execution"] == echo["execution"]);
        CHECK(again.layer.forward_ms == first.layer.forward_ms);
        CHECK(again.layer.backward_ms == first.layer.backward_ms);
        CHECK(again.memory.peak_stage.total().value == first.memory.peak_stage.total().value);
    }
}
