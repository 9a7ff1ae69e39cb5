// parallel_for: every index once, results in place, exceptions rethrown on the caller.
#include "strata/parallel.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

TEST_CASE("parallel_for runs every index exactly once and reports progress") {
    std::vector<int> hits(1000, 0);
    std::atomic<std::size_t> last{0};
    strata::parallel_for(hits.size(), 3, [&](std::size_t i) { hits[i] += 1; },
                         [&](std::size_t done, std::size_t total) {
                             CHECK(total == 1000);
                             std::size_t prev = last.load();
                             while (done > prev && !last.compare_exchange_weak(prev, done)) {}
                         });
    for (int h : hits) CHECK(h == 1);
    CHECK(last.load() == 1000);
}

TEST_CASE("parallel_for finishes the other jobs and rethrows the lowest failing index") {
    std::vector<int> hits(50, 0);
    CHECK_THROWS_WITH(strata::parallel_for(hits.size(), 2,
                                           [&](std::size_t i) {
                                               hits[i] = 1;
                                               if (i == 7 || i == 31) throw std::runtime_error("job " + std::to_string(i));
                                           }),
                      "job 7");
    for (int h : hits) CHECK(h == 1);
}
