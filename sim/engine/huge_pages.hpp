// An allocator for the engine's big arrays (task slots, streams, links, flows): blocks of 2 MiB or more are mapped
// on their own, aligned to 2 MiB and marked for transparent huge pages (madvise MADV_HUGEPAGE), so that the event
// loop's random reads across hundreds of MiB of state miss the TLB far less (Linux with THP in "madvise" mode, the
// common default; elsewhere, or if the kernel refuses, ordinary pages). Smaller blocks come from operator new.
// Only where memory lives changes: no result depends on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace strata::engine::detail {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

/// Maps `bytes` (a multiple of kHugePage) at a kHugePage-aligned address and asks for huge pages; nullptr if the
/// mapping fails.
inline void* map_huge(std::size_t bytes) {
#if defined(__linux__)
    // Over-map by one huge page and trim both ends to reach an aligned start.
    const std::size_t span = bytes + kHugePage;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = (start + kHugePage - 1) & ~(std::uintptr_t{kHugePage} - 1);
    if (aligned > start) munmap(raw, aligned - start);
    const std::uintptr_t end = start + span;
    if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
    auto* p = reinterpret_cast<void*>(aligned);
    (void)madvise(p, bytes, MADV_HUGEPAGE);  // a hint: ordinary pages if refused
    return p;
#else
    (void)bytes;
    return nullptr;
#endif
}

template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}  // NOLINT(google-explicit-constructor)

    /// The bytes mapped for `n` elements on huge pages, or 0 for a block that comes from operator new.
    static std::size_t mapped_bytes(std::size_t n) {
#if defined(__linux__)
        const std::size_t bytes = n * sizeof(T);
        return bytes < kHugePage ? 0 : (bytes + kHugePage - 1) & ~(kHugePage - 1);
#else
        (void)n;
        return 0;
#endif
    }
    T* allocate(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        if (const std::size_t bytes = mapped_bytes(n); bytes != 0) {
            if (void* p = map_huge(bytes)) return static_cast<T*>(p);
            throw std::bad_alloc();
        }
        return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{alignof(T)}));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (const std::size_t bytes = mapped_bytes(n); bytes != 0) {
#if defined(__linux__)
            munmap(p, bytes);
#endif
            return;
        }
        ::operator delete(p, std::align_val_t{alignof(T)});
    }
    template <class U>
    bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept { return true; }
};

/// A vector whose storage is on huge pages once it reaches 2 MiB.
template <class T>
using BigVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace strata::engine::detail
