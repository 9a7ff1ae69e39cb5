// GEMMs for strata-calibrate in row-major terms: C[m,n] = op(A)[m,k] * op(B)[k,n] (`batch` of them,
// strided), 16-bit inputs and output, fp32 accumulation (CUBLAS_COMPUTE_32F). Batch 1 runs through a
// cuBLASLt plan made once (heuristic algorithm, 32 MiB workspace); batched ones through
// cublasGemmStridedBatchedEx. Also a naive reference kernel for the correctness checks.
#pragma once

#include "gpu.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <string>

namespace strata::calibrate {

void cublas_check(cublasStatus_t s, const char* what, const char* file, int line);
#define CAL_CUBLAS(x) ::strata::calibrate::cublas_check((x), #x, __FILE__, __LINE__)

struct GemmDesc {
    std::string name;
    std::int64_t m = 0, n = 0, k = 0;
    int batch = 1;
    bool ta = false;   // A is stored [k, m] (op(A) = stored^T); otherwise [m, k]
    bool tb = false;   // B is stored [n, k]; otherwise [k, n]
    std::int64_t lda = 0, ldb = 0, ldc = 0;              // row strides; 0 = packed
    std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // batch strides; 0 = packed

    GemmDesc() = default;
    GemmDesc(std::string nm, std::int64_t m_, std::int64_t n_, std::int64_t k_, bool ta_ = false, bool tb_ = false,
             int batch_ = 1);
    GemmDesc& packed();                  // fills zero strides with packed ones
    double flops() const { return 2.0 * static_cast<double>(m) * n * k * batch; }
    std::size_t a_elems() const;         // elements the A buffer must hold
    std::size_t b_elems() const;
    std::size_t c_elems() const;
};

/// cuBLAS and cuBLASLt handles plus a workspace, for one GPU.
class Blas {
public:
    explicit Blas(int device);
    ~Blas();
    Blas(const Blas&) = delete;
    Blas& operator=(const Blas&) = delete;
    cublasHandle_t handle = nullptr;
    cublasLtHandle_t lt = nullptr;
    DeviceBuffer workspace;
    int device = 0;
};

/// One planned GEMM.
class Gemm {
public:
    Gemm(Blas& blas, DType dt, GemmDesc d);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;
    void run(const void* A, const void* B, void* C, cudaStream_t s, float alpha = 1.f, float beta = 0.f) const;
    const GemmDesc& desc() const { return d_; }

private:
    Blas& blas_;
    DType dt_;
    GemmDesc d_;
    cublasLtMatmulDesc_t op_ = nullptr;
    cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
    cublasLtMatmulAlgo_t algo_{};
    bool use_lt_ = false;
};

/// C (fp32, ldc/stride_c of `d`) = naive triple loop; for checks only.
void reference_gemm(DType dt, const GemmDesc& d, const void* A, const void* B, float* C, cudaStream_t s);

}  // namespace strata::calibrate
