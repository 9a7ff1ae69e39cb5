// Loads experiment files: model, execution and system parts (each a file or an inline mapping),
// experiment-level overrides, and named cases. Validation is strict and every error is located.
#include "strata/scenario.hpp"

#include "parts.hpp"
#include "strata/errors.hpp"
#include "yaml_fields.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

namespace strata {

namespace {
using yamlio::Fields;
namespace fs = std::filesystem;

constexpr std::array<std::string_view, 15> kModelKeys = {
    "name",     "heads", "hidden", "layers",      "seq_len", "vocab",   "ffn_hidden",         "tied_embeddings",
    "kv_heads", "mlp",   "norm",   "linear_bias", "dropout", "position_embedding", "description"};
constexpr std::array<std::string_view, 7> kExperimentKeys = {"name",   "description", "model", "execution",
                                                             "system", "cases",       "sweep"};
constexpr std::array<std::string_view, 5> kCaseKeys = {"name", "description", "model", "execution", "system"};
constexpr std::array<std::string_view, 1> kFileKey = {"file"};

/// Applies one experiment- or case-level part entry: a path (string) replaces the part with that file;
/// a mapping overrides keys, after first replacing the part if it has a `file:` key.
void apply_part(Fields& fields, const YAML::Node& key_node, const YAML::Node& node, const std::string& file) {
    auto load_into = [&](const YAML::Node& path_key, const YAML::Node& path_node) {
        if (!path_node.IsScalar() || path_node.Scalar().empty()) {
            throw InputError(yamlio::where_value(file, path_key, path_node) + ": " + fields.part() +
                             ": expected a file path or a mapping of keys");
        }
        fs::path p = fs::path(file).parent_path() / path_node.Scalar();
        std::string pstr = p.lexically_normal().string();
        try {
            YAML::Node loaded = yamlio::load_file(p);
            fields.reset(loaded, pstr);
        } catch (const InputError& e) {
            throw InputError(std::string(e.what()) + " (referenced as " + fields.part() + " at " +
                             yamlio::where(file, path_node.Mark()) + ")");
        }
    };
    if (node.IsScalar()) {
        load_into(key_node, node);
    } else if (node.IsMap()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
            if (it->first.Scalar() == "file") load_into(it->first, it->second);
        }
        fields.merge(node, file, kFileKey);
    } else {
        throw InputError(yamlio::where_value(file, key_node, node) + ": " + fields.part() +
                         ": expected a file path or a mapping of keys");
    }
}

/// The key node of `map`'s entry `key` (an undefined node when absent), for locating an empty value.
YAML::Node key_of(const YAML::Node& map, const std::string& key) {
    for (auto it = map.begin(); it != map.end(); ++it) {
        if (it->first.Scalar() == key) return it->first;
    }
    return YAML::Node(YAML::NodeType::Undefined);
}

/// A string-valued entry that is only echoed (name, description): when given, a non-empty plain string.
void check_string(const YAML::Node& map, const std::string& key, const std::string& what, const std::string& file) {
    const YAML::Node v = map[key];
    if (!v) return;
    if (!v.IsScalar() || v.Scalar().empty()) {
        throw InputError(yamlio::where_value(file, key_of(map, key), v) + ": " + what + "." + key +
                         ": expected a non-empty string, got " +
                         (v.IsSequence() ? "a list" : v.IsMap() ? "a mapping" : "nothing"));
    }
}

ModelSpec read_model(const Fields& f) {
    f.check_known(kModelKeys);
    ModelSpec m;
    m.name = f.get_string("name", std::string("model"));
    if (f.has("description")) (void)f.get_string("description");
    m.heads = static_cast<int>(f.get_int("heads", 1, 1 << 16));
    m.hidden = static_cast<int>(f.get_int("hidden", 1, 1 << 24));
    m.layers = static_cast<int>(f.get_int("layers", 1, 1 << 16));
    m.seq_len = static_cast<int>(f.get_int("seq_len", 1, 1 << 24));
    m.vocab = static_cast<int>(f.get_int("vocab", 1, 1 << 26));
    m.ffn_hidden = static_cast<int>(f.get_int("ffn_hidden", 1, 1 << 26, 4LL * m.hidden));
    m.tied_embeddings = f.get_bool("tied_embeddings", true);
    m.kv_heads = f.has("kv_heads") ? static_cast<int>(f.get_int("kv_heads", 1, m.heads)) : 0;  // 0: one group per head
    constexpr std::array<std::string_view, 3> mlp = {"gelu", "swiglu", "squared_relu"};
    const std::string mlp_name = f.get_choice("mlp", mlp, "gelu");
    m.mlp = mlp_name == "gelu" ? Mlp::gelu : mlp_name == "swiglu" ? Mlp::swiglu : Mlp::squared_relu;
    constexpr std::array<std::string_view, 2> norm = {"layernorm", "rmsnorm"};
    m.norm = f.get_choice("norm", norm, "layernorm") == "layernorm" ? Norm::layernorm : Norm::rmsnorm;
    m.linear_bias = f.get_bool("linear_bias", true);
    m.dropout = f.get_double("dropout", 0.0, 0.99, 0.1);
    constexpr std::array<std::string_view, 2> pos = {"learned", "rope"};
    m.position_embedding =
        f.get_choice("position_embedding", pos, "learned") == "learned" ? PositionEmbedding::learned : PositionEmbedding::rope;
    return m;
}

}  // namespace


std::span<const std::string_view> model_keys() { return kModelKeys; }

namespace {
using parts::read_execution;

/// A case's three parts checked for unknown keys (with "did you mean"), before anything is read from them.
void check_known_keys(const Fields& model, const Fields& exec, const Fields& sys) {
    model.check_known(kModelKeys);
    exec.check_known(execution_keys());
    sys.check_known(system_keys());
}

/// first_stage_layers / last_stage_layers that give the layers the even split gives (as the results echo them)
/// change nothing: they are taken as not given, so that they neither need pipeline >= 2 nor exclude the
/// account_for_*_in_pipeline_split rules.
void same_split_as_even(Scenario& sc) {
    ExecutionSpec& e = sc.execution;
    if (e.first_stage_layers == 0 && e.last_stage_layers == 0) return;
    ExecutionSpec even = e;
    even.first_stage_layers = even.last_stage_layers = 0;
    const int layers = sc.model.layers;
    if (e.pipeline < 1 || layers < 1) return;  // find_problem reports those
    long long total = 0;
    for (int st = 0; st < e.pipeline; ++st)
        total += even.layers_on_stage(layers, st);
    if (total != layers) return;  // no even split to compare with
    const bool first = e.first_stage_layers == 0 || e.first_stage_layers == even.layers_on_stage(layers, 0);
    const bool last = e.last_stage_layers == 0 || e.last_stage_layers == even.layers_on_stage(layers, e.pipeline - 1);
    if (first && last) e.first_stage_layers = e.last_stage_layers = 0;
}

/// One case from its three parts. `system_read` holds the system once read, for the next case when no sweep axis
/// is a system key (the system and its device profile are then read once); `reread_system` reads it for this case
/// (a sweep over system keys), a system whose keys do not fit together then being a reason not to run.
/// Every missing required key of the three parts is reported at once.
Scenario build_case(const std::string& name, const std::string& source, const Fields& model, const Fields& exec,
                    const Fields& sys, std::optional<SystemSpec>& system_read, parts::DeviceProfiles& profiles,
                    bool allow_infeasible = false, bool reread_system = false) {
    // Unknown keys first: a misspelt key is the likely reason a required one is missing.
    check_known_keys(model, exec, sys);
    Scenario sc;
    sc.name = name;
    sc.source = source;
    std::vector<yamlio::MissingKey> missing;
    sc.model = parts::read_collecting(model, missing, read_model);
    sc.execution = parts::read_collecting(exec, missing, read_execution);
    if (!system_read || reread_system) {
        std::string* reason = reread_system ? &sc.infeasible : nullptr;
        system_read = parts::read_collecting(sys, missing, [&](const Fields& f) { return parts::read_system(f, profiles, reason); });
    }
    yamlio::throw_missing(missing);
    sc.system = *system_read;
    if (!sc.infeasible.empty()) return sc;
    same_split_as_even(sc);
    if (auto p = find_problem(sc)) {
        if (allow_infeasible) {
            sc.infeasible = p->part + "." + p->key + ": " + p->message;
            return sc;
        }
        const Fields& f = p->part == "model" ? model : exec;
        throw InputError(f.loc(p->key) + ": " + p->part + "." + p->key + ": " + p->message + " (case '" + name +
                         "' at " + source + ")");
    }
    return sc;
}

/// One part read alone (load_model, load_system), every missing required key reported at once, after the --set
/// overrides of that part.
template <class Read>
auto read_alone(Fields& f, const std::vector<std::string>& overrides, Read&& read) {
    for (const parts::Override& o : parts::read_overrides(overrides))
        if (o.part == f.part()) f.set(o.key, o.key_node, o.value, o.origin);
    std::vector<yamlio::MissingKey> missing;
    auto part = parts::read_collecting(f, missing, read);
    yamlio::throw_missing(missing);
    return part;
}

}  // namespace

ModelSpec load_model(const fs::path& path, const std::vector<std::string>& overrides) {
    Fields f("model", path.string());
    f.reset(yamlio::load_file(path), path.string());
    return read_alone(f, overrides, read_model);
}

ModelSpec load_model_text(const std::string& text, const fs::path& origin, const std::vector<std::string>& overrides) {
    Fields f("model", origin.string());
    f.reset(yamlio::load_text(text, origin.string()), origin.string());
    return read_alone(f, overrides, read_model);
}

SystemSpec load_system(const fs::path& path, const std::vector<std::string>& overrides) {
    Fields f("system", path.string());
    f.reset(yamlio::load_file(path), path.string());
    parts::DeviceProfiles profiles;
    return read_alone(f, overrides, [&](const Fields& part) { return parts::read_system(part, profiles); });
}

SystemSpec load_system_text(const std::string& text, const fs::path& origin, const std::vector<std::string>& overrides) {
    Fields f("system", origin.string());
    f.reset(yamlio::load_text(text, origin.string()), origin.string());
    parts::DeviceProfiles profiles;
    return read_alone(f, overrides, [&](const Fields& part) { return parts::read_system(part, profiles); });
}

namespace {
using parts::Override;
using parts::read_overrides;
Experiment experiment_from(const YAML::Node& root, const fs::path& path, const std::vector<Override>& overrides,
                           const std::string& only_case = {});
}  // namespace

Experiment load_experiment(const fs::path& path) { return load_experiment(path, {}); }

Experiment load_experiment(const fs::path& path, const std::vector<std::string>& overrides, const std::string& only_case) {
    const std::vector<Override> read = read_overrides(overrides);
    yamlio::InputRecorder recorder;
    Experiment ex = experiment_from(yamlio::load_file(path), path, read, only_case);
    ex.inputs = recorder.files();
    return ex;
}

Experiment load_experiment_text(const std::string& text, const fs::path& origin) {
    return load_experiment_text(text, origin, {});
}

Experiment load_experiment_text(const std::string& text, const fs::path& origin, const std::vector<std::string>& overrides,
                                const std::string& only_case) {
    const std::vector<Override> read = read_overrides(overrides);
    yamlio::InputRecorder recorder;
    Experiment ex = experiment_from(yamlio::load_text(text, origin.string()), origin, read, only_case);
    ex.inputs = recorder.files();
    return ex;
}

namespace {
Experiment experiment_from(const YAML::Node& root, const fs::path& path, const std::vector<Override>& overrides,
                           const std::string& only_case) {
    const std::string file = path.string();
    for (auto it = root.begin(); it != root.end(); ++it) {
        std::string key = it->first.Scalar();
        if (std::find(kExperimentKeys.begin(), kExperimentKeys.end(), key) == kExperimentKeys.end()) {
            std::string msg = yamlio::where(file, it->first.Mark()) + ": unknown key '" + key + "' in experiment.";
            if (auto hint = yamlio::did_you_mean(key, kExperimentKeys)) msg += " Did you mean '" + *hint + "'?";
            throw InputError(msg + " Valid keys: " + yamlio::join(kExperimentKeys) + ".");
        }
    }
    check_string(root, "name", "experiment", file);
    check_string(root, "description", "experiment", file);
    Experiment ex;
    ex.file = path;
    ex.name = root["name"] ? root["name"].Scalar() : path.stem().string();

    const std::string origin = yamlio::where(file, root.Mark());
    Fields model("model", origin), exec("execution", origin), sys("system", origin);
    for (auto [fields, key] : {std::pair{&model, "model"}, {&exec, "execution"}, {&sys, "system"}}) {
        if (root[key]) apply_part(*fields, key_of(root, key), root[key], file);
    }

    struct Base {
        std::string name, source;
        Fields m, e, s;
    };
    std::vector<Base> bases;
    YAML::Node cases = root["cases"];
    if (!cases) {
        bases.push_back({ex.name, origin, model, exec, sys});
    } else {
        if (!cases.IsSequence() || cases.size() == 0) {
            throw InputError(yamlio::where_value(file, root, "cases") + ": cases: expected a non-empty list of cases");
        }
        if (cases.size() > yamlio::limits::kMaxCases) {
            throw InputError(yamlio::where(file, key_of(root, "cases").Mark()) + ": cases: " + std::to_string(cases.size()) +
                             " cases, more than the limit of " + std::to_string(yamlio::limits::kMaxCases));
        }
        for (std::size_t i = 0; i < cases.size(); ++i) {
            const YAML::Node& c = cases[i];
            const std::string at = yamlio::where(file, c.Mark());
            if (!c.IsMap()) throw InputError(at + ": cases[" + std::to_string(i) + "]: expected a mapping");
            for (auto it = c.begin(); it != c.end(); ++it) {
                std::string key = it->first.Scalar();
                if (std::find(kCaseKeys.begin(), kCaseKeys.end(), key) == kCaseKeys.end()) {
                    std::string msg = yamlio::where(file, it->first.Mark()) + ": unknown key '" + key + "' in cases[" +
                                      std::to_string(i) + "].";
                    if (auto hint = yamlio::did_you_mean(key, kCaseKeys)) msg += " Did you mean '" + *hint + "'?";
                    throw InputError(msg + " Valid keys: " + yamlio::join(kCaseKeys) + ".");
                }
            }
            if (!c["name"]) {
                throw InputError(at + ": cases[" + std::to_string(i) + "]: missing required key 'name' (a string)");
            }
            check_string(c, "name", "cases[" + std::to_string(i) + "]", file);
            check_string(c, "description", "cases[" + std::to_string(i) + "]", file);
            std::string name = c["name"].Scalar();
            for (const Base& prev : bases) {
                if (prev.name == name) {
                    throw InputError(yamlio::where(file, c["name"].Mark()) + ": cases[" + std::to_string(i) +
                                     "].name: duplicate case name '" + name + "' (first at " + prev.source + ")");
                }
            }
            Fields m = model, e = exec, s = sys;
            for (auto [fields, key] : {std::pair{&m, "model"}, {&e, "execution"}, {&s, "system"}}) {
                if (c[key]) apply_part(*fields, key_of(c, key), c[key], file);
            }
            bases.push_back({name, at, m, e, s});
        }
    }

    // --set overrides: over the experiment's and every case's own values.
    for (Base& b : bases)
        for (const Override& o : overrides) {
            Fields& part = o.part == "model" ? b.m : o.part == "execution" ? b.e : b.s;
            part.set(o.key, o.key_node, o.value, o.origin);
        }
    parts::DeviceProfiles profiles;  // each device profile file read once
    // only_case: the other cases are checked for unknown keys but not built, so that an override that does not fit
    // them does not stop the one asked for.
    std::vector<std::string> names;
    auto wanted = [&](const std::string& name, const Fields& m, const Fields& e, const Fields& s) {
        names.push_back(name);
        if (only_case.empty() || name == only_case) return true;
        check_known_keys(m, e, s);
        return false;
    };
    auto check_found = [&] {
        if (!only_case.empty() && ex.cases.empty()) {
            std::string list;
            for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
            throw InputError(file + ": no case named '" + only_case + "'; the cases are: " + list);
        }
    };
    YAML::Node sweep = root["sweep"];
    if (!sweep) {
        for (const Base& b : bases) {
            if (!wanted(b.name, b.m, b.e, b.s)) continue;
            std::optional<SystemSpec> system;
            ex.cases.push_back(build_case(b.name, b.source, b.m, b.e, b.s, system, profiles));
        }
        check_found();
        return ex;
    }
    // sweep: {execution.microbatch: [1, 2, 4], model: {seq_len: [2048, 4096]}, system.network.rails: [4, 8]} ->
    // cartesian product, in the order the keys are written, the last key varying fastest.
    struct Axis {
        std::string part, key;
        YAML::Node key_node;
        std::vector<YAML::Node> values;
    };
    std::vector<Axis> axes;
    if (!sweep.IsMap()) throw InputError(yamlio::where_value(file, root, "sweep") + ": sweep: expected a mapping of key: [values]");
    std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n, const std::string& prefix) {
        for (auto it = n.begin(); it != n.end(); ++it) {
            const std::string key = prefix + it->first.Scalar();
            if (it->second.IsMap()) {
                walk(it->second, key + ".");
                continue;
            }
            const auto dot = key.find('.');
            const std::string part = dot == std::string::npos ? "" : key.substr(0, dot);
            const std::string sub = dot == std::string::npos ? key : key.substr(dot + 1);
            std::span<const std::string_view> known;
            if (part == "model") known = kModelKeys;
            else if (part == "execution") known = execution_keys();
            else if (part == "system") known = system_keys();
            else
                throw InputError(yamlio::where(file, it->first.Mark()) + ": sweep: '" + key +
                                 "' must name a model, execution or system key (model.KEY, execution.KEY or system.KEY)");
            if (std::find(known.begin(), known.end(), sub) == known.end()) {
                std::string msg = yamlio::where(file, it->first.Mark()) + ": sweep: unknown " + part + " key '" + sub + "'.";
                if (auto hint = yamlio::did_you_mean(sub, known)) msg += " Did you mean '" + *hint + "'?";
                throw InputError(msg + " Valid keys: " + yamlio::join(known) + ".");
            }
            if (!it->second.IsSequence() || it->second.size() == 0) {
                throw InputError(yamlio::where_value(file, it->first, it->second) + ": sweep." + key +
                                 ": expected a non-empty list of values");
            }
            for (const Axis& other : axes) {
                if (other.part == part && other.key == sub) {
                    throw InputError(yamlio::where(file, it->first.Mark()) + ": sweep: '" + key + "' is swept twice (first at " +
                                     yamlio::where(file, other.key_node.Mark()) + ")");
                }
            }
            for (const Override& o : overrides)
                if (o.part == part && o.key == sub)
                    throw InputError(o.origin + ": " + key + " is swept by the experiment (" +
                                     yamlio::where(file, it->first.Mark()) + "): drop it from the sweep or from --set");
            Axis a{part, sub, it->first, {}};
            std::vector<std::string> texts;  // a value listed twice would make two cases of one name
            for (std::size_t i = 0; i < it->second.size(); ++i) {
                const YAML::Node v = it->second[i];
                const std::string text = v.IsScalar() ? v.Scalar() : YAML::Dump(v);
                if (const auto dup = std::find(texts.begin(), texts.end(), text); dup != texts.end())
                    throw InputError(yamlio::where(file, v.Mark()) + ": sweep." + key + ": the value " + text +
                                     " is listed twice (items " + std::to_string(dup - texts.begin() + 1) + " and " +
                                     std::to_string(i + 1) + "): each value is one case");
                texts.push_back(text);
                a.values.push_back(v);
            }
            axes.push_back(std::move(a));
        }
    };
    walk(sweep, "");
    // The product is checked factor by factor: it stops at the limit, so it cannot wrap around.
    std::size_t combos = 1;
    std::string product = std::to_string(bases.size()) + " case(s)";
    bool over = bases.size() > yamlio::limits::kMaxCases;
    for (const Axis& a : axes) {
        product += " x " + std::to_string(a.values.size());
        if (!over && combos > yamlio::limits::kMaxCases / a.values.size()) over = true;
        if (!over) combos *= a.values.size();
    }
    if (over || combos * bases.size() > yamlio::limits::kMaxCases) {
        throw InputError(yamlio::where(file, key_of(root, "sweep").Mark()) + ": sweep: " + product +
                         " values is more than the limit of " + std::to_string(yamlio::limits::kMaxCases) + " cases");
    }
    // Without a system axis the system (and its device profile) is read once per base; with one, once per case.
    const bool system_axes = std::any_of(axes.begin(), axes.end(), [](const Axis& a) { return a.part == "system"; });
    ex.cases.reserve(combos * bases.size());  // a Scenario is copied, not moved, when the vector grows
    for (const Base& b : bases) {
        std::optional<SystemSpec> system;
        // One working copy per base: every combination sets every axis, so nothing of the previous one stays.
        Fields m = b.m, e = b.e, s = b.s;
        for (std::size_t c = 0; c < combos; ++c) {
            std::string label;
            std::size_t rest = c;
            std::vector<std::size_t> pick(axes.size());
            for (std::size_t i = axes.size(); i-- > 0;) {
                pick[i] = rest % axes[i].values.size();
                rest /= axes[i].values.size();
            }
            for (std::size_t i = 0; i < axes.size(); ++i) {
                const YAML::Node& v = axes[i].values[pick[i]];
                Fields& part = axes[i].part == "model" ? m : axes[i].part == "execution" ? e : s;
                part.set(axes[i].key, axes[i].key_node, v, file);
                label += (label.empty() ? "" : ", ") + axes[i].key + "=" + (v.IsScalar() ? v.Scalar() : "?");
            }
            const std::string name = (b.name == ex.name && !cases) ? label : b.name + " " + label;
            if (!wanted(name, m, e, s)) continue;
            ex.cases.push_back(build_case(name, b.source, m, e, s, system, profiles, true, system_axes));
        }
    }
    check_found();
    return ex;
}
}  // namespace

}  // namespace strata
