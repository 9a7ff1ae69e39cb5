// What a collective's kernels take from the compute beside them (see include/strata/cost.hpp): the SMs each holds
// (NCCL's channels, a userbuffers kernel's CTAs, NCCL's point-to-point channels for the context-parallel ring), the
// speed each kind of kernel keeps beside them (measured on an H100), and the pair's time.
#include "strata/cost.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace strata {

double sm_share_speed(const DeviceProfile& p, double sms) {
    if (p.sm_count <= 0) return 1.0;
    return 1.0 - std::min(0.9, sms / double(p.sm_count));
}

namespace {

/// 1 / slowdown interpolated linearly in sms from (0, 1) through the table `t`, past its last entry scaled by the
/// share model from there; the share without a table.
double held_speed(const DeviceProfile& p, const std::vector<MeasuredSmsHeld>& t, double sms, double waves) {
    if (p.sm_count <= 0 || sms <= 0) return 1.0;
    const auto share = [&](double k) { return sm_share_speed(p, k); };
    if (t.empty()) return share(sms);
    double k0 = 0, s0 = 1.0;  // slowdown 1 with no SM held
    for (const MeasuredSmsHeld& e : t) {
        const double se = e.at(waves);
        if (sms <= e.sms) return 1.0 / (s0 + (se - s0) * (sms - k0) / (double(e.sms) - k0));
        k0 = e.sms;
        s0 = se;
    }
    // Past the table: the last measured speed, less the further share of the SMs held.
    return std::max(0.1, share(sms) / share(k0) / s0);
}

}  // namespace

double speed_with_sms_held(const DeviceProfile& p, double sms, double waves) {
    return held_speed(p, p.measured_sms_held, sms, waves);
}

double attention_speed_with_sms_held(const DeviceProfile& p, double sms, bool flash2) {
    return flash2 ? sm_share_speed(p, sms) : held_speed(p, p.measured_attention_sms_held, sms, 0);
}

int CostModel::sms_held(const TpCollective& c) const {
    switch (c.engine) {
        case CommEngine::nccl:
            return profile_.nccl_channels;
        case CommEngine::userbuffers:
            return c.sms;
        case CommEngine::copy_engine:
            return 0;
    }
    return 0;
}

// NCCL's point-to-point channels (one SM each), read in NCCL 2.18-2.26 (src/graph/paths.cc ncclTopoGetNchannels and
// ncclTopoComputeP2pChannels, src/enqueue.cc): to a peer on another node 2 channels (NCCL_NCHANNELS_PER_NET_PEER
// unset: 2 per NIC, one NIC per GPU on a DGX); to a peer over NVLink the communicator's channels, rounded up to a power
// of two (all of them: 2 per NVLink, 18 on an H100, exceed 32), of which a send or receive starts on half (a 2-rank
// communicator: nChannelsMin halves while nChannelsMin x nRanks exceeds them) and doubles while each channel's part
// exceeds 32 of NCCL's 512 KiB NVLink chunks (calcP2pChunkSize, NCCL_P2P_NVL_CHUNKSIZE).
constexpr int kNcclP2pChannelsPerNetPeer = 2;
constexpr std::int64_t kNcclP2pNvlChunkMax = std::int64_t{32} * 512 * 1024;

int CostModel::context_ring_sms(std::span<const int> ring_gpus, int gpus_per_node, Bytes message) const {
    const auto c = static_cast<std::int64_t>(ring_gpus.size());
    if (c <= 1 || profile_.nccl_channels <= 0) return 0;
    const std::int64_t step = message.value / c;  // one GPU's keys and values, moved at each step
    const auto channels = [&](int a, int b) {
        if (gpus_per_node <= 0 || a / gpus_per_node != b / gpus_per_node) return kNcclP2pChannelsPerNetPeer;
        int all = 1;
        while (all < profile_.nccl_channels)
            all *= 2;
        int ch = std::max(all / 2, 1);
        while (ch < all && step / ch > kNcclP2pNvlChunkMax)
            ch *= 2;
        return ch;
    };
    // Transformer Engine's AttnFuncWithCP (flash_attn_p2p_communicate; bfe21c3d and v2.4) batches the send and the
    // receive into one group with two ranks (cp_size 2, or NVTE_BATCH_MHA_P2P_COMM set): one kernel on the context
    // group's communicator, each channel carrying both. With more it calls isend and irecv apart, and PyTorch's
    // ProcessGroupNCCL runs an unbatched point-to-point on a communicator of its own two ranks (pointToPoint,
    // getKeySendRecv, created lazily): a send kernel and a receive kernel on two streams, concurrently.
    int most = 0;
    for (std::int64_t j = 0; j < c; ++j) {
        const int me = ring_gpus[static_cast<std::size_t>(j)];
        const int next = ring_gpus[static_cast<std::size_t>((j + 1) % c)];
        const int prev = ring_gpus[static_cast<std::size_t>((j + c - 1) % c)];
        const int sms = c == 2 ? channels(me, next) : channels(me, next) + channels(prev, me);
        most = std::max(most, sms);
    }
    return std::min(most, std::max(profile_.sm_count - 1, 0));
}

namespace {

/// Calls `fn` with every distinct placement of the job's context-parallel rings, each as its GPUs in ring order. Ring
/// (b, i), b = stage x data + replica, starts at GPU b x c x t + i, its GPUs t apart: where it sits in its nodes
/// repeats with b within gpus_per_node blocks, so those rings (whole nodes) are every ring's placement.
template <class Fn>
void for_each_ring(const ExecutionSpec& e, int gpus_per_node, Fn&& fn) {
    const int blocks = e.pipeline * e.data, distinct = gpus_per_node > 0 ? std::min(blocks, gpus_per_node) : 1;
    std::vector<int> ring(static_cast<std::size_t>(e.context));
    for (int b = 0; b < distinct; ++b)
        for (int i = 0; i < e.tensor; ++i) {
            for (int j = 0; j < e.context; ++j)
                ring[static_cast<std::size_t>(j)] = e.global_rank(b / e.data, b % e.data, j, i);
            fn(std::span<const int>(ring));
        }
}

}  // namespace

int CostModel::context_ring_sms(const ExecutionSpec& e, int gpus_per_node, Bytes message) const {
    if (e.context <= 1) return 0;
    int most = 0;
    for_each_ring(e, gpus_per_node, [&](std::span<const int> ring) {
        most = std::max(most, context_ring_sms(ring, gpus_per_node, message));
    });
    return most;
}

std::function<int(Bytes)> CostModel::context_ring_sms(const ExecutionSpec& e, int gpus_per_node) const {
    return [this, &e, gpus_per_node](Bytes message) { return context_ring_sms(e, gpus_per_node, message); };
}

ContextRing CostModel::context_ring(const ExecutionSpec& e, const SystemSpec& system) const {
    ContextRing ring{e.context, context_ring_sms(e, system.gpus_per_node), BytesPerSecond{}};
    const int per_node = system.gpus_per_node;
    if (e.context <= 1 || per_node <= 0) return ring;
    // The rings' steps that cross nodes, counted per NIC: a step to another node leaves by the rail of its destination
    // (dst_local % rails, NCCL's PXN, as the fabric routes it) and arrives on the same rail.
    const int rails = std::max(system.network.rails, 1);
    std::map<std::pair<int, int>, int> out, in;  // (node, rail) -> steps sent / received through that NIC at once
    int most = 0;
    for_each_ring(e, per_node, [&](std::span<const int> gpus) {
        for (std::size_t j = 0; j < gpus.size(); ++j) {
            const int me = gpus[j], next = gpus[(j + 1) % gpus.size()];
            if (me / per_node == next / per_node) continue;
            const int rail = (next % per_node) % rails;
            most = std::max({most, ++out[{me / per_node, rail}], ++in[{next / per_node, rail}]});
        }
    });
    if (most > 0) ring.across_nodes = BytesPerSecond{system.network.nic_bandwidth.value / double(most)};
    return ring;
}

Time CostModel::collective_time(const TpCollective& c, int ranks, const ContextRing& ring) const {
    return c.context_group ? context_collective(ring, c.kind, c.message) : tp_collective(c.kind, ranks, c.message);
}

Time CostModel::context_collective(const ContextRing& ring, CollectiveKind kind, Bytes message) const {
    const Time inside = tp_collective(kind, ring.ranks, message);
    if (ring.across_nodes.value <= 0 || ring.ranks <= 1) return inside;
    // A ring step's whole buffer share (c - 1 of the c steps) passes each GPU's NIC share.
    const double bytes = double(message.value) * double(ring.ranks - 1) / double(ring.ranks);
    return std::max(inside, Time::from_seconds(bytes / ring.across_nodes.value));
}

double CostModel::comm_sm_fraction(int sms) const {
    if (profile_.sm_count <= 0 || sms <= 0) return 0;
    return 1.0 - speed_with_sms_held(profile_, sms);
}

double CostModel::comm_sm_fraction() const {
    return comm_sm_fraction(profile_.nccl_channels);
}

double CostModel::speed_beside(const Kernel& k, int sms) const {
    if (profile_.sm_count <= 0 || sms <= 0) return 1.0;
    // Fused attention by its own table where the profile has one (below); without a measured table every other kernel
    // loses the held share of the SMs.
    if (k.is_fused_attention()) return attention_speed_with_sms_held(profile_, sms, k.flash2);
    if (profile_.measured_sms_held.empty()) return sm_share_speed(profile_, sms);
    if (k.is_gemm()) {
        // A GEMM whose output tiles all fit on the SMs the collective leaves loses nothing to it; otherwise the
        // table at its waves (at least one: the line is not extrapolated below a full wave).
        const double waves = gemm_waves(k.gemm);
        const double tiles = waves * double(gemm_sms(k.gemm));
        return tiles <= double(profile_.sm_count - sms) ? 1.0
                                                        : speed_with_sms_held(profile_, sms, std::max(waves, 1.0));
    }
    // Measured on the H100 beside a kernel holding 2, 16 and 32 SMs (calibrate/torch_tp_overlap.py --kinds,
    // calibrate/results/2026-11-26b/h100-kinds.json): cuDNN's fused attention loses less than the held share (1.075
    // at 16 SMs where the share is 1.138), at the profile's measured.attention_sms_held where it has them
    // (FlashAttention-2's kernels, unmeasured, at the share); bandwidth-bound kernels (add, copy, layer norm, GeLU)
    // lose nothing up to 32 SMs held, as they need fewer SMs than the GPU has to keep HBM busy.
    // Measured up to the table's last entry (32 SMs on the H100): past it, the further share of the SMs.
    const int measured = profile_.measured_sms_held.back().sms;
    return sms <= measured ? 1.0 : sm_share_speed(profile_, sms) / sm_share_speed(profile_, measured);
}

double CostModel::step_sm_fraction(const Step& compute, int sms) const {
    if (profile_.sm_count <= 0 || sms <= 0) return 0;
    double weighted = 0, total = 0;
    for (const Kernel& k : compute.kernels) {
        const double t = kernel(k).time.seconds();
        weighted += t * (1.0 - speed_beside(k, sms));
        total += t;
    }
    return total > 0 ? weighted / total : comm_sm_fraction(sms);
}

Time CostModel::slowed_compute(Time compute, Time collective, double f) {
    // The kernels run at (1 - f) speed while the collective holds its SMs: all of them, if they end within it
    // (compute / (1 - f)); else the collective's length costs an extra f times that.
    if (f <= 0) return compute;
    const double slowed = compute.seconds() / (1.0 - f);
    if (slowed <= collective.seconds()) return Time::from_seconds(slowed);
    return compute + Time::from_seconds(f * collective.seconds());
}

Time CostModel::ring_tail(const TpCollective& c, const Step& compute) const {
    if (c.engine != CommEngine::copy_engine) return Time::zero();
    for (const Kernel& k : compute.kernels)
        if (k.gemm.chunks > 1 && k.is_gemm()) return Time::from_ps(kernel(k).time.ps() / k.gemm.chunk_parts());
    return Time::zero();
}

}  // namespace strata
