// After its last backward each stage reduces gradients over data-parallel replicas (all-reduce, or
// reduce-scatter + all-gather of parameters with the distributed optimizer; with overlap_grad_reduce each
// layer's bucket as soon as every replica has finished it), the first and last stage all-reduce the tied
// embedding's gradient, then every group runs its optimizer step.
#include "builder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace strata::workload {

std::vector<double> Builder::dp_collective_speeds() const {
    const DeviceProfile& dev = sc_.system.device;
    std::vector<double> speeds(static_cast<std::size_t>(e_.pipeline), 1.0);
    if (dev.sm_count <= 0 || dev.nccl_channels <= 0) return speeds;
    // The measured table is a GEMM's slowdown. Measured on the same H100 (calibrate/torch_tp_overlap.py --kinds),
    // bandwidth-bound kernels (add, copy, layer norm, GeLU) lose nothing with up to 32 SMs held (they need fewer
    // SMs than the GPU has to keep HBM busy), and cuDNN's fused attention loses less than the held share (1.075 at
    // 16 SMs, share 1.138): the stage's compute under interference is its GEMM time at the table's speed, its
    // attention time at the profile's attention table (cuDNN's; FlashAttention-2's and without the table the share,
    // a bound), its elementwise time unchanged, weighted by the layer's kernel times (the same layer on every stage).
    // Without a GEMM table every kernel but fused attention loses the held share.
    const bool measured = !dev.measured_sms_held.empty() || !dev.measured_attention_sms_held.empty();
    const KernelShares k = measured ? kernel_shares() : KernelShares{};
    const int per_node_gpus = sc_.system.gpus_per_node;
    for (int stage = 0; stage < e_.pipeline; ++stage) {
        // One data-parallel collective's GPUs (tensor rank 0; the others' are placed alike): how many share a node.
        std::vector<int> ranks;
        for (int r = 0; r < e_.data; ++r)
            for (int j = 0; j < e_.context; ++j) ranks.push_back(rank(stage, r, j, 0));
        const int node = ranks.front() / per_node_gpus;
        const auto on_node = static_cast<int>(
            std::count_if(ranks.begin(), ranks.end(), [&](int g) { return g / per_node_gpus == node; }));
        int channels = dev.nccl_channels;
        if (on_node < static_cast<int>(ranks.size())) {
            const NetworkSpec& n = sc_.system.network;
            channels = std::min(channels, n.nccl_channels_per_nic * std::min(n.rails, on_node));
        }
        double& speed = speeds[static_cast<std::size_t>(stage)];
        if (!measured) {
            speed = sm_share_speed(dev, channels);
        } else {
            const double attention = attention_speed_with_sms_held(dev, channels, e_.attention == Attention::flash2);
            const double rest = dev.measured_sms_held.empty() ? sm_share_speed(dev, channels) : 1.0;
            speed = 1.0 / (k.gemm / speed_with_sms_held(dev, channels) + k.attention / attention +
                           (1.0 - k.gemm - k.attention) / rest);
        }
    }
    return speeds;
}

Builder::KernelShares Builder::kernel_shares() const {
    const LayerPlan layer = build_layer(layer_config(sc_.model, e_));
    // The layer's kernel time by kind (its collectives left out).
    const PowerMix m = cost_.power_mix({&layer.forward, &layer.backward}, e_.tensor, e_.context, false);
    const double gemm = m.gemm_s + m.gemm_fp8_s, all = gemm + m.attention_s + m.other_s;
    if (all <= 0) return {1.0, 0.0};
    return {gemm / all, m.attention_s / all};
}

double Builder::rest_parameters(int r) const {
    int layers = 0;
    for (int chunk = 0; chunk < shape_.chunks; ++chunk)
        layers += e_.layers_in_chunk(sc_.model.layers, schedule::virtual_stage(shape_, r, chunk));
    return parameters_on_stage(sc_.model, e_, r) - layer_parameters_per_gpu(sc_.model, e_.tensor) * double(layers);
}

std::vector<fabric::CollectivePhase> Builder::gather_phases(int r, Bytes message) const {
    std::vector<int> ranks;
    for (int k = 0; k < e_.data; ++k)
        for (int j = 0; j < e_.context; ++j) ranks.push_back(rank(r, k, j, 0));
    return fabric::plan_collective(fab_, CollectiveKind::all_gather, ranks, message, coll_params_);
}

std::vector<fabric::CollectivePhase> Builder::reduction_phases(int r, Bytes message, bool gather) const {
    // One ring per tensor rank i (same rail) over the data (and context) replicas; the t rings move together.
    std::vector<std::vector<int>> rings(static_cast<std::size_t>(e_.tensor));
    for (int i = 0; i < e_.tensor; ++i)
        for (int k = 0; k < e_.data; ++k)
            for (int j = 0; j < e_.context; ++j) rings[static_cast<std::size_t>(i)].push_back(rank(r, k, j, i));
    const auto kind = gather                     ? CollectiveKind::all_gather
                      : e_.distributed_optimizer ? CollectiveKind::reduce_scatter
                                                 : CollectiveKind::all_reduce;
    return fabric::plan_concurrent_collectives(fab_, kind, rings, message, coll_params_);
}

const Plan& Builder::bucket_plan(int r, const GradientBucket& b, bool gather) {
    // Gathered: 16-bit parameters, with fp8_param_gather the layers' in FP8; reduced: the gradients' bytes (fp32 for
    // NeMo's fp32 embedding gradients).
    const double bytes = gather ? b.linear_weights * (e_.fp8_param_gather ? 1.0 : 2.0) +
                                      (b.parameters - b.linear_weights) * 2.0
                                : gradient_bytes(e_, b.parameters, b.fp32_parameters);
    const Bytes message(std::llround(bytes));
    auto& plans = reductions_[static_cast<std::size_t>(r)].bucket_plans[gather ? 1 : 0];
    auto it = plans.find(message.value);
    if (it == plans.end())
        it = plans.emplace(message.value, intern(gather ? gather_phases(r, message) : reduction_phases(r, message))).first;
    return it->second;
}

const Builder::StageBuckets& Builder::stage_buckets(int r) {
    if (stage_buckets_.empty()) stage_buckets_.resize(static_cast<std::size_t>(e_.pipeline));
    std::optional<StageBuckets>& cached = stage_buckets_[static_cast<std::size_t>(r)];
    if (cached) return *cached;
    StageBuckets sb;
    const int last_v = shape_.virtual_stages() - 1;
    if (nemo_apex(e_.grad_buckets)) {
        std::vector<ChunkContents> chunks;
        for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
            const int v = schedule::virtual_stage(shape_, r, chunk);
            chunks.push_back({e_.layers_in_chunk(sc_.model.layers, v), v == 0, v == last_v});
        }
        for (const std::vector<GradientBucket>& groups : nemo_apex_gradient_buckets(sc_.model, e_, chunks)) {
            sb.chunk_offset.push_back(sb.buckets.size());
            sb.buckets.insert(sb.buckets.end(), groups.begin(), groups.end());
        }
        return cached.emplace(std::move(sb));
    }
    for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
        const int v = schedule::virtual_stage(shape_, r, chunk);
        sb.chunk_offset.push_back(sb.buckets.size());
        for (const GradientBucket& b : megatron_gradient_buckets(sc_.model, e_, e_.layers_in_chunk(sc_.model.layers, v),
                                                                 v == 0, v == last_v, megatron_chunk_bucket_size(e_, r, chunk)))
            sb.buckets.push_back(b);
    }
    return cached.emplace(std::move(sb));
}

const Plan& Builder::dp_plan(int r, DpMessage which) {
    std::optional<Plan>& cached = reductions_[static_cast<std::size_t>(r)].plans[static_cast<int>(which)];
    if (cached) return *cached;
    if (which >= DpMessage::gather) {
        const double embedding = r == 0 ? embedding_parameters_per_gpu(sc_.model, e_.tensor) : 0.0;
        // 16-bit parameters; with fp8_param_gather the transformer layers' in FP8 (1 byte).
        const double layer_bytes = e_.fp8_param_gather ? 1.0 : 2.0;
        const double layers = parameters_on_stage(sc_.model, e_, r) - rest_parameters(r);
        const double bytes = which == DpMessage::gather         ? layers * layer_bytes + rest_parameters(r) * 2
                             : which == DpMessage::gather_layer ? layer_parameters_per_gpu(sc_.model, e_.tensor) * layer_bytes
                             : which == DpMessage::gather_embedding ? embedding * 2
                                                                    : std::max(0.0, rest_parameters(r) - embedding) * 2;
        return cached.emplace(intern(gather_phases(r, Bytes(std::llround(bytes)))));
    }
    const double gbpp = bytes_per_param(e_).gradients;
    const Bytes message = which == DpMessage::whole  ? stage_state(sc_.model, e_, sc_.system.device_memory(), r).gradients
                          : which == DpMessage::bucket ? Bytes(std::llround(layer_parameters_per_gpu(sc_.model, e_.tensor) * gbpp))
                                                       : Bytes(std::llround(rest_parameters(r) * gbpp));
    return cached.emplace(intern(reduction_phases(r, message)));
}

const Builder::RouteAndLatency& Builder::embedding_route() {
    if (!embedding_route_) {
        const int p = e_.pipeline;
        std::vector<std::pair<int, int>> fwd_pairs, bwd_pairs;
        for (int k = 0; k < e_.data; ++k)
            for (int j = 0; j < e_.context; ++j)
                for (int i = 0; i < e_.tensor; ++i) {
                    const int a = rank(0, k, j, i), b = rank(p - 1, k, j, i);
                    fwd_pairs.emplace_back(a, b);
                    bwd_pairs.emplace_back(b, a);
                }
        const fabric::Route both[] = {fab_.combined(fwd_pairs), fab_.combined(bwd_pairs)};
        const fabric::Route ra = fabric::merge_routes(both);
        embedding_route_.emplace(sim_.add_route(ra.links), ra.latency);
    }
    return *embedding_route_;
}

TaskId Builder::prepare_gradients(Group& g, TaskId after, double params) {
    if (params <= 0.0) return after;
    const double bytes = bytes_per_param(e_).gradients;
    // Megatron-Core's start_grad_sync (param_and_grad_buffer.py, r0.8): the check, then the scaling.
    if (e_.check_for_nan_in_grad) {
        const Time check = Time::from_seconds(sc_.system.gradient_check_seconds(params, bytes));
        const TaskId c = sim_.add_compute(g.compute, span_time(g, check), make_label(TaskKind::grad_check, 0, 0));
        sim_.add_dependency(after, c);
        after = c;
    }
    if (!e_.averages_by_pass()) return after;
    const Time pass = Time::from_seconds(sc_.system.gradient_average_seconds(params, bytes));
    const TaskId a = sim_.add_compute(g.compute, span_time(g, pass), make_label(TaskKind::grad_average, 0, 0));
    sim_.add_dependency(after, a);
    return a;
}

TaskId Builder::on_bucket(Group& g, TaskId end, std::size_t j, double params, const Plan& plan) {
    // Overlapped (overlap_grad_reduce): a bucket is reduced as soon as every replica has finished it.
    StageReduction& sr = reductions_[static_cast<std::size_t>(g.stage)];
    ++g.buckets;
    if (sr.bucket_ready.size() <= j) sr.bucket_ready.resize(j + 1);
    const TaskId prepared = prepare_gradients(g, end, params);
    sr.bucket_ready[j].push_back(prepared);
    if (sr.bucket_ready[j].size() < static_cast<std::size_t>(replicas_)) return prepared;
    std::vector<TaskId> ready;
    ready.swap(sr.bucket_ready[j]);
    sr.last_bucket = emit_phases(dp_streams_[static_cast<std::size_t>(g.stage)], plan, std::move(ready),
                                 make_label(TaskKind::dp, 0, 0), nullptr);
    return prepared;
}

void Builder::on_backward_piece(Group& g, int chunk, const Pieces& pieces, std::size_t i, TaskId end) {
    if (!planned_buckets()) {
        // One bucket per layer, numbered as the group's backward completes them (at the layer's last piece: with
        // activation offloading a layer's backward is two).
        const bool pass_ends = i + 1 == pieces.pieces.size() || pieces.pass[i + 1] != pieces.pass[i];
        if (pieces.is_layer[i] && pass_ends)
            on_bucket(g, end, g.buckets, layer_parameters_per_gpu(sc_.model, e_.tensor), dp_plan(g.stage, DpMessage::bucket));
        return;
    }
    // Megatron-Core's buckets that piece i completes, in order (their passes one after the other on compute).
    const int pass = pieces.pass[i], done = pieces.events_done[i];
    const int before = i > 0 && pieces.pass[i - 1] == pass ? pieces.events_done[i - 1] : 0;
    const StageBuckets& sb = stage_buckets(g.stage);
    const std::size_t from = sb.chunk_offset[static_cast<std::size_t>(chunk)];
    const std::size_t to = sb.chunk_end(static_cast<std::size_t>(chunk));
    for (std::size_t j = from; j < to; ++j) {
        const GradientBucket& b = sb.buckets[j];
        if (b.last_piece != pass || b.ready_event < before || b.ready_event >= done) continue;
        if (b.after_schedule && activations_.drains(g.stage)) {
            g.held_bucket = j;  // NeMo reduces it after the drain (emit_next)
            continue;
        }
        end = on_bucket(g, end, j, b.parameters, bucket_plan(g.stage, b, false));
    }
}

void Builder::on_last_backward(Group& g, TaskId last) {
    const int r = g.stage, replicas = weight_replicas();
    if (planned_buckets() && reduces_by_bucket() && g.buckets != stage_buckets(r).buckets.size())
        throw std::logic_error(fmt::format("stage {}: {} of its {} gradient buckets reduced by its last backward", r,
                                           g.buckets, stage_buckets(r).buckets.size()));
    // The buffer is averaged before the reduction: by layer bucket as each is reduced, else all of it here (with fsdp
    // the gradients were reduce-scattered by every microbatch's units, Megatron-FSDP scaling them in its buckets: not
    // charged).
    if (!e_.fsdp)
        last = prepare_gradients(g, last,
                                 g.buckets > 0 ? unbucketed_parameters(r) : parameters_on_stage(sc_.model, e_, r));
    StageReduction& sr = reductions_[static_cast<std::size_t>(r)];
    sr.last_backward.push_back(last);
    if (sr.last_backward.size() < static_cast<std::size_t>(replicas_)) return;
    // Every replica of the stage has generated its last backward (and so all its buckets).
    const std::vector<TaskId> deps = std::move(sr.last_backward);
    sr.last_backward = {};
    const std::uint32_t label = make_label(TaskKind::dp, 0, 0);
    const StreamId dp = dp_streams_[static_cast<std::size_t>(r)];
    TaskId done{};
    if (replicas > 1 && g.buckets > 0) {
        // What the buckets left (embeddings, final norm), after the last backward.
        if (unbucketed_parameters(r) > 0.5) {
            done = emit_phases(dp, dp_plan(r, DpMessage::rest), deps, label, nullptr);
        } else {
            done = sim_.add_compute(dp, Time::zero(), label);
            for (TaskId dd : deps) sim_.add_dependency(dd, done);
            sim_.add_dependency(*sr.last_bucket, done);
        }
    } else if (replicas > 1 && !e_.fsdp) {
        done = emit_phases(dp, dp_plan(r, DpMessage::whole), deps, label, nullptr);
    } else {
        done = sim_.add_compute(dp, Time::zero(), label);
        for (TaskId dd : deps) sim_.add_dependency(dd, done);
    }
    if (activations_.drains(r) && sc_.model.tied_embeddings) {
        // The tied embeddings' sum (finalize_model_grads) follows the deferred GEMMs.
        sr.dp_done = done;
        drained(r);
        return;
    }
    stage_reduced(r, done);
}

void Builder::drained(int r) {
    StageReduction& sr = reductions_[static_cast<std::size_t>(r)];
    if (!sr.dp_done || sr.drains.size() < static_cast<std::size_t>(replicas_)) return;
    const TaskId join = sim_.add_compute(dp_streams_[static_cast<std::size_t>(r)], Time::zero(), make_label(TaskKind::dp, 0, 0));
    sim_.add_dependency(*sr.dp_done, join);
    for (TaskId d : sr.drains) sim_.add_dependency(d, join);
    sr.drains.clear();
    sr.dp_done.reset();
    stage_reduced(r, join);
}

void Builder::stage_reduced(int r, TaskId done) {
    const int p = e_.pipeline;
    reductions_[static_cast<std::size_t>(r)].reduced = done;
    const bool tied = p > 1 && sc_.model.tied_embeddings && (r == 0 || r == p - 1);
    if (!tied) {
        reductions_[static_cast<std::size_t>(r)].ready = done;
        release_optimizers(r);
        return;
    }
    StageReduction& first = reductions_.front();
    StageReduction& last = reductions_.back();
    // The word-embedding gradient (v h / t per GPU) is all-reduced between the first and last stage once both
    // have reduced theirs (NeMo's with fp32 embedding gradients: the fp32 main gradient).
    if (!first.reduced || !last.reduced || embedding_sync_) return;
    const double word = double(sc_.model.vocab) * sc_.model.hidden / e_.tensor;  // on the last stage, fp32 or not
    const Bytes emb(std::llround(gradient_bytes(e_, word, fp32_embedding_parameters(sc_.model, e_, p - 1))));
    const RouteAndLatency& route = embedding_route();
    const TaskId x = sim_.add_transfer_on(dp_streams_[0], route.first, emb, route.second + sc_.system.network.p2p_latency,
                                          make_label(TaskKind::embedding_sync, 0, 0));
    sim_.add_dependency(*first.reduced, x);
    sim_.add_dependency(*last.reduced, x);
    embedding_sync_ = x;
    first.ready = x;
    last.ready = x;
    release_optimizers(0);
    release_optimizers(p - 1);
}

void Builder::release_optimizers(int r) {
    StageReduction& sr = reductions_[static_cast<std::size_t>(r)];
    for (TaskId o : sr.held_optimizers) {
        sim_.add_dependency(*sr.ready, o);
        sim_.release_hold(o);
    }
    sr.held_optimizers.clear();
    maybe_gather_parameters(r);
}

Time Builder::optimizer_step(int r) const {
    const double params = parameters_on_stage(sc_.model, e_, r);
    const double shard = e_.distributed_optimizer ? params / weight_replicas() : params;
    // With FP8, the next iteration's weight casts (fp8_weight_cast_bytes) are counted here, on the compute stream
    // before the first forward that needs them.
    const double cast_s = sc_.system.hbm_pass_seconds(fp8_weight_cast_bytes(sc_.model, e_, r));
    // (The gradient buffer the step zeroes is the whole stage's, with fsdp its shard.)
    return Time::from_seconds(sc_.system.optimizer_step_seconds(shard, e_.fsdp ? shard : params, e_.precision,
                                                                bytes_per_param(e_).gradients) +
                              cast_s) +
           sc_.system.optimizer.fixed_overhead;
}

Time Builder::later_chunks_step(int r) {
    if (!steps_first_part_first()) return Time::zero();
    // The first chunk's parameters: its layers, and the input embedding on stage 0 (the output layer is in the last);
    // Apex's first group (the first in forward order, the last the backward completes of the first chunk).
    double first = 0;
    if (nemo_apex(e_.grad_buckets)) {
        const StageBuckets& sb = stage_buckets(r);
        std::size_t c = 0;
        while (c + 1 < sb.chunk_offset.size() && sb.chunk_end(c) == sb.chunk_offset[c]) ++c;  // a chunk with no groups
        first = sb.chunk_end(c) > sb.chunk_offset[c] ? sb.buckets[sb.chunk_end(c) - 1].parameters : 0.0;
    } else {
        first = layer_parameters_per_gpu(sc_.model, e_.tensor) * e_.layers_in_chunk(sc_.model.layers, r);
        if (r == 0) first += embedding_parameters_per_gpu(sc_.model, e_.tensor);
    }
    const double share = 1.0 - first / parameters_on_stage(sc_.model, e_, r);
    return scaled(optimizer_step(r) - sc_.system.optimizer.fixed_overhead, share);
}

Time Builder::sequence_parallel_grad_sync(int r) const {
    if (sp_grad_sync_.empty()) sp_grad_sync_.resize(static_cast<std::size_t>(e_.pipeline));
    std::optional<Time>& cached = sp_grad_sync_[static_cast<std::size_t>(r)];
    if (!cached) {
        const std::vector<Step> sync = build_sequence_parallel_grad_sync(
            layer_config(sc_.model, e_), e_.layers_on_stage(sc_.model.layers, r), r == e_.pipeline - 1);
        cached = sync.empty() ? Time::zero() : cost_.pass_time(sync, e_.tensor);
    }
    return *cached;
}

void Builder::emit_optimizer(Group& g) {
    StageReduction& sr = reductions_[static_cast<std::size_t>(g.stage)];
    // The SP gradient sum runs before the step (with overlap_param_gather_with_optimizer_step, before its first part).
    const Time step = sequence_parallel_grad_sync(g.stage) + optimizer_step(g.stage) - later_chunks_step(g.stage);
    const TaskId o = sim_.add_compute(g.compute, span_time(g, step), make_label(TaskKind::optimizer, 0, 0));
    if (g.prev_last) sim_.add_dependency(*g.prev_last, o);  // after the program's last task, on whichever stream
    if (sr.ready) {
        sim_.add_dependency(*sr.ready, o);
    } else {
        sim_.add_hold(o);
        sr.held_optimizers.push_back(o);
    }
    sr.optimizers.push_back(o);
    g.optimizer = o;
    maybe_gather_parameters(g.stage);
}

void Builder::maybe_gather_parameters(int r) {
    // Distributed optimizer: the updated bf16 parameters are all-gathered over the data (and context) replicas
    // of each stage after every replica's step (overlapped: see emit_overlapped_param_gathers).
    StageReduction& sr = reductions_[static_cast<std::size_t>(r)];
    // (With fsdp each forward gathers the layers it runs: nothing after the step.)
    if (!e_.distributed_optimizer || e_.fsdp || weight_replicas() < 2 || e_.overlap_param_gather || sr.gathered ||
        !sr.ready || sr.optimizers.size() < static_cast<std::size_t>(replicas_))
        return;
    sr.gathered = true;
    emit_phases(dp_streams_[static_cast<std::size_t>(r)], dp_plan(r, DpMessage::gather), sr.optimizers,
                make_label(TaskKind::dp, 1, 0), nullptr);
}

void Builder::emit_overlapped_param_gathers() {
    // Overlapped (--overlap-param-gather): the previous iteration's gather, bucket by bucket in forward order under
    // this iteration's first forward of each chunk (GatherChain), which waits for each bucket. Buckets are the
    // forward's pieces: the input embedding, each layer, the output layer with the final norm. Megatron-Core
    // (megatron/core/optimizer/distrib_optimizer.py, r0.8) also holds each bucket back until the forward pre-hook of
    // the bucket before it has run; not modelled (docs/validation-hopper.md, "Megatron-LM's H100 weak scaling").
    if (gather_streams_.empty()) return;
    gather_stage_.assign(sim_.stream_count(), -1);
    gather_left_.assign(gather_streams_.size(), 0);
    gathers_.resize(gather_streams_.size());
    for (std::size_t r = 0; r < gather_streams_.size(); ++r) {
        GatherChain& ch = gathers_[r];
        gather_stage_[gather_streams_[r]] = static_cast<std::int32_t>(r);
        // Where the optimizer steps its first part first, what follows it on the gather stream waits for every
        // replica's rest of the step (which makes those parameters): the first chunk's buckets (Apex: the first group)
        // alone run under it.
        std::vector<TaskId> rest_of_step;
        if (steps_first_part_first())
            for (int k = 0; k < replicas_; ++k) rest_of_step.push_back(*groups_[static_cast<std::size_t>(group_index(int(r), k))].prev_last);
        std::size_t emitted = 0;
        for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
            const int v = schedule::virtual_stage(shape_, static_cast<int>(r), chunk);
            ch.chunk_offset.push_back(ch.gathered.size());
            const Pieces& fp = pieces_of(true, v);
            const auto gather = [&](const Plan& plan) {
                gather_left_[r] += static_cast<std::uint32_t>(std::max<std::size_t>(1, plan.size()));
                std::vector<TaskId> deps;
                if (!rest_of_step.empty() && (nemo_apex(e_.grad_buckets) ? emitted > 0 : chunk > 0)) deps.swap(rest_of_step);
                ++emitted;
                return emit_phases(gather_streams_[r], plan, deps, make_label(TaskKind::dp, 1, 0), nullptr);
            };
            if (!planned_buckets()) {
                for (std::size_t i = 0; i < fp.pieces.size(); ++i)
                    ch.gathered.push_back(gather(dp_plan(static_cast<int>(r), gather_message(fp, v, i))));
                continue;
            }
            // Megatron-Core's buckets of the chunk in forward order (the last completed by the backward first); forward
            // piece i is backward piece n - 1 - i, and waits for the last gathered of the buckets holding its tensors.
            const StageBuckets& sb = stage_buckets(static_cast<int>(r));
            const std::size_t from = sb.chunk_offset[static_cast<std::size_t>(chunk)];
            const std::size_t to = sb.chunk_end(static_cast<std::size_t>(chunk));
            std::vector<TaskId> done(to - from);
            for (std::size_t j = to; j-- > from;) done[j - from] = gather(bucket_plan(static_cast<int>(r), sb.buckets[j], true));
            const int n = static_cast<int>(fp.pieces.size());
            for (int i = 0; i < n; ++i) {
                std::size_t j = from;
                while (j + 1 < to && sb.buckets[j].last_piece < n - 1 - i) ++j;
                ch.gathered.push_back(done[j - from]);
            }
        }
    }
}

}  // namespace strata::workload
