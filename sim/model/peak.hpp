// Private to sim/model: the largest activation footprint met while walking a stage's program, as stage_memory's walks
// (memory.cpp, and offload.cpp's layer by layer) record it: the first instant of the largest total, as in the engine's
// memory pools.
#pragma once

#include "strata/memory.hpp"

namespace strata::model_detail {

struct ActivationPeak {
    StageMemory& sm;
    Bytes best{-1};
    /// Records `held` (and a recompute workspace and an attention's transient buffers live with it, `units` model
    /// chunks in flight) if it is a new peak.
    void consider(const UnitActivations& held, Bytes workspace, Bytes attention, int units) {
        const Bytes total = held.layers + held.embedding + held.output + workspace + attention;
        if (total <= best) return;
        best = total;
        sm.activations_layers = held.layers;
        sm.activations_embedding = held.embedding;
        sm.activations_output = held.output;
        sm.recompute_workspace = workspace;
        sm.attention_workspace = attention;
        sm.units_in_flight = units;
    }
};

}  // namespace strata::model_detail
