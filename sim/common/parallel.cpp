// parallel_for (see include/strata/parallel.hpp).
#include "strata/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace strata {

void parallel_for(std::size_t n, unsigned jobs, const std::function<void(std::size_t)>& fn,
                  const std::function<void(std::size_t, std::size_t)>& done) {
    if (n == 0) return;
    const unsigned wanted = jobs > 0 ? jobs : std::max(1u, std::thread::hardware_concurrency());
    const unsigned threads = static_cast<unsigned>(std::min<std::size_t>(wanted, n));
    std::atomic<std::size_t> next{0}, completed{0};
    std::vector<std::exception_ptr> errors(n);
    auto worker = [&] {
        for (std::size_t i = next++; i < n; i = next++) {
            try {
                fn(i);
            } catch (...) {
                errors[i] = std::current_exception();
            }
            const std::size_t c = ++completed;
            if (done) done(c, n);
        }
    };
    std::vector<std::thread> pool;
    for (unsigned j = 0; j < threads; ++j) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace strata
