// Unit tests of the discrete-event engine (strata::engine::Simulator): in-order streams, dependencies,
// max-min fair flows, memory pools, stall reports and determinism. Expected values are computed by hand
// (times in integer picoseconds: 1 s = 1e12 ps).
#include "strata/engine.hpp"
#include "strata/errors.hpp"

#include "../sim/engine/flow_network.hpp"  // private: the max-min solver, tested directly below

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using namespace strata;
using namespace strata::engine;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000'000;  // ps

Time us(double v) {
    return Time::from_us(v);
}
Time ps(std::int64_t v) {
    return Time::from_ps(v);
}
BytesPerSecond bw(double v) {
    return BytesPerSecond{v};
}

/// A tiny deterministic generator for the randomised tests.
struct Lcg {
    std::uint64_t state;
    std::uint32_t next() {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<std::uint32_t>(state >> 33);
    }
    std::uint32_t below(std::uint32_t n) { return next() % n; }
};

}  // namespace

TEST_CASE("dependent compute tasks on different streams run back to back", "[engine]") {
    Simulator sim;
    const StreamId s0 = sim.add_stream("s0");
    const StreamId s1 = sim.add_stream("s1");
    const StreamId s2 = sim.add_stream("s2");
    const TaskId a = sim.add_compute(s0, us(10), 1);
    const TaskId b = sim.add_compute(s1, us(20), 2);
    const TaskId c = sim.add_compute(s2, us(30), 3);
    sim.add_dependency(a, b);
    sim.add_dependency(b, c);
    const RunStats st = sim.run();

    CHECK(sim.start_time(a) == us(0));
    CHECK(sim.start_time(b) == us(10));
    CHECK(sim.start_time(c) == us(30));
    CHECK(sim.end_time(c) == us(60));
    CHECK(st.end_time == us(60));
    CHECK(st.tasks == 3);
    CHECK(st.events == 3);
    CHECK(st.flows == 0);
    CHECK(sim.stream_busy(s1) == us(20));
    CHECK(sim.label_of(c) == 3);
    CHECK(sim.stream_of(b) == s1);
    CHECK_FALSE(sim.is_transfer(a));
    CHECK(sim.task_count() == 3);
    CHECK(sim.stream_count() == 3);
    CHECK(sim.stream_name(s2) == "s2");
}

TEST_CASE("a stream runs its tasks in the order they were added", "[engine]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    const TaskId first = sim.add_compute(s, us(100), 0);
    const TaskId second = sim.add_compute(s, us(5), 0);  // ready at 0, but queued behind `first`
    sim.run();
    CHECK(sim.start_time(first) == us(0));
    CHECK(sim.start_time(second) == us(100));
    CHECK(sim.end_time(second) == us(105));
    CHECK(sim.stream_busy(s) == us(105));
}

TEST_CASE("a head task waiting for a dependency blocks the rest of its stream", "[engine]") {
    Simulator sim;
    const StreamId s1 = sim.add_stream("s1");
    const StreamId s2 = sim.add_stream("s2");
    const TaskId a = sim.add_compute(s1, us(50), 0);
    const TaskId b = sim.add_compute(s2, us(10), 0);
    const TaskId c = sim.add_compute(s2, us(1), 0);  // no dependency, but behind b
    sim.add_dependency(a, b);
    sim.run();
    CHECK(sim.start_time(b) == us(50));
    CHECK(sim.start_time(c) == us(60));
    CHECK(sim.end_time(c) == us(61));
    CHECK(sim.stream_busy(s2) == us(11));
}

TEST_CASE("start time is the later of stream free time and last dependency end", "[engine]") {
    Simulator sim;
    const StreamId x = sim.add_stream("x");
    const StreamId y = sim.add_stream("y");
    const StreamId z = sim.add_stream("z");
    const TaskId x1 = sim.add_compute(x, us(30), 0);
    const TaskId z1 = sim.add_compute(z, us(45), 0);
    const TaskId y1 = sim.add_compute(y, us(10), 0);
    const TaskId y2 = sim.add_compute(y, us(5), 0);  // deps end at 30 and 45; stream free at 10
    const TaskId y3 = sim.add_compute(y, us(7), 0);  // dep ends at 30; stream free at 50
    sim.add_dependency(x1, y2);
    sim.add_dependency(z1, y2);
    sim.add_dependency(x1, y3);
    sim.run();
    CHECK(sim.end_time(y1) == us(10));
    CHECK(sim.start_time(y2) == us(45));
    CHECK(sim.start_time(y3) == us(50));
    CHECK(sim.end_time(y3) == us(57));
}

TEST_CASE("zero-duration tasks take no time and duplicate dependencies are harmless", "[engine]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    const StreamId t = sim.add_stream("t");
    const TaskId a = sim.add_compute(s, Time::zero(), 0);
    const TaskId b = sim.add_compute(t, Time::zero(), 0);
    const TaskId c = sim.add_compute(t, ps(7), 0);
    sim.add_dependency(a, b);
    sim.add_dependency(a, b);
    sim.add_dependency(b, c);
    const RunStats st = sim.run();
    CHECK(sim.end_time(b) == ps(0));
    CHECK(sim.start_time(c) == ps(0));
    CHECK(st.end_time == ps(7));
}

TEST_CASE("one flow on one link takes latency plus bytes over bandwidth", "[engine][flow]") {
    Simulator sim;
    const StreamId s = sim.add_stream("comm");
    const LinkId l = sim.add_link("l", bw(1e9));
    const TaskId t = sim.add_transfer(s, {{l, 1}}, Bytes(1'000'000'000), us(5), 0);
    const RunStats st = sim.run();
    CHECK(sim.is_transfer(t));
    CHECK(sim.start_time(t) == ps(0));
    CHECK(sim.end_time(t) == ps(kSecond + 5'000'000));
    CHECK(sim.stream_busy(s) == ps(kSecond + 5'000'000));
    CHECK(st.flows == 1);
    CHECK(st.tasks == 1);
    CHECK(st.rate_updates == 2);  // start and end
}

TEST_CASE("two equal flows sharing a link both take twice as long", "[engine][flow]") {
    Simulator sim;
    const LinkId l = sim.add_link("l", bw(1e9));
    const TaskId a = sim.add_transfer(sim.add_stream("a"), {{l, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    const TaskId b = sim.add_transfer(sim.add_stream("b"), {{l, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    sim.run();
    CHECK(sim.end_time(a) == ps(2 * kSecond));
    CHECK(sim.end_time(b) == ps(2 * kSecond));
}

TEST_CASE("a flow that joins halfway slows the first, then speeds up when it leaves", "[engine][flow]") {
    Simulator sim;
    const LinkId l = sim.add_link("l", bw(1e9));
    const StreamId sa = sim.add_stream("a");
    const StreamId sb = sim.add_stream("b");
    const TaskId a = sim.add_transfer(sa, {{l, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    const TaskId wait = sim.add_compute(sb, Time::from_seconds(0.5), 0);
    const TaskId b = sim.add_transfer(sb, {{l, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    sim.run();
    // 0 .. 0.5 s: a alone at 1 GB/s (0.5 GB). 0.5 .. 1.5 s: both at 0.5 GB/s; a finishes.
    // 1.5 .. 2.0 s: b alone moves its last 0.5 GB at 1 GB/s.
    CHECK(sim.end_time(wait) == ps(kSecond / 2));
    CHECK(sim.start_time(b) == ps(kSecond / 2));
    CHECK(sim.end_time(a) == ps(3 * kSecond / 2));
    CHECK(sim.end_time(b) == ps(2 * kSecond));
}

TEST_CASE("a transfer's latency delays its flow and its share of the link", "[engine][flow]") {
    Simulator sim;
    const LinkId l = sim.add_link("l", bw(2e9));
    const TaskId a = sim.add_transfer(sim.add_stream("a"), {{l, 1}}, Bytes(2'000'000'000), Time::zero(), 0);
    const TaskId b =
        sim.add_transfer(sim.add_stream("b"), {{l, 1}}, Bytes(1'000'000'000), Time::from_seconds(0.25), 0);
    sim.run();
    // a alone for 0.25 s (0.5 GB), then both at 1 GB/s: b needs 1 s (ends 1.25 s) while a moves 1 GB;
    // a's last 0.5 GB at 2 GB/s takes 0.25 s.
    CHECK(sim.end_time(b) == ps(5 * kSecond / 4));
    CHECK(sim.end_time(a) == ps(3 * kSecond / 2));
}

TEST_CASE("max-min fairness across three links", "[engine][flow]") {
    Simulator sim;
    const LinkId l1 = sim.add_link("l1", bw(3e9));
    const LinkId l2 = sim.add_link("l2", bw(2e9));
    const LinkId l3 = sim.add_link("l3", bw(100e9));
    // A: l1 + l2, B: l2 + l3, C: l1. l2 is the bottleneck (2 GB/s over 2 flows): A = B = 1 GB/s.
    // C takes what A leaves on l1: 2 GB/s. After A and B finish at 1 s, C has 4 - 2 = 2 GB left at 3 GB/s.
    const TaskId a =
        sim.add_transfer(sim.add_stream("a"), {{l1, 1}, {l2, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    const TaskId b =
        sim.add_transfer(sim.add_stream("b"), {{l2, 1}, {l3, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    const TaskId c = sim.add_transfer(sim.add_stream("c"), {{l1, 1}}, Bytes(4'000'000'000), Time::zero(), 0);
    const RunStats st = sim.run();
    CHECK(sim.end_time(a) == ps(kSecond));
    CHECK(sim.end_time(b) == ps(kSecond));
    // 2e9 bytes / 3e9 B/s = 666666666666.67 ps, rounded up.
    CHECK(sim.end_time(c) == ps(kSecond + 666'666'666'667));
    CHECK(st.flows == 3);
}

TEST_CASE("flows on disjoint links do not slow each other", "[engine][flow]") {
    Simulator sim;
    const LinkId l1 = sim.add_link("l1", bw(1e9));
    const LinkId l2 = sim.add_link("l2", bw(4e9));
    const TaskId a = sim.add_transfer(sim.add_stream("a"), {{l1, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    const TaskId b = sim.add_transfer(sim.add_stream("b"), {{l2, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    sim.run();
    CHECK(sim.end_time(a) == ps(kSecond));
    CHECK(sim.end_time(b) == ps(kSecond / 4));
}

TEST_CASE("multiplicity k makes a flow use k times its rate on a link", "[engine][flow]") {
    SECTION("multiplicity 2 halves the rate") {
        Simulator sim;
        const LinkId l = sim.add_link("l", bw(1e9));
        const TaskId t =
            sim.add_transfer(sim.add_stream("s"), {{l, 2}}, Bytes(1'000'000'000), Time::zero(), 0);
        sim.run();
        CHECK(sim.end_time(t) == ps(2 * kSecond));
    }
    SECTION("a link listed twice counts twice") {
        Simulator sim;
        const LinkId l = sim.add_link("l", bw(1e9));
        const LinkId m = sim.add_link("m", bw(1e12));
        const TaskId t = sim.add_transfer(sim.add_stream("s"), {{l, 1}, {m, 1}, {l, 1}}, Bytes(1'000'000'000),
                                          Time::zero(), 0);
        sim.run();
        CHECK(sim.end_time(t) == ps(2 * kSecond));
    }
    SECTION("weighted sharing: multiplicities 2 and 1 on a 3 GB/s link") {
        Simulator sim;
        const LinkId l = sim.add_link("l", bw(3e9));
        // Both rise to 1 GB/s (2 + 1 = 3 GB/s). a (1 GB) ends at 1 s; b then has 1 GB left at 3 GB/s.
        const TaskId a =
            sim.add_transfer(sim.add_stream("a"), {{l, 2}}, Bytes(1'000'000'000), Time::zero(), 0);
        const TaskId b =
            sim.add_transfer(sim.add_stream("b"), {{l, 1}}, Bytes(2'000'000'000), Time::zero(), 0);
        sim.run();
        CHECK(sim.end_time(a) == ps(kSecond));
        CHECK(sim.end_time(b) == ps(kSecond + 333'333'333'334));
    }
}

TEST_CASE("transfers without bytes or without links take only their latency", "[engine][flow]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    const LinkId l = sim.add_link("l", bw(1e9));
    const TaskId empty_route = sim.add_transfer(s, {}, Bytes(1'000'000), us(3), 0);
    const TaskId zero_bytes = sim.add_transfer(s, {{l, 1}}, Bytes(0), us(4), 0);
    const TaskId real = sim.add_transfer(s, {{l, 1}}, Bytes(1000), us(1), 0);  // 1 us latency + 1 us
    const RunStats st = sim.run();
    CHECK(sim.end_time(empty_route) == us(3));
    CHECK(sim.end_time(zero_bytes) == us(7));
    CHECK(sim.start_time(real) == us(7));
    CHECK(sim.end_time(real) == us(9));
    CHECK(sim.is_transfer(empty_route));
    CHECK(sim.is_transfer(zero_bytes));
    CHECK(st.flows == 1);
    CHECK(sim.stream_busy(s) == us(9));
}

TEST_CASE("transfers on one stream run one after the other", "[engine][flow]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    const LinkId l = sim.add_link("l", bw(1e9));
    const TaskId a = sim.add_transfer(s, {{l, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    const TaskId b = sim.add_transfer(s, {{l, 1}}, Bytes(1'000'000'000), Time::zero(), 0);
    sim.run();
    CHECK(sim.end_time(a) == ps(kSecond));
    CHECK(sim.start_time(b) == ps(kSecond));
    CHECK(sim.end_time(b) == ps(2 * kSecond));
}

TEST_CASE("memory: peak, peak breakdown, over-capacity and timeline", "[engine][memory]") {
    Simulator sim;
    const PoolId p = sim.add_pool("gpu0", Bytes(100), {"weights", "activations"}, true);
    sim.add_static(p, 0, Bytes(30));
    const StreamId s1 = sim.add_stream("s1");
    const StreamId s2 = sim.add_stream("s2");
    const TaskId a = sim.add_compute(s1, us(10), 0);  // 0 .. 10 us, holds 50
    sim.add_memory_effect(a, {p, 1, Bytes(50), Bytes(50)});
    sim.add_compute(s2, us(5), 0);
    const TaskId b = sim.add_compute(s2, us(10), 0);  // 5 .. 15 us, holds 40
    sim.add_memory_effect(b, {p, 1, Bytes(40), Bytes(40)});
    sim.run();

    REQUIRE(sim.pool_count() == 1);
    const PoolReport r = sim.pool_report(p);
    CHECK(r.name == "gpu0");
    CHECK(r.capacity == Bytes(100));
    CHECK(r.peak == Bytes(120));
    CHECK(r.peak_time == us(5));
    REQUIRE(r.peak_breakdown.size() == 2);
    CHECK(r.peak_breakdown[0] == Bytes(30));
    CHECK(r.peak_breakdown[1] == Bytes(90));
    CHECK(r.over_capacity);
    CHECK(r.first_over_time == us(5));

    const auto tl = sim.pool_timeline(p);
    REQUIRE(tl.size() == 4);
    CHECK(tl[0].time == us(0));
    CHECK(tl[0].in_use == Bytes(80));  // static 30 plus a's 50, both at t = 0
    CHECK(tl[1].time == us(5));
    CHECK(tl[1].in_use == Bytes(120));
    CHECK(tl[2].time == us(10));
    CHECK(tl[2].in_use == Bytes(70));
    CHECK(tl[3].time == us(15));
    CHECK(tl[3].in_use == Bytes(30));
}

TEST_CASE("memory: a free at the end of a task precedes the allocation of its successor",
          "[engine][memory]") {
    Simulator sim;
    const PoolId p = sim.add_pool("pool", Bytes(100), {"x"}, false);
    const PoolId q = sim.add_pool("traced", Bytes(100), {"x"}, true);
    const StreamId s1 = sim.add_stream("s1");
    const StreamId s2 = sim.add_stream("s2");
    const TaskId a = sim.add_compute(s1, us(10), 0);
    const TaskId b = sim.add_compute(s2, us(10), 0);
    sim.add_dependency(a, b);
    for (const PoolId pool : {p, q}) {
        sim.add_memory_effect(a, {pool, 0, Bytes(60), Bytes(60)});
        sim.add_memory_effect(b, {pool, 0, Bytes(60), Bytes(60)});
    }
    sim.run();
    const PoolReport r = sim.pool_report(p);
    CHECK(r.peak == Bytes(60));
    CHECK(r.peak_time == us(0));  // first instant the peak was reached
    CHECK_FALSE(r.over_capacity);
    CHECK(sim.pool_timeline(p).empty());  // no timeline kept
    // At 10 us a's free and b's allocation cancel out: no sample there.
    const auto tl = sim.pool_timeline(q);
    REQUIRE(tl.size() == 2);
    CHECK(tl[0].time == us(0));
    CHECK(tl[0].in_use == Bytes(60));
    CHECK(tl[1].time == us(20));
    CHECK(tl[1].in_use == Bytes(0));
}

TEST_CASE("memory: the peak counts intermediate values within one instant", "[engine][memory]") {
    Simulator sim;
    const PoolId p = sim.add_pool("pool", Bytes(40), {"a", "b"}, true);
    const StreamId s = sim.add_stream("s");
    const TaskId blip = sim.add_compute(s, Time::zero(), 0);  // allocates and frees at t = 0
    sim.add_memory_effect(blip, {p, 1, Bytes(50), Bytes(50)});
    const TaskId keep = sim.add_compute(s, us(2), 0);  // allocates 10 at 0 and keeps it
    sim.add_memory_effect(keep, {p, 0, Bytes(10), Bytes(0)});
    sim.run();
    const PoolReport r = sim.pool_report(p);
    CHECK(r.peak == Bytes(50));
    CHECK(r.peak_time == ps(0));
    CHECK(r.peak_breakdown[0] == Bytes(0));
    CHECK(r.peak_breakdown[1] == Bytes(50));
    CHECK(r.over_capacity);
    CHECK(r.first_over_time == ps(0));
    const auto tl = sim.pool_timeline(p);
    REQUIRE(tl.size() == 1);
    CHECK(tl[0].time == ps(0));
    CHECK(tl[0].in_use == Bytes(10));
}

TEST_CASE("memory: static allocations alone set the peak at time zero", "[engine][memory]") {
    Simulator sim;
    const PoolId p = sim.add_pool("pool", Bytes(10), {"w", "g"}, true);
    sim.add_static(p, 0, Bytes(8));
    sim.add_static(p, 1, Bytes(4));
    sim.add_compute(sim.add_stream("s"), us(1), 0);
    sim.run();
    const PoolReport r = sim.pool_report(p);
    CHECK(r.peak == Bytes(12));
    CHECK(r.peak_time == ps(0));
    CHECK(r.peak_breakdown == std::vector<Bytes>{Bytes(8), Bytes(4)});
    CHECK(r.over_capacity);
    CHECK(r.first_over_time == ps(0));
    const auto tl = sim.pool_timeline(p);
    REQUIRE(tl.size() == 1);
    CHECK(tl[0].in_use == Bytes(12));
}

TEST_CASE("a dependency cycle stalls with a message naming the blocked tasks", "[engine][stall]") {
    Simulator sim;
    const StreamId s1 = sim.add_stream("alpha");
    const StreamId s2 = sim.add_stream("beta");
    const TaskId ok = sim.add_compute(s1, us(1), 7);
    const TaskId a = sim.add_compute(s1, us(1), 11);
    const TaskId b = sim.add_compute(s2, us(1), 22);
    sim.add_dependency(a, b);
    sim.add_dependency(b, a);
    sim.set_label_formatter([](std::uint32_t label) { return "op" + std::to_string(label); });
    try {
        sim.run();
        FAIL("run() should have thrown");
    } catch (const SimulationError& e) {
        const std::string msg = e.what();
        CHECK(msg.find("stalled") != std::string::npos);
        CHECK(msg.find("2 of 3 tasks unfinished") != std::string::npos);
        CHECK(msg.find("stream 'alpha': task #1 'op11' waits for task #2 'op22' on stream 'beta'") !=
              std::string::npos);
        CHECK(msg.find("stream 'beta': task #2 'op22' waits for task #1 'op11' on stream 'alpha'") !=
              std::string::npos);
    }
    // Results up to the stall stay readable.
    CHECK(sim.end_time(ok) == us(1));
    CHECK(sim.end_time(a) == ps(-1));
}

TEST_CASE("a dependency queued behind its waiter on the same stream stalls", "[engine][stall]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    const TaskId first = sim.add_compute(s, us(1), 5);
    const TaskId second = sim.add_compute(s, us(1), 6);
    sim.add_dependency(second, first);
    REQUIRE_THROWS_AS(sim.run(), SimulationError);
    try {
        Simulator again;
        const StreamId t = again.add_stream("t");
        const TaskId x = again.add_compute(t, us(1), 5);
        const TaskId y = again.add_compute(t, us(1), 6);
        again.add_dependency(y, x);
        again.run();
        FAIL("run() should have thrown");
    } catch (const SimulationError& e) {
        const std::string msg = e.what();
        CHECK(msg.find(
                  "stream 't': task #0 label 5 waits for task #1 label 6 on stream 't' (queued behind task "
                  "#0 label 5)") != std::string::npos);
    }
    CHECK(sim.start_time(second) == ps(-1));
}

TEST_CASE("a self-dependency stalls", "[engine][stall]") {
    Simulator sim;
    const TaskId t = sim.add_compute(sim.add_stream("s"), us(1), 0);
    sim.add_dependency(t, t);
    REQUIRE_THROWS_WITH(sim.run(), Catch::Contains("(itself)"));
}

TEST_CASE("misuse throws SimulationError", "[engine][errors]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    CHECK_THROWS_AS(sim.add_link("bad", bw(0.0)), SimulationError);
    CHECK_THROWS_AS(sim.add_link("nan", bw(std::nan(""))), SimulationError);
    const LinkId l = sim.add_link("l", bw(1e9));
    CHECK_THROWS_AS(sim.add_compute(s + 1, us(1), 0), SimulationError);
    CHECK_THROWS_AS(sim.add_compute(s, ps(-1), 0), SimulationError);
    CHECK_THROWS_AS(sim.add_transfer(s, {{l + 1, 1}}, Bytes(1), us(0), 0), SimulationError);
    CHECK_THROWS_AS(sim.add_transfer(s, {{l, 0}}, Bytes(1), us(0), 0), SimulationError);
    const TaskId t = sim.add_compute(s, us(1), 0);
    CHECK_THROWS_AS(sim.add_dependency(t, t + 1), SimulationError);
    const PoolId p = sim.add_pool("p", Bytes(10), {"only"}, false);
    CHECK_THROWS_AS(sim.add_memory_effect(t, {p, 1, Bytes(1), Bytes(1)}), SimulationError);
    CHECK_THROWS_AS(sim.add_memory_effect(t, {p + 1, 0, Bytes(1), Bytes(1)}), SimulationError);
    CHECK_THROWS_AS(sim.add_static(p, 3, Bytes(1)), SimulationError);
    CHECK_THROWS_AS(sim.start_time(t), SimulationError);  // before run()
    CHECK_THROWS_AS(sim.pool_report(p), SimulationError);

    sim.run();
    CHECK_THROWS_AS(sim.run(), SimulationError);
    CHECK_THROWS_AS(sim.add_compute(s, us(1), 0), SimulationError);
    CHECK_THROWS_AS(sim.end_time(t + 1), SimulationError);
    CHECK_THROWS_AS(sim.stream_name(s + 1), SimulationError);
    CHECK_THROWS_AS(sim.stream_busy(s + 1), SimulationError);
    CHECK_THROWS_AS(sim.pool_report(p + 1), SimulationError);
    CHECK_THROWS_AS(sim.pool_timeline(p + 1), SimulationError);
    CHECK_THROWS_AS(sim.label_of(t + 1), SimulationError);
}

TEST_CASE("progress is reported every N tasks and once at the end", "[engine]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    for (int i = 0; i < 10; ++i)
        sim.add_compute(s, us(1), 0);
    std::vector<std::uint64_t> calls;
    Time last;
    sim.run(
        [&](std::uint64_t done, std::uint64_t total, Time now) {
            calls.push_back(done);
            CHECK(total == 10);
            last = now;
        },
        3);
    CHECK(calls == std::vector<std::uint64_t>{3, 6, 9, 10});
    CHECK(last == us(10));
}

TEST_CASE("an empty simulator runs to time zero", "[engine]") {
    Simulator sim;
    const RunStats st = sim.run();
    CHECK(st.end_time == ps(0));
    CHECK(st.tasks == 0);
    CHECK(st.events == 0);
}

TEST_CASE("random contention matches a reference fluid model", "[engine][flow]") {
    // All flows start at t = 0 on their own streams; the reference recomputes global max-min rates by
    // naive progressive filling at every completion.
    Lcg rng{12345};
    const int links = 6;
    const int flows = 12;
    std::vector<double> cap(links);
    Simulator sim;
    for (int l = 0; l < links; ++l) {
        cap[l] = 1e9 * (1 + rng.below(8));
        sim.add_link("l" + std::to_string(l), bw(cap[l]));
    }
    std::vector<std::vector<LinkUse>> routes(flows);
    std::vector<double> bytes(flows);
    std::vector<TaskId> ids(flows);
    for (int f = 0; f < flows; ++f) {
        const int hops = 1 + static_cast<int>(rng.below(3));
        for (int h = 0; h < hops; ++h) {
            const LinkId l = rng.below(links);
            const bool seen = std::any_of(routes[f].begin(), routes[f].end(),
                                          [&](const LinkUse& u) { return u.link == l; });
            if (!seen) routes[f].push_back({l, 1 + rng.below(2)});
        }
        bytes[f] = 1e8 * (1 + rng.below(20));
        ids[f] = sim.add_transfer(sim.add_stream("f" + std::to_string(f)), routes[f],
                                  Bytes(static_cast<std::int64_t>(bytes[f])), Time::zero(), 0);
    }
    sim.run();

    std::vector<double> remaining = bytes;
    std::vector<double> finish(flows, -1.0);
    double now = 0.0;
    for (int round = 0; round < flows; ++round) {
        std::vector<double> rate(flows, -1.0);
        std::vector<double> left = cap;
        for (;;) {  // progressive filling: find the tightest link among unfrozen flows
            double best = 1e300;
            int best_link = -1;
            for (int l = 0; l < links; ++l) {
                double w = 0;
                for (int f = 0; f < flows; ++f) {
                    if (finish[f] >= 0 || rate[f] >= 0) continue;
                    for (const auto& u : routes[f]) {
                        if (static_cast<int>(u.link) == l) w += u.multiplicity;
                    }
                }
                if (w > 0 && left[l] / w < best) {
                    best = left[l] / w;
                    best_link = l;
                }
            }
            if (best_link < 0) break;
            for (int f = 0; f < flows; ++f) {
                if (finish[f] >= 0 || rate[f] >= 0) continue;
                bool on = false;
                for (const auto& u : routes[f])
                    on = on || static_cast<int>(u.link) == best_link;
                if (!on) continue;
                rate[f] = best;
                for (const auto& u : routes[f])
                    left[u.link] -= u.multiplicity * best;
            }
        }
        double dt = 1e300;
        for (int f = 0; f < flows; ++f) {
            if (finish[f] < 0) dt = std::min(dt, remaining[f] / rate[f]);
        }
        now += dt;
        for (int f = 0; f < flows; ++f) {
            if (finish[f] >= 0) continue;
            remaining[f] -= rate[f] * dt;
            if (remaining[f] <= 1e-3) finish[f] = now;
        }
    }
    for (int f = 0; f < flows; ++f) {
        const double expected_ps = finish[f] * 1e12;
        CHECK(std::abs(static_cast<double>(sim.end_time(ids[f]).ps()) - expected_ps) <=
              2.0 * flows + 1e-9 * expected_ps);
    }
}

namespace {

/// A random-ish graph: compute chains on several streams, cross-stream dependencies, and transfers
/// contending on shared links, with memory effects.
std::vector<std::int64_t> run_random_graph(std::uint64_t seed, RunStats* stats, Bytes* peak) {
    Lcg rng{seed};
    Simulator sim;
    const int streams = 12;
    const int links = 9;
    for (int s = 0; s < streams; ++s)
        sim.add_stream("s" + std::to_string(s));
    for (int l = 0; l < links; ++l)
        sim.add_link("l" + std::to_string(l), bw(1e9 * (1 + rng.below(4))));
    const PoolId pool = sim.add_pool("mem", Bytes(1'000'000), {"a", "b"}, true);
    std::vector<TaskId> tasks;
    for (int i = 0; i < 600; ++i) {
        const StreamId s = rng.below(streams);
        TaskId t;
        if (rng.below(3) == 0) {
            std::vector<LinkUse> route;
            const int hops = 1 + static_cast<int>(rng.below(3));
            for (int h = 0; h < hops; ++h)
                route.push_back({rng.below(links), 1 + rng.below(2)});
            t = sim.add_transfer(s, route, Bytes(1000 + rng.below(1'000'000)), Time::from_ns(rng.below(5000)),
                                 i);
        } else {
            t = sim.add_compute(s, Time::from_ns(rng.below(100'000)), i);
        }
        if (!tasks.empty()) {
            const int deps = static_cast<int>(rng.below(3));
            for (int d = 0; d < deps; ++d)
                sim.add_dependency(tasks[rng.below(static_cast<std::uint32_t>(tasks.size()))], t);
        }
        sim.add_memory_effect(t, {pool, rng.below(2), Bytes(rng.below(5000)), Bytes(rng.below(5000))});
        tasks.push_back(t);
    }
    *stats = sim.run();
    *peak = sim.pool_report(pool).peak;
    std::vector<std::int64_t> out;
    for (TaskId t : tasks) {
        out.push_back(sim.start_time(t).ps());
        out.push_back(sim.end_time(t).ps());
    }
    for (const MemorySample& m : sim.pool_timeline(pool)) {
        out.push_back(m.time.ps());
        out.push_back(m.in_use.value);
    }
    return out;
}

}  // namespace

TEST_CASE("the same graph always gives identical results", "[engine][determinism]") {
    RunStats s1;
    RunStats s2;
    Bytes p1;
    Bytes p2;
    const auto r1 = run_random_graph(42, &s1, &p1);
    const auto r2 = run_random_graph(42, &s2, &p2);
    CHECK(r1 == r2);
    CHECK(s1.end_time == s2.end_time);
    CHECK(s1.events == s2.events);
    CHECK(s1.rate_updates == s2.rate_updates);
    CHECK(s1.tasks == 600);
    CHECK(s1.flows > 100);
    CHECK(p1 == p2);
    // Every task ends no earlier than it starts, and the run ends with the last task.
    std::int64_t last = 0;
    for (std::size_t i = 0; i < r1.size() && i < 1200; i += 2) {
        CHECK(r1[i + 1] >= r1[i]);
        last = std::max(last, r1[i + 1]);
    }
    CHECK(s1.end_time == ps(last));
}

TEST_CASE("flow network: rates of a small max-min example", "[engine][flow]") {
    detail::FlowNetwork net;
    const LinkId l1 = net.add_link(3e9);
    const LinkId l2 = net.add_link(2e9);
    const LinkId l3 = net.add_link(100e9);
    const std::vector<LinkUse> ra{{l1, 1}, {l2, 1}};
    const std::vector<LinkUse> rb{{l2, 1}, {l3, 1}};
    const std::vector<LinkUse> rc{{l1, 1}};
    const std::uint32_t a = net.open(net.add_route(ra), 1e9);
    const std::uint32_t b = net.open(net.add_route(rb), 1e9);
    const std::uint32_t c = net.open(net.add_route(rc), 1e9);
    net.activate(a, 0);
    net.activate(b, 0);
    net.activate(c, 0);
    REQUIRE(net.dirty());
    CHECK(net.recompute(0).size() == 3);
    CHECK_FALSE(net.dirty());
    CHECK(net.rate(a) == Approx(1e9).epsilon(1e-12));
    CHECK(net.rate(b) == Approx(1e9).epsilon(1e-12));
    CHECK(net.rate(c) == Approx(2e9).epsilon(1e-12));
    CHECK(net.completion_ps(a) == kSecond);
    CHECK(net.completion_ps(c) == kSecond / 2);
    // b leaves: a is now limited by l1 together with c (1.5 GB/s each), at 0.25 s.
    net.deactivate(b);
    const auto changed = net.recompute(kSecond / 4);
    CHECK(changed.size() == 2);
    CHECK(net.rate(a) == Approx(1.5e9).epsilon(1e-12));
    CHECK(net.rate(c) == Approx(1.5e9).epsilon(1e-12));
    // a moved 0.25 GB by then and has 0.75 GB left: 0.5 s more. c moved 0.5 GB: 0.5 GB left, 1/3 s more.
    CHECK(net.completion_ps(a) == kSecond / 4 + kSecond / 2);
    CHECK(net.completion_ps(c) == kSecond / 4 + 333'333'333'334);
}

TEST_CASE("flow network: local repair agrees with full component water-filling", "[engine][flow]") {
    // Random starts and ends; after every recomputation both solvers must hold the same rates.
    struct Config {
        int links;
        int flows;
        int max_active;
    };
    for (const Config cfg : {Config{8, 120, 40}, Config{60, 600, 200}, Config{400, 2000, 300}}) {
        Lcg rng{static_cast<std::uint64_t>(cfg.links) * 7919};
        detail::FlowNetwork full;
        detail::FlowNetwork repair;
        full.set_full_recompute(true);
        for (int l = 0; l < cfg.links; ++l) {
            const double c = 1e9 * (1 + rng.below(8));
            full.add_link(c);
            repair.add_link(c);
        }
        for (int f = 0; f < cfg.flows; ++f) {
            std::vector<LinkUse> route;
            const int hops = 1 + static_cast<int>(rng.below(5));
            for (int h = 0; h < hops; ++h) {
                const LinkId l = rng.below(static_cast<std::uint32_t>(cfg.links));
                const bool seen =
                    std::any_of(route.begin(), route.end(), [&](const LinkUse& u) { return u.link == l; });
                if (!seen) route.push_back({l, 1 + static_cast<std::uint32_t>(rng.below(4) == 0)});
            }
            full.open(full.add_route(route), 1e9);
            repair.open(repair.add_route(route), 1e9);
        }
        std::vector<std::uint32_t> active;
        std::vector<std::uint32_t> idle;
        for (int f = 0; f < cfg.flows; ++f)
            idle.push_back(static_cast<std::uint32_t>(f));
        double worst = 0.0;
        for (int step = 0; step < 3000; ++step) {
            const int changes = 1 + static_cast<int>(rng.below(3));
            for (int k = 0; k < changes; ++k) {
                const bool start =
                    active.empty() || (static_cast<int>(active.size()) < cfg.max_active && rng.below(2) == 0);
                if (start && !idle.empty()) {
                    const auto i = rng.below(static_cast<std::uint32_t>(idle.size()));
                    const std::uint32_t f = idle[i];
                    idle.erase(idle.begin() + i);
                    active.push_back(f);
                    full.activate(f, step);
                    repair.activate(f, step);
                } else if (!active.empty()) {
                    const auto i = rng.below(static_cast<std::uint32_t>(active.size()));
                    const std::uint32_t f = active[i];
                    active.erase(active.begin() + i);
                    idle.push_back(f);
                    full.deactivate(f);
                    repair.deactivate(f);
                }
            }
            full.recompute(step);
            repair.recompute(step);
            for (std::uint32_t f : active) {
                worst = std::max(worst, std::abs(full.rate(f) - repair.rate(f)) / full.rate(f));
            }
        }
        INFO("links " << cfg.links << ", flows " << cfg.flows);
        CHECK(worst < 1e-10);
        CHECK(repair.fallbacks() == 0);
    }
}

TEST_CASE("a stream slowed while another carries bytes books its progress at each change of speed", "[engine][interference]") {
    // A compute task of 100 us; a flow of 50 us (50 kB at 1 GB/s) starting after a 20 us latency slows it to half speed:
    // 0-20 us full speed (20 us of work), 20-70 us half (25), then the remaining 55 us at full speed: ends at 125 us.
    Simulator sim;
    const StreamId compute = sim.add_stream("compute");
    const StreamId comm = sim.add_stream("comm");
    const LinkId l = sim.add_link("l", bw(1e9));
    sim.slow_while_busy(comm, compute, 0.5);
    const TaskId k = sim.add_compute(compute, us(100), 0);
    const TaskId next = sim.add_compute(compute, us(10), 0);  // after the flow: full speed
    const TaskId f = sim.add_transfer(comm, {{l, 1}}, Bytes(50'000), us(20), 0);
    sim.run();
    CHECK(sim.end_time(f) == us(70));
    CHECK(sim.end_time(k) == us(125));
    CHECK(sim.end_time(next) == us(135));
    CHECK(sim.stream_busy(compute) == us(135));

    // Without the coupling the same graph keeps its fixed durations; a byte-less transfer never interferes.
    Simulator plain;
    const StreamId c2 = plain.add_stream("compute");
    const StreamId m2 = plain.add_stream("comm");
    const LinkId l2 = plain.add_link("l", bw(1e9));
    const TaskId k2 = plain.add_compute(c2, us(100), 0);
    plain.add_transfer(m2, {{l2, 1}}, Bytes(50'000), us(20), 0);
    plain.run();
    CHECK(plain.end_time(k2) == us(100));

    Simulator bare;
    const StreamId c3 = bare.add_stream("compute");
    const StreamId m3 = bare.add_stream("comm");
    bare.slow_while_busy(m3, c3, 0.5);
    const TaskId k3 = bare.add_compute(c3, us(100), 0);
    bare.add_transfer(m3, {}, Bytes(0), us(30), 0);
    bare.run();
    CHECK(bare.end_time(k3) == us(100));

    Simulator bad;
    const StreamId a = bad.add_stream("a");
    CHECK_THROWS_AS(bad.slow_while_busy(a, a, 0.5), SimulationError);
    CHECK_THROWS_AS(bad.slow_while_busy(a, bad.add_stream("b"), 0.0), SimulationError);
}

TEST_CASE("a coupling at full speed changes nothing", "[engine][interference]") {
    Simulator sim;
    const StreamId compute = sim.add_stream("compute");
    const StreamId comm = sim.add_stream("comm");
    const LinkId l = sim.add_link("l", bw(1e9));
    sim.slow_while_busy(comm, compute, 1.0);
    const TaskId k = sim.add_compute(compute, us(100), 0);
    sim.add_transfer(comm, {{l, 1}}, Bytes(50'000), us(20), 0);
    sim.run();
    CHECK(sim.end_time(k) == us(100));
}

// ---- streaming (set_streaming): the graph generated while it runs ----

TEST_CASE("streaming: a stream refilled as it runs dry, its finished tasks observed and their slots reused", "[engine][stream]") {
    Simulator sim;
    std::vector<TaskRecord> seen;
    int generated = 0;
    StreamId s = 0;
    sim.set_streaming([&](const TaskRecord& r) { seen.push_back(r); },
                      [&](StreamId stream) {
                          CHECK(stream == s);
                          if (generated == 1000) return false;
                          sim.add_compute(stream, us(10), static_cast<std::uint32_t>(generated++));
                          return true;
                      });
    s = sim.add_stream("chain");
    sim.refill_when_empty(s);
    const RunStats st = sim.run();
    REQUIRE(seen.size() == 1000);
    CHECK(st.tasks == 1000);
    CHECK(st.end_time == us(10000));
    for (std::size_t i = 0; i < seen.size(); ++i) {
        CHECK(seen[i].label == i);
        CHECK(seen[i].start == us(10.0 * double(i)));
        CHECK(seen[i].end == us(10.0 * double(i + 1)));
    }
    CHECK(sim.task_count() == 1000);
    CHECK(sim.task_slots() == 1);  // one task alive at a time: its slot is reused
    CHECK(seen[0].task != seen[1].task);  // ... under a new id
    CHECK_THROWS_WITH(sim.end_time(seen[0].task), Catch::Contains("not kept when streaming"));
}

TEST_CASE("streaming: a hold waits for a task generated later, a dependency on a finished task is satisfied", "[engine][stream]") {
    Simulator sim;
    std::vector<TaskRecord> seen;
    StreamId a = 0, b = 0;
    TaskId a1 = 0, wait = 0;
    int a_calls = 0, b_calls = 0;
    sim.set_streaming([&](const TaskRecord& r) { seen.push_back(r); },
                      [&](StreamId s) {
                          if (s == a) {
                              if (a_calls++ > 0) return false;
                              a1 = sim.add_compute(a, us(10), 1);
                              wait = sim.add_compute(a, us(1), 2);
                              sim.add_hold(wait);  // needs b's x, not generated yet
                              return true;
                          }
                          ++b_calls;
                          if (b_calls == 1) {
                              sim.add_compute(b, us(20), 3);
                              return true;
                          }
                          if (b_calls == 2) {
                              const TaskId x = sim.add_compute(b, us(5), 4);
                              sim.add_dependency(a1, x);  // a1 ended at 10 us: satisfied
                              sim.add_dependency(x, wait);
                              sim.release_hold(wait);
                              return true;
                          }
                          return false;
                      });
    a = sim.add_stream("a");
    b = sim.add_stream("b");
    sim.refill_when_empty(a);
    sim.refill_when_empty(b);
    sim.run();
    auto by_label = [&](std::uint32_t l) {
        const auto it = std::find_if(seen.begin(), seen.end(), [&](const TaskRecord& r) { return r.label == l; });
        REQUIRE(it != seen.end());
        return *it;
    };
    CHECK(by_label(4).start == us(20));
    CHECK(by_label(2).start == us(25));  // held until x, which ended at 25 us
    CHECK(by_label(2).end == us(26));
}

TEST_CASE("streaming: misuse is an error, a hold never released a stall", "[engine][stream]") {
    SECTION("work added from the observer") {
        Simulator sim;
        StreamId s = 0;
        bool once = false;
        sim.set_streaming([&](const TaskRecord&) { sim.add_compute(s, us(1), 0); },
                          [&](StreamId st) {
                              if (once) return false;
                              once = true;
                              sim.add_compute(st, us(1), 0);
                              return true;
                          });
        s = sim.add_stream("s");
        sim.refill_when_empty(s);
        CHECK_THROWS_WITH(sim.run(), Catch::Contains("only be added from a refill callback"));
    }
    SECTION("a dependency added to a task that has started") {
        Simulator sim;
        StreamId s = 0, t = 0;
        TaskId late = 0;
        int calls = 0;
        sim.set_streaming({}, [&](StreamId st) {
            if (st != s) return false;
            ++calls;
            const TaskId x = sim.add_compute(s, us(10), 0);
            if (calls == 2) sim.add_dependency(x, late);  // at 10 us `late` is running: it cannot wait any more
            return calls < 3;
        });
        s = sim.add_stream("s");
        t = sim.add_stream("t");
        sim.refill_when_empty(s);
        late = sim.add_compute(t, us(100), 1);  // added before run(): starts at 0
        CHECK_THROWS_WITH(sim.run(), Catch::Contains("has started already"));
    }
    SECTION("a hold never released") {
        Simulator sim;
        StreamId s = 0;
        bool once = false;
        sim.set_streaming({}, [&](StreamId st) {
            if (once) return false;
            once = true;
            sim.add_hold(sim.add_compute(st, us(1), 7));
            return true;
        });
        s = sim.add_stream("held");
        sim.refill_when_empty(s);
        sim.set_label_formatter([](std::uint32_t l) { return "label " + std::to_string(l); });
        CHECK_THROWS_WITH(sim.run(), Catch::Contains("stream 'held'") && Catch::Contains("1 hold(s) never released"));
    }
}

TEST_CASE("streaming: the same graph generated while it runs gives the same times as built up front", "[engine][stream]") {
    // Streams 0..S-1, each a chain of K tasks (compute, or transfers over shared links); task (s, i) also depends on
    // task (s - 1, i). Streamed, a stream generates its next task when it runs dry; a dependency on a task of the
    // stream before that is not generated yet is a hold, released when that task is generated.
    constexpr int S = 6, K = 40;
    Lcg rng{12345};
    struct Spec {
        bool transfer;
        std::int64_t ps;  // compute duration or bytes
        int link;
    };
    std::vector<std::vector<Spec>> spec(S, std::vector<Spec>(K));
    for (auto& row : spec)
        for (auto& x : row) x = {rng.below(3) == 0, 1'000'000 + 1'000'000 * static_cast<std::int64_t>(rng.below(50)),
                                 static_cast<int>(rng.below(3))};
    auto add = [&](Simulator& sim, const std::vector<StreamId>& streams, const std::vector<LinkId>& links, int s, int i) {
        const Spec& x = spec[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
        const auto label = static_cast<std::uint32_t>(s * K + i);
        return x.transfer ? sim.add_transfer(streams[static_cast<std::size_t>(s)], {{links[static_cast<std::size_t>(x.link)], 1}},
                                             Bytes(x.ps), us(1), label)
                          : sim.add_compute(streams[static_cast<std::size_t>(s)], ps(x.ps), label);
    };
    // Built up front.
    std::vector<std::int64_t> start_a(S * K), end_a(S * K);
    {
        Simulator sim;
        std::vector<StreamId> streams;
        std::vector<LinkId> links;
        for (int s = 0; s < S; ++s) streams.push_back(sim.add_stream("s" + std::to_string(s)));
        for (int l = 0; l < 3; ++l) links.push_back(sim.add_link("l", bw(1e9 * (l + 1))));
        std::vector<std::vector<TaskId>> ids(S);
        for (int s = 0; s < S; ++s)
            for (int i = 0; i < K; ++i) {
                ids[static_cast<std::size_t>(s)].push_back(add(sim, streams, links, s, i));
                if (s > 0) sim.add_dependency(ids[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(s)].back());
            }
        sim.run();
        for (int s = 0; s < S; ++s)
            for (int i = 0; i < K; ++i) {
                start_a[static_cast<std::size_t>(s * K + i)] = sim.start_time(ids[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)]).ps();
                end_a[static_cast<std::size_t>(s * K + i)] = sim.end_time(ids[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)]).ps();
            }
    }
    // Streamed.
    std::vector<std::int64_t> start_b(S * K, -1), end_b(S * K, -1);
    {
        Simulator sim;
        std::vector<StreamId> streams;
        std::vector<LinkId> links;
        std::vector<int> next(S, 0);
        std::vector<std::vector<std::optional<TaskId>>> ids(S, std::vector<std::optional<TaskId>>(K));
        std::vector<std::vector<bool>> held(S, std::vector<bool>(K, false));
        std::size_t max_slots = 0;
        sim.set_streaming(
            [&](const TaskRecord& r) {
                start_b[r.label] = r.start.ps();
                end_b[r.label] = r.end.ps();
            },
            [&](StreamId st) {
                const int s = static_cast<int>(st);
                const int i = next[static_cast<std::size_t>(s)];
                if (i == K) return false;
                ++next[static_cast<std::size_t>(s)];
                const TaskId t = add(sim, streams, links, s, i);
                ids[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] = t;
                if (s > 0) {
                    if (auto before = ids[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(i)]) {
                        sim.add_dependency(*before, t);
                    } else {
                        sim.add_hold(t);
                        held[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] = true;
                    }
                }
                if (s + 1 < S && held[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(i)]) {
                    const TaskId after = *ids[static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(i)];
                    sim.add_dependency(t, after);
                    sim.release_hold(after);
                }
                max_slots = std::max(max_slots, sim.task_slots());
                return true;
            });
        for (int s = 0; s < S; ++s) streams.push_back(sim.add_stream("s" + std::to_string(s)));
        for (int l = 0; l < 3; ++l) links.push_back(sim.add_link("l", bw(1e9 * (l + 1))));
        for (StreamId st : streams) sim.refill_when_empty(st);
        sim.run();
        CHECK(max_slots < static_cast<std::size_t>(S * K));
    }
    CHECK(start_a == start_b);
    CHECK(end_a == end_b);
}

TEST_CASE("a dependency on a task id that was never issued is an error, not a satisfied dependency", "[engine][stream]") {
    Simulator sim;
    const StreamId s = sim.add_stream("s");
    const TaskId a = sim.add_compute(s, us(1), 0);
    const TaskId b = sim.add_compute(s, us(1), 0);
    CHECK_THROWS_WITH(sim.add_dependency(a + (TaskId{7} << 32), b), Catch::Contains("never issued"));
    CHECK_THROWS_WITH(sim.add_dependency(a, TaskId{99}), Catch::Contains("out of range"));
    CHECK_NOTHROW(sim.add_dependency(a, b));
}

namespace {

/// Random contention over links some of which have twins (the same bandwidth, beside their original in every route
/// with the same multiplicity: a bundle), one with a near-twin of another bandwidth and one with a twin that a
/// route crosses without it (neither bundles). Flows start at staggered times. Returns every transfer's end time;
/// `removed` gets seal_routes()'s count when sealed.
std::vector<Time> bundled_run(bool seal, std::size_t* removed, std::size_t* twin_uses) {
    Lcg rng{777};
    Simulator sim;
    const int base = 6;
    std::vector<LinkId> link(base);
    std::vector<double> cap(base);
    for (int l = 0; l < base; ++l) {
        cap[l] = 1e9 * (1 + rng.below(4));
        link[l] = sim.add_link("l" + std::to_string(l), bw(cap[l]));
    }
    std::vector<std::optional<LinkId>> twin(base);
    for (int l = 2; l < base; ++l) twin[l] = sim.add_link("twin" + std::to_string(l), bw(cap[l]));
    twin[0] = sim.add_link("near", bw(cap[0] * 1.5));  // another bandwidth: not a bundle
    twin[1] = sim.add_link("odd", bw(cap[1]));         // the last route crosses link 1 without it: not a bundle
    const int flows = 40;
    std::vector<TaskId> ids;
    for (int f = 0; f < flows; ++f) {
        std::vector<LinkUse> route;
        const int hops = 1 + static_cast<int>(rng.below(3));
        for (int h = 0; h < hops; ++h) {
            const auto l = static_cast<int>(rng.below(base));
            if (std::any_of(route.begin(), route.end(), [&](const LinkUse& u) { return u.link == link[l]; })) continue;
            const std::uint32_t m = 1 + rng.below(2);
            route.push_back({link[l], m});
            if (twin[l] && !(l == 1 && f == flows - 1)) route.push_back({*twin[l], m});
            if (l >= 2) ++*twin_uses;
        }
        const StreamId st = sim.add_stream("f" + std::to_string(f));
        ids.push_back(sim.add_transfer_on(st, sim.add_route(route), Bytes(static_cast<std::int64_t>(1e7 * (1 + rng.below(20)))),
                                          Time::from_ps(static_cast<std::int64_t>(rng.below(5000)) * 1'000'000), 0));
    }
    if (seal) *removed = sim.seal_routes();
    sim.run();
    std::vector<Time> ends;
    for (TaskId t : ids) ends.push_back(sim.end_time(t));
    return ends;
}

}  // namespace

TEST_CASE("sealed routes: bundled links give the same times to the picosecond", "[engine][flow]") {
    std::size_t removed = 0, twins = 0, unused = 0;
    const std::vector<Time> plain = bundled_run(false, nullptr, &unused);
    const std::vector<Time> sealed = bundled_run(true, &removed, &twins);
    CHECK(sealed == plain);
    // The twins of links 2-5 leave the routes, once per use (so may others the random routes happen to bundle).
    CHECK(twins > 0);
    CHECK(removed >= twins);
    Simulator sim;
    const LinkId a = sim.add_link("a", bw(1e9));
    const LinkId b = sim.add_link("b", bw(1e9));
    const LinkId c = sim.add_link("c", bw(1e9));
    const RouteId r = sim.add_route({{a, 2}, {b, 2}, {c, 1}});
    const LinkId d = sim.add_link("d", bw(2e9));
    sim.add_route({{c, 1}, {d, 1}});
    CHECK(sim.seal_routes() == 1);  // b goes (a's twin); c and d: other bandwidths, other routes
    CHECK(sim.route_links(r).size() == 2);
    CHECK(sim.route_links(r)[0].link == a);
    CHECK_THROWS_AS(sim.add_route({{a, 1}}), SimulationError);
    CHECK_THROWS_AS(sim.seal_routes(), SimulationError);
}

TEST_CASE("idle headroom: rest before a resuming task buys credit that work tasks take off their durations",
          "[engine][headroom]") {
    // Credit: none at time zero, `accrual` x the idle time since the last work task ended, at most `cap`; each work
    // task takes min(credit, its max saving, its duration).
    Simulator sim;
    const StreamId s = sim.add_stream("gpu");
    const StreamId other = sim.add_stream("elsewhere");
    sim.set_idle_headroom(s, ps(40), 0.5);
    const TaskId a = sim.add_compute(s, ps(100), 1);  // at time zero: no rest, no credit
    sim.set_headroom_work(a, ps(100), true);
    const TaskId wait = sim.add_compute(other, ps(160), 2);
    const TaskId b = sim.add_compute(s, ps(100), 3);  // idle 100..160: credit 30, takes its most, 25
    sim.add_dependency(wait, b);
    sim.set_headroom_work(b, ps(25), true);
    const TaskId c = sim.add_compute(s, ps(100), 4);  // not resuming: the 5 left
    sim.set_headroom_work(c, ps(50), false);
    const TaskId long_wait = sim.add_compute(other, ps(1000), 5);
    sim.add_dependency(c, long_wait);
    const TaskId d = sim.add_compute(s, ps(100), 6);  // idle 1000 ps: 500 capped at 40
    sim.add_dependency(long_wait, d);
    sim.set_headroom_work(d, ps(100), true);
    const TaskId plain = sim.add_compute(s, ps(10), 7);  // not work: counts as rest for the next resume
    const TaskId e = sim.add_compute(s, ps(100), 8);     // 10 ps since d ended: credit 5
    sim.set_headroom_work(e, ps(100), true);
    const TaskId f = sim.add_compute(s, ps(100), 9);  // work without a resume: nothing left
    sim.set_headroom_work(f, ps(100), false);
    sim.run();
    CHECK(sim.end_time(a) == ps(100));
    CHECK(sim.start_time(b) == ps(160));
    CHECK(sim.end_time(b) == ps(235));
    CHECK(sim.end_time(c) == ps(330));
    CHECK(sim.start_time(d) == ps(1330));
    CHECK(sim.end_time(d) == ps(1390));
    CHECK(sim.end_time(plain) == ps(1400));
    CHECK(sim.end_time(e) == ps(1495));
    CHECK(sim.end_time(f) == ps(1595));
}

TEST_CASE("idle headroom: work split into tasks saves what one task standing for them saves", "[engine][headroom]") {
    // A fused unit is one task whose max saving is the sum of its pieces': the credit it takes is the same.
    for (const std::int64_t credit_idle : {10, 45, 200}) {
        auto run = [&](bool split) {
            Simulator sim;
            const StreamId s = sim.add_stream("gpu");
            const StreamId other = sim.add_stream("elsewhere");
            sim.set_idle_headroom(s, ps(60), 0.5);
            const TaskId rest = sim.add_compute(other, ps(credit_idle), 1);
            std::vector<TaskId> tasks;
            if (split) {
                for (int i = 0; i < 3; ++i) tasks.push_back(sim.add_compute(s, ps(100), 2));
                sim.set_headroom_work(tasks[0], ps(20), true);
                sim.set_headroom_work(tasks[1], ps(0), false);
                sim.set_headroom_work(tasks[2], ps(30), false);
            } else {
                tasks.push_back(sim.add_compute(s, ps(300), 2));
                sim.set_headroom_work(tasks[0], ps(50), true);
            }
            sim.add_dependency(rest, tasks[0]);
            sim.run();
            return sim.end_time(tasks.back());
        };
        CAPTURE(credit_idle);
        CHECK(run(true) == run(false));
        CHECK(run(false) == ps(credit_idle + 300 - std::min<std::int64_t>(50, credit_idle / 2)));
    }
}

TEST_CASE("idle headroom: a slowed stream's work is shortened first, then slowed", "[engine][headroom][interference]") {
    // As the interference test above, but a rest of 40 us before the task gave it 20 us of credit (accrual 0.5): its
    // work is 80 us at full speed, started at 40 us; a flow from 60 to 110 us halves it: 20 us of work before, 25
    // during, 35 after: ends at 145 us.
    Simulator sim;
    const StreamId compute = sim.add_stream("compute");
    const StreamId comm = sim.add_stream("comm");
    const StreamId other = sim.add_stream("elsewhere");
    const LinkId l = sim.add_link("l", bw(1e9));
    sim.slow_while_busy(comm, compute, 0.5);
    sim.set_idle_headroom(compute, us(30), 0.5);
    const TaskId rest = sim.add_compute(other, us(40), 1);
    const TaskId k = sim.add_compute(compute, us(100), 2);
    sim.add_dependency(rest, k);
    sim.set_headroom_work(k, us(25), true);
    const TaskId f = sim.add_transfer(comm, {{l, 1}}, Bytes(50'000), us(20), 3);
    sim.add_dependency(rest, f);
    sim.run();
    CHECK(sim.start_time(k) == us(40));
    CHECK(sim.end_time(f) == us(110));
    CHECK(sim.end_time(k) == us(145));
    // Nothing can be marked once the graph has run.
    Simulator late;
    const StreamId s = late.add_stream("gpu");
    late.set_idle_headroom(s, us(1), 1.0);
    const TaskId first = late.add_compute(s, us(1), 1);
    late.run();
    CHECK_THROWS_WITH(late.set_headroom_work(first, us(1), true), Catch::Contains("after run()"));
}

TEST_CASE("idle headroom: misuse throws SimulationError", "[engine][headroom][errors]") {
    Simulator sim;
    const StreamId s = sim.add_stream("gpu");
    const StreamId plain = sim.add_stream("plain");
    CHECK_THROWS_AS(sim.set_idle_headroom(s, ps(-1), 0.5), SimulationError);
    CHECK_THROWS_WITH(sim.set_idle_headroom(s, Time::from_ps((std::int64_t{1} << 62) + 1), 0.5),
                      Catch::Contains("[0, 2^62]"));
    CHECK_THROWS_AS(sim.set_idle_headroom(s, ps(10), -0.5), SimulationError);
    sim.set_idle_headroom(s, ps(10), 0.5);
    const TaskId t = sim.add_compute(plain, ps(10), 1);
    CHECK_THROWS_WITH(sim.set_headroom_work(t, ps(5), true), Catch::Contains("no idle headroom"));
    const TaskId u = sim.add_compute(s, ps(10), 2);
    CHECK_THROWS_WITH(sim.set_headroom_work(u, ps(-5), true), Catch::Contains("got -5 ps"));
    const TaskId x = sim.add_transfer(s, {}, Bytes(0), ps(5), 3);
    CHECK_THROWS_WITH(sim.set_headroom_work(x, ps(5), true), Catch::Contains("is a transfer"));
}
