// Analytical per-GPU memory (see include/strata/memory.hpp).
#include "strata/memory.hpp"

#include "strata/layer.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

BytesPerParam bytes_per_param(const ExecutionSpec& e) {
    BytesPerParam b;
    if (e.precision == Precision::fp16) {
        b.gradients = 2;
        b.optimizer = 16;
    }
    if (e.distributed_optimizer) b.optimizer /= e.data;
    return b;
}

double layer_parameters_per_gpu(const ModelSpec& m, int t) {
    const double h = m.hidden, f = m.ffn_hidden;
    // QKV (3h^2 + 3h) and fc1 (hf + f) are column-parallel: weights and biases sharded.
    // Projection (h^2) and fc2 (fh) row-parallel: weights sharded, biases (h each) replicated.
    // Two layer norms (2h each) replicated.
    return (4.0 * h * h + 2.0 * h * f + 3.0 * h + f) / t + 6.0 * h;
}

namespace {
/// Of the first `chunks` forward passes a stage runs, how many belong to its first model chunk.
/// Megatron's interleaved order runs p microbatches on chunk 0, then p on chunk 1, ... and wraps.
std::int64_t first_chunk_microbatches(const ExecutionSpec& e, int chunks) {
    if (e.schedule != Schedule::interleaved) return chunks;
    const int p = e.pipeline, m = e.interleave;
    std::int64_t count = 0;
    for (int k = 0; k < chunks; ++k) count += ((k % (p * m)) / p == 0) ? 1 : 0;
    return count;
}
}  // namespace

double total_parameters(const ModelSpec& m) {
    const double h = m.hidden, f = m.ffn_hidden;
    double layer = 4.0 * h * h + 2.0 * h * f + 9.0 * h + f;
    return m.layers * layer + double(m.vocab) * h + double(m.seq_len) * h + 2.0 * h;
}

double parameters_on_stage(const ModelSpec& m, const ExecutionSpec& e, int stage) {
    const int p = e.pipeline;
    double params = double(m.layers / p) * layer_parameters_per_gpu(m, e.tensor);
    const double word = double(m.vocab) * m.hidden / e.tensor;
    if (stage == 0) params += word + double(m.seq_len) * m.hidden;  // word + position embeddings
    if (stage == p - 1) {
        params += 2.0 * m.hidden;                                  // final layer norm
        if (p > 1 || !m.tied_embeddings) params += word;           // output layer (a tied copy if p > 1)
    }
    return params;
}

int in_flight_chunks(const ExecutionSpec& e, int r) {
    const int p = e.pipeline, n = e.microbatches();
    switch (e.schedule) {
        case Schedule::gpipe: return n;
        case Schedule::one_f_one_b: return std::min(p - r, n);
        case Schedule::interleaved: {
            const int m = e.interleave;
            return std::min(2 * (p - r - 1) + (m - 1) * p + 1, n * m);
        }
    }
    return n;
}

MemoryReport estimate_memory(const Scenario& sc) {
    const ModelSpec& m = sc.model;
    const ExecutionSpec& e = sc.execution;
    const int p = e.pipeline;
    const LayerConfig lc = layer_config(m, e);
    const LayerPlan plan = build_layer(lc);
    const Bytes emb = build_embedding(lc).stored_per_microbatch;
    const Bytes out = build_output(lc).stored_per_microbatch;
    const BytesPerParam bpp = bytes_per_param(e);
    const int layers_per_chunk = m.layers / (p * e.interleave);

    MemoryReport r;
    r.capacity = sc.system.memory_capacity;
    r.activation_per_layer = plan.stored_bytes;
    auto stage_memory = [&](int s) {
        StageMemory sm;
        sm.stage = s;
        const double params = parameters_on_stage(m, e, s);
        sm.weights = Bytes(static_cast<std::int64_t>(std::llround(params * bpp.weights)));
        sm.gradients = Bytes(static_cast<std::int64_t>(std::llround(params * bpp.gradients)));
        sm.optimizer = Bytes(static_cast<std::int64_t>(std::llround(params * bpp.optimizer)));
        const int chunks = in_flight_chunks(e, s);
        sm.activations_layers = plan.stored_bytes * (std::int64_t(chunks) * layers_per_chunk);
        // The first stage keeps each in-flight microbatch's embedding dropout mask; the last stage keeps
        // the output layer's activations for the microbatches between their forward and backward.
        if (s == 0) sm.activations_embedding = emb * first_chunk_microbatches(e, chunks);
        if (s == p - 1) sm.activations_output = out * (e.schedule == Schedule::gpipe ? e.microbatches() : 1);
        sm.recompute_workspace = plan.recompute_peak_bytes;
        sm.reserved = sc.system.memory_reserved;
        return sm;
    };
    r.first_stage = stage_memory(0);
    r.peak_stage = r.first_stage;
    for (int s = 1; s < p; ++s) {
        StageMemory sm = stage_memory(s);
        if (sm.total() > r.peak_stage.total()) r.peak_stage = sm;
    }
    r.activation_first_stage_layers = r.first_stage.activations_layers;
    r.activation_first_stage =
        r.first_stage.activations_layers + r.first_stage.activations_embedding + r.first_stage.activations_output;
    return r;
}

}  // namespace strata
