// NCCL collectives on all local GPUs from one process (ncclCommInitAll, group calls), nccl-tests style:
// each op is a descriptor (buffer counts, enqueue, expected result, busbw factor). For every op: a
// correctness check on a small buffer (every rank's data = rank + 1), then the sizes 1 MiB .. 1 GiB,
// algbw = bytes / time and busbw = algbw * factor (factors in profile_writer.hpp), and an alpha-beta fit.
#include "comm.hpp"
#include "device.cuh"
#include "kernels.hpp"

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace strata::calibrate {
namespace {

struct Group {
    int n = 0;
    DType dt = DType::bf16;
    std::vector<ncclComm_t> comms;
    std::vector<cudaStream_t> streams;
    std::vector<DeviceBuffer> send, recv;
    ~Group() {
        const bool unwinding = std::uncaught_exceptions() > 0;   // see ~Layer in layer.cu: abort, never wait
        for (auto c : comms)
            if (c) (void)(unwinding ? ncclCommAbort(c) : ncclCommDestroy(c));
        for (int i = 0; i < static_cast<int>(streams.size()); ++i) {
            cudaSetDevice(i);
            cudaStreamDestroy(streams[i]);
        }
    }
    std::vector<StreamOn> on() const {
        std::vector<StreamOn> v;
        for (int i = 0; i < n; ++i) v.push_back({i, streams[i]});
        return v;
    }
    /// Enqueues `op` over `elems` elements (the full buffer: all-gather output, reduce-scatter input).
    void enqueue(CollOp op, std::size_t elems) {
        const ncclDataType_t ty = nccl_type(dt);
        CAL_NCCL(ncclGroupStart());
        for (int i = 0; i < n; ++i) {
            void *s = send[i].get(), *r = recv[i].get();
            switch (op) {
                case CollOp::all_reduce: CAL_NCCL(ncclAllReduce(s, r, elems, ty, ncclSum, comms[i], streams[i])); break;
                case CollOp::all_gather: CAL_NCCL(ncclAllGather(s, r, elems / n, ty, comms[i], streams[i])); break;
                case CollOp::reduce_scatter:
                    CAL_NCCL(ncclReduceScatter(s, r, elems / n, ty, ncclSum, comms[i], streams[i]));
                    break;
                case CollOp::send_recv:   // ring: send to the next rank, receive from the previous
                    CAL_NCCL(ncclSend(s, elems, ty, (i + 1) % n, comms[i], streams[i]));
                    CAL_NCCL(ncclRecv(r, elems, ty, (i + n - 1) % n, comms[i], streams[i]));
                    break;
            }
        }
        CAL_NCCL(ncclGroupEnd());
    }
    /// Elements rank i receives, and the value expected at receive index j when rank k sent k + 1.
    std::size_t recv_elems(CollOp op, std::size_t elems) const {
        return op == CollOp::reduce_scatter ? elems / n : elems;
    }
    double expected(CollOp op, int i, std::size_t j, std::size_t elems) const {
        switch (op) {
            case CollOp::all_reduce:
            case CollOp::reduce_scatter: return n * (n + 1) / 2.0;
            case CollOp::all_gather: return static_cast<double>(j / (elems / n) + 1);
            case CollOp::send_recv: return static_cast<double>((i + n - 1) % n + 1);
        }
        return 0;
    }
};

void check(Group& g, CollOp op) {
    const std::size_t elems = static_cast<std::size_t>(g.n) * 8192;
    for (int i = 0; i < g.n; ++i) {   // every element rank i sends is i + 1 (exact in 16 bits)
        DeviceGuard guard(i);
        kern::fill_uniform(g.dt, g.send[i].get(), elems, float(i + 1), float(i + 1), 1, g.streams[i]);
        CAL_CUDA(cudaMemsetAsync(g.recv[i].get(), 0, elems * kElem, g.streams[i]));
    }
    g.enqueue(op, elems);
    for (int i = 0; i < g.n; ++i) {
        DeviceGuard guard(i);
        CAL_CUDA(cudaStreamSynchronize(g.streams[i]));
        const std::size_t m = g.recv_elems(op, elems);
        std::vector<std::uint16_t> raw(m);
        CAL_CUDA(cudaMemcpy(raw.data(), g.recv[i].get(), m * kElem, cudaMemcpyDeviceToHost));
        for (std::size_t j = 0; j < m; ++j) {
            const float v = bits_to_float(g.dt, raw[j]);
            if (v != g.expected(op, i, j, elems))
                throw CheckFailed(std::string(coll_name(op)) + " on " + std::to_string(g.n) + " GPUs: rank " +
                                  std::to_string(i) + " element " + std::to_string(j) + " is " + std::to_string(v) +
                                  ", expected " + std::to_string(g.expected(op, i, j, elems)));
        }
    }
}

}  // namespace

void run_collectives(const Context& c, Profile& p) {
    if (c.gpus < 2) {
        progress("collectives need two or more GPUs; this run has 1: skipped (no collectives, no intra_node block)");
        p.intra_node_missing_comment =
            "Only 1 GPU was used, so NCCL collectives were not measured; use an analytical profile's intra_node "
            "block or re-run on a node with 2+ GPUs.";
        return;
    }
    Group g;
    g.n = c.gpus;
    g.dt = c.dtype;
    g.comms.resize(g.n);
    std::vector<int> devs(g.n);
    for (int i = 0; i < g.n; ++i) devs[i] = i;
    CAL_NCCL(ncclCommInitAll(g.comms.data(), g.n, devs.data()));
    for (int i = 0; i < g.n; ++i) {
        DeviceGuard guard(i);
        cudaStream_t s;
        CAL_CUDA(cudaStreamCreate(&s));
        g.streams.push_back(s);
    }
    // Buffers for the largest size that fits on every GPU (send and receive, each `max_bytes`).
    std::size_t max_bytes = std::size_t{c.quick ? 256u : 1024u} << 20;
    const std::size_t min_bytes = std::size_t{1} << 20;
    while (true) {
        try {
            g.send.clear();
            g.recv.clear();
            for (int i = 0; i < g.n; ++i) {
                g.send.emplace_back(max_bytes, i);
                g.recv.emplace_back(max_bytes, i);
            }
            break;
        } catch (const OutOfMemory& e) {
            p.skipped.push_back("collectives of " + gib(double(max_bytes)) + ": " + e.what());
            progress("skipped collectives of " + gib(double(max_bytes)) + ": " + e.what());
            if (max_bytes / 2 < min_bytes) return;
            max_bytes /= 2;
        }
    }
    for (int i = 0; i < g.n; ++i) {
        DeviceGuard guard(i);
        kern::fill_uniform(g.dt, g.send[i].get(), max_bytes / kElem, -1, 1, 3 + i, g.streams[i]);
    }
    const std::size_t step = c.quick ? 4 : 2;
    for (CollOp op : {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter, CollOp::send_recv}) {
        check(g, op);
        progress(std::string("check: ") + coll_name(op) + " on " + std::to_string(g.n) + " GPUs gives the expected data");
        std::vector<double> xs, ts;
        for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= step) {
            const std::size_t elems = bytes / kElem / g.n * g.n;   // divisible by the rank count
            const double us = time_us(g.on(), [&] { g.enqueue(op, elems); }, c.timing);
            const double full = double(elems * kElem);
            CollectiveResult r{coll_name(op), g.n, static_cast<std::int64_t>(elems * kElem), round_sig(us),
                               round_sig(algbw_gbps(full, us)), round_sig(algbw_gbps(full, us) * busbw_factor(op, g.n))};
            p.collectives.push_back(r);
            xs.push_back(full);
            ts.push_back(us);
            progress(std::string(coll_name(op)) + " " + gib(full) + ": " + std::to_string(r.time_us) + " us, algbw " +
                     std::to_string(r.algbw_gbps) + " GB/s, busbw " + std::to_string(r.busbw_gbps) + " GB/s");
        }
        const AlphaBeta fit = fit_alpha_beta(xs, ts);
        if (!fit.ok) {
            progress(std::string(coll_name(op)) + ": alpha-beta fit failed (non-increasing times)");
            continue;
        }
        p.collective_fits.push_back({coll_name(op), g.n, round_sig(fit.alpha_us), round_sig(fit.beta_bytes_per_s)});
        progress(std::string(coll_name(op)) + " fit: alpha " + std::to_string(fit.alpha_us) + " us, beta " +
                 std::to_string(fit.beta_bytes_per_s / 1e9) + " GB/s");
        if (op == CollOp::all_reduce) {
            IntraNodeBlock in;
            in.bus_bandwidth_bytes_per_s = round_sig(fit.beta_bytes_per_s * busbw_factor(op, g.n));
            in.step_latency_us = round_sig(fit.alpha_us / (2.0 * (g.n - 1)));
            in.comment = "from the all_reduce alpha-beta fit on " + std::to_string(g.n) + " GPUs";
            p.intra_node = in;
        }
    }
    if (!p.intra_node)
        p.intra_node_missing_comment = "the all_reduce alpha-beta fit failed; see measured.collectives";
}

}  // namespace strata::calibrate
