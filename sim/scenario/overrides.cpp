// The --set overrides ("PART.KEY=VALUE") of an experiment's keys, read and checked (part, key, YAML value), and the
// execution part made of overrides alone (the search's --set).
#include "parts.hpp"
#include "strata/errors.hpp"
#include "strata/scenario.hpp"
#include "yaml_fields.hpp"

#include <algorithm>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

namespace fs = std::filesystem;
using parts::Override;

namespace {

/// Reads "PART.KEY=VALUE" as YAML (`KEY: VALUE`, origin "--set 'PART.KEY=VALUE'"), checking the part and the key.
Override read_override(const std::string& text) {
    const std::string origin = "--set '" + text + "'";
    const auto eq = text.find('=');
    const auto dot = text.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq)
        throw InputError(origin + ": expected PART.KEY=VALUE, PART one of model, execution, system (e.g. "
                                  "execution.microbatch=2, system.network.rails=4)");
    Override o;
    o.part = text.substr(0, dot);
    o.key = text.substr(dot + 1, eq - dot - 1);
    o.origin = origin;
    std::span<const std::string_view> known;
    if (o.part == "model") known = model_keys();
    else if (o.part == "execution") known = execution_keys();
    else if (o.part == "system") known = system_keys();
    else
        throw InputError(origin + ": '" + o.part + "' is not a part: model, execution or system (PART.KEY=VALUE)");
    if (std::find(known.begin(), known.end(), o.key) == known.end()) {
        std::string msg = origin + ": unknown " + o.part + " key '" + o.key + "'.";
        if (auto hint = yamlio::did_you_mean(o.key, known)) msg += " Did you mean '" + *hint + "'?";
        throw InputError(msg + " Valid keys: " + yamlio::join(known) + ".");
    }
    if (eq + 1 == text.size()) throw InputError(origin + ": no value after '='");
    std::string value = text.substr(eq + 1);
    // A file named on the command line is relative to the working directory (a part file's, to that file's).
    if (o.key == "device_profile" && fs::path(value).is_relative()) value = fs::absolute(value).lexically_normal().string();
    const YAML::Node doc = yamlio::load_text(o.key + ": " + value, origin);
    const auto it = doc.begin();
    o.key_node = it->first;
    o.value = it->second;
    return o;
}

}  // namespace

std::vector<Override> parts::read_overrides(const std::vector<std::string>& overrides) {
    std::vector<Override> read;
    for (const std::string& o : overrides) {
        Override r = read_override(o);
        for (const Override& earlier : read)
            if (earlier.part == r.part && earlier.key == r.key)
                throw InputError(r.origin + ": " + r.part + "." + r.key + " is set twice (also " + earlier.origin + "): keep one");
        read.push_back(std::move(r));
    }
    return read;
}

ExecutionOverrides read_execution_overrides(const std::vector<std::string>& overrides,
                                            std::span<const VariedKey> varied, const std::string& command) {
    ExecutionOverrides out;
    yamlio::Fields f("execution", "--set");
    for (const Override& o : parts::read_overrides(overrides)) {
        if (o.part != "execution") continue;  // model and system keys: load_model / load_system apply them
        const auto v = std::find_if(varied.begin(), varied.end(), [&](const VariedKey& k) { return k.key == o.key; });
        if (v != varied.end()) throw InputError(o.origin + ": " + command + " varies '" + o.key + "': " + v->instead);
        f.set(o.key, o.key_node, o.value, o.origin);
        out.keys.push_back(o.key);
    }
    // The keys that only mean something with one recompute mode are read with that mode's stand-in (the command's
    // candidates of other modes then ignore or refuse them).
    const char* mode = f.has("recompute_modules") ? "selective" : f.has("recompute_layers") ? "full" : nullptr;
    YAML::Node stand_in;
    if (mode != nullptr && !f.has("recompute")) {
        stand_in = yamlio::load_text(std::string("recompute: ") + mode, "--set stand-in");
        f.set("recompute", stand_in.begin()->first, stand_in.begin()->second, "--set stand-in");
    }
    // The required sizes are the command's to set: read with stand-ins, their absence is no error here.
    std::vector<yamlio::MissingKey> missing;
    yamlio::CollectMissing collect(f, missing);
    out.execution = parts::read_execution(f);
    return out;
}

ExecutionSpec with_choices(const ExecutionOverrides& set, const ExecutionChoices& choices,
                           const std::function<std::string(std::string_view key)>& both) {
    ExecutionSpec e = set.execution;
    auto choose = [&](const auto& choice, std::string_view key, auto& field) {
        if (!choice) return;
        if (set.sets(key)) throw InputError(both(key));
        field = *choice;
    };
    choose(choices.attention, "attention", e.attention);
    choose(choices.precision, "precision", e.precision);
    choose(choices.gradient_average, "gradient_average", e.gradient_average);
    choose(choices.grad_reduce_in_fp32, "grad_reduce_in_fp32", e.grad_reduce_in_fp32);
    return e;
}

}  // namespace strata
