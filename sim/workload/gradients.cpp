// After its last backward each stage reduces gradients over data-parallel replicas (all-reduce, or
// reduce-scatter + all-gather of parameters with the distributed optimizer; with overlap_grad_reduce each
// layer's bucket as soon as every replica has finished it), the first and last stage all-reduce the tied
// embedding's gradient, then every group runs its optimizer step.
#include "builder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::workload {

double Builder::dp_collective_speed(int stage) const {
    const DeviceProfile& dev = sc_.system.device;
    if (dev.sm_count <= 0 || dev.nccl_channels <= 0) return 1.0;
    // One data-parallel collective's GPUs (tensor rank 0; the others' are placed alike): how many share a node.
    const int per_node_gpus = sc_.system.gpus_per_node;
    std::vector<int> ranks;
    for (int k = 0; k < e_.data; ++k)
        for (int j = 0; j < e_.context; ++j) ranks.push_back(rank(stage, k, j, 0));
    const int node = ranks.front() / per_node_gpus;
    const auto on_node = static_cast<int>(
        std::count_if(ranks.begin(), ranks.end(), [&](int r) { return r / per_node_gpus == node; }));
    int channels = dev.nccl_channels;
    if (on_node < static_cast<int>(ranks.size())) {
        const NetworkSpec& n = sc_.system.network;
        channels = std::min(channels, n.nccl_channels_per_nic * std::min(n.rails, on_node));
    }
    return 1.0 - std::min(0.9, double(channels) / double(dev.sm_count));
}

void Builder::emit_gradient_reduction_and_optimizer() {
    const int p = e_.pipeline, d = e_.data, t = e_.tensor, c = e_.context, replicas = weight_replicas();
    const BytesPerParam bpp = bytes_per_param(e_);
    const Time p2p_latency = sc_.system.network.p2p_latency;
    const double grad_bytes_per_param = bpp.gradients;
    std::vector<TaskId> reduced(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
        const double params = parameters_on_stage(sc_.model, e_, r);
        std::vector<TaskId> deps;
        for (int k = 0; k < d; ++k) deps.push_back(groups_[static_cast<std::size_t>(group_index(r, k))].last_backward);
        const Bytes grads = stage_state(sc_.model, e_, sc_.system.device_memory(), r).gradients;
        // One ring per tensor rank i (same rail) over the data (and context) replicas; the t rings move together.
        std::vector<std::vector<int>> rings(static_cast<std::size_t>(t));
        for (int i = 0; i < t; ++i)
            for (int k = 0; k < d; ++k)
                for (int j = 0; j < c; ++j) rings[static_cast<std::size_t>(i)].push_back(rank(r, k, j, i));
        auto combined_plan = [&](CollectiveKind kind, Bytes msg) {
            return fabric::plan_concurrent_collectives(fab_, kind, rings, msg, coll_params_);
        };
        const std::uint32_t label = make_label(TaskKind::dp, 0, 0);
        const auto kind = e_.distributed_optimizer ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
        const StreamId dp = dp_streams_[static_cast<std::size_t>(r)];
        TaskId done{};
        const std::size_t buckets = groups_[static_cast<std::size_t>(group_index(r, 0))].grad_buckets.size();
        if (replicas > 1 && buckets > 0) {
            // Overlapped: each layer's bucket is reduced as soon as every replica has finished its last
            // backward; what is left (embeddings, final norm) after the last backward.
            const double layer_params = layer_parameters_per_gpu(sc_.model, t);
            const Bytes bucket(std::llround(layer_params * grad_bytes_per_param));
            const auto bucket_phases = combined_plan(kind, bucket);
            for (std::size_t j = 0; j < buckets; ++j) {
                std::vector<TaskId> ready;
                for (int k = 0; k < d; ++k) ready.push_back(groups_[static_cast<std::size_t>(group_index(r, k))].grad_buckets[j]);
                done = emit_phases(dp, bucket_phases, ready, label, nullptr);
            }
            const double rest = params - layer_params * double(buckets);
            if (rest > 0.5) {
                done = emit_phases(dp, combined_plan(kind, Bytes(std::llround(rest * grad_bytes_per_param))), deps, label, nullptr);
            } else {
                TaskId x = sim_.add_compute(dp, Time::zero(), label);
                for (TaskId dd : deps) sim_.add_dependency(dd, x);
                sim_.add_dependency(done, x);
                done = x;
            }
        } else if (replicas > 1) {
            done = emit_phases(dp, combined_plan(kind, grads), deps, label, nullptr);
        } else {
            done = sim_.add_compute(dp_streams_[static_cast<std::size_t>(r)], Time::zero(), label);
            for (TaskId dd : deps) sim_.add_dependency(dd, done);
        }
        reduced[static_cast<std::size_t>(r)] = done;
    }
    if (p > 1 && sc_.model.tied_embeddings) {
        // The word-embedding gradient (v h / t per GPU) is all-reduced between the first and last stage.
        const Bytes emb(std::llround(double(sc_.model.vocab) * sc_.model.hidden / t * grad_bytes_per_param));
        std::vector<std::pair<int, int>> fwd_pairs, bwd_pairs;
        for (int k = 0; k < d; ++k)
            for (int j = 0; j < c; ++j)
                for (int i = 0; i < t; ++i) {
                    const int a = rank(0, k, j, i), b = rank(p - 1, k, j, i);
                    fwd_pairs.emplace_back(a, b);
                    bwd_pairs.emplace_back(b, a);
                }
        const fabric::Route both[] = {fab_.combined(fwd_pairs), fab_.combined(bwd_pairs)};
        const fabric::Route ra = fabric::merge_routes(both);
        const std::uint32_t label = make_label(TaskKind::embedding_sync, 0, 0);
        TaskId x = sim_.add_transfer(dp_streams_[0], ra.links, emb, ra.latency + p2p_latency, label);
        sim_.add_dependency(reduced[0], x);
        sim_.add_dependency(reduced[static_cast<std::size_t>(p - 1)], x);
        reduced[0] = x;
        reduced[static_cast<std::size_t>(p - 1)] = x;
    }
    std::vector<std::vector<TaskId>> stepped(static_cast<std::size_t>(p));
    for (auto& g : groups_) {
        const double params = parameters_on_stage(sc_.model, e_, g.stage);
        const double shard = e_.distributed_optimizer ? params / replicas : params;
        const Time step = Time::from_seconds(sc_.system.optimizer_step_seconds(shard, e_.precision)) +
                          sc_.system.optimizer.fixed_overhead;
        TaskId o = sim_.add_compute(g.compute, span_time(g, step), make_label(TaskKind::optimizer, 0, 0));
        sim_.add_dependency(reduced[static_cast<std::size_t>(g.stage)], o);
        stepped[static_cast<std::size_t>(g.stage)].push_back(o);
        g.optimizer = o;
    }
    if (e_.distributed_optimizer && replicas > 1) {
        // Updated bf16 parameters are all-gathered over the data (and context) replicas of each stage.
        for (int r = 0; r < p; ++r) {
            std::vector<int> ranks;
            for (int k = 0; k < d; ++k)
                for (int j = 0; j < c; ++j) ranks.push_back(rank(r, k, j, 0));
            const double params = parameters_on_stage(sc_.model, e_, r);
            auto phases = fabric::plan_collective(fab_, CollectiveKind::all_gather, ranks,
                                                  Bytes(std::llround(params * 2)), coll_params_);
            // Overlapped (--overlap-param-gather): the previous iteration's gather, under this iteration's forward.
            const std::vector<TaskId> after =
                e_.overlap_param_gather ? std::vector<TaskId>{} : stepped[static_cast<std::size_t>(r)];
            // Its own stream, so that the in-order data-parallel stream's reduction does not hold it back.
            const StreamId stream = e_.overlap_param_gather
                                        ? sim_.add_stream(fmt::format("stage {} parameter all-gather (overlapped)", r))
                                        : dp_streams_[static_cast<std::size_t>(r)];
            if (e_.overlap_param_gather) {
                const double speed = dp_collective_speed(r);
                for (int k = 0; k < d; ++k)
                    sim_.slow_while_busy(stream, groups_[static_cast<std::size_t>(group_index(r, k))].compute, speed);
            }
            emit_phases(stream, phases, after, make_label(TaskKind::dp, 1, 0), nullptr);
        }
    }
}

}  // namespace strata::workload
