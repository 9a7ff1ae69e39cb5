// Fine-grained activation offloading in the analytical memory: which units offload their chunk's last layer, and
// stage_memory's walk layer by layer (see include/strata/memory.hpp).
#include "peak.hpp"
#include "strata/memory.hpp"

#include <map>

namespace strata {

std::size_t next_backward(const std::vector<schedule::Unit>& order, std::size_t i) {
    std::size_t j = i + 1;
    while (j < order.size() && order[j].forward)
        ++j;
    return j;
}

std::vector<bool> offloads_last_layer(const std::vector<schedule::Unit>& order) {
    std::vector<bool> out(order.size(), true);
    std::map<std::pair<int, int>, bool> forward_did;  // (chunk, microbatch): its forward offloaded its last layer
    for (std::size_t i = 0; i < order.size(); ++i) {
        const schedule::Unit& u = order[i];
        const std::pair<int, int> key{u.chunk, u.microbatch};
        if (u.forward) {
            const std::size_t j = next_backward(order, i);
            out[i] = !(j < order.size() && order[j].chunk == u.chunk && order[j].microbatch == u.microbatch);
            forward_did[key] = out[i];
        } else {
            const auto it = forward_did.find(key);
            out[i] = it != forward_did.end() && it->second;
        }
    }
    return out;
}

StageMemory offloading_stage_memory(StageMemory sm, const ActivationPlan& plan, int s) {
    const LayerOffload& off = plan.offload;
    const std::vector<schedule::Unit> order = schedule::unit_order(plan.shape, s);
    const std::vector<bool> last_offloaded = offloads_last_layer(order);
    UnitActivations held;
    held.output = plan.held_for_deferral(s);
    int units = 0;
    model_detail::ActivationPeak peak{sm};
    Bytes pending{};  // freed by a copy still in flight: gone after the next instant considered
    auto consider = [&](Bytes workspace, Bytes attention = Bytes(0)) {
        peak.consider(held, workspace, attention, units);
        held.layers -= pending;
        pending = Bytes(0);
    };
    const Bytes per_layer = plan.per_layer;
    for (std::size_t i = 0; i < order.size(); ++i) {
        const schedule::Unit& u = order[i];
        const UnitActivations a = plan.of(s, u.chunk);
        const int layers = plan.layers_of(s, u.chunk);
        const int v = schedule::virtual_stage(plan.shape, s, u.chunk);
        const auto offloaded = [&](int layer) { return layer < layers - 1 || last_offloaded[i]; };
        if (u.forward) {
            held.embedding += a.embedding;
            held.output += a.output;
            ++units;
            if (layers == 0) consider(Bytes(0));
            for (int l = 0; l < layers; ++l) {
                held.layers += per_layer;
                consider(Bytes(0), l == 0 ? plan.attention_workspace(s, u.chunk, true) : Bytes(0));
                if (offloaded(l)) pending = off.freed_at(v, l);
            }
            continue;
        }
        // The next backward's last layer, if offloaded, comes back during this one's first layer (counted from its
        // start, as every reload here: the simulation issues them after the layer's MLP backward).
        Bytes next_reload{};
        if (const std::size_t j = next_backward(order, i);
            j < order.size() && last_offloaded[j] && plan.layers_of(s, order[j].chunk) > 0)
            next_reload = off.reloaded;
        const Bytes workspace = plan.recompute_workspace(s, u.chunk);
        if (layers == 0) consider(workspace);
        for (int l = layers - 1; l >= 0; --l) {
            // The layer before's reload (every layer but a chunk's last is offloaded), or at the first the next's.
            held.layers += l > 0 ? off.reloaded : next_reload;
            consider(l == layers - 1 ? workspace : Bytes(0),
                     l == layers - 1 ? plan.attention_workspace(s, u.chunk, false) : Bytes(0));
            held.layers -= offloaded(l) ? per_layer - off.freed_at(v, l) + off.reloaded : per_layer;
        }
        if (layers == 0) held.layers += next_reload;
        held.embedding -= a.embedding;
        held.output -= a.output - plan.kept_after_backward(s, u.chunk, u.microbatch);
        --units;
    }
    return sm;
}

}  // namespace strata
