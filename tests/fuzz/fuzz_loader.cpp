// libFuzzer target for the scenario and device-profile loaders (issue 15): each input is loaded as an experiment,
// a model part, a system part and a device profile. A loader may accept the input or throw InputError; anything
// else (another exception, a crash, a sanitizer report, a timeout, more than the RSS limit) is a finding.
// Relative part files resolve against tests/fuzz/corpus/, whose seeds name one another (model.yaml, ...).
// Built with -DSTRATA_FUZZ=ON by clang only; run by scripts/fuzz (README "Tests": fuzzing).
#include "strata/errors.hpp"
#include "strata/scenario.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

template <typename F>
void expect_input_error_or_success(const char* what, F&& load) {
    try {
        load();
    } catch (const strata::InputError&) {
        // The expected outcome for malformed input.
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_loader: %s threw something other than InputError: %s\n", what, e.what());
        std::abort();
    } catch (...) {
        std::fprintf(stderr, "fuzz_loader: %s threw a non-standard exception\n", what);
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::string origin = std::string(STRATA_FUZZ_PARTS) + "/input.yaml";
    expect_input_error_or_success("load_experiment_text", [&] { (void)strata::load_experiment_text(text, origin); });
    expect_input_error_or_success("load_model_text", [&] { (void)strata::load_model_text(text, origin); });
    expect_input_error_or_success("load_system_text", [&] { (void)strata::load_system_text(text, origin); });
    expect_input_error_or_success("load_device_profile_text",
                                  [&] { (void)strata::load_device_profile_text(text, origin); });
    return 0;
}
