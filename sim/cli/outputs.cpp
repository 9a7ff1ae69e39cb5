// Output files and progress for the `strata` command (outputs.hpp).
#include "outputs.hpp"

#include "strata/errors.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>

namespace strata::cli {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw strata::InputError(path + ": cannot open for writing");
    out << text;
    if (!out) throw strata::InputError(path + ": write failed");
}

strata::CaseProgress progress_printer(const strata::mpi::Session& session, bool tty, const char* what) {
    if (session.rank() != 0 || (!tty && !session.distributed())) return {};
    const auto t0 = std::chrono::steady_clock::now();
    const int ranks = session.size();
    auto io = std::make_shared<std::mutex>();
    auto last_tenth = std::make_shared<std::size_t>(0);
    return [=](std::size_t d, std::size_t total) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double eta = el / double(d) * double(total - d);
        std::lock_guard<std::mutex> lock(*io);
        if (!tty) {
            const std::size_t tenth = 10 * d / total;
            if (tenth == *last_tenth && d != total) return;
            *last_tenth = tenth;
            std::cerr << fmt::format("progress: {}/{} {} on {} ranks, {:.1f} s, ETA {:.1f} s\n", d, total, what, ranks,
                                     el, eta);
            return;
        }
        const int width = 30, fill = int(width * d / total);
        std::cerr << "\r[" << std::string(std::size_t(fill), '#') << std::string(std::size_t(width - fill), '.') << "] "
                  << d << "/" << total << " " << what << ", " << fmt::format("{:.1f}", el) << " s, ETA "
                  << fmt::format("{:.1f}", eta) << " s   " << std::flush;
    };
}

bool outputs_writable(const strata::mpi::Session& session, const std::vector<std::string>& paths) {
    // Two outputs to one file: the later would silently replace the earlier.
    std::vector<std::filesystem::path> seen;
    for (const std::string& path : paths) {
        if (path.empty() || path == "-") continue;
        std::error_code ec;
        std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
        if (ec) p = std::filesystem::absolute(path);
        if (std::find(seen.begin(), seen.end(), p) != seen.end())
            throw strata::InputError(path + ": named for two outputs (--json, --csv, --trace, --timeline): give each its own file");
        seen.push_back(p);
    }
    std::optional<strata::InputError> unwritable;
    for (const std::string& path : paths) {
        if (session.rank() != 0 || path.empty() || path == "-") continue;
        const bool existed = access(path.c_str(), F_OK) == 0;
        std::ofstream probe(path, std::ios::app);
        if (!probe) {
            unwritable.emplace(path + ": cannot be written (check the directory exists and is writable)");
            break;
        }
        probe.close();
        if (!existed) std::remove(path.c_str());
    }
    if (!session.all_ok(!unwritable)) {
        if (unwritable) throw *unwritable;
        return false;
    }
    return true;
}

void print_ranks(const strata::RunOutcome& run) {
    std::string counts;
    for (std::size_t c : run.cases_by_rank) counts += (counts.empty() ? "" : " ") + std::to_string(c);
    std::cerr << "mpi: " << run.cases_by_rank.size() << " ranks, cases per rank: " << counts << "\n";
}

}  // namespace strata::cli
