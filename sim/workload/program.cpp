// Programs: each GPU group's schedule program (sim/schedule) turned into tasks, in program order, with
// Megatron-LM's blocking pipeline calls between units (batch_isend_irecv, then a device synchronize). A call is
// a zero-length "post" task and a "wait" task on the compute stream; the transfers it carries (pipeline.cpp)
// start once the sender's and the receiver's calls are both posted, and both waits depend on them.
// Streamed: the engine asks for a group's next instruction whenever its compute stream runs dry (emit_next),
// so only the instructions in flight exist as tasks; after the program comes the optimizer step.
// Without sequence parallelism the activation is split over the t rails and all-gathered on the receiver
// (Megatron's scatter/gather optimisation); with it each rank sends its own sequence shard.
//
// Memory: each group's pool holds weights, gradients and optimizer state from time zero; a forward unit
// allocates its chunk's activations (ActivationPlan, the analytical model's too) when it starts and the
// backward unit frees them when it ends; recompute's one layer and context parallelism's ring buffers (a bound;
// an offloading unit's through its first layer) are held while the unit's first task runs.
#include "builder.hpp"

#include "strata/errors.hpp"
#include "strata/power.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata::workload {

Builder::Builder(const Scenario& sc, engine::Simulator& sim, fabric::Fabric& fab,
                 const SimulationOptions& options, bool detail)
    : sc_(sc),
      e_(sc.execution),
      sim_(sim),
      fab_(fab),
      cost_(sc.system.device),
      options_(options),
      replicas_(options.representative_replicas ? strata::representative_replicas(sc) : sc.execution.data),
      variation_(sc.system.variation, sc.system.device.timing_reference_gpus, sc.execution.gpus()),
      shape_(schedule::shape_of(sc.execution)),
      activations_(activation_plan(sc.model, sc.execution)),
      activation_message_(2LL * (sc.model.seq_len / sc.execution.context) * sc.execution.microbatch *
                          sc.model.hidden) {
    const NetworkSpec& n = sc.system.network;
    const double nvls = sc.system.device.intra_node_nvls_bus_bandwidth;
    coll_params_.step_latency_intra = n.collective_step_latency_intra;
    coll_params_.step_latency_inter = n.collective_step_latency_inter;
    coll_params_.hierarchical = n.hierarchical_collectives;
    coll_params_.nvls_speedup = nvls > 0 ? nvls / n.nvlink_bandwidth.value : 0.0;
    if (!sc.system.device.measured_collective_points.empty() || !sc.system.device.measured_collectives.empty()) {
        const DeviceProfile& device = sc.system.device;
        coll_params_.measured = [&device](CollectiveKind kind, int ranks, Bytes message) {
            return measured_collective_time(device, kind, ranks, message);
        };
        coll_params_.intra_link_bandwidth = n.nvlink_bandwidth.value;
    }
    want_detail_ = detail;
    // Under the device's power limit, the clock of a GPU running this layer's passes over and over (strata/power.hpp).
    (void)sustain_for(cost_, sc.model, e_);
}

std::string Builder::describe(std::uint32_t label) const {
    return fmt::format("{} chunk {} microbatch {}", kKindNames[static_cast<int>(label_kind(label))], label_chunk(label),
                       label_mb(label));
}

void Builder::build() {
    check_task_limit();  // first: nothing proportional to the task count is built before it
    for (int r = 0; r < e_.pipeline; ++r) programs_.push_back(schedule::stage_program(shape_, r));
    if (offloading()) plan_offloading();
    make_groups();
    // After rest a power-limited GPU runs its kernels above the sustained clock until the headroom is spent (cost.hpp).
    if (const SustainedClock& clock = cost_.sustained(); clock.headroom_s > 0 && clock.saving_fraction > 0) {
        saving_fraction_ = clock.saving_fraction;
        for (const Group& g : groups_) sim_.set_idle_headroom(g.compute, Time::from_seconds(clock.headroom_s), clock.headroom_accrual);
    }
    plan_amax_reductions();
    reductions_.resize(static_cast<std::size_t>(e_.pipeline));
    empty_route_ = sim_.add_route({});
    find_private_tp_links();
    fuse_units();
    const int p = e_.pipeline;
    for (int r = 0; r < p; ++r) {
        const auto& program = programs_[static_cast<std::size_t>(r)];
        std::size_t last = program.size();
        for (std::size_t i = 0; i < program.size(); ++i) {
            if (program[i].kind == schedule::Instruction::Kind::unit && !program[i].unit.forward) last = i;
        }
        last_backward_pc_.push_back(last);
    }
    // What finished tasks are read for: replica 0's compute and tp streams (intervals), every stream (trace).
    interval_stage_.assign(sim_.stream_count(), -1);
    interval_tp_.assign(sim_.stream_count(), 0);
    compute_group_.assign(sim_.stream_count(), 0);
    p2p_stage_.assign(sim_.stream_count(), -1);
    p2p_peer_.assign(sim_.stream_count(), -1);
    // A trace process per GPU group (its t GPUs run in lockstep), a lane per stream; one more process holds the
    // data-parallel streams.
    stream_process_.assign(sim_.stream_count(), static_cast<std::uint32_t>(groups_.size()));
    stream_traced_.assign(sim_.stream_count(), 0);
    for (int r = 0; r < e_.pipeline; ++r) {
        const bool any = traced(r, options_.trace_first_replica);
        stream_traced_[dp_streams_[static_cast<std::size_t>(r)]] = any ? 1 : 0;
        for (const std::vector<StreamId>* streams : {&gather_streams_, &amax_streams_, &fsdp_streams_})
            if (!streams->empty()) stream_traced_[(*streams)[static_cast<std::size_t>(r)]] = any ? 1 : 0;
    }
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        compute_group_[g.compute] = static_cast<std::uint32_t>(gi);
        for (const StreamId st : {g.compute, g.tp, g.send_fwd, g.send_bwd, g.host}) {
            stream_process_[st] = static_cast<std::uint32_t>(gi);
            stream_traced_[st] = traced(g.stage, g.replica) ? 1 : 0;
        }
        if (offloading()) trace_offload_streams(gi);
        if (g.replica != 0) continue;
        interval_stage_[g.compute] = interval_stage_[g.tp] = g.stage;
        interval_tp_[g.tp] = 1;
        p2p_stage_[g.tp] = p2p_stage_[g.send_fwd] = p2p_stage_[g.send_bwd] = g.stage;
        p2p_peer_[g.send_fwd] = (g.stage + 1) % p;       // as p2p_route: the interleaved schedule wraps around
        p2p_peer_[g.send_bwd] = (g.stage + p - 1) % p;
    }
    p2p_open_.resize(static_cast<std::size_t>(p));
    sim_.set_streaming([this](const engine::TaskRecord& r) { observe(r); },
                       [this](StreamId s) { return emit_next(compute_group_[s]); });
    for (const Group& g : groups_) sim_.refill_when_empty(g.compute);
    sim_.set_expected_tasks(expected_tasks_);
    if (steps_first_part_first()) {
        // The iteration is cut after the first chunk's (Apex: first group's) step: each group begins with the previous
        // step's rest (Builder::later_chunks_step), while the first chunk's parameter buckets are gathered; the others'
        // gathers wait for it (emit_overlapped_param_gathers), as it makes their parameters.
        for (Group& g : groups_)
            g.prev_last = sim_.add_compute(g.compute, span_time(g, later_chunks_step(g.stage)), make_label(TaskKind::optimizer, 0, 0));
    }
    emit_overlapped_param_gathers();
    // Every route exists now (find_private_tp_links made them all): links the routes cross together are bundled.
    sim_.seal_routes();
}

void Builder::find_private_tp_links() {
    constexpr std::int64_t kFree = -1, kShared = -2;
    std::vector<std::int64_t> owner(sim_.link_count(), kFree);
    auto shared = [&](std::span<const engine::LinkUse> links) {
        for (const engine::LinkUse& u : links) owner[u.link] = kShared;
    };
    // Which stage's data-parallel collectives cross a link (kShared: several stages').
    std::vector<std::int64_t> dp_user(sim_.link_count(), kFree);
    const int p = e_.pipeline;
    // Everything that is not a tp stream: pipeline transfers (both directions, wrapping around for the interleaved
    // schedule), data-parallel reductions and parameter gathers, the tied-embedding sync.
    auto dp_plan_links = [&](int r, const Plan& plan) {
        for (const PlannedPhase& ph : plan)
            for (const engine::LinkUse& u : sim_.route_links(ph.route))
                dp_user[u.link] = dp_user[u.link] == kFree || dp_user[u.link] == r ? r : kShared;
    };
    if (p > 1) {
        for (Group& a : groups_)
            for (const bool forward : {true, false}) shared(sim_.route_links(p2p_route(a, forward).first));
    }
    if (weight_replicas() > 1) {
        for (int r = 0; r < p; ++r) {
            dp_plan_links(r, dp_plan(r, DpMessage::whole));
            dp_plan_links(r, dp_plan(r, DpMessage::bucket));
            if (rest_parameters(r) > 0.5) dp_plan_links(r, dp_plan(r, DpMessage::rest));
            if (e_.distributed_optimizer) dp_plan_links(r, dp_plan(r, DpMessage::gather));
        }
        if (e_.fsdp)
            for (const auto& [r, plan] : plan_fsdp())
                dp_plan_links(r, *plan);
    }
    if (p > 1 && sc_.model.tied_embeddings) shared(sim_.route_links(embedding_route().first));
    // Each group's tp stream: every collective its units and calls can run.
    const bool scatter_gather = !e_.sequence_parallel && e_.tensor > 1;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        Group& g = groups_[gi];
        for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
            const int v = schedule::virtual_stage(shape_, g.stage, chunk);
            for (const bool forward : {true, false})
                for (const UnitStep& st : unit_for(forward, v).steps)
                    if (!st.is_compute) tp_phases(g, st.kind, st.message, st.context_group);
        }
        if (scatter_gather) tp_phases(g, CollectiveKind::all_gather, activation_message_);
        for (const auto& [key, plan] : g.plans)
            for (const PlannedPhase& ph : plan)
                for (const engine::LinkUse& u : sim_.route_links(ph.route))
                    owner[u.link] = owner[u.link] == kFree || owner[u.link] == std::int64_t(gi) ? std::int64_t(gi) : kShared;
    }
    // A group whose tp links are its own moves each tp-stream collective alone: as a transfer of known length. Where
    // its own stage's data-parallel collectives cross them too, it does so while they cannot run (fused units only).
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        Group& g = groups_[gi];
        bool alone = true, quiet = true;
        for (const auto& [key, plan] : g.plans)
            for (const PlannedPhase& ph : plan)
                for (const engine::LinkUse& u : sim_.route_links(ph.route)) {
                    const bool own = owner[u.link] == std::int64_t(gi);
                    alone = alone && own && dp_user[u.link] == kFree;
                    quiet = quiet && own && (dp_user[u.link] == kFree || dp_user[u.link] == g.stage);
                }
        if (!quiet) continue;
        for (auto& [key, plan] : g.plans)
            for (PlannedPhase& ph : plan) (alone ? ph.alone : ph.alone_if_quiet) = sim_.alone_transfer_time(ph.route, ph.bytes);
    }
}

void Builder::fuse_units() {
    // Replica 0 is read for the metrics, traced groups for their spans.
    for (Group& g : groups_) g.fused = options_.fuse_units && g.replica != 0 && !traced(g.stage, g.replica);
    expected_tasks_ = estimate_tasks();
}

void Builder::make_groups() {
    const int p = e_.pipeline, d = e_.data, t = e_.tensor, c = e_.context;
    const std::vector<std::string> categories = memory_category_names();
    std::vector<StageMemory> state;
    for (int r = 0; r < p; ++r) state.push_back(stage_state(sc_.model, e_, sc_.system.device_memory(), r));
    groups_.resize(static_cast<std::size_t>(p * replicas_));
    const std::vector<double> dp_speeds = dp_collective_speeds();
    for (int r = 0; r < p; ++r) {
        dp_streams_.push_back(sim_.add_stream(fmt::format("stage {} data-parallel", r)));
        const double dp_speed = dp_speeds[static_cast<std::size_t>(r)];
        for (int k = 0; k < replicas_; ++k) {
            Group& g = groups_[static_cast<std::size_t>(group_index(r, k))];
            g.stage = r;
            g.replica = k;
            g.tensor_groups.resize(static_cast<std::size_t>(c));
            g.context_groups.resize(static_cast<std::size_t>(t));
            for (int j = 0; j < c; ++j) {
                for (int i = 0; i < t; ++i) {
                    const int gpu = rank(r, k, j, i);
                    g.gpus.push_back(gpu);
                    g.tensor_groups[static_cast<std::size_t>(j)].push_back(gpu);
                    g.context_groups[static_cast<std::size_t>(i)].push_back(gpu);
                }
            }
            g.speed = variation_.group_factor(g.gpus);
            // A representative group stands for the replicas at its place on their nodes (k, k + n, k + 2n,
            // ...; n simulated): it runs at the slowest one's pace (an upper bound: each replica's pipeline
            // has its own slowest stage, and they wait for each other only in the data-parallel reductions).
            for (int other = k + replicas_; other < d; other += replicas_) {
                std::vector<int> gpus;
                for (int j = 0; j < c; ++j)
                    for (int i = 0; i < t; ++i)
                        gpus.push_back(rank(r, other, j, i));
                g.speed = std::max(g.speed, variation_.group_factor(gpus));
            }
            const std::string name = fmt::format("GPUs {}-{} (stage {}, replica {})", g.gpus.front(), g.gpus.back(), r, k);
            g.compute = sim_.add_stream(name + " compute");
            g.tp = sim_.add_stream(name + " tensor-parallel");
            if (e_.overlap_p2p_comm && e_.p2p_pair_order) {
                // One NCCL stream per pair of ranks (transfer_stream): send_bwd stays empty.
                g.send_fwd = sim_.add_stream(p == 2 ? name + " pipeline sends (one NCCL stream)"
                                                    : fmt::format("{} pipeline pair with stage {} (one NCCL stream, both "
                                                                  "directions)", name, (r + 1) % p));
            } else {
                g.send_fwd = sim_.add_stream(name + " send-forward");
            }
            g.send_bwd = sim_.add_stream(name + " send-backward");
            g.host = e_.host_gaps() ? sim_.add_stream(name + " host (before each unit)") : g.compute;
            if (offloading()) add_offload_streams(g, name);
            // The stage's data-parallel collectives run NCCL kernels on these GPUs: overlapped kernels lose SMs.
            sim_.slow_while_busy(dp_streams_[static_cast<std::size_t>(r)], g.compute, dp_speed);
            g.pool = sim_.add_pool(name, sc_.system.memory_capacity, categories,
                                   (options_.keep_timeline && r == 0 && k == 0) || (k == 0 && traced(r, k)));
            // The same static state as the analytical stage memory (stage_state).
            const StageMemory& st = state[static_cast<std::size_t>(r)];
            sim_.add_static(g.pool, index(MemoryCategory::weights), st.weights);
            sim_.add_static(g.pool, index(MemoryCategory::gradients), st.gradients);
            sim_.add_static(g.pool, index(MemoryCategory::optimizer), st.optimizer);
            if (st.reserved.value > 0) sim_.add_static(g.pool, index(MemoryCategory::reserved), st.reserved);
            if (const Bytes held = activations_.held_for_deferral(r); held.value > 0)
                sim_.add_static(g.pool, index(MemoryCategory::embedding_output), held);
        }
    }
    if (e_.fsdp) add_fsdp_streams(dp_speeds);  // Megatron-FSDP's collectives instead (fsdp.cpp)
    if (!e_.fsdp && e_.distributed_optimizer && e_.overlap_param_gather && weight_replicas() > 1) {
        // The previous iteration's parameter all-gather, by bucket under this iteration's first forward of each chunk
        // (emit_overlapped_param_gathers): a stream of its own per stage, so that the in-order data-parallel stream's
        // reduction does not hold it back.
        for (int r = 0; r < p; ++r) {
            const StreamId stream = sim_.add_stream(fmt::format("stage {} parameter all-gather (overlapped)", r));
            gather_streams_.push_back(stream);
            for (int k = 0; k < replicas_; ++k)
                sim_.slow_while_busy(stream, groups_[static_cast<std::size_t>(group_index(r, k))].compute,
                                     dp_speeds[static_cast<std::size_t>(r)]);
        }
    }
}

bool Builder::emit_next(std::size_t gi) {
    Group& g = groups_[gi];
    const auto& program = programs_[static_cast<std::size_t>(g.stage)];
    if (g.pc < program.size()) {
        emit_instruction(gi, program[g.pc++]);
        return true;
    }
    if (g.finished) return false;
    g.finished = true;
    // The deferred GEMMs run after the gradient reduction's launch with overlap_grad_reduce (the hooks or grad_sync_func
    // start it), before it without (finalize_model_grads starts it, after finish_embedding_wgrad_compute); NeMo with
    // Apex launches the group it held back after them (_finish_bucket_grad_sync in training_step).
    const bool drains = activations_.drains(g.stage), first = drains_first(g);
    if (first) emit_deferred_wgrad(g);
    if (g.held_bucket) {
        const GradientBucket& b = stage_buckets(g.stage).buckets[*g.held_bucket];
        on_bucket(g, *g.prev_last, *g.held_bucket, b.parameters, bucket_plan(g.stage, b, false));
    }
    if (g.reduce_at_end) on_last_backward(g, *g.prev_last);
    if (drains && !first) emit_deferred_wgrad(g);
    emit_optimizer(g);
    return true;
}

const Unit& Builder::drain_unit() {
    if (!drain_) {
        drain_.emplace();
        append(drain_->steps, build_deferred_wgrad(layer_config(sc_.model, e_), activations_.deferred_microbatches),
               cost_, ring_sms());
    }
    return *drain_;
}

void Builder::emit_deferred_wgrad(Group& g) {
    // Megatron-Core's finish_embedding_wgrad_compute, before finalize_model_grads (emit_next places it against the
    // gradient reduction): the optimizer and the tied embeddings' sum wait for it; a reduction already launched does
    // not (with overlap_grad_reduce it reads the buffer unordered with these GEMMs: Megatron's race, not strata's).
    const UnitTasks ut = emit_unit(g, drain_unit(), g.prev_last, make_label(TaskKind::deferred_wgrad, shape_.chunks - 1, 0), true, false);
    g.prev_last = ut.last;
    sim_.add_memory_effect(ut.last, {g.pool, index(MemoryCategory::embedding_output), Bytes(0),
                                     activations_.deferred_output * activations_.deferred_microbatches});
    StageReduction& sr = reductions_[static_cast<std::size_t>(g.stage)];
    sr.drains.push_back(ut.last);
    drained(g.stage);
}

void Builder::emit_instruction(std::size_t gi, const schedule::Instruction& ins) {
    Group& g = groups_[gi];
    const bool scatter_gather = !e_.sequence_parallel && e_.tensor > 1;
    const int last_v = shape_.virtual_stages() - 1;
    const auto activations = index(MemoryCategory::activations);
    const auto embedding_output = index(MemoryCategory::embedding_output);
    // The program is one chain on the compute stream: each unit or call starts after the one before it (so
    // that a unit opening with a collective does not overtake the previous unit's last kernels).
    if (ins.kind == schedule::Instruction::Kind::call) {
        const schedule::Call& call = ins.call;
        // A fused group posts the call as its unit's last task ends: that task stands for the zero-length post.
        TaskId post{};
        if (g.fused && g.prev_unit) {
            post = *g.prev_last;
        } else {
            post = sim_.add_compute(g.compute, Time::zero(), make_label(TaskKind::p2p, 0, 0));
            if (g.prev_last) sim_.add_dependency(*g.prev_last, post);
        }
        g.prev_unit = false;
        const TaskId wait = sim_.add_compute(g.compute, Time::zero(), make_label(TaskKind::p2p, 0, 0));
        sim_.add_dependency(post, wait);
        // Without overlap_p2p_comm every call blocks; with it, the schedule says which do.
        const bool blocking = !(e_.overlap_p2p_comm && call.asynchronous);
        for (std::size_t i = 0; i < call.send_count; ++i) on_send(gi, call.sends[i], post, wait, blocking);
        for (std::size_t i = 0; i < call.receive_count; ++i) {
            const schedule::Unit& u = call.receives[i];
            TaskId target = wait;
            if (scatter_gather) {
                // The received shards are all-gathered over NVLink before the call returns.
                TaskId first{};
                const TaskId last = emit_phases(g.tp, tp_phases(g, CollectiveKind::all_gather, activation_message_), std::span(&post, 1),
                                                make_label(TaskKind::p2p, u.chunk, u.microbatch), &first);
                sim_.add_dependency(last, wait);
                target = first;
            }
            on_receive(gi, u, post, target, blocking);
        }
        g.prev_last = wait;
        return;
    }
    const schedule::Unit& s = ins.unit;
    const int v = schedule::virtual_stage(shape_, g.stage, s.chunk);
    const std::uint32_t label = make_label(s.forward ? TaskKind::forward : TaskKind::backward, s.chunk, s.microbatch);
    const Bytes workspace = s.forward ? Bytes(0) : activations_.recompute_workspace(g.stage, s.chunk);
    std::optional<TaskId> after = g.prev_last;
    if (const Time host = s.forward ? e_.host_gap_forward : e_.host_gap_backward; host > Time::zero()) {
        // The host's time from its synchronisation to the unit's first kernel: the GPU idles (a task off its stream).
        const TaskId gap = sim_.add_compute(g.host, host,
                                            make_label(TaskKind::host_gap, s.chunk, s.microbatch));
        if (after) sim_.add_dependency(*after, gap);
        after = gap;
    }
    // The first forward of each chunk waits for its parameters' buckets with the gather overlapped; the last backward
    // starts the buckets' reductions with overlap_grad_reduce.
    const bool defers = deferred(s, g.stage);
    const UnitTasks ut = offloading() ? emit_offloaded_unit(g, s, after, label, defers)
                         : e_.fsdp    ? emit_fsdp_unit(g, s, after, label, defers)
                         : !runs_by_layer(s)
                             ? emit_unit(g, unit_for(s.forward, v, defers), after, label, workspace.value > 0)
                         : s.forward ? emit_forward_by_layer(g, s.chunk, after, label)
                                     : emit_backward_by_layer(g, s.chunk, after, label, defers);
    if (e_.overlap_p2p_comm) {
        // Asynchronous pipeline calls: the unit waits for the transfer bringing its input and for this group's
        // sends of its direction since its last unit of that direction (Megatron's wait handles).
        attach_overlap(overlap_key(gi, message_index(s)), ut.first);
        auto& sends = g.outstanding_sends[s.forward ? 0 : 1];
        for (const std::uint64_t key : sends) attach_overlap(key, ut.first);
        sends.clear();
    }
    g.prev_last = ut.last;
    g.prev_unit = true;
    if (e_.reduces_fp8_amax()) emit_amax_reduction(g, s);
    const UnitActivations a = activations_.of(g.stage, s.chunk);
    if (const Bytes ws = activations_.attention_workspace(g.stage, s.chunk, s.forward); ws.value > 0 && !offloading())
        sim_.add_memory_effect(ut.first, {g.pool, index(MemoryCategory::attention), ws, ws});
    if (s.forward) {
        if (!offloading()) sim_.add_memory_effect(ut.first, {g.pool, activations, a.layers, Bytes(0)});
        if (v == 0) sim_.add_memory_effect(ut.first, {g.pool, embedding_output, a.embedding, Bytes(0)});
        if (v == last_v) sim_.add_memory_effect(ut.first, {g.pool, embedding_output, a.output, Bytes(0)});
        return;
    }
    if (!offloading()) sim_.add_memory_effect(ut.last, {g.pool, activations, Bytes(0), a.layers});
    if (v == 0) sim_.add_memory_effect(ut.last, {g.pool, embedding_output, Bytes(0), a.embedding});
    const Bytes kept = activations_.kept_after_backward(g.stage, s.chunk, s.microbatch);
    if (v == last_v) sim_.add_memory_effect(ut.last, {g.pool, embedding_output, Bytes(0), a.output - kept});
    if (workspace.value > 0)
        sim_.add_memory_effect(ut.first, {g.pool, index(MemoryCategory::recompute), workspace, workspace});
    g.last_backward = ut.last;
    if (g.pc - 1 == last_backward_pc_[static_cast<std::size_t>(g.stage)]) {
        // Megatron averages the whole buffer once the schedule has returned (after the last pipeline send); a
        // reduction without that pass starts at the last backward, or after the deferred GEMMs without overlap (or
        // with a group NeMo holds back).
        if ((e_.averages_by_pass() && g.buckets == 0) || drains_first(g)) {
            g.reduce_at_end = true;
        } else {
            on_last_backward(g, ut.last);
        }
    }
}

void Builder::plan_amax_reductions() {
    // Transformer Engine's amax reduction group (Megatron-Core's get_amax_reduction_group): the stage's tensor x
    // context x data-parallel ranks, or with tp_only_amax_red the group's own; its latency from the ranks' nodes.
    if (!e_.reduces_fp8_amax()) return;
    const int p = e_.pipeline;
    const int replicas = e_.tp_only_amax_red ? 1 : e_.data;
    for (int r = 0; r < p; ++r) {
        std::map<int, int> per_node;
        for (int k = 0; k < replicas; ++k)
            for (int j = 0; j < e_.context; ++j)
                for (int i = 0; i < e_.tensor; ++i) ++per_node[fab_.node_of(rank(r, k, j, i))];
        int most = 0;
        for (const auto& [node, n] : per_node) most = std::max(most, n);
        const bool alone = per_node.size() == 1 && most == 1;
        amax_latency_.push_back(alone ? Time::zero()
                                      : sc_.system.small_all_reduce_latency(most, static_cast<int>(per_node.size())));
        // The replicas meet at each all-reduce: it runs once all have posted it, on a stream of the stage's own.
        if (replicas > 1 && replicas_ > 1)
            amax_streams_.push_back(sim_.add_stream(fmt::format("stage {} FP8 amax all-reduce", r)));
    }
    amax_meetings_.resize(amax_streams_.size());
    amax_post_end_.assign(static_cast<std::size_t>(p), -1);
}

void Builder::emit_amax_reduction(Group& g, const schedule::Unit& s) {
    // TE's reduce_and_update_fp8_tensors at the region's end (the forward's fp8_autocast exit; the backward of its
    // first module): torch.distributed.all_reduce(async_op=False), so the compute stream waits for it.
    const auto r = static_cast<std::size_t>(g.stage);
    const Time latency = amax_latency_[r];
    const std::uint32_t label = make_label(TaskKind::amax_reduce, s.chunk, s.microbatch);
    // Group 0's after its last backward: metrics keep it out of the data-parallel wait.
    const bool g0_last = &g == &groups_.front() && g.pc - 1 == last_backward_pc_[r];
    // Its time on the compute stream's critical path is exposed tensor-parallel communication (metrics.cpp).
    if (amax_streams_.empty()) {  // no other replica takes part: the group's own all-reduce, on its tp stream
        if (latency == Time::zero()) return;
        const TaskId reduce = sim_.add_compute(g.tp, latency, label);
        sim_.add_dependency(*g.prev_last, reduce);
        mark_exposed_tp(reduce);
        if (g0_last) g0_last_amax_ = reduce;
        g.prev_last = reduce;
        return;
    }
    const TaskId post = sim_.add_compute(g.compute, Time::zero(), label);
    sim_.add_dependency(*g.prev_last, post);
    const TaskId wait = sim_.add_compute(g.compute, Time::zero(), label);
    sim_.add_dependency(post, wait);
    g.prev_last = wait;
    if (g0_last) g0_last_amax_ = wait;
    // Every replica runs the same program, so the n-th region is the same one everywhere; the n-th all-reduce is made
    // once the last replica has posted it, after the (n-1)-th (each replica posted that one first).
    const std::uint64_t n = g.amax_regions++;
    auto& meetings = amax_meetings_[r];
    AmaxMeeting& m = meetings[n];
    m.posts.push_back(post);
    if (m.posts.size() < static_cast<std::size_t>(replicas_)) {
        sim_.add_hold(wait);
        m.waits.push_back(wait);
        return;
    }
    const TaskId reduce = sim_.add_compute(amax_streams_[r], latency, label);
    for (const TaskId x : m.posts) sim_.add_dependency(x, reduce);
    sim_.add_dependency(reduce, wait);
    for (const TaskId w : m.waits) {
        sim_.add_dependency(reduce, w);
        sim_.release_hold(w);
    }
    meetings.erase(n);
}

}  // namespace strata::workload
