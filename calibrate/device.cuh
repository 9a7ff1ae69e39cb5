// Device-side helpers shared by the .cu files of strata-calibrate: 16-byte vectors of 16-bit values,
// conversions to and from float, and a dtype dispatch macro (bf16 -> __nv_bfloat16, fp16 -> __half).
#pragma once

#include "gpu.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace strata::calibrate {

template <class T>
struct alignas(16) Vec {
    T v[8];
};

__host__ __device__ __forceinline__ float f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ float f32(__half x) { return __half2float(x); }
template <class T> __host__ __device__ __forceinline__ T to(float f);
template <> __host__ __device__ __forceinline__ __nv_bfloat16 to<__nv_bfloat16>(float f) { return __float2bfloat16(f); }
template <> __host__ __device__ __forceinline__ __half to<__half>(float f) { return __float2half(f); }

/// A 16-bit value copied from the GPU, as float (host side).
inline float bits_to_float(DType dt, unsigned short bits) {
    if (dt == DType::bf16) {
        __nv_bfloat16_raw r;
        r.x = bits;
        return __bfloat162float(__nv_bfloat16(r));
    }
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

#define CAL_DISPATCH(dt, ...)                 \
    do {                                      \
        if ((dt) == DType::bf16) {            \
            using T = __nv_bfloat16;          \
            __VA_ARGS__;                      \
        } else {                              \
            using T = __half;                 \
            __VA_ARGS__;                      \
        }                                     \
    } while (0)

}  // namespace strata::calibrate
