// Units: a model chunk's forward or backward pass costed into steps, and the tasks that run one unit on a
// GPU group (compute kernels on the compute stream, tensor-parallel collectives as flows on the tp stream).
#include "builder.hpp"

#include <algorithm>
#include <array>
#include <span>

namespace strata::workload {

void append(std::vector<UnitStep>& out, const std::vector<Step>& pass, const CostModel& cost,
            const std::function<int(Bytes)>& ring_sms) {
    const Step* before = nullptr;
    for (const Step& s : pass) {
        const Step* const collective = before;
        before = &s;
        if (s.kind == Step::Kind::compute) {
            const Time d = cost.compute_step(s);
            if (collective && collective->kind == Step::Kind::collective && collective->overlapped && !out.empty() &&
                !out.back().is_compute) {
                out.back().tail = cost.ring_tail(collective->collective, s);
                out.back().sm_fraction = cost.step_sm_fraction(s, out.back().sms_held);
            }
            // An overlapped collective pairs with exactly the compute step after it: later kernels must not join
            // that step, or they would run concurrently with the collective too.
            const bool paired = out.size() >= 2 && !out[out.size() - 2].is_compute && out[out.size() - 2].overlapped;
            if (!out.empty() && out.back().is_compute && !paired) {
                out.back().duration += d;
            } else {
                UnitStep u;
                u.duration = d;
                out.push_back(u);
            }
        } else {
            UnitStep u;
            u.is_compute = false;
            u.kind = s.collective.kind;
            u.message = s.collective.message;
            u.overlapped = s.overlapped;
            u.context_group = s.collective.context_group;
            u.sms_held = s.collective.context_group ? ring_sms(s.collective.message) : cost.sms_held(s.collective);
            u.sm_fraction = cost.comm_sm_fraction(u.sms_held);  // refined by the compute step it pairs with (above)
            out.push_back(u);
        }
    }
}

Plan Builder::intern(const std::vector<fabric::CollectivePhase>& phases) {
    Plan plan;
    plan.reserve(phases.size());
    for (const auto& ph : phases)
        plan.push_back({sim_.add_route(ph.route.links), ph.bytes, ph.latency + ph.route.latency, std::nullopt, std::nullopt});
    return plan;
}

const Plan& Builder::tp_phases(Group& g, CollectiveKind kind, Bytes message, bool context) {
    auto key = std::tuple{static_cast<int>(kind), message.value, context};
    for (const auto& [k, plan] : g.plans)
        if (k == key) return plan;
    const auto& groups = context ? g.context_groups : g.tensor_groups;
    auto phases = groups.size() == 1 ? fabric::plan_collective(fab_, kind, groups.front(), message, coll_params_)
                                     : fabric::plan_concurrent_collectives(fab_, kind, groups, message, coll_params_);
    return g.plans.emplace_back(key, intern(phases)).second;
}

TaskId Builder::emit_phases(StreamId stream, const Plan& phases, std::span<const TaskId> deps, std::uint32_t label,
                            TaskId* first, bool exposed) {
    TaskId last{};
    bool have = false;
    for (const auto& ph : phases) {
        TaskId t = ph.alone ? sim_.add_transfer_on(stream, empty_route_, ph.bytes, ph.latency + *ph.alone, label)
                            : sim_.add_transfer_on(stream, ph.route, ph.bytes, ph.latency, label);
        // The first phase waits for `deps`, each later one for the phase before it.
        if (have) {
            sim_.add_dependency(last, t);
        } else {
            for (TaskId d : deps) sim_.add_dependency(d, t);
            if (first) *first = t;
        }
        if (exposed) mark_exposed_tp(t);  // every phase: the compute stream waits for the whole chain
        last = t;
        have = true;
    }
    if (!have) {  // a collective over one rank: nothing to move, a zero-length marker keeps the graph simple
        last = sim_.add_compute(stream, Time::zero(), label);
        for (TaskId d : deps) sim_.add_dependency(d, last);
        if (first) *first = last;
    }
    return last;
}

Builder::UnitTasks Builder::emit_unit(Group& g, const Unit& unit, std::optional<TaskId> after,
                                      std::uint32_t label, bool keep_first, bool may_fuse) {
    UnitTasks out;
    // What the next step waits for: at most two tasks (an overlapped collective and the kernels beside it).
    struct Prev {
        std::array<TaskId, 2> ids{};
        std::size_t n = 0;
        void set(TaskId a) { ids[0] = a, n = 1; }
        void set(TaskId a, TaskId b) { ids = {a, b}, n = 2; }
        [[nodiscard]] const TaskId* begin() const { return ids.data(); }
        [[nodiscard]] const TaskId* end() const { return ids.data() + n; }
        [[nodiscard]] std::span<const TaskId> span() const { return {ids.data(), n}; }
    } prev;
    if (after) prev.set(*after);
    bool prev_work = false;  // prev is one compute-stream task marked as work (idle headroom)
    const std::uint32_t tp_label = make_label(TaskKind::tp, label_chunk(label), label_mb(label));
    auto note_first = [&](TaskId t) {
        if (!out.valid) {
            out.first = t;
            out.valid = true;
        }
    };
    // Idle headroom (a power-limited GPU rested): the unit's first task on the compute stream accrues the rest before
    // it, and its kernels may save up to their max_saving. A kernel beside an overlapped collective saves only what
    // keeps it at least as long as the collective (which it then stops hiding), so that a fused unit saves exactly
    // what its pieces would.
    bool resumed = false;
    auto work = [&](TaskId t, Time saving) {
        if (saving_fraction_ <= 0) return;
        sim_.set_headroom_work(t, saving, !resumed);
        resumed = true;
    };
    auto beside_saving = [&](Time beside, Time moving) {
        return std::min(max_saving(beside), std::max(Time::zero(), beside - moving));
    };
    auto alone_time = [&](const Plan& plan) {
        Time moving = Time::zero();
        for (const PlannedPhase& ph : plan)
            moving += ph.latency + (ph.alone            ? *ph.alone
                                    : ph.alone_if_quiet ? *ph.alone_if_quiet
                                                        : sim_.alone_transfer_time(ph.route, ph.bytes));
        return moving;
    };
    // A fused group (fuse_units), after the unit's first task if `keep_first` (a backward unit's recompute workspace is
    // held while its first task runs): kernels and synchronous collectives that move alone add up here and run as one
    // compute task.
    Time pending = Time::zero();
    Time pending_saving = Time::zero();
    bool have_pending = false;
    bool interrupted = false;  // a collective that does not move alone split the fused part
    std::size_t rest_from = unit.steps.size();  // where the fused part starts
    auto flush = [&] {
        if (!have_pending) return;
        const TaskId t = sim_.add_compute(g.compute, pending, label);
        for (TaskId d : prev) sim_.add_dependency(d, t);
        note_first(t);
        work(t, pending_saving);
        prev.set(t);
        prev_work = true;
        pending = pending_saving = Time::zero();
        have_pending = false;
    };
    auto add_pending = [&](Time t, Time saving, std::size_t i) {
        if (!have_pending && rest_from == unit.steps.size()) rest_from = i;
        pending += t;
        pending_saving += saving;
        have_pending = true;
    };
    // Without run-to-run jitter a group's spans are fixed, so the fused part of a unit it ran before is taken as it was.
    const bool fuse = g.fused && may_fuse && dp_quiet(g);
    const bool cacheable = fuse && !variation_.span_active();
    const FusedPart* cached = nullptr;
    if (cacheable) {
        for (const auto& [u, part] : g.fused_parts)
            if (u == &unit && part.keep_first == keep_first) cached = &part;
    }
    const std::size_t end = cached ? cached->from : unit.steps.size();
    for (std::size_t i = 0; i < end; ++i) {
        const UnitStep& s = unit.steps[i];
        const bool fusing = fuse && (out.valid || !keep_first);
        if (s.is_compute) {
            const Time d = span_time(g, s.duration);
            if (fusing) {
                add_pending(d, max_saving(d), i);
                continue;
            }
            TaskId t = sim_.add_compute(g.compute, d, label);
            for (TaskId d_ : prev) sim_.add_dependency(d_, t);
            note_first(t);
            work(t, max_saving(d));
            prev.set(t);
            prev_work = true;
            continue;
        }
        const Plan& plan = tp_phases(g, s.kind, s.message, s.context_group);
        const bool paired = s.overlapped && i + 1 < unit.steps.size() && unit.steps[i + 1].is_compute;
        if (fusing && std::all_of(plan.begin(), plan.end(), [](const PlannedPhase& ph) { return ph.alone || ph.alone_if_quiet; })) {
            // Its phases run one after another on the idle tp stream, each its latency plus its alone time (no data-
            // parallel collective of the stage runs now: dp_quiet); the kernels overlapped with it start with it on the
            // idle compute stream, and what follows waits for both.
            Time moving = alone_time(plan);
            Time saving = Time::zero();
            if (paired) {
                // As unfused (below): the kernels beside it, then a ring exchange's tail after both, drawn in that order.
                const Time beside = CostModel::slowed_compute(unit.steps[i + 1].duration, moving, s.sm_fraction);
                const Time tail = std::min(s.tail, beside);
                // Each span drawn once (run-to-run jitter draws at every call), as unfused.
                const Time kernels = span_time(g, beside - tail);
                saving = beside_saving(kernels, moving);
                moving = std::max(moving, kernels);
                if (tail > Time::zero()) {
                    const Time last = span_time(g, tail);
                    moving += last;
                    saving += max_saving(last);
                }
                ++i;
            }
            add_pending(moving, saving, i);
            continue;
        }
        interrupted = interrupted || have_pending;
        flush();
        if (!out.valid) {
            // A unit that opens with a collective: its first task is a zero-length one on the compute stream, which
            // both the collective and the kernels beside it follow, so that what the unit's first task is later made
            // to wait for (its input's pipeline transfer, with overlap_p2p_comm) holds back the kernels too.
            const TaskId anchor = sim_.add_compute(g.compute, Time::zero(), label);
            for (TaskId d : prev) sim_.add_dependency(d, anchor);
            note_first(anchor);
            work(anchor, Time::zero());  // the rest before the unit accrues here, as before a fused unit's one task
            prev.set(anchor);
            prev_work = true;
        }
        TaskId first{};
        // Synchronous (not paired with the next kernels): the in-order compute stream waits for every phase.
        const TaskId last = emit_phases(g.tp, plan, prev.span(), tp_label, &first, !paired && g.replica == 0);
        note_first(first);
        if (paired) {
            // The overlapped kernels lose the SMs the collective holds while it runs: for its time alone on its route
            // (a context-parallel ring across nodes at the network's pace, not at the intra-node figure). A ring
            // exchange's last GEMM chunk (its tail) runs after both the other chunks and the last transfer.
            const Time beside = CostModel::slowed_compute(unit.steps[i + 1].duration, alone_time(plan), s.sm_fraction);
            const Time tail = std::min(s.tail, beside);
            const Time kernels = span_time(g, beside - tail);
            TaskId w = sim_.add_compute(g.compute, kernels, label);
            for (TaskId d : prev) sim_.add_dependency(d, w);
            if (saving_fraction_ > 0) work(w, beside_saving(kernels, alone_time(plan)));  // alone_time walks the plan
            if (g.replica == 0) mark_paired_tp(last, w);
            prev.set(w, last);
            prev_work = false;
            if (tail > Time::zero()) {
                const Time last_span = span_time(g, tail);
                const TaskId last_chunk = sim_.add_compute(g.compute, last_span, label);
                work(last_chunk, max_saving(last_span));
                sim_.add_dependency(w, last_chunk);
                sim_.add_dependency(last, last_chunk);
                prev.set(last_chunk);
                prev_work = true;
            }
            ++i;
        } else {
            prev.set(last);
            prev_work = false;
        }
    }
    if (cached) {
        pending = cached->rest;
        pending_saving = cached->saving;
        have_pending = true;
    } else if (cacheable && !interrupted && have_pending) {
        g.fused_parts.push_back({&unit, FusedPart{keep_first, rest_from, pending, pending_saving}});
    }
    flush();
    if (!out.valid) {
        out.first = out.last = sim_.add_compute(g.compute, Time::zero(), label);
        out.valid = true;
        for (TaskId d : prev) sim_.add_dependency(d, out.first);
        return out;
    }
    // The unit's last task: its one task, else a zero-length join on the compute stream after what it ends with. With
    // idle headroom a lone collective gets the join too, so that the rest before the next unit counts from its end, as
    // after a fused unit's one task.
    if (prev.n == 1 && (prev_work || saving_fraction_ <= 0)) {
        out.last = prev.ids[0];
    } else {
        out.last = sim_.add_compute(g.compute, Time::zero(), label);
        for (TaskId d : prev) sim_.add_dependency(d, out.last);
        work(out.last, Time::zero());
    }
    return out;
}

void Builder::for_each_pass(bool forward, int v, const std::function<void(const std::vector<Step>&, bool layer)>& fn,
                            bool deferred) const {
    const LayerConfig lc = layer_config(sc_.model, e_);
    const int last_v = shape_.virtual_stages() - 1;
    const int layers = e_.layers_in_chunk(sc_.model.layers, v);
    const LayerPlan layer = build_layer(lc);
    if (forward) {
        if (v == 0) fn(build_embedding(lc).forward, false);
        for (int i = 0; i < layers; ++i) fn(layer.forward, true);
        if (v == last_v) fn(build_output(lc).forward, false);
        return;
    }
    // Backward runs the chunk's layers last to first; partial (block) recompute re-runs the first ones.
    const LayerPlan kept = build_layer_left_alone(lc);
    const int recomputed = e_.recomputed_layers(layers);
    if (v == last_v) {
        const OutputPlan output = build_output(lc);
        fn(deferred ? output.backward_deferred : output.backward, false);
    }
    for (int i = layers - 1; i >= 0; --i) fn((i < recomputed ? layer : kept).backward, true);
    if (v == 0) fn(build_embedding(lc).backward, false);
}

const Unit& Builder::unit_for(bool forward, int v, bool deferred) {
    const int last_v = shape_.virtual_stages() - 1;
    const int kind = (v == 0 ? 1 : 0) | (v == last_v ? 2 : 0) | (deferred ? 4 : 0);
    const int layers = e_.layers_in_chunk(sc_.model.layers, v);
    auto key = std::tuple{forward, kind, layers};
    auto it = units_.find(key);
    if (it != units_.end()) return it->second;
    Unit u;
    for_each_pass(
        forward, v, [&](const std::vector<Step>& pass, bool) { append(u.steps, pass, cost_, ring_sms()); }, deferred);
    return units_.emplace(key, std::move(u)).first->second;
}

namespace {

/// A layer's backward cut where the gradient events `cut` marks happen (GradientBucket::ready_event: 0 after fc2's
/// weight gradient, its bias's and main-gradient add, 1 after the second norm's backward, 2 after the projection's, 3
/// after the first norm's): the parts, each with how many of the four events are done at its end (the last part: all).
/// A compute step is split between its kernels, unless an overlapped collective runs beside it (the cut then moves to
/// the step's end: that collective's overlap is the step's); the split moves no kernel and changes no time.
std::vector<std::pair<std::vector<Step>, int>> split_at_gradients(const std::vector<Step>& steps,
                                                                  const std::array<bool, 4>& cut) {
    static const std::array<std::vector<std::string>, 4> kDone = {{
        {"fc2.wgrad", "fc2.main-grad-add", "fc2.bias-grad"},
        {"ln2.bwd"},
        {"proj.wgrad", "proj.main-grad-add", "proj.bias-grad"},
        {"ln1.bwd"},
    }};
    using Position = std::pair<std::size_t, std::size_t>;  // (step, kernel)
    // Each event's last kernel (not found: the pass's end), kept in order; inside a step beside an overlapped
    // collective, that step's last kernel.
    std::array<Position, 4> at;
    at.fill({steps.size(), 0});
    for (std::size_t s = 0; s < steps.size(); ++s)
        for (std::size_t j = 0; j < steps[s].kernels.size(); ++j)
            for (std::size_t k = 0; k < kDone.size(); ++k)
                if (std::find(kDone[k].begin(), kDone[k].end(), steps[s].kernels[j].name) != kDone[k].end()) at[k] = {s, j};
    for (Position& p : at) {
        const std::size_t s = p.first;
        if (s > 0 && s < steps.size() && steps[s - 1].kind == Step::Kind::collective && steps[s - 1].overlapped)
            p.second = steps[s].kernels.size() - 1;
    }
    for (std::size_t k = kDone.size() - 1; k-- > 0;) at[k] = std::min(at[k], at[k + 1]);
    // The cuts: after each marked event's last kernel; every event up to it is then done.
    std::vector<std::pair<Position, int>> cuts;
    for (std::size_t k = 0; k < kDone.size(); ++k) {
        if (!cut[k] || at[k].first >= steps.size()) continue;
        if (!cuts.empty() && cuts.back().first == at[k]) {
            cuts.back().second = static_cast<int>(k) + 1;
        } else {
            cuts.emplace_back(at[k], static_cast<int>(k) + 1);
        }
    }
    std::vector<std::pair<std::vector<Step>, int>> parts;
    std::vector<Step> part;
    std::size_t c = 0;
    for (std::size_t s = 0; s < steps.size(); ++s) {
        std::size_t taken = 0;  // of the step's kernels, already in earlier parts
        for (; c < cuts.size() && cuts[c].first.first == s; ++c) {
            const std::size_t end = cuts[c].first.second + 1;
            Step head = steps[s];
            head.kernels.assign(steps[s].kernels.begin() + static_cast<std::ptrdiff_t>(taken),
                                steps[s].kernels.begin() + static_cast<std::ptrdiff_t>(end));
            part.push_back(std::move(head));
            parts.emplace_back(std::move(part), cuts[c].second);
            part.clear();
            taken = end;
        }
        if (taken == 0) {
            part.push_back(steps[s]);
        } else if (taken < steps[s].kernels.size()) {
            Step rest = steps[s];
            rest.kernels.assign(steps[s].kernels.begin() + static_cast<std::ptrdiff_t>(taken), steps[s].kernels.end());
            part.push_back(std::move(rest));
        }
    }
    if (!part.empty() || parts.empty()) parts.emplace_back(std::move(part), 0);
    parts.back().second = static_cast<int>(kDone.size());
    return parts;
}

}  // namespace

const Builder::Pieces& Builder::pieces_of(bool forward, int v, bool deferred) {
    // The chunk's pass as one piece per pass (built once per direction and virtual stage, shared by its replicas); with
    // Megatron-Core's buckets a layer's backward as one piece per part that completes buckets (split_at_gradients).
    auto it = pieces_.find({forward, v, deferred});
    if (it == pieces_.end()) {
        Pieces ps;
        int pass = 0;
        const auto piece = [&](const std::vector<Step>& steps, bool layer, int done) {
            ps.pieces.emplace_back();
            append(ps.pieces.back().steps, steps, cost_, ring_sms());
            ps.is_layer.push_back(layer);
            ps.pass.push_back(pass);
            ps.events_done.push_back(done);
        };
        for_each_pass(forward, v, [&](const std::vector<Step>& steps, bool layer) {
            const bool by_bucket = planned_buckets() && reduces_by_bucket();
            if (!forward && layer && (by_bucket || offloading())) {
                // Cut only where a bucket of this chunk ends (chunk v / p of stage v % p) inside this layer; with
                // offloading also after the MLP's backward (fc1's and the second norm's gradients), where the layer
                // before's reload starts and before the attention's, which waits for its own.
                std::array<bool, 4> cut{};
                if (by_bucket) {
                    const StageBuckets& sb = stage_buckets(v % shape_.stages);
                    const auto chunk = static_cast<std::size_t>(v / shape_.stages);
                    const std::size_t to = sb.chunk_end(chunk);
                    for (std::size_t j = sb.chunk_offset[chunk]; j < to; ++j)
                        if (sb.buckets[j].last_piece == pass) cut[static_cast<std::size_t>(sb.buckets[j].ready_event)] = true;
                }
                if (offloading()) cut[1] = true;
                for (const auto& [part, done] : split_at_gradients(steps, cut)) piece(part, layer, done);
            } else {
                piece(steps, layer, 4);
            }
            ++pass;
        }, deferred);
        it = pieces_.emplace(std::tuple{forward, v, deferred}, std::move(ps)).first;
    }
    return it->second;
}

Builder::UnitTasks Builder::emit_pieces(Group& g, const Pieces& pieces, std::optional<TaskId> after, std::uint32_t label,
                                        const std::function<void(std::size_t, const UnitTasks&)>& each, bool may_fuse) {
    UnitTasks all;
    std::optional<TaskId> prev = after;
    for (std::size_t i = 0; i < pieces.pieces.size(); ++i) {
        const UnitTasks ut = emit_unit(g, pieces.pieces[i], prev, label, true, may_fuse);
        if (!all.valid) {
            all.first = ut.first;
            all.valid = true;
        }
        all.last = ut.last;
        prev = ut.last;
        each(i, ut);
    }
    return all;
}

Builder::UnitTasks Builder::emit_backward_by_layer(Group& g, int chunk, std::optional<TaskId> after, std::uint32_t label,
                                                  bool deferred) {
    const Pieces& bp = pieces_of(false, schedule::virtual_stage(shape_, g.stage, chunk), deferred);
    return emit_pieces(g, bp, after, label, [&](std::size_t i, const UnitTasks& ut) {
        on_backward_piece(g, chunk, bp, i, ut.last);
    });
}

Builder::UnitTasks Builder::emit_forward_by_layer(Group& g, int chunk, std::optional<TaskId> after, std::uint32_t label) {
    std::optional<TaskId> prev = after;
    return emit_pieces(g, pieces_of(true, schedule::virtual_stage(shape_, g.stage, chunk)), after, label,
                       [&](std::size_t i, const UnitTasks& ut) { wait_for_gather(g, chunk, i, ut, prev); });
}

void Builder::wait_for_gather(Group& g, int chunk, std::size_t i, const UnitTasks& ut, std::optional<TaskId>& prev) {
    const GatherChain& ch = gathers_[static_cast<std::size_t>(g.stage)];
    const std::size_t first_bucket = ch.chunk_offset[static_cast<std::size_t>(chunk)];
    // Its parameters are there (Megatron's forward pre-hook waits for the bucket).
    sim_.add_dependency(ch.gathered[first_bucket + i], ut.first);
    note_weight_wait(g, ut.first, prev);
    prev = ut.last;
}

void Builder::note_weight_wait(const Group& g, TaskId waiter, std::optional<TaskId> before) {
    if (&g != &groups_.front()) return;
    g0_gather_waiters_.push_back(waiter);
    g0_gather_preds_.push_back(before.value_or(kNoTask));
}

}  // namespace strata::workload
