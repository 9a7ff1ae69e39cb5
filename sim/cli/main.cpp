// The `strata` command. Library code throws typed errors; only this file turns them into exit codes:
//   0 success, 1 internal error, 2 bad input (scenario, profile, options), 3 simulation failure.
#include "strata/errors.hpp"
#include "strata/mpi.hpp"
#include "strata/profile.hpp"
#include "strata/report.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"
#include "strata/search.hpp"
#include "strata/simulate.hpp"

#include "bench_baseline.hpp"
#include "huge_heap.hpp"
#include "outputs.hpp"
#include "plot.hpp"
#include "provenance.hpp"
#include "search_report.hpp"
#include "strata_git_revision.hpp"  // generated at build time (cmake/git_revision.cmake)
#include "trace_groups.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

namespace {

using strata::cli::outputs_writable;
using strata::cli::print_ranks;
using strata::cli::progress_printer;
using strata::cli::write_file;

struct RunOptions {
    std::string json_path, csv_path, profile_path, trace_path, timeline_path, case_name, trace_groups;
    bool analytical_only = false, no_variation = false;
    std::string replicas = "all";
    std::optional<std::uint64_t> seed;
    int jobs = 0;
    std::uint64_t max_tasks_millions = 1000;
    std::vector<std::string> overrides;  // --set PART.KEY=VALUE
};

int run_command(const strata::mpi::Session& session, const std::string& file, const RunOptions& opt, char** argv) {
    strata::Experiment ex = strata::load_experiment(file, opt.overrides, opt.case_name);
    std::optional<strata::DeviceProfile> profile;
    if (!opt.profile_path.empty()) profile = strata::load_device_profile(opt.profile_path);
    std::vector<strata::Scenario> selected = strata::select_cases(ex, opt.case_name, profile ? &*profile : nullptr);
    if (!opt.analytical_only) strata::cli::use_huge_heap_if_large(strata::cli::largest_gpus(selected), session.joined(), argv);
    // Hashed as read now, before the (possibly long) run.
    std::vector<std::filesystem::path> inputs = ex.inputs;
    if (!opt.profile_path.empty()) inputs.emplace_back(opt.profile_path);
    const strata::Provenance provenance = strata::cli::provenance_of(inputs);
    for (auto& sc : selected) {
        if (opt.seed) sc.system.variation.seed = *opt.seed;
        if (opt.no_variation) sc.system.variation = strata::VariationSpec{};
    }
    if (!opt.trace_groups.empty() && opt.trace_path.empty()) throw strata::InputError("--trace-groups needs --trace FILE");
    if ((!opt.trace_path.empty() || !opt.timeline_path.empty()) && selected.size() != 1)
        throw strata::InputError("--trace and --timeline need exactly one case: pick one with --case NAME");
    if (opt.json_path == "-" && opt.csv_path == "-")
        throw strata::InputError("--json - and --csv - cannot both write to standard output: give one a file");
    if (opt.analytical_only && (!opt.trace_path.empty() || !opt.timeline_path.empty()))
        throw strata::InputError("--trace and --timeline record the simulation: not with --analytical-only");
    if (!outputs_writable(session, {opt.json_path, opt.csv_path, opt.trace_path, opt.timeline_path})) return 2;

    const bool tty = isatty(STDERR_FILENO) != 0;
    const std::size_t n = selected.size();
    strata::CaseOptions co;
    co.analytical_only = opt.analytical_only;
    co.simulation.max_tasks = opt.max_tasks_millions * 1'000'000;
    co.simulation.representative_replicas = opt.replicas == "representative";
    strata::RunOutcome run;
    if (n == 1 && session.rank() != 0) return 0;   // one case: rank 0 alone runs it
    if (n == 1) {
        co.simulation.keep_trace = !opt.trace_path.empty();
        strata::cli::set_trace_groups(opt.trace_groups, co.simulation);
        if (tty) {
            co.simulation.progress = [&](std::uint64_t done, std::uint64_t total, strata::Time now) {
                std::cerr << "\r" << selected[0].name << ": " << (100 * done / std::max<std::uint64_t>(total, 1)) << "% of "
                          << total << " tasks, simulated " << fmt::format("{:.3f}", now.seconds()) << " s   " << std::flush;
            };
        } else {
            // Not a terminal (a log, a batch job): a line at every tenth of a run long enough to wonder about
            // (2 million tasks or more: seconds to hours); shorter runs stay silent, as scripts expect.
            co.simulation.progress = [&, tenth = std::uint64_t{0}](std::uint64_t done, std::uint64_t total, strata::Time now) mutable {
                if (total < 2'000'000) return;
                const std::uint64_t t = 10 * done / total;
                if (t == tenth || t >= 10) return;
                tenth = t;
                std::cerr << fmt::format("progress: {}: {}0% of {} tasks, simulated {:.3f} s\n", selected[0].name, t, total,
                                         now.seconds());
            };
        }
        strata::SimulationDetail detail;
        const bool want_detail = !opt.timeline_path.empty() || !opt.trace_path.empty();
        // The trace goes to a file beside its own as the simulation runs (memory stays flat however many GPUs), which
        // replaces it only once the iteration is complete: a failed case leaves an existing file as it was.
        std::optional<strata::ChromeTraceWriter> trace;
        const std::string trace_partial = opt.trace_path + ".partial";
        struct RemoveOnExit {  // the partial file never outlives this scope, whatever throws
            const std::string* path = nullptr;
            ~RemoveOnExit() {
                std::error_code ec;
                if (path) std::filesystem::remove(*path, ec);
            }
        } partial_guard;
        if (!opt.trace_path.empty()) {
            partial_guard.path = &trace_partial;
            trace.emplace(trace_partial);
            co.simulation.trace_spans = [&trace](const strata::TraceSpan& s) { trace->span(s); };
        }
        run.results.push_back(strata::evaluate_case(selected[0], co, &run.failures, want_detail ? &detail : nullptr));
        if (tty) std::cerr << "\r\033[K" << std::flush;
        const strata::CaseResult& r = run.results[0];
        if (trace) {
            trace->finish(detail.trace);
            trace.reset();  // closed
            std::error_code ec;
            if (r.iteration) std::filesystem::rename(trace_partial, opt.trace_path, ec);
            if (ec) throw strata::InputError(opt.trace_path + ": cannot be written (" + ec.message() + ")");
        }
        if (r.iteration && !opt.timeline_path.empty())
            write_file(opt.timeline_path, strata::detail_to_json(selected[0], *r.iteration, detail));
    } else {
        // Cases run in parallel over the cores (or the ranks of an MPI job); results keep the file's order whatever
        // the thread or rank count.
        run = strata::mpi::run_cases(session, selected, co, opt.jobs > 0 ? unsigned(opt.jobs) : 0u,
                                     progress_printer(session, tty, "cases"));
        if (tty) std::cerr << "\r\033[K" << std::flush;
    }
    const int code = run.failures == 0 ? 0 : (run.failures & strata::kCaseInternal) ? 1 : (run.failures & strata::kCaseSimulation) ? 3 : 2;
    if (session.rank() != 0) return code;   // rank 0 reports and writes
    if (session.distributed()) print_ranks(run);
    const std::vector<strata::CaseResult>& results = run.results;
    const int failed = run.failures;
    // With --json - or --csv - standard output carries only that; the table and the notes go to standard error.
    const bool to_stdout = opt.json_path == "-" || opt.csv_path == "-";
    std::ostream& human = to_stdout ? std::cerr : std::cout;
    strata::print_table(human, ex.name + "  (" + file + ")", results);
    if (!opt.timeline_path.empty() && results[0].iteration) human << "wrote " << opt.timeline_path << "\n";
    if (!opt.trace_path.empty() && results[0].iteration) human << "wrote " << opt.trace_path << "\n";
    auto emit = [&](const std::string& path, const std::string& text) {
        if (path.empty()) return;
        if (path == "-") {
            std::cout << text << std::flush;
            return;
        }
        write_file(path, text);
        human << "wrote " << path << "\n";
    };
    emit(opt.json_path, opt.json_path.empty() ? std::string() : strata::to_json(ex.name, results, &provenance));
    emit(opt.csv_path, opt.csv_path.empty() ? std::string() : strata::to_csv(results));
    if (failed != 0) std::cerr << "error: at least one case could not be evaluated (see the table)\n";
    return code;
}

struct SearchOptions {
    std::string model, system, json_path, csv_path;
    std::string attention = "unfused", precision = "bf16", gradient_average = "scale";
    std::vector<std::string> fix;
    int gpus = 0, global_batch = 0, top = 10, simulate_top = 8, simulate_max = 64, jobs = 0;
    double margin_pct = 10;
    std::uint64_t max_tasks_millions = 1000;
    std::string replicas = "all";
    bool grad_reduce_bf16 = false;
    std::vector<std::string> overrides;         ///< --set PART.KEY=VALUE: every candidate's (execution), the files' (model, system)
    std::vector<std::string> flags_given;       ///< which of the execution flags were given explicitly
};

int search_command(const strata::mpi::Session& session, const SearchOptions& o, char** argv) {
    strata::cli::use_huge_heap_if_large(o.gpus, session.joined(), argv);
    strata::SearchRequest req;
    req.model = strata::load_model(o.model, o.overrides);     // --set model.KEY=VALUE
    req.system = strata::load_system(o.system, o.overrides);  // --set system.KEY=VALUE
    req.gpus = o.gpus;
    req.global_batch = o.global_batch;
    for (const std::string& f : o.fix) strata::apply_constraint(req.space, f, "--fix");
    // Hashed as read now, before the search; `--json -` or `--csv -` puts that alone on standard output, the rest
    // on stderr.
    const strata::Provenance provenance = strata::cli::provenance_of({o.model, o.system, req.system.device.file});
    if (o.json_path == "-" && o.csv_path == "-")
        throw strata::InputError("search: --json - and --csv - cannot both write to standard output: give one a file");
    const bool to_stdout = o.json_path == "-" || o.csv_path == "-";
    std::ostream& human = to_stdout ? std::cerr : std::cout;
    // --set: every candidate's value of a key the search does not vary. Four such keys have flags of their own: a
    // flag given and a --set of its key conflict; a flag not given leaves the key to the --set, else its default.
    strata::ExecutionOverrides set;
    if (!o.overrides.empty())
        set = strata::read_execution_overrides(o.overrides, strata::search_varied_execution_keys(), "search");
    auto given = [&](const char* name) {
        return std::find(o.flags_given.begin(), o.flags_given.end(), name) != o.flags_given.end();
    };
    strata::ExecutionChoices choices;  // CLI11 checked each flag's value against its choices
    if (given("--attention")) choices.attention = strata::attention_named(o.attention);
    if (given("--precision")) choices.precision = strata::precision_named(o.precision);
    if (given("--gradient-average")) choices.gradient_average = strata::gradient_average_named(o.gradient_average);
    if (given("--grad-reduce-in-bf16")) choices.grad_reduce_in_fp32 = !o.grad_reduce_bf16;
    req.base = strata::with_choices(set, choices, [](std::string_view key) {
        const std::string_view flag = key == "attention"        ? "--attention"
                                      : key == "precision"      ? "--precision"
                                      : key == "gradient_average" ? "--gradient-average"
                                                                  : "--grad-reduce-in-bf16";
        return fmt::format("search: {} and --set execution.{} both given: keep one", flag, key);
    });
    req.simulate_top = std::max(o.top, o.simulate_top);
    req.simulate_max = o.simulate_max;
    req.margin = o.margin_pct / 100;
    req.representative_replicas = o.replicas == "representative";
    req.max_tasks = o.max_tasks_millions * 1'000'000;
    req.max_tasks_option = "strata search --max-tasks";
    req.source = o.model + " on " + o.system;
    req.jobs = o.jobs;
    if (!outputs_writable(session, {o.json_path, o.csv_path})) return 2;
    const bool tty = isatty(STDERR_FILENO) != 0;
    req.progress = progress_printer(session, tty, "candidates simulated");
    strata::RunOutcome distributed;   // under MPI: the candidates spread over the ranks
    if (session.distributed()) {
        req.runner = [&](const std::vector<strata::Scenario>& scenarios, const strata::CaseOptions& options) {
            strata::RunOutcome out = strata::mpi::run_cases(session, scenarios, options, 1, req.progress);
            if (distributed.cases_by_rank.empty())
                distributed = out;  // the candidates (then the best in full)
            return out;
        };
    }
    const strata::SearchResult r = strata::search(req);
    if (tty && session.rank() == 0) std::cerr << "\r\033[K";
    if (session.rank() != 0) return 0;   // rank 0 reports and writes
    if (session.distributed()) print_ranks(distributed);
    const bool attention_by_default = !given("--attention") && !set.sets("attention");
    if (!strata::cli::print_search(human, req, r, o.fix, o.top, o.margin_pct, attention_by_default)) return 2;
    const std::vector<strata::CaseResult> results = strata::ranked_results(r, int(r.simulated.size()));
    const strata::SearchSummary summary = strata::search_summary(req, r, o.fix);
    human << fmt::format("search took {:.2f} s\n", r.wall_s);
    auto emit = [&](const std::string& path, const auto& text) {
        if (path.empty()) return;
        if (path == "-") {
            std::cout << text() << std::flush;
            return;
        }
        write_file(path, text());
        human << "wrote " << path << "\n";
    };
    emit(o.json_path, [&] { return strata::to_json("search " + req.model.name, results, &provenance, &summary); });
    emit(o.csv_path, [&] { return strata::to_csv(results); });
    return 0;
}

/// Simulates every case of the given experiments and reports the simulator's own speed.
int bench_command(const strata::mpi::Session& session, const std::vector<std::string>& files, bool representative,
                  const std::vector<std::string>& overrides, char** argv) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<strata::Scenario> cases;
    for (const auto& file : files)
        for (auto& sc : strata::load_experiment(file, overrides).cases) cases.push_back(std::move(sc));
    strata::cli::use_huge_heap_if_large(strata::cli::largest_gpus(cases), session.joined(), argv);
    std::cout << fmt::format("{:<40} {:>6} {:>10} {:>11} {:>8} {:>12} {:>9}\n", "case", "GPUs", "tasks", "events",
                             "wall s", "events/s", "iter s");
    double total_wall = 0;
    for (const auto& sc : cases) {
        if (!sc.infeasible.empty()) {  // a sweep's combination that cannot run: listed, not timed (as `run` lists it)
            std::cout << fmt::format("{:<40} infeasible: {}\n", sc.name.substr(0, 40), sc.infeasible);
            continue;
        }
        strata::SimulationOptions options;
        options.representative_replicas = representative;
        const strata::IterationResult r = strata::simulate(sc, options);
        total_wall += r.wall_s;
        std::cout << fmt::format("{:<40} {:>6} {:>10} {:>11} {:>8.3f} {:>12.0f} {:>9.3f}\n", sc.name.substr(0, 40),
                                 sc.execution.gpus(), r.tasks, r.events, r.wall_s, double(r.events) / r.wall_s,
                                 r.iteration_time_s)
                  << std::flush;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::cout << fmt::format("total: {:.3f} s simulating, {:.3f} s with loading; peak memory (max RSS) {:.1f} MiB\n",
                             total_wall, elapsed, double(ru.ru_maxrss) / 1024.0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata: simulate large-transformer training (tensor, sequence, pipeline and data parallelism;\n"
                 "no / selective / full activation recomputation) on a modelled GPU cluster"};
    app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION + " (git " + STRATA_GIT_REVISION + ")");
    app.require_subcommand(1);
    const CLI::Validator file_name(
        [](std::string& v) { return v.empty() ? std::string("expected a file name") : std::string(); }, "FILE");
    std::string file;
    RunOptions ro;
    CLI::App* run = app.add_subcommand("run", "run an experiment file and print a table per case");
    run->add_option("file", file, "experiment YAML (e.g. scenarios/paper/table4.yaml)")->required();
    run->add_option("--json", ro.json_path, "write results as JSON (schema in README.md); - for standard output")->check(file_name);
    run->add_option("--csv", ro.csv_path, "write results as CSV; - for standard output")->check(file_name);
    run->add_option("--profile", ro.profile_path, "device profile to use instead of the system's (e.g. a calibrated one)");
    run->add_option("--trace", ro.trace_path, "write a Chrome trace-event JSON of the simulated iteration (one case)")->check(file_name);
    run->add_option("--trace-groups", ro.trace_groups,
                    "with --trace: only these GPU groups, e.g. 'stages=0-3,replicas=0' (inclusive ranges; default all)");
    run->add_option("--timeline", ro.timeline_path, "write the first pipeline replica's stage timeline and stage-0 memory over time as JSON (one case)")->check(file_name);
    run->add_option("--case", ro.case_name, "run only the case with this name");
    const char* set_help = "PART.KEY=VALUE, repeatable: that key's value in every case, over the file's (PART: model, "
                           "execution, system; e.g. execution.microbatch=2, execution.host_gap_forward_us=300, "
                           "system.network.rails=4)";
    run->add_option("--set", ro.overrides, set_help);
    run->add_option("--jobs,-j", ro.jobs, "cases to run in parallel (default: one per core; under mpirun each rank runs one case at a time)")->check(CLI::Range(1, 1024));
    run->add_option("--max-tasks", ro.max_tasks_millions,
                    "refuse cases needing more than this many million tasks (a bound on run time, about a million tasks a second; memory follows the tasks in flight; default 1000)")
        ->check(CLI::Range(1, 100000));
    run->add_option("--seed", ro.seed, "variation seed: which GPU gets which speed (default: the system file's variation.seed)")
        ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 62));  // the system file's range
    run->add_option(
           "--replicas", ro.replicas,
           "all: simulate every GPU group (default); representative: the data-parallel replicas of replica "
           "0's node only (the reductions' flows kept; faster by about d, see README 'Speed')")
        ->capture_default_str()
        ->check(CLI::IsMember({"all", "representative"}));
    run->add_flag("--no-variation", ro.no_variation, "every GPU at the profile's speed (turns the system's variation off)");
    run->add_flag("--analytical-only", ro.analytical_only, "skip the discrete-event simulation (memory and layer costs only)");
    std::string case_name;
    bool clock_from_kernels = false;
    CLI::App* explain = app.add_subcommand("explain", "print one transformer layer's kernels and collectives with their costs");
    explain->add_option("file", file, "experiment YAML")->required();
    explain->add_option("--case", case_name, "only this case (default: all)");
    explain->add_option("--profile", ro.profile_path, "device profile to use instead of the system's (e.g. a calibrated one)");
    explain->add_option("--set", ro.overrides, set_help);
    explain->add_flag("--clock-from-kernels", clock_from_kernels,
                      "under a power limit, the clock from the layer's kernels alone, its collectives left out (as one GPU "
                      "runs the layer in a calibration; scripts/power-profile.py)");
    SearchOptions so;
    CLI::App* srch = app.add_subcommand("search", "find the fastest execution of a model on N GPUs that fits in memory");
    srch->add_option("--model", so.model, "model YAML (e.g. scenarios/models/mt-nlg-530b.yaml)")->required();
    srch->add_option("--system", so.system, "system YAML (e.g. scenarios/systems/selene-a100.yaml)")->required();
    srch->add_option("--gpus", so.gpus, "number of GPUs")->required()->check(CLI::Range(1, 1 << 20));
    srch->add_option("--global-batch", so.global_batch, "global batch size (sequences)")->required()->check(CLI::Range(1, 1 << 30));
    std::string keys;
    for (const auto& k : strata::search_keys()) keys += "\n  " + k.name + ": " + k.default_values;
    srch->add_option(
            "--fix", so.fix,
            "KEY=VALUES, repeatable: search only these values of a key; VALUES is a comma-separated list of "
            "values and LO..HI ranges (tensor=8, pipeline=4..16, microbatch=1,2,4..8, recompute=selective,full, "
            "sequence_parallel=on, recompute_modules=core_attn,layernorm+mlp: module sets joined by +). Keys "
            "and what is tried without --fix:" +
                keys)
        ->take_all();
    srch->add_option("--top", so.top, "candidates printed (the CSV and JSON have every simulated one)")->capture_default_str()->check(CLI::Range(1, 1000));
    srch->add_option("--simulate-top", so.simulate_top, "the best estimates simulated event by event, at least")
        ->capture_default_str()->check(CLI::Range(1, 1000));
    srch->add_option("--margin", so.margin_pct,
                     "also simulate every candidate whose analytical estimate is within this many percent of the best "
                     "(the screen can misorder close candidates; 0: the best --simulate-top only)")
        ->capture_default_str()->check(CLI::Range(0.0, 1000.0));
    srch->add_option("--simulate-max", so.simulate_max,
                     "at most this many simulated (or --simulate-top, if more): the best estimates within the margin first")
        ->capture_default_str()->check(CLI::Range(1, 100000));
    srch->add_option("--jobs,-j", so.jobs, "parallel simulations (0: one per core; under mpirun one per rank)")->capture_default_str()->check(CLI::Range(0, 1024));
    srch->add_option("--max-tasks", so.max_tasks_millions,
                     "refuse candidates needing more than this many million tasks to simulate (a bound on run time)")
        ->capture_default_str()->check(CLI::Range(1, 100000));
    srch->add_option(
            "--replicas", so.replicas,
            "all: every candidate with every GPU group (default); representative: the data-parallel replicas "
            "of replica 0's node only (about d times faster), then rank 1 again in full")
        ->capture_default_str()
        ->check(CLI::IsMember({"all", "representative"}));
    srch->add_option("--attention", so.attention, "attention kernel of every candidate: unfused, flash (the profile's fused attention) or flash2 (FlashAttention-2)")
        ->capture_default_str()->check(CLI::IsMember({"unfused", "flash", "flash2"}));
    srch->add_option("--precision", so.precision, "training precision of every candidate: bf16, fp16 or fp8")
        ->capture_default_str()->check(CLI::IsMember({"bf16", "fp16", "fp8"}));
    srch->add_option("--gradient-average", so.gradient_average, "gradient averaging of every candidate: scale (Megatron-Core), scale_always (Megatron-LM's local DDP, 2021-2023: the paper's), in_collective")
        ->capture_default_str()->check(CLI::IsMember({"scale", "scale_always", "in_collective"}));
    srch->add_option("--set", so.overrides,
                     "PART.KEY=VALUE, repeatable: execution.KEY: every candidate's value of a key the search does not vary "
                     "(e.g. execution.cross_entropy=te, execution.fp8_recipe=current, execution.embedding_reduce_scatter=false; "
                     "the keys it varies take --fix); model.KEY, system.KEY: over the model and system files "
                     "(e.g. model.seq_len=4096, system.network.routing=hash)");
    srch->add_flag("--grad-reduce-in-bf16", so.grad_reduce_bf16, "every candidate's main gradients, their accumulation and data-parallel reduction in bf16 (Megatron-Core grad_reduce_in_fp32: false; NeMo's performance recipes); default fp32");
    srch->add_option("--json", so.json_path, "write every simulated candidate (estimate, ranks, tokens/s, TF/s per GPU) as JSON; - for standard output")->check(file_name);
    srch->add_option("--csv", so.csv_path, "write every simulated candidate as CSV (the run CSV's columns, then estimate_s, estimate_rank, simulated_rank, estimate_error); - for standard output")->check(file_name);
    std::string check_file;
    CLI::App* check = app.add_subcommand("check-profile",
                                         "compare a calibrated profile's measured whole layers with the simulator's prediction from its op-level entries");
    check->add_option("profile", check_file, "device profile YAML written by strata-calibrate")->required();
    strata::cli::PlotOptions po;
    CLI::App* plot = app.add_subcommand("plot", "draw figures from strata's JSON results: run, sweep, search and timeline "
                                                "files, and the paper's figures (python3 + matplotlib)");
    plot->add_option("paths", po.paths, "result files or directories (a directory: every recognised .json in it; "
                                        "default: the --out directory)");
    plot->add_option("--out", po.out, "directory for the figures (default: next to each input; without paths: the "
                                      "results in this directory, default out)");
    plot->add_option("--format", po.format, "comma-separated figure formats: png, svg, pdf (default png,svg)");
    std::vector<std::string> bench_files;
    CLI::App* bench = app.add_subcommand("bench", "simulate experiments and report wall time, events per second and peak memory");
    bench->add_option("files", bench_files, "experiment YAML files")->required();
    strata::cli::BaselineOptions baseline;
    bench->add_option("--baseline", baseline.baseline,
                      "another strata binary: run both alternately case by case as whole processes and print the ratios");
    bench
        ->add_option("--replicas", baseline.replicas,
                     "all or representative (this binary; the baseline runs with its default)")
        ->capture_default_str()
        ->check(CLI::IsMember({"all", "representative"}));
    bench->add_option("--set", baseline.overrides, set_help);
    bench->add_option("--runs", baseline.runs, "with --baseline: alternated pairs per case (default 5; this machine has slow phases: more runs, steadier medians)")->check(CLI::Range(1, 100));
    if (argc > 1 && argv[1][0] != '-') {
        // CLI11 would take an unknown first word for a stray argument ("A subcommand is required").
        bool known = false;
        std::string names;
        for (const CLI::App* sub : app.get_subcommands({})) {
            known = known || sub->get_name() == argv[1];
            names += (names.empty() ? "" : ", ") + sub->get_name();
        }
        if (!known) {
            std::cerr << "strata: unknown command '" << argv[1] << "': expected one of " << names << " (strata --help)\n";
            return 2;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    try {
        // Joins the MPI job when started by mpirun / srun; run and search spread their cases over the ranks, the
        // other commands run on rank 0 alone.
        const strata::mpi::Session session(&argc, &argv);
        if (session.rank() != 0 && !*run && !*srch) return 0;
        if (*run) return run_command(session, file, ro, argv);
        if (*explain) {  // one layer of each case, kernel by kernel
            const auto profile = ro.profile_path.empty() ? std::nullopt : std::optional(strata::load_device_profile(ro.profile_path));
            for (const auto& sc : strata::select_cases(strata::load_experiment(file, ro.overrides, case_name), case_name, profile ? &*profile : nullptr))
                strata::print_layer_breakdown(std::cout, sc, clock_from_kernels);
            return 0;
        }
        if (*bench) {
            if (!baseline.baseline.empty()) return strata::cli::bench_against_baseline(bench_files, baseline);
            return bench_command(session, bench_files, baseline.replicas == "representative", baseline.overrides, argv);
        }
        if (*srch) {
            for (const char* name : {"--attention", "--precision", "--gradient-average", "--grad-reduce-in-bf16"})
                if (srch->count(name) > 0) so.flags_given.emplace_back(name);
            return search_command(session, so, argv);
        }
        if (*plot) return strata::cli::plot_command(po);
        if (*check) {
            strata::print_profile_check(std::cout, strata::load_device_profile(check_file));
            return 0;
        }
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
