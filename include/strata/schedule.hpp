// Pipeline schedules as plain data: for each pipeline stage, the ordered program of forward / backward
// units and of Megatron-LM's blocking pipeline calls between them (GPipe, 1F1B, interleaved 1F1B).
// The one source for the task-graph builder (sim/workload) and for the analytical in-flight memory
// (sim/model/memory.cpp): neither derives a schedule of its own.
#pragma once

#include "strata/spec.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace strata::schedule {

/// What a schedule depends on: its kind, the pipeline stages p, model chunks per stage m and the
/// microbatches n of one iteration.
struct Shape {
    Schedule kind = Schedule::one_f_one_b;
    int stages = 1;        ///< p
    int chunks = 1;        ///< m (interleave)
    int microbatches = 1;  ///< n
    /// Interleaved only: Megatron's overlapped pipeline communication (ExecutionSpec::overlap_p2p_comm): a call after
    /// every unit, sending its output and receiving the next unit of its direction's input.
    bool overlap_p2p = false;
    [[nodiscard]] int virtual_stages() const { return stages * chunks; }
};
[[nodiscard]] Shape shape_of(const ExecutionSpec& execution);

/// The forward or the backward pass of one model chunk for one microbatch.
struct Unit {
    bool forward = true;
    int chunk = 0;
    int microbatch = 0;
    friend bool operator==(const Unit&, const Unit&) = default;
};

/// Virtual stage (position in the model) of chunk `chunk` on stage `stage`: chunk x p + stage.
[[nodiscard]] inline int virtual_stage(const Shape& s, int stage, int chunk) { return chunk * s.stages + stage; }
/// The unit sends its output (activation forward, gradient backward) to the neighbouring virtual stage.
[[nodiscard]] bool sends_output(const Shape& s, int stage, const Unit& u);
/// The unit needs an input received from the neighbouring virtual stage.
[[nodiscard]] bool needs_input(const Shape& s, int stage, const Unit& u);

/// One pipeline call: it sends the outputs of up to two units that ran before it and receives the inputs of up to
/// two units that follow. Blocking (Megatron-LM 2022: batch_isend_irecv, then a device synchronize; Megatron-Core:
/// the requests waited for at once), or asynchronous (overlap_p2p_comm: the units that need its transfers wait).
/// Only units that have something to send or receive are listed; a call with nothing is not emitted.
struct Call {
    std::array<Unit, 2> sends{};
    std::array<Unit, 2> receives{};
    std::uint8_t send_count = 0;
    std::uint8_t receive_count = 0;
    bool asynchronous = false;
};

/// One instruction of a stage's program: a unit, or a call.
struct Instruction {
    enum class Kind : std::uint8_t { unit, call };
    Kind kind = Kind::unit;
    Unit unit;   ///< kind == unit
    Call call;   ///< kind == call
};

/// The units of stage `stage` in the order it runs them (Megatron-LM's order):
///   GPipe: every forward, then every backward;
///   1F1B: min(p - r - 1, n) warm-up forwards, then forward / backward pairs, then the cool-down backwards;
///   interleaved: 2(p - r - 1) + (m - 1)p warm-up forwards (all n m of them when n = p), then pairs, then
///   cool-down; virtual microbatch k is chunk (k mod pm) / p, microbatch (k / pm) p + k mod p, and the
///   backwards visit the chunks in reverse.
[[nodiscard]] std::vector<Unit> unit_order(const Shape& shape, int stage);
/// How many warm-up forwards the interleaved schedule runs on stage `stage` before its forward-backward pairs
/// (Megatron's num_warmup_microbatches, capped at all n m of them).
[[nodiscard]] int interleaved_warmup(const Shape& shape, int stage);

/// The stage's whole program: its units with Megatron-LM's call boundaries between them. The interleaved
/// schedule runs a steady forward and backward back to back and exchanges once after the pair (the exchange
/// before a pair also brings the pair's backward its input); with n = p every forward is warm-up and one
/// receive precedes the backwards. 1F1B combines a send with the next unit's receive between a forward and a
/// backward, and sends, then receives, between two units of the same direction. GPipe as 1F1B.
/// With overlap_p2p_comm (Megatron-Core's interleaved schedule, r0.8 and later): a blocking receive before the first
/// unit; after each warm-up and steady unit an asynchronous call sends its output and receives the input of the next
/// unit of its direction, and after the last warm-up forward another receives the first backward's input; the
/// cool-down's calls block (send_backward_recv_backward without overlap), and with every forward warm-up a blocking
/// receive precedes the first backward.
[[nodiscard]] std::vector<Instruction> stage_program(const Shape& shape, int stage);

/// The most units whose activations a stage holds at once (forwards started, their backwards not yet
/// finished), read from the unit order.
[[nodiscard]] int peak_in_flight(const Shape& shape, int stage);

}  // namespace strata::schedule
