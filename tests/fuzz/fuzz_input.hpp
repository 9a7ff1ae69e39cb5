// What the libFuzzer targets that go past the loaders share (tests/fuzz/fuzz_simulate.cpp, fuzz_search.cpp): the input
// as an experiment whose relative part files resolve against tests/fuzz/corpus/ (STRATA_FUZZ_PARTS), or nothing where
// the loader rejects it (fuzz_loader's ground); and what two simulations of one case must share.
#pragma once
#include "strata/errors.hpp"
#include "strata/metrics.hpp"
#include "strata/scenario.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace strata::fuzz {

inline std::optional<Experiment> accepted_experiment(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        return load_experiment_text(text, std::string(STRATA_FUZZ_PARTS) + "/input.yaml");
    } catch (const InputError&) {
        return std::nullopt;
    }
}

/// Two simulations of the same case agree (strata is deterministic whatever the thread count): the iteration to the
/// picosecond, the peak memory to the byte, the same events and the same verdict on memory.
inline bool same_iteration(const IterationResult& a, const IterationResult& b) {
    return a.iteration_time.ps() == b.iteration_time.ps() && a.peak_memory.value == b.peak_memory.value &&
           a.events == b.events && a.oom == b.oom;
}

}  // namespace strata::fuzz
