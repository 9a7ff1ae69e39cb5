// The workload's graph builder (internal to sim/workload): turns a scenario's schedule programs into a task
// graph for the discrete-event engine, streamed: each group's program is generated an instruction at a time
// as its compute stream runs dry, and each finished task is read as it ends (only the tasks in flight exist).
//
// Entities. Ranks are placed like Megatron-LM: tensor innermost, then data, then pipeline
// (global rank = stage * d * t + replica * t + tensor_rank). The t GPUs of a tensor-parallel group run
// the same kernels on equal shards in lockstep, so each (stage, replica) group is simulated as one
// entity with its own streams and memory pool standing for each of its t GPUs; everything between
// groups (pipeline sends, data-parallel reductions) and inside them (tensor-parallel collectives) is
// moved as flows over the fabric's links, GPU by GPU.
//
// Streams per group: compute (kernels; tensor-parallel collectives block it as in Megatron),
// tp (tensor-parallel collectives), send-forward, send-backward. Per stage: one data-parallel stream.
//
// The files:
//   units.cpp      a chunk's forward / backward costed into steps, and the tasks of one unit
//   program.cpp    groups, streams, pools; the refill: a group's next schedule instruction (sim/schedule) as
//                  tasks, with memory effects from the activation plan the analytical model uses too
//   pipeline.cpp   the pipeline transfers between the programs' blocking calls (a rendezvous of both calls)
//   gradients.cpp  data-parallel gradient reduction, tied-embedding sync, optimizer step (as their inputs appear)
//   metrics.cpp    what each finished task tells, and the results as neutral records (strata/metrics.hpp)
//   simulate.cpp   simulate(): fabric, builder, engine run
// Somewhat longer than 500 lines: one class's declaration (the Builder and its per-group state), not splittable.
#pragma once

#include "strata/cost.hpp"
#include "strata/engine.hpp"
#include "strata/fabric.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/metrics.hpp"
#include "strata/schedule.hpp"
#include "strata/simulate.hpp"
#include "variation.hpp"

#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::workload {

using engine::StreamId;
using engine::TaskId;

/// A step of a unit, costed: a compute span or a tensor-parallel collective.
struct UnitStep {
    bool is_compute = true;
    Time duration;               // compute
    CollectiveKind kind{};       // collective
    Bytes message;
    bool overlapped = false;
    bool context_group = false;  // over the context-parallel group rather than the tensor-parallel one
    int sms_held = 0;            // SMs its kernel holds from the kernels beside it (CostModel::sms_held)
    double sm_fraction = 0;      // overlapped: the share of speed the paired kernels lose (CostModel::step_sm_fraction)
    Time tail;                   // a ring exchange: the paired kernels' last GEMM chunk, after its last transfer
};

/// A chunk's forward or backward pass as costed steps (adjacent compute steps merged).
struct Unit {
    std::vector<UnitStep> steps;
};

/// Appends a pass's steps, costed, merging adjacent compute steps (never into a step paired with an
/// overlapped collective).
/// `ring_sms`: the SMs the context-parallel ring holds (CostModel::context_ring_sms) for a collective's buffer.
void append(std::vector<UnitStep>& out, const std::vector<Step>& pass, const CostModel& cost,
            const std::function<int(Bytes)>& ring_sms);

enum class TaskKind : std::uint32_t {
    forward = 0,
    backward,
    tp,
    p2p,
    dp,
    optimizer,
    embedding_sync,
    grad_average,
    host_gap,
    grad_check,
    amax_reduce,
    deferred_wgrad,
    offload,
    reload,
    fsdp_gather,
    fsdp_reduce
};
inline constexpr const char* kKindNames[] = {"forward",
                                             "backward",
                                             "tp-collective",
                                             "p2p",
                                             "dp-reduce",
                                             "optimizer",
                                             "embedding-grad-sync",
                                             "gradient-average",
                                             "host-gap",
                                             "gradient-nan-check",
                                             "fp8-amax-reduce",
                                             "deferred-wgrad",
                                             "activation-offload",
                                             "activation-reload",
                                             "fsdp-all-gather",
                                             "fsdp-reduce-scatter"};
static_assert(sizeof(kKindNames) / sizeof(kKindNames[0]) == static_cast<std::size_t>(TaskKind::fsdp_reduce) + 1 &&
                  static_cast<int>(TaskKind::fsdp_reduce) < 16,
              "a name for every task kind, which make_label keeps in 4 bits");

/// label = kind (4 bits) | chunk (8 bits) | microbatch (20 bits)
inline std::uint32_t make_label(TaskKind kind, int chunk, int mb) {
    return (static_cast<std::uint32_t>(kind) << 28) | (static_cast<std::uint32_t>(chunk & 0xff) << 20) |
           static_cast<std::uint32_t>(mb & 0xfffff);
}
inline TaskKind label_kind(std::uint32_t label) { return static_cast<TaskKind>(label >> 28); }
inline int label_chunk(std::uint32_t label) { return static_cast<int>((label >> 20) & 0xff); }
inline int label_mb(std::uint32_t label) { return static_cast<int>(label & 0xfffff); }

/// A collective's phases with their routes interned in the engine.
struct PlannedPhase {
    engine::RouteId route{};
    Bytes bytes;
    Time latency;               ///< the phase's own latency plus its route's
    std::optional<Time> alone;  ///< set when nothing else ever shares its links: the time it moves bytes (no flow)
    /// Set instead when only its stage's data-parallel collectives share them: the same, for a fused unit (which runs
    /// only while those cannot).
    std::optional<Time> alone_if_quiet;
};
using Plan = std::vector<PlannedPhase>;

/// Refuses a run of `tasks` tasks over options.max_tasks (InputError naming the case, the limit and the option that
/// raises it); `how` says what kind of count it is ("about": counted from the programs, "at least": a lower bound).
void check_task_limit(const Scenario& sc, const SimulationOptions& options, double tasks, const char* how);

class Builder {
public:
    /// `detail`: whether the run's intervals (and, with options.keep_trace, its trace) are wanted.
    Builder(const Scenario& sc, engine::Simulator& sim, fabric::Fabric& fab, const SimulationOptions& options,
            bool detail);

    /// Sets the engine up to stream: groups, streams, pools, the refill and the observer, and the work that
    /// depends on nothing (overlapped parameter gathers).
    void build();
    /// The results (after the engine ran).
    IterationResult collect(SimulationDetail* detail, double wall_s, const engine::RunStats& stats);
    [[nodiscard]] std::string describe(std::uint32_t label) const;

private:
    /// A fused unit's second part: from step `from` to the end, `rest` long (emit_unit with `keep_first`).
    struct FusedPart {
        bool keep_first = true;
        std::size_t from = 0;
        Time rest;
        Time saving;  ///< the most the rest may save after rest (idle headroom)
    };
    /// One side of a pipeline message whose other side has not been generated yet (its `target` is held).
    struct PendingMessage {
        bool sender = false;     // which side came first
        TaskId post{}, target{}; // the call's post; the task that must wait for the transfer
        int sender_group = 0;    // the sender's group, unit direction, chunk and microbatch (for the transfer)
        bool forward = true;
        int chunk = 0, microbatch = 0;
        std::uint64_t order = 0; // its place among the calls its side posted to the pair (pair_channel)
        bool blocking = true;    // its call waits for the transfer (else the unit that needs it does)
    };
    /// A GPU group's record. What generating an instruction reads comes first (one aligned record, its hot fields in
    /// its first cache lines); what only the set-up and the reports read comes last.
    struct alignas(64) Group {
        int stage = 0, replica = 0;
        StreamId compute{}, tp{}, send_fwd{}, send_bwd{};
        StreamId host{};  // with host_gap_per_unit: the host's time before each unit (not GPU busy time)
        engine::PoolId pool{};
        bool prev_unit = false;      // prev_last ends a unit (not a call)
        /// Its units run as few tasks as the times allow (fuse_units): nothing reads its spans. A unit fuses when
        /// no data-parallel collective can slow its kernels meanwhile (dp_quiet), its collectives where they move alone.
        bool fused = false;
        bool finished = false;
        bool reduce_at_end = false;  // the gradient reduction (after the averaging pass) follows the whole program
        // Generation: the next instruction of its program, the last task so far, buckets so far, done.
        std::size_t pc = 0;
        std::optional<TaskId> prev_last;
        double speed = 1.0;          // its slowest GPU's persistent kernel-time factor (variation)
        std::uint64_t spans = 0;     // compute spans emitted so far (run-to-run variation draws)
        Time busy{};                 // their nominal time so far (with variation.span_hold: which level a span is in)
        std::size_t buckets = 0;     // with overlap_grad_reduce: layers whose gradient is complete
        std::optional<std::size_t> held_bucket;  // NeMo's after_schedule group, held for after the deferred GEMMs
        std::uint64_t amax_regions = 0;  // FP8 regions (units) whose amax all-reduce it has posted
        TaskId last_backward = kNoTask;
        /// Pipeline messages to it whose other side is not generated yet, by message index (a few at a time: each
        /// group's calls block, so none runs far ahead of its neighbours; searched in place, next to the group).
        std::vector<std::pair<std::uint64_t, PendingMessage>> pending;
        /// With overlap_p2p_comm: the messages of its sends since its last unit of each direction (forward, backward)
        /// that its next unit of that direction waits for (overlap_msgs_ keys).
        std::vector<std::uint64_t> outstanding_sends[2];
        /// Ops posted so far on each of its pipeline pairs' NCCL streams (pair_channel): [0] the pair with its next
        /// stage, [1] with its previous one (with two stages: [0] its sends, [1] its receives).
        std::uint64_t pair_posts[2] = {0, 0};
        /// Pipeline routes to its forward and backward receivers (route, latency), made on first use.
        std::optional<std::pair<engine::RouteId, Time>> p2p_routes[2];
        /// Fused units it ran before (without run-to-run jitter): where each one's fused part starts, and its length.
        std::vector<std::pair<const Unit*, FusedPart>> fused_parts;
        /// Its tp-stream collectives' plans by (kind, message, context group): a handful, searched in place (references
        /// stay valid as plans are added).
        std::deque<std::pair<std::tuple<int, std::int64_t, bool>, Plan>> plans;
        TaskId optimizer = kNoTask;
        std::vector<int> gpus;                       // its t x c GPUs, context rank major
        std::vector<std::vector<int>> tensor_groups; // c groups of t (one per context rank)
        std::vector<std::vector<int>> context_groups;// t groups of c (one per tensor rank)
        /// With activation offloading: its copies to and from host memory (Megatron-Core's d2h and h2d streams), the
        /// units generated so far (their place in the stage's program), each forward's copies by (chunk, microbatch)
        /// key (per layer, kNoTask where kept) until its backward, and last layers reloaded ahead.
        StreamId d2h{}, h2d{};
        /// With the fabric's PCIe links: its GPUs' copies' routes to the host and back (else copies are unshared).
        std::optional<engine::RouteId> d2h_route, h2d_route;
        std::size_t units = 0;
        std::vector<std::pair<std::uint64_t, std::vector<TaskId>>> offloaded;
        std::vector<std::pair<std::uint64_t, TaskId>> reloaded_ahead;
        /// With fsdp: the index of its next collective in its stage's sequence (FsdpStage::ops).
        std::size_t fsdp_next = 0;
    };
    static constexpr TaskId kNoTask = ~TaskId{0};
    struct UnitTasks {
        TaskId first{}, last{};
        bool valid = false;
    };
    /// A stage's data-parallel reduction as its inputs appear.
    struct StageReduction {
        std::vector<std::vector<TaskId>> bucket_ready;  // per bucket: the replicas' layer ends so far
        std::optional<TaskId> last_bucket;              // the last bucket reduction so far
        std::vector<TaskId> last_backward;              // the replicas' last backward so far
        std::vector<TaskId> drains;                     // the replicas' deferred weight gradients' ends so far
        std::optional<TaskId> dp_done;                  // tied and deferring: the reduction, waiting for the drains
        std::optional<TaskId> reduced;                  // the whole reduction's last task
        std::optional<TaskId> ready;                    // what the optimizers wait for (reduction, embedding sync)
        std::vector<TaskId> held_optimizers;            // optimizers generated before `ready`
        std::vector<TaskId> optimizers;
        bool gathered = false;
        std::optional<Plan> plans[7];                   // by DpMessage, made on first use
        std::map<std::int64_t, Plan> bucket_plans[2];   // megatron_core buckets' reduction [0] and gather [1], by bytes
    };
    /// With Megatron-Core's or NeMo's buckets: a stage's buckets, chunk by chunk, and where each chunk's begin.
    struct StageBuckets {
        std::vector<GradientBucket> buckets;
        std::vector<std::size_t> chunk_offset;
        [[nodiscard]] std::size_t chunk_end(std::size_t c) const { return c + 1 < chunk_offset.size() ? chunk_offset[c + 1] : buckets.size(); }
    };
    /// A stage's data-parallel collectives: its whole gradient, one layer's bucket, what the buckets leave (embeddings,
    /// final norm), the parameter all-gather: whole, or by piece when overlapped (layer, embedding, output layer + norm).
    enum class DpMessage { whole = 0, bucket, rest, gather, gather_layer, gather_embedding, gather_output };
    /// A stage's overlapped parameter all-gather (--overlap-param-gather), bucket by bucket in forward order from the
    /// iteration's start; the first forward of each chunk runs each piece (embedding, layer, output layer) once its
    /// bucket has arrived: a GEMM cannot use a weight before it is there.
    struct GatherChain {
        std::vector<std::size_t> chunk_offset;  // each chunk's first piece
        /// Per forward piece (forward order, over the stage's chunks): the last task of the gather it waits for.
        std::vector<TaskId> gathered;
    };
    /// A (route, latency) interned in the engine.
    using RouteAndLatency = std::pair<engine::RouteId, Time>;

    /// A compute span's time on group g: the profile's time with the group's variation applied.
    Time span_time(Group& g, Time t) {
        if (!variation_.span_active()) return scaled(t, g.speed);
        const Time hold = sc_.system.variation.span_hold;
        // Each span its own draw, or the draw of the level (`hold` long of the group's compute) its start falls in.
        const std::uint64_t draw =
            hold > Time::zero() ? static_cast<std::uint64_t>(g.busy.ps() / hold.ps()) : g.spans++;
        g.busy += t;
        return scaled(t, g.speed * variation_.span_factor(g.gpus, draw));
    }
    /// Kernel speed of each stage's GPUs while its data-parallel collective runs: the collective's NCCL channels
    /// (one SM each) are the device's nccl_channels inside a node, and nccl_channels_per_nic per NIC the group
    /// drives on a node when it crosses nodes.
    [[nodiscard]] std::vector<double> dp_collective_speeds() const;
    /// The shares of a layer's (forward + backward) kernel time in GEMMs and in fused attention kernels.
    struct KernelShares { double gemm = 1, attention = 0; };
    [[nodiscard]] KernelShares kernel_shares() const;
    /// Index in groups_ of a stage's replica (of those simulated: replica 0 alone with representative replicas).
    [[nodiscard]] int group_index(int stage, int replica) const { return stage * replicas_ + replica; }
    /// Global rank (Megatron's order: tensor innermost, then context, then data, then pipeline).
    [[nodiscard]] int rank(int stage, int replica, int context_rank, int tensor_rank) const {
        return e_.global_rank(stage, replica, context_rank, tensor_rank);
    }
    /// Ranks that share a stage's weights: data x context parallel (gradients reduced over them).
    [[nodiscard]] int weight_replicas() const { return e_.data * e_.context; }
    /// The gradients are reduced bucket by bucket (per layer, Megatron-Core's or NeMo's) under the last microbatch's backward.
    [[nodiscard]] bool reduces_by_bucket() const { return e_.overlap_grad_reduce && weight_replicas() > 1 && !e_.fsdp; }
    /// Megatron-Core's or NeMo's buckets (stage_buckets) rather than one per layer; and whether the optimizer steps the
    /// first chunk (Megatron-Core), or the first group (Apex), first and the iteration is cut there (later_chunks_step).
    [[nodiscard]] bool planned_buckets() const { return e_.grad_buckets != GradBuckets::layer; }
    [[nodiscard]] bool steps_first_part_first() const {
        return e_.overlap_param_gather_with_optimizer_step ||
               (nemo_apex(e_.grad_buckets) && e_.overlap_param_gather && weight_replicas() > 1);
    }
    /// Unit u runs layer by layer, its pieces unfused (emit_pieces): the first forward of each chunk under the
    /// overlapped parameter gather (each piece waits for its bucket), the last backward when the gradients are reduced
    /// by bucket (each layer's piece starts its bucket's reduction).
    [[nodiscard]] bool runs_by_layer(const schedule::Unit& u) const {
        return u.forward ? !gather_streams_.empty() && u.microbatch == 0
                         : reduces_by_bucket() && u.microbatch == shape_.microbatches - 1;
    }
    [[nodiscard]] std::size_t message_index(const schedule::Unit& u) const;
    /// The unit's backward defers the output layer's weight gradient (defer_embedding_wgrad_compute).
    [[nodiscard]] bool deferred(const schedule::Unit& u, int stage) const {
        return !u.forward && activations_.defers(stage, u.chunk, u.microbatch);
    }
    /// The stage's deferred GEMMs run before its remaining gradient reduction: without overlap_grad_reduce
    /// (finalize_model_grads starts it after them), or with a group NeMo holds back for after them.
    [[nodiscard]] bool drains_first(const Group& g) const {
        return activations_.drains(g.stage) && (!e_.overlap_grad_reduce || g.held_bucket);
    }
    void emit_deferred_wgrad(Group& g);  // after the last stage's program, before the optimizer: the deferred GEMMs
    const Unit& drain_unit();            // their steps, made once

    // units.cpp
    /// A collective over the group's tensor-parallel ranks (or, with `context`, its context-parallel ranks); the
    /// c (or t) such collectives of the group run at once.
    const Plan& tp_phases(Group& g, CollectiveKind kind, Bytes message, bool context = false);
    /// Emits a unit's steps on group g after `after` (optional); returns its first and last task.
    /// `keep_first`: in a fused group, the unit's first task stays apart (it holds the recompute workspace);
    /// `may_fuse`: false for the pieces of a backward split by layer (their buckets start reductions).
    UnitTasks emit_unit(Group& g, const Unit& unit, std::optional<TaskId> after, std::uint32_t label,
                        bool keep_first = true, bool may_fuse = true);
    /// No data-parallel collective of g's stage can run while the unit generated now runs: g has not reached a
    /// backward split by layer (the first bucket reduction needs it) and the stage's overlapped parameter gather,
    /// if any, is over.
    [[nodiscard]] bool dp_quiet(const Group& g) const {
        return !e_.fsdp && g.buckets == 0 &&
               (gather_left_.empty() || gather_left_[static_cast<std::size_t>(g.stage)] == 0);
    }
    /// Marks the groups whose units may run fused (after find_private_tp_links): a unit's synchronous tp
    /// collectives then join the kernels around them in one compute task of their summed length (the same
    /// picoseconds: each piece would have started the instant the one before it ended).
    void fuse_units();
    /// estimate.cpp: the tasks the run will have (the progress estimate), and those group g's program runs as.
    std::uint64_t estimate_tasks();
    double program_tasks(Group& g);
    /// The tasks a unit runs as on group g (nullptr: before the groups exist, a bound; for the progress estimate).
    [[nodiscard]] double unit_tasks(Group* g, const Unit& unit, bool fused, bool keep_first);
    /// exposed: each phase counts as exposed tensor-parallel communication (a synchronous collective of replica 0).
    TaskId emit_phases(StreamId stream, const Plan& phases, std::span<const TaskId> deps, std::uint32_t label, TaskId* first,
                       bool exposed = false);
    /// The phases with their routes interned.
    Plan intern(const std::vector<fabric::CollectivePhase>& phases);
    const Unit& unit_for(bool forward, int virtual_stage, bool deferred = false);
    /// A chunk's passes in the order its forward or backward runs them: embedding, layers, output layer forward;
    /// output layer, layers last to first (block recompute re-runs the first ones), embedding backward. `layer`
    /// marks a transformer layer's pass; `deferred`: the output layer's weight gradient deferred (deferred()).
    void for_each_pass(bool forward, int virtual_stage, const std::function<void(const std::vector<Step>&, bool layer)>& fn,
                       bool deferred = false) const;
    /// The last microbatch's backward of a chunk by piece, each bucket's reduction starting once it is complete.
    UnitTasks emit_backward_by_layer(Group& g, int chunk, std::optional<TaskId> after, std::uint32_t label, bool deferred);
    /// The first microbatch's forward of a chunk, piece by piece (embedding, layers, output layer), each piece
    /// waiting for its parameter bucket's all-gather (overlap_param_gather).
    UnitTasks emit_forward_by_layer(Group& g, int chunk, std::optional<TaskId> after, std::uint32_t label);
    /// Piece i of a chunk's first forward waits for its parameter bucket's all-gather; `prev`: the task before it,
    /// updated to its last.
    void wait_for_gather(Group& g, int chunk, std::size_t i, const UnitTasks& ut, std::optional<TaskId>& prev);
    /// On the first group, `waiter` waits for weights (a bucket's or a layer's gather; with fsdp also reduce-scatters)
    /// after `before` (none: the run's start): its wait counts as exposed data-parallel communication (observe).
    void note_weight_wait(const Group& g, TaskId waiter, std::optional<TaskId> before);
    /// A chunk's passes as separate units (built once per direction and virtual stage); with Megatron-Core's buckets a
    /// layer's backward is cut where each tensor's gradient is complete (split_at_gradients): several pieces per pass.
    struct Pieces {
        std::vector<Unit> pieces;
        std::vector<bool> is_layer;
        std::vector<int> pass, events_done;  ///< each piece's pass; that pass's gradient events (0-4) done at its end
    };
    const Pieces& pieces_of(bool forward, int virtual_stage, bool deferred = false);
    /// How many gradient buckets stage r has (one per layer, or Megatron-Core's / NeMo's: stage_buckets, made once).
    std::size_t gradient_buckets(int r);
    const StageBuckets& stage_buckets(int r);
    /// Which parameters the gather's piece i of virtual stage v carries (a layer, the input embedding, the output layer).
    static DpMessage gather_message(const Pieces& forward_pieces, int v, std::size_t i);
    /// Emits the pieces one after the other on group g (each its own unit, never fused), after `after`; `each` sees
    /// every piece's index and tasks as it is emitted.
    UnitTasks emit_pieces(Group& g, const Pieces& pieces, std::optional<TaskId> after, std::uint32_t label,
                          const std::function<void(std::size_t, const UnitTasks&)>& each, bool may_fuse = false);

    // offload.cpp
    /// Fine-grained activation offloading is on: every unit then runs layer by layer (emit_offloaded_unit).
    [[nodiscard]] bool offloading() const { return activations_.offload.any(); }
    /// Each stage's units in program order and which offload their last layer (unit_orders_, last_offloaded_).
    void plan_offloading();
    /// Its copy streams for group g (named after it), before the run; their trace lanes in group gi's process.
    void add_offload_streams(Group& g, const std::string& name);
    void trace_offload_streams(std::size_t gi);
    /// Unit u (the group's next unit of its program) layer by layer with its copies: a forward allocates each layer's
    /// activations as the layer starts and copies the offloaded ones to the host after it, freeing them as the copy
    /// ends; a backward reloads each offloaded layer (one layer ahead) and frees each layer's activations as it ends.
    /// The unit's embedding and output activations and the recompute workspace stay with the caller.
    UnitTasks emit_offloaded_unit(Group& g, const schedule::Unit& u, std::optional<TaskId> after, std::uint32_t label,
                                  bool deferred);
    /// A copy of `bytes` per GPU in `copies` tensors on `stream`: a flow over `route` (its GPUs' PCIe links, shared
    /// with their NICs' traffic, and their paths to the host), or without one a task at `bandwidth`.
    TaskId add_copy(StreamId stream, const std::optional<engine::RouteId>& route, Bytes bytes, int copies,
                    BytesPerSecond bandwidth, std::uint32_t label);

    // fsdp.cpp
    /// Megatron-FSDP (ExecutionSpec::fsdp): every unit layer by layer, each layer waiting for its weights' all-gather,
    /// each backward layer's gradient reduce-scattered after it; the stage's collectives on one stream in the order its
    /// GPUs launch them (one NCCL communicator), each made once every simulated replica has reached it.
    struct FsdpPlans {
        Plan gather_layer, gather_embedding, gather_output, reduce_layer, reduce_embedding, reduce_output;
    };
    struct FsdpOp {
        const Plan* plan = nullptr;
        std::uint32_t label = 0;
        std::vector<TaskId> triggers;  ///< the replicas' tasks it waits for so far
        std::vector<TaskId> waiters;   ///< tasks held until it exists
        std::optional<TaskId> done;    ///< its last task, once every replica has reached it
    };
    /// Each stage's stream for them, its kernels slowing the stage's compute at `dp_speeds` (make_groups).
    void add_fsdp_streams(const std::vector<double>& dp_speeds);
    /// Each stage's collectives' plans, made before the routes are sealed (find_private_tp_links); returned by stage.
    std::vector<std::pair<int, const Plan*>> plan_fsdp();
    /// Group g's next collective of its stage's sequence, waiting for `trigger`; returns its index.
    std::size_t fsdp_op(Group& g, const Plan& plan, std::uint32_t label, TaskId trigger);
    /// `waiter` (a task not started) cannot start before collective j of g's stage has ended.
    void fsdp_wait(Group& g, std::size_t j, TaskId waiter);
    UnitTasks emit_fsdp_unit(Group& g, const schedule::Unit& u, std::optional<TaskId> after, std::uint32_t label,
                             bool deferred);
    std::vector<FsdpPlans> fsdp_plans_;          // per stage
    std::vector<std::vector<FsdpOp>> fsdp_ops_;  // per stage, in launch order
    std::vector<StreamId> fsdp_streams_;         // per stage

    // program.cpp
    void make_groups();
    void check_task_limit();
    /// The refill: group gi's next instruction (or its optimizer step) as tasks; false once it has none.
    bool emit_next(std::size_t gi);
    void emit_instruction(std::size_t gi, const schedule::Instruction& ins);
    // pipeline.cpp
    /// Group gi's call (post, wait) sends unit s / receives unit u (target: the task that needs the data).
    void on_send(std::size_t gi, const schedule::Unit& s, TaskId post, TaskId wait, bool blocking);
    void on_receive(std::size_t gi, const schedule::Unit& u, TaskId post, TaskId target, bool blocking);
    /// The second side of a pipeline message (`me`, a send or a receive, to `receiver_group`, message `key`) creates
    /// the transfer and releases the first side's hold; the first waits in the receiving group's pending list.
    void rendezvous(std::size_t receiver_group, std::uint64_t key, const PendingMessage& me);
    void emit_pipeline_transfer(const PendingMessage& sender, std::size_t receiver_group, TaskId receiver_post,
                                TaskId receiver_target, bool receiver_blocking, std::uint64_t message);
    // gradients.cpp
    /// Bucket j (`params` parameters) is complete on g after `end`: its NaN check and averaging pass, and once every
    /// replica has it, its reduction. Returned: the passes' last task.
    TaskId on_bucket(Group& g, TaskId end, std::size_t j, double params, const Plan& plan);
    /// Backward piece i of g's chunk has ended (overlap_grad_reduce): the buckets it completes.
    void on_backward_piece(Group& g, int chunk, const Pieces& pieces, std::size_t i, TaskId end);
    void on_last_backward(Group& g, TaskId last);
    /// What Megatron runs on g's compute stream over `params` parameters' gradients before their reduction, after
    /// `after`: the NaN check (ExecutionSpec::check_for_nan_in_grad), then the averaging pass
    /// (ExecutionSpec::averages_by_pass). Returned: what the reduction waits for (`after` when neither runs).
    TaskId prepare_gradients(Group& g, TaskId after, double params);
    void emit_optimizer(Group& g);
    /// FP8 delayed scaling: the amax all-reduce that ends an FP8 region (a unit) before the group's next task.
    void plan_amax_reductions();
    void emit_amax_reduction(Group& g, const schedule::Unit& s);
    [[nodiscard]] double amax_tasks_per_unit(int stage) const;
    /// Stage r's optimizer step on one GPU (HBM-bound bytes and the fixed overhead), before variation.
    [[nodiscard]] Time optimizer_step(int stage) const;
    /// With steps_first_part_first: the part of stage r's step after its first chunk's (Apex: its first group's),
    /// which the simulated iteration begins with (zero otherwise).
    [[nodiscard]] Time later_chunks_step(int stage);
    /// Under SP, stage r's sum of its norm and row-parallel-bias gradients over the tensor-parallel group before the
    /// step (build_sequence_parallel_grad_sync), before variation; zero without SP.
    [[nodiscard]] Time sequence_parallel_grad_sync(int stage) const;
    /// Sets each stage's GatherChain up and generates its gathers (overlap_param_gather).
    void emit_overlapped_param_gathers();
    void stage_reduced(int stage, TaskId done);
    void drained(int stage);  // deferring, tied: the stage's reduction counts as done once its drains have run too
    void release_optimizers(int stage);
    void maybe_gather_parameters(int stage);
    /// The stage's plan for `which`, made once (every replica's tensor rank i rings together over its rail).
    const Plan& dp_plan(int stage, DpMessage which);
    /// Parameters the per-layer buckets leave to the reduction after the last backward.
    [[nodiscard]] double rest_parameters(int stage) const;
    /// What the buckets leave to after the last backward: rest_parameters, none with Megatron-Core's or NeMo's.
    [[nodiscard]] double unbucketed_parameters(int stage) const { return planned_buckets() ? 0 : rest_parameters(stage); }
    /// Stage r's ring plans: a reduction, or an all-gather, of `message` per GPU.
    /// (`gather`: an all-gather over the same t rings, as Megatron-FSDP gathers each tensor rank's shards.)
    [[nodiscard]] std::vector<fabric::CollectivePhase> reduction_phases(int stage, Bytes message,
                                                                        bool gather = false) const;
    [[nodiscard]] std::vector<fabric::CollectivePhase> gather_phases(int stage, Bytes message) const;
    /// A planned bucket's (Megatron-Core's, NeMo's) reduction ([0]) or parameter all-gather ([1]) plan, made once per size.
    const Plan& bucket_plan(int stage, const GradientBucket& b, bool gather);
    /// Group a's pipeline route to its forward or backward receiver (the interleaved schedule wraps around), made once.
    const RouteAndLatency& p2p_route(Group& a, bool forward);
    /// With overlap_p2p_comm: which of group `gi`'s pair streams (Group::pair_posts) an op of a message of direction
    /// `forward` uses, as a sender or a receiver.
    [[nodiscard]] int pair_channel(bool forward, bool sender) const;
    /// Both sides of a pair must post its ops in one order (NCCL matches sends and receives by it).
    void check_pair_order(const PendingMessage& sender, std::uint64_t receiver_order) const;
    /// The engine stream a pipeline transfer from group `a` runs on: with the pair order, the pair's one stream (the
    /// lower stage's send-forward stream; with two stages the sender's), else the sender's stream of its direction.
    [[nodiscard]] StreamId transfer_stream(const Group& a, bool forward) const;
    /// The tied-embedding sync's route between the first and the last stage, both ways, made once.
    const RouteAndLatency& embedding_route();
    /// Groups whose tensor-parallel links nothing else ever crosses move their tp-stream collectives without flows
    /// (their in-order tp stream runs one at a time, so each moves alone at its route's rate: the same times).
    void find_private_tp_links();
    // metrics.cpp
    void observe(const engine::TaskRecord& r);

    const Scenario& sc_;
    const ExecutionSpec& e_;
    engine::Simulator& sim_;
    fabric::Fabric& fab_;
    CostModel cost_;
    const SimulationOptions& options_;
    /// Data-parallel replicas simulated per stage: e.data, or with options.representative_replicas those on
    /// replica 0's node (representative_replicas()).
    int replicas_ = 1;
    Variation variation_;
    fabric::CollectiveParams coll_params_;
    schedule::Shape shape_;
    std::vector<std::vector<schedule::Instruction>> programs_;   // per stage
    /// With activation offloading, per stage: its units in program order and whether each offloads its chunk's last
    /// layer (offloads_last_layer).
    std::vector<std::vector<schedule::Unit>> unit_orders_;
    std::vector<std::vector<bool>> last_offloaded_;
    ActivationPlan activations_;
    Bytes activation_message_;                                   // one microbatch's activation, all t ranks
    std::vector<Group> groups_;
    /// The SMs the context-parallel ring holds for a collective's buffer (CostModel::context_ring_sms, the job's).
    [[nodiscard]] std::function<int(Bytes)> ring_sms() const {
        return cost_.context_ring_sms(e_, sc_.system.gpus_per_node);
    }
    std::vector<StreamId> dp_streams_;
    std::vector<StreamId> gather_streams_;                       // overlapped parameter all-gather, per stage
    std::vector<std::int32_t> gather_stage_;                     // stream -> stage whose gather stream it is, or -1
    std::vector<std::uint32_t> gather_left_;                     // per stage: the gather's tasks not finished yet
    std::vector<std::size_t> last_backward_pc_;                  // per stage: its program's last backward unit
    std::vector<std::uint32_t> compute_group_;                   // stream -> group whose compute stream it is
    std::vector<StageReduction> reductions_;
    std::optional<TaskId> embedding_sync_;
    std::optional<RouteAndLatency> embedding_route_;
    /// sequence_parallel_grad_sync per stage, costed once (every group of a stage asks).
    mutable std::vector<std::optional<Time>> sp_grad_sync_;
    engine::RouteId empty_route_{};
    std::uint64_t expected_tasks_ = 0;
    std::optional<Unit> drain_;  // the deferred weight-gradient GEMMs (emit_deferred_wgrad)
    std::map<std::tuple<bool, int, int>, Unit> units_;  // (forward, kind: 1 first | 2 last | 4 deferred; layers)
    std::map<std::tuple<bool, int, bool>, Pieces> pieces_;  // by (forward, virtual stage, deferred), emit_*_by_layer
    std::vector<GatherChain> gathers_;                   // per stage, with overlap_param_gather
    std::vector<std::optional<StageBuckets>> stage_buckets_;  // per stage, with grad_buckets megatron_core
    /// FP8 delayed scaling's amax all-reduces (emit_amax_reduction): per stage, the all-reduce's latency and, where it
    /// joins the stage's replicas, a stream of its own and the meetings still waiting for replicas, by region number.
    struct AmaxMeeting {
        std::vector<TaskId> posts, waits;
    };
    std::vector<Time> amax_latency_;
    std::vector<StreamId> amax_streams_;
    std::vector<std::unordered_map<std::uint64_t, AmaxMeeting>> amax_meetings_;
    /// overlap_p2p_comm: a pipeline message's transfer (once both calls are posted) and the first tasks waiting for it
    /// (held until it exists), by receiving group x message index; erased once both sides' units have attached.
    struct OverlapMessage {
        TaskId transfer = ~TaskId{0};
        std::vector<TaskId> waiting;
        int attached = 0;
    };
    std::unordered_map<std::uint64_t, OverlapMessage> overlap_msgs_;
    [[nodiscard]] std::uint64_t overlap_key(std::size_t receiver_group, std::uint64_t message) const {
        return static_cast<std::uint64_t>(receiver_group) * (2 * std::uint64_t(shape_.chunks) * std::uint64_t(shape_.microbatches)) + message;
    }
    /// A unit's first task waits for the message's transfer (now, or when it is created).
    void attach_overlap(std::uint64_t key, TaskId first);
    // Read from finished tasks (metrics.cpp).
    bool want_detail_ = false;
    /// Under a power limit with headroom after rest (SustainedClock::saving_fraction): the share of a kernel's time a
    /// run at the boost clock saves; 0: no headroom.
    double saving_fraction_ = 0;
    [[nodiscard]] Time max_saving(Time d) const {
        if (saving_fraction_ <= 0) return Time::zero();
        return Time::from_ps(static_cast<std::int64_t>(std::floor(static_cast<double>(d.ps()) * saving_fraction_)));
    }
    // Non-overlapped TP collectives of replica 0 not finished yet: per engine task slot, the generation + 1 of the
    // marked task (0: none), so that marking and finding cost no allocation.
    std::vector<std::uint32_t> exposed_tp_;
    void mark_exposed_tp(TaskId t);
    // Overlapped TP collectives of replica 0 and the kernels beside them: the compute stream waits for the later of
    // the two, so the time the collective runs on after its kernels have ended is exposed. Indexed by task slot, with
    // the generation + 1 (0: none): a collective's slot holds its kernels' end once they ended first; the kernels'
    // slot names their collective. Keyed so, a slot reused after the kernels end (streaming) cannot take their record
    // before the collective ends.
    std::vector<std::uint32_t> paired_tp_, paired_compute_;
    std::vector<TaskId> paired_partner_;         ///< by the kernels' slot: their collective
    std::vector<std::int64_t> paired_compute_end_;  ///< by the collective's slot: its kernels' end, -1 before
    void mark_paired_tp(TaskId collective_last, TaskId compute);
    std::int64_t exposed_tp_ps_ = 0;
    std::int64_t g0_last_backward_end_ = 0, g0_optimizer_start_ = 0, g0_optimizer_end_ = 0;
    TaskId g0_last_amax_ = kNoTask;   // group 0's amax all-reduce (or wait for it) after its last backward
    std::vector<std::int64_t> amax_post_end_;  // per stage, replica 0: the open meeting's post end (ps), or -1
    std::int64_t g0_average_ps_ = 0;  // stage 0's NaN check and averaging pass after its last backward (compute, not comm)
    std::int64_t g0_gather_end_ = -1;             // stage 0's non-overlapped parameter all-gather, once it ended
    // Stage 0, replica 0, overlapped parameter gather: the first tasks that wait for a bucket and the task before each
    // (kNoTask: none; both run in this order), the next of each to end, the last predecessor's end, the time the
    // first tasks waited beyond their predecessors in all.
    std::vector<TaskId> g0_gather_waiters_, g0_gather_preds_;
    std::size_t g0_next_waiter_ = 0, g0_next_pred_ = 0;
    std::int64_t g0_pred_end_ = 0, g0_gather_wait_ps_ = 0;
    std::vector<std::int32_t> p2p_stage_;         // stream -> stage of replica 0's send or tp stream, or -1
    std::vector<std::int32_t> p2p_peer_;          // stream -> stage a replica-0 send stream delivers to, or -1
    /// Per stage (replica 0): its current pipeline call's transfers so far, merged into disjoint intervals (ps).
    std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> p2p_open_;
    std::int64_t exposed_p2p_ps_ = 0;             // their union's length, summed over the calls and stages
    void cover_p2p(std::int32_t stage, std::int64_t start, std::int64_t end);
    std::vector<std::int32_t> interval_stage_;    // stream -> stage of replica 0's compute or tp stream, or -1
    std::vector<std::uint8_t> interval_tp_;       // stream -> whether it is a tp stream
    std::vector<std::uint32_t> stream_process_;   // stream -> trace process: its group, or one past the last (data-parallel)
    std::vector<std::uint8_t> stream_traced_;     // stream -> whether its spans go to the trace (--trace-groups)
    std::unordered_map<TaskId, std::uint32_t> p2p_receiver_;  // traced pipeline transfer -> receiving group
    [[nodiscard]] bool traced(int stage, int replica) const {
        return options_.keep_trace && stage >= options_.trace_first_stage && stage <= options_.trace_last_stage &&
               replica >= options_.trace_first_replica && replica <= options_.trace_last_replica;
    }
    std::vector<StageInterval> intervals_;
    std::vector<TraceSpan> spans_;
};

}  // namespace strata::workload
