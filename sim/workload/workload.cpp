// The workload: turns a scenario into a task graph for the discrete-event engine and reads the results.
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
// Schedules (per stage, Megatron-LM order): GPipe, 1F1B (warm-up min(p - r - 1, N) forwards), and the
// interleaved 1F1B with m model chunks (warm-up 2(p - r - 1) + (m - 1)p virtual microbatches).
// A chunk's forward and backward are "units"; a unit is the chunk's layers' steps concatenated
// (adjacent compute steps merged), with the embedding on the first virtual stage and the output layer
// and loss on the last. Pipeline communication follows Megatron-LM (2022): blocking calls between units
// (batch_isend_irecv, then a device synchronize). A call is a zero-length "post" task and a "wait" task on
// the compute stream; a transfer starts once the sender's and the receiver's calls are both posted, and
// both waits depend on it. Call boundaries are the schedule's: the interleaved schedule exchanges once after
// each steady forward-backward pair; 1F1B combines a send with the next receive between a forward and a
// backward, and sends then receives between two units of one direction. Without sequence parallelism the activation is
// split over the t rails and all-gathered on the receiver (Megatron's scatter/gather optimisation);
// with it each rank sends its own sequence shard.
//
// After its last backward each stage reduces gradients over data-parallel replicas (all-reduce, or
// reduce-scatter + all-gather of parameters with the distributed optimizer), the first and last stage
// all-reduce the tied embedding's gradient, then every group runs its optimizer step.
//
// Memory: each group's pool holds weights, gradients and optimizer state from time zero; a forward
// unit allocates its chunk's activations when it starts and the backward unit frees them when it ends;
// recompute allocates one layer's recomputed activations for the duration of a backward unit.
#include "strata/simulate.hpp"

#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/fabric.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

namespace strata {

namespace {

using engine::TaskId;
using engine::StreamId;

/// A step of a unit, costed: a compute span or a tensor-parallel collective.
struct UnitStep {
    bool is_compute = true;
    Time duration;               // compute
    CollectiveKind kind{};       // collective
    Bytes message;
    bool overlapped = false;
};

enum class TaskKind : std::uint32_t { forward = 0, backward, tp, p2p, dp, optimizer, embedding_sync };
constexpr const char* kKindNames[] = {"forward", "backward", "tp-collective", "p2p", "dp-reduce", "optimizer",
                                      "embedding-grad-sync"};

/// label = kind (4 bits) | chunk (8 bits) | microbatch (20 bits)
std::uint32_t make_label(TaskKind kind, int chunk, int mb) {
    return (static_cast<std::uint32_t>(kind) << 28) | (static_cast<std::uint32_t>(chunk & 0xff) << 20) |
           static_cast<std::uint32_t>(mb & 0xfffff);
}
TaskKind label_kind(std::uint32_t label) { return static_cast<TaskKind>(label >> 28); }
int label_chunk(std::uint32_t label) { return static_cast<int>((label >> 20) & 0xff); }
int label_mb(std::uint32_t label) { return static_cast<int>(label & 0xfffff); }

void append(std::vector<UnitStep>& out, const std::vector<Step>& pass, const CostModel& cost) {
    for (const Step& s : pass) {
        if (s.kind == Step::Kind::compute) {
            const Time d = cost.compute_step(s);
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
            out.push_back(u);
        }
    }
}

struct Unit {
    std::vector<UnitStep> steps;
};

/// Memory categories of every group's pool, in index order.
const std::vector<std::string> kMemoryCategories = {"weights",     "gradients",        "optimizer", "activations",
                                                    "embedding/output", "recompute", "runtime reserved"};

/// One schedule slot: forward or backward of (chunk, microbatch).
struct Slot {
    bool forward;
    int chunk;
    int mb;
};

std::vector<Slot> stage_program(const ExecutionSpec& e, int r) {
    const int p = e.pipeline, n = e.microbatches();
    std::vector<Slot> prog;
    if (e.schedule == Schedule::gpipe) {
        for (int j = 0; j < n; ++j) prog.push_back({true, 0, j});
        for (int j = 0; j < n; ++j) prog.push_back({false, 0, j});
        return prog;
    }
    if (e.schedule == Schedule::one_f_one_b) {
        const int warm = std::min(p - r - 1, n);
        for (int j = 0; j < warm; ++j) prog.push_back({true, 0, j});
        for (int i = 0; i < n - warm; ++i) {
            prog.push_back({true, 0, warm + i});
            prog.push_back({false, 0, i});
        }
        for (int i = n - warm; i < n; ++i) prog.push_back({false, 0, i});
        return prog;
    }
    const int m = e.interleave, total = n * m;
    const int warm = n == p ? total : std::min(2 * (p - r - 1) + (m - 1) * p, total);
    auto fwd = [&](int k) {
        const int in_group = k % (p * m);
        return Slot{true, in_group / p, (k / (p * m)) * p + (k % p)};
    };
    auto bwd = [&](int k) {
        const int in_group = k % (p * m);
        return Slot{false, m - 1 - in_group / p, (k / (p * m)) * p + (k % p)};
    };
    for (int k = 0; k < warm; ++k) prog.push_back(fwd(k));
    for (int i = 0; i < total - warm; ++i) {
        prog.push_back(fwd(warm + i));
        prog.push_back(bwd(i));
    }
    for (int i = total - warm; i < total; ++i) prog.push_back(bwd(i));
    return prog;
}

class Builder {
public:
    Builder(const Scenario& sc, engine::Simulator& sim, fabric::Fabric& fab, const SimulationOptions& options)
        : sc_(sc), e_(sc.execution), sim_(sim), fab_(fab), cost_(sc.system.device), options_(options) {
        const NetworkSpec& n = sc.system.network;
        coll_params_ = {n.collective_step_latency_intra, n.collective_step_latency_inter, n.hierarchical_collectives};
    }

    void build();
    IterationResult collect(SimulationDetail* detail, double wall_s, const engine::RunStats& stats);
    std::string describe(std::uint32_t label) const {
        return fmt::format("{} chunk {} microbatch {}", kKindNames[static_cast<int>(label_kind(label))],
                           label_chunk(label), label_mb(label));
    }
    void write_trace(const std::string& path) const;

private:
    struct Group {
        int stage = 0, replica = 0;
        std::vector<int> gpus;
        StreamId compute{}, tp{}, send_fwd{}, send_bwd{};
        engine::PoolId pool{};
        std::map<std::pair<int, std::int64_t>, std::vector<fabric::CollectivePhase>> plans;
        TaskId last_backward{};
        TaskId optimizer{};
        std::vector<TaskId> grad_buckets;   // with overlap_grad_reduce: each layer's last backward, in order
    };
    struct UnitTasks {
        TaskId first{}, last{};
        bool valid = false;
    };

    int group_index(int stage, int replica) const { return stage * e_.data + replica; }
    const std::vector<fabric::CollectivePhase>& tp_phases(Group& g, CollectiveKind kind, Bytes message);
    /// Emits a unit's steps on group g after `after` (optional); returns its first and last task.
    UnitTasks emit_unit(Group& g, const Unit& unit, std::optional<TaskId> gather_first, std::uint32_t label);
    TaskId emit_phases(StreamId stream, const std::vector<fabric::CollectivePhase>& phases, std::vector<TaskId> deps,
                       std::uint32_t label, TaskId* first);
    const Unit& unit_for(bool forward, int virtual_stage);
    /// The last microbatch's backward of a chunk, layer by layer, so that each layer's gradient bucket can
    /// start its data-parallel reduction as soon as it is complete (overlap_grad_reduce).
    UnitTasks emit_backward_by_layer(Group& g, int virtual_stage, std::optional<TaskId> gate, std::uint32_t label);

    const Scenario& sc_;
    const ExecutionSpec& e_;
    engine::Simulator& sim_;
    fabric::Fabric& fab_;
    CostModel cost_;
    const SimulationOptions& options_;
    fabric::CollectiveParams coll_params_;
    std::vector<Group> groups_;
    std::vector<StreamId> dp_streams_;
    std::map<std::pair<bool, int>, Unit> units_;  // (forward, kind: 0 plain, 1 first, 2 last, 3 both)
    std::vector<TaskId> exposed_tp_;              // non-overlapped TP collective tasks of replica 0
    Bytes activations_chunk_, recompute_bytes_, embedding_bytes_, output_bytes_;
};

const std::vector<fabric::CollectivePhase>& Builder::tp_phases(Group& g, CollectiveKind kind, Bytes message) {
    auto key = std::pair{static_cast<int>(kind), message.value};
    auto it = g.plans.find(key);
    if (it != g.plans.end()) return it->second;
    const fabric::CollectiveKind fk = kind == CollectiveKind::all_reduce   ? fabric::CollectiveKind::all_reduce
                                      : kind == CollectiveKind::all_gather ? fabric::CollectiveKind::all_gather
                                                                           : fabric::CollectiveKind::reduce_scatter;
    return g.plans.emplace(key, fabric::plan_collective(fab_, fk, g.gpus, message, coll_params_)).first->second;
}

TaskId Builder::emit_phases(StreamId stream, const std::vector<fabric::CollectivePhase>& phases,
                            std::vector<TaskId> deps, std::uint32_t label, TaskId* first) {
    TaskId last{};
    bool have = false;
    for (const auto& ph : phases) {
        TaskId t = sim_.add_transfer(stream, ph.route.links, ph.bytes, ph.latency + ph.route.latency, label);
        for (TaskId d : deps) sim_.add_dependency(d, t);
        if (!have && first) *first = t;
        deps = {t};
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

Builder::UnitTasks Builder::emit_unit(Group& g, const Unit& unit, std::optional<TaskId> gather_dep,
                                      std::uint32_t label) {
    UnitTasks out;
    std::vector<TaskId> prev;
    if (gather_dep) prev.push_back(*gather_dep);
    const std::uint32_t tp_label = make_label(TaskKind::tp, label_chunk(label), label_mb(label));
    auto note_first = [&](TaskId t) {
        if (!out.valid) {
            out.first = t;
            out.valid = true;
        }
    };
    for (std::size_t i = 0; i < unit.steps.size(); ++i) {
        const UnitStep& s = unit.steps[i];
        if (s.is_compute) {
            TaskId t = sim_.add_compute(g.compute, s.duration, label);
            for (TaskId d : prev) sim_.add_dependency(d, t);
            note_first(t);
            prev = {t};
            continue;
        }
        TaskId first{};
        const TaskId last = emit_phases(g.tp, tp_phases(g, s.kind, s.message), prev, tp_label, &first);
        note_first(first);
        if (s.overlapped && i + 1 < unit.steps.size() && unit.steps[i + 1].is_compute) {
            // The overlapped kernels lose the SMs the collective holds while it runs.
            const Time c = cost_.tp_collective(s.kind, e_.tensor, s.message);
            TaskId w = sim_.add_compute(g.compute, cost_.overlapped_compute(unit.steps[i + 1].duration, c), label);
            for (TaskId d : prev) sim_.add_dependency(d, w);
            prev = {w, last};
            ++i;
        } else {
            // Synchronous: the next kernel waits for it, so the in-order compute stream is blocked meanwhile.
            if (g.replica == 0) exposed_tp_.push_back(last);
            prev = {last};
        }
    }
    if (!out.valid) {
        out.first = out.last = sim_.add_compute(g.compute, Time::zero(), label);
        out.valid = true;
        for (TaskId d : prev) sim_.add_dependency(d, out.first);
        return out;
    }
    if (prev.size() == 1) {
        out.last = prev[0];
    } else {
        out.last = sim_.add_compute(g.compute, Time::zero(), label);
        for (TaskId d : prev) sim_.add_dependency(d, out.last);
    }
    return out;
}

const Unit& Builder::unit_for(bool forward, int v) {
    const int last_v = e_.pipeline * e_.interleave - 1;
    const int kind = (v == 0 ? 1 : 0) | (v == last_v ? 2 : 0);
    auto key = std::pair{forward, kind};
    auto it = units_.find(key);
    if (it != units_.end()) return it->second;
    const LayerConfig lc = layer_config(sc_.model, e_);
    const LayerPlan layer = build_layer(lc);
    const int layers = sc_.model.layers / (e_.pipeline * e_.interleave);
    Unit u;
    if (forward) {
        if (kind & 1) append(u.steps, build_embedding(lc).forward, cost_);
        for (int i = 0; i < layers; ++i) append(u.steps, layer.forward, cost_);
        if (kind & 2) append(u.steps, build_output(lc).forward, cost_);
    } else {
        if (kind & 2) append(u.steps, build_output(lc).backward, cost_);
        for (int i = 0; i < layers; ++i) append(u.steps, layer.backward, cost_);
        if (kind & 1) append(u.steps, build_embedding(lc).backward, cost_);
    }
    return units_.emplace(key, std::move(u)).first->second;
}

Builder::UnitTasks Builder::emit_backward_by_layer(Group& g, int v, std::optional<TaskId> gate, std::uint32_t label) {
    const LayerConfig lc = layer_config(sc_.model, e_);
    const int last_v = e_.pipeline * e_.interleave - 1;
    std::vector<Unit> pieces;
    if (v == last_v) {
        pieces.emplace_back();
        append(pieces.back().steps, build_output(lc).backward, cost_);
    }
    const LayerPlan layer = build_layer(lc);
    const int layers = sc_.model.layers / (e_.pipeline * e_.interleave);
    for (int i = 0; i < layers; ++i) {
        pieces.emplace_back();
        append(pieces.back().steps, layer.backward, cost_);
    }
    if (v == 0) {
        pieces.emplace_back();
        append(pieces.back().steps, build_embedding(lc).backward, cost_);
    }
    UnitTasks all;
    std::optional<TaskId> prev = gate;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        const UnitTasks ut = emit_unit(g, pieces[i], prev, label);
        if (!all.valid) {
            all.first = ut.first;
            all.valid = true;
        }
        all.last = ut.last;
        prev = ut.last;
        const bool is_layer = !(v == last_v && i == 0) && !(v == 0 && i + 1 == pieces.size());
        if (is_layer) g.grad_buckets.push_back(ut.last);
    }
    return all;
}

void Builder::build() {
    const int p = e_.pipeline, d = e_.data, t = e_.tensor, m = e_.interleave;
    const LayerConfig lc = layer_config(sc_.model, e_);
    const LayerPlan layer = build_layer(lc);
    const int layers_per_chunk = sc_.model.layers / (p * m);
    activations_chunk_ = layer.stored_bytes * layers_per_chunk;
    recompute_bytes_ = layer.recompute_peak_bytes;
    embedding_bytes_ = build_embedding(lc).stored_per_microbatch;
    output_bytes_ = build_output(lc).stored_per_microbatch;
    const BytesPerParam bpp = bytes_per_param(e_);

    // Groups, streams, pools.
    groups_.resize(static_cast<std::size_t>(p * d));
    for (int r = 0; r < p; ++r) {
        dp_streams_.push_back(sim_.add_stream(fmt::format("stage {} data-parallel", r)));
        for (int k = 0; k < d; ++k) {
            Group& g = groups_[static_cast<std::size_t>(group_index(r, k))];
            g.stage = r;
            g.replica = k;
            for (int i = 0; i < t; ++i) g.gpus.push_back(r * d * t + k * t + i);
            const std::string name = fmt::format("GPUs {}-{} (stage {}, replica {})", g.gpus.front(), g.gpus.back(), r, k);
            g.compute = sim_.add_stream(name + " compute");
            g.tp = sim_.add_stream(name + " tensor-parallel");
            g.send_fwd = sim_.add_stream(name + " send-forward");
            g.send_bwd = sim_.add_stream(name + " send-backward");
            g.pool = sim_.add_pool(name, sc_.system.memory_capacity, kMemoryCategories,
                                   options_.keep_timeline && r == 0 && k == 0);
            const double params = parameters_on_stage(sc_.model, e_, r);
            sim_.add_static(g.pool, 0, Bytes(std::llround(params * bpp.weights)));
            sim_.add_static(g.pool, 1, Bytes(std::llround(params * bpp.gradients)));
            sim_.add_static(g.pool, 2, Bytes(std::llround(params * bpp.optimizer)));
            if (sc_.system.memory_reserved.value > 0) sim_.add_static(g.pool, 6, sc_.system.memory_reserved);
        }
    }

    // Refuse a graph too large for memory before building it: every group runs every slot of its program.
    const int n = e_.microbatches();
    {
        double estimate = 0;
        for (int r = 0; r < p; ++r) {
            for (const Slot& s : stage_program(e_, r)) {
                for (const UnitStep& st : unit_for(s.forward, s.chunk * p + r).steps) estimate += st.is_compute ? 1.0 : 2.0;
                estimate += 3.0;  // p2p call, transfer
            }
        }
        estimate *= d;
        if (estimate > double(options_.max_tasks)) {
            throw InputError(fmt::format("{}: case '{}' would need about {:.0f} million tasks (about {:.1f} GiB of memory), more "
                                         "than the limit of {} million; simulate fewer GPUs or microbatches, or raise the "
                                         "limit (strata run --max-tasks)",
                                         sc_.source, sc_.name, estimate / 1e6, estimate * 180 / double(1 << 30),
                                         options_.max_tasks / 1'000'000));
        }
    }

    // Phase 1: each group's program, in schedule order, with Megatron's blocking p2p calls between units.
    const std::size_t per_dir = static_cast<std::size_t>(m * n);
    auto msg_index = [&](bool forward, int chunk, int mb) {
        return (forward ? 0 : per_dir) + static_cast<std::size_t>(chunk * n + mb);
    };
    // Per group: the call that sends each unit's output and the call that receives each unit's input,
    // indexed by the unit (direction, chunk, microbatch); a call is (post task, wait task).
    struct Call {
        TaskId post{}, wait{};
    };
    struct Receive {
        std::size_t call = 0;
        std::optional<TaskId> gather_first;  // scatter/gather: the all-gather the transfer feeds
    };
    std::vector<std::vector<Call>> calls(groups_.size());
    std::vector<std::vector<std::optional<std::size_t>>> sends(groups_.size());
    std::vector<std::vector<std::optional<Receive>>> receives(groups_.size());
    const bool scatter_gather = !e_.sequence_parallel && t > 1;
    const Bytes activation_msg(2LL * sc_.model.seq_len * e_.microbatch * sc_.model.hidden);
    const int last_v = p * m - 1;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        Group& g = groups_[gi];
        sends[gi].resize(2 * per_dir);
        receives[gi].resize(2 * per_dir);
        const std::vector<Slot> prog = stage_program(e_, g.stage);
        auto sends_output = [&](const Slot& s) {
            const int v = s.chunk * p + g.stage;
            return s.forward ? v < last_v : v > 0;
        };
        auto needs_input = [&](const Slot& s) {
            const int v = s.chunk * p + g.stage;
            return s.forward ? v > 0 : v < last_v;
        };
        std::optional<TaskId> prev_last;  // the last task the compute stream ran so far
        // A blocking call: posted when the compute stream reaches it, done when all its transfers are.
        auto make_call = [&](const std::vector<std::size_t>& out_units, const std::vector<std::size_t>& in_units)
            -> std::optional<TaskId> {
            std::vector<std::size_t> outs, ins;
            for (std::size_t u : out_units)
                if (sends_output(prog[u])) outs.push_back(u);
            for (std::size_t u : in_units)
                if (needs_input(prog[u])) ins.push_back(u);
            if (outs.empty() && ins.empty()) return std::nullopt;
            Call c;
            c.post = sim_.add_compute(g.compute, Time::zero(), make_label(TaskKind::p2p, 0, 0));
            if (prev_last) sim_.add_dependency(*prev_last, c.post);
            c.wait = sim_.add_compute(g.compute, Time::zero(), make_label(TaskKind::p2p, 0, 0));
            sim_.add_dependency(c.post, c.wait);
            const std::size_t id = calls[gi].size();
            calls[gi].push_back(c);
            for (std::size_t u : outs) sends[gi][msg_index(prog[u].forward, prog[u].chunk, prog[u].mb)] = id;
            for (std::size_t u : ins) {
                Receive rcv{id, std::nullopt};
                if (scatter_gather) {
                    // The received shards are all-gathered over NVLink before the call returns.
                    TaskId first{};
                    const TaskId last = emit_phases(g.tp, tp_phases(g, CollectiveKind::all_gather, activation_msg), {c.post},
                                                    make_label(TaskKind::p2p, prog[u].chunk, prog[u].mb), &first);
                    sim_.add_dependency(last, c.wait);
                    rcv.gather_first = first;
                }
                receives[gi][msg_index(prog[u].forward, prog[u].chunk, prog[u].mb)] = rcv;
            }
            prev_last = c.wait;
            return c.wait;
        };
        // Call boundaries follow Megatron-LM's schedules: the interleaved schedule runs a forward and a backward
        // back to back and exchanges afterwards (send_forward_backward_recv_forward_backward); 1F1B combines a
        // send with the receive of the next unit only between a forward and a backward (send_forward_recv_backward,
        // send_backward_recv_forward), and sends, then receives, between two units of the same direction.
        std::vector<std::size_t> pending_out;
        std::optional<TaskId> gate = make_call({}, {0});
        const bool interleaved = e_.schedule == Schedule::interleaved;
        // Megatron: with as many microbatches as stages every forward is warm-up, then one receive before
        // the backwards (no steady forward-backward pairs).
        const bool all_warmup = interleaved && n == p;
        for (std::size_t u = 0; u < prog.size(); ++u) {
            const Slot& s = prog[u];
            const int v = s.chunk * p + g.stage;
            const std::uint32_t label = make_label(s.forward ? TaskKind::forward : TaskKind::backward, s.chunk, s.mb);
            const bool split = !s.forward && e_.overlap_grad_reduce && e_.data > 1 && s.mb == n - 1;
            // A unit starts after the call before it, or else after the unit before it (so that a unit opening
            // with a collective does not overtake the previous unit's last kernels).
            const std::optional<TaskId> after = gate ? gate : prev_last;
            UnitTasks ut = split ? emit_backward_by_layer(g, v, after, label) : emit_unit(g, unit_for(s.forward, v), after, label);
            gate.reset();
            prev_last = ut.last;
            if (s.forward) {
                sim_.add_memory_effect(ut.first, {g.pool, 3, activations_chunk_, Bytes(0)});
                if (v == 0) sim_.add_memory_effect(ut.first, {g.pool, 4, embedding_bytes_, Bytes(0)});
                if (v == last_v) sim_.add_memory_effect(ut.first, {g.pool, 4, output_bytes_, Bytes(0)});
            } else {
                sim_.add_memory_effect(ut.last, {g.pool, 3, Bytes(0), activations_chunk_});
                if (v == 0) sim_.add_memory_effect(ut.last, {g.pool, 4, Bytes(0), embedding_bytes_});
                if (v == last_v) sim_.add_memory_effect(ut.last, {g.pool, 4, Bytes(0), output_bytes_});
                if (recompute_bytes_.value > 0) sim_.add_memory_effect(ut.first, {g.pool, 5, recompute_bytes_, recompute_bytes_});
                g.last_backward = ut.last;
            }
            pending_out.push_back(u);
            if (u + 1 == prog.size()) {
                make_call(pending_out, {});
                break;
            }
            const Slot& next = prog[u + 1];
            if (interleaved && s.forward && !next.forward) {
                if (!all_warmup) continue;  // a steady forward-backward pair runs back to back, then one exchange
                make_call(pending_out, {});  // all warm-up: send the last forward, then receive for the backwards
                gate = make_call({}, {u + 1});
            } else if (interleaved) {
                std::vector<std::size_t> ins = {u + 1};
                // The exchange before a steady pair also brings the pair's backward its input.
                if (next.forward && u + 2 < prog.size() && !prog[u + 2].forward) ins.push_back(u + 2);
                gate = make_call(pending_out, ins);
            } else if (s.forward != next.forward) {
                gate = make_call(pending_out, {u + 1});
            } else {
                make_call(pending_out, {});
                gate = make_call({}, {u + 1});
            }
            pending_out.clear();
        }
    }

    // Phase 2: pipeline transfers, in each sender's program order. A transfer starts once both calls are
    // posted (NCCL send/recv rendezvous); each TP rank sends its share over its own rail and the t flows
    // move together as one flow over the union of their routes.
    const Bytes per_rank(activation_msg.value / t);
    std::map<std::pair<int, int>, fabric::Route> routes;
    auto route_between = [&](const Group& a, const Group& b) -> const fabric::Route& {
        auto key = std::pair{a.gpus.front(), b.gpus.front()};
        auto it = routes.find(key);
        if (it != routes.end()) return it->second;
        std::vector<std::pair<int, int>> pairs;
        for (int i = 0; i < t; ++i) pairs.emplace_back(a.gpus[static_cast<std::size_t>(i)], b.gpus[static_cast<std::size_t>(i)]);
        return routes.emplace(key, fab_.combined(pairs)).first->second;
    };
    const Time p2p_latency = sc_.system.network.p2p_latency;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        Group& g = groups_[gi];
        for (const Slot& s : stage_program(e_, g.stage)) {
            const int v = s.chunk * p + g.stage;
            const int to_v = s.forward ? v + 1 : v - 1;
            if (to_v < 0 || to_v > last_v) continue;
            const int to_stage = to_v % p, to_chunk = to_v / p;
            const std::size_t to_gi = static_cast<std::size_t>(group_index(to_stage, g.replica));
            const auto& send_call = sends[gi][msg_index(s.forward, s.chunk, s.mb)];
            const auto& recv = receives[to_gi][msg_index(s.forward, to_chunk, s.mb)];
            if (!send_call || !recv) throw SimulationError("internal: a pipeline message without its send or receive call");
            const Call& cs = calls[gi][*send_call];
            const Call& cr = calls[to_gi][recv->call];
            const fabric::Route& route = route_between(g, groups_[to_gi]);
            TaskId x = sim_.add_transfer(s.forward ? g.send_fwd : g.send_bwd, route.links, per_rank,
                                         route.latency + p2p_latency, make_label(TaskKind::p2p, s.chunk, s.mb));
            sim_.add_dependency(cs.post, x);
            sim_.add_dependency(cr.post, x);
            sim_.add_dependency(x, cs.wait);
            if (recv->gather_first) sim_.add_dependency(x, *recv->gather_first);
            else sim_.add_dependency(x, cr.wait);
        }
    }

    // Phase 3: gradient reduction over data-parallel replicas, tied-embedding sync, optimizer step.
    const double grad_bytes_per_param = bpp.gradients;
    std::vector<TaskId> reduced(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
        const double params = parameters_on_stage(sc_.model, e_, r);
        std::vector<TaskId> deps;
        for (int k = 0; k < d; ++k) deps.push_back(groups_[static_cast<std::size_t>(group_index(r, k))].last_backward);
        const Bytes grads(std::llround(params * grad_bytes_per_param));
        // One ring per tensor rank i (same rail); the t rings move together.
        std::vector<std::vector<int>> rings(static_cast<std::size_t>(t));
        for (int i = 0; i < t; ++i)
            for (int k = 0; k < d; ++k) rings[static_cast<std::size_t>(i)].push_back(r * d * t + k * t + i);
        auto combined_plan = [&](fabric::CollectiveKind kind, Bytes msg) {
            return fabric::plan_concurrent_collectives(fab_, kind, rings, msg, coll_params_);
        };
        const std::uint32_t label = make_label(TaskKind::dp, 0, 0);
        const auto kind = e_.distributed_optimizer ? fabric::CollectiveKind::reduce_scatter : fabric::CollectiveKind::all_reduce;
        const StreamId dp = dp_streams_[static_cast<std::size_t>(r)];
        TaskId done{};
        const std::size_t buckets = groups_[static_cast<std::size_t>(group_index(r, 0))].grad_buckets.size();
        if (d > 1 && buckets > 0) {
            // Overlapped: each layer's bucket is reduced as soon as every replica has finished its last
            // backward; what is left (embeddings, final norm) after the last backward.
            const double layer_params = layer_parameters_per_gpu(sc_.model, t);
            const Bytes bucket(std::llround(layer_params * grad_bytes_per_param));
            const auto bucket_phases = combined_plan(kind, bucket);
            for (std::size_t j = 0; j < buckets; ++j) {
                std::vector<TaskId> ready;
                for (int k = 0; k < d; ++k) ready.push_back(groups_[static_cast<std::size_t>(group_index(r, k))].grad_buckets[j]);
                done = emit_phases(dp, bucket_phases, ready, label, nullptr);
            }
            const double rest = params - layer_params * double(buckets);
            if (rest > 0.5) {
                done = emit_phases(dp, combined_plan(kind, Bytes(std::llround(rest * grad_bytes_per_param))), deps, label, nullptr);
            } else {
                TaskId x = sim_.add_compute(dp, Time::zero(), label);
                for (TaskId dd : deps) sim_.add_dependency(dd, x);
                sim_.add_dependency(done, x);
                done = x;
            }
        } else if (d > 1) {
            done = emit_phases(dp, combined_plan(kind, grads), deps, label, nullptr);
        } else {
            done = sim_.add_compute(dp_streams_[static_cast<std::size_t>(r)], Time::zero(), label);
            for (TaskId dd : deps) sim_.add_dependency(dd, done);
        }
        reduced[static_cast<std::size_t>(r)] = done;
    }
    if (p > 1 && sc_.model.tied_embeddings) {
        // The word-embedding gradient (v h / t per GPU) is all-reduced between the first and last stage.
        const Bytes emb(std::llround(double(sc_.model.vocab) * sc_.model.hidden / t * grad_bytes_per_param));
        std::vector<std::pair<int, int>> fwd_pairs, bwd_pairs;
        for (int k = 0; k < d; ++k)
            for (int i = 0; i < t; ++i) {
                const int a = k * t + i, b = (p - 1) * d * t + k * t + i;
                fwd_pairs.emplace_back(a, b);
                bwd_pairs.emplace_back(b, a);
            }
        const fabric::Route both[] = {fab_.combined(fwd_pairs), fab_.combined(bwd_pairs)};
        const fabric::Route ra = fabric::merge_routes(both);
        const std::uint32_t label = make_label(TaskKind::embedding_sync, 0, 0);
        TaskId x = sim_.add_transfer(dp_streams_[0], ra.links, emb, ra.latency + p2p_latency, label);
        sim_.add_dependency(reduced[0], x);
        sim_.add_dependency(reduced[static_cast<std::size_t>(p - 1)], x);
        reduced[0] = x;
        reduced[static_cast<std::size_t>(p - 1)] = x;
    }
    std::vector<std::vector<TaskId>> stepped(static_cast<std::size_t>(p));
    for (auto& g : groups_) {
        const double params = parameters_on_stage(sc_.model, e_, g.stage);
        const double shard = e_.distributed_optimizer ? params / d : params;
        const Time step = Time::from_seconds(sc_.system.optimizer_step_seconds(shard, e_.precision)) +
                          sc_.system.optimizer.fixed_overhead;
        TaskId o = sim_.add_compute(g.compute, step, make_label(TaskKind::optimizer, 0, 0));
        sim_.add_dependency(reduced[static_cast<std::size_t>(g.stage)], o);
        stepped[static_cast<std::size_t>(g.stage)].push_back(o);
        g.optimizer = o;
    }
    if (e_.distributed_optimizer && d > 1) {
        // Updated bf16 parameters are all-gathered over the data-parallel replicas of each stage.
        for (int r = 0; r < p; ++r) {
            std::vector<int> ranks;
            for (int k = 0; k < d; ++k) ranks.push_back(r * d * t + k * t);
            const double params = parameters_on_stage(sc_.model, e_, r);
            auto phases = fabric::plan_collective(fab_, fabric::CollectiveKind::all_gather, ranks,
                                                  Bytes(std::llround(params * 2)), coll_params_);
            emit_phases(dp_streams_[static_cast<std::size_t>(r)], phases, stepped[static_cast<std::size_t>(r)],
                        make_label(TaskKind::dp, 1, 0), nullptr);
        }
    }
}

IterationResult Builder::collect(SimulationDetail* detail, double wall_s, const engine::RunStats& stats) {
    IterationResult r;
    const double T = stats.end_time.seconds();
    r.iteration_time_s = T;
    const double peak = sc_.system.device.peak_flops * e_.gpus();
    r.mfu = model_flops_per_iteration(sc_.model, e_.global_batch).value / (T * peak);
    r.hfu = hardware_flops_per_iteration(sc_.model, e_.global_batch, e_.recompute).value / (T * peak);
    const int p = e_.pipeline;
    double exposed_tp = 0;
    for (TaskId x : exposed_tp_) exposed_tp += (sim_.end_time(x) - sim_.start_time(x)).seconds();
    exposed_tp /= p;  // per stage on average (replica 0)
    double busy_sum = 0;
    for (int s = 0; s < p; ++s) {
        const double b = sim_.stream_busy(groups_[static_cast<std::size_t>(group_index(s, 0))].compute).seconds();
        r.stage_busy_s.push_back(b);
        busy_sum += b;
    }
    const double busy_mean = busy_sum / p;
    // Exposed communication: synchronous tensor-parallel collectives plus the time between the end of the
    // last backward and the start of the optimizer step (gradient reduction, embedding sync).
    const Group& g0 = groups_[0];
    const double tail = (sim_.start_time(g0.optimizer) - sim_.end_time(g0.last_backward)).seconds();
    r.exposed_comm_s = exposed_tp + std::max(0.0, tail);
    r.bubble_fraction = std::max(0.0, 1.0 - (busy_mean + r.exposed_comm_s) / T);
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
                parts += fmt::format("{}{} {:.2f} GiB", c ? ", " : "", kMemoryCategories[c], pr.peak_breakdown[c].gib());
            }
            r.oom_detail = fmt::format("GPUs {}-{} (stage {}, replica {}) exceed {:.2f} GiB at t = {:.4f} s; peak {:.2f} GiB at "
                                       "t = {:.4f} s: {}",
                                       g.gpus.front(), g.gpus.back(), g.stage, g.replica, pr.capacity.gib(),
                                       pr.first_over_time.seconds(), pr.peak.gib(), pr.peak_time.seconds(), parts);
        }
    }
    r.peak_memory = best;
    const engine::PoolReport p0 = sim_.pool_report(g0.pool);
    r.first_stage_activation_peak = p0.peak_breakdown.size() > 3 ? p0.peak_breakdown[3] : Bytes(0);
    r.events = stats.events;
    r.tasks = stats.tasks;
    r.wall_s = wall_s;
    if (detail) {
        auto tl = sim_.pool_timeline(g0.pool);
        detail->stage0_memory.assign(tl.begin(), tl.end());
        detail->memory_categories = kMemoryCategories;
        for (int s = 0; s < p; ++s)
            detail->stage_peaks.push_back(sim_.pool_report(groups_[static_cast<std::size_t>(group_index(s, 0))].pool).peak);
        std::vector<StreamId> compute(static_cast<std::size_t>(p)), tp(static_cast<std::size_t>(p));
        for (int s = 0; s < p; ++s) {
            compute[static_cast<std::size_t>(s)] = groups_[static_cast<std::size_t>(group_index(s, 0))].compute;
            tp[static_cast<std::size_t>(s)] = groups_[static_cast<std::size_t>(group_index(s, 0))].tp;
        }
        for (TaskId t = 0; t < sim_.task_count(); ++t) {
            const StreamId st = sim_.stream_of(t);
            const Time a = sim_.start_time(t), b = sim_.end_time(t);
            if (b == a) continue;
            for (int s = 0; s < p; ++s) {
                const auto su = static_cast<std::size_t>(s);
                if (st != compute[su] && st != tp[su]) continue;
                const std::uint32_t l = sim_.label_of(t);
                char kind = st == tp[su] ? 'C'
                            : label_kind(l) == TaskKind::forward ? 'F'
                            : label_kind(l) == TaskKind::backward ? 'B'
                                                                  : 'O';
                detail->intervals.push_back({a.seconds(), b.seconds(), s, kind, label_mb(l), label_chunk(l)});
            }
        }
    }
    return r;
}

void Builder::write_trace(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw InputError(path + ": cannot open the trace file for writing");
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    bool first = true;
    auto sep = [&]() -> const char* {
        if (first) {
            first = false;
            return "";
        }
        return ",\n";
    };
    // Process per GPU group (its t GPUs run in lockstep), thread per stream.
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        out << sep() << fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"GPUs {}-{} stage {} replica {}"}}}})",
                                    gi, g.gpus.front(), g.gpus.back(), g.stage, g.replica);
        const StreamId streams[] = {g.compute, g.tp, g.send_fwd, g.send_bwd};
        const char* names[] = {"compute", "tensor-parallel comm", "send forward", "send backward"};
        for (int i = 0; i < 4; ++i) {
            out << sep() << fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})", gi,
                                        streams[i], names[i]);
        }
    }
    std::vector<int> stream_pid(sim_.stream_count(), static_cast<int>(groups_.size()));
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        for (StreamId s : {g.compute, g.tp, g.send_fwd, g.send_bwd}) stream_pid[s] = static_cast<int>(gi);
    }
    out << sep() << fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"data-parallel"}}}})", groups_.size());
    for (TaskId t = 0; t < sim_.task_count(); ++t) {
        const Time a = sim_.start_time(t), b = sim_.end_time(t);
        if (b == a) continue;
        const std::uint32_t l = sim_.label_of(t);
        out << sep()
            << fmt::format(R"({{"name":"{} c{} mb{}","cat":"{}","ph":"X","ts":{:.3f},"dur":{:.3f},"pid":{},"tid":{}}})",
                           kKindNames[static_cast<int>(label_kind(l))], label_chunk(l), label_mb(l),
                           kKindNames[static_cast<int>(label_kind(l))], a.us(), (b - a).us(), stream_pid[sim_.stream_of(t)],
                           sim_.stream_of(t));
    }
    out << "\n]}\n";
    if (!out) throw InputError(path + ": writing the trace failed");
}

fabric::FabricSpec fabric_spec(const Scenario& sc) {
    const NetworkSpec& n = sc.system.network;
    fabric::FabricSpec f;
    f.gpus_per_node = sc.system.gpus_per_node;
    f.nodes = (sc.execution.gpus() + f.gpus_per_node - 1) / f.gpus_per_node;
    f.nvlink_bandwidth = n.nvlink_bandwidth;
    f.nvlink_latency = n.nvlink_latency;
    f.rails = n.rails;
    f.nic_bandwidth = n.nic_bandwidth;
    f.nic_latency = n.nic_latency;
    f.nodes_per_leaf = n.nodes_per_leaf;
    f.spines_per_rail = n.spines_per_rail;
    f.oversubscription = n.oversubscription;
    f.tiers = n.tiers;
    f.switch_latency = n.switch_latency;
    return f;
}

}  // namespace

std::string detail_to_json(const Scenario& sc, const IterationResult& r, const SimulationDetail& d) {
    nlohmann::ordered_json j;
    j["name"] = sc.name;
    j["iteration_time_s"] = r.iteration_time_s;
    j["capacity_bytes"] = sc.system.memory_capacity.value;
    j["pipeline"] = sc.execution.pipeline;
    j["categories"] = d.memory_categories;
    std::vector<std::int64_t> peaks;
    for (Bytes b : d.stage_peaks) peaks.push_back(b.value);
    j["stage_peaks_bytes"] = peaks;
    auto& mem = j["memory"] = nlohmann::ordered_json::array();
    for (const auto& s : d.stage0_memory) mem.push_back({s.time.seconds(), s.in_use.value});
    auto& iv = j["intervals"] = nlohmann::ordered_json::array();
    for (const auto& x : d.intervals) iv.push_back({x.stage, std::string(1, x.kind), x.start_s, x.end_s, x.microbatch, x.chunk});
    return j.dump() + "\n";
}

IterationResult simulate(const Scenario& sc, const SimulationOptions& options, SimulationDetail* detail) {
    validate(sc);
    const auto t0 = std::chrono::steady_clock::now();
    engine::Simulator sim;
    fabric::Fabric fab(fabric_spec(sc), sim);
    Builder builder(sc, sim, fab, options);
    builder.build();
    sim.set_label_formatter([&builder](std::uint32_t l) { return builder.describe(l); });
    const engine::RunStats stats = sim.run(options.progress, 200000);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    IterationResult r = builder.collect(detail, wall, stats);
    if (!options.trace_path.empty()) builder.write_trace(options.trace_path);
    return r;
}

}  // namespace strata
