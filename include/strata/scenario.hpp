// Scenarios: what to simulate. Three independent parts (model, execution, system) that any experiment
// file may combine, override and vary across named cases.
#pragma once

#include "strata/profile.hpp"
#include "strata/spec.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct Experiment {
    std::string name;
    std::filesystem::path file;
    std::vector<Scenario> cases;
    /// Every file read to build it (its own, the part files, the device profiles), each once, in the order read.
    std::vector<std::filesystem::path> inputs;
};

/// Loads and strictly validates an experiment file (and the part files it references).
/// Throws InputError with `file:line:col: message` on any problem.
Experiment load_experiment(const std::filesystem::path& file);
/// The same with `overrides`, each "PART.KEY=VALUE" (PART: model, execution or system; a system key dotted as in a
/// sweep, e.g. system.network.rails=4; VALUE as YAML): the key takes that value in every case, over the experiment's
/// and the cases' own. Errors name the override ("--set 'execution.microbatch=x':1:13: ..."); a key the experiment
/// sweeps cannot be overridden. With `only_case` (`strata run --case NAME`) only the case of that name is built and
/// validated (the others are checked for unknown keys only, so an override that does not fit them does not stop it);
/// no case of that name is an InputError listing the cases.
Experiment load_experiment(const std::filesystem::path& file, const std::vector<std::string>& overrides,
                           const std::string& only_case = {});

/// The same from YAML text in memory (JSON is YAML too, so a serialized dict loads): `origin` names it in
/// messages (`origin:line:col: ...`) and relative part files are resolved against origin's directory.
Experiment load_experiment_text(const std::string& text, const std::filesystem::path& origin);
/// The same with --set overrides and a case to build alone (see load_experiment).
Experiment load_experiment_text(const std::string& text, const std::filesystem::path& origin,
                                const std::vector<std::string>& overrides, const std::string& only_case = {});

/// An execution part made of --set overrides alone, and the keys they set.
struct ExecutionOverrides {
    ExecutionSpec execution;
    std::vector<std::string> keys;
    [[nodiscard]] bool sets(std::string_view key) const {
        return std::find(keys.begin(), keys.end(), key) != keys.end();
    }
};
/// An execution key a command sets itself, and what a user gives instead of a --set of it (how its refusal ends).
struct VariedKey {
    std::string key;
    std::string instead;
};
/// The execution part made of `overrides` alone ("execution.KEY=VALUE", as --set; every other key at its default,
/// the required sizes at stand-ins), for a command that sets the rest itself (the search, which varies the keys in
/// `varied`). Overrides of the model and system parts are checked (part, key, YAML) but not applied here: load_model
/// and load_system take them. Throws InputError naming the override for a key in `varied` (`command` varies it;
/// the key's `instead` says what to use), an unknown key or a bad value.
ExecutionOverrides read_execution_overrides(const std::vector<std::string>& overrides,
                                            std::span<const VariedKey> varied, const std::string& command);

/// Execution keys a command takes as arguments of its own (`strata search --attention, --precision,
/// --gradient-average, --grad-reduce-in-bf16`; Python's search keywords): each empty when not given.
struct ExecutionChoices {
    std::optional<Attention> attention;
    std::optional<Precision> precision;
    std::optional<GradientAverage> gradient_average;
    std::optional<bool> grad_reduce_in_fp32;
};
/// `set.execution` with the choices given over it; a key neither sets keeps its default. A choice given with an
/// override of its key is an InputError worded by `both(key)` (the command names its own argument).
ExecutionSpec with_choices(const ExecutionOverrides& set, const ExecutionChoices& choices,
                           const std::function<std::string(std::string_view key)>& both);

/// Every key a model part accepts; every key an execution part accepts (docs/execution.md documents each one).
std::span<const std::string_view> model_keys();
std::span<const std::string_view> execution_keys();

/// Every key a system part accepts (a system file, an experiment's or a case's `system:` mapping, a `sweep:` over
/// `system.KEY`), nested keys dotted (`network.rails`). docs/system-file.md documents each one.
std::span<const std::string_view> system_keys();

/// Loads one model part file (the keys of the `model` part). Throws InputError. `overrides`: --set strings as
/// load_experiment takes them; those of this part (model.KEY=VALUE, system.KEY=VALUE) take their value over the file's,
/// those of other parts are not read here (the search's --set: model and system keys here, execution keys by
/// read_execution_overrides).
ModelSpec load_model(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});
/// Loads one system part file. Throws InputError.
SystemSpec load_system(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});
/// Model and system parts from YAML text (see load_experiment_text). Throw InputError.
ModelSpec load_model_text(const std::string& text, const std::filesystem::path& origin,
                          const std::vector<std::string>& overrides = {});
SystemSpec load_system_text(const std::string& text, const std::filesystem::path& origin,
                            const std::vector<std::string>& overrides = {});

/// Loads and strictly validates a device profile. Throws InputError (file:line:col: ...).
DeviceProfile load_device_profile(const std::filesystem::path& file);
/// The same from YAML text in memory, `origin` naming it in messages.
DeviceProfile load_device_profile_text(const std::string& text, const std::filesystem::path& origin);

}  // namespace strata
