// Programs: each GPU group's schedule program (sim/schedule) turned into tasks, in program order, with
// Megatron-LM's blocking pipeline calls between units (batch_isend_irecv, then a device synchronize). A call is
// a zero-length "post" task and a "wait" task on the compute stream; the transfers it carries (pipeline.cpp)
// start once the sender's and the receiver's calls are both posted, and both waits depend on them.
// Without sequence parallelism the activation is split over the t rails and all-gathered on the receiver
// (Megatron's scatter/gather optimisation); with it each rank sends its own sequence shard.
//
// Memory: each group's pool holds weights, gradients and optimizer state from time zero; a forward unit
// allocates its chunk's activations (ActivationPlan, the analytical model's too) when it starts and the
// backward unit frees them when it ends; recompute holds one layer's recomputed activations while the
// backward unit's first task runs.
#include "builder.hpp"

#include "strata/errors.hpp"

#include <fmt/format.h>

#include <cmath>

namespace strata::workload {

Builder::Builder(const Scenario& sc, engine::Simulator& sim, fabric::Fabric& fab, const SimulationOptions& options)
    : sc_(sc),
      e_(sc.execution),
      sim_(sim),
      fab_(fab),
      cost_(sc.system.device),
      options_(options),
      variation_(sc.system.variation, sc.system.device.timing_reference_gpus, sc.execution.gpus()),
      shape_(schedule::shape_of(sc.execution)),
      activations_(activation_plan(sc.model, sc.execution)),
      activation_message_(2LL * (sc.model.seq_len / sc.execution.context) * sc.execution.microbatch * sc.model.hidden) {
    const NetworkSpec& n = sc.system.network;
    const double nvls = sc.system.device.intra_node_nvls_bus_bandwidth;
    coll_params_ = {n.collective_step_latency_intra, n.collective_step_latency_inter, n.hierarchical_collectives,
                    nvls > 0 ? nvls / n.nvlink_bandwidth.value : 0.0};
}

std::string Builder::describe(std::uint32_t label) const {
    return fmt::format("{} chunk {} microbatch {}", kKindNames[static_cast<int>(label_kind(label))], label_chunk(label),
                       label_mb(label));
}

std::size_t Builder::message_index(const schedule::Unit& u) const {
    const auto per_dir = static_cast<std::size_t>(shape_.chunks * shape_.microbatches);
    return (u.forward ? 0 : per_dir) + static_cast<std::size_t>(u.chunk * shape_.microbatches + u.microbatch);
}

void Builder::build() {
    check_task_limit();  // first: nothing proportional to the task count is built before it
    for (int r = 0; r < e_.pipeline; ++r) programs_.push_back(schedule::stage_program(shape_, r));
    make_groups();
    group_calls_.resize(groups_.size());
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) emit_program(gi);
    emit_pipeline_transfers();
    emit_gradient_reduction_and_optimizer();
    // The calls and the programs are only needed while building: give their memory back before the run.
    group_calls_ = {};
    programs_ = {};
}

void Builder::make_groups() {
    const int p = e_.pipeline, d = e_.data, t = e_.tensor, c = e_.context;
    const std::vector<std::string> categories = memory_category_names();
    std::vector<StageMemory> state;
    for (int r = 0; r < p; ++r) state.push_back(stage_state(sc_.model, e_, sc_.system.device_memory(), r));
    groups_.resize(static_cast<std::size_t>(p * d));
    for (int r = 0; r < p; ++r) {
        dp_streams_.push_back(sim_.add_stream(fmt::format("stage {} data-parallel", r)));
        const double dp_speed = dp_collective_speed(r);
        for (int k = 0; k < d; ++k) {
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
            const std::string name = fmt::format("GPUs {}-{} (stage {}, replica {})", g.gpus.front(), g.gpus.back(), r, k);
            g.compute = sim_.add_stream(name + " compute");
            g.tp = sim_.add_stream(name + " tensor-parallel");
            g.send_fwd = sim_.add_stream(name + " send-forward");
            g.send_bwd = sim_.add_stream(name + " send-backward");
            // The stage's data-parallel collectives run NCCL kernels on these GPUs: overlapped kernels lose SMs.
            sim_.slow_while_busy(dp_streams_[static_cast<std::size_t>(r)], g.compute, dp_speed);
            g.pool = sim_.add_pool(name, sc_.system.memory_capacity, categories,
                                   options_.keep_timeline && r == 0 && k == 0);
            // The same static state as the analytical stage memory (stage_state).
            const StageMemory& st = state[static_cast<std::size_t>(r)];
            sim_.add_static(g.pool, index(MemoryCategory::weights), st.weights);
            sim_.add_static(g.pool, index(MemoryCategory::gradients), st.gradients);
            sim_.add_static(g.pool, index(MemoryCategory::optimizer), st.optimizer);
            if (st.reserved.value > 0) sim_.add_static(g.pool, index(MemoryCategory::reserved), st.reserved);
        }
    }
}

void Builder::check_task_limit() {
    // Refuse a graph too large for memory before building it (or the programs): every group runs the forward and
    // the backward unit of each of its chunks for every microbatch.
    const int p = e_.pipeline;
    double estimate = 0;
    for (int r = 0; r < p; ++r) {
        for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
            double per_microbatch = 0;
            for (const bool forward : {true, false}) {
                for (const UnitStep& st : unit_for(forward, schedule::virtual_stage(shape_, r, chunk)).steps)
                    per_microbatch += st.is_compute ? 1.0 : 2.0;
                per_microbatch += 3.0;  // p2p call, transfer
            }
            estimate += per_microbatch * shape_.microbatches;
        }
    }
    estimate *= e_.data;
    if (estimate > double(options_.max_tasks)) {
        throw InputError(fmt::format("{}: case '{}' would need about {:.0f} million tasks (about {:.1f} GiB of memory), more "
                                     "than the limit of {} million; simulate fewer GPUs or microbatches, or raise the "
                                     "limit (strata run --max-tasks)",
                                     sc_.source, sc_.name, estimate / 1e6, estimate * 180 / double(1 << 30),
                                     options_.max_tasks / 1'000'000));
    }
}

void Builder::emit_program(std::size_t gi) {
    Group& g = groups_[gi];
    GroupCalls& gc = group_calls_[gi];
    const auto per_group = static_cast<std::size_t>(2 * shape_.chunks * shape_.microbatches);
    gc.sends.resize(per_group);
    gc.receives.resize(per_group);
    const bool scatter_gather = !e_.sequence_parallel && e_.tensor > 1;
    const int last_v = shape_.virtual_stages() - 1;
    const int n = shape_.microbatches;
    const auto activations = index(MemoryCategory::activations);
    const auto embedding_output = index(MemoryCategory::embedding_output);
    // The program is one chain on the compute stream: each unit or call starts after the one before it (so
    // that a unit opening with a collective does not overtake the previous unit's last kernels).
    std::optional<TaskId> prev_last;
    for (const schedule::Instruction& ins : programs_[static_cast<std::size_t>(g.stage)]) {
        if (ins.kind == schedule::Instruction::Kind::call) {
            const schedule::Call& call = ins.call;
            CallTasks c;
            c.post = sim_.add_compute(g.compute, Time::zero(), make_label(TaskKind::p2p, 0, 0));
            if (prev_last) sim_.add_dependency(*prev_last, c.post);
            c.wait = sim_.add_compute(g.compute, Time::zero(), make_label(TaskKind::p2p, 0, 0));
            sim_.add_dependency(c.post, c.wait);
            const std::size_t id = gc.calls.size();
            gc.calls.push_back(c);
            for (std::size_t i = 0; i < call.send_count; ++i) gc.sends[message_index(call.sends[i])] = id;
            for (std::size_t i = 0; i < call.receive_count; ++i) {
                const schedule::Unit& u = call.receives[i];
                Receive rcv{id, std::nullopt};
                if (scatter_gather) {
                    // The received shards are all-gathered over NVLink before the call returns.
                    TaskId first{};
                    const TaskId last = emit_phases(g.tp, tp_phases(g, CollectiveKind::all_gather, activation_message_),
                                                    {c.post}, make_label(TaskKind::p2p, u.chunk, u.microbatch), &first);
                    sim_.add_dependency(last, c.wait);
                    rcv.gather_first = first;
                }
                gc.receives[message_index(u)] = rcv;
            }
            prev_last = c.wait;
            continue;
        }
        const schedule::Unit& s = ins.unit;
        const int v = schedule::virtual_stage(shape_, g.stage, s.chunk);
        const std::uint32_t label = make_label(s.forward ? TaskKind::forward : TaskKind::backward, s.chunk, s.microbatch);
        const bool split = !s.forward && e_.overlap_grad_reduce && weight_replicas() > 1 && s.microbatch == n - 1;
        const UnitTasks ut =
            split ? emit_backward_by_layer(g, v, prev_last, label) : emit_unit(g, unit_for(s.forward, v), prev_last, label);
        prev_last = ut.last;
        const UnitActivations a = activations_.of(g.stage, s.chunk);
        if (s.forward) {
            sim_.add_memory_effect(ut.first, {g.pool, activations, a.layers, Bytes(0)});
            if (v == 0) sim_.add_memory_effect(ut.first, {g.pool, embedding_output, a.embedding, Bytes(0)});
            if (v == last_v) sim_.add_memory_effect(ut.first, {g.pool, embedding_output, a.output, Bytes(0)});
        } else {
            sim_.add_memory_effect(ut.last, {g.pool, activations, Bytes(0), a.layers});
            if (v == 0) sim_.add_memory_effect(ut.last, {g.pool, embedding_output, Bytes(0), a.embedding});
            if (v == last_v) sim_.add_memory_effect(ut.last, {g.pool, embedding_output, Bytes(0), a.output});
            const Bytes workspace = activations_.recompute_workspace(g.stage);
            if (workspace.value > 0)
                sim_.add_memory_effect(ut.first, {g.pool, index(MemoryCategory::recompute), workspace, workspace});
            g.last_backward = ut.last;
        }
    }
}

}  // namespace strata::workload
