// The readers of an experiment's parts, private to sim/scenario/: the execution part (execution.cpp), the system part
// (system.cpp), the --set overrides (overrides.cpp) and the reading of one part with every missing required key
// collected (see yamlio::CollectMissing).
#pragma once

#include "strata/errors.hpp"
#include "strata/spec.hpp"
#include "yaml_fields.hpp"

#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::parts {

/// Device profiles by file, each read once: a sweep over system keys reads a system per case.
class DeviceProfiles {
public:
    const DeviceProfile& load(const std::filesystem::path& file);

private:
    std::map<std::string, DeviceProfile> loaded_;
};

/// Reads a system part. Its keys are each checked (type, range); keys that are valid alone but do not fit
/// together (rails above gpus_per_node, a reserve as large as the capacity) are an InputError, or, when
/// `infeasible` is given (a sweep's case), the reason written there and the system read on.
SystemSpec read_system(const yamlio::Fields& f, DeviceProfiles& profiles, std::string* infeasible = nullptr);

/// Reads an execution part (execution.cpp): each key checked, and the keys that must go together.
ExecutionSpec read_execution(const yamlio::Fields& f);

/// One --set override, read: its part, its (dotted) key, and the key and value nodes of its YAML text
/// (overrides.cpp).
struct Override {
    std::string part, key, origin;
    YAML::Node key_node, value;
};
/// Reads each "PART.KEY=VALUE" as YAML (`KEY: VALUE`, origin "--set 'PART.KEY=VALUE'"), checking the part and the key.
std::vector<Override> read_overrides(const std::vector<std::string>& overrides);

/// `read(f)` with f's missing required keys appended to `missing` instead of thrown; an error the reader throws
/// while keys are missing (this part's or an earlier part's) may come from a stand-in value, so the missing keys
/// are thrown instead. The caller throws `missing` (yamlio::throw_missing) once every part is read.
template <class Read>
auto read_collecting(const yamlio::Fields& f, std::vector<yamlio::MissingKey>& missing, Read&& read) {
    yamlio::CollectMissing collect(f, missing);
    try {
        return read(f);
    } catch (const InputError&) {
        yamlio::throw_missing(missing);
        throw;
    }
}

}  // namespace strata::parts
