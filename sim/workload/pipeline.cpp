// Pipeline transfers between the groups' blocking calls (program.cpp). A transfer starts once both calls are
// posted (NCCL send/recv rendezvous); each TP rank sends its share over its own rail and the t flows move
// together as one flow over the union of their routes. Streamed: whichever call is generated first waits in
// the receiving group's `pending` list with the task that needs the data held; the second creates the transfer and
// releases the hold.
// With overlap_p2p_comm the calls are single isend / irecv ops (Megatron-Core's _p2p_ops), which PyTorch runs on one
// NCCL stream per pair of ranks in the order posted (p2p_pair_order): the pair's transfers share one engine stream.
// Both sides post a pair's ops in the same order (NCCL matches them by it), so the transfers are created in that
// order too: the n-th is created once both sides posted their n-th, after both posted their (n-1)-th.
#include "builder.hpp"

#include "strata/errors.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace strata::workload {

std::size_t Builder::message_index(const schedule::Unit& u) const {
    const auto per_dir = static_cast<std::size_t>(shape_.chunks * shape_.microbatches);
    return (u.forward ? 0 : per_dir) + static_cast<std::size_t>(u.chunk * shape_.microbatches + u.microbatch);
}

namespace {

template <class Pending>
auto find_pending(Pending& pending, std::uint64_t key) {
    return std::find_if(pending.begin(), pending.end(), [key](const auto& m) { return m.first == key; });
}

}  // namespace

void Builder::on_send(std::size_t gi, const schedule::Unit& s, TaskId post, TaskId wait, bool blocking) {
    const Group& g = groups_[gi];
    const int p = e_.pipeline;
    const int v = schedule::virtual_stage(shape_, g.stage, s.chunk);
    const int to_v = s.forward ? v + 1 : v - 1;
    if (to_v < 0 || to_v > shape_.virtual_stages() - 1) throw SimulationError("internal: a pipeline send without a receiver");
    const auto to_gi = static_cast<std::size_t>(group_index(to_v % p, g.replica));
    const std::uint64_t key = message_index({s.forward, to_v / p, s.microbatch});
    const bool overlap = e_.overlap_p2p_comm;
    const std::uint64_t order = overlap ? groups_[gi].pair_posts[pair_channel(s.forward, true)]++ : 0;
    const PendingMessage me{true, post, wait, static_cast<int>(gi), s.forward, s.chunk, s.microbatch, order, blocking};
    if (overlap) {
        // Posted asynchronously: the sender's next unit of this direction waits for the transfer, not the call.
        groups_[gi].outstanding_sends[s.forward ? 0 : 1].push_back(overlap_key(to_gi, key));
        overlap_msgs_.try_emplace(overlap_key(to_gi, key));
    }
    rendezvous(to_gi, key, me);
}

void Builder::on_receive(std::size_t gi, const schedule::Unit& u, TaskId post, TaskId target, bool blocking) {
    const std::uint64_t key = message_index(u);
    const bool overlap = e_.overlap_p2p_comm;
    const std::uint64_t order = overlap ? groups_[gi].pair_posts[pair_channel(u.forward, false)]++ : 0;
    if (overlap) overlap_msgs_.try_emplace(overlap_key(gi, key));  // the consuming unit waits for it (emit_instruction)
    rendezvous(gi, key, PendingMessage{false, post, target, 0, u.forward, u.chunk, u.microbatch, order, blocking});
}

void Builder::rendezvous(std::size_t receiver_group, std::uint64_t key, const PendingMessage& me) {
    auto& pending = groups_[receiver_group].pending;
    const auto it = find_pending(pending, key);
    if (it == pending.end()) {  // the first side: waits in the receiving group's list, what needs the data held
        if (me.blocking) sim_.add_hold(me.target);
        pending.emplace_back(key, me);
        return;
    }
    if (it->second.sender == me.sender)
        throw SimulationError(me.sender ? "internal: a pipeline message sent twice" : "internal: a pipeline message received twice");
    const PendingMessage other = it->second;
    *it = pending.back();
    pending.pop_back();
    const PendingMessage& sender = me.sender ? me : other;
    const PendingMessage& receiver = me.sender ? other : me;
    check_pair_order(sender, receiver.order);
    emit_pipeline_transfer(sender, receiver_group, receiver.post, receiver.target, receiver.blocking, key);
    if (other.blocking) sim_.release_hold(other.target);
}

void Builder::emit_pipeline_transfer(const PendingMessage& sender, std::size_t receiver_group, TaskId receiver_post,
                                     TaskId receiver_target, bool receiver_blocking, std::uint64_t message) {
    Group& a = groups_[static_cast<std::size_t>(sender.sender_group)];
    const Group& b = groups_[receiver_group];
    const RouteAndLatency& route = p2p_route(a, sender.forward);
    const Bytes per_rank(activation_message_.value / e_.tensor);
    const TaskId x = sim_.add_transfer_on(transfer_stream(a, sender.forward), route.first, per_rank,
                                       route.second + sc_.system.network.p2p_latency,
                                       make_label(TaskKind::p2p, sender.chunk, sender.microbatch));
    sim_.add_dependency(sender.post, x);
    sim_.add_dependency(receiver_post, x);
    if (e_.overlap_p2p_comm) {
        // The units that need the transfer wait for it (attach_overlap), whether or not a call did already.
        const std::uint64_t key = overlap_key(receiver_group, message);
        OverlapMessage& m = overlap_msgs_[key];
        m.transfer = x;
        for (const TaskId w : m.waiting) {
            sim_.add_dependency(x, w);
            sim_.release_hold(w);
        }
        m.waiting.clear();
        if (m.attached == 2) overlap_msgs_.erase(key);
    }
    // A blocking call returns once its transfers have arrived.
    if (sender.blocking) sim_.add_dependency(x, sender.target);
    if (receiver_blocking) sim_.add_dependency(x, receiver_target);
    if (traced(a.stage, a.replica) && traced(b.stage, b.replica)) p2p_receiver_.emplace(x, static_cast<std::uint32_t>(receiver_group));
}

int Builder::pair_channel(bool forward, bool sender) const {
    if (e_.pipeline == 2) return sender ? 0 : 1;  // Megatron-Core: one direction on the world group's communicator
    return forward == sender ? 0 : 1;             // sends forward / receives backward: the pair with the next stage
}

void Builder::check_pair_order(const PendingMessage& sender, std::uint64_t receiver_order) const {
    if (!e_.overlap_p2p_comm || sender.order == receiver_order) return;
    throw SimulationError(fmt::format("internal: pipeline ops posted in different orders by the two ranks of a pair "
                                      "({} microbatch {} chunk {}: the sender's op {}, the receiver's {}): NCCL would "
                                      "match them wrongly",
                                      sender.forward ? "forward" : "backward", sender.microbatch, sender.chunk,
                                      sender.order, receiver_order));
}

StreamId Builder::transfer_stream(const Group& a, bool forward) const {
    if (!e_.overlap_p2p_comm || !e_.p2p_pair_order) return forward ? a.send_fwd : a.send_bwd;
    const int p = e_.pipeline;
    if (forward || p == 2) return a.send_fwd;
    return groups_[static_cast<std::size_t>(group_index((a.stage + p - 1) % p, a.replica))].send_fwd;
}

const Builder::RouteAndLatency& Builder::p2p_route(Group& a, bool forward) {
    auto& cached = a.p2p_routes[forward ? 0 : 1];
    if (!cached) {
        const int p = e_.pipeline;
        const Group& b = groups_[static_cast<std::size_t>(group_index((a.stage + (forward ? 1 : p - 1)) % p, a.replica))];
        std::vector<std::pair<int, int>> pairs;  // every tensor (and context) rank to its counterpart
        for (std::size_t i = 0; i < a.gpus.size(); ++i) pairs.emplace_back(a.gpus[i], b.gpus[i]);
        const fabric::Route route = fab_.combined(pairs);
        cached.emplace(sim_.add_route(route.links), route.latency);
    }
    return *cached;
}

void Builder::attach_overlap(std::uint64_t key, TaskId first) {
    const auto it = overlap_msgs_.find(key);
    if (it == overlap_msgs_.end()) return;
    OverlapMessage& m = it->second;
    if (m.transfer != ~TaskId{0}) {
        sim_.add_dependency(m.transfer, first);
    } else {
        sim_.add_hold(first);
        m.waiting.push_back(first);
    }
    // Its two waiters: the receiver's consuming unit and the sender's next unit of that direction.
    if (++m.attached == 2 && m.transfer != ~TaskId{0}) overlap_msgs_.erase(it);
}

}  // namespace strata::workload
