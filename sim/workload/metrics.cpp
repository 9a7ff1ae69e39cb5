// Metrics: what each finished task tells (observe, called by the engine as tasks end: the graph is streamed, so
// no task is kept), and the results as neutral records (strata/metrics.hpp): iteration time, MFU and HFU, bubble
// and exposed communication by kind, memory peaks (and the OOM breakdown), stage intervals and the trace.
#include "builder.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace strata::workload {

void Builder::cover_p2p(std::int32_t stage, std::int64_t start, std::int64_t end) {
    // Tasks end in time order, so `end` is the latest end so far: the new interval swallows the merged ones it
    // reaches (the last ones) and the union grows by what it adds.
    auto& open = p2p_open_[static_cast<std::size_t>(stage)];
    while (!open.empty() && open.back().second >= start) {
        start = std::min(start, open.back().first);
        exposed_p2p_ps_ -= open.back().second - open.back().first;
        open.pop_back();
    }
    open.emplace_back(start, end);
    exposed_p2p_ps_ += end - start;
}

void Builder::mark_exposed_tp(TaskId t) {
    const std::size_t slot = engine::task_slot(t);
    if (exposed_tp_.size() <= slot) exposed_tp_.resize(std::max<std::size_t>(slot + 1, 2 * exposed_tp_.size()), 0);
    exposed_tp_[slot] = engine::task_generation(t) + 1;
}

void Builder::mark_paired_tp(TaskId collective_last, TaskId compute) {
    auto grow = [](auto& v, std::size_t slot, auto fill) {
        if (v.size() <= slot) v.resize(std::max<std::size_t>(slot + 1, 2 * v.size()), fill);
    };
    const std::size_t c = engine::task_slot(collective_last), k = engine::task_slot(compute);
    grow(paired_tp_, c, 0u);
    grow(paired_compute_end_, c, std::int64_t{-1});
    grow(paired_compute_, k, 0u);
    grow(paired_partner_, k, TaskId{});
    paired_tp_[c] = engine::task_generation(collective_last) + 1;
    paired_compute_end_[c] = -1;
    paired_compute_[k] = engine::task_generation(compute) + 1;
    paired_partner_[k] = collective_last;
}

void Builder::observe(const engine::TaskRecord& r) {
    if (!gather_stage_.empty()) {
        const std::int32_t s = gather_stage_[r.stream];
        if (s >= 0 && gather_left_[static_cast<std::size_t>(s)] > 0) --gather_left_[static_cast<std::size_t>(s)];
    }
    if (interval_tp_[r.stream] && interval_stage_[r.stream] >= 0) {
        const std::size_t slot = engine::task_slot(r.task);
        if (slot < exposed_tp_.size() && exposed_tp_[slot] == engine::task_generation(r.task) + 1) {
            exposed_tp_[slot] = 0;
            exposed_tp_ps_ += (r.end - r.start).ps();
        }
        if (slot < paired_tp_.size() && paired_tp_[slot] == engine::task_generation(r.task) + 1) {
            // An overlapped collective ends: exposed from its kernels' end, if they ended first (tasks end in time
            // order); else nothing (its kernels, ending later or at once, find it gone).
            paired_tp_[slot] = 0;
            if (paired_compute_end_[slot] >= 0) exposed_tp_ps_ += std::max<std::int64_t>(0, r.end.ps() - paired_compute_end_[slot]);
        }
    } else if (const std::size_t slot = engine::task_slot(r.task);
               interval_stage_[r.stream] >= 0 && slot < paired_compute_.size() &&
               paired_compute_[slot] == engine::task_generation(r.task) + 1) {  // replica 0's compute stream
        paired_compute_[slot] = 0;
        // The kernels beside a collective end: recorded on the collective, if it has not ended yet.
        const TaskId collective = paired_partner_[slot];
        const std::size_t c = engine::task_slot(collective);
        if (paired_tp_[c] == engine::task_generation(collective) + 1) paired_compute_end_[c] = r.end.ps();
    }
    // With overlap_p2p_comm the transfers run beside the compute; the time a unit waits for one is counted as
    // bubble (not attributed), so only the blocking calls' transfers are read here.
    if (label_kind(r.label) == TaskKind::p2p && !e_.overlap_p2p_comm) {
        const std::int32_t s = p2p_stage_[r.stream];
        if (s >= 0 && r.end > r.start) {
            // A pipeline transfer blocks the calls of both its groups while it moves (it starts once both are
            // posted; both wait for its end), and the receiver's all-gather blocks the receiver's call.
            cover_p2p(s, r.start.ps(), r.end.ps());
            if (p2p_peer_[r.stream] >= 0) cover_p2p(p2p_peer_[r.stream], r.start.ps(), r.end.ps());
        } else if (interval_stage_[r.stream] >= 0 && !interval_tp_[r.stream]) {
            // A call's post or wait on replica 0's compute stream: the transfers of its earlier calls are over.
            p2p_open_[static_cast<std::size_t>(interval_stage_[r.stream])].clear();
        }
    }
    const Group& g0 = groups_[0];
    if (g0_next_waiter_ < g0_gather_waiters_.size()) {
        // A first module waits for its parameter bucket from the end of the task before it (none: the start). Each
        // predecessor ends before its waiter starts; a one-task piece's waiter is the next piece's predecessor.
        auto predecessor = [&] {
            const std::size_t i = g0_next_pred_;
            if (i == g0_next_waiter_ && i < g0_gather_preds_.size() &&
                (g0_gather_preds_[i] == kNoTask || r.task == g0_gather_preds_[i])) {
                g0_pred_end_ = g0_gather_preds_[i] == kNoTask ? 0 : r.end.ps();
                ++g0_next_pred_;
            }
        };
        predecessor();
        if (g0_next_pred_ == g0_next_waiter_ + 1 && r.task == g0_gather_waiters_[g0_next_waiter_]) {
            g0_gather_wait_ps_ += std::max<std::int64_t>(0, r.start.ps() - g0_pred_end_);
            ++g0_next_waiter_;
            predecessor();
        }
    }
    if (r.task == g0.last_backward) g0_last_backward_end_ = r.end.ps();
    if (r.task == g0.optimizer) {
        g0_optimizer_start_ = r.start.ps();
        g0_optimizer_end_ = r.end.ps();
    }
    if (r.stream == g0.compute && (label_kind(r.label) == TaskKind::grad_average || label_kind(r.label) == TaskKind::grad_check) &&
        r.start.ps() >= g0_last_backward_end_)
        g0_average_ps_ += (r.end - r.start).ps();
    // FP8 amax all-reduces, exposed tensor-parallel communication: the group's own on its tp stream (mark_exposed_tp),
    // or where the replicas meet, the time replica 0's compute stream waits between its post and its wait (both zero
    // long, in that order on the stream). The last backward's is not the data-parallel wait too.
    if (label_kind(r.label) == TaskKind::amax_reduce && !amax_post_end_.empty() && interval_stage_[r.stream] >= 0 &&
        !interval_tp_[r.stream]) {
        std::int64_t& post_end = amax_post_end_[static_cast<std::size_t>(interval_stage_[r.stream])];
        if (post_end < 0) {
            post_end = r.end.ps();
        } else {
            const std::int64_t waited = std::max<std::int64_t>(0, r.start.ps() - post_end);
            exposed_tp_ps_ += waited;
            if (r.task == g0_last_amax_) g0_average_ps_ += waited;
            post_end = -1;
        }
    } else if (r.task == g0_last_amax_) {
        g0_average_ps_ += (r.end - r.start).ps();
    }
    if (r.stream == dp_streams_[0] && r.label == make_label(TaskKind::dp, 1, 0))
        g0_gather_end_ = std::max(g0_gather_end_, r.end.ps());
    if (!want_detail_ || r.end == r.start) return;
    const std::int32_t s = interval_stage_[r.stream];
    if (s >= 0) {
        const char kind = interval_tp_[r.stream]                       ? 'C'
                          : label_kind(r.label) == TaskKind::forward  ? 'F'
                          : label_kind(r.label) == TaskKind::backward ? 'B'
                                                                      : 'O';
        intervals_.push_back({r.start.seconds(), r.end.seconds(), s, kind, label_mb(r.label), label_chunk(r.label)});
    }
    if (options_.keep_trace && stream_traced_[r.stream]) {
        TraceSpan span{stream_process_[r.stream], r.stream, kKindNames[static_cast<int>(label_kind(r.label))],
                       label_chunk(r.label), label_mb(r.label), r.start, r.end, r.bytes};
        if (label_kind(r.label) == TaskKind::p2p && r.transfer) {
            if (auto it = p2p_receiver_.find(r.task); it != p2p_receiver_.end()) {
                span.has_receiver = true;
                span.receiver_process = it->second;
                span.receiver_lane = groups_[it->second].compute;
                p2p_receiver_.erase(it);
            }
        }
        if (options_.trace_spans) {
            options_.trace_spans(span);
        } else {
            spans_.push_back(span);
        }
    }
}

IterationResult Builder::collect(SimulationDetail* detail, double wall_s, const engine::RunStats& stats) {
    IterationResult r;
    const double T = stats.end_time.seconds();
    r.iteration_time = stats.end_time;
    r.slowest_group_factor = 0;
    for (const auto& g : groups_) r.slowest_group_factor = std::max(r.slowest_group_factor, g.speed);
    r.iteration_time_s = T;
    const double peak = sc_.system.device.peak_flops * e_.gpus();
    r.mfu = model_flops_per_iteration(sc_.model, e_.global_batch).value / (T * peak);
    int recomputed = 0;
    for (int v = 0; v < shape_.virtual_stages(); ++v) recomputed += e_.recomputed_layers(e_.layers_in_chunk(sc_.model.layers, v));
    const double fraction = e_.recompute == Recompute::full ? double(recomputed) / sc_.model.layers : 1.0;
    r.hfu = hardware_flops_per_iteration(sc_.model, e_.global_batch, e_.recompute, e_.attention, fraction,
                                         e_.recompute_modules).value / (T * peak);
    const int p = e_.pipeline;
    double busy_sum = 0;
    // The host gaps: their own lane per group (nothing else runs on it), the GPU idle meanwhile (each starts after
    // the group's previous task and its unit waits for it).
    std::int64_t host_ps = 0;
    for (int s = 0; s < p; ++s) {
        const Group& g = groups_[static_cast<std::size_t>(group_index(s, 0))];
        const double b = sim_.stream_busy(g.compute).seconds();
        r.stage_busy_s.push_back(b);
        busy_sum += b;
        if (g.host != g.compute) host_ps += sim_.stream_busy(g.host).ps();
    }
    const double busy_mean = busy_sum / p;
    // Exposed communication (strata/metrics.hpp), by kind. Tensor-parallel: the synchronous collectives of
    // replica 0's stages; pipeline: the union of the transfers (and receiver all-gathers) each of replica 0's
    // stages waits for in its calls; both per stage on average, rounded to the picosecond. Data-parallel: on
    // stage 0, replica 0, from the end of the last backward to the start of the optimizer step (the gradient
    // reduction, the replicas it waits for, the embedding sync; less the NaN check and the averaging pass, which compute) and from the end of the step to the end of the
    // stage's parameter all-gather (distributed optimizer, not overlapped), or, overlapped, the time its first forwards
    // wait for parameter buckets. The host gaps are counted apart; the rest of the idle time is bubble.
    const Group& g0 = groups_[0];
    auto per_stage = [p](std::int64_t ps) { return Time::from_ps((ps + p / 2) / p); };
    r.exposed_comm.tensor = per_stage(exposed_tp_ps_);
    r.exposed_comm.pipeline = per_stage(exposed_p2p_ps_);
    std::int64_t dp_ps = std::max<std::int64_t>(0, g0_optimizer_start_ - g0_last_backward_end_ - g0_average_ps_);
    if (g0_gather_end_ >= 0) dp_ps += std::max<std::int64_t>(0, g0_gather_end_ - g0_optimizer_end_);
    dp_ps += g0_gather_wait_ps_;
    r.exposed_comm.data_parallel = Time::from_ps(dp_ps);
    r.exposed_comm_s = r.exposed_comm.total().seconds();
    r.host_gap = per_stage(host_ps);
    if (offloading()) {
        r.host_copies_out = sim_.stream_busy(g0.d2h);
        r.host_copies_in = sim_.stream_busy(g0.h2d);
    }
    r.bubble_fraction = std::max(0.0, 1.0 - (busy_mean + r.exposed_comm_s + r.host_gap.seconds()) / T);
    // Memory.
    Bytes best{};
    for (const auto& g : groups_) {
        const engine::PoolReport pr = sim_.pool_report(g.pool);
        if (pr.peak > best) {
            best = pr.peak;
            r.peak_memory_stage = g.stage;
        }
        if (pr.over_capacity && !r.oom) {
            r.oom = true;
            std::string parts;
            for (std::size_t c = 0; c < pr.peak_breakdown.size(); ++c) {
                parts += fmt::format("{}{} {:.2f} GiB", c ? ", " : "", to_string(static_cast<MemoryCategory>(c)), pr.peak_breakdown[c].gib());
            }
            r.oom_detail = fmt::format("GPUs {}-{} (stage {}, replica {}) exceed {:.2f} GiB at t = {:.4f} s; peak {:.2f} GiB at "
                                       "t = {:.4f} s: {}",
                                       g.gpus.front(), g.gpus.back(), g.stage, g.replica, pr.capacity.gib(),
                                       pr.first_over_time.seconds(), pr.peak.gib(), pr.peak_time.seconds(), parts);
        }
    }
    r.peak_memory = best;
    const engine::PoolReport p0 = sim_.pool_report(g0.pool);
    r.first_stage_activation_peak = p0.peak_breakdown[index(MemoryCategory::activations)];
    r.events = stats.events;
    r.tasks = stats.tasks;
    r.wall_s = wall_s;
    r.representative_replicas = options_.representative_replicas;
    if (detail) {
        for (const engine::MemorySample& m : sim_.pool_timeline(g0.pool)) detail->stage0_memory.push_back({m.time, m.in_use});
        detail->memory_categories = memory_category_names();
        for (int s = 0; s < p; ++s) {
            const engine::PoolReport pr = sim_.pool_report(groups_[static_cast<std::size_t>(group_index(s, 0))].pool);
            detail->stage_peaks.push_back({pr.peak, pr.peak_time, pr.peak_breakdown});
        }
        // In time order per stage (the engine reports tasks as they end).
        std::stable_sort(intervals_.begin(), intervals_.end(), [](const StageInterval& a, const StageInterval& b) {
            return a.stage != b.stage ? a.stage < b.stage : a.start_s != b.start_s ? a.start_s < b.start_s : a.end_s < b.end_s;
        });
        detail->intervals = std::move(intervals_);
        if (options_.keep_trace) {
            // A process per GPU group (its t GPUs run in lockstep), a lane per stream; one more process holds the
            // data-parallel streams.
            Trace& tr = detail->trace;
            const char* names[] = {"compute", "tensor-parallel comm", "send forward", "send backward"};
            for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
                const Group& g = groups_[gi];
                const auto pid = static_cast<std::uint32_t>(gi);
                if (!traced(g.stage, g.replica)) {
                    tr.processes.emplace_back();  // not traced (--trace-groups): no name, no lanes
                    continue;
                }
                tr.processes.push_back(
                    fmt::format("GPUs {}-{} stage {} replica {}", g.gpus.front(), g.gpus.back(), g.stage, g.replica));
                const StreamId streams[] = {g.compute, g.tp, g.send_fwd, g.send_bwd};
                for (int i = 0; i < 4; ++i) tr.lanes.push_back({pid, streams[i], names[i]});
                if (offloading()) {
                    tr.lanes.push_back({pid, g.d2h, "activation copies to host"});
                    tr.lanes.push_back({pid, g.h2d, "activation copies from host"});
                }
                if (g.replica == 0) {
                    TraceCounter c{pid, {}};
                    for (const engine::MemorySample& m : sim_.pool_timeline(g.pool)) c.samples.push_back({m.time, m.in_use});
                    tr.memory.push_back(std::move(c));
                }
            }
            tr.processes.emplace_back("data-parallel");
            const auto dp_pid = static_cast<std::uint32_t>(groups_.size());
            for (int st = 0; st < p; ++st) {
                const auto s = static_cast<std::size_t>(st);
                if (!stream_traced_[dp_streams_[s]]) continue;
                tr.lanes.push_back({dp_pid, dp_streams_[s], fmt::format("stage {} gradient reduction", st)});
                if (!gather_streams_.empty())
                    tr.lanes.push_back({dp_pid, gather_streams_[s], fmt::format("stage {} parameter all-gather (overlapped)", st)});
            }
            tr.spans = std::move(spans_);
        }
    }
    return r;
}

}  // namespace strata::workload
