// NCCL helpers shared by the collective benchmarks and the multi-GPU layer: error check and data type.
#pragma once

#include "gpu.hpp"

#include <nccl.h>

#include <string>

namespace strata::calibrate {

inline void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r == ncclSuccess) return;
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + ncclGetErrorString(r));
}
#define CAL_NCCL(x) ::strata::calibrate::nccl_check((x), #x, __FILE__, __LINE__)

inline ncclDataType_t nccl_type(DType dt) { return dt == DType::bf16 ? ncclBfloat16 : ncclHalf; }

}  // namespace strata::calibrate
