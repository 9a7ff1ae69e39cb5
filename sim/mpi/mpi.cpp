// The MPI runner (see include/strata/mpi.hpp): cases spread over the ranks of an MPI job.
//
// Protocol (MPI_COMM_WORLD): a worker (rank > 0) sends kRequest, then gets kAssign with a case index (-1: no
// more) and answers each case with kResult (index, failure bits, the result without its scenario: every rank
// has the scenarios), which asks for the next one too. Rank 0 serves requests on its main thread while a
// thread of its own runs cases from the same counter. Rank 0 then sends every result to every worker
// (kFinal), so all ranks return the same outcome. Waiting ranks poll (MPI_Iprobe and a short sleep) instead
// of blocking in MPI, whose blocking calls spin and would take a core from the ranks that simulate.
#include "strata/mpi.hpp"

#include "strata/errors.hpp"

#include "launcher.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

namespace strata::mpi {

bool built_with_mpi() {
    return true;
}

namespace {

enum Tag : int { kRequest = 1, kAssign = 2, kResult = 3, kFinal = 4 };

class Writer {
public:
    template <class T>
    requires std::is_trivially_copyable_v<T>
    void put(const T& v) { append(&v, sizeof(T)); }
    void put(const std::string& s) {
        put(std::uint64_t(s.size()));
        append(s.data(), s.size());
    }
    std::vector<char> bytes;

private:
    void append(const void* p, std::size_t n) {
        if (n == 0) return;
        const std::size_t at = bytes.size();
        bytes.resize(at + n);
        std::memcpy(bytes.data() + at, p, n);
    }
};

class Reader {
public:
    explicit Reader(const std::vector<char>& b) : bytes_(b) {}
    template <class T>
    requires std::is_trivially_copyable_v<T>
    void get(T& v) {
        need(sizeof(T));
        std::memcpy(&v, bytes_.data() + at_, sizeof(T));
        at_ += sizeof(T);
    }
    void get(std::string& s) {
        std::uint64_t n = 0;
        get(n);
        need(n);
        s.assign(bytes_.data() + at_, n);
        at_ += n;
    }

private:
    void need(std::size_t n) const {
        if (at_ + n > bytes_.size()) throw Error("mpi: a result message is shorter than its contents");
    }
    const std::vector<char>& bytes_;
    std::size_t at_ = 0;
};

// Everything of a CaseResult that evaluate_case computes (the scenario is every rank's already).
template <class IO, class Stage>
void stage_fields(IO& io, Stage& s) {
    for (auto* b : {&s.weights, &s.gradients, &s.optimizer, &s.activations_layers, &s.activations_embedding,
                    &s.activations_output, &s.recompute_workspace, &s.attention_workspace, &s.reserved})
        io(*b);
    io(s.stage);
    io(s.units_in_flight);
}

template <class IO, class Result>
void case_fields(IO& io, Result& r) {
    auto& m = r.memory;
    io(m.activation_per_layer);
    io(m.activation_first_stage);
    io(m.activation_first_stage_layers);
    stage_fields(io, m.first_stage);
    stage_fields(io, m.peak_stage);
    io(m.capacity);
    io(r.layer.forward_ms);
    io(r.layer.backward_ms);
    io(r.layer.cost_source);
    io(r.layer.compute_speed);
    io(r.layer.compute_speed_fp8);
    io(r.layer.sm_clock_mhz);
}

// The fixed-size part of an IterationResult (stage_busy_s travels after it with its length).
template <class IO, class It>
void iteration_fields(IO& io, It& it) {
    static_assert(std::is_trivially_copyable_v<Time> && std::is_trivially_copyable_v<Bytes>);
    io(it.iteration_time);
    for (auto* t : {&it.exposed_comm.tensor, &it.exposed_comm.pipeline, &it.exposed_comm.data_parallel, &it.host_gap})
        io(*t);
    for (auto* v : {&it.iteration_time_s, &it.mfu, &it.hfu, &it.bubble_fraction, &it.exposed_comm_s,
                    &it.wall_s, &it.slowest_group_factor})
        io(*v);
    io(it.peak_memory);
    io(it.peak_memory_stage);
    io(it.oom);
    io(it.oom_detail);
    io(it.first_stage_activation_peak);
    io(it.events);
    io(it.tasks);
    io(it.representative_replicas);
}

void write_result(Writer& w, const CaseResult& r) {
    auto io = [&](const auto& v) { w.put(v); };
    case_fields(io, r);
    w.put(std::uint64_t(r.memory.stages.size()));
    for (const StageMemory& s : r.memory.stages)
        stage_fields(io, s);
    w.put(r.error.has_value());
    if (r.error) w.put(*r.error);
    w.put(r.failure);
    w.put(r.iteration.has_value());
    if (!r.iteration) return;
    const IterationResult& it = *r.iteration;
    iteration_fields(io, it);
    w.put(std::uint64_t(it.stage_busy_s.size()));
    for (double v : it.stage_busy_s)
        w.put(v);
}

void read_result(Reader& rd, CaseResult& r) {
    auto io = [&](auto& v) { rd.get(v); };
    case_fields(io, r);
    std::uint64_t stages = 0;
    rd.get(stages);
    r.memory.stages.resize(stages);
    for (StageMemory& s : r.memory.stages)
        stage_fields(io, s);
    bool has = false;
    rd.get(has);
    if (has) {
        r.error.emplace();
        rd.get(*r.error);
    }
    rd.get(r.failure);
    rd.get(has);
    if (!has) return;
    IterationResult& it = r.iteration.emplace();
    iteration_fields(io, it);
    std::uint64_t n = 0;
    rd.get(n);
    it.stage_busy_s.resize(n);
    for (double& v : it.stage_busy_s)
        rd.get(v);
}

void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw Error(std::string("mpi: ") + what + " failed");
}

/// Waits for a message without spinning in MPI; returns its status. Each MPI_Iprobe runs Open MPI's progress
/// engine (tens of microseconds): polling backs off from 50 us to 2 ms while nothing comes, which keeps the
/// serving thread of rank 0 near 1% of a core (at 200 us it took two thirds of one) for at most 2 ms of delay
/// per case.
MPI_Status wait_for(int source, int tag) {
    MPI_Status st{};
    auto pause = std::chrono::microseconds(50);
    for (;;) {
        int flag = 0;
        check(MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st), "MPI_Iprobe");
        if (flag) return st;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
}

std::vector<char> receive_bytes(const MPI_Status& probed) {
    int count = 0;
    check(MPI_Get_count(&probed, MPI_BYTE, &count), "MPI_Get_count");
    std::vector<char> bytes(static_cast<std::size_t>(count));
    check(MPI_Recv(bytes.data(), count, MPI_BYTE, probed.MPI_SOURCE, probed.MPI_TAG, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    return bytes;
}

void send_bytes(const std::vector<char>& bytes, int dest, int tag) {
    if (bytes.size() > std::size_t(INT_MAX)) throw Error("mpi: a message of more than 2 GiB");
    check(MPI_Send(bytes.data(), int(bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
}

RunOutcome serve(const Session& session, const std::vector<Scenario>& scenarios, const CaseOptions& options,
                 const CaseProgress& progress) {
    const std::size_t n = scenarios.size();
    RunOutcome out;
    out.results.resize(n);
    std::atomic<std::size_t> next{0};
    std::atomic<int> failures{0};
    std::size_t completed = 0;
    std::mutex mu;
    auto finished = [&] {
        std::lock_guard<std::mutex> lock(mu);
        ++completed;
        if (progress) progress(completed, n);
    };
    out.cases_by_rank.assign(std::size_t(session.size()), 0);
    std::jthread local([&] {
        for (std::size_t i = next++; i < n; i = next++) {
            int f = 0;
            out.results[i] = evaluate_case(scenarios[i], options, &f);
            failures |= f;
            ++out.cases_by_rank[0];  // only this thread writes rank 0's count
            finished();
        }
    });
    int stopped = 0;
    while (stopped < session.size() - 1) {
        const MPI_Status st = wait_for(MPI_ANY_SOURCE, MPI_ANY_TAG);
        const std::vector<char> bytes = receive_bytes(st);
        if (st.MPI_TAG == kResult) {
            Reader rd(bytes);
            std::uint64_t i = 0;
            int f = 0;
            rd.get(i);
            rd.get(f);
            if (i >= n)
                throw Error("mpi: a result for case " + std::to_string(i) + " of " + std::to_string(n));
            out.results[i].scenario = scenarios[i];
            read_result(rd, out.results[i]);
            failures |= f;
            ++out.cases_by_rank[std::size_t(st.MPI_SOURCE)];
            finished();
        }
        const std::size_t i = next++;
        const std::int64_t assign = i < n ? std::int64_t(i) : -1;
        check(MPI_Send(&assign, 1, MPI_INT64_T, st.MPI_SOURCE, kAssign, MPI_COMM_WORLD), "MPI_Send");
        if (assign < 0) ++stopped;
    }
    local.join();  // cases_by_rank[0] is complete
    out.failures = failures;
    Writer all;
    all.put(out.failures);
    for (std::size_t c : out.cases_by_rank)
        all.put(std::uint64_t(c));
    for (const auto& r : out.results)
        write_result(all, r);
    for (int rank = 1; rank < session.size(); ++rank)
        send_bytes(all.bytes, rank, kFinal);
    return out;
}

RunOutcome work(int session_size, const std::vector<Scenario>& scenarios, const CaseOptions& options) {
    check(MPI_Send(nullptr, 0, MPI_BYTE, 0, kRequest, MPI_COMM_WORLD), "MPI_Send");
    for (;;) {
        wait_for(0, kAssign);
        std::int64_t i = -1;
        check(MPI_Recv(&i, 1, MPI_INT64_T, 0, kAssign, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        if (i < 0) break;
        int f = 0;
        const CaseResult r = evaluate_case(scenarios.at(std::size_t(i)), options, &f);
        Writer w;
        w.put(std::uint64_t(i));
        w.put(f);
        write_result(w, r);
        send_bytes(w.bytes, 0, kResult);
    }
    const std::vector<char> bytes = receive_bytes(wait_for(0, kFinal));
    Reader rd(bytes);
    RunOutcome out;
    rd.get(out.failures);
    out.cases_by_rank.resize(std::size_t(session_size));
    for (std::size_t& c : out.cases_by_rank) {
        std::uint64_t v = 0;
        rd.get(v);
        c = std::size_t(v);
    }
    out.results.resize(scenarios.size());
    for (std::size_t i = 0; i < scenarios.size(); ++i) {
        out.results[i].scenario = scenarios[i];
        read_result(rd, out.results[i]);
    }
    return out;
}

}  // namespace

Session::Session(int* argc, char*** argv) {
    if (!detail::launched_by_mpi()) return;
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    joined_ = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

Session::~Session() {
    if (joined_) MPI_Finalize();
}

bool Session::all_ok(bool ok) const {
    if (!joined_) return ok;
    int mine = ok ? 1 : 0, all = 0;
    check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD), "MPI_Allreduce");
    return all != 0;
}

RunOutcome run_cases(const Session& session, const std::vector<Scenario>& scenarios,
                     const CaseOptions& options, unsigned jobs, const CaseProgress& progress) {
    if (!session.distributed()) return strata::run_cases(scenarios, options, jobs, progress);
    CaseOptions quiet = options;
    quiet.simulation.progress = nullptr;
    return session.rank() == 0 ? serve(session, scenarios, quiet, progress)
                               : work(session.size(), scenarios, quiet);
}

}  // namespace strata::mpi
