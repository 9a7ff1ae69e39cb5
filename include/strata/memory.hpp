// Memory per GPU: parameters, gradients, optimizer state and activations, against the device capacity.
#pragma once

#include "strata/scenario.hpp"
#include "strata/units.hpp"

namespace strata {

/// Bytes per parameter held by each GPU (Megatron-LM mixed precision with Adam):
///   bf16: 2 (weights) + 4 (fp32 gradients) + 12 (fp32 master weights, Adam m and v)          = 18
///   fp16: 2 (weights) + 2 (fp16 gradients) + 16 (fp32 master weights and gradients, m, v)   = 20
/// A distributed optimizer shards the optimizer part over the d data-parallel ranks.
struct BytesPerParam {
    double weights = 2, gradients = 4, optimizer = 12;
};
BytesPerParam bytes_per_param(const ExecutionSpec& exec);

/// Parameters held by one GPU of pipeline stage `stage` (tensor sharding applied).
double parameters_on_stage(const ModelSpec& model, const ExecutionSpec& exec, int stage);
/// Parameters of one transformer layer held by one GPU of a t-way tensor-parallel group.
double layer_parameters_per_gpu(const ModelSpec& model, int tensor);
/// All parameters of the model (unsharded).
double total_parameters(const ModelSpec& model);

/// Number of layer-chunk activations a stage holds at its peak under the schedule: 1F1B holds
/// min(p - r, N) microbatches of L/p layers; the interleaved schedule min(2(p - r - 1) + (m - 1)p + 1, N m)
/// chunks of L/(p m) layers; GPipe all N microbatches.
int in_flight_chunks(const ExecutionSpec& exec, int stage);

struct StageMemory {
    int stage = 0;
    Bytes weights, gradients, optimizer;
    Bytes activations_layers;     ///< transformer layers
    Bytes activations_embedding;  ///< embedding dropout masks (first stage)
    Bytes activations_output;     ///< final norm, logits input, fp32 logits (last stage)
    Bytes recompute_workspace;    ///< one layer's recomputed activations (full / selective recompute)
    Bytes reserved;               ///< runtime: CUDA context, NCCL buffers, workspaces (system memory_reserved_bytes)
    [[nodiscard]] Bytes total() const {
        return weights + gradients + optimizer + activations_layers + activations_embedding + activations_output +
               recompute_workspace + reserved;
    }
};

struct MemoryReport {
    Bytes activation_per_layer;          ///< one layer, one microbatch (Table 2)
    Bytes activation_first_stage;        ///< eq. 5 (x interleave factor) plus Section 4.5 extras
    Bytes activation_first_stage_layers; ///< eq. 5 part only
    StageMemory first_stage;
    StageMemory peak_stage;              ///< the stage with the largest total
    Bytes capacity;
    [[nodiscard]] bool fits() const { return peak_stage.total() <= capacity; }
    [[nodiscard]] Bytes margin() const { return capacity - peak_stage.total(); }
};

/// Analytical memory model (the discrete-event engine checks the same through the schedule).
MemoryReport estimate_memory(const Scenario& scenario);

}  // namespace strata
