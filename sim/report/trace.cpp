// Renders a simulated iteration's records: the Chrome trace-event JSON (Perfetto) and the timeline JSON the
// plots read. Only neutral records (strata/metrics.hpp) come in; nothing here knows the engine.
#include "strata/errors.hpp"
#include "strata/report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace strata {

struct ChromeTraceWriter::Impl {
    std::string path;
    std::ofstream out;
    bool first = true;
    std::uint64_t flows = 0;
    const char* sep() {
        if (first) {
            first = false;
            return "";
        }
        return ",\n";
    }
};

ChromeTraceWriter::ChromeTraceWriter(const std::string& path) : impl_(std::make_unique<Impl>()) {
    impl_->path = path;
    impl_->out.open(path, std::ios::binary);
    if (!impl_->out) throw InputError(path + ": cannot open the trace file for writing");
    impl_->out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
}

ChromeTraceWriter::~ChromeTraceWriter() = default;

void ChromeTraceWriter::span(const TraceSpan& s) {
    std::ofstream& out = impl_->out;
    // Whole nanoseconds, the end rounded as the start is: a span then ends exactly where the next one on its lane
    // begins (rounding the duration on its own made neighbours overlap by 1 ns).
    const auto ns = [](Time t) { return (t.ps() + 500) / 1000; };
    const std::int64_t start_ns = ns(s.start), dur_ns = ns(s.end) - start_ns;
    out << impl_->sep()
        << fmt::format(R"({{"name":"{} c{} mb{}","cat":"{}","ph":"X","ts":{}.{:03},"dur":{}.{:03},"pid":{},"tid":{},)"
                       R"("args":{{"op":"{}","chunk":{},"microbatch":{},"bytes":{}}}}})",
                       s.kind, s.chunk, s.microbatch, s.kind, start_ns / 1000, start_ns % 1000, dur_ns / 1000, dur_ns % 1000,
                       s.process, s.lane, s.kind, s.chunk, s.microbatch, s.bytes.value);
    if (s.has_receiver) {
        // A flow arrow from the send to the receiving group's compute lane (bound to its next slice there).
        const std::uint64_t id = ++impl_->flows;
        out << impl_->sep()
            << fmt::format(R"({{"name":"p2p","cat":"p2p","ph":"s","id":{},"ts":{:.3f},"pid":{},"tid":{}}})", id, s.start.us(),
                           s.process, s.lane)
            << impl_->sep()
            << fmt::format(R"({{"name":"p2p","cat":"p2p","ph":"f","bp":"e","id":{},"ts":{:.3f},"pid":{},"tid":{}}})", id,
                           s.end.us(), s.receiver_process, s.receiver_lane);
    }
}

void ChromeTraceWriter::finish(const Trace& trace) {
    std::ofstream& out = impl_->out;
    // Each process's name, then its lanes (threads).
    std::size_t lane = 0;
    for (std::size_t pid = 0; pid < trace.processes.size(); ++pid) {
        if (!trace.processes[pid].empty()) {
            out << impl_->sep()
                << fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"{}"}}}})", pid, trace.processes[pid]);
        }
        for (; lane < trace.lanes.size() && trace.lanes[lane].process == pid; ++lane) {
            out << impl_->sep() << fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})", pid,
                                               trace.lanes[lane].id, trace.lanes[lane].name);
        }
    }
    if (lane != trace.lanes.size()) throw Error("trace: lanes are not grouped by process in process order");
    // A memory counter track per stage (its first replica): GiB in use.
    for (const TraceCounter& c : trace.memory) {
        for (const MemorySample& m : c.samples) {
            out << impl_->sep()
                << fmt::format(R"({{"name":"memory","ph":"C","ts":{:.3f},"pid":{},"args":{{"GiB":{:.4f}}}}})", m.time.us(), c.process,
                               m.in_use.gib());
        }
    }
    out << "\n]}\n";
    out.close();
    if (!out) throw InputError(impl_->path + ": writing the trace failed");
}

void write_chrome_trace(const std::string& path, const Trace& trace) {
    ChromeTraceWriter w(path);
    for (const TraceSpan& s : trace.spans) w.span(s);
    w.finish(trace);
}

std::string detail_to_json(const Scenario& sc, const IterationResult& r, const SimulationDetail& d) {
    nlohmann::ordered_json j;
    j["name"] = sc.name;
    j["iteration_time_s"] = r.iteration_time_s;
    j["capacity_bytes"] = sc.system.memory_capacity.value;
    j["pipeline"] = sc.execution.pipeline;
    j["categories"] = d.memory_categories;
    std::vector<std::int64_t> peaks;
    for (const StagePeak& sp : d.stage_peaks) peaks.push_back(sp.total.value);
    j["stage_peaks_bytes"] = peaks;
    auto& mem = j["memory"] = nlohmann::ordered_json::array();
    for (const auto& s : d.stage0_memory) mem.push_back({s.time.seconds(), s.in_use.value});
    auto& iv = j["intervals"] = nlohmann::ordered_json::array();
    for (const auto& x : d.intervals) iv.push_back({x.stage, std::string(1, x.kind), x.start_s, x.end_s, x.microbatch, x.chunk});
    return j.dump() + "\n";
}

}  // namespace strata
