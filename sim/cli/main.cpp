// The `strata` command. Library code throws typed errors; only this file turns them into exit codes:
//   0 success, 1 internal error, 2 bad input (scenario, profile, options), 3 simulation failure.
#include "strata/errors.hpp"
#include "strata/profile.hpp"
#include "strata/report.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

namespace {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw strata::InputError(path + ": cannot open for writing");
    out << text;
    if (!out) throw strata::InputError(path + ": write failed");
}

struct RunOptions {
    std::string json_path, csv_path, profile_path, trace_path, timeline_path, case_name;
    bool analytical_only = false;
};

int run_command(const std::string& file, const RunOptions& opt) {
    const std::string& json_path = opt.json_path;
    const std::string& csv_path = opt.csv_path;
    const std::string& profile_path = opt.profile_path;
    strata::Experiment ex = strata::load_experiment(file);
    std::optional<strata::DeviceProfile> profile;
    if (!profile_path.empty()) profile = strata::load_device_profile(profile_path);
    std::vector<strata::CaseResult> results;
    results.reserve(ex.cases.size());
    const bool tty = isatty(STDERR_FILENO) != 0;
    std::size_t selected = 0;
    for (auto& sc : ex.cases) {
        if (!opt.case_name.empty() && sc.name != opt.case_name) continue;
        ++selected;
    }
    if (selected == 0) throw strata::InputError(file + ": no case named '" + opt.case_name + "'");
    if ((!opt.trace_path.empty() || !opt.timeline_path.empty()) && selected != 1)
        throw strata::InputError("--trace and --timeline need exactly one case: pick one with --case NAME");
    std::size_t index = 0;
    for (auto& sc : ex.cases) {
        if (!opt.case_name.empty() && sc.name != opt.case_name) continue;
        ++index;
        if (profile) sc.system.device = *profile;
        strata::CaseResult r = strata::analyze(sc);
        if (!opt.analytical_only) {
            strata::SimulationOptions so;
            so.trace_path = opt.trace_path;
            if (tty) {
                so.progress = [&](std::uint64_t done, std::uint64_t total, strata::Time now) {
                    std::cerr << "\r[" << index << "/" << selected << "] " << sc.name << ": " << (100 * done / std::max<std::uint64_t>(total, 1))
                              << "% of " << total << " tasks, simulated " << now.seconds() << " s   " << std::flush;
                };
            }
            strata::SimulationDetail detail;
            r.iteration = strata::simulate(sc, so, opt.timeline_path.empty() ? nullptr : &detail);
            if (!opt.timeline_path.empty()) {
                write_file(opt.timeline_path, strata::detail_to_json(sc, *r.iteration, detail));
                std::cout << "wrote " << opt.timeline_path << "\n";
            }
            if (tty) std::cerr << "\r\033[K" << std::flush;
        }
        results.push_back(std::move(r));
    }
    strata::print_table(std::cout, ex.name + "  (" + file + ")", results);
    if (!json_path.empty()) {
        write_file(json_path, strata::to_json(ex.name, results));
        std::cout << "wrote " << json_path << "\n";
    }
    if (!csv_path.empty()) {
        write_file(csv_path, strata::to_csv(results));
        std::cout << "wrote " << csv_path << "\n";
    }
    return 0;
}

/// Simulates every case of the given experiments and reports the simulator's own speed.
int bench_command(const std::vector<std::string>& files) {
    std::cout << fmt::format("{:<40} {:>6} {:>10} {:>11} {:>8} {:>12} {:>9}\n", "case", "GPUs", "tasks", "events",
                             "wall s", "events/s", "iter s");
    double total_wall = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& file : files) {
        strata::Experiment ex = strata::load_experiment(file);
        for (const auto& sc : ex.cases) {
            const strata::IterationResult r = strata::simulate(sc);
            total_wall += r.wall_s;
            std::cout << fmt::format("{:<40} {:>6} {:>10} {:>11} {:>8.3f} {:>12.0f} {:>9.3f}\n", sc.name.substr(0, 40),
                                     sc.execution.gpus(), r.tasks, r.events, r.wall_s, double(r.events) / r.wall_s,
                                     r.iteration_time_s)
                      << std::flush;
        }
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::cout << fmt::format("total: {:.3f} s simulating, {:.3f} s with loading; peak memory (max RSS) {:.1f} MiB\n",
                             total_wall, elapsed, double(ru.ru_maxrss) / 1024.0);
    return 0;
}

int explain_command(const std::string& file, const std::string& case_name) {
    strata::Experiment ex = strata::load_experiment(file);
    for (const auto& sc : ex.cases) {
        if (!case_name.empty() && sc.name != case_name) continue;
        strata::print_layer_breakdown(std::cout, sc);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata: simulate large-transformer training (tensor, sequence, pipeline and data parallelism;\n"
                 "no / selective / full activation recomputation) on a modelled GPU cluster"};
    app.require_subcommand(1);
    std::string file;
    RunOptions ro;
    CLI::App* run = app.add_subcommand("run", "run an experiment file and print a table per case");
    run->add_option("file", file, "experiment YAML (e.g. scenarios/paper/table4.yaml)")->required();
    run->add_option("--json", ro.json_path, "write results as JSON (schema in README.md)");
    run->add_option("--csv", ro.csv_path, "write results as CSV");
    run->add_option("--profile", ro.profile_path, "device profile to use instead of the system's (e.g. a calibrated one)");
    run->add_option("--trace", ro.trace_path, "write a Chrome trace-event JSON of the simulated iteration (one case)");
    run->add_option("--timeline", ro.timeline_path, "write the first pipeline replica's stage timeline and stage-0 memory over time as JSON (one case)");
    run->add_option("--case", ro.case_name, "run only the case with this name");
    run->add_flag("--analytical-only", ro.analytical_only, "skip the discrete-event simulation (memory and layer costs only)");
    std::string case_name;
    CLI::App* explain = app.add_subcommand("explain", "print one transformer layer's kernels and collectives with their costs");
    explain->add_option("file", file, "experiment YAML")->required();
    explain->add_option("--case", case_name, "only this case (default: all)");
    std::vector<std::string> bench_files;
    CLI::App* bench = app.add_subcommand("bench", "simulate experiments and report wall time, events per second and peak memory");
    bench->add_option("files", bench_files, "experiment YAML files")->required();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    try {
        if (*run) return run_command(file, ro);
        if (*explain) return explain_command(file, case_name);
        if (*bench) return bench_command(bench_files);
    } catch (const strata::InputError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const strata::SimulationError& e) {
        std::cerr << "simulation failed: " << e.what() << "\n";
        return 3;
    } catch (const std::exception& e) {
        std::cerr << "internal error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
