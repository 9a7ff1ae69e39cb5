// The power limit's clock for a scenario: what one layer's kernels draw as its GPUs run it in training.
#pragma once

#include "strata/cost.hpp"
#include "strata/layer.hpp"
#include "strata/spec.hpp"

namespace strata {

/// One layer of a model chunk as training runs it, at `cost`'s rates (a CostModel not yet sustained): its forward and
/// backward passes, the layers that recompute and those left alone (recompute_layers) in their proportion in the
/// first chunk; with `collectives`, the tensor-parallel collectives the compute waits for (a calibration run on one
/// GPU has none: false).
[[nodiscard]] inline PowerMix layer_power_mix(const CostModel& cost, const ModelSpec& model, const ExecutionSpec& e,
                                              bool collectives = true) {
    const LayerConfig lc = layer_config(model, e);
    const LayerPlan layer = build_layer(lc);
    PowerMix mix = cost.power_mix({&layer.forward, &layer.backward}, e.tensor, e.context, collectives);
    const int layers = e.layers_in_chunk(model.layers, 0);
    const int recomputed = e.recomputed_layers(layers);
    if (layers > 0 && recomputed < layers) {
        const LayerPlan kept = build_layer_left_alone(lc);
        const PowerMix alone = cost.power_mix({&kept.forward, &kept.backward}, e.tensor, e.context, collectives);
        mix = mix.times(double(recomputed) / layers);
        mix += alone.times(double(layers - recomputed) / layers);
    }
    return mix;
}

/// Sets `cost` to the clock its device's power limit leaves a layer of the scenario (a no-op without one).
inline SustainedClock sustain_for(CostModel& cost, const ModelSpec& model, const ExecutionSpec& e,
                                  bool collectives = true) {
    return cost.sustain(layer_power_mix(cost, model, e, collectives));
}

}  // namespace strata
