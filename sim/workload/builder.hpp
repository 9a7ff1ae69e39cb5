// The workload's graph builder (internal to sim/workload): turns a scenario's schedule programs into a task
// graph for the discrete-event engine.
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
//   program.cpp    groups, streams, pools; each group's schedule program (sim/schedule) as tasks, with
//                  memory effects from the activation plan the analytical model uses too
//   pipeline.cpp   the pipeline transfers between the programs' blocking calls
//   gradients.cpp  data-parallel gradient reduction, tied-embedding sync, optimizer step
//   metrics.cpp    results read back from the engine into neutral records (strata/metrics.hpp)
//   simulate.cpp   simulate(): fabric, builder, engine run
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

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
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
};

/// A chunk's forward or backward pass as costed steps (adjacent compute steps merged).
struct Unit {
    std::vector<UnitStep> steps;
};

/// Appends a pass's steps, costed, merging adjacent compute steps (never into a step paired with an
/// overlapped collective).
void append(std::vector<UnitStep>& out, const std::vector<Step>& pass, const CostModel& cost);

enum class TaskKind : std::uint32_t { forward = 0, backward, tp, p2p, dp, optimizer, embedding_sync };
inline constexpr const char* kKindNames[] = {"forward",   "backward",  "tp-collective",      "p2p",
                                             "dp-reduce", "optimizer", "embedding-grad-sync"};

/// label = kind (4 bits) | chunk (8 bits) | microbatch (20 bits)
inline std::uint32_t make_label(TaskKind kind, int chunk, int mb) {
    return (static_cast<std::uint32_t>(kind) << 28) | (static_cast<std::uint32_t>(chunk & 0xff) << 20) |
           static_cast<std::uint32_t>(mb & 0xfffff);
}
inline TaskKind label_kind(std::uint32_t label) { return static_cast<TaskKind>(label >> 28); }
inline int label_chunk(std::uint32_t label) { return static_cast<int>((label >> 20) & 0xff); }
inline int label_mb(std::uint32_t label) { return static_cast<int>(label & 0xfffff); }

class Builder {
public:
    Builder(const Scenario& sc, engine::Simulator& sim, fabric::Fabric& fab, const SimulationOptions& options);

    /// Builds the whole graph: programs, pipeline transfers, gradient reduction and optimizer.
    void build();
    /// Reads the run's results back (after the engine ran).
    IterationResult collect(SimulationDetail* detail, double wall_s, const engine::RunStats& stats) const;
    [[nodiscard]] std::string describe(std::uint32_t label) const;
    /// Every span of the run, on a lane per stream and a process per GPU group (after the engine ran).
    [[nodiscard]] Trace trace() const;

private:
    struct Group {
        int stage = 0, replica = 0;
        std::vector<int> gpus;                       // its t x c GPUs, context rank major
        std::vector<std::vector<int>> tensor_groups; // c groups of t (one per context rank)
        std::vector<std::vector<int>> context_groups;// t groups of c (one per tensor rank)
        StreamId compute{}, tp{}, send_fwd{}, send_bwd{};
        engine::PoolId pool{};
        std::map<std::tuple<int, std::int64_t, bool>, std::vector<fabric::CollectivePhase>> plans;
        TaskId last_backward{};
        TaskId optimizer{};
        double speed = 1.0;          // its slowest GPU's persistent kernel-time factor (variation)
        std::uint64_t spans = 0;     // compute spans emitted so far (run-to-run variation draws)
        std::vector<TaskId> grad_buckets;   // with overlap_grad_reduce: each layer's last backward, in order
    };
    struct UnitTasks {
        TaskId first{}, last{};
        bool valid = false;
    };
    /// A blocking pipeline call as two tasks on the compute stream.
    struct CallTasks {
        TaskId post{}, wait{};
    };
    struct Receive {
        std::size_t call = 0;
        std::optional<TaskId> gather_first;  // scatter/gather: the all-gather the transfer feeds
    };
    /// Per group: its calls, and for each unit (direction, chunk, microbatch) the call that sends its output
    /// and the call that receives its input.
    struct GroupCalls {
        std::vector<CallTasks> calls;
        std::vector<std::optional<std::size_t>> sends;
        std::vector<std::optional<Receive>> receives;
    };

    /// A compute span's time on group g: the profile's time with the group's variation applied.
    Time span_time(Group& g, Time t) {
        const double f = variation_.span_active() ? g.speed * variation_.span_factor(g.gpus, g.spans++) : g.speed;
        return scaled(t, f);
    }
    /// Kernel speed of a stage's GPUs while its data-parallel collective runs: the collective's NCCL channels
    /// (one SM each) are the device's nccl_channels inside a node, and nccl_channels_per_nic per NIC the group
    /// drives on a node when it crosses nodes.
    [[nodiscard]] double dp_collective_speed(int stage) const;
    [[nodiscard]] int group_index(int stage, int replica) const { return stage * e_.data + replica; }
    /// Global rank (Megatron's order: tensor innermost, then context, then data, then pipeline).
    [[nodiscard]] int rank(int stage, int replica, int context_rank, int tensor_rank) const {
        return ((stage * e_.data + replica) * e_.context + context_rank) * e_.tensor + tensor_rank;
    }
    /// Ranks that share a stage's weights: data x context parallel (gradients reduced over them).
    [[nodiscard]] int weight_replicas() const { return e_.data * e_.context; }
    [[nodiscard]] std::size_t message_index(const schedule::Unit& u) const;

    // units.cpp
    /// A collective over the group's tensor-parallel ranks (or, with `context`, its context-parallel ranks); the
    /// c (or t) such collectives of the group run at once.
    const std::vector<fabric::CollectivePhase>& tp_phases(Group& g, CollectiveKind kind, Bytes message,
                                                          bool context = false);
    /// Emits a unit's steps on group g after `after` (optional); returns its first and last task.
    UnitTasks emit_unit(Group& g, const Unit& unit, std::optional<TaskId> after, std::uint32_t label);
    TaskId emit_phases(StreamId stream, const std::vector<fabric::CollectivePhase>& phases, std::vector<TaskId> deps,
                       std::uint32_t label, TaskId* first);
    const Unit& unit_for(bool forward, int virtual_stage);
    /// A chunk's passes in the order its forward or backward runs them: embedding, layers, output layer forward;
    /// output layer, layers last to first (block recompute re-runs the first ones), embedding backward. `layer`
    /// marks a transformer layer's pass.
    void for_each_pass(bool forward, int virtual_stage,
                       const std::function<void(const std::vector<Step>&, bool layer)>& fn) const;
    /// The last microbatch's backward of a chunk, layer by layer, so that each layer's gradient bucket can
    /// start its data-parallel reduction as soon as it is complete (overlap_grad_reduce).
    UnitTasks emit_backward_by_layer(Group& g, int virtual_stage, std::optional<TaskId> after, std::uint32_t label);

    // program.cpp
    void make_groups();
    void check_task_limit();
    void emit_program(std::size_t group_index);
    // pipeline.cpp
    void emit_pipeline_transfers();
    // gradients.cpp
    void emit_gradient_reduction_and_optimizer();

    const Scenario& sc_;
    const ExecutionSpec& e_;
    engine::Simulator& sim_;
    fabric::Fabric& fab_;
    CostModel cost_;
    const SimulationOptions& options_;
    Variation variation_;
    fabric::CollectiveParams coll_params_;
    schedule::Shape shape_;
    std::vector<std::vector<schedule::Instruction>> programs_;   // per stage
    ActivationPlan activations_;
    Bytes activation_message_;                                   // one microbatch's activation, all t ranks
    std::vector<Group> groups_;
    std::vector<GroupCalls> group_calls_;
    std::vector<StreamId> dp_streams_;
    std::map<std::tuple<bool, int, int>, Unit> units_;  // (forward, kind: 0 plain, 1 first, 2 last, 3 both; layers)
    struct BackwardPieces {
        std::vector<Unit> pieces;
        std::vector<bool> is_layer;
    };
    std::map<int, BackwardPieces> backward_pieces_;     // by virtual stage, for emit_backward_by_layer
    std::vector<TaskId> exposed_tp_;              // non-overlapped TP collective tasks of replica 0
};

}  // namespace strata::workload
