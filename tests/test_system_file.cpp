// The system part: docs/system-file.md against the loader (its keys, required keys, defaults and ranges), every
// missing required key reported at once, and sweeps over system keys (a system per case).
#include "strata/errors.hpp"
#include "strata/report.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"

#include "fixtures.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace strata;
using Catch::Contains;
using Catch::StartsWith;

namespace {

using testing::data_path;
using testing::source_path;

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(' ');
    const auto e = s.find_last_not_of(' ');
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// One row of the key table of docs/system-file.md.
struct DocRow {
    std::string key, unit, fallback, range, source;
};

/// The rows of the doc's key table: the lines `| `key` | unit | default | valid range | source |`.
std::vector<DocRow> doc_rows() {
    std::ifstream in(source_path("docs/system-file.md"));
    REQUIRE(in);
    std::vector<DocRow> rows;
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("| `", 0) != 0) continue;
        std::vector<std::string> cells;
        std::stringstream ss(line.substr(1));
        std::string cell;
        while (std::getline(ss, cell, '|')) cells.push_back(trim(cell));
        INFO(line);
        REQUIRE(cells.size() == 5);
        REQUIRE(cells[0].size() > 2);
        REQUIRE(cells[0].front() == '`');
        REQUIRE(cells[0].back() == '`');
        rows.push_back({cells[0].substr(1, cells[0].size() - 2), cells[1], cells[2], cells[3], cells[4]});
    }
    return rows;
}

/// A plain number as the doc writes it (`24e9`, `0.13`, `2^62`), or nothing for text.
std::optional<double> doc_number(const std::string& s) {
    static const std::regex power(R"(2\^(\d+))");
    std::smatch m;
    if (std::regex_match(s, m, power)) return std::ldexp(1.0, std::stoi(m[1]));
    try {
        std::size_t pos = 0;
        const double v = std::stod(s, &pos);
        if (pos == s.size()) return v;
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

/// Written as an integer (digits or 2^N): its range ends are stepped past by 1 in integer arithmetic.
bool integral(const std::string& s) { return std::regex_match(s, std::regex(R"(\d+|2\^\d+)")); }

long long doc_integer(const std::string& s) {
    return s.rfind("2^", 0) == 0 ? (1LL << std::stoi(s.substr(2))) : std::stoll(s);
}

/// A system's required keys with values (the doc's rows marked required must be exactly these: see below).
std::map<std::string, std::string> required_values() {
    return {{"name", "doc-check"},
            {"device_profile", "../devices/a100-sxm4-80gb.yaml"},
            {"gpus_per_node", "8"},
            {"network.nic_bandwidth_bytes_per_s", "24e9"},
            {"network.nodes_per_leaf", "20"},
            {"optimizer.bytes_per_param_step", "42"}};
}

std::string yaml_of(const std::map<std::string, std::string>& keys, const std::string& indent = "") {
    std::string text;
    for (const auto& [k, v] : keys) text += indent + k + ": " + v + "\n";
    return text;
}

/// Where the system files live, so that `../devices/...` resolves.
const std::string kSystemOrigin = source_path("scenarios/systems/doc-check.yaml");

std::string system_error(const std::string& text) {
    try {
        (void)load_system_text(text, kSystemOrigin);
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("the system loaded:\n" << text);
    return {};
}

/// The value a result's JSON echoes for a system key (null when it echoes none).
nlohmann::json echo(const nlohmann::json& result, const std::string& key) {
    if (key == "name") return result["system"];
    if (key.rfind("variation.", 0) == 0) return result["variation"].value(key.substr(10), nlohmann::json());
    nlohmann::json at = result["system_spec"];
    std::stringstream ss(key);
    std::string part;
    while (std::getline(ss, part, '.')) {
        if (!at.is_object() || !at.contains(part)) return nullptr;
        at = at[part];
    }
    return at;
}

}  // namespace

TEST_CASE("docs/system-file.md lists exactly the keys the system loader accepts", "[system][docs]") {
    std::set<std::string> documented;
    for (const DocRow& r : doc_rows()) {
        INFO(r.key);
        CHECK(documented.insert(r.key).second);  // each key once
        CHECK_FALSE(r.unit.empty());
        CHECK_FALSE(r.fallback.empty());
        CHECK_FALSE(r.range.empty());
        CHECK_FALSE(r.source.empty());
    }
    std::set<std::string> accepted;
    for (std::string_view k : system_keys()) accepted.insert(std::string(k));
    for (const std::string& k : accepted) {
        INFO("accepted by the loader, not in the doc: " << k);
        CHECK(documented.count(k) == 1);
    }
    for (const std::string& k : documented) {
        INFO("in the doc, not accepted by the loader: " << k);
        CHECK(accepted.count(k) == 1);
    }
    CHECK(documented.size() == accepted.size());
}

TEST_CASE("the doc's required keys are those a system without any is reported missing, all at once", "[system][docs][errors]") {
    std::set<std::string> documented;
    for (const DocRow& r : doc_rows())
        if (r.fallback == "required") documented.insert(r.key);
    const std::string msg = system_error("description: a system with no other key\n");
    std::set<std::string> reported;
    std::stringstream lines(msg);
    std::string line;
    static const std::regex missing(R"(^(.+):(\d+):(\d+): system: missing required key '([^']+)' \(expected .+\)$)");
    while (std::getline(lines, line)) {
        std::smatch m;
        INFO(line);
        REQUIRE(std::regex_match(line, m, missing));
        CHECK(m[1] == kSystemOrigin);  // the mapping the key belongs in
        CHECK(m[2] == "1");
        reported.insert(m[4]);
    }
    CHECK(reported == documented);
    CHECK(reported.size() == required_values().size());
    // The test's own required values are exactly those keys, and are enough.
    std::set<std::string> given;
    for (const auto& [k, v] : required_values()) given.insert(k);
    CHECK(given == documented);
    CHECK_NOTHROW(load_system_text(yaml_of(required_values()), kSystemOrigin));
}

TEST_CASE("every default the doc states is the value the loader gives", "[system][docs]") {
    // A case on a system of only the required keys, echoed as the JSON results echo it.
    const std::string text = "model: ../models/gpt-22b.yaml\n"
                             "execution: {tensor: 8, pipeline: 1, data: 1, microbatch: 1, global_batch: 1, recompute: none}\n"
                             "system:\n" +
                             yaml_of(required_values(), "  ");
    const Experiment ex = load_experiment_text(text, source_path("scenarios/systems/doc-check.yaml"));
    REQUIRE(ex.cases.size() == 1);
    const nlohmann::json result = nlohmann::json::parse(to_json(ex.name, {analyze(ex.cases[0])}))["results"][0];
    std::set<std::string> keys;
    for (const DocRow& r : doc_rows()) keys.insert(r.key);
    int checked = 0;
    for (const DocRow& r : doc_rows()) {
        INFO(r.key << ": default '" << r.fallback << "'");
        const std::string named = r.fallback.size() > 2 && r.fallback.front() == '`' && r.fallback.back() == '`'
                                      ? r.fallback.substr(1, r.fallback.size() - 2)
                                      : std::string();
        if (const auto v = doc_number(r.fallback)) {
            const nlohmann::json got = echo(result, r.key);
            REQUIRE(got.is_number());
            CHECK(got.get<double>() == Approx(*v));
            ++checked;
        } else if (r.fallback == "true" || r.fallback == "false") {
            const nlohmann::json got = echo(result, r.key);
            REQUIRE(got.is_boolean());
            CHECK(got.get<bool>() == (r.fallback == "true"));
            ++checked;
        } else if (keys.count(named)) {  // the default is another key's value
            const nlohmann::json got = echo(result, r.key);
            REQUIRE_FALSE(got.is_null());
            CHECK(got == echo(result, named));
            ++checked;
        }
    }
    CHECK(checked >= 17);  // the rest are required, derived from the device profile, or text that is only echoed
}

TEST_CASE("every numeric range the doc states is the loader's: its ends accepted, one step past them refused",
          "[system][docs][errors]") {
    static const std::regex closed(R"(\[([^,\]]+), ([^,\]]+)\])");
    int checked = 0;
    for (const DocRow& r : doc_rows()) {
        std::smatch m;
        if (!std::regex_match(r.range, m, closed)) continue;
        const std::string lo = m[1], hi = m[2];
        if (!doc_number(lo) || !doc_number(hi)) continue;  // a range bounded by another key
        auto text = [&](const std::string& value) {
            std::map<std::string, std::string> keys = required_values();
            keys[r.key] = value;
            return yaml_of(keys);
        };
        auto number = [](double v) {
            std::ostringstream out;
            out.precision(17);
            out << v;
            return out.str();
        };
        const bool ints = integral(lo) && integral(hi);
        const std::string below = ints ? std::to_string(doc_integer(lo) - 1) : number(*doc_number(lo) - 1);
        const std::string above = ints ? std::to_string(doc_integer(hi) + 1) : number(*doc_number(hi) + 1);
        const std::string lo_text = ints ? std::to_string(doc_integer(lo)) : lo;
        const std::string hi_text = ints ? std::to_string(doc_integer(hi)) : hi;
        INFO(r.key << " in " << r.range);
        CHECK_NOTHROW(load_system_text(text(lo_text), kSystemOrigin));
        CHECK_NOTHROW(load_system_text(text(hi_text), kSystemOrigin));
        CHECK_THAT(system_error(text(below)), Contains("system." + r.key + ": expected "));
        CHECK_THAT(system_error(text(above)), Contains("system." + r.key + ": expected "));
        ++checked;
    }
    CHECK(checked >= 20);
}

TEST_CASE("a system file may leave out the network latencies and rails: the documented defaults", "[system]") {
    const SystemSpec s = load_system_text(yaml_of(required_values()), kSystemOrigin);
    const SystemSpec selene = load_system(source_path("scenarios/systems/selene-a100.yaml"));
    // The shipped DGX A100 file gives these explicitly; the defaults are its values.
    CHECK(s.network.nvlink_latency == selene.network.nvlink_latency);
    CHECK(s.network.nic_latency == selene.network.nic_latency);
    CHECK(s.network.switch_latency == selene.network.switch_latency);
    CHECK(s.network.collective_step_latency_inter == selene.network.collective_step_latency_inter);
    CHECK(s.network.p2p_latency == selene.network.p2p_latency);
    CHECK(s.network.rails == selene.network.rails);
    CHECK(s.network.rails == s.gpus_per_node);
    CHECK(s.network.nvlink_latency.us() == Approx(1.0));
    CHECK(s.network.switch_latency.us() == Approx(0.13));
    CHECK(s.network.p2p_latency.us() == Approx(10.0));
    // A 4-GPU node gets 4 rails.
    std::map<std::string, std::string> four = required_values();
    four["gpus_per_node"] = "4";
    CHECK(load_system_text(yaml_of(four), kSystemOrigin).network.rails == 4);
}

TEST_CASE("missing required keys of every part are reported together, each at its part's file and line", "[system][errors]") {
    std::string msg;
    try {
        (void)load_experiment(data_path("bad/missing_several.yaml"));
        FAIL("loaded");
    } catch (const InputError& e) {
        msg = e.what();
    }
    const std::string model = data_path("parts/model-no-heads.yaml") + ":2:1: model: missing required key ";
    const std::string exec = data_path("bad/missing_several.yaml") + ":2:1: execution: missing required key ";
    const std::string sys = data_path("parts/system-sparse.yaml") + ":3:1: system: missing required key ";
    const std::string expected = model + "'heads' (expected an integer in [1, 65536])\n" +
                                 exec + "'tensor' (expected an integer in [1, 65536])\n" +
                                 exec + "'recompute' (expected one of: none, selective, full)\n" +
                                 sys + "'gpus_per_node' (expected an integer in [1, 1024])\n" +
                                 sys + "'network.nic_bandwidth_bytes_per_s' (expected a number in [";
    CHECK_THAT(msg, StartsWith(expected));
    CHECK_THAT(msg, Contains("\n" + sys + "'network.nodes_per_leaf' (expected an integer in [1, 65536])\n" + sys +
                             "'optimizer.bytes_per_param_step' (expected a number in ["));
    CHECK(std::count(msg.begin(), msg.end(), '\n') == 6);  // seven keys, a line each
}

TEST_CASE("a misspelt key is reported before the required key it leaves missing", "[system][errors]") {
    std::map<std::string, std::string> keys = required_values();
    keys.erase("gpus_per_node");
    keys["gpus_per_nod"] = "8";
    const std::string msg = system_error(yaml_of(keys));
    CHECK_THAT(msg, Contains("unknown key 'gpus_per_nod' in system. Did you mean 'gpus_per_node'?"));
    // A value that depends on a missing key (kv_heads against heads) does not hide the missing key.
    const std::string text = "model: {hidden: 512, layers: 8, seq_len: 256, vocab: 1024, kv_heads: 4}\n"
                             "execution: {tensor: 1, pipeline: 1, microbatch: 1, global_batch: 1, recompute: none}\n"
                             "system: system-small.yaml\n";
    CHECK_THROWS_WITH(load_experiment_text(text, data_path("valid/inline.yaml")),
                      data_path("valid/inline.yaml") + ":1:1: model: missing required key 'heads' (expected an integer in [1, 65536])");
}

TEST_CASE("a one-GPU profile's missing NVLink bandwidth is listed with the other missing keys", "[system][errors]") {
    // profile-small.yaml without its intra_node block, as a profile calibrated on one GPU has none.
    std::ifstream in(data_path("valid/profile-small.yaml"));
    std::stringstream profile;
    profile << in.rdbuf();
    const std::string text = profile.str();
    const std::filesystem::path file =
        std::filesystem::temp_directory_path() / ("strata-profile-no-intra-" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(file) << text.substr(0, text.find("intra_node:"));
    const std::string msg = system_error("name: x\ndevice_profile: " + file.string() + "\n");
    std::filesystem::remove(file);
    CHECK_THAT(msg, Contains("system: missing required key 'gpus_per_node'"));
    CHECK_THAT(msg, Contains("system: missing required key 'network.nvlink_bandwidth_bytes_per_s' (expected a number in "
                             "[1e6, 1e15]: the device profile " + file.string() + " has no intra_node block"));
}

TEST_CASE("sweep over system keys: a system per case, infeasible combinations kept with the reason", "[system][sweep]") {
    const Experiment ex = load_experiment(data_path("valid/sweep-system.yaml"));
    REQUIRE(ex.cases.size() == 4);
    CHECK(ex.cases[0].name == "device_profile=profile-small.yaml, gpus_per_node=2");
    CHECK(ex.cases[3].name == "device_profile=../../../scenarios/devices/a100-sxm4-80gb.yaml, gpus_per_node=8");
    CHECK(ex.cases[0].system.device.name == "test-gpu");
    CHECK(ex.cases[2].system.device.name == "a100-sxm4-80gb");
    CHECK(ex.cases[1].system.gpus_per_node == 8);
    CHECK(ex.cases[3].system.network.nvlink_bandwidth.value == Approx(230e9));  // the A100 profile's
    CHECK(ex.cases[1].system.network.nvlink_bandwidth.value == Approx(100e9));  // the small profile's
    for (int i : {0, 2}) {
        INFO(ex.cases[i].name);
        CHECK(ex.cases[i].system.gpus_per_node == 2);
        CHECK(ex.cases[i].infeasible ==
              "system.network.rails: rails (4) must be at most gpus_per_node (2): each rail's NIC serves at least one GPU of a node");
    }
    CHECK(ex.cases[1].infeasible.empty());
    CHECK(ex.cases[3].infeasible.empty());
    // A capacity swept below the file's reserve: that case is kept too, with the reason.
    const std::string text = "model: model-small.yaml\n"
                             "system: {file: system-small.yaml, memory_reserved_bytes: 2e9}\n"
                             "execution: {tensor: 1, pipeline: 1, microbatch: 1, global_batch: 1, recompute: none}\n"
                             "sweep: {system.memory_capacity_bytes: [1e9, 16e9]}\n";
    const Experiment memory = load_experiment_text(text, data_path("valid/inline.yaml"));
    REQUIRE(memory.cases.size() == 2);
    CHECK(memory.cases[0].infeasible ==
          "system.memory_reserved_bytes: the reserve (2000000000 bytes) must be less than memory_capacity_bytes (1000000000)");
    CHECK(memory.cases[1].infeasible.empty());
    CHECK(memory.cases[1].system.memory_reserved.value == 2000000000);
    // Every file read is recorded once, both profiles included.
    int profiles = 0;
    for (const auto& f : ex.inputs) profiles += f.filename() == "profile-small.yaml" || f.filename() == "a100-sxm4-80gb.yaml";
    CHECK(profiles == 2);
}

TEST_CASE("sweep over oversubscription on a data-parallel run: iteration time never falls, and the JSON and CSV show "
          "each case's system", "[system][sweep]") {
    const Experiment ex = load_experiment(source_path("scenarios/sweeps/oversubscription.yaml"));
    REQUIRE(ex.cases.size() == 12);
    const RunOutcome run = run_cases(ex.cases, CaseOptions{}, 1);
    REQUIRE(run.failures == 0);
    const nlohmann::json json = nlohmann::json::parse(to_json(ex.name, run.results));
    const std::string csv = to_csv(run.results);
    const double overs[] = {1, 2, 4, 8};
    const int leaves[] = {2, 8, 20};
    for (int l = 0; l < 3; ++l) {
        double previous = 0;
        for (int o = 0; o < 4; ++o) {
            const std::size_t i = static_cast<std::size_t>(l * 4 + o);
            const CaseResult& r = run.results[i];
            INFO(r.scenario.name);
            REQUIRE(r.iteration);
            CHECK(r.scenario.system.network.oversubscription == overs[o]);
            CHECK(r.scenario.system.network.nodes_per_leaf == leaves[l]);
            CHECK(r.iteration->iteration_time_s >= previous);
            previous = r.iteration->iteration_time_s;
            const nlohmann::json& net = json["results"][i]["system_spec"]["network"];
            CHECK(net["oversubscription"].get<double>() == overs[o]);
            CHECK(net["nodes_per_leaf"].get<int>() == leaves[l]);
        }
    }
    // 2-node leaves: a leaf's uplinks carry half a NIC's bandwidth at oversubscription 4, a quarter at 8.
    CHECK(run.results[3].iteration->iteration_time_s > 1.5 * run.results[0].iteration->iteration_time_s);
    // The CSV's nodes_per_leaf and oversubscription columns hold each case's values.
    std::stringstream rows(csv);
    std::string header;
    std::getline(rows, header);
    std::vector<std::string> columns;
    {
        std::stringstream h(header.substr(0, header.find('\r')));
        std::string c;
        while (std::getline(h, c, ',')) columns.push_back(c);
    }
    const auto column = [&](const std::string& name) {
        return static_cast<std::size_t>(std::find(columns.begin(), columns.end(), name) - columns.begin());
    };
    const std::size_t leaf_col = column("nodes_per_leaf"), over_col = column("oversubscription");
    REQUIRE(leaf_col < columns.size());
    REQUIRE(over_col < columns.size());
    std::string row;
    for (std::size_t i = 0; std::getline(rows, row) && !row.empty(); ++i) {
        // The name (first field) is quoted: it holds a comma.
        const std::string rest = row.substr(row.find("\",") + 2);
        std::vector<std::string> fields{"name"};
        std::stringstream r(rest.substr(0, rest.find('\r')));
        std::string f;
        while (std::getline(r, f, ',')) fields.push_back(f);
        INFO(row);
        REQUIRE(fields.size() > std::max(leaf_col, over_col));
        CHECK(fields[leaf_col] == std::to_string(leaves[i / 4]));
        CHECK(fields[over_col] == std::to_string(static_cast<int>(overs[i % 4])));
    }
}

TEST_CASE("sweep: a bad system key or value is a located error naming the key and what is valid", "[system][sweep][errors]") {
    std::string msg;
    try {
        (void)load_experiment(data_path("bad/sweep_system_key.yaml"));
    } catch (const InputError& e) {
        msg = e.what();
    }
    CHECK_THAT(msg, StartsWith(data_path("bad/sweep_system_key.yaml") + ":7:3: sweep: unknown system key 'network.oversubscriptoin'."));
    CHECK_THAT(msg, Contains("Did you mean 'network.oversubscription'?"));
    CHECK_THAT(msg, Contains("Valid keys: name, device_profile, gpus_per_node,"));
    msg.clear();
    try {
        (void)load_experiment(data_path("bad/sweep_system_value.yaml"));
    } catch (const InputError& e) {
        msg = e.what();
    }
    CHECK(msg == data_path("bad/sweep_system_value.yaml") +
                     ":8:37: system.network.oversubscription: expected a number in [1, 64], got '0.5'");
    const std::string text = "model: model-small.yaml\nsystem: system-small.yaml\n"
                             "execution: {tensor: 1, pipeline: 1, microbatch: 1, global_batch: 1, recompute: none}\n"
                             "sweep: {hardware.gpus: [1, 2]}\n";
    CHECK_THROWS_WITH(load_experiment_text(text, data_path("valid/inline.yaml")),
                      data_path("valid/inline.yaml") +
                          ":4:9: sweep: 'hardware.gpus' must name a model, execution or system key (model.KEY, execution.KEY or system.KEY)");
}
