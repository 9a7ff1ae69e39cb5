// The discrete-event engine. It knows nothing of transformers: it runs a graph of tasks on in-order
// streams, moves bytes as flows over links that share bandwidth max-min fairly, and tracks memory pools.
#pragma once

#include "strata/units.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata::engine {

using StreamId = std::uint32_t;
/// A task: its storage slot (low 32 bits) and the slot's generation (high 32 bits). In streaming mode a
/// finished task's slot is reused under a new generation, so an old id never names a live task.
using TaskId = std::uint64_t;
[[nodiscard]] constexpr std::uint32_t task_slot(TaskId t) { return static_cast<std::uint32_t>(t & 0xffffffffU); }
[[nodiscard]] constexpr std::uint32_t task_generation(TaskId t) { return static_cast<std::uint32_t>(t >> 32); }
using LinkId = std::uint32_t;
using PoolId = std::uint32_t;
/// An interned route (add_route): the many transfers over one route share its link list.
using RouteId = std::uint32_t;

/// One link on a flow's route; `multiplicity` > 1 when the flow crosses the link several times
/// (a ring collective modelled as one flow whose route is the union of all its edges).
struct LinkUse {
    LinkId link = 0;
    std::uint32_t multiplicity = 1;
};

/// A memory change attached to a task: `alloc_at_start` is added to the pool when the task starts,
/// `free_at_end` is removed when it ends. `category` indexes the pool's category names.
struct MemoryEffect {
    PoolId pool = 0;
    std::uint32_t category = 0;
    Bytes alloc_at_start{};
    Bytes free_at_end{};
};

struct MemorySample {
    Time time;
    Bytes in_use;
};

struct PoolReport {
    std::string name;
    Bytes capacity;
    Bytes peak;                          ///< highest total in use at any instant
    Time peak_time;                      ///< first instant the peak was reached
    std::vector<Bytes> peak_breakdown;   ///< in use per category at `peak_time`
    bool over_capacity = false;
    Time first_over_time;                ///< first instant in_use > capacity (if over_capacity)
};

struct RunStats {
    Time end_time;                 ///< time the last task finished
    std::uint64_t events = 0;      ///< events popped from the queue
    std::uint64_t tasks = 0;       ///< tasks completed
    std::uint64_t flows = 0;       ///< transfer tasks that carried bytes
    std::uint64_t rate_updates = 0;///< max-min recomputations
};

/// Called every `progress_every` completed tasks: (tasks done, tasks expected, simulated now). Tasks expected:
/// set_expected_tasks() if given, else the tasks added so far.
using ProgressFn = std::function<void(std::uint64_t, std::uint64_t, Time)>;

/// A finished task, as reported to the streaming observer.
struct TaskRecord {
    TaskId task = 0;
    StreamId stream = 0;
    std::uint32_t label = 0;
    bool transfer = false;
    Bytes bytes;  ///< a transfer's size
    Time start;
    Time end;
};
using TaskObserver = std::function<void(const TaskRecord&)>;
/// Asked for more work on a stream that has run out of tasks (streaming mode); returns false when the stream's
/// work is over (it is not asked again).
using RefillFn = std::function<bool(StreamId)>;
/// Turns a task's label into words for stall reports.
using LabelFn = std::function<std::string(std::uint32_t)>;

/// The simulator. Build the graph (streams, links, pools, tasks, dependencies), then `run()` once; or stream
/// it: give `set_streaming` an observer and a refill function, and the graph is generated while it runs.
///
/// Semantics:
/// - Events are ordered by (integer picosecond time, insertion sequence): deterministic.
/// - A stream executes its tasks one at a time in the order they were added; the head task starts
///   when the stream is free and all its dependencies have finished.
/// - A compute task lasts its fixed duration, unless its stream is slowed (slow_while_busy): then its work
///   (the duration at full speed) progresses at `speed` while a flow of an interfering stream is active.
/// - A compute task on a stream with idle headroom (set_idle_headroom) may start shorter: see there.
/// - A transfer task first waits its latency, then moves `bytes` as a flow over its route; concurrent
///   flows share each link max-min fairly (a flow with multiplicity k on a link uses k x its rate there);
///   rates are recomputed whenever a flow starts or ends. A transfer with an empty route or zero bytes
///   takes only its latency.
/// - If work remains but no event is pending, `run()` throws SimulationError naming every blocked
///   task (stream, label) and the unfinished tasks it waits for.
///
/// Streaming. Only the tasks not yet finished exist. Each finished task is handed to the observer (its
/// start, end, stream, label) and its storage reused; `refill(s)` is called at the start of the run for every
/// stream registered with `refill_when_empty` and again whenever one of them has no task left (repeatedly,
/// until the stream has a task or refill returns false); it may add
/// tasks on any stream, routes, dependencies, holds and memory effects. A dependency on a task that has
/// finished already is satisfied; a dependency or memory effect on a task that has started is an error. A
/// hold keeps a task from starting until released (for a dependency on a task not generated yet). Per-task
/// results (start_time, end_time...) are only kept without streaming.
class Simulator {
public:
    Simulator();
    ~Simulator();
    Simulator(const Simulator&) = delete;
    Simulator& operator=(const Simulator&) = delete;
    Simulator(Simulator&&) noexcept;
    Simulator& operator=(Simulator&&) noexcept;

    StreamId add_stream(std::string name);
    LinkId add_link(std::string name, BytesPerSecond bandwidth);
    PoolId add_pool(std::string name, Bytes capacity, std::vector<std::string> categories,
                    bool keep_timeline);
    /// Memory held from time zero (weights, gradients, optimizer state).
    void add_static(PoolId pool, std::uint32_t category, Bytes bytes);

    /// While a transfer of stream `busy` carries bytes, compute tasks on `slowed` progress at `speed` (0, 1]
    /// (an NCCL collective's kernels hold SMs the compute kernels lack). Several interfering flows at once
    /// slow it the same; several `busy` streams may slow one stream (the lowest speed is used); adding a pair
    /// twice changes nothing.
    void slow_while_busy(StreamId busy, StreamId slowed, double speed);

    /// Rest makes `stream` faster (a power-limited GPU's clock rises while it idles, since its limit holds a mean over
    /// a window): the stream holds credit, picoseconds its work tasks (set_headroom_work) may take off their
    /// durations, `cap` at most (2^62 ps), none at time zero (which counts as the end of a work task). The idle time
    /// before a resuming work task, from the end of the stream's last work task to its start, adds `accrual` x that
    /// time. A work task takes min(credit, its max_saving, its duration) off its duration as it starts (before any
    /// slowing). Taking the credit task by task saves exactly what one task standing for them all (the sum of their
    /// max_savings) would.
    void set_idle_headroom(StreamId stream, Time cap, double accrual);
    /// Marks a pending compute task of a stream with idle headroom as work that may save up to `max_saving`;
    /// `resume`: the stream's idle time before it accrues credit.
    void set_headroom_work(TaskId task, Time max_saving, bool resume);

    /// Validates a route (links in range, multiplicity >= 1), merges repeated links (multiplicities add up, first
    /// seen order) and interns it.
    RouteId add_route(std::vector<LinkUse> route);
    /// Declares every route added (before run()): no add_route or add_transfer with a route of its own may follow.
    /// Links of equal bandwidth that every route crosses together, with the same multiplicity, are then bundled: each
    /// route keeps the lowest-numbered link of each bundle (the same max-min rates, to the bit: such links carry the
    /// same flows and saturate together), so a flow touches fewer links. Returns the link uses removed from routes.
    std::size_t seal_routes();
    /// How long a transfer of `bytes` over `route` moves bytes when no other flow shares its links (its latency not
    /// included), exactly as its flow would: a workload that knows a route is never shared can emit such transfers
    /// with an empty route and this time added to the latency, and the flow network never sees them.
    [[nodiscard]] Time alone_transfer_time(RouteId route, Bytes bytes) const;
    /// An interned route's links (merged).
    [[nodiscard]] std::span<const LinkUse> route_links(RouteId route) const;
    [[nodiscard]] std::size_t link_count() const;
    TaskId add_compute(StreamId stream, Time duration, std::uint32_t label);
    TaskId add_transfer_on(StreamId stream, RouteId route, Bytes bytes, Time latency, std::uint32_t label);
    /// The same with a route of its own (interned for this one transfer).
    TaskId add_transfer(StreamId stream, std::vector<LinkUse> route, Bytes bytes, Time latency,
                        std::uint32_t label);
    /// `after` cannot start before `before` has finished.
    void add_dependency(TaskId before, TaskId after);
    void add_memory_effect(TaskId task, MemoryEffect effect);
    /// The task cannot start until as many release_hold() calls as add_hold() calls were made.
    void add_hold(TaskId task);
    void release_hold(TaskId task);
    void set_label_formatter(LabelFn fn);

    /// Streaming mode (before run()): see the class comment. The observer must not add work.
    void set_streaming(TaskObserver observer, RefillFn refill);
    void refill_when_empty(StreamId stream);
    /// The total the progress callback reports (an estimate is fine).
    void set_expected_tasks(std::uint64_t tasks);

    RunStats run(const ProgressFn& progress = {}, std::uint64_t progress_every = 100000);

    // Results (valid after run(); per-task ones only without streaming).
    /// Tasks added so far.
    [[nodiscard]] std::size_t task_count() const;
    /// Task slots in existence: all tasks without streaming, the most alive at once with it.
    [[nodiscard]] std::size_t task_slots() const;
    [[nodiscard]] std::size_t stream_count() const;
    [[nodiscard]] Time start_time(TaskId task) const;
    [[nodiscard]] Time end_time(TaskId task) const;
    [[nodiscard]] StreamId stream_of(TaskId task) const;
    [[nodiscard]] std::uint32_t label_of(TaskId task) const;
    [[nodiscard]] bool is_transfer(TaskId task) const;
    [[nodiscard]] const std::string& stream_name(StreamId stream) const;
    /// Sum of the durations of the tasks the stream ran.
    [[nodiscard]] Time stream_busy(StreamId stream) const;
    [[nodiscard]] PoolReport pool_report(PoolId pool) const;
    /// Every change of the pool's total (only if keep_timeline), in time order.
    [[nodiscard]] std::span<const MemorySample> pool_timeline(PoolId pool) const;
    [[nodiscard]] std::size_t pool_count() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace strata::engine
