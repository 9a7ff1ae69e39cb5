// Megatron-FSDP (ExecutionSpec::fsdp: --use-megatron-fsdp, optim_grads_params), as Megatron-Core's megatron_fsdp runs
// it with its double buffer (--fsdp-double-buffer, forced by NCCL user buffers): every unit layer by layer. A forward
// launches its first two layers' all-gathers as it starts (layer 0's, and layer 1's prefetched by layer 0's
// pre-forward hook) and each further layer's as the layer two before it ends (its buffer free again); each layer waits
// for its weights. A backward does the same from its last layer (the weights were released after the forward, so the
// last layer's gather is exposed), launches each layer's gradient reduce-scatter as the layer ends (after the gather it
// prefetches), each layer waits for the reduce-scatter of the layer two after it (the gradient buffer it reuses), and
// the unit ends with the wait for its reduce-scatters (_root_post_backward: every microbatch). The embedding and the
// output layer are not FSDP units: gathered by the step's first forward and kept, their gradients reduce-scattered
// every microbatch after their backward. The stage's gathers and reduce-scatters share one NCCL communicator, which
// runs them in the order they are launched (megatron_fsdp's runtime_schedule.md): one stream per stage.
#include "builder.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace strata::workload {

void Builder::add_fsdp_streams(const std::vector<double>& dp_speeds) {
    for (int r = 0; r < e_.pipeline; ++r) {
        const StreamId stream = sim_.add_stream(fmt::format("stage {} FSDP all-gathers and reduce-scatters", r));
        fsdp_streams_.push_back(stream);
        for (int k = 0; k < replicas_; ++k)
            sim_.slow_while_busy(stream, groups_[static_cast<std::size_t>(group_index(r, k))].compute,
                                 dp_speeds[static_cast<std::size_t>(r)]);
    }
}

std::vector<std::pair<int, const Plan*>> Builder::plan_fsdp() {
    const ModelSpec& m = sc_.model;
    const double layer = layer_parameters_per_gpu(m, e_.tensor);
    // Gathered: the layers' linear weights in FP8 with FP8 parameters, everything else in 16 bits; reduced: the
    // gradients' bytes (Megatron-Core 0.14-0.15 reduce in fp32 with grad_reduce_in_fp32, else in the parameters'
    // dtype).
    const double unit = fsdp_layer_gather_bytes(m, e_), grad = bytes_per_param(e_).gradients;
    const auto bytes = [](double b) { return Bytes(std::llround(b)); };
    for (int r = 0; r < e_.pipeline; ++r) {
        const double embedding = r == 0 ? embedding_parameters_per_gpu(m, e_.tensor) : 0.0;
        const double output = parameters_on_stage(m, e_, r) - embedding - layer * e_.layers_on_stage(m.layers, r);
        FsdpPlans p;
        // Every tensor rank's ring gathers its own shards (the t rings move together, as the reductions').
        p.gather_layer = intern(reduction_phases(r, bytes(unit), true));
        p.gather_embedding = intern(reduction_phases(r, bytes(embedding * 2.0), true));
        p.gather_output = intern(reduction_phases(r, bytes(output * 2.0), true));
        p.reduce_layer = intern(reduction_phases(r, bytes(layer * grad)));
        p.reduce_embedding = intern(reduction_phases(r, bytes(embedding * grad)));
        p.reduce_output = intern(reduction_phases(r, bytes(output * grad)));
        fsdp_plans_.push_back(std::move(p));
    }
    fsdp_ops_.resize(static_cast<std::size_t>(e_.pipeline));
    std::vector<std::pair<int, const Plan*>> all;
    for (int r = 0; r < e_.pipeline; ++r) {
        const FsdpPlans& f = fsdp_plans_[static_cast<std::size_t>(r)];
        for (const Plan* plan : {&f.gather_layer, &f.gather_embedding, &f.gather_output, &f.reduce_layer,
                                 &f.reduce_embedding, &f.reduce_output})
            all.emplace_back(r, plan);
    }
    return all;
}

std::size_t Builder::fsdp_op(Group& g, const Plan& plan, std::uint32_t label, TaskId trigger) {
    std::vector<FsdpOp>& ops = fsdp_ops_[static_cast<std::size_t>(g.stage)];
    const std::size_t j = g.fsdp_next++;
    if (j == ops.size()) ops.push_back(FsdpOp{&plan, label, {}, {}, std::nullopt});
    FsdpOp& op = ops[j];
    if (op.plan != &plan || op.label != label)
        throw std::logic_error(
            fmt::format("stage {}: replica {} launches FSDP collective {} unlike replica 0", g.stage, g.replica, j));
    op.triggers.push_back(trigger);
    if (op.triggers.size() < static_cast<std::size_t>(replicas_)) return j;
    // Every simulated replica has launched it: the collective, after the latest of their triggers.
    std::vector<TaskId> deps;
    for (const TaskId t : op.triggers)
        if (t != kNoTask) deps.push_back(t);
    op.done = emit_phases(fsdp_streams_[static_cast<std::size_t>(g.stage)], *op.plan, deps, op.label, nullptr);
    for (const TaskId w : op.waiters) {
        sim_.add_dependency(*op.done, w);
        sim_.release_hold(w);
    }
    std::vector<TaskId>().swap(op.triggers);
    std::vector<TaskId>().swap(op.waiters);
    return j;
}

void Builder::fsdp_wait(Group& g, std::size_t j, TaskId waiter) {
    FsdpOp& op = fsdp_ops_[static_cast<std::size_t>(g.stage)][j];
    if (op.done) {
        sim_.add_dependency(*op.done, waiter);
        return;
    }
    sim_.add_hold(waiter);
    op.waiters.push_back(waiter);
}

Builder::UnitTasks Builder::emit_fsdp_unit(Group& g, const schedule::Unit& u, std::optional<TaskId> after,
                                           std::uint32_t label, bool deferred) {
    const int v = schedule::virtual_stage(shape_, g.stage, u.chunk);
    const Pieces& ps = pieces_of(u.forward, v, deferred);
    const FsdpPlans& plans = fsdp_plans_[static_cast<std::size_t>(g.stage)];
    const std::uint32_t gathered = make_label(TaskKind::fsdp_gather, u.chunk, u.microbatch);
    const std::uint32_t reduced = make_label(TaskKind::fsdp_reduce, u.chunk, u.microbatch);
    const int layers = activations_.layers_of(g.stage, u.chunk);
    const std::size_t n = ps.pieces.size();
    int counted = 0;
    for (std::size_t i = 0; i < n; ++i)
        counted += ps.is_layer[i] ? 1 : 0;
    if (counted != layers)
        throw std::logic_error(
            fmt::format("stage {}: {} layer pieces for {} layers under fsdp", g.stage, counted, layers));
    const TaskId start = after.value_or(kNoTask);
    // What replica 0 waits for is exposed data-parallel communication (note_weight_wait: the wait from the task
    // before).
    const auto l = [](int layer) { return static_cast<std::size_t>(layer); };
    std::vector<std::size_t> gather(l(layers));
    std::optional<TaskId> prev = after;

    if (u.forward) {
        // The step's first forward gathers the embedding and the output layer, which stay gathered.
        const bool first = u.microbatch == 0;
        std::optional<std::size_t> embedding, output;
        const bool has_output = !ps.is_layer[n - 1];
        if (first && !ps.is_layer[0]) embedding = fsdp_op(g, plans.gather_embedding, gathered, start);
        for (int k = 0; k < std::min(layers, 2); ++k)
            gather[l(k)] = fsdp_op(g, plans.gather_layer, gathered, start);
        if (first && has_output && layers < 2) output = fsdp_op(g, plans.gather_output, gathered, start);
        int layer = 0;
        return emit_pieces(g, ps, after, label, [&](std::size_t i, const UnitTasks& piece) {
            std::optional<std::size_t> wait;
            if (ps.is_layer[i]) {
                wait = gather[l(layer)];
            } else {
                wait = i == 0 ? embedding : output;
            }
            if (wait) {
                fsdp_wait(g, *wait, piece.first);
                note_weight_wait(g, piece.first, prev);
            }
            prev = piece.last;
            if (!ps.is_layer[i]) return;
            // Its buffer is free again: the layer two on (prefetched by the next layer's pre-forward hook).
            if (layer + 2 < layers) gather[l(layer + 2)] = fsdp_op(g, plans.gather_layer, gathered, piece.last);
            if (first && has_output && layer + 2 == layers)
                output = fsdp_op(g, plans.gather_output, gathered, piece.last);
            ++layer;
        });
    }

    std::vector<std::size_t> reduce(l(layers));
    std::vector<std::size_t> reductions;  // the unit's, waited for at its end
    for (int k = layers - 1; k >= std::max(0, layers - 2); --k)
        gather[l(k)] = fsdp_op(g, plans.gather_layer, gathered, start);
    int layer = layers;
    const UnitTasks ut = emit_pieces(g, ps, after, label, [&](std::size_t i, const UnitTasks& piece) {
        if (!ps.is_layer[i]) {
            // The output layer's backward first, the embedding's last: their gradients reduce-scattered after each.
            reductions.push_back(
                fsdp_op(g, i == 0 && i + 1 < n ? plans.reduce_output : plans.reduce_embedding, reduced, piece.last));
            prev = piece.last;
            return;
        }
        --layer;
        fsdp_wait(g, gather[l(layer)], piece.first);
        // The gradient buffer it writes held the layer two after it, until that layer's reduce-scatter.
        if (layer + 2 < layers) fsdp_wait(g, reduce[l(layer + 2)], piece.first);
        note_weight_wait(g, piece.first, prev);
        prev = piece.last;
        if (layer >= 2) gather[l(layer - 2)] = fsdp_op(g, plans.gather_layer, gathered, piece.last);
        reduce[l(layer)] = fsdp_op(g, plans.reduce_layer, reduced, piece.last);
        reductions.push_back(reduce[l(layer)]);
    });
    // Megatron-FSDP's root post-backward hook waits for every reduce-scatter of the microbatch.
    const TaskId join = sim_.add_compute(g.compute, Time::zero(), label);
    sim_.add_dependency(ut.last, join);
    for (const std::size_t j : reductions)
        fsdp_wait(g, j, join);
    note_weight_wait(g, join, ut.last);
    return {ut.first, join, true};
}

}  // namespace strata::workload
