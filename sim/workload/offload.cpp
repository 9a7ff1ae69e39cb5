// Fine-grained activation offloading (Megatron-Core's offload_modules), as Megatron-Core's offload manager runs it
// (fine_grained_activation_offload.py): every unit layer by layer; after each layer's forward its offloaded tensors
// are copied to pinned host memory on a stream of their own and their GPU memory freed as the copy ends (the compute
// stream never waits for it: without fine_grained_offloading_max_inflight_offloads a slow link holds memory longer
// instead); in the backward each layer is reloaded on another stream one layer ahead, as the layer after it (in forward
// order) finishes its MLP's backward, and the layer's attention backward waits for its reload. The chunk's last layer
// stays on the GPU when the chunk's backward is the stage's next (offloads_last_layer), else it is reloaded as the
// backward before it reaches its first layer's attention. The copies' bytes, and which the GPU frees, are the layer
// model's (LayerOffload).
#include "builder.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace strata::workload {

namespace {

std::uint64_t unit_key(const schedule::Unit& u) {
    return (static_cast<std::uint64_t>(u.chunk) << 32) | static_cast<std::uint32_t>(u.microbatch);
}

/// Removes and returns the value stored under `key` (a unit's), or nullopt.
template <typename T>
std::optional<T> take(std::vector<std::pair<std::uint64_t, T>>& list, std::uint64_t key) {
    for (auto it = list.begin(); it != list.end(); ++it) {
        if (it->first != key) continue;
        T value = std::move(it->second);
        list.erase(it);
        return value;
    }
    return std::nullopt;
}

}  // namespace

void Builder::plan_offloading() {
    for (int r = 0; r < e_.pipeline; ++r) {
        unit_orders_.push_back(schedule::unit_order(shape_, r));
        last_offloaded_.push_back(offloads_last_layer(unit_orders_.back()));
    }
}

void Builder::trace_offload_streams(std::size_t gi) {
    const Group& g = groups_[gi];
    for (const StreamId st : {g.d2h, g.h2d}) {
        stream_process_[st] = static_cast<std::uint32_t>(gi);
        stream_traced_[st] = traced(g.stage, g.replica) ? 1 : 0;
    }
}

void Builder::add_offload_streams(Group& g, const std::string& name) {
    g.d2h = sim_.add_stream(name + " copies to host (activation offload)");
    g.h2d = sim_.add_stream(name + " copies from host (activation reload)");
    std::vector<engine::LinkUse> out, in;
    for (const int gpu : g.gpus) {
        for (const engine::LinkUse& l : fab_.host_copy_route(gpu, true)) out.push_back(l);
        for (const engine::LinkUse& l : fab_.host_copy_route(gpu, false)) in.push_back(l);
    }
    if (!out.empty()) {
        g.d2h_route = sim_.add_route(std::move(out));
        g.h2d_route = sim_.add_route(std::move(in));
    }
}

TaskId Builder::add_copy(StreamId stream, const std::optional<engine::RouteId>& route, Bytes bytes, int copies,
                         BytesPerSecond bandwidth, std::uint32_t label) {
    const Time latency = sc_.system.network.host_copy_latency * copies;
    if (route) return sim_.add_transfer_on(stream, *route, bytes, latency, label);
    return sim_.add_compute(stream, latency + Time::from_seconds(static_cast<double>(bytes.value) / bandwidth.value),
                            label);
}

Builder::UnitTasks Builder::emit_offloaded_unit(Group& g, const schedule::Unit& u, std::optional<TaskId> after,
                                                std::uint32_t label, bool deferred) {
    const auto stage = static_cast<std::size_t>(g.stage);
    const std::vector<schedule::Unit>& order = unit_orders_[stage];
    const std::size_t at = g.units++;
    if (at >= order.size() || order[at].forward != u.forward || order[at].chunk != u.chunk ||
        order[at].microbatch != u.microbatch)
        throw std::logic_error(fmt::format("stage {}: unit {} of the program is not the schedule's", g.stage, at));
    const int v = schedule::virtual_stage(shape_, g.stage, u.chunk);
    const int layers = activations_.layers_of(g.stage, u.chunk);
    const LayerOffload& off = activations_.offload;
    const Bytes per_layer = activations_.per_layer;
    const std::uint32_t acts = index(MemoryCategory::activations), attn = index(MemoryCategory::attention);
    const Bytes attention = activations_.attention_workspace(g.stage, u.chunk, u.forward);
    const NetworkSpec& net = sc_.system.network;
    const bool last_offloaded = last_offloaded_[stage][at];
    const auto offloaded = [&](int layer) { return layer < layers - 1 || last_offloaded; };
    const std::uint32_t copy_label = make_label(u.forward ? TaskKind::offload : TaskKind::reload, u.chunk, u.microbatch);

    if (u.forward) {
        std::vector<TaskId> copies(static_cast<std::size_t>(layers), kNoTask);
        const bool gathers = runs_by_layer(u);
        const Pieces& ps = pieces_of(true, v);
        std::optional<TaskId> prev = after;
        int layer = 0;
        const UnitTasks ut = emit_pieces(
            g, ps, after, label,
            [&](std::size_t i, const UnitTasks& piece) {
                if (gathers) wait_for_gather(g, u.chunk, i, piece, prev);
                if (!ps.is_layer[i]) return;
                sim_.add_memory_effect(piece.first, {g.pool, acts, per_layer, Bytes(0)});
                if (layer == 0 && attention.value > 0) {  // held through the first layer
                    sim_.add_memory_effect(piece.first, {g.pool, attn, attention, Bytes(0)});
                    sim_.add_memory_effect(piece.last, {g.pool, attn, Bytes(0), attention});
                }
                if (offloaded(layer)) {
                    const TaskId c =
                        add_copy(g.d2h, g.d2h_route, off.copied, off.copies, net.device_to_host_bandwidth, copy_label);
                    sim_.add_dependency(piece.last, c);
                    sim_.add_memory_effect(c, {g.pool, acts, Bytes(0), off.freed_at(v, layer)});
                    copies[static_cast<std::size_t>(layer)] = c;
                }
                ++layer;
            },
            !gathers);
        g.offloaded.emplace_back(unit_key(u), std::move(copies));
        return ut;
    }

    std::vector<TaskId> copies = take(g.offloaded, unit_key(u)).value_or(std::vector<TaskId>{});
    if (copies.size() != static_cast<std::size_t>(layers))
        throw std::logic_error(fmt::format("stage {}: backward of chunk {} microbatch {} before its forward", g.stage,
                                           u.chunk, u.microbatch));
    const auto reload = [&](TaskId after_task, TaskId copy) {
        const TaskId r = add_copy(g.h2d, g.h2d_route, off.reloaded, off.copies, net.host_to_device_bandwidth, copy_label);
        sim_.add_dependency(after_task, r);
        sim_.add_dependency(copy, r);  // the copy back waits for the copy out (its offload event)
        sim_.add_memory_effect(r, {g.pool, acts, off.reloaded, Bytes(0)});
        return r;
    };
    std::vector<TaskId> reloads(static_cast<std::size_t>(layers), kNoTask);
    if (layers > 0 && last_offloaded) {
        const std::optional<TaskId> ahead = take(g.reloaded_ahead, unit_key(u));
        if (!ahead) throw std::logic_error(fmt::format("stage {}: an offloaded last layer not reloaded ahead", g.stage));
        reloads.back() = *ahead;
    }
    const Pieces& ps = pieces_of(false, v, deferred);
    // Per piece: whether the layer's attention backward starts with it (it waits for the reload; without a cut
    // after the MLP's backward, the layer's first piece), and whether the layer before is reloaded after it (the MLP's
    // backward done; else at the layer's end).
    const std::size_t n = ps.pieces.size();
    std::vector<bool> waits(n, false), issues(n, false);
    for (std::size_t i = 0; i < n;) {
        std::size_t end = i;
        while (end < n && ps.pass[end] == ps.pass[i]) ++end;
        if (ps.is_layer[i]) {
            std::size_t mlp_end = end - 1;
            for (std::size_t j = i; j < end; ++j)
                if (ps.events_done[j] >= 2) {
                    mlp_end = j;
                    break;
                }
            issues[mlp_end] = true;
            waits[mlp_end + 1 < end ? mlp_end + 1 : i] = true;
        }
        i = end;
    }
    // The stage's next backward: its last layer, if offloaded, comes back as this one's first layer (in forward order)
    // finishes its MLP's backward (Megatron-Core reloads the next backward chunk's last groups as this chunk runs out
    // of groups to reload).
    std::optional<std::pair<std::uint64_t, TaskId>> next_last;  // that unit's key and its last layer's copy out
    if (const std::size_t j = next_backward(order, at);
        j < order.size() && last_offloaded_[stage][j] && activations_.layers_of(g.stage, order[j].chunk) > 0) {
        const std::uint64_t key = unit_key(order[j]);
        for (const auto& [k, c] : g.offloaded)
            if (k == key) next_last = {key, c.back()};
        if (!next_last) throw std::logic_error("an offloaded last layer whose forward has not run");
    }
    const bool by_bucket = runs_by_layer(u);
    int layer = layers;
    const UnitTasks ut = emit_pieces(
        g, ps, after, label,
        [&](std::size_t i, const UnitTasks& piece) {
            if (by_bucket) on_backward_piece(g, u.chunk, ps, i, piece.last);
            if (!ps.is_layer[i]) return;
            if (i == 0 || ps.pass[i - 1] != ps.pass[i]) {
                --layer;
                if (layer == layers - 1 && attention.value > 0)  // held through the first layer, its reload in it
                    sim_.add_memory_effect(piece.first, {g.pool, attn, attention, Bytes(0)});
            }
            const auto l = static_cast<std::size_t>(layer);
            if (waits[i] && offloaded(layer)) {
                if (reloads[l] == kNoTask) throw std::logic_error("an offloaded layer's backward before its reload");
                sim_.add_dependency(reloads[l], piece.first);
            }
            if (issues[i] && layer > 0) reloads[l - 1] = reload(piece.last, copies[l - 1]);
            if (issues[i] && layer == 0 && next_last) {
                g.reloaded_ahead.emplace_back(next_last->first, reload(piece.last, next_last->second));
                next_last.reset();
            }
            if (i + 1 == n || ps.pass[i + 1] != ps.pass[i]) {
                if (layer == layers - 1 && attention.value > 0)
                    sim_.add_memory_effect(piece.last, {g.pool, attn, Bytes(0), attention});
                const Bytes freed = offloaded(layer) ? per_layer - off.freed_at(v, layer) + off.reloaded : per_layer;
                sim_.add_memory_effect(piece.last, {g.pool, acts, Bytes(0), freed});
            }
        },
        !by_bucket);
    if (next_last) g.reloaded_ahead.emplace_back(next_last->first, reload(ut.last, next_last->second));  // no layers
    return ut;
}

}  // namespace strata::workload
