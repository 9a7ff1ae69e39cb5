// Analytical per-GPU memory (see include/strata/memory.hpp).
#include "strata/memory.hpp"

#include "peak.hpp"
#include "strata/layer.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

BytesPerParam bytes_per_param(const ExecutionSpec& e) {
    BytesPerParam b;
    if (!e.fp32_gradients()) {  // 16-bit main gradients; the step keeps an fp32 copy of them with the master weights
        b.gradients = 2;
        b.optimizer = 16;
    }
    // Apex's DistributedFusedAdam with NeMo's settings (megatron_base_model.py setup_optimization: fp32 state; with
    // bf16 weights store_param_remainders, an int16 remainder to fp32; with FP8 parameters (fp8_params) or fp16 weights
    // store_params, an fp32 copy, for every parameter; Apex distributed_fused_adam.py StateBucket: exp_avg, exp_avg_sq,
    // params_shard or param_remainders_shard) and the gradient shard a bucket's reduce-scatter leaves, in the gradients'
    // dtype.
    if (nemo_apex(e.grad_buckets) && e.distributed_optimizer) {
        const bool copy = e.precision == Precision::fp16 || (e.precision == Precision::fp8 && e.fp8_param_gather);
        b.optimizer = 8 + (copy ? 4 : 2) + b.gradients;
    }
    if (e.distributed_optimizer) b.optimizer /= double(e.data) * e.context;  // Megatron: over data x context
    return b;
}

double layer_parameters_per_gpu(const ModelSpec& m, int t) {
    const double h = m.hidden, f = m.ffn_hidden, kv = 2.0 * m.query_groups() * m.head_dim();
    const double gate = m.mlp == Mlp::swiglu ? 2.0 : 1.0;   // swiglu's fc1 holds the gate and the up matrices
    const double bias = m.linear_bias ? 1.0 : 0.0;
    const double norm = m.norm == Norm::layernorm ? 2.0 * h : h;   // gamma (and beta)
    // QKV (h x (h + 2 g d), bias h + 2 g d) and fc1 (h x gate f, bias gate f) are column-parallel: sharded.
    // Projection (h x h) and fc2 (f x h) row-parallel: weights sharded, biases (h each) replicated.
    // Two norms replicated. For a GPT: (4h^2 + 2hf + 3h + f) / t + 6h.
    const double sharded = h * (h + kv) + bias * (h + kv) + h * h + gate * h * f + bias * gate * f + f * h;
    return sharded / t + 2.0 * bias * h + 2.0 * norm;
}


namespace {
double position_table(const ModelSpec& m) {
    return m.position_embedding == PositionEmbedding::learned ? double(m.seq_len) * m.hidden : 0.0;
}
double final_norm(const ModelSpec& m) { return m.norm == Norm::layernorm ? 2.0 * m.hidden : double(m.hidden); }
}  // namespace

double embedding_parameters_per_gpu(const ModelSpec& m, int t) {
    return double(m.vocab) * m.hidden / t + position_table(m);
}

double total_parameters(const ModelSpec& m) {
    const double word = double(m.vocab) * m.hidden;
    return m.layers * layer_parameters_per_gpu(m, 1) + word + position_table(m) + final_norm(m) +
           (m.tied_embeddings ? 0.0 : word);
}

std::vector<GradientBucket> megatron_gradient_buckets(const ModelSpec& m, const ExecutionSpec& e, int layers,
                                                      bool embedding, bool output, double bucket_size) {
    struct Tensor {
        double params;
        bool fp8;         // a layer's linear weight under fp8_param_gather: Megatron-Core's FP8 (uint8) buffer
        bool weight;      // a layer's linear weight (gathered in FP8 with fp8_param_gather)
        bool own_bucket;  // shared_embedding
        int event;        // when the layer's backward completes it (GradientBucket::ready_event), 3 outside layers
    };
    const bool fp8 = e.precision == Precision::fp8 && e.fp8_param_gather;
    // The chunk's backward passes, each with its tensors in reverse registration order.
    std::vector<std::vector<Tensor>> pieces;
    const double h = m.hidden, f = m.ffn_hidden, kv = 2.0 * m.query_groups() * m.head_dim(), t = e.tensor;
    const double gate = m.mlp == Mlp::swiglu ? 2.0 : 1.0, bias = m.linear_bias ? 1.0 : 0.0;
    const double norm = m.norm == Norm::layernorm ? 2.0 * h : h;
    const double word = double(m.vocab) * h / t;
    // Megatron-Core's shared_embedding: the tied word embedding's copies on the first and last stage.
    const bool shared = m.tied_embeddings && e.pipeline > 1 && e.distributed_optimizer;
    if (output) {
        std::vector<Tensor> out;
        if (e.pipeline > 1 || !m.tied_embeddings) out.push_back({word, false, false, shared, 3});
        out.push_back({final_norm(m), false, false, false, 3});
        pieces.push_back(std::move(out));
    }
    // Registered: the projection (Attention builds linear_proj before SelfAttention's linear_qkv), QKV's norm and QKV,
    // fc1's norm and fc1, fc2 (Transformer Engine's LayerNormLinear registers its norm before its weight), each weight
    // before its bias. Completed (TE returns a LayerNormLinear's gradients after its norm's backward): fc2 (event 0),
    // fc1 with the second norm (1), the projection (2), QKV with the first norm (3).
    const std::vector<Tensor> layer = {
        {bias * h, false, false, false, 0},              {f * h / t, fp8, true, false, 0},           // fc2
        {bias * gate * f / t, false, false, false, 1},   {gate * h * f / t, fp8, true, false, 1},    // fc1
        {norm, false, false, false, 1},                                                             // its norm
        {bias * (h + kv) / t, false, false, false, 3},   {h * (h + kv) / t, fp8, true, false, 3},    // QKV
        {norm, false, false, false, 3},                                                             // its norm
        {bias * h, false, false, false, 2},              {h * h / t, fp8, true, false, 2}};         // projection
    for (int i = 0; i < layers; ++i) pieces.push_back(layer);
    if (embedding) {
        std::vector<Tensor> in;
        if (position_table(m) > 0) in.push_back({position_table(m), false, false, false, 3});
        in.push_back({word, false, false, shared, 3});
        pieces.push_back(std::move(in));
    }
    // Each buffer (with fp8_param_gather the FP8 weights apart from the rest, Megatron-Core >= 0.9) is cut into buckets.
    std::vector<GradientBucket> buckets[2];  // [0] the 16-bit buffer, [1] the FP8 one
    // A bucket is complete at the latest (pass, event) of its tensors.
    const auto later = [](GradientBucket& b, int piece, int event) {
        if (std::pair{piece, event} > std::pair{b.last_piece, b.ready_event}) {
            b.last_piece = piece;
            b.ready_event = event;
        }
    };
    const auto add = [&](GradientBucket& b, bool& empty, const Tensor& x, int piece) {
        if (empty) b.first_piece = piece;
        empty = false;
        b.parameters += x.params;
        if (x.weight) b.linear_weights += x.params;
        later(b, piece, x.event);
    };
    for (const bool in_fp8 : {false, true}) {
        std::vector<GradientBucket>& out = buckets[in_fp8 ? 1 : 0];
        GradientBucket open;
        bool empty = true;
        const auto close = [&] {
            if (!empty) out.push_back(open);
            open = GradientBucket{};
            empty = true;
        };
        for (int i = 0; i < static_cast<int>(pieces.size()); ++i)
            for (const Tensor& x : pieces[static_cast<std::size_t>(i)]) {
                if (x.params <= 0 || x.fp8 != in_fp8) continue;
                if (x.own_bucket) close();
                add(open, empty, x, i);
                if ((bucket_size > 0 && open.parameters >= bucket_size) || x.own_bucket) close();
            }
        close();
    }
    if (buckets[1].empty()) return buckets[0];
    // partition_buckets (param_and_grad_buffer.py, 0.9-0.11): the 16-bit buckets join the last FP8 bucket's group,
    // reduced together once all are complete.
    GradientBucket& last = buckets[1].back();
    for (const GradientBucket& b : buckets[0]) {
        last.first_piece = std::min(last.first_piece, b.first_piece);
        last.parameters += b.parameters;
        last.linear_weights += b.linear_weights;
        later(last, b.last_piece, b.ready_event);
    }
    return buckets[1];
}

std::vector<std::vector<GradientBucket>> nemo_apex_gradient_buckets(const ModelSpec& m, const ExecutionSpec& e,
                                                                    const std::vector<ChunkContents>& chunks) {
    const double h = m.hidden, f = m.ffn_hidden, kv = 2.0 * m.query_groups() * m.head_dim(), t = e.tensor;
    const double gate = m.mlp == Mlp::swiglu ? 2.0 : 1.0, bias = m.linear_bias ? 1.0 : 0.0;
    const double norm = m.norm == Norm::layernorm ? 2.0 * h : h;
    const double word = double(m.vocab) * h / t;
    const bool fp8 = e.precision == Precision::fp8 && e.fp8_param_gather;  // TE's weights are Float8Tensors
    const bool sp = e.sequence_parallel, tied = m.tied_embeddings && e.pipeline > 1;
    const bool fp32 = e.fp32_embedding_grads && !e.fp32_gradients();  // NeMo's with_fp32_embedding_grads
    // A layer: its linear weights (FP8 with FP8 parameters), the column-parallel biases, and what sequence parallelism
    // marks (the two norms, the row-parallel biases of the projection and fc2).
    const double weights = (h * (h + kv) + h * h + gate * h * f + f * h) / t;
    const double col_bias = bias * ((h + kv) + gate * f) / t, marked = 2.0 * norm + 2.0 * bias * h;
    const double layer_moved = fp8 ? col_bias + marked : sp ? marked : 0.0;
    const bool interleaved = chunks.size() > 1 && e.grad_buckets != GradBuckets::nemo_apex_layers;
    std::vector<std::vector<GradientBucket>> out(chunks.size());
    double moved = 0, moved_fp32 = 0;  // into the first layer's (first chunk's) group; of it, fp32 gradients
    for (std::size_t c = 0; c < chunks.size(); ++c) {
        const ChunkContents& k = chunks[c];
        // Passes as the backward runs them: the output layer's, the layers' last to first, the embedding's.
        const int first_layer_piece = k.output ? 1 : 0;
        const int last_piece = first_layer_piece + k.layers - 1 + (k.embedding ? 1 : 0);
        // Outside the layers: with interleaving in the chunk's group unless marked, moved, or a tied copy.
        double rest = 0, rest_moved = 0, rest_fp32 = 0, rest_moved_fp32 = 0;
        if (k.output) {
            const double out_word = e.pipeline > 1 || !m.tied_embeddings ? word : 0.0;
            ((fp8 || tied) ? rest_moved : rest) += out_word;
            if (fp32 && tied) rest_moved_fp32 += out_word;  // the tied copy (an untied output layer stays 16-bit)
            ((fp8 || sp) ? rest_moved : rest) += final_norm(m);
        }
        if (k.embedding) {
            ((fp8 || tied) ? rest_moved : rest) += word;
            (fp8 ? rest_moved : rest) += position_table(m);
            if (fp32) {
                ((fp8 || tied) ? rest_moved_fp32 : rest_fp32) += word;
                (fp8 ? rest_moved_fp32 : rest_fp32) += position_table(m);
            }
        }
        moved += k.layers * layer_moved + rest_moved;
        moved_fp32 += rest_moved_fp32;
        std::vector<GradientBucket>& groups = out[c];
        const double kept = weights + col_bias + marked - layer_moved;
        if (interleaved) {
            GradientBucket g;
            g.parameters = k.layers * kept + rest;
            g.fp32_parameters = rest_fp32;
            g.linear_weights = k.layers * weights;
            g.first_piece = 0;
            g.last_piece = last_piece;
            g.ready_event = 3;
            if (last_piece >= 0) groups.push_back(g);
            continue;
        }
        // One group per layer, last layer first; the first layer's also holds everything outside the layers.
        for (int i = 0; i < k.layers; ++i) {
            GradientBucket g;
            g.parameters = kept;
            g.linear_weights = weights;
            g.first_piece = g.last_piece = first_layer_piece + i;
            g.ready_event = 3;
            groups.push_back(g);
        }
        moved += rest;
        moved_fp32 += rest_fp32;
        if (groups.empty()) {
            if (last_piece < 0) continue;  // nothing in this chunk
            groups.push_back(GradientBucket{0, 0, 0, last_piece, 3});
        }
        groups.back().first_piece = 0;
        groups.back().last_piece = last_piece;
    }
    // The first chunk's last group (the first layer's) is the stage's last complete; it takes what was moved.
    for (std::vector<GradientBucket>& groups : out)
        if (!groups.empty()) {
            groups.back().parameters += moved;
            groups.back().fp32_parameters += moved_fp32;
            groups.back().after_schedule = moved > 0;
            break;
        }
    return out;
}

double megatron_chunk_bucket_size(const ExecutionSpec& e, int stage, int chunk) {
    const bool one = stage > 0 || chunk > 0 || e.overlap_param_gather_with_optimizer_step || !e.overlap_grad_reduce;
    return one ? 0.0 : e.megatron_bucket_size();
}

namespace {
/// The parameters of the transformer layers one GPU of the stage holds.
double stage_layer_parameters(const ModelSpec& m, const ExecutionSpec& e, int stage) {
    return double(e.layers_on_stage(m.layers, stage)) * layer_parameters_per_gpu(m, e.tensor);
}
}  // namespace

Bytes stage_weight_bytes(const ModelSpec& m, const ExecutionSpec& e, int stage) {
    double bytes = parameters_on_stage(m, e, stage) * bytes_per_param(e).weights;
    // FP8 with 16-bit primary weights: Transformer Engine caches an FP8 copy and its transpose of each layer weight
    // (2 bytes more). With FP8 primary weights (fp8_param_gather: Megatron-Core builds the layers under TE's
    // fp8_model_init, its config's fp8_param) a layer weight is that FP8 copy and transpose alone: 1 + 1 bytes where
    // the 16-bit weight was, nothing more.
    if (e.precision == Precision::fp8 && !e.fp8_param_gather)
        bytes += 2.0 * stage_layer_parameters(m, e, stage);
    return Bytes(static_cast<std::int64_t>(std::llround(bytes)));
}

double fp8_weight_cast_bytes(const ModelSpec& m, const ExecutionSpec& e, int stage) {
    // Megatron-FSDP gathers FP8 weights for every forward and backward: their transposes are made in each backward
    // (LayerConfig::fp8_weight_transposes), nothing once per step.
    if (e.precision != Precision::fp8 || e.fsdp) return 0.0;
    const double per_param = e.fp8_param_gather ? 2.0 : e.fp8_recipe == Fp8Recipe::current ? 6.0 : 4.0;
    return per_param * stage_layer_parameters(m, e, stage);
}

double parameters_on_stage(const ModelSpec& m, const ExecutionSpec& e, int stage) {
    const int p = e.pipeline;
    double params = stage_layer_parameters(m, e, stage);
    const double word = double(m.vocab) * m.hidden / e.tensor;
    if (stage == 0) params += embedding_parameters_per_gpu(m, e.tensor);  // word (+ learned position) embeddings
    if (stage == p - 1) {
        params += final_norm(m);
        if (p > 1 || !m.tied_embeddings) params += word;           // output layer (a tied copy if p > 1)
    }
    return params;
}

double fp32_embedding_parameters(const ModelSpec& m, const ExecutionSpec& e, int stage) {
    if (!e.fp32_embedding_grads || e.fp32_gradients()) return 0.0;
    double params = 0;
    if (stage == 0) params += embedding_parameters_per_gpu(m, e.tensor);  // word (+ learned position) embeddings
    if (stage == e.pipeline - 1 && e.pipeline > 1 && m.tied_embeddings) params += double(m.vocab) * m.hidden / e.tensor;
    return params;
}

double gradient_bytes(const ExecutionSpec& e, double params, double fp32_params) {
    return (params - fp32_params) * bytes_per_param(e).gradients + fp32_params * 4.0;
}

const char* to_string(MemoryCategory c) {
    switch (c) {
        case MemoryCategory::weights: return "weights";
        case MemoryCategory::gradients: return "gradients";
        case MemoryCategory::optimizer: return "optimizer";
        case MemoryCategory::activations: return "activations";
        case MemoryCategory::embedding_output: return "embedding/output";
        case MemoryCategory::recompute: return "recompute";
        case MemoryCategory::attention:
            return "attention workspace";
        case MemoryCategory::reserved: return "runtime reserved";
    }
    return "?";
}

std::vector<std::string> memory_category_names() {
    std::vector<std::string> names;
    for (std::uint32_t c = 0; c < kMemoryCategoryCount; ++c) names.emplace_back(to_string(static_cast<MemoryCategory>(c)));
    return names;
}

Bytes StageMemory::bytes(MemoryCategory c) const {
    switch (c) {
        case MemoryCategory::weights: return weights;
        case MemoryCategory::gradients: return gradients;
        case MemoryCategory::optimizer: return optimizer;
        case MemoryCategory::activations: return activations_layers;
        case MemoryCategory::embedding_output: return activations_embedding + activations_output;
        case MemoryCategory::recompute: return recompute_workspace;
        case MemoryCategory::attention:
            return attention_workspace;
        case MemoryCategory::reserved: return reserved;
    }
    return Bytes(0);
}

UnitActivations ActivationPlan::of(int stage, int chunk) const {
    const int v = schedule::virtual_stage(shape, stage, chunk);
    UnitActivations a;
    a.layers = chunk_layers[static_cast<std::size_t>(v)];
    if (v == 0) a.embedding = embedding;
    if (v == shape.virtual_stages() - 1) a.output = output;
    return a;
}

ActivationPlan activation_plan(const ModelSpec& m, const ExecutionSpec& e) {
    const LayerConfig lc = layer_config(m, e);
    const LayerPlan layer = build_layer(lc);
    ActivationPlan a;
    a.shape = schedule::shape_of(e);
    a.per_layer = layer.stored_bytes;
    a.embedding = build_embedding(lc).stored_per_microbatch;
    const OutputPlan output = build_output(lc);
    a.output = output.stored_per_microbatch;
    a.deferred_microbatches = e.deferred_wgrad_microbatches();
    a.deferred_output = output.deferred_per_microbatch;
    a.deferral_buffers = output.deferral_buffers;
    a.attention_forward = layer.attention_workspace_forward;
    a.attention_backward = layer.attention_workspace_backward;
    // Full recompute keeps a recomputed layer's input only (layer.stored_bytes); a layer it leaves alone (block
    // method) keeps everything; a uniform group of G layers keeps one input and recomputes G layers at once.
    const int chunks = a.shape.virtual_stages();
    a.offload = layer.offload;
    for (int v = 0; v < chunks; ++v) a.layer_count.push_back(e.layers_in_chunk(m.layers, v));
    if (e.recompute != Recompute::full) {
        for (int v = 0; v < chunks; ++v) a.chunk_layers.push_back(layer.stored_bytes * e.layers_in_chunk(m.layers, v));
        a.workspace.assign(static_cast<std::size_t>(chunks), layer.recompute_peak_bytes);
        return a;
    }
    const Bytes all = build_layer_left_alone(lc).stored_bytes;
    for (int v = 0; v < chunks; ++v) {
        const int n = e.layers_in_chunk(m.layers, v);
        const int recomputed = e.recomputed_layers(n), group = e.recompute_group(n);
        const int inputs = group > 0 ? (recomputed + group - 1) / group : 0;
        a.chunk_layers.push_back(layer.stored_bytes * inputs + all * (n - recomputed));
        a.workspace.push_back(all * group);
    }
    return a;
}

double layer_linear_weights_per_gpu(const ModelSpec& m, int t) {
    const double h = m.hidden, f = m.ffn_hidden, kv = 2.0 * m.query_groups() * m.head_dim();
    const double gate = m.mlp == Mlp::swiglu ? 2.0 : 1.0;
    return (h * (h + kv) + h * h + gate * h * f + f * h) / t;
}

double fsdp_layer_gather_bytes(const ModelSpec& m, const ExecutionSpec& e) {
    const double layer = layer_parameters_per_gpu(m, e.tensor), linear = layer_linear_weights_per_gpu(m, e.tensor);
    return e.precision == Precision::fp8 && e.fp8_param_gather ? linear + (layer - linear) * 2.0 : layer * 2.0;
}

namespace {

/// Megatron-FSDP (optim_grads_params, ExecutionSpec::fsdp; pipeline 1): every parameter's stored weight, main gradient
/// and optimizer state sharded over the data x context ranks (param_and_grad_buffer.py: every group's model-weight,
/// main-weight and gradient buffers distributed), and beside the shards what runs gathered: the double buffer's two
/// transformer layers of gathered weights and two of unsharded gradients (--fsdp-double-buffer, forced by NCCL user
/// buffers, UB_BUFFER_NUM = 2), the embedding and output layer gathered for the whole step (not FSDP units: their
/// buckets stay allocated), with FP8 parameters one layer's FP8 transpose (made in its backward), and the embedding's
/// and output layer's unsharded gradients (allocated as their backward runs, freed by their reduce-scatter: counted
/// for the whole step, a bound).
StageMemory fsdp_stage_state(const ModelSpec& m, const ExecutionSpec& e, const DeviceMemory& device) {
    const BytesPerParam bpp = bytes_per_param(e);
    const double shards = double(e.data) * e.context;
    const double params = parameters_on_stage(m, e, 0);
    const double layer = layer_parameters_per_gpu(m, e.tensor), linear = layer_linear_weights_per_gpu(m, e.tensor);
    const double layers = double(e.layers_on_stage(m.layers, 0));
    const double rest = params - layer * layers;  // embedding, output layer, final norm
    const bool fp8 = e.precision == Precision::fp8 && e.fp8_param_gather;
    const double unit = fsdp_layer_gather_bytes(m, e);  // one layer's gathered weights
    StageMemory sm;
    sm.stage = 0;
    const double weights = (unit * layers + rest * 2.0) / shards + rest * 2.0 + 2.0 * unit + (fp8 ? linear : 0.0);
    sm.weights = Bytes(std::llround(weights));
    sm.gradients = Bytes(std::llround(bpp.gradients * (params / shards + 2.0 * layer + rest)));
    sm.optimizer = Bytes(std::llround(params * bpp.optimizer));
    sm.reserved = device.reserved;
    return sm;
}

}  // namespace

StageMemory stage_state(const ModelSpec& m, const ExecutionSpec& e, const DeviceMemory& device, int s) {
    if (e.fsdp) return fsdp_stage_state(m, e, device);
    const BytesPerParam bpp = bytes_per_param(e);
    StageMemory sm;
    sm.stage = s;
    const double params = parameters_on_stage(m, e, s);
    sm.weights = stage_weight_bytes(m, e, s);
    sm.gradients = Bytes(static_cast<std::int64_t>(std::llround(gradient_bytes(e, params, fp32_embedding_parameters(m, e, s)))));
    double optimizer = params * bpp.optimizer;
    if (nemo_apex(e.grad_buckets) && e.distributed_optimizer) {
        // Apex keeps a 4-byte gradient shard for fp32 embedding gradients (their buckets' grad_sync_dtype).
        optimizer += (4.0 - bpp.gradients) * fp32_embedding_parameters(m, e, s) / (double(e.data) * e.context);
    }
    sm.optimizer = Bytes(static_cast<std::int64_t>(std::llround(optimizer)));
    sm.reserved = device.reserved;
    return sm;
}

namespace {

StageMemory stage_memory(const ModelSpec& m, const ExecutionSpec& e, const DeviceMemory& device,
                         const ActivationPlan& plan, int s) {
    StageMemory sm = stage_state(m, e, device, s);
    if (plan.offload.any()) return offloading_stage_memory(std::move(sm), plan, s);
    // Walk the program: a forward allocates its chunk's activations when it starts, a backward holds them
    // (plus the recompute workspace) while it runs and frees them when it ends; either holds its attention's
    // transient buffers from its start (a bound: one layer's attention at a time). The first instant of the largest
    // total is the peak, as in the engine's memory pools.
    UnitActivations held;
    held.output = plan.held_for_deferral(s);
    int units = 0;
    model_detail::ActivationPeak peak{sm};
    auto consider = [&](Bytes workspace, Bytes attention) { peak.consider(held, workspace, attention, units); };
    for (const schedule::Unit& u : schedule::unit_order(plan.shape, s)) {
        const UnitActivations a = plan.of(s, u.chunk);
        if (u.forward) {
            held.layers += a.layers;
            held.embedding += a.embedding;
            held.output += a.output;
            ++units;
            consider(Bytes(0), plan.attention_workspace(s, u.chunk, true));
        } else {
            consider(plan.recompute_workspace(s, u.chunk), plan.attention_workspace(s, u.chunk, false));
            held.layers -= a.layers;
            held.embedding -= a.embedding;
            held.output -= a.output - plan.kept_after_backward(s, u.chunk, u.microbatch);
            --units;
        }
    }
    return sm;
}

}  // namespace

StageMemory stage_memory(const ModelSpec& m, const ExecutionSpec& e, const DeviceMemory& device, int stage) {
    return stage_memory(m, e, device, activation_plan(m, e), stage);
}

MemoryReport estimate_memory(const ModelSpec& m, const ExecutionSpec& e, const DeviceMemory& device) {
    const ActivationPlan plan = activation_plan(m, e);
    MemoryReport r;
    r.capacity = device.capacity;
    r.activation_per_layer = plan.per_layer;
    r.first_stage = stage_memory(m, e, device, plan, 0);
    r.peak_stage = r.first_stage;
    r.stages.reserve(static_cast<std::size_t>(e.pipeline));
    r.stages.push_back(r.first_stage);
    for (int s = 1; s < e.pipeline; ++s) {
        StageMemory sm = stage_memory(m, e, device, plan, s);
        if (sm.total() > r.peak_stage.total()) r.peak_stage = sm;
        r.stages.push_back(std::move(sm));
    }
    r.activation_first_stage_layers = r.first_stage.activations_layers;
    r.activation_first_stage =
        r.first_stage.activations_layers + r.first_stage.activations_embedding + r.first_stage.activations_output;
    return r;
}

}  // namespace strata
