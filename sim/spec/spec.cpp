// The spec structs' cross-part consistency (see include/strata/spec.hpp; their names: names.cpp).
#include "strata/spec.hpp"

#include "strata/collective.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace strata {

int ExecutionSpec::layers_on_stage(int layers, int stage) const {
    const int p = pipeline;
    if (split_counts_ends()) {
        int n = 0;
        for (int chunk = 0; chunk < interleave; ++chunk) n += layers_in_chunk(layers, chunk * p + stage);
        return n;
    }
    if (p == 1) return layers;
    if (first_stage_layers == 0 && last_stage_layers == 0) return layers / p;
    // Megatron-LM: the given ends, the middle stages share the rest evenly; an end not given takes an even
    // share of what the other end leaves.
    const int given = (first_stage_layers > 0 ? 1 : 0) + (last_stage_layers > 0 ? 1 : 0);
    const int share = (layers - first_stage_layers - last_stage_layers) / (p - given);
    if (stage == 0) return first_stage_layers > 0 ? first_stage_layers : share;
    if (stage == p - 1) return last_stage_layers > 0 ? last_stage_layers : share;
    return share;
}

int ExecutionSpec::layers_in_chunk(int layers, int v) const {
    if (!split_counts_ends()) return layers_on_stage(layers, v % pipeline) / interleave;
    // Megatron-Core (transformer_layer.py, get_transformer_layer_offset): (layers + 1 + 1) / (p x m) places per
    // chunk, the first chunk's first place the embedding's, the last chunk's last place the loss's.
    const int chunks = pipeline * interleave;
    int n = (layers + (embedding_in_pipeline_split ? 1 : 0) + (loss_in_pipeline_split ? 1 : 0)) / chunks;
    if (embedding_in_pipeline_split && v == 0) --n;
    if (loss_in_pipeline_split && v == chunks - 1) --n;
    return n;
}

namespace {

/// The uneven split's problem, if any (only called when first_stage_layers or last_stage_layers is set).
std::optional<SpecProblem> uneven_problem(const ModelSpec& m, const ExecutionSpec& e) {
    auto s = [](long long v) { return std::to_string(v); };
    const char* key = e.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers";
    if (e.pipeline < 2) return SpecProblem{"execution", key, std::string(key) + " needs pipeline >= 2"};
    const int given = (e.first_stage_layers > 0 ? 1 : 0) + (e.last_stage_layers > 0 ? 1 : 0);
    const int rest = m.layers - e.first_stage_layers - e.last_stage_layers;
    const int others = e.pipeline - given;
    if (rest < 0 || (others == 0 && rest != 0) || (others > 0 && (rest == 0 || rest % others != 0)))
        return SpecProblem{"execution", key,
                           "first_stage_layers (" + s(e.first_stage_layers) + ") and last_stage_layers (" +
                               s(e.last_stage_layers) + ") leave " + s(rest) + " of model.layers (" + s(m.layers) +
                               ") for " + s(others) + " other stage(s): they must share them evenly, at least one each"};
    for (int st = 0; st < e.pipeline; ++st) {
        if (e.layers_on_stage(m.layers, st) % e.interleave != 0)
            return SpecProblem{"execution", key, "stage " + s(st) + "'s " + s(e.layers_on_stage(m.layers, st)) +
                                                     " layers must be divisible by interleave (" + s(e.interleave) + ")"};
    }
    return std::nullopt;
}

/// The problem, if any, of a split that counts the embedding or the loss as a layer (Megatron-Core's checks in
/// transformer_config.py, and one layer at least in every chunk).
std::optional<SpecProblem> ends_in_split_problem(const ModelSpec& m, const ExecutionSpec& e) {
    auto s = [](long long v) { return std::to_string(v); };
    const char* key = e.embedding_in_pipeline_split ? "account_for_embedding_in_pipeline_split"
                                                    : "account_for_loss_in_pipeline_split";
    if (e.first_stage_layers > 0 || e.last_stage_layers > 0)
        return SpecProblem{"execution", key,
                           std::string(key) + " cannot be combined with first_stage_layers / last_stage_layers (as in "
                                              "Megatron-Core: one way of splitting the layers at a time)"};
    const int ends = (e.embedding_in_pipeline_split ? 1 : 0) + (e.loss_in_pipeline_split ? 1 : 0);
    const int places = m.layers + ends, chunks = e.pipeline * e.interleave;
    if (places % chunks != 0)
        return SpecProblem{"execution", key,
                           "model.layers (" + s(m.layers) + ") + " + s(ends) + " (the embedding and/or the loss counted as layers) = " +
                               s(places) + " must be divisible by pipeline x interleave (" + s(e.pipeline) + " x " +
                               s(e.interleave) + ")"};
    for (int v = 0; v < chunks; ++v)
        if (e.layers_in_chunk(m.layers, v) < 1)
            return SpecProblem{"execution", key,
                               "model chunk " + s(v) + " would hold no transformer layer (" + s(places) + " places over " +
                                   s(chunks) + " chunks); chunks without layers are not modelled"};
    return std::nullopt;
}

/// Seconds of communication the case cannot avoid, at the fastest rate any link could move it, for size_problem's
/// lower bound of the iteration (the larger of two, which may overlap each other and the compute):
///  - the data-parallel gradient reduction, a reduce-scatter of 16-bit gradients (the least Megatron moves) of a
///    stage's layer parameters N;
///  - the tensor-parallel layers' forward collectives, two per layer and microbatch, each of the microbatch's hidden
///    activations M in 16 bits.
/// Ranks are placed tensor innermost, then context, then data (builder.hpp). A group that spans n >= 2 nodes must
/// bring each node (n - 1) / n of the data from the others, however the collective is built (ring or hierarchical):
/// at most at the node's NICs together. A group that may sit in one node moves (g - 1) / g of it into each GPU, at
/// most at the fastest of NVLink, the profile's intra-node bus bandwidths and its measured collectives (each at twice
/// its algorithm bandwidth, more than any collective moves per GPU).
double communication_lower_bound_s(const Scenario& sc, double layer_params, double tokens, double layer_microbatches) {
    const ExecutionSpec& e = sc.execution;
    const NetworkSpec& n = sc.system.network;
    const DeviceProfile& dev = sc.system.device;
    const double cross = n.nic_bandwidth.value * std::max(n.rails, 1);
    double intra = std::max({n.nvlink_bandwidth.value, dev.intra_node_bus_bandwidth, dev.intra_node_nvls_bus_bandwidth});
    for (const auto& c : dev.measured_collective_points)
        if (c.time_us > 0) intra = std::max(intra, 2.0 * double(c.bytes) / (c.time_us * 1e-6));
    for (const auto& c : dev.measured_collectives) intra = std::max(intra, 2.0 * c.beta_bytes_per_s);
    const std::int64_t per_node = std::max(sc.system.gpus_per_node, 1);
    // Seconds to move `bytes` among a group of `size` ranks `stride` apart, at least `per_node_max` of them per node.
    auto seconds = [&](double bytes, std::int64_t size, std::int64_t stride) {
        const std::int64_t per_node_max = std::max<std::int64_t>(1, (per_node + stride - 1) / stride);
        const std::int64_t nodes = (size + per_node_max - 1) / per_node_max;
        if (nodes >= 2) return cross > 0 ? bytes * double(nodes - 1) / double(nodes) / cross : 0.0;
        const double fastest = std::max(cross, intra);
        return fastest > 0 ? bytes * double(size - 1) / double(size) / fastest : 0.0;
    };
    double dp = 0, tp = 0;
    if (e.data > 1) {
        const double stage_params = double(sc.model.layers) * layer_params / (double(e.tensor) * e.pipeline);
        dp = seconds(2.0 * stage_params, e.data, std::int64_t{e.tensor} * e.context);
    }
    if (e.tensor > 1) tp = 2.0 * layer_microbatches * seconds(2.0 * tokens * sc.model.hidden, e.tensor, 1);
    return std::max(dp, tp);
}

/// Sizes that multiply, checked before anything multiplies or divides them in `int` (each factor is read with
/// its own range, at most 2^30, so the 64-bit products here cannot overflow).
std::optional<SpecProblem> size_problem(const Scenario& sc) {
    const ModelSpec& m = sc.model;
    const ExecutionSpec& e = sc.execution;
    const DeviceProfile& dev = sc.system.device;
    auto s = [](long long v) { return std::to_string(v); };
    auto g = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3g", v);
        return std::string(buf);
    };
    const std::int64_t gpus = std::int64_t{e.tensor} * e.context * e.pipeline * e.data;
    if (gpus > kMaxSimulatedGpus)
        return SpecProblem{"execution", "data",
                           "tensor x context_parallel x pipeline x data = " + s(e.tensor) + " x " + s(e.context) + " x " +
                               s(e.pipeline) + " x " + s(e.data) + " = " + s(gpus) + " GPUs, more than the simulator's limit of " +
                               s(kMaxSimulatedGpus)};
    const std::int64_t per_step = std::int64_t{e.microbatch} * e.data;
    if (e.global_batch % per_step != 0)  // also when per_step > global_batch
        return SpecProblem{"execution", "global_batch", "global_batch (" + s(e.global_batch) + ") must be divisible by microbatch x data (" +
                                                        s(e.microbatch) + " x " + s(e.data) + ")"};
    if (e.global_batch / per_step > kMaxMicrobatches)
        return SpecProblem{"execution", "global_batch",
                           "global_batch / (microbatch x data) = " + s(e.global_batch / per_step) +
                               " microbatches per pipeline, more than the simulator's limit of " + s(kMaxMicrobatches)};
    const std::int64_t units = 2 * std::int64_t{e.pipeline} * e.interleave * (e.global_batch / per_step);
    if (units > kMaxScheduleUnits)
        return SpecProblem{"execution", "global_batch",
                           "2 x pipeline x interleave x microbatches = " + s(units) +
                               " forward and backward units in the schedule, more than the simulator's limit of " +
                               s(kMaxScheduleUnits)};
    // The largest tensor of one microbatch: the attention scores, the logits, the MLP or the hidden activations.
    const double tokens = double(m.seq_len) / e.context * e.microbatch;
    const double widest = std::max({double(m.hidden), 2.0 * m.ffn_hidden, double(m.vocab), double(m.heads) * m.seq_len});
    if (tokens * widest > kMaxTensorElements)
        return SpecProblem{"execution", "microbatch",
                           "a microbatch's largest activation (seq_len / context_parallel x microbatch x the widest of hidden, "
                           "2 x ffn_hidden, vocab and heads x seq_len = " + g(tokens) + " x " + g(widest) + ") would hold " +
                               g(tokens * widest) + " elements, more than the simulator's limit of " + g(kMaxTensorElements)};
    const double h = m.hidden, f = m.ffn_hidden;
    const double layer_params = 4.0 * h * h + 3.0 * h * f;
    const double params = m.layers * layer_params + double(m.vocab) * h + double(m.seq_len) * h;
    if (params > kMaxParameters)
        return SpecProblem{"model", "layers",
                           "about " + g(params) + " parameters (layers x (4 hidden^2 + 3 hidden x ffn_hidden) + embeddings), "
                                                  "more than the simulator's limit of " + g(kMaxParameters)};
    // Simulated time counts picoseconds in 64 bits (106 days): refuse an iteration that could come near it. The
    // estimate (GEMMs at the profile's ceiling, activations streamed once at its elementwise bandwidth, a launch
    // per op) is an optimistic lower bound of the simulated time, far below the limit for any real run.
    if (dev.peak_flops > 0 && dev.hbm_bandwidth > 0) {
        const double tok_iter = double(e.global_batch) * m.seq_len;
        const double flops = 8.0 * (m.layers * (layer_params + 2.0 * m.seq_len * h) + double(m.vocab) * h) * tok_iter;
        const double ceiling = std::max(dev.gemm_efficiency_ceiling, 0.01);
        const double per_gpu_layers = double(m.layers) / e.pipeline;
        const double mbs = double(e.global_batch) / double(per_step);
        const double act_bytes = tokens * (34.0 * h + 5.0 * m.heads * m.seq_len) / e.tensor;
        const double compute_s = flops / (double(gpus) * dev.peak_flops * ceiling) +
                               act_bytes * per_gpu_layers * mbs /
                                   (dev.hbm_bandwidth * std::max(dev.elementwise_bandwidth_efficiency, 0.01)) +
                               dev.kernel_launch_us * 1e-6 * 100.0 * per_gpu_layers * mbs;
        // Communication may overlap the compute, so the larger of the two bounds the iteration, not their sum.
        const double seconds = std::max(compute_s, communication_lower_bound_s(sc, layer_params, tokens, per_gpu_layers * mbs));
        if (seconds > kMaxIterationSeconds)
            return SpecProblem{"execution", "global_batch",
                               "one iteration would take at least " + g(seconds) + " s on " + s(gpus) +
                                   " GPUs (model FLOPs at the device's peak and ceiling, activations at its bandwidth, the "
                                   "gradients' reduction and the tensor-parallel collectives at the fastest link's), more "
                                   "than the simulator's limit of " + g(kMaxIterationSeconds) + " s"};
    }
    return std::nullopt;
}

}  // namespace

std::optional<SpecProblem> find_problem(const Scenario& sc) {
    const ModelSpec& m = sc.model;
    const ExecutionSpec& e = sc.execution;
    auto s = [](long long v) { return std::to_string(v); };
    // The model's own shape first: no execution can mend it (a search's candidates all report it).
    if (m.hidden % m.heads != 0)
        return SpecProblem{"model", "hidden", "hidden (" + s(m.hidden) + ") must be divisible by heads (" + s(m.heads) + ")"};
    if (m.heads % m.query_groups() != 0)
        return SpecProblem{"model", "kv_heads", "heads (" + s(m.heads) + ") must be divisible by kv_heads (" + s(m.query_groups()) + ")"};
    if (auto p = size_problem(sc)) return p;
    if (fused_attention(e.attention) && !sc.system.device.has_flash_attention())
        return SpecProblem{"execution", "attention", std::string("attention: ") + to_string(e.attention) +
                                                         " needs a flash_attention block in the device profile " +
                                                         sc.system.device.file + " (FlashAttention efficiencies)"};
    if (e.attention == Attention::flash2 && !sc.system.device.has_flash2())
        return SpecProblem{"execution", "attention", "attention: flash2 needs flash_attention.flash2_forward_ratio and "
                                                     "flash2_backward_ratio in the device profile " + sc.system.device.file +
                                                     " (FlashAttention-2's speed against the profile's fused attention)"};
    if (m.heads % e.tensor != 0)
        return SpecProblem{"execution", "tensor", "tensor (" + s(e.tensor) + ") must divide model.heads (" + s(m.heads) + ")"};
    if (m.query_groups() % e.tensor != 0)
        return SpecProblem{"execution", "tensor", "tensor (" + s(e.tensor) + ") must divide model.kv_heads (" + s(m.query_groups()) +
                                                      "): each tensor-parallel rank holds whole query groups"};
    if (m.hidden % e.tensor != 0)
        return SpecProblem{"execution", "tensor", "tensor (" + s(e.tensor) + ") must divide model.hidden (" + s(m.hidden) + ")"};
    if (m.ffn_hidden % e.tensor != 0)
        return SpecProblem{"execution", "tensor", "tensor (" + s(e.tensor) + ") must divide model.ffn_hidden (" + s(m.ffn_hidden) + ")"};
    if (m.vocab % e.tensor != 0)
        return SpecProblem{"execution", "tensor", "tensor (" + s(e.tensor) + ") must divide model.vocab (" + s(m.vocab) +
                                                  "); pad the vocabulary to a multiple of tensor"};
    if (e.split_counts_ends()) {
        if (auto p = ends_in_split_problem(m, e)) return p;
    } else if (e.first_stage_layers > 0 || e.last_stage_layers > 0) {
        if (auto p = uneven_problem(m, e)) return p;
    } else if (m.layers % (e.pipeline * e.interleave) != 0)
        return SpecProblem{"execution", "pipeline", "model.layers (" + s(m.layers) + ") must be divisible by pipeline x interleave (" +
                                                    s(e.pipeline) + " x " + s(e.interleave) + ")"};
    if (e.sequence_parallel && m.seq_len % e.tensor != 0)
        return SpecProblem{"execution", "sequence_parallel", "sequence parallelism needs model.seq_len (" + s(m.seq_len) +
                                                             ") divisible by tensor (" + s(e.tensor) + ")"};
    if (e.schedule == Schedule::interleaved) {
        if (e.interleave < 2)
            return SpecProblem{"execution", "interleave", "the interleaved schedule needs interleave >= 2 (got " + s(e.interleave) + ")"};
        if (e.pipeline < 2)
            return SpecProblem{"execution", "pipeline", "the interleaved schedule needs pipeline >= 2 (got " + s(e.pipeline) + ")"};
        if (e.microbatches() % e.pipeline != 0)
            return SpecProblem{"execution", "global_batch",
                           "the interleaved schedule needs the number of microbatches per pipeline (global_batch / (microbatch x data) = " +
                               s(e.microbatches()) + ") to be a multiple of pipeline (" + s(e.pipeline) + ")"};
    } else if (e.interleave != 1) {
        return SpecProblem{"execution", "interleave", "interleave = " + s(e.interleave) + " needs schedule: interleaved (got " +
                                                      to_string(e.schedule) + ")"};
    }
    if (e.precision == Precision::fp8 && sc.system.device.peak_flops_fp8 <= 0)
        return SpecProblem{"execution", "precision",
                           "precision: fp8 needs device.peak_flops_fp8 in the device profile " + sc.system.device.file +
                               " (a GPU with FP8 tensor cores)"};
    if (e.precision == Precision::fp8 && e.transformer_impl == TransformerImpl::local)
        return SpecProblem{
            "execution", "transformer_impl",
            "precision: fp8 runs in Transformer Engine's layers (transformer_impl: auto, transformer_engine or "
            "te_transformer_layer); Megatron-LM's local layers (transformer_impl: local) have no FP8"};
    if (e.tp_comm_overlap && e.transformer_impl == TransformerImpl::local)
        return SpecProblem{"execution", "transformer_impl",
                           "tp_comm_overlap is Transformer Engine's userbuffer overlap (transformer_impl: auto, "
                           "transformer_engine or te_transformer_layer); Megatron-LM's local layers (transformer_impl: "
                           "local) have none"};
    if (e.recompute == Recompute::selective && !e.can_recompute(e.recompute_modules)) {
        if (e.transformer_impl_in_force() == TransformerImpl::te_transformer_layer)
            return SpecProblem{"execution", "recompute_modules",
                               "recompute_modules: Transformer Engine's own TransformerLayer (transformer_impl "
                               "te_transformer_layer, NeMo 1.x) checkpoints only the attention core with selective "
                               "recompute; valid here: [core_attn]"};
        return SpecProblem{
            "execution", "recompute_modules",
            std::string(
                "recompute_modules: layernorm has no effect with Transformer Engine's layers (transformer_impl ") +
                to_string(e.transformer_impl_in_force()) +
                " in force): each norm is fused into the linear layer after it (LayerNormLinear) and Megatron-Core "
                "skips layernorm (in FP8 with delayed scaling it refuses it); valid here: core_attn, mlp (which "
                "recomputes the MLP's fused norm too); layernorm "
                "needs transformer_impl: local"};
    }
    if (e.fp8_recipe != Fp8Recipe::delayed && e.precision != Precision::fp8)
        return SpecProblem{"execution", "fp8_recipe", "fp8_recipe applies to precision: fp8"};
    if (e.fp8_param_gather && (e.precision != Precision::fp8 || !e.distributed_optimizer))
        return SpecProblem{"execution", "fp8_param_gather",
                           "fp8_param_gather: true needs precision: fp8 and distributed_optimizer: true"};
    if (e.overlap_param_gather && !e.distributed_optimizer)
        return SpecProblem{"execution", "overlap_param_gather",
                           "overlap_param_gather needs distributed_optimizer: true (only a sharded optimizer gathers parameters)"};
    if (e.overlap_param_gather_with_optimizer_step && (!e.overlap_param_gather || e.schedule != Schedule::interleaved))
        return SpecProblem{"execution", "overlap_param_gather_with_optimizer_step",
                           "overlap_param_gather_with_optimizer_step needs overlap_param_gather: true and the interleaved "
                           "schedule (interleave > 1), as Megatron-Core requires"};
    if (nemo_apex(e.grad_buckets)) {
        if (!e.distributed_optimizer)
            return SpecProblem{"execution", "grad_buckets",
                               "grad_buckets: nemo_apex is Apex's DistributedFusedAdam, a sharded optimizer: it needs "
                               "distributed_optimizer: true"};
        if (e.overlap_param_gather_with_optimizer_step)
            return SpecProblem{"execution", "overlap_param_gather_with_optimizer_step",
                               "overlap_param_gather_with_optimizer_step is Megatron-Core's; with grad_buckets: nemo_apex "
                               "Apex steps its first bucket group first and gathers it under the rest of the step by "
                               "itself (with overlap_param_gather)"};
        if (e.check_for_nan_in_grad)
            return SpecProblem{"execution", "check_for_nan_in_grad",
                               "check_for_nan_in_grad is Megatron-Core DDP's; Apex's DistributedFusedAdam (grad_buckets: "
                               "nemo_apex) checks nothing before its reduction"};
    }
    if (e.fp32_embedding_grads && !nemo_apex(e.grad_buckets))
        return SpecProblem{"execution", "fp32_embedding_grads",
                           "fp32_embedding_grads is NeMo's with_fp32_embedding_grads for Apex's DistributedFusedAdam: it "
                           "needs grad_buckets: nemo_apex or nemo_apex_layers"};
    if (e.defer_embedding_wgrad_compute && (e.pipeline < 2 || !e.gradient_accumulation_fusion))
        return SpecProblem{"execution", "defer_embedding_wgrad_compute",
                           "defer_embedding_wgrad_compute needs pipeline > 1 and gradient_accumulation_fusion: true "
                           "(Megatron-Core's ModelParallelConfig refuses it otherwise)"};
    if (e.deferred_wgrad_microbatches() == 1)
        return SpecProblem{"execution", "wgrad_deferral_limit",
                           "defer_embedding_wgrad_compute with one deferred microbatch (a limit of 1, or one microbatch per "
                           "step) stops Megatron-Core's drain_embedding_wgrad_compute (0.7-0.14: its drain_idx is never set); "
                           "defer none, or two or more"};
    if (e.wgrad_deferral_limit > 0 && !e.defer_embedding_wgrad_compute)
        return SpecProblem{"execution", "wgrad_deferral_limit",
                           "wgrad_deferral_limit limits defer_embedding_wgrad_compute; set that to true, or drop the limit"};
    if (e.overlap_p2p_comm && (e.schedule != Schedule::interleaved || (!e.sequence_parallel && e.tensor > 1)))
        return SpecProblem{"execution", "overlap_p2p_comm",
                           "overlap_p2p_comm needs the interleaved schedule (interleave > 1; Megatron overlaps pipeline "
                           "communication only there) and sequence_parallel: true when tensor > 1"};
    if (e.tp_comm_overlap && (!e.sequence_parallel || e.tensor < 2))
        return SpecProblem{"execution", "tp_comm_overlap",
                           "tp_comm_overlap needs tensor > 1 and sequence_parallel: true (Megatron-LM overlaps the "
                           "sequence-parallel all-gathers and reduce-scatters with the GEMMs)"};
    if (e.tp_comm_overlap && e.tensor % 2 != 0)
        for (std::size_t i = 0; i < kTpOverlapNames.size(); ++i)
            if (e.tp_overlap_config.aggregate[i])
                return SpecProblem{"execution", "tp_overlap_aggregate",
                                   "tp_overlap_aggregate (" + std::string(kTpOverlapNames[i]) + ") needs an even tensor (got " +
                                       s(e.tensor) + "): Transformer Engine exchanges chunks between pairs of ranks"};
    // num_sm counts where an overlap's kernel holds SMs (pipeline and bulk) or its GEMM leaves them (a margin).
    const int device_sms = sc.system.device.sm_count;
    const auto uses_sms = [&](std::size_t i) {
        const auto o = static_cast<TpOverlap>(i);
        if (e.tp_overlap_config.sm_margin[i]) return true;
        if (o == TpOverlap::proj_fprop) return e.tp_overlap_proj_fprop == TpOverlapRs::pipeline;
        if (o == TpOverlap::fc2_fprop) return e.tp_overlap_fc2_fprop == TpOverlapRs::pipeline;
        return i >= std::size_t(TpOverlap::qkv_dgrad);  // the bulk overlaps; the ring exchanges move by copy engines
    };
    for (std::size_t i = 0; i < kTpOverlapNames.size() && device_sms > 0 && e.tp_comm_overlap; ++i)
        if (uses_sms(i) && e.tp_overlap_config.num_sm[i] >= device_sms)
            return SpecProblem{"execution", "tp_overlap_num_sm." + std::string(kTpOverlapNames[i]),
                               "tp_overlap_num_sm." + std::string(kTpOverlapNames[i]) + " (" + s(e.tp_overlap_config.num_sm[i]) +
                                   ") must be below the device's SMs (" + s(device_sms) + ", device.sm_count in " +
                                   sc.system.device.file + "): the GEMM beside it needs some"};
    if (e.context > 1) {
        if (!fused_attention(e.attention))
            return SpecProblem{"execution", "context_parallel",
                               "context_parallel (" + s(e.context) + ") needs attention: flash (Megatron-Core's ring attention runs "
                               "fused attention kernels)"};
        if (m.seq_len % (2 * e.context) != 0)
            return SpecProblem{"execution", "context_parallel",
                               "context_parallel (" + s(e.context) + ") needs model.seq_len (" + s(m.seq_len) +
                                   ") divisible by 2 x context_parallel (the causal load balancing splits each sequence in 2c chunks)"};
        if (e.sequence_parallel && (m.seq_len / e.context) % e.tensor != 0)
            return SpecProblem{"execution", "sequence_parallel",
                               "sequence parallelism needs each context-parallel shard (model.seq_len / context_parallel = " +
                                   s(m.seq_len / e.context) + ") divisible by tensor (" + s(e.tensor) + ")"};
    }
    if (e.recompute_layers > 0) {
        if (e.recompute != Recompute::full)
            return SpecProblem{"execution", "recompute_layers",
                               "recompute_layers (" + s(e.recompute_layers) + ") needs recompute: full (got " + to_string(e.recompute) + ")"};
        for (int st = 0; st < e.pipeline; ++st) {
            // Against the stage's largest chunk (a chunk one layer short for the embedding or the loss recomputes all).
            int largest = 0;
            for (int chunk = 0; chunk < e.interleave; ++chunk)
                largest = std::max(largest, e.layers_in_chunk(m.layers, chunk * e.pipeline + st));
            if (e.recompute_layers > largest)
                return SpecProblem{"execution", "recompute_layers",
                                   "recompute_layers (" + s(e.recompute_layers) + ") exceeds the " + s(largest) +
                                       " layers of a model chunk on stage " + s(st)};
        }
    }
    const int g = sc.system.gpus_per_node;
    if (e.tensor > g ? e.tensor % g != 0 : g % e.tensor != 0)
        return SpecProblem{"execution", "tensor", "tensor (" + s(e.tensor) + ") and system.gpus_per_node (" + s(g) +
                                                  ") must divide one another so tensor groups do not straddle nodes unevenly"};
    // Last, so that sizes that do not fit together are reported as such first (the search counts them apart).
    if (e.fsdp) {
        const auto problem = [](std::string message) {
            return SpecProblem{"execution", "fsdp", "fsdp: " + std::move(message)};
        };
        if (!e.distributed_optimizer)
            return problem(
                "needs distributed_optimizer: true (Megatron-FSDP v1 steps Megatron-Core's DistributedOptimizer "
                "over the shards; Megatron-LM turns it on with --use-megatron-fsdp)");
        if (e.pipeline > 1)
            return problem("modelled without pipeline parallelism (pipeline: 1; here " + s(e.pipeline) +
                           "): Megatron-FSDP v1 has no pipeline-parallel test, and every published Megatron-FSDP run "
                           "has pipeline 1");
        if (e.data * e.context < 2)
            return problem("needs data x context_parallel > 1 (the ranks the state is sharded over; here 1)");
        if (nemo_apex(e.grad_buckets))
            return problem(
                "grad_buckets: nemo_apex is Apex's sharded optimizer, not Megatron-FSDP's; Megatron-FSDP "
                "reduces each transformer layer as its own bucket (use grad_buckets: layer or megatron_core)");
        if (e.precision == Precision::fp8 && !e.fp8_param_gather)
            return problem(
                "FP8 is modelled with fp8_param_gather: true (FP8 weights gathered and their transposes made "
                "in each backward), as Megatron-LM's Megatron-FSDP example and Megatron-Bridge's FSDP recipes "
                "run it");
        if (e.offload_modules.any()) return problem("not modelled together with offload_modules; choose one");
    }
    if (e.offload_modules.any()) {
        const OffloadModules& o = e.offload_modules;
        const auto problem = [](std::string message) {
            return SpecProblem{"execution", "offload_modules", "offload_modules: " + std::move(message)};
        };
        if (e.transformer_impl_in_force() != TransformerImpl::transformer_engine)
            return problem(
                std::string("Megatron-Core's fine-grained activation offloading runs with Transformer Engine's "
                            "layers (its arguments require transformer_impl transformer_engine; ") +
                to_string(e.transformer_impl_in_force()) +
                " in force): set execution.transformer_impl: transformer_engine");
        if (o.attn_norm || o.mlp_norm)
            return problem(
                std::string(o.attn_norm ? "attn_norm" : "mlp_norm") +
                " has no effect with Transformer Engine's layers: the norm is fused into the linear layer "
                "after it (the spec's norm is an IdentityOp) and Megatron-Core skips the module; valid here: "
                "qkv_linear (whose LayerNormLinear keeps the norm's input and output), core_attn, attn_proj");
        if (o.attn_proj && !o.core_attn)
            return problem(
                "attn_proj needs core_attn too (Megatron-Core: the input of attn_proj is the output of "
                "core_attn, which is needed in core_attn.backward())");
        if (o.core_attn && e.attention == Attention::unfused)
            return problem(
                "core_attn's saved tensors are modelled for fused attention (attention: flash or flash2, "
                "as Transformer Engine runs it: q, k, v, the output and the softmax statistics)");
        if (e.recompute == Recompute::full)
            return problem(
                "not modelled with recompute: full (Megatron-Core has no check for the pair and no "
                "documented behaviour); use recompute: none or selective");
        const NetworkSpec& n = sc.system.network;
        if (n.device_to_host_bandwidth.value <= 0 || n.host_to_device_bandwidth.value <= 0)
            return problem(
                "needs the host link: network.device_to_host_bandwidth_bytes_per_s and "
                "network.host_to_device_bandwidth_bytes_per_s in the system's file (system '" +
                sc.system.name + "'; the shipped DGX systems give them)");
    }
    return std::nullopt;
}

void validate(const Scenario& scenario) {
    if (auto p = find_problem(scenario)) {
        throw InputError(scenario.source + ": " + p->part + "." + p->key + ": " + p->message);
    }
}

}  // namespace strata
