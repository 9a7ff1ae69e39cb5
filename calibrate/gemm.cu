// Row-major GEMMs on cuBLASLt / cuBLAS (see gemm.hpp). cuBLAS is column-major: the row-major product
// C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, i.e. the operands are swapped
// and m and n exchanged; a row-major buffer read column-major is its transpose, so no data moves.
#include "gemm.hpp"

#include "device.cuh"

#include <utility>

namespace strata::calibrate {

void cublas_check(cublasStatus_t s, const char* what, const char* file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    if (s == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(std::string(what) + ": cuBLAS allocation failed");
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cublasGetStatusName(s));
}

GemmDesc::GemmDesc(std::string nm, std::int64_t m_, std::int64_t n_, std::int64_t k_, bool ta_, bool tb_, int batch_)
    : name(std::move(nm)), m(m_), n(n_), k(k_), batch(batch_), ta(ta_), tb(tb_) {
    packed();
}

GemmDesc& GemmDesc::packed() {
    if (!lda) lda = ta ? m : k;
    if (!ldb) ldb = tb ? k : n;
    if (!ldc) ldc = n;
    if (!stride_a) stride_a = (ta ? k : m) * lda;
    if (!stride_b) stride_b = (tb ? n : k) * ldb;
    if (!stride_c) stride_c = m * ldc;
    return *this;
}

std::size_t GemmDesc::a_elems() const { return static_cast<std::size_t>((batch - 1) * stride_a + (ta ? k : m) * lda); }
std::size_t GemmDesc::b_elems() const { return static_cast<std::size_t>((batch - 1) * stride_b + (tb ? n : k) * ldb); }
std::size_t GemmDesc::c_elems() const { return static_cast<std::size_t>((batch - 1) * stride_c + m * ldc); }

namespace {
constexpr std::size_t kWorkspace = std::size_t{32} << 20;
cudaDataType_t cuda_type(DType dt) { return dt == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }
}  // namespace

Blas::Blas(int dev) : device(dev) {
    DeviceGuard g(dev);
    CAL_CUBLAS(cublasCreate(&handle));
    CAL_CUBLAS(cublasLtCreate(&lt));
    workspace = DeviceBuffer(kWorkspace, dev);
}

Blas::~Blas() {
    DeviceGuard g(device);
    if (lt) cublasLtDestroy(lt);
    if (handle) cublasDestroy(handle);
}

Gemm::Gemm(Blas& blas, DType dt, GemmDesc d) : blas_(blas), dt_(dt), d_(std::move(d)) {
    d_.packed();
    if (d_.batch != 1) return;   // strided-batched path
    DeviceGuard g(blas_.device);
    const cudaDataType_t t = cuda_type(dt);
    const cublasOperation_t opa = d_.tb ? CUBLAS_OP_T : CUBLAS_OP_N;   // cuBLAS "A" is our B
    const cublasOperation_t opb = d_.ta ? CUBLAS_OP_T : CUBLAS_OP_N;   // cuBLAS "B" is our A
    CAL_CUBLAS(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CAL_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CAL_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    // Column-major (rows, cols, ld) of the stored matrices.
    const bool na = opa == CUBLAS_OP_N, nb = opb == CUBLAS_OP_N;
    CAL_CUBLAS(cublasLtMatrixLayoutCreate(&la_, t, na ? d_.n : d_.k, na ? d_.k : d_.n, d_.ldb));
    CAL_CUBLAS(cublasLtMatrixLayoutCreate(&lb_, t, nb ? d_.k : d_.m, nb ? d_.m : d_.k, d_.lda));
    CAL_CUBLAS(cublasLtMatrixLayoutCreate(&lc_, t, d_.n, d_.m, d_.ldc));
    cublasLtMatmulPreference_t pref = nullptr;
    CAL_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t ws = blas_.workspace.bytes();
    CAL_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(blas_.lt, op_, la_, lb_, lc_, lc_, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        algo_ = result.algo;
        use_lt_ = true;
    }   // else: cublasGemmEx below
}

Gemm::~Gemm() {
    if (la_) cublasLtMatrixLayoutDestroy(la_);
    if (lb_) cublasLtMatrixLayoutDestroy(lb_);
    if (lc_) cublasLtMatrixLayoutDestroy(lc_);
    if (op_) cublasLtMatmulDescDestroy(op_);
}

void Gemm::run(const void* A, const void* B, void* C, cudaStream_t s, float alpha, float beta) const {
    if (use_lt_) {
        CAL_CUBLAS(cublasLtMatmul(blas_.lt, op_, &alpha, B, la_, A, lb_, &beta, C, lc_, C, lc_, &algo_,
                                  blas_.workspace.get(), blas_.workspace.bytes(), s));
        return;
    }
    const cudaDataType_t t = cuda_type(dt_);
    CAL_CUBLAS(cublasSetStream(blas_.handle, s));
    CAL_CUBLAS(cublasGemmStridedBatchedEx(blas_.handle, d_.tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          d_.ta ? CUBLAS_OP_T : CUBLAS_OP_N, d_.n, d_.m, d_.k, &alpha, B, t, d_.ldb,
                                          d_.stride_b, A, t, d_.lda, d_.stride_a, &beta, C, t, d_.ldc, d_.stride_c,
                                          d_.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

namespace {
// The kernel takes the descriptor by value; its std::string must not travel to the device.
struct PodDesc {
    std::int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c;
    bool ta, tb;
};
template <class T>
__global__ void ref_gemm_pod_k(const T* A, const T* B, float* C, PodDesc d) {
    const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x, i = blockIdx.y,
                       z = blockIdx.z;
    if (j >= d.n) return;
    const T* a = A + z * d.stride_a;
    const T* b = B + z * d.stride_b;
    float acc = 0.f;
    for (std::int64_t q = 0; q < d.k; ++q) {
        const float x = f32(d.ta ? a[q * d.lda + i] : a[i * d.lda + q]);
        const float y = f32(d.tb ? b[j * d.ldb + q] : b[q * d.ldb + j]);
        acc += x * y;
    }
    C[z * d.stride_c + i * d.ldc + j] = acc;
}
}  // namespace

void reference_gemm(DType dt, const GemmDesc& g, const void* A, const void* B, float* C, cudaStream_t s) {
    GemmDesc d = g;
    d.packed();
    const PodDesc p{d.m, d.n, d.k, d.lda, d.ldb, d.ldc, d.stride_a, d.stride_b, d.stride_c, d.ta, d.tb};
    const dim3 grid(static_cast<unsigned>((d.n + 127) / 128), static_cast<unsigned>(d.m),
                    static_cast<unsigned>(d.batch));
    CAL_DISPATCH(dt, ref_gemm_pod_k<T><<<grid, 128, 0, s>>>(static_cast<const T*>(A), static_cast<const T*>(B), C, p));
    CAL_CUDA(cudaGetLastError());
}

}  // namespace strata::calibrate
