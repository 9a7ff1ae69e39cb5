// The discrete-event engine behind strata::engine::Simulator (include/strata/engine.hpp). Somewhat longer than
// 500 lines: the graph, the event loop and the result accessors share one Impl; the memory pools and the flow
// network live in their own files, and the streamed engine (issue 13) will restructure the rest.
//
// Event loop. Events sit in a binary min-heap ordered by (time in integer picoseconds, insertion
// sequence number), so equal-time events run in the order they were scheduled and a given graph always
// produces the same results. There are three kinds of event:
//   task_end    a compute task (or a transfer that carries no bytes) finishes;
//   flow_start  a transfer's latency has elapsed: its flow joins its links;
//   flow_done   a flow's scheduled completion; ignored if the flow's version has moved on (its rate
//               changed after the event was scheduled and a newer event replaced it).
// Tasks start without an event of their own: a stream's head task starts as soon as (a) the stream is
// free and (b) its last unfinished dependency finishes, i.e. at max(stream free time, last dependency
// end). Starting a task applies its memory allocations and schedules its end (or its flow start); ending
// it applies its frees, frees the stream, releases its successors and then tries to start the heads of
// the streams involved.
//
// Flows. Rates come from max-min fair water-filling (flow_network.hpp). Starting or ending a flow only
// marks its links dirty; the affected rates are recomputed once, just before simulated time advances past
// the current instant, and every flow whose rate changed gets a new flow_done event.
//
// Interference. A stream may be slowed while another carries bytes (slow_while_busy: NCCL kernels of a
// collective hold SMs that the compute kernels then lack). The slowed stream's running compute task keeps
// its remaining work at full speed; whenever the number of active interfering flows moves between zero and
// non-zero its rate changes, its progress is booked and a new task_end is scheduled under a new version (the
// old event becomes stale, as for flows).
//
// Memory. Per task, the memory effects and the successor lists are stored in compressed (CSR) arrays
// built at run(); per-task data is kept as a structure of arrays (about 50 bytes per task, plus 4 per
// dependency and 24 per memory effect), and transfer-only data (route, bytes, rate) lives in the flow
// network's side table.
//
// Stalls. If the event heap empties while tasks remain, every stream's head task is blocked on an
// unfinished dependency (a cycle, or a dependency queued behind the waiting task on some stream); run()
// throws SimulationError listing those heads and the unfinished tasks they wait for.
#include "strata/engine.hpp"
#include "strata/errors.hpp"

#include "flow_network.hpp"
#include "memory_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

namespace strata::engine {

namespace {

constexpr std::uint32_t kNoFlow = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t kNever = -1;  ///< start/end time of a task that did not start/end

enum EventType : std::uint64_t { task_end = 0, flow_start = 1, flow_done = 2 };

struct Event {
    std::int64_t time;
    std::uint64_t key;  ///< sequence number * 4 + EventType: orders equal times by insertion
    std::uint32_t task;
    std::uint32_t version;
};

struct EventLater {
    bool operator()(const Event& a, const Event& b) const {
        return a.time != b.time ? a.time > b.time : a.key > b.key;
    }
};

std::string format_time(std::int64_t ps) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f us", static_cast<double>(ps) * 1e-6);
    return buf;
}

}  // namespace

struct Simulator::Impl {
    struct Stream {
        std::string name;
        std::vector<TaskId> tasks;  ///< in execution order
        std::uint32_t head = 0;     ///< index in `tasks` of the next task to run
        bool busy = false;
        std::int64_t busy_ps = 0;
        // Interference (slow_while_busy): streams this one slows while it carries bytes; and, for a slowed
        // stream, its speed under interference, the interfering flows active now, and its running compute
        // task's remaining work (ps at full speed) since `since` at `rate`, its task_end version.
        std::vector<StreamId> slows;
        double slowed_speed = 1.0;
        std::uint32_t interfering = 0;
        double remaining_ps = 0;
        std::int64_t since = 0;
        double rate = 1.0;
        std::uint32_t version = 0;
    };

    // ---- graph ----
    std::vector<Stream> streams;
    std::vector<std::string> link_names;
    detail::FlowNetwork net;
    std::vector<TaskId> flow_task;  ///< flow index -> transfer task
    std::vector<detail::MemoryPool> pools;
    LabelFn label_fn;

    // Per task (structure of arrays).
    std::vector<StreamId> task_stream;
    std::vector<std::uint32_t> task_label;
    std::vector<std::int64_t> task_duration;  ///< compute: duration; transfer: latency (ps)
    std::vector<std::uint32_t> task_flow;     ///< flow index, or kNoFlow (compute or byte-less transfer)
    std::vector<std::uint8_t> task_is_transfer;

    // Built by add_dependency / add_memory_effect; turned into CSR arrays by run().
    std::vector<std::pair<TaskId, TaskId>> edges;
    std::vector<std::pair<TaskId, MemoryEffect>> pending_effects;

    // ---- run state ----
    bool ran = false;
    std::vector<std::int64_t> start;
    std::vector<std::int64_t> end;
    std::vector<std::uint32_t> waiting;      ///< unfinished dependencies per task
    std::vector<std::uint32_t> succ_offset;  ///< CSR: successors of t are succ[succ_offset[t] .. [t+1])
    std::vector<TaskId> succ;
    std::vector<std::uint32_t> effect_offset;  ///< CSR over `effects`; empty if there are none
    std::vector<MemoryEffect> effects;
    std::vector<Event> heap;
    std::uint64_t next_seq = 0;
    std::int64_t now = 0;
    std::uint64_t done = 0;
    RunStats stats;

    // ---- helpers ----
    void check_building(const char* what) const {
        if (ran)
            throw SimulationError(std::string("Simulator::") + what +
                                  ": the graph cannot change after run()");
    }
    void check_task(TaskId t, const char* what) const {
        if (t >= task_stream.size()) {
            throw SimulationError(std::string("Simulator::") + what + ": task id " + std::to_string(t) +
                                  " out of range (" + std::to_string(task_stream.size()) + " tasks)");
        }
    }
    void check_stream(StreamId s, const char* what) const {
        if (s >= streams.size()) {
            throw SimulationError(std::string("Simulator::") + what + ": stream id " + std::to_string(s) +
                                  " out of range (" + std::to_string(streams.size()) + " streams)");
        }
    }
    void check_pool(PoolId p, const char* what) const {
        if (p >= pools.size()) {
            throw SimulationError(std::string("Simulator::") + what + ": pool id " + std::to_string(p) +
                                  " out of range (" + std::to_string(pools.size()) + " pools)");
        }
    }
    void check_ran(const char* what) const {
        if (!ran)
            throw SimulationError(std::string("Simulator::") + what + ": results are only valid after run()");
    }

    TaskId new_task(StreamId stream, std::int64_t duration, std::uint32_t label, bool transfer,
                    std::uint32_t flow) {
        if (task_stream.size() >= std::numeric_limits<TaskId>::max() - 1) {
            throw SimulationError("Simulator: too many tasks");
        }
        const auto id = static_cast<TaskId>(task_stream.size());
        task_stream.push_back(stream);
        task_label.push_back(label);
        task_duration.push_back(duration);
        task_flow.push_back(flow);
        task_is_transfer.push_back(transfer ? 1 : 0);
        streams[stream].tasks.push_back(id);
        return id;
    }

    std::string describe(TaskId t) const {
        std::string s = "task #" + std::to_string(t);
        if (label_fn) {
            s += " '" + label_fn(task_label[t]) + "'";
        } else {
            s += " label " + std::to_string(task_label[t]);
        }
        return s;
    }

    void push(std::int64_t time, EventType type, TaskId task, std::uint32_t version = 0) {
        heap.push_back(Event{time, next_seq++ * 4 + type, task, version});
        std::push_heap(heap.begin(), heap.end(), EventLater{});
    }

    void change_pool(const MemoryEffect& e, std::int64_t delta) { pools[e.pool].change(e.category, delta, now); }

    void try_start(StreamId s) {
        Stream& st = streams[s];
        if (st.busy || st.head >= st.tasks.size()) return;
        const TaskId t = st.tasks[st.head];
        if (waiting[t] != 0) return;
        st.busy = true;
        start[t] = now;
        if (!effect_offset.empty()) {
            for (std::uint32_t i = effect_offset[t]; i < effect_offset[t + 1]; ++i) {
                if (effects[i].alloc_at_start.value != 0)
                    change_pool(effects[i], effects[i].alloc_at_start.value);
            }
        }
        if (task_duration[t] > std::numeric_limits<std::int64_t>::max() - now) {
            throw SimulationError("simulated time overflows: " + describe(t) + " on stream '" + st.name +
                                  "' starts at " + format_time(now) + " and lasts " +
                                  format_time(task_duration[t]));
        }
        if (st.slowed_speed < 1.0 && !task_is_transfer[t]) {
            st.remaining_ps = static_cast<double>(task_duration[t]);
            st.since = now;
            st.rate = st.interfering > 0 ? st.slowed_speed : 1.0;
            schedule_slowed_end(st, t);
            return;
        }
        const std::int64_t at = now + task_duration[t];
        push(at, task_flow[t] == kNoFlow ? task_end : flow_start, t, st.version);
    }

    /// Schedules the running compute task `t` of slowed stream `st` to end when its remaining work is done.
    void schedule_slowed_end(Stream& st, TaskId t) {
        const double left = std::ceil(st.remaining_ps / st.rate);
        if (left > static_cast<double>(std::numeric_limits<std::int64_t>::max() - now)) {
            throw SimulationError("simulated time overflows: " + describe(t) + " on stream '" + st.name + "'");
        }
        push(now + static_cast<std::int64_t>(left), task_end, t, ++st.version);
    }

    /// A flow of stream `s` starts (+1) or ends (-1): the streams it slows change speed when it is the first
    /// or the last interfering flow.
    void interfere(StreamId s, int delta) {
        for (StreamId v : streams[s].slows) {
            Stream& st = streams[v];
            const bool was = st.interfering > 0;
            st.interfering = static_cast<std::uint32_t>(static_cast<int>(st.interfering) + delta);
            const bool is = st.interfering > 0;
            if (was == is || !st.busy || st.slowed_speed >= 1.0) continue;
            const TaskId t = st.tasks[st.head];
            if (task_is_transfer[t]) continue;
            st.remaining_ps = std::max(0.0, st.remaining_ps - static_cast<double>(now - st.since) * st.rate);
            st.since = now;
            st.rate = is ? st.slowed_speed : 1.0;
            schedule_slowed_end(st, t);
        }
    }

    void finish(TaskId t, const ProgressFn& progress, std::uint64_t progress_every) {
        end[t] = now;
        if (!effect_offset.empty()) {
            for (std::uint32_t i = effect_offset[t]; i < effect_offset[t + 1]; ++i) {
                if (effects[i].free_at_end.value != 0) change_pool(effects[i], -effects[i].free_at_end.value);
            }
        }
        const StreamId s = task_stream[t];
        Stream& st = streams[s];
        st.busy = false;
        ++st.head;
        st.busy_ps += now - start[t];
        ++done;
        stats.end_time = Time::from_ps(now);
        for (std::uint32_t i = succ_offset[t]; i < succ_offset[t + 1]; ++i) {
            const TaskId u = succ[i];
            if (--waiting[u] == 0) try_start(task_stream[u]);
        }
        try_start(s);
        if (progress && progress_every != 0 && done % progress_every == 0) {
            progress(done, task_stream.size(), Time::from_ps(now));
        }
    }

    void build_successors() {
        const std::size_t n = task_stream.size();
        if (edges.size() >= std::numeric_limits<std::uint32_t>::max()) {
            throw SimulationError("Simulator::run: too many dependencies");
        }
        succ_offset.assign(n + 1, 0);
        waiting.assign(n, 0);
        for (const auto& [before, after] : edges) {
            ++succ_offset[before + 1];
            ++waiting[after];
        }
        for (std::size_t i = 0; i < n; ++i)
            succ_offset[i + 1] += succ_offset[i];
        succ.resize(edges.size());
        std::vector<std::uint32_t> fill(succ_offset.begin(), succ_offset.end() - 1);
        for (const auto& [before, after] : edges)
            succ[fill[before]++] = after;
        std::vector<std::pair<TaskId, TaskId>>().swap(edges);
    }

    void build_effects() {
        if (pending_effects.empty()) return;
        if (pending_effects.size() >= std::numeric_limits<std::uint32_t>::max()) {
            throw SimulationError("Simulator::run: too many memory effects");
        }
        const std::size_t n = task_stream.size();
        effect_offset.assign(n + 1, 0);
        for (const auto& pe : pending_effects)
            ++effect_offset[pe.first + 1];
        for (std::size_t i = 0; i < n; ++i)
            effect_offset[i + 1] += effect_offset[i];
        effects.resize(pending_effects.size());
        std::vector<std::uint32_t> fill(effect_offset.begin(), effect_offset.end() - 1);
        for (const auto& [task, effect] : pending_effects)
            effects[fill[task]++] = effect;
        std::vector<std::pair<TaskId, MemoryEffect>>().swap(pending_effects);
    }

    void init_pools() {
        for (detail::MemoryPool& p : pools) p.start();
    }

    [[noreturn]] void throw_stall() const {
        const std::size_t n = task_stream.size();
        // Heads of the streams that still have work (none is running: the event heap is empty).
        std::vector<TaskId> heads;
        for (const Stream& st : streams) {
            if (st.head < st.tasks.size()) heads.push_back(st.tasks[st.head]);
        }
        // (head task, index in `heads`), sorted by task, to find the heads among successors quickly.
        std::vector<std::pair<TaskId, std::size_t>> head_slot;
        for (std::size_t h = 0; h < heads.size(); ++h)
            head_slot.emplace_back(heads[h], h);
        std::sort(head_slot.begin(), head_slot.end());
        auto slot_of = [&](TaskId t) -> std::size_t {
            const auto it =
                std::lower_bound(head_slot.begin(), head_slot.end(), std::make_pair(t, std::size_t{0}));
            return it != head_slot.end() && it->first == t ? it->second : heads.size();
        };
        // Unfinished dependencies of each head, found by one pass over the successor lists.
        std::vector<std::vector<TaskId>> blockers(heads.size());
        for (TaskId u = 0; u < n; ++u) {
            if (end[u] != kNever) continue;
            for (std::uint32_t i = succ_offset[u]; i < succ_offset[u + 1]; ++i) {
                const std::size_t slot = slot_of(succ[i]);
                if (slot == heads.size()) continue;
                auto& list = blockers[slot];
                if (list.empty() || list.back() != u) list.push_back(u);
            }
        }
        auto is_head = [&](TaskId t) { return slot_of(t) != heads.size(); };

        std::string msg = "simulation stalled at t=" + format_time(now) + ": " + std::to_string(n - done) +
                          " of " + std::to_string(n) + " tasks unfinished, " + std::to_string(heads.size()) +
                          " stream(s) blocked (a dependency cycle, or a dependency queued behind the task "
                          "that waits for it)";
        constexpr std::size_t kMaxLines = 50;
        constexpr std::size_t kMaxBlockers = 8;
        for (std::size_t h = 0; h < heads.size() && h < kMaxLines; ++h) {
            const TaskId t = heads[h];
            msg += "\n  stream '" + streams[task_stream[t]].name + "': " + describe(t) + " waits for ";
            const auto& list = blockers[h];
            for (std::size_t k = 0; k < list.size() && k < kMaxBlockers; ++k) {
                const TaskId u = list[k];
                if (k > 0) msg += ", ";
                msg += describe(u) + " on stream '" + streams[task_stream[u]].name + "'";
                if (u == t) {
                    msg += " (itself)";
                } else if (!is_head(u)) {
                    const Stream& su = streams[task_stream[u]];
                    msg += " (queued behind " + describe(su.tasks[su.head]) + ")";
                } else {
                    msg += " (blocked)";
                }
            }
            if (list.size() > kMaxBlockers)
                msg += ", ... and " + std::to_string(list.size() - kMaxBlockers) + " more";
        }
        if (heads.size() > kMaxLines)
            msg += "\n  ... and " + std::to_string(heads.size() - kMaxLines) + " more";
        throw SimulationError(msg);
    }

    RunStats run(const ProgressFn& progress, std::uint64_t progress_every) {
        if (ran) throw SimulationError("Simulator::run: run() may only be called once");
        ran = true;
        const std::size_t n = task_stream.size();
        build_successors();
        build_effects();
        init_pools();
        start.assign(n, kNever);
        end.assign(n, kNever);
        heap.reserve(std::min<std::size_t>(streams.size() * 2 + 16, 1u << 20));

        now = 0;
        for (StreamId s = 0; s < streams.size(); ++s)
            try_start(s);

        for (;;) {
            if (net.dirty() && (heap.empty() || heap.front().time > now)) {
                ++stats.rate_updates;
                for (std::uint32_t f : net.recompute(now)) {
                    push(net.completion_ps(f), flow_done, flow_task[f], net.version(f));
                }
                continue;
            }
            if (heap.empty()) break;
            std::pop_heap(heap.begin(), heap.end(), EventLater{});
            const Event ev = heap.back();
            heap.pop_back();
            now = ev.time;
            ++stats.events;
            const TaskId t = ev.task;
            switch (static_cast<EventType>(ev.key & 3)) {
                case task_end:
                    if (ev.version != streams[task_stream[t]].version) break;  // stale: rate changed since
                    finish(t, progress, progress_every);
                    break;
                case flow_start:
                    net.activate(task_flow[t], now);
                    ++stats.flows;
                    if (!streams[task_stream[t]].slows.empty()) interfere(task_stream[t], +1);
                    break;
                case flow_done:
                    if (ev.version != net.version(task_flow[t])) break;  // stale: rescheduled since
                    net.deactivate(task_flow[t]);
                    if (!streams[task_stream[t]].slows.empty()) interfere(task_stream[t], -1);
                    finish(t, progress, progress_every);
                    break;
            }
        }

        if (done < n) throw_stall();
        stats.tasks = done;
        if (progress) progress(done, n, Time::from_ps(now));
        return stats;
    }
};

Simulator::Simulator() : impl_(std::make_unique<Impl>()) {}
Simulator::~Simulator() = default;
Simulator::Simulator(Simulator&&) noexcept = default;
Simulator& Simulator::operator=(Simulator&&) noexcept = default;

StreamId Simulator::add_stream(std::string name) {
    impl_->check_building("add_stream");
    Impl::Stream st;
    st.name = std::move(name);
    impl_->streams.push_back(std::move(st));
    return static_cast<StreamId>(impl_->streams.size() - 1);
}

void Simulator::slow_while_busy(StreamId busy, StreamId slowed, double speed) {
    impl_->check_building("slow_while_busy");
    impl_->check_stream(busy, "slow_while_busy");
    impl_->check_stream(slowed, "slow_while_busy");
    if (!(speed > 0.0 && speed <= 1.0)) {
        throw SimulationError("Simulator::slow_while_busy: speed must be in (0, 1], got " + std::to_string(speed));
    }
    if (busy == slowed) throw SimulationError("Simulator::slow_while_busy: a stream cannot slow itself");
    if (speed >= 1.0) return;  // no interference
    // No search for an earlier identical pair (O(d) per call, O(d^2) per stage): a pair added twice counts each
    // flow twice, which changes nothing (only zero / non-zero interfering flows matter).
    impl_->streams[busy].slows.push_back(slowed);
    auto& st = impl_->streams[slowed];
    st.slowed_speed = std::min(st.slowed_speed, speed);
}

LinkId Simulator::add_link(std::string name, BytesPerSecond bandwidth) {
    impl_->check_building("add_link");
    if (!(bandwidth.value > 0.0) || !std::isfinite(bandwidth.value)) {
        throw SimulationError("Simulator::add_link: link '" + name + "' needs a finite bandwidth > 0, got " +
                              std::to_string(bandwidth.value) + " B/s");
    }
    impl_->link_names.push_back(std::move(name));
    return impl_->net.add_link(bandwidth.value);
}

PoolId Simulator::add_pool(std::string name, Bytes capacity, std::vector<std::string> categories,
                           bool keep_timeline) {
    impl_->check_building("add_pool");
    impl_->pools.emplace_back(std::move(name), capacity, std::move(categories), keep_timeline);
    return static_cast<PoolId>(impl_->pools.size() - 1);
}

void Simulator::add_static(PoolId pool, std::uint32_t category, Bytes bytes) {
    impl_->check_building("add_static");
    impl_->check_pool(pool, "add_static");
    impl_->pools[pool].add_static(category, bytes);
}

TaskId Simulator::add_compute(StreamId stream, Time duration, std::uint32_t label) {
    impl_->check_building("add_compute");
    impl_->check_stream(stream, "add_compute");
    if (duration.ps() < 0) {
        throw SimulationError("Simulator::add_compute: negative duration on stream '" +
                              impl_->streams[stream].name + "'");
    }
    return impl_->new_task(stream, duration.ps(), label, false, kNoFlow);
}

TaskId Simulator::add_transfer(StreamId stream, std::vector<LinkUse> route, Bytes bytes, Time latency,
                               std::uint32_t label) {
    Impl& im = *impl_;
    im.check_building("add_transfer");
    im.check_stream(stream, "add_transfer");
    const std::string& sname = im.streams[stream].name;
    if (latency.ps() < 0)
        throw SimulationError("Simulator::add_transfer: negative latency on stream '" + sname + "'");
    if (bytes.value < 0)
        throw SimulationError("Simulator::add_transfer: negative size on stream '" + sname + "'");
    // Validate the route and merge repeated links (multiplicities add up), keeping first-seen order.
    std::vector<LinkUse> merged;
    merged.reserve(route.size());
    for (const LinkUse& use : route) {
        if (use.link >= im.net.link_count()) {
            throw SimulationError("Simulator::add_transfer: link id " + std::to_string(use.link) +
                                  " out of range (" + std::to_string(im.net.link_count()) +
                                  " links) on stream '" + sname + "'");
        }
        if (use.multiplicity == 0) {
            throw SimulationError("Simulator::add_transfer: multiplicity 0 on link '" +
                                  im.link_names[use.link] + "' (stream '" + sname + "')");
        }
        auto it =
            std::find_if(merged.begin(), merged.end(), [&](const LinkUse& m) { return m.link == use.link; });
        if (it != merged.end()) {
            it->multiplicity += use.multiplicity;
        } else {
            merged.push_back(use);
        }
    }
    std::uint32_t flow = kNoFlow;
    if (!merged.empty() && bytes.value > 0) {
        flow = im.net.add_flow(merged, static_cast<double>(bytes.value));
        im.flow_task.push_back(static_cast<TaskId>(im.task_stream.size()));
    }
    return im.new_task(stream, latency.ps(), label, true, flow);
}

void Simulator::add_dependency(TaskId before, TaskId after) {
    impl_->check_building("add_dependency");
    impl_->check_task(before, "add_dependency");
    impl_->check_task(after, "add_dependency");
    impl_->edges.emplace_back(before, after);
}

void Simulator::add_memory_effect(TaskId task, MemoryEffect effect) {
    Impl& im = *impl_;
    im.check_building("add_memory_effect");
    im.check_task(task, "add_memory_effect");
    im.check_pool(effect.pool, "add_memory_effect");
    const auto& p = im.pools[effect.pool];
    p.check_category(effect.category, "add_memory_effect");
    if (effect.alloc_at_start.value < 0 || effect.free_at_end.value < 0) {
        throw SimulationError("Simulator::add_memory_effect: negative size for pool '" + p.name() + "'");
    }
    if (effect.alloc_at_start.value == 0 && effect.free_at_end.value == 0) return;
    im.pending_effects.emplace_back(task, effect);
}

void Simulator::set_label_formatter(LabelFn fn) {
    impl_->label_fn = std::move(fn);
}

RunStats Simulator::run(const ProgressFn& progress, std::uint64_t progress_every) {
    return impl_->run(progress, progress_every);
}

std::size_t Simulator::task_count() const {
    return impl_->task_stream.size();
}
std::size_t Simulator::stream_count() const {
    return impl_->streams.size();
}
std::size_t Simulator::pool_count() const {
    return impl_->pools.size();
}

Time Simulator::start_time(TaskId task) const {
    impl_->check_task(task, "start_time");
    impl_->check_ran("start_time");
    return Time::from_ps(impl_->start[task]);
}

Time Simulator::end_time(TaskId task) const {
    impl_->check_task(task, "end_time");
    impl_->check_ran("end_time");
    return Time::from_ps(impl_->end[task]);
}

StreamId Simulator::stream_of(TaskId task) const {
    impl_->check_task(task, "stream_of");
    return impl_->task_stream[task];
}

std::uint32_t Simulator::label_of(TaskId task) const {
    impl_->check_task(task, "label_of");
    return impl_->task_label[task];
}

bool Simulator::is_transfer(TaskId task) const {
    impl_->check_task(task, "is_transfer");
    return impl_->task_is_transfer[task] != 0;
}

const std::string& Simulator::stream_name(StreamId stream) const {
    impl_->check_stream(stream, "stream_name");
    return impl_->streams[stream].name;
}

Time Simulator::stream_busy(StreamId stream) const {
    impl_->check_stream(stream, "stream_busy");
    impl_->check_ran("stream_busy");
    return Time::from_ps(impl_->streams[stream].busy_ps);
}

PoolReport Simulator::pool_report(PoolId pool) const {
    impl_->check_pool(pool, "pool_report");
    impl_->check_ran("pool_report");
    return impl_->pools[pool].report();
}

std::span<const MemorySample> Simulator::pool_timeline(PoolId pool) const {
    impl_->check_pool(pool, "pool_timeline");
    impl_->check_ran("pool_timeline");
    return impl_->pools[pool].timeline();
}

}  // namespace strata::engine
