// The discrete-event engine behind strata::engine::Simulator (include/strata/engine.hpp). Somewhat longer than
// 500 lines: the graph, the event loop and the result accessors share one Impl; the memory pools and the flow
// network live in their own files.
//
// Event loop. Events are taken in (time in integer picoseconds, insertion sequence number) order, so equal-time
// events run in the order they were scheduled and a given graph always produces the same results. Events scheduled
// for the current instant (zero-length tasks, flows done at once) go to a FIFO, which keeps that order; later ones
// to a radix queue (event_queue.hpp: simulated time never goes back), in front of which the next 8 or more wait in a
// small ordered window: the slots an event reads are prefetched when it enters the window and the slots it reads
// next (its first successor, its stream's next task) halfway through, so that with thousands of GPU groups
// interleaved in time the event loop does not wait on memory for each of them.
// There are three kinds of event:
//   task_end    a stream's running compute task (or a transfer that moves no bytes through the flow network)
//               finishes; ignored if the stream's version has moved on (a slowed task rescheduled);
//   flow_start  a transfer's latency has elapsed: its flow opens and joins its links;
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
// Storage. A task is a 64-byte slot of one array; its first successor sits in the slot, further successors and
// its memory effects are linked lists in two pooled arrays, in the order they were added. Without streaming every task keeps its
// slot (the per-task results stay readable); with it (set_streaming) a finished task is reported to the
// observer and its slot, edges and effect nodes are reused, so memory follows the tasks alive at once, not
// the tasks of the run. Flow state (flow_network.hpp) exists only from a transfer's flow start to its end;
// routes are interned once and shared by every transfer over them.
//
// Streaming. A stream registered with refill_when_empty asks the refill function for work at the start and
// whenever its queue runs dry; work added from the callback (on any stream) is started once it returns.
// Dependencies may name finished tasks (satisfied at once); holds stand for dependencies on tasks that the
// workload has not generated yet.
//
// Stalls. If the event queue empties while tasks remain, every stream's head task is blocked on an
// unfinished dependency (a cycle, or a dependency queued behind the waiting task on some stream); run()
// throws SimulationError listing those heads and the unfinished tasks they wait for.
#include "strata/engine.hpp"
#include "strata/errors.hpp"

#include "event_queue.hpp"
#include "flow_network.hpp"
#include "huge_pages.hpp"
#include "memory_pool.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

namespace strata::engine {

namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t kNever = -1;  ///< start/end time of a task that did not start/end

enum EventType : std::uint64_t { task_end = 0, flow_start = 1, flow_done = 2 };

/// `target`: task_end -> the stream whose running task ends; flow_start -> the task's slot; flow_done -> the
/// flow's slot. Stale task_end and flow_done events are recognised by their version.
// Event (event_queue.hpp): key = sequence number * 4 + EventType; slot: for task_end, the running task's slot
// (prefetched ahead), kNone otherwise.
using detail::Event;

std::string format_time(std::int64_t ps) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f us", static_cast<double>(ps) * 1e-6);
    return buf;
}

std::uint32_t slot_of(TaskId t) { return static_cast<std::uint32_t>(t & 0xffffffffu); }
std::uint32_t generation_of(TaskId t) { return static_cast<std::uint32_t>(t >> 32); }

}  // namespace

struct Simulator::Impl {
    enum class Phase : std::uint8_t { building, running, done };
    enum class State : std::uint8_t { pending, running, finished };

    /// A task's slot: one cache line.
    struct alignas(64) Task {
        std::int64_t duration = 0;  ///< compute: duration; transfer: latency (ps)
        std::int64_t start = kNever;
        std::int64_t bytes = 0;      ///< transfer
        std::uint32_t waiting = 0;   ///< unfinished dependencies + holds
        std::uint32_t stream = 0;
        std::uint32_t label = 0;
        std::uint32_t route = kNone; ///< transfer with bytes to move; kNone otherwise
        std::uint32_t first_succ = kNone;  ///< its first successor (most tasks have one: no edge node)
        std::uint32_t succ_head = kNone;   ///< the others, in order, as a list of edge nodes
        std::uint32_t effect_head = kNone;
        std::uint32_t next = kNone;  ///< next task of its stream
        std::uint32_t generation = 0;
        State state = State::pending;
        bool transfer = false;
        bool work = false;    ///< compute on a stream with idle headroom: may be shortened (its max saving in `bytes`)
        bool resume = false;  ///< work whose stream's idle time before it accrues headroom credit
    };
    static_assert(sizeof(Task) == 64, "a task's slot is one cache line: no room for another field");
    struct Edge {
        std::uint32_t to;    ///< successor slot (alive: it waits for this task)
        std::uint32_t next;  ///< next edge of the same task, or kNone
    };
    struct EffectNode {
        MemoryEffect effect;
        std::uint32_t next;
    };
    /// A stream's hot state (its name and the streams it slows live apart).
    struct alignas(64) Stream {  // one cache line
        std::uint32_t head = kNone, tail = kNone;  ///< its unfinished tasks in execution order, linked by Task::next
        bool busy = false;
        bool refill = false;
        bool slows_others = false;
        bool headroom = false;  ///< set_idle_headroom: its state in `headrooms`
        std::int64_t busy_ps = 0;
        // Interference (slow_while_busy): for a slowed stream, its speed under interference, the interfering flows
        // active now, and its running compute task's remaining work (ps at full speed) since `since` at `rate`, its
        // task_end version.
        double slowed_speed = 1.0;
        std::uint32_t interfering = 0;
        std::uint32_t version = 0;
        double remaining_ps = 0;
        std::int64_t since = 0;
        double rate = 1.0;
    };
    static_assert(sizeof(Stream) == 64);

    // ---- graph ----
    detail::BigVector<Stream> streams;
    std::vector<std::string> stream_names;
    std::vector<std::vector<StreamId>> stream_slows;  ///< streams each one slows while it carries bytes
    /// A stream's idle headroom (set_idle_headroom): credit in ps it may take off its work tasks, at most `cap`.
    struct Headroom {
        std::int64_t cap = 0, credit = 0;
        std::int64_t last_end = 0;  ///< the end of its last work task
        double accrual = 0;         ///< credit per ps of idle time before a resuming task
    };
    std::vector<Headroom> headrooms;  ///< per stream (empty until a stream is given one)
    std::vector<std::string> link_names;
    std::vector<std::uint32_t>
        route_scratch;  ///< add_route: per link, its place in the route being merged + 1
    bool routes_sealed = false;  ///< seal_routes() was called: links bundled, no route may be added
    detail::FlowNetwork net;
    detail::BigVector<std::uint32_t> flow_task;  ///< flow slot -> task slot
    std::vector<detail::MemoryPool> pools;
    LabelFn label_fn;

    detail::BigVector<Task> tasks;
    detail::BigVector<std::int64_t> ends;  ///< per task, without streaming only (per-task results)
    std::vector<std::uint32_t> free_tasks;
    detail::BigVector<Edge> edges;
    std::uint32_t free_edge = kNone;
    detail::BigVector<EffectNode> effect_nodes;
    std::uint32_t free_effect = kNone;

    // ---- streaming ----
    bool streaming = false;
    TaskObserver observer;
    RefillFn refill;
    std::uint64_t expected = 0;
    bool in_callback = false;
    std::vector<StreamId> to_try;  ///< streams that may be able to start a task after the callback

    // ---- run state ----
    Phase phase = Phase::building;
    /// Events after `now`: the next ones in a window (a ring, in order, at least kAhead of them whenever the queue
    /// behind it has events; it grows when events are scheduled into it), the rest in a radix queue. An event's state
    /// is prefetched when it enters the window and its followers' halfway through, so that the slots it reads are
    /// in cache by the time it runs.
    static constexpr std::size_t kAhead = 12;
    std::vector<Event> ahead = std::vector<Event>(16);  ///< a ring; its size is a power of two
    std::size_t ahead_first = 0;
    std::size_t ahead_count = 0;
    detail::RadixEventQueue heap;
    std::vector<Event> at_now;  ///< events scheduled during the current instant for it, in order
    std::size_t at_now_read = 0;
    std::uint64_t next_seq = 0;
    std::int64_t now = 0;
    std::uint64_t created = 0;
    std::uint64_t done = 0;
    RunStats stats;

    // ---- helpers ----
    // The checks below run on every call that adds work: the test is inline, the message built out of line.
    void check_adding(const char* what) const {
        if (phase == Phase::building || (phase == Phase::running && in_callback)) [[likely]]
            return;
        throw_adding(what);
    }
    [[noreturn, gnu::cold, gnu::noinline]] void throw_adding(const char* what) const {
        if (phase == Phase::done)
            throw SimulationError(std::string("Simulator::") + what + ": the graph cannot change after run()");
        throw SimulationError(std::string("Simulator::") + what + ": work can only be added from a refill callback");
    }
    void check_building(const char* what) const {
        if (phase != Phase::building)
            throw SimulationError(std::string("Simulator::") + what + ": only before run()");
    }
    /// The live task `t` names, or throws.
    Task& live(TaskId t, const char* what) {
        const std::uint32_t s = slot_of(t);
        if (s < tasks.size() && tasks[s].generation == generation_of(t)) [[likely]]
            return tasks[s];
        throw_not_live(t, what);
    }
    [[noreturn, gnu::cold, gnu::noinline]] void throw_not_live(TaskId t, const char* what) const {
        const std::uint32_t s = slot_of(t);
        throw SimulationError(std::string("Simulator::") + what + ": task id " + std::to_string(t) +
                              (s >= tasks.size() ? " out of range" : " has finished (its storage was reused)"));
    }
    /// Whether `t` names a task that has finished (or whose slot was reused since); throws for an id never issued.
    bool finished(TaskId t, const char* what) const {
        const std::uint32_t s = slot_of(t);
        if (generation_of(t) > tasks[s].generation) [[unlikely]]
            throw_never_issued(t, what);
        return tasks[s].generation != generation_of(t) || tasks[s].state == State::finished;
    }
    [[noreturn, gnu::cold, gnu::noinline]] static void throw_never_issued(TaskId t, const char* what) {
        throw SimulationError(std::string("Simulator::") + what + ": task id " + std::to_string(t) + " was never issued");
    }
    [[noreturn, gnu::cold, gnu::noinline]] void throw_started(TaskId t, const char* what) const {
        throw SimulationError(std::string("Simulator::") + what + ": " + describe_slot(slot_of(t)) + " has started already");
    }
    /// A task for the per-task result accessors (without streaming).
    const Task& kept(TaskId t, const char* what) const {
        if (streaming)
            throw SimulationError(std::string("Simulator::") + what + ": per-task results are not kept when streaming");
        const std::uint32_t s = slot_of(t);
        if (s >= tasks.size() || generation_of(t) != 0) {
            throw SimulationError(std::string("Simulator::") + what + ": task id " + std::to_string(t) + " out of range (" +
                                  std::to_string(tasks.size()) + " tasks)");
        }
        return tasks[s];
    }
    void check_stream(StreamId s, const char* what) const {
        if (s >= streams.size()) [[unlikely]]
            throw_out_of_range("stream", s, streams.size(), what);
    }
    void check_pool(PoolId p, const char* what) const {
        if (p >= pools.size()) [[unlikely]]
            throw_out_of_range("pool", p, pools.size(), what);
    }
    [[noreturn, gnu::cold, gnu::noinline]] static void throw_out_of_range(const char* kind, std::uint32_t id,
                                                                         std::size_t count, const char* what) {
        throw SimulationError(std::string("Simulator::") + what + ": " + kind + " id " + std::to_string(id) +
                              " out of range (" + std::to_string(count) + " " + kind + "s)");
    }
    void check_ran(const char* what) const {
        if (phase != Phase::done)
            throw SimulationError(std::string("Simulator::") + what + ": results are only valid after run()");
    }

    TaskId new_task(StreamId stream, std::int64_t duration, std::uint32_t label, bool transfer, std::uint32_t route,
                    std::int64_t bytes) {
        std::uint32_t s = 0;
        if (!free_tasks.empty()) {
            s = free_tasks.back();
            free_tasks.pop_back();
        } else {
            if (tasks.size() >= kNone - 1) throw SimulationError("Simulator: too many tasks alive at once");
            s = static_cast<std::uint32_t>(tasks.size());
            tasks.emplace_back();
        }
        Task& k = tasks[s];
        const std::uint32_t gen = k.generation;
        k = Task{};
        k.generation = gen;
        k.duration = duration;
        k.bytes = bytes;
        k.stream = stream;
        k.label = label;
        k.route = route;
        k.transfer = transfer;
        Stream& st = streams[stream];
        if (st.tail == kNone) {
            st.head = s;
        } else {
            tasks[st.tail].next = s;
        }
        st.tail = s;
        ++created;
        if (phase == Phase::running) to_try.push_back(stream);
        return (static_cast<TaskId>(gen) << 32) | s;
    }

    std::string describe_slot(std::uint32_t s) const {
        std::string d = "task #" + std::to_string(s);
        if (label_fn) {
            d += " '" + label_fn(tasks[s].label) + "'";
        } else {
            d += " label " + std::to_string(tasks[s].label);
        }
        return d;
    }

    void push(std::int64_t time, EventType type, std::uint32_t target, std::uint32_t version = 0,
              std::uint32_t slot = kNone) {
        const Event ev{time, next_seq++ * 4 + type, target, version, slot};
        if (time == now) {
            // Later in (time, sequence) order than every event in the queue at `now` (those were scheduled before
            // this instant began) and earlier than every event after `now`: a FIFO keeps that order without the heap.
            at_now.push_back(ev);
            return;
        }
        if (ahead_count > 0 && detail::later(ahead_at(ahead_count - 1), ev)) {
            insert_ahead(ev);
        } else if (ahead_count < kAhead) {
            // The radix queue is empty (it only holds events once the window has kAhead).
            ahead_at(ahead_count++) = ev;
            prefetch_state(ev);
        } else {
            // No earlier than the window's last event, so no earlier than the last one the queue gave out.
            heap.push(ev);
        }
    }
    /// Puts `ev`, earlier than the window's last event, in its place in the window (which grows when full: its
    /// events never go back to the radix queue, whose keys only increase).
    void insert_ahead(const Event& ev) {
        if (ahead_count == ahead.size()) {
            std::vector<Event> bigger(ahead.size() * 2);
            for (std::size_t i = 0; i < ahead_count; ++i) bigger[i] = ahead_at(i);
            ahead.swap(bigger);
            ahead_first = 0;
        }
        std::size_t i = ahead_count;
        while (i > 0 && detail::later(ahead_at(i - 1), ev)) {
            ahead_at(i) = ahead_at(i - 1);
            --i;
        }
        ahead_at(i) = ev;
        ++ahead_count;
        prefetch_state(ev);
    }
    Event& ahead_at(std::size_t i) { return ahead[(ahead_first + i) & (ahead.size() - 1)]; }
    [[nodiscard]] const Event& ahead_front() const { return ahead[ahead_first]; }
    /// Asks the memory system for the slots an event will read first (it is kAhead events away).
    void prefetch_state(const Event& ev) const {
        switch (static_cast<EventType>(ev.key & 3)) {
            case task_end:
                __builtin_prefetch(&streams[ev.target]);
                __builtin_prefetch(&tasks[ev.slot]);
                break;
            case flow_start: __builtin_prefetch(&tasks[ev.target]); break;
            case flow_done:
                net.prefetch_flow(ev.target);
                __builtin_prefetch(&flow_task[ev.target]);
                break;
        }
    }
    /// Halfway through the window the event's own record has arrived: asks for what it will read next (a task end:
    /// its first successor and the next task of its stream; a flow: its route's link records).
    void prefetch_followers(const Event& ev) const {
        switch (static_cast<EventType>(ev.key & 3)) {
            case task_end: {
                const Task& k = tasks[ev.slot];
                if (k.first_succ != kNone) __builtin_prefetch(&tasks[k.first_succ]);
                if (k.next != kNone) __builtin_prefetch(&tasks[k.next]);
                if (k.effect_head != kNone) __builtin_prefetch(&effect_nodes[k.effect_head]);
                break;
            }
            case flow_start:
                if (tasks[ev.target].route != kNone) net.prefetch_route(tasks[ev.target].route);
                __builtin_prefetch(&streams[tasks[ev.target].stream]);
                break;
            case flow_done:
                net.prefetch_flow_links(ev.target);
                __builtin_prefetch(&tasks[0] + flow_task[ev.target]);
                break;
        }
    }
    /// A quarter of the window before it runs, the followers have arrived: asks for the streams they will try to start
    /// (and, for a flow's end, its task's first successor), and for a flow's start or end the places in its links' flow
    /// lists that it will write.
    void prefetch_followers2(const Event& ev) const {
        switch (static_cast<EventType>(ev.key & 3)) {
            case task_end: {
                const Task& k = tasks[ev.slot];
                if (k.first_succ != kNone) __builtin_prefetch(&streams[tasks[k.first_succ].stream]);
                // The pool its memory effects change as it ends, and the effects of its stream's next task (which
                // starts next).
                if (k.effect_head != kNone) pools[effect_nodes[k.effect_head].effect.pool].prefetch();
                if (k.next != kNone && tasks[k.next].effect_head != kNone)
                    __builtin_prefetch(&effect_nodes[tasks[k.next].effect_head]);
                break;
            }
            case flow_start:
                if (tasks[ev.target].route != kNone) net.prefetch_route_lists(tasks[ev.target].route);
                break;
            case flow_done: {
                net.prefetch_flow_lists(ev.target);
                const std::uint32_t t = flow_task[ev.target];
                if (t >= tasks.size()) break;
                const Task& k = tasks[t];
                __builtin_prefetch(&streams[k.stream]);
                if (k.first_succ != kNone) __builtin_prefetch(&tasks[k.first_succ]);
                break;
            }
        }
    }
    /// Whether an event is due at `now`.
    [[nodiscard]] bool due_now() const {
        return at_now_read < at_now.size() || (ahead_count > 0 && ahead_front().time == now);
    }
    [[nodiscard]] bool queue_empty() const { return ahead_count == 0 && at_now_read == at_now.size(); }
    /// The next event in (time, sequence) order.
    Event pop() {
        if (ahead_count > 0 && ahead_front().time == now) return pop_ahead();
        if (at_now_read < at_now.size()) {
            const Event ev = at_now[at_now_read++];
            if (at_now_read == at_now.size()) {
                at_now.clear();
                at_now_read = 0;
            }
            return ev;
        }
        return pop_ahead();
    }
    /// The window's first event; below kAhead the radix queue's first takes the last place (so the window holds
    /// kAhead while the queue has events) and its state is asked for.
    Event pop_ahead() {
        const Event top = ahead_front();
        ahead_first = (ahead_first + 1) & (ahead.size() - 1);
        --ahead_count;
        if (ahead_count < kAhead && !heap.empty()) {
            const Event next = heap.pop();
            ahead_at(ahead_count++) = next;
            prefetch_state(next);
        }
        if (ahead_count > kAhead / 2) prefetch_followers(ahead_at(kAhead / 2 - 1));
        if (ahead_count > kAhead / 4) prefetch_followers2(ahead_at(kAhead / 4 - 1));
        return top;
    }

    void try_start(StreamId sid) {
        Stream& st = streams[sid];
        if (st.busy || st.head == kNone) return;
        const std::uint32_t s = st.head;
        Task& k = tasks[s];
        if (k.waiting != 0) return;
        st.busy = true;
        k.state = State::running;
        k.start = now;
        for (std::uint32_t e = k.effect_head; e != kNone; e = effect_nodes[e].next) {
            const MemoryEffect& m = effect_nodes[e].effect;
            if (m.alloc_at_start.value != 0) pools[m.pool].change(m.category, m.alloc_at_start.value, now);
        }
        if (k.duration > std::numeric_limits<std::int64_t>::max() - now) {
            throw SimulationError("simulated time overflows: " + describe_slot(s) + " on stream '" + stream_names[sid] +
                                  "' starts at " + format_time(now) + " and lasts " + format_time(k.duration));
        }
        if (k.work) take_headroom(sid, k);
        if (st.slowed_speed < 1.0 && !k.transfer) {
            st.remaining_ps = static_cast<double>(k.duration);
            st.since = now;
            st.rate = st.interfering > 0 ? st.slowed_speed : 1.0;
            schedule_slowed_end(st, sid, s);
            return;
        }
        if (k.route != kNone) {
            // The flow opens after the transfer's latency, often only a few events from now, too late for the window's
            // halfway prefetch: ask for its route's link records while the task is at hand.
            net.prefetch_route(k.route);
            push(now + k.duration, flow_start, s);
        } else {
            push(now + k.duration, task_end, sid, st.version, s);
        }
    }

    /// A work task starting on a stream with idle headroom: a resuming one first accrues credit for the idle time
    /// since the stream's last work task ended; then it takes what it may of the credit off its duration.
    void take_headroom(StreamId sid, Task& k) {
        Headroom& h = headrooms[sid];
        if (k.resume) {
            const double gained = static_cast<double>(now - h.last_end) * h.accrual;
            h.credit += static_cast<std::int64_t>(std::min(gained, static_cast<double>(h.cap - h.credit)));
        }
        const std::int64_t save = std::min({h.credit, k.bytes, k.duration});
        k.duration -= save;
        h.credit -= save;
    }

    /// Schedules the running compute task of slowed stream `st` to end when its remaining work is done.
    void schedule_slowed_end(Stream& st, StreamId sid, std::uint32_t s) {
        const double left = std::ceil(st.remaining_ps / st.rate);
        if (left > static_cast<double>(std::numeric_limits<std::int64_t>::max() - now)) {
            throw SimulationError("simulated time overflows: " + describe_slot(s) + " on stream '" + stream_names[sid] + "'");
        }
        push(now + static_cast<std::int64_t>(left), task_end, sid, ++st.version, s);
    }

    /// A flow of stream `s` starts (+1) or ends (-1): the streams it slows change speed when it is the first
    /// or the last interfering flow.
    void interfere(StreamId s, int delta) {
        for (StreamId v : stream_slows[s]) {
            Stream& st = streams[v];
            const bool was = st.interfering > 0;
            st.interfering = static_cast<std::uint32_t>(static_cast<int>(st.interfering) + delta);
            const bool is = st.interfering > 0;
            if (was == is || !st.busy || st.slowed_speed >= 1.0) continue;
            const std::uint32_t t = st.head;
            if (tasks[t].transfer) continue;
            st.remaining_ps = std::max(0.0, st.remaining_ps - static_cast<double>(now - st.since) * st.rate);
            st.since = now;
            st.rate = is ? st.slowed_speed : 1.0;
            schedule_slowed_end(st, v, t);
        }
    }

    /// Asks for work until the stream has a task or its work is over.
    void call_refill(StreamId s) {
        Stream& st = streams[s];
        in_callback = true;
        try {
            while (st.refill && st.head == kNone) {
                if (!refill(s)) st.refill = false;
            }
        } catch (...) {
            in_callback = false;
            throw;
        }
        in_callback = false;
    }

    /// Starts what the last callback (or the finished task) made ready.
    void drain_to_try() {
        for (std::size_t i = 0; i < to_try.size(); ++i) try_start(to_try[i]);
        to_try.clear();
    }

    void finish(std::uint32_t s, const ProgressFn& progress, std::uint64_t progress_every) {
        Task& k = tasks[s];
        if (!streaming) {
            if (ends.size() <= s) ends.resize(tasks.size(), kNever);
            ends[s] = now;
        }
        k.state = State::finished;
        for (std::uint32_t e = k.effect_head; e != kNone;) {
            const MemoryEffect& m = effect_nodes[e].effect;
            if (m.free_at_end.value != 0) pools[m.pool].change(m.category, -m.free_at_end.value, now);
            const std::uint32_t next = effect_nodes[e].next;
            if (streaming) {
                effect_nodes[e].next = free_effect;
                free_effect = e;
            }
            e = next;
        }
        const StreamId sid = k.stream;
        Stream& st = streams[sid];
        st.busy = false;
        st.head = k.next;
        if (st.head == kNone) st.tail = kNone;
        st.busy_ps += now - k.start;
        if (k.work) headrooms[sid].last_end = now;
        ++done;
        stats.end_time = Time::from_ps(now);
        if (streaming && observer) {
            observer(TaskRecord{(static_cast<TaskId>(k.generation) << 32) | s, sid, k.label, k.transfer,
                                Bytes(k.transfer ? k.bytes : 0),
                                Time::from_ps(k.start), Time::from_ps(now)});
        }
        if (k.first_succ != kNone && --tasks[k.first_succ].waiting == 0) try_start(tasks[k.first_succ].stream);
        for (std::uint32_t e = k.succ_head; e != kNone;) {
            const std::uint32_t u = edges[e].to;
            const std::uint32_t next = edges[e].next;
            if (streaming) {
                edges[e].next = free_edge;
                free_edge = e;
            }
            if (--tasks[u].waiting == 0) try_start(tasks[u].stream);
            e = next;
        }
        if (streaming) {
            // Recycle the slot: its id becomes stale (a dependency on it is satisfied).
            k.first_succ = k.succ_head = k.effect_head = kNone;
            ++k.generation;
            free_tasks.push_back(s);
            if (st.head == kNone && st.refill) {
                call_refill(sid);
                drain_to_try();
            }
        }
        try_start(sid);
        if (progress && progress_every != 0 && done % progress_every == 0) {
            progress(done, std::max(expected, created), Time::from_ps(now));
        }
    }

    [[noreturn]] void throw_stall() const {
        // Heads of the streams that still have work (none is running: the event heap is empty).
        std::vector<std::uint32_t> heads;
        for (const Stream& st : streams) {
            if (st.head != kNone) heads.push_back(st.head);
        }
        std::vector<std::pair<std::uint32_t, std::size_t>> head_slot;
        for (std::size_t h = 0; h < heads.size(); ++h)
            head_slot.emplace_back(heads[h], h);
        std::sort(head_slot.begin(), head_slot.end());
        auto slot_index = [&](std::uint32_t t) -> std::size_t {
            const auto it =
                std::lower_bound(head_slot.begin(), head_slot.end(), std::make_pair(t, std::size_t{0}));
            return it != head_slot.end() && it->first == t ? it->second : heads.size();
        };
        // Unfinished dependencies of each head, found by one pass over the live tasks' successor lists.
        std::vector<std::vector<std::uint32_t>> blockers(heads.size());
        std::uint64_t unfinished = 0;
        std::vector<std::uint8_t> is_free(tasks.size(), 0);
        for (std::uint32_t f : free_tasks) is_free[f] = 1;
        for (std::uint32_t u = 0; u < tasks.size(); ++u) {
            if (is_free[u] || tasks[u].state == State::finished) continue;
            ++unfinished;
            std::vector<std::uint32_t> succs;
            if (tasks[u].first_succ != kNone) succs.push_back(tasks[u].first_succ);
            for (std::uint32_t e = tasks[u].succ_head; e != kNone; e = edges[e].next) succs.push_back(edges[e].to);
            for (const std::uint32_t v : succs) {
                const std::size_t slot = slot_index(v);
                if (slot == heads.size()) continue;
                auto& list = blockers[slot];
                if (list.empty() || list.back() != u) list.push_back(u);
            }
        }
        auto is_head = [&](std::uint32_t t) { return slot_index(t) != heads.size(); };

        std::string msg = "simulation stalled at t=" + format_time(now) + ": " + std::to_string(unfinished) + " of " +
                          std::to_string(created) + " tasks unfinished, " + std::to_string(heads.size()) +
                          " stream(s) blocked (a dependency cycle, or a dependency queued behind the task "
                          "that waits for it)";
        constexpr std::size_t kMaxLines = 50;
        constexpr std::size_t kMaxBlockers = 8;
        for (std::size_t h = 0; h < heads.size() && h < kMaxLines; ++h) {
            const std::uint32_t t = heads[h];
            msg += "\n  stream '" + stream_names[tasks[t].stream] + "': " + describe_slot(t) + " waits for ";
            const auto& list = blockers[h];
            for (std::size_t k = 0; k < list.size() && k < kMaxBlockers; ++k) {
                const std::uint32_t u = list[k];
                if (k > 0) msg += ", ";
                msg += describe_slot(u) + " on stream '" + stream_names[tasks[u].stream] + "'";
                if (u == t) {
                    msg += " (itself)";
                } else if (!is_head(u)) {
                    msg += " (queued behind " + describe_slot(streams[tasks[u].stream].head) + ")";
                } else {
                    msg += " (blocked)";
                }
            }
            if (list.size() > kMaxBlockers)
                msg += ", ... and " + std::to_string(list.size() - kMaxBlockers) + " more";
            if (tasks[t].waiting > list.size()) {
                msg += std::string(list.empty() ? "" : ", and ") +
                       std::to_string(tasks[t].waiting - list.size()) + " hold(s) never released";
            }
        }
        if (heads.size() > kMaxLines)
            msg += "\n  ... and " + std::to_string(heads.size() - kMaxLines) + " more";
        throw SimulationError(msg);
    }

    RunStats run(const ProgressFn& progress, std::uint64_t progress_every) {
        if (phase != Phase::building) throw SimulationError("Simulator::run: run() may only be called once");
        phase = Phase::running;
        for (detail::MemoryPool& p : pools) p.start();

        now = 0;
        if (streaming) {
            for (StreamId s = 0; s < streams.size(); ++s) {
                if (streams[s].refill && streams[s].head == kNone) call_refill(s);
            }
        }
        to_try.clear();
        for (StreamId s = 0; s < streams.size(); ++s)
            try_start(s);

        for (;;) {
            if (net.dirty() && !due_now()) {
                ++stats.rate_updates;
                for (std::uint32_t f : net.recompute(now)) {
                    push(net.completion_ps(f), flow_done, f, net.version(f));
                }
                continue;
            }
            if (queue_empty()) break;
            const Event ev = pop();
            now = ev.time;
            ++stats.events;
            switch (static_cast<EventType>(ev.key & 3)) {
                case task_end: {
                    const Stream& st = streams[ev.target];
                    if (ev.version != st.version || !st.busy) break;  // stale: rate changed since
                    finish(st.head, progress, progress_every);
                    break;
                }
                case flow_start: {
                    Task& k = tasks[ev.target];
                    const std::uint32_t f = net.open(k.route, static_cast<double>(k.bytes));
                    if (f >= flow_task.size()) flow_task.resize(f + 1, kNone);
                    flow_task[f] = ev.target;
                    net.activate(f, now);
                    ++stats.flows;
                    if (streams[k.stream].slows_others) interfere(k.stream, +1);
                    break;
                }
                case flow_done: {
                    const std::uint32_t f = ev.target;
                    if (ev.version != net.version(f)) break;  // stale: rescheduled since
                    const std::uint32_t s = flow_task[f];
                    net.deactivate(f);
                    net.close(f);
                    if (streams[tasks[s].stream].slows_others) interfere(tasks[s].stream, -1);
                    finish(s, progress, progress_every);
                    break;
                }
            }
        }

        phase = Phase::done;
        if (done < created) throw_stall();
        stats.tasks = done;
        if (progress) progress(done, std::max(expected, created), Time::from_ps(now));
        return stats;
    }
};

Simulator::Simulator() : impl_(std::make_unique<Impl>()) {}
Simulator::~Simulator() = default;
Simulator::Simulator(Simulator&&) noexcept = default;
Simulator& Simulator::operator=(Simulator&&) noexcept = default;

StreamId Simulator::add_stream(std::string name) {
    impl_->check_building("add_stream");
    impl_->streams.emplace_back();
    impl_->stream_names.push_back(std::move(name));
    impl_->stream_slows.emplace_back();
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
    impl_->stream_slows[busy].push_back(slowed);
    impl_->streams[busy].slows_others = true;
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

std::size_t Simulator::seal_routes() {
    Impl& im = *impl_;
    im.check_building("seal_routes");
    if (im.routes_sealed) throw SimulationError("Simulator::seal_routes: the routes are sealed already");
    im.routes_sealed = true;
    return im.net.bundle_links();
}

RouteId Simulator::add_route(std::vector<LinkUse> route) {
    Impl& im = *impl_;
    im.check_adding("add_route");
    if (im.routes_sealed) throw SimulationError("Simulator::add_route: the routes are sealed (seal_routes)");
    std::vector<LinkUse> merged;
    merged.reserve(route.size());
    // A link named twice is one use with the multiplicities added, at its first place; found through a
    // scratch index by link (position + 1, 0: not yet), cleared afterwards: linear in the route's length.
    std::vector<std::uint32_t>& at = im.route_scratch;
    if (at.size() < im.net.link_count()) at.resize(im.net.link_count(), 0);
    for (const LinkUse& use : route) {
        if (use.link >= im.net.link_count()) {
            for (const LinkUse& m : merged)
                at[m.link] = 0;
            throw SimulationError("Simulator::add_route: link id " + std::to_string(use.link) + " out of range (" +
                                  std::to_string(im.net.link_count()) + " links)");
        }
        if (use.multiplicity == 0) {
            for (const LinkUse& m : merged)
                at[m.link] = 0;
            throw SimulationError("Simulator::add_route: multiplicity 0 on link '" + im.link_names[use.link] + "'");
        }
        if (at[use.link] != 0) {
            merged[at[use.link] - 1].multiplicity += use.multiplicity;
        } else {
            merged.push_back(use);
            at[use.link] = static_cast<std::uint32_t>(merged.size());
        }
    }
    for (const LinkUse& m : merged)
        at[m.link] = 0;
    return im.net.add_route(merged);
}

Time Simulator::alone_transfer_time(RouteId route, Bytes bytes) const {
    if (route >= impl_->net.route_count())
        throw SimulationError("Simulator::alone_transfer_time: route id " + std::to_string(route) + " out of range");
    if (bytes.value <= 0) return Time::zero();
    return Time::from_ps(impl_->net.alone_ps(route, static_cast<double>(bytes.value)));
}

std::span<const LinkUse> Simulator::route_links(RouteId route) const {
    if (route >= impl_->net.route_count())
        throw SimulationError("Simulator::route_links: route id " + std::to_string(route) + " out of range");
    return impl_->net.route(route);
}

std::size_t Simulator::link_count() const {
    return impl_->net.link_count();
}

TaskId Simulator::add_compute(StreamId stream, Time duration, std::uint32_t label) {
    impl_->check_adding("add_compute");
    impl_->check_stream(stream, "add_compute");
    if (duration.ps() < 0) {
        throw SimulationError("Simulator::add_compute: negative duration on stream '" +
                              impl_->stream_names[stream] + "'");
    }
    return impl_->new_task(stream, duration.ps(), label, false, kNone, 0);
}

void Simulator::set_idle_headroom(StreamId stream, Time cap, double accrual) {
    Impl& im = *impl_;
    im.check_building("set_idle_headroom");
    im.check_stream(stream, "set_idle_headroom");
    constexpr std::int64_t kMaxCap = std::int64_t{1} << 62;  // so that credit + a capped gain cannot overflow
    if (cap.ps() < 0 || cap.ps() > kMaxCap)
        throw SimulationError("Simulator::set_idle_headroom: cap must be in [0, 2^62] ps, got " + std::to_string(cap.ps()) +
                              " ps on stream '" + im.stream_names[stream] + "'");
    if (!(accrual >= 0) || !std::isfinite(accrual))
        throw SimulationError("Simulator::set_idle_headroom: accrual must be finite and >= 0, got " +
                              std::to_string(accrual) + " on stream '" + im.stream_names[stream] + "'");
    if (im.headrooms.size() <= stream) im.headrooms.resize(im.streams.size());
    im.headrooms[stream] = Impl::Headroom{cap.ps(), 0, 0, accrual};  // no credit at time zero
    im.streams[stream].headroom = true;
}

void Simulator::set_headroom_work(TaskId task, Time max_saving, bool resume) {
    Impl& im = *impl_;
    im.check_adding("set_headroom_work");
    Impl::Task& k = im.live(task, "set_headroom_work");
    if (k.state != Impl::State::pending) [[unlikely]]
        im.throw_started(task, "set_headroom_work");
    if (k.transfer || !im.streams[k.stream].headroom || max_saving.ps() < 0) [[unlikely]] {
        const std::string what = "Simulator::set_headroom_work: " + im.describe_slot(slot_of(task)) + " on stream '" +
                                 im.stream_names[k.stream] + "'";
        if (k.transfer) throw SimulationError(what + " is a transfer: only compute tasks run faster after rest");
        if (!im.streams[k.stream].headroom)
            throw SimulationError(what + ": the stream has no idle headroom (set_idle_headroom)");
        throw SimulationError(what + ": the most it may save must be >= 0, got " + std::to_string(max_saving.ps()) + " ps");
    }
    k.work = true;
    k.resume = resume;
    k.bytes = max_saving.ps();
}

TaskId Simulator::add_transfer_on(StreamId stream, RouteId route, Bytes bytes, Time latency, std::uint32_t label) {
    Impl& im = *impl_;
    im.check_adding("add_transfer");
    im.check_stream(stream, "add_transfer");
    const std::string& sname = im.stream_names[stream];
    if (latency.ps() < 0)
        throw SimulationError("Simulator::add_transfer: negative latency on stream '" + sname + "'");
    if (bytes.value < 0)
        throw SimulationError("Simulator::add_transfer: negative size on stream '" + sname + "'");
    if (route >= im.net.route_count()) {
        throw SimulationError("Simulator::add_transfer: route id " + std::to_string(route) + " out of range on stream '" +
                              sname + "'");
    }
    const bool moves = bytes.value > 0 && im.net.route_length(route) > 0;
    return im.new_task(stream, latency.ps(), label, true, moves ? route : kNone, bytes.value);
}

TaskId Simulator::add_transfer(StreamId stream, std::vector<LinkUse> route, Bytes bytes, Time latency,
                               std::uint32_t label) {
    impl_->check_stream(stream, "add_transfer");
    return add_transfer_on(stream, add_route(std::move(route)), bytes, latency, label);
}

void Simulator::add_dependency(TaskId before, TaskId after) {
    Impl& im = *impl_;
    im.check_adding("add_dependency");
    if (slot_of(before) >= im.tasks.size()) im.live(before, "add_dependency");  // throws: out of range
    Impl::Task& a = im.live(after, "add_dependency");
    if (a.state != Impl::State::pending) [[unlikely]]
        im.throw_started(after, "add_dependency");
    if (im.finished(before, "add_dependency")) return;  // satisfied
    Impl::Task& b = im.tasks[slot_of(before)];
    ++a.waiting;
    if (b.first_succ == kNone) {
        b.first_succ = slot_of(after);
        return;
    }
    const std::uint32_t e = [&] {
        if (im.free_edge != kNone) {
            const std::uint32_t f = im.free_edge;
            im.free_edge = im.edges[f].next;
            return f;
        }
        if (im.edges.size() >= kNone - 1) throw SimulationError("Simulator::add_dependency: too many dependencies");
        im.edges.emplace_back();
        return static_cast<std::uint32_t>(im.edges.size() - 1);
    }();
    im.edges[e] = Impl::Edge{slot_of(after), kNone};
    if (b.succ_head == kNone) {
        b.succ_head = e;
    } else {
        std::uint32_t last = b.succ_head;  // short lists: appended in order
        while (im.edges[last].next != kNone) last = im.edges[last].next;
        im.edges[last].next = e;
    }
}

void Simulator::add_memory_effect(TaskId task, MemoryEffect effect) {
    Impl& im = *impl_;
    im.check_adding("add_memory_effect");
    Impl::Task& k = im.live(task, "add_memory_effect");
    im.check_pool(effect.pool, "add_memory_effect");
    const auto& p = im.pools[effect.pool];
    p.check_category(effect.category, "add_memory_effect");
    if (effect.alloc_at_start.value < 0 || effect.free_at_end.value < 0) {
        throw SimulationError("Simulator::add_memory_effect: negative size for pool '" + p.name() + "'");
    }
    if (k.state != Impl::State::pending) [[unlikely]]
        im.throw_started(task, "add_memory_effect");
    if (effect.alloc_at_start.value == 0 && effect.free_at_end.value == 0) return;
    std::uint32_t e = 0;
    if (im.free_effect != kNone) {
        e = im.free_effect;
        im.free_effect = im.effect_nodes[e].next;
    } else {
        if (im.effect_nodes.size() >= kNone - 1) throw SimulationError("Simulator::add_memory_effect: too many memory effects");
        im.effect_nodes.emplace_back();
        e = static_cast<std::uint32_t>(im.effect_nodes.size() - 1);
    }
    // Appended at the end: the effects apply in the order they were added.
    im.effect_nodes[e] = Impl::EffectNode{effect, kNone};
    if (k.effect_head == kNone) {
        k.effect_head = e;
    } else {
        std::uint32_t last = k.effect_head;
        while (im.effect_nodes[last].next != kNone) last = im.effect_nodes[last].next;
        im.effect_nodes[last].next = e;
    }
}

void Simulator::add_hold(TaskId task) {
    Impl& im = *impl_;
    im.check_adding("add_hold");
    Impl::Task& k = im.live(task, "add_hold");
    if (k.state != Impl::State::pending) [[unlikely]]
        im.throw_started(task, "add_hold");
    ++k.waiting;
}

void Simulator::release_hold(TaskId task) {
    Impl& im = *impl_;
    im.check_adding("release_hold");
    Impl::Task& k = im.live(task, "release_hold");
    if (k.state != Impl::State::pending || k.waiting == 0) {
        throw SimulationError("Simulator::release_hold: " + im.describe_slot(slot_of(task)) + " holds nothing");
    }
    if (--k.waiting == 0 && im.phase == Impl::Phase::running) im.to_try.push_back(k.stream);
}

void Simulator::set_label_formatter(LabelFn fn) {
    impl_->label_fn = std::move(fn);
}

void Simulator::set_streaming(TaskObserver observer, RefillFn refill) {
    impl_->check_building("set_streaming");
    if (!impl_->tasks.empty()) throw SimulationError("Simulator::set_streaming: only before the first task is added");
    impl_->streaming = true;
    impl_->observer = std::move(observer);
    impl_->refill = std::move(refill);
}

void Simulator::refill_when_empty(StreamId stream) {
    impl_->check_building("refill_when_empty");
    impl_->check_stream(stream, "refill_when_empty");
    if (!impl_->streaming || !impl_->refill)
        throw SimulationError("Simulator::refill_when_empty: needs set_streaming with a refill function first");
    impl_->streams[stream].refill = true;
}

void Simulator::set_expected_tasks(std::uint64_t tasks) {
    impl_->expected = tasks;
}

RunStats Simulator::run(const ProgressFn& progress, std::uint64_t progress_every) {
    return impl_->run(progress, progress_every);
}

std::size_t Simulator::task_count() const {
    return impl_->created;
}
std::size_t Simulator::task_slots() const {
    return impl_->tasks.size();
}
std::size_t Simulator::stream_count() const {
    return impl_->streams.size();
}
std::size_t Simulator::pool_count() const {
    return impl_->pools.size();
}

Time Simulator::start_time(TaskId task) const {
    const auto& k = impl_->kept(task, "start_time");
    impl_->check_ran("start_time");
    return Time::from_ps(k.start);
}

Time Simulator::end_time(TaskId task) const {
    impl_->kept(task, "end_time");
    impl_->check_ran("end_time");
    const auto s = static_cast<std::size_t>(task & 0xffffffffu);
    return Time::from_ps(s < impl_->ends.size() ? impl_->ends[s] : kNever);
}

StreamId Simulator::stream_of(TaskId task) const {
    return impl_->kept(task, "stream_of").stream;
}

std::uint32_t Simulator::label_of(TaskId task) const {
    return impl_->kept(task, "label_of").label;
}

bool Simulator::is_transfer(TaskId task) const {
    return impl_->kept(task, "is_transfer").transfer;
}

const std::string& Simulator::stream_name(StreamId stream) const {
    impl_->check_stream(stream, "stream_name");
    return impl_->stream_names[stream];
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
