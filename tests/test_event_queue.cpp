// The engine's radix event queue (sim/engine/event_queue.hpp, private): under the engine's use (keys taken out never
// decrease; every key added is no earlier than the last one taken out) it gives events in exactly the (time, key)
// order of a comparison heap, ties in time broken by key.
#include "../sim/engine/event_queue.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <queue>
#include <random>
#include <vector>

using strata::engine::detail::Event;
using strata::engine::detail::later;
using strata::engine::detail::RadixEventQueue;

namespace {
struct Later {
    bool operator()(const Event& a, const Event& b) const { return later(a, b); }
};
}  // namespace

TEST_CASE("radix event queue: the order of a comparison heap, equal times by key", "[engine][event_queue]") {
    std::mt19937_64 rng(7);
    for (const std::int64_t spread : {std::int64_t{0}, std::int64_t{3}, std::int64_t{1} << 20, std::int64_t{1} << 40}) {
        INFO("time spread " << spread);
        RadixEventQueue q;
        std::priority_queue<Event, std::vector<Event>, Later> ref;
        std::uint64_t seq = 0;
        std::int64_t now = 0;
        auto add = [&] {
            const std::int64_t dt = spread == 0 ? 0 : static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(spread));
            const Event ev{now + dt, seq++ * 4 + (rng() % 3), static_cast<std::uint32_t>(seq), 0, 0};
            q.push(ev);
            ref.push(ev);
        };
        for (int i = 0; i < 50; ++i) add();
        std::size_t taken = 0;
        while (!ref.empty()) {
            REQUIRE(q.size() == ref.size());
            const Event a = q.pop();
            const Event b = ref.top();
            ref.pop();
            REQUIRE(a.time == b.time);
            REQUIRE(a.key == b.key);
            REQUIRE(a.target == b.target);
            now = a.time;  // as the simulator: later events are scheduled from the current instant on
            if (++taken < 20000) {
                const int more = static_cast<int>(rng() % 3);  // the queue grows, then drains
                for (int k = 0; k < more; ++k) add();
            }
        }
        CHECK(q.empty());
    }
}
