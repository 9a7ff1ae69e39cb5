// Scenario fixtures shared by the test files.
#pragma once

#include "strata/errors.hpp"
#include "strata/memory.hpp"
#include "strata/scenario.hpp"

#include <string>

namespace strata::testing {

/// A file of the source tree, by its path from the repository root.
inline std::string source_path(const std::string& rel) { return std::string(STRATA_SOURCE_DIR) + "/" + rel; }
/// A file under tests/data/.
inline std::string data_path(const std::string& rel) { return source_path("tests/data/" + rel); }

/// The error loading `text` as if from the source tree's `rel` gives (its message), or "" when it loads.
inline std::string load_error(const std::string& text, const std::string& rel) {
    try {
        (void)load_experiment_text(text, source_path(rel));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

/// An experiment text with tests/data/valid/'s small model and system, t = p = 1, no recompute, microbatch 1, global
/// batch 8, and `execution_extra` (", key: value, ...") in its execution mapping, read as if from tests/data/valid/`file`
/// (its error messages name that file; the mapping is on line 3).
inline Experiment load_small(const std::string& file, const std::string& execution_extra) {
    return load_experiment_text("model: model-small.yaml\n"
                                "system: system-small.yaml\n"
                                "execution: {tensor: 1, pipeline: 1, recompute: none, microbatch: 1, global_batch: 8" +
                                    execution_extra + "}\n",
                                data_path("valid/" + file));
}

/// Case `index` of scenarios/paper/table4.yaml (22B, t = 8, b = 4, one microbatch, Selene A100).
inline Scenario table4_case(int index) {
    return load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table4.yaml").cases.at(index);
}

/// Sets a pipelined execution on `sc` (microbatch 1, `microbatches` per pipeline, d = 1; the interleaved
/// schedule when m > 1) and validates the result.
inline Scenario with_pipeline(Scenario sc, int p, int m, int microbatches, bool sp, Recompute rc) {
    sc.execution.pipeline = p;
    sc.execution.interleave = m;
    sc.execution.schedule = m > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
    sc.execution.microbatch = 1;
    sc.execution.global_batch = microbatches;
    sc.execution.sequence_parallel = sp;
    sc.execution.recompute = rc;
    validate(sc);
    return sc;
}

/// The 22B of Table 4 shrunk (24 layers, s = 1024), t = 8, pipelined as with_pipeline sets it: a small scenario
/// that still has every layer kind, for simulation tests.
inline Scenario small_22b(int p, int m, int microbatches, bool sp, Recompute rc) {
    Scenario sc = table4_case(0);
    sc.model.layers = 24;
    sc.model.seq_len = 1024;
    return with_pipeline(sc, p, m, microbatches, sp, rc);
}

/// `sc` with `d` data-parallel replicas, each running the microbatches one replica ran (the global batch grows
/// with d), validated.
inline Scenario with_data(Scenario sc, int d) {
    sc.execution.global_batch = sc.execution.global_batch / sc.execution.data * d;
    sc.execution.data = d;
    validate(sc);
    return sc;
}

/// The analytical memory of a whole scenario.
inline MemoryReport estimate(const Scenario& sc) {
    return estimate_memory(sc.model, sc.execution, sc.system.device_memory());
}

}  // namespace strata::testing
