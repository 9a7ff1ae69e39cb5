// Strong unit types used across strata: time in integer picoseconds, bytes, FLOPs.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace strata {

/// A point or span of simulated time, held as integer picoseconds so that event ordering is exact
/// and the same scenario always produces byte-identical output.
class Time {
public:
    constexpr Time() = default;
    static constexpr Time from_ps(std::int64_t ps) { return Time(ps); }
    static constexpr Time from_ns(double ns) { return Time(round_ps(ns * 1e3)); }
    static constexpr Time from_us(double us) { return Time(round_ps(us * 1e6)); }
    static constexpr Time from_ms(double ms) { return Time(round_ps(ms * 1e9)); }
    static constexpr Time from_seconds(double s) { return Time(round_ps(s * 1e12)); }
    static constexpr Time zero() { return Time(0); }
    static constexpr Time max() { return Time(std::numeric_limits<std::int64_t>::max()); }

    [[nodiscard]] constexpr std::int64_t ps() const { return ps_; }
    [[nodiscard]] constexpr double us() const { return static_cast<double>(ps_) * 1e-6; }
    [[nodiscard]] constexpr double ms() const { return static_cast<double>(ps_) * 1e-9; }
    [[nodiscard]] constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }

    constexpr Time& operator+=(Time o) { ps_ += o.ps_; return *this; }
    constexpr Time& operator-=(Time o) { ps_ -= o.ps_; return *this; }
    friend constexpr Time operator+(Time a, Time b) { return Time(a.ps_ + b.ps_); }
    friend constexpr Time operator-(Time a, Time b) { return Time(a.ps_ - b.ps_); }
    friend constexpr Time operator*(Time a, std::int64_t k) { return Time(a.ps_ * k); }
    friend constexpr auto operator<=>(Time, Time) = default;

private:
    constexpr explicit Time(std::int64_t ps) : ps_(ps) {}
    static constexpr std::int64_t round_ps(double ps) {
        return static_cast<std::int64_t>(ps >= 0 ? ps + 0.5 : ps - 0.5);
    }
    std::int64_t ps_ = 0;
};

/// A byte count (memory sizes, message sizes). Signed so that deltas are representable.
struct Bytes {
    std::int64_t value = 0;
    constexpr Bytes() = default;
    constexpr explicit Bytes(std::int64_t v) : value(v) {}
    [[nodiscard]] constexpr double gib() const { return static_cast<double>(value) / (1024.0 * 1024.0 * 1024.0); }
    [[nodiscard]] constexpr double gb() const { return static_cast<double>(value) * 1e-9; }
    constexpr Bytes& operator+=(Bytes o) { value += o.value; return *this; }
    constexpr Bytes& operator-=(Bytes o) { value -= o.value; return *this; }
    friend constexpr Bytes operator+(Bytes a, Bytes b) { return Bytes(a.value + b.value); }
    friend constexpr Bytes operator-(Bytes a, Bytes b) { return Bytes(a.value - b.value); }
    friend constexpr Bytes operator*(Bytes a, std::int64_t k) { return Bytes(a.value * k); }
    friend constexpr auto operator<=>(Bytes, Bytes) = default;
};

/// Floating-point operation count. Held as double: a 1T-parameter iteration is ~6e18 FLOPs.
struct Flops {
    double value = 0.0;
    constexpr Flops() = default;
    constexpr explicit Flops(double v) : value(v) {}
    constexpr Flops& operator+=(Flops o) { value += o.value; return *this; }
    friend constexpr Flops operator+(Flops a, Flops b) { return Flops(a.value + b.value); }
    friend constexpr Flops operator*(Flops a, double k) { return Flops(a.value * k); }
    friend constexpr auto operator<=>(Flops, Flops) = default;
};

/// Bandwidth in bytes per second.
struct BytesPerSecond {
    double value = 0.0;
};

/// Time to move `bytes` at `bw` (no latency).
inline Time transfer_time(Bytes bytes, BytesPerSecond bw) {
    return Time::from_seconds(static_cast<double>(bytes.value) / bw.value);
}

}  // namespace strata
