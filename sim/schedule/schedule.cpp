// Pipeline schedules as plain data (see include/strata/schedule.hpp).
#include "strata/schedule.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <string>

namespace strata::schedule {

Shape shape_of(const ExecutionSpec& e) {
    return Shape{e.schedule, e.pipeline, e.interleave, e.microbatches(),
                 e.overlap_p2p_comm && e.schedule == Schedule::interleaved};
}

bool sends_output(const Shape& s, int stage, const Unit& u) {
    const int v = virtual_stage(s, stage, u.chunk);
    return u.forward ? v < s.virtual_stages() - 1 : v > 0;
}

bool needs_input(const Shape& s, int stage, const Unit& u) {
    const int v = virtual_stage(s, stage, u.chunk);
    return u.forward ? v > 0 : v < s.virtual_stages() - 1;
}

std::vector<Unit> unit_order(const Shape& s, int r) {
    const int p = s.stages, n = s.microbatches;
    if (p < 1 || s.chunks < 1 || n < 1 || r < 0 || r >= p)
        throw Error("schedule: stage " + std::to_string(r) + " of " + std::to_string(p) + " stages, " +
                    std::to_string(s.chunks) + " chunks, " + std::to_string(n) + " microbatches is not a schedule");
    std::vector<Unit> prog;
    prog.reserve(static_cast<std::size_t>(2 * n * s.chunks));
    if (s.kind == Schedule::gpipe) {
        for (int j = 0; j < n; ++j) prog.push_back({true, 0, j});
        for (int j = 0; j < n; ++j) prog.push_back({false, 0, j});
        return prog;
    }
    if (s.kind == Schedule::one_f_one_b) {
        const int warm = std::min(p - r - 1, n);
        for (int j = 0; j < warm; ++j) prog.push_back({true, 0, j});
        for (int i = 0; i < n - warm; ++i) {
            prog.push_back({true, 0, warm + i});
            prog.push_back({false, 0, i});
        }
        for (int i = n - warm; i < n; ++i) prog.push_back({false, 0, i});
        return prog;
    }
    const int m = s.chunks, total = n * m;
    const int warm = interleaved_warmup(s, r);
    auto fwd = [&](int k) { return Unit{true, (k % (p * m)) / p, (k / (p * m)) * p + (k % p)}; };
    auto bwd = [&](int k) { return Unit{false, m - 1 - (k % (p * m)) / p, (k / (p * m)) * p + (k % p)}; };
    for (int k = 0; k < warm; ++k) prog.push_back(fwd(k));
    for (int i = 0; i < total - warm; ++i) {
        prog.push_back(fwd(warm + i));
        prog.push_back(bwd(i));
    }
    for (int i = total - warm; i < total; ++i) prog.push_back(bwd(i));
    return prog;
}

int interleaved_warmup(const Shape& s, int r) {
    const int p = s.stages, n = s.microbatches, m = s.chunks, total = n * m;
    return n == p ? total : std::min(2 * (p - r - 1) + (m - 1) * p, total);
}

std::vector<Instruction> stage_program(const Shape& s, int r) {
    const std::vector<Unit> units = unit_order(s, r);
    std::vector<Instruction> out;
    out.reserve(units.size() * 2 + 1);
    auto call = [&](const std::vector<std::size_t>& outs, const std::vector<std::size_t>& ins) {
        Instruction c;
        c.kind = Instruction::Kind::call;
        for (std::size_t u : outs) {
            if (!sends_output(s, r, units[u])) continue;
            if (c.call.send_count == c.call.sends.size()) throw Error("schedule: internal: a call with over two sends");
            c.call.sends[c.call.send_count++] = units[u];
        }
        for (std::size_t u : ins) {
            if (!needs_input(s, r, units[u])) continue;
            if (c.call.receive_count == c.call.receives.size()) throw Error("schedule: internal: a call with over two receives");
            c.call.receives[c.call.receive_count++] = units[u];
        }
        if (c.call.send_count + c.call.receive_count > 0) out.push_back(c);
    };
    const bool interleaved = s.kind == Schedule::interleaved;
    if (interleaved && s.overlap_p2p) {
        // Megatron-Core's interleaved schedule with overlap_p2p_comm (schedules.py, r0.8): a blocking recv_forward
        // first; after each warm-up or steady unit its output is sent and the input of the next unit of its direction
        // received, posted asynchronously (send_forward_recv_forward after a forward, send_backward_recv_backward
        // after a backward); after the last warm-up forward's exchange a second asynchronous call receives the first
        // backward's input. The cool-down exchanges block; with every forward warm-up, a blocking recv_backward
        // comes before the first backward.
        const int warm = interleaved_warmup(s, r);
        const bool steady = static_cast<std::size_t>(2 * warm) < units.size();
        // The warm-up forwards, then forward-backward pairs: the first backward follows the first steady forward.
        const std::size_t first_backward = static_cast<std::size_t>(steady ? warm + 1 : warm);
        const std::size_t cooldown = units.size() - static_cast<std::size_t>(warm);  // its first backward
        auto exchange = [&](const std::vector<std::size_t>& outs, const std::vector<std::size_t>& ins, bool async) {
            const std::size_t before = out.size();
            call(outs, ins);
            if (out.size() > before) out.back().call.asynchronous = async;
        };
        exchange({}, {0}, false);
        for (std::size_t u = 0; u < units.size(); ++u) {
            if (!steady && u == first_backward) exchange({}, {first_backward}, false);
            Instruction ins;
            ins.unit = units[u];
            out.push_back(ins);
            std::vector<std::size_t> in;
            for (std::size_t v = u + 1; v < units.size(); ++v)
                if (units[v].forward == units[u].forward) {
                    in.push_back(v);
                    break;
                }
            exchange({u}, in, u < cooldown);
            if (steady && u + 1 == static_cast<std::size_t>(warm)) exchange({}, {first_backward}, true);
        }
        return out;
    }
    // Megatron: with as many microbatches as stages every forward is warm-up, then one receive before the
    // backwards (no steady forward-backward pairs).
    const bool all_warmup = interleaved && s.microbatches == s.stages;
    std::vector<std::size_t> pending_out;
    call({}, {0});
    for (std::size_t u = 0; u < units.size(); ++u) {
        const Unit& cur = units[u];
        Instruction ins;
        ins.unit = cur;
        out.push_back(ins);
        pending_out.push_back(u);
        if (u + 1 == units.size()) {
            call(pending_out, {});
            break;
        }
        const Unit& next = units[u + 1];
        if (interleaved && cur.forward && !next.forward) {
            if (!all_warmup) continue;  // a steady forward-backward pair runs back to back, then one exchange
            call(pending_out, {});      // all warm-up: send the last forward, then receive for the backwards
            call({}, {u + 1});
        } else if (interleaved) {
            std::vector<std::size_t> in = {u + 1};
            // The exchange before a steady pair also brings the pair's backward its input (Megatron's last
            // warm-up exchange, recv_next). With every forward warm-up (n = p) there is no steady pair: the
            // first backward's input comes with the receive after the last forward, and only there.
            if (!all_warmup && next.forward && u + 2 < units.size() && !units[u + 2].forward) in.push_back(u + 2);
            call(pending_out, in);
        } else if (cur.forward != next.forward) {
            call(pending_out, {u + 1});
        } else {
            call(pending_out, {});
            call({}, {u + 1});
        }
        pending_out.clear();
    }
    return out;
}

int peak_in_flight(const Shape& s, int r) {
    int held = 0, peak = 0;
    for (const Unit& u : unit_order(s, r)) {
        // A forward holds its activations from its start; a backward frees them at its end, so the backward's
        // own unit is still held while it runs.
        if (u.forward) peak = std::max(peak, ++held);
        else --held;
    }
    return peak;
}

}  // namespace strata::schedule
