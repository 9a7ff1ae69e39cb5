// The tasks a run will have, counted from the stage programs before it: the refusal of a run over the task limit
// (check_task_limit, before anything proportional to the tasks is built) and the progress estimate (estimate_tasks,
// once the groups and their collective plans exist), each unit and call counted as emit_unit and emit_instruction
// emit it.
#include "builder.hpp"

#include "strata/errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace strata::workload {

void Builder::check_task_limit() {
    // Refuse a run too long before building anything (the programs too): every group runs the forward and
    // the backward unit of each of its chunks for every microbatch.
    const int p = e_.pipeline;
    double estimate = 0;
    for (int r = 0; r < p; ++r) {
        for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
            double per_microbatch = 0;
            for (const bool forward : {true, false})
                per_microbatch += unit_tasks(nullptr, unit_for(forward, schedule::virtual_stage(shape_, r, chunk)), false, true) +
                                  3.0 +  // p2p call, transfer
                                  (e_.reduces_fp8_amax() ? 3.0 : 0.0);  // amax all-reduce: post, wait, its task
            estimate += per_microbatch * shape_.microbatches;
        }
    }
    workload::check_task_limit(sc_, options_, estimate * replicas_, "about");
}

void check_task_limit(const Scenario& sc, const SimulationOptions& options, double tasks, const char* how) {
    if (tasks > double(options.max_tasks))
        throw InputError(fmt::format("{}: case '{}' would run {} {:.3g} million tasks, more than the limit of {:.3g} million "
                                     "(a bound on run time; memory follows the tasks in flight); simulate fewer GPUs or "
                                     "microbatches, or raise the limit ({})",
                                     sc.source, sc.name, how, tasks / 1e6, double(options.max_tasks) / 1e6,
                                     options.max_tasks_option));
}

std::size_t Builder::gradient_buckets(int r) {
    if (planned_buckets()) return stage_buckets(r).buckets.size();
    std::size_t n = 0;
    for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
        const Pieces& bp = pieces_of(false, schedule::virtual_stage(shape_, r, chunk));
        n += static_cast<std::size_t>(std::count(bp.is_layer.begin(), bp.is_layer.end(), true));
    }
    return n;
}

Builder::DpMessage Builder::gather_message(const Pieces& forward_pieces, int v, std::size_t i) {
    return forward_pieces.is_layer[i] ? DpMessage::gather_layer
           : v == 0 && i == 0         ? DpMessage::gather_embedding
                                      : DpMessage::gather_output;
}

std::uint64_t Builder::estimate_tasks() {
    // The progress estimate: each group's program, instruction by instruction, as emit_instruction runs it. Every
    // replica of a stage runs the same one, so it is counted once per stage, kind of group and shape of its collective
    // plans (their phases and which move alone: groups placed across nodes differ there).
    std::map<std::tuple<int, bool, std::vector<std::uint32_t>>, double> per_program;
    double estimate = 0;
    for (Group& g : groups_) {
        std::vector<std::uint32_t> shape;
        for (const auto& [key, plan] : g.plans) {
            shape.push_back(static_cast<std::uint32_t>(plan.size()));
            shape.push_back(static_cast<std::uint32_t>(std::count_if(
                plan.begin(), plan.end(), [](const PlannedPhase& ph) { return ph.alone || ph.alone_if_quiet; })));
        }
        auto key = std::tuple{g.stage, g.fused, std::move(shape)};
        auto it = per_program.find(key);
        if (it == per_program.end()) it = per_program.emplace(std::move(key), program_tasks(g)).first;
        estimate += it->second;
    }
    // Each stage's data-parallel streams: the gradient reduction (by bucket and the rest, or whole), the parameter
    // gather (by piece when overlapped), the tied embedding's gradient sum.
    const auto phases = [](const Plan& plan) { return double(std::max<std::size_t>(1, plan.size())); };
    for (int r = 0; r < e_.pipeline; ++r) {
        if (e_.fsdp) {
            // Per microbatch: each layer gathered twice and reduced once, the embedding and output layer reduced (and
            // gathered by the first forward); the end of the step's reduction (on_last_backward).
            const FsdpPlans& f = fsdp_plans_[static_cast<std::size_t>(r)];
            const double layers = e_.layers_on_stage(sc_.model.layers, r);
            estimate += shape_.microbatches * (layers * (2.0 * phases(f.gather_layer) + phases(f.reduce_layer)) +
                                               phases(f.reduce_embedding) + phases(f.reduce_output)) +
                        phases(f.gather_embedding) + phases(f.gather_output) + 1.0;
            continue;
        }
        if (reduces_by_bucket() && planned_buckets()) {
            for (const GradientBucket& b : stage_buckets(r).buckets) estimate += phases(bucket_plan(r, b, false));
            estimate += 1.0;
        } else if (reduces_by_bucket()) {
            estimate += phases(dp_plan(r, DpMessage::bucket)) * double(gradient_buckets(r));
            estimate += rest_parameters(r) > 0.5 ? phases(dp_plan(r, DpMessage::rest)) : 1.0;
        } else {
            estimate += weight_replicas() > 1 ? phases(dp_plan(r, DpMessage::whole)) : 1.0;
        }
        if (!gather_streams_.empty() && planned_buckets()) {
            for (const GradientBucket& b : stage_buckets(r).buckets) estimate += phases(bucket_plan(r, b, true));
        } else if (!gather_streams_.empty()) {
            for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
                const int v = schedule::virtual_stage(shape_, r, chunk);
                const Pieces& fp = pieces_of(true, v);
                for (std::size_t i = 0; i < fp.pieces.size(); ++i) estimate += phases(dp_plan(r, gather_message(fp, v, i)));
            }
        } else if (e_.distributed_optimizer && weight_replicas() > 1) {
            estimate += phases(dp_plan(r, DpMessage::gather));
        }
    }
    // (Deferring, the last stage's reduction and drains meet in a join before it: drained.)
    if (e_.pipeline > 1 && sc_.model.tied_embeddings) estimate += activations_.drains(e_.pipeline - 1) ? 2.0 : 1.0;
    // The amax all-reduces that join the replicas: one task per unit of a stage's program.
    if (!amax_streams_.empty())
        for (int r = 0; r < e_.pipeline; ++r) estimate += 2.0 * shape_.chunks * shape_.microbatches;
    return static_cast<std::uint64_t>(estimate);
}

double Builder::program_tasks(Group& g) {
    // A call: its post (a fused group's unit's last task stands for it after a unit) and its wait, a transfer per send,
    // and per receive the all-gather of the shards without sequence parallelism. A unit: its host gap, then its tasks
    // (unit_tasks), the first forward of each chunk (with the overlapped parameter gather) and the last backward (with
    // the overlapped gradient reduction) layer by layer and unfused (emit_pieces).
    const double gather_phases =
        !e_.sequence_parallel && e_.tensor > 1
            ? double(std::max<std::size_t>(1, tp_phases(g, CollectiveKind::all_gather, activation_message_).size()))
            : 0.0;
    // Each kind of unit counted once: by chunk, direction, by layer or whole, fused or not (-1: not yet).
    std::vector<double> units(static_cast<std::size_t>(shape_.chunks) * 16, -1.0);
    double n = 0;
    bool prev_unit = false;
    bool reducing = false;
    for (const schedule::Instruction& ins : programs_[static_cast<std::size_t>(g.stage)]) {
        if (ins.kind == schedule::Instruction::Kind::call) {
            n += (g.fused && prev_unit ? 1.0 : 2.0) + ins.call.send_count + gather_phases * ins.call.receive_count;
            prev_unit = false;
            continue;
        }
        const schedule::Unit& u = ins.unit;
        prev_unit = true;
        if ((u.forward ? e_.host_gap_forward : e_.host_gap_backward) > Time::zero()) n += 1.0;
        const int v = schedule::virtual_stage(shape_, g.stage, u.chunk);
        const bool by_layer = runs_by_layer(u) || offloading() || e_.fsdp, defers = deferred(u, g.stage);
        // Once its first bucket is reduced, the group's later units run unfused (dp_quiet).
        const bool fused = g.fused && !reducing;
        reducing = reducing || (runs_by_layer(u) && !u.forward);
        // With offloading, a copy each way per layer.
        if (offloading()) n += activations_.layers_of(g.stage, u.chunk);
        // With fsdp, each backward's wait for its reduce-scatters.
        if (e_.fsdp && !u.forward) n += 1.0;
        double& tasks = units[static_cast<std::size_t>(
            (((u.chunk * 2 + (u.forward ? 1 : 0)) * 2 + (by_layer ? 1 : 0)) * 2 + (fused ? 1 : 0)) * 2 + (defers ? 1 : 0))];
        if (tasks < 0) {
            tasks = 0;
            if (by_layer) {
                for (const Unit& piece : pieces_of(u.forward, v, defers).pieces) tasks += unit_tasks(&g, piece, false, true);
            } else {
                const bool keep_first = !u.forward && activations_.recompute_workspace(g.stage, u.chunk).value > 0;
                tasks = unit_tasks(&g, unit_for(u.forward, v, defers), fused, keep_first);
            }
        }
        n += tasks + amax_tasks_per_unit(g.stage);
    }
    // After the program: the gradients' check and averaging passes (for each bucket of the split backward, then for
    // what the buckets left), the last stage's deferred weight gradients (emit_deferred_wgrad), the optimizer step,
    // and the later chunks' step that opens an iteration cut after the first chunk's (steps_first_part_first).
    if (activations_.drains(g.stage)) n += unit_tasks(&g, drain_unit(), false, true);
    const bool by_bucket = reduces_by_bucket();
    const double buckets = by_bucket ? double(gradient_buckets(g.stage)) : 0.0;
    const double passes = (e_.check_for_nan_in_grad ? 1.0 : 0.0) + (e_.averages_by_pass() ? 1.0 : 0.0);
    const bool rest = !by_bucket || unbucketed_parameters(g.stage) > 0.0;  // prepare_gradients skips a stage with none left
    return n + passes * (buckets + (rest ? 1.0 : 0.0)) + 1.0 + (steps_first_part_first() ? 1.0 : 0.0);
}

double Builder::amax_tasks_per_unit(int stage) const {
    // emit_amax_reduction: a post and a wait where the replicas meet, the group's own all-reduce where they do not.
    if (!e_.reduces_fp8_amax()) return 0.0;
    if (!amax_streams_.empty()) return 2.0;
    return amax_latency_[static_cast<std::size_t>(stage)] > Time::zero() ? 1.0 : 0.0;
}

double Builder::unit_tasks(Group* g, const Unit& unit, bool fused, bool keep_first) {
    // As emit_unit on group g (its collectives' phases and whether they move alone); without a group (the task limit's
    // bound) a collective counts two phases and moves alone. Fused, what follows the first task if `keep_first` runs as one
    // task up to a collective that does not move alone. A unit that opens with a collective has an anchor before it;
    // one that ends with two tasks (a collective and the kernels beside it), or with a lone collective under idle
    // headroom, a join after them. Not foreseen here: a fused group's units that run unfused while its stage's
    // overlapped parameter gather is still in flight (dp_quiet; program_tasks counts the bucket reductions' part).
    enum class Last : std::uint8_t { none, one, pair, collective };
    Last last = Last::none;
    double n = 0;
    bool pending = false;
    for (std::size_t i = 0; i < unit.steps.size(); ++i) {
        const UnitStep& s = unit.steps[i];
        const bool fusing = fused && (last != Last::none || pending || !keep_first);
        if (s.is_compute) {
            if (fusing) {
                pending = true;
            } else {
                n += 1.0, last = Last::one;
            }
            continue;
        }
        const bool paired = s.overlapped && i + 1 < unit.steps.size() && unit.steps[i + 1].is_compute;
        double phases = 2.0;
        bool alone = true;
        if (g != nullptr) {
            const Plan& plan = tp_phases(*g, s.kind, s.message, s.context_group);
            phases = double(std::max<std::size_t>(1, plan.size()));
            alone = std::all_of(plan.begin(), plan.end(), [](const PlannedPhase& ph) { return ph.alone || ph.alone_if_quiet; });
        }
        if (fusing && alone) {
            pending = true;
            i += paired ? 1 : 0;
            continue;
        }
        if (pending) n += 1.0, last = Last::one, pending = false;
        if (last == Last::none) n += 1.0;  // the anchor
        n += phases;
        last = Last::collective;
        if (paired) {
            n += s.tail > Time::zero() ? 2.0 : 1.0;
            last = s.tail > Time::zero() ? Last::one : Last::pair;
            ++i;
        }
    }
    if (pending) n += 1.0, last = Last::one;
    const bool join = last == Last::none || last == Last::pair || (last == Last::collective && saving_fraction_ > 0);
    return n + (join ? 1.0 : 0.0);
}

}  // namespace strata::workload
