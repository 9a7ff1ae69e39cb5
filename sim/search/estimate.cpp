// The search's screen (estimate.hpp).
#include "estimate.hpp"

#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/power.hpp"

#include <algorithm>

namespace strata::search_detail {

double estimate(const Scenario& sc, const CostModel& boost) {
    const ExecutionSpec& e = sc.execution;
    const LayerConfig lc = layer_config(sc.model, e);
    const LayerPlan layer = build_layer(lc);
    CostModel cost = boost;  // this candidate's layer sets the clock under a power limit, as in the simulation
    (void)sustain_for(cost, sc.model, e);
    // The context-parallel ring over its c ranks with the SMs it holds, through the NICs where it crosses nodes (the
    // tensor-parallel collectives at the intra-node figures).
    const ContextRing context = cost.context_ring(e, sc.system);
    const double layer_backward = cost.pass_time(layer.backward, e.tensor, context).seconds();
    const double layer_forward = cost.pass_time(layer.forward, e.tensor, context).seconds();
    // Partial full recompute (block): the layers it leaves alone run their backward without the rerun.
    const bool partial = e.recompute == Recompute::full && e.recompute_method == RecomputeMethod::block;
    const double left_alone_backward =
        partial ? cost.pass_time(build_layer_left_alone(lc).backward, e.tensor, context).seconds() : layer_backward;
    const OutputPlan out = build_output(lc);
    const double output = (cost.pass_time(out.forward, e.tensor) + cost.pass_time(out.backward, e.tensor)).seconds();
    // The pipeline runs at its fullest stage's pace.
    int layers_per_stage = 0;
    double layers_time = 0;
    for (int r = 0; r < e.pipeline; ++r) {
        layers_per_stage = std::max(layers_per_stage, e.layers_on_stage(sc.model.layers, r));
        double stage_time = 0;
        for (int chunk = 0; chunk < e.interleave; ++chunk) {
            const int n = e.layers_in_chunk(sc.model.layers, chunk * e.pipeline + r);
            const int k = partial ? e.recomputed_layers(n) : n;
            stage_time += n * layer_forward + k * layer_backward + (n - k) * left_alone_backward;
        }
        layers_time = std::max(layers_time, stage_time);
    }
    const double stage = layers_time + (e.pipeline == 1 ? output : output / 2);
    const double n = e.microbatches();
    double t = (n + double(e.pipeline - 1) / e.interleave) * stage;
    const double params = parameters_on_stage(sc.model, e, 0);
    const BytesPerParam bpp = bytes_per_param(e);
    const int replicas = e.data * e.context;
    const double bw = e.gpus() > sc.system.gpus_per_node ? sc.system.network.nic_bandwidth.value
                                                         : sc.system.network.nvlink_bandwidth.value;
    if (e.fsdp && replicas > 1) {
        // Megatron-FSDP (pipeline 1): per microbatch each layer gathered twice and reduce-scattered once, one at a time
        // on one communicator, under the microbatch's compute; what exceeds it shows, and so do the last reduce-
        // scatters (a layer's and the embedding's) its backward waits for.
        const double share = double(replicas - 1) / replicas,
                     layer_params = layer_parameters_per_gpu(sc.model, e.tensor);
        const double gathered = fsdp_layer_gather_bytes(sc.model, e);
        // Across nodes each tensor rank's ring drives its share of the node's NICs (the hierarchical collectives).
        const NetworkSpec& net = sc.system.network;
        const double nics = std::max(1.0, double(std::min(net.rails, sc.system.gpus_per_node)) / e.tensor);
        const double ring = e.gpus() > sc.system.gpus_per_node
                                ? std::min(net.nvlink_bandwidth.value, net.nic_bandwidth.value * nics)
                                : net.nvlink_bandwidth.value;
        const double gather = share * gathered / ring, reduce = share * layer_params * bpp.gradients / ring;
        const double embedding = share * embedding_parameters_per_gpu(sc.model, e.tensor) * bpp.gradients / ring;
        const double comm = layers_per_stage * (2.0 * gather + reduce) + 2.0 * embedding;
        t += n * (std::max(0.0, comm - stage) + reduce + embedding);
    } else if (replicas > 1) {
        const double grads = params * bpp.gradients;
        const double reduce = 2.0 * (replicas - 1) / replicas * grads / bw;
        // Each layer's bucket starts when the last microbatch's backward has finished that layer.
        t += e.overlap_grad_reduce
                 ? std::max(reduce / std::max(1, layers_per_stage), reduce - layers_per_stage * layer_backward)
                 : reduce;
    }
    t += sc.system.optimizer_step_seconds(params / (e.distributed_optimizer ? replicas : 1),
                                          e.fsdp ? params / replicas : params, e.precision, bpp.gradients);
    if (e.averages_by_pass()) t += sc.system.gradient_average_seconds(params, bpp.gradients);
    if (e.check_for_nan_in_grad) t += sc.system.gradient_check_seconds(params, bpp.gradients);
    t += sc.system.hbm_pass_seconds(fp8_weight_cast_bytes(sc.model, e, 0));
    const std::vector<Step> sp_sync = build_sequence_parallel_grad_sync(lc, layers_per_stage, e.pipeline == 1);
    if (!sp_sync.empty()) t += cost.pass_time(sp_sync, e.tensor).seconds();
    return t;
}

}  // namespace strata::search_detail
