// The engine's future events: a radix heap over the 128-bit key (time in picoseconds, sequence number).
//
// Simulated time never goes back and every event is scheduled at or after the current instant with a sequence
// number larger than any before it, so the keys taken out never decrease: a monotone priority queue suffices. A radix
// heap keeps the last key taken out and files each event in the bucket of the highest bit where its key differs
// from it (129 buckets: equal, 64 for the sequence number, 64 for the time). Adding is a bit scan and an append;
// taking out the smallest empties bucket 0, or else finds the lowest non-empty bucket, takes its smallest key as
// the new last one and refiles that bucket's events into lower buckets (each event moves down at most once per bit
// level, in practice a few times). Unlike a comparison heap it has no data-dependent branches on the way in and
// reads and writes its buckets sequentially. Keys are unique (the sequence number), so the order is total and the
// same as the (time, sequence) order of a comparison heap: results do not depend on the queue.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace strata::engine::detail {

/// An event: `key` is its sequence number * 4 + its kind (which orders equal times by insertion); `target`,
/// `version` and `slot` are the simulator's.
struct Event {
    std::int64_t time;
    std::uint64_t key;
    std::uint32_t target;
    std::uint32_t version;
    std::uint32_t slot;
    std::uint32_t unused = 0;
};

/// (time, key) order: whether `a` comes after `b`.
inline bool later(const Event& a, const Event& b) { return a.time != b.time ? a.time > b.time : a.key > b.key; }

class RadixEventQueue {
public:
    [[nodiscard]] bool empty() const { return count_ == 0; }
    [[nodiscard]] std::size_t size() const { return count_; }

    /// Adds an event no earlier, in (time, key) order, than the last one taken out.
    void push(const Event& ev) {
        file(ev);
        ++count_;
    }

    /// Takes out the earliest event (the queue must not be empty).
    Event pop() {
        if (buckets_[0].empty()) refill_bucket0();
        const Event top = buckets_[0].back();
        buckets_[0].pop_back();
        if (buckets_[0].empty()) occupied_[0] &= ~std::uint64_t{1};
        --count_;
        return top;
    }

private:
    static constexpr int kBuckets = 129;

    [[nodiscard]] int bucket_of(const Event& ev) const {
        const auto time_diff = static_cast<std::uint64_t>(ev.time ^ last_time_);
        if (time_diff != 0) return 128 - __builtin_clzll(time_diff);  // 65 .. 128
        const std::uint64_t key_diff = ev.key ^ last_key_;
        if (key_diff != 0) return 64 - __builtin_clzll(key_diff);     // 1 .. 64
        return 0;
    }
    void file(const Event& ev) {
        const int b = bucket_of(ev);
        buckets_[static_cast<std::size_t>(b)].push_back(ev);
        occupied_[static_cast<std::size_t>(b >> 6)] |= std::uint64_t{1} << (b & 63);
    }
    /// Bucket 0 is empty: the lowest non-empty bucket's smallest key becomes the last key and its events are refiled
    /// below it (the smallest into bucket 0).
    void refill_bucket0() {
        int b = -1;
        for (std::size_t w = 0; w < occupied_.size(); ++w) {
            if (occupied_[w] != 0) {
                b = static_cast<int>(w * 64) + __builtin_ctzll(occupied_[w]);
                break;
            }
        }
        std::vector<Event>& from = buckets_[static_cast<std::size_t>(b)];
        std::size_t best = 0;
        for (std::size_t i = 1; i < from.size(); ++i)
            if (later(from[best], from[i])) best = i;
        last_time_ = from[best].time;
        last_key_ = from[best].key;
        occupied_[static_cast<std::size_t>(b >> 6)] &= ~(std::uint64_t{1} << (b & 63));
        scratch_.swap(from);
        for (const Event& ev : scratch_) file(ev);
        scratch_.clear();
    }

    std::array<std::vector<Event>, kBuckets> buckets_{};
    std::array<std::uint64_t, 3> occupied_{};  ///< bit b: bucket b holds events
    std::vector<Event> scratch_;
    std::int64_t last_time_ = 0;
    std::uint64_t last_key_ = 0;
    std::size_t count_ = 0;
};

}  // namespace strata::engine::detail
