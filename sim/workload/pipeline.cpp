// Pipeline transfers between the groups' blocking calls (program.cpp), in each sender's program order. A
// transfer starts once both calls are posted (NCCL send/recv rendezvous); each TP rank sends its share over
// its own rail and the t flows move together as one flow over the union of their routes.
#include "builder.hpp"

#include "strata/errors.hpp"

namespace strata::workload {

void Builder::emit_pipeline_transfers() {
    const int p = e_.pipeline, t = e_.tensor;
    const int last_v = shape_.virtual_stages() - 1;
    const Bytes per_rank(activation_message_.value / t);
    std::map<std::pair<int, int>, fabric::Route> routes;
    auto route_between = [&](const Group& a, const Group& b) -> const fabric::Route& {
        auto key = std::pair{a.gpus.front(), b.gpus.front()};
        auto it = routes.find(key);
        if (it != routes.end()) return it->second;
        std::vector<std::pair<int, int>> pairs;  // every tensor (and context) rank to its counterpart
        for (std::size_t i = 0; i < a.gpus.size(); ++i) pairs.emplace_back(a.gpus[i], b.gpus[i]);
        return routes.emplace(key, fab_.combined(pairs)).first->second;
    };
    const Time p2p_latency = sc_.system.network.p2p_latency;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        for (const schedule::Instruction& ins : programs_[static_cast<std::size_t>(g.stage)]) {
            if (ins.kind != schedule::Instruction::Kind::unit) continue;
            const schedule::Unit& s = ins.unit;
            const int v = schedule::virtual_stage(shape_, g.stage, s.chunk);
            const int to_v = s.forward ? v + 1 : v - 1;
            if (to_v < 0 || to_v > last_v) continue;
            const int to_stage = to_v % p, to_chunk = to_v / p;
            const std::size_t to_gi = static_cast<std::size_t>(group_index(to_stage, g.replica));
            const auto& send_call = group_calls_[gi].sends[message_index(s)];
            const auto& recv = group_calls_[to_gi].receives[message_index({s.forward, to_chunk, s.microbatch})];
            if (!send_call || !recv) throw SimulationError("internal: a pipeline message without its send or receive call");
            const CallTasks& cs = group_calls_[gi].calls[*send_call];
            const CallTasks& cr = group_calls_[to_gi].calls[recv->call];
            const fabric::Route& route = route_between(g, groups_[to_gi]);
            const TaskId x = sim_.add_transfer(s.forward ? g.send_fwd : g.send_bwd, route.links, per_rank,
                                               route.latency + p2p_latency, make_label(TaskKind::p2p, s.chunk, s.microbatch));
            sim_.add_dependency(cs.post, x);
            sim_.add_dependency(cr.post, x);
            sim_.add_dependency(x, cs.wait);
            if (recv->gather_first) sim_.add_dependency(x, *recv->gather_first);
            else sim_.add_dependency(x, cr.wait);
        }
    }
}

}  // namespace strata::workload
