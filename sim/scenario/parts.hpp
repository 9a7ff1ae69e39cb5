// The readers of an experiment's parts, private to sim/scenario/: the system part (system.cpp) and the
// reading of one part with every missing required key collected (see yamlio::CollectMissing).
#pragma once

#include "strata/errors.hpp"
#include "strata/spec.hpp"
#include "yaml_fields.hpp"

#include <filesystem>
#include <map>
#include <string>
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
