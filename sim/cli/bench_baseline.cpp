// `strata bench --baseline OTHER` (see bench_baseline.hpp).
#include "bench_baseline.hpp"

#include "strata/errors.hpp"
#include "strata/scenario.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

namespace strata::cli {

namespace {

struct Sample {
    double wall_s = 0, cpu_s = 0, rss_mib = 0;
};

/// Runs `argv` as a child process with its output discarded; returns its times, or throws with its exit status.
Sample time_process(const std::vector<std::string>& argv, const std::string& what) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // The child's error output goes to a temporary file, so that a failure can say why.
    char err_path[] = "/tmp/strata-bench-XXXXXX";
    const int err_fd = mkstemp(err_path);
    if (err_fd >= 0) unlink(err_path);
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0) throw Error("bench: fork failed");
    if (pid == 0) {
        const int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
        if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
        execv(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    rusage ru{};
    if (wait4(pid, &status, 0, &ru) < 0) throw Error("bench: wait4 failed");
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string err;
    if (err_fd >= 0) {
        std::array<char, 2048> buf{};
        const ssize_t n = pread(err_fd, buf.data(), buf.size() - 1, 0);
        if (n > 0) err.assign(buf.data(), std::size_t(n));
        close(err_fd);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
        throw InputError("bench: " + what + " exited with status " + std::to_string(code) + " (" + argv[0] + " " + argv[1] +
                         " " + argv[2] + " --case '" + argv[4] + "')" +
                         (code == 127 ? ": it could not be executed" : err.empty() ? "" : ": " + err) +
                         (code == 2 ? " (an older strata may not know every key of today's scenario files)" : ""));
    }
    const auto secs = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) * 1e-6; };
    return {wall, secs(ru.ru_utime) + secs(ru.ru_stime), double(ru.ru_maxrss) / 1024.0};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string load_average() {
    std::array<double, 3> l{};
    if (getloadavg(l.data(), 3) != 3) return "unknown";
    return fmt::format("{:.2f} {:.2f} {:.2f}", l[0], l[1], l[2]);
}

std::string self_path() {
    std::array<char, 4096> buf{};
    const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) throw Error("bench: cannot find this program's path (/proc/self/exe)");
    return std::string(buf.data(), std::size_t(n));
}

}  // namespace

int bench_against_baseline(const std::vector<std::string>& files, const BaselineOptions& o) {
    if (o.runs < 1) throw InputError("bench: --runs must be at least 1");
    if (access(o.baseline.c_str(), X_OK) != 0)
        throw InputError("bench: --baseline " + o.baseline + ": not an executable file");
    const std::string self = self_path();
    auto with_overrides = [&](std::vector<std::string> args) {
        for (const std::string& s : o.overrides) args.insert(args.end(), {"--set", s});
        return args;
    };
    auto self_args = [&](const std::string& file, const std::string& name) {
        std::vector<std::string> args{self, "run", file, "--case", name};
        if (o.replicas != "all") args.insert(args.end(), {"--replicas", o.replicas});
        return with_overrides(args);
    };
    auto baseline_args = [&](const std::string& file, const std::string& name) {
        return with_overrides({o.baseline, "run", file, "--case", name});
    };
    std::cout << fmt::format(
        "A = {}{}\nB = {} (baseline)\n{} alternated pair(s) per case, whole processes (`run FILE --case "
        "NAME`); "
        "load average at start: {}\n",
        self, o.replicas == "all" ? "" : " --replicas " + o.replicas, o.baseline, o.runs, load_average());
    std::cout << fmt::format("{:<40} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>20} {:>8}\n", "case", "A wall", "B wall", "A cpu",
                             "B cpu", "A MiB", "B MiB", "A/B wall med (min-max)", "A/B cpu");
    double log_wall = 0, log_cpu = 0;
    int cases = 0;
    for (const auto& file : files) {
        const Experiment ex = load_experiment(file, o.overrides);  // validates the file and names its cases
        for (const auto& sc : ex.cases) {
            if (!sc.infeasible.empty()) continue;
            std::vector<Sample> a, b;
            std::vector<double> wall_ratio, cpu_ratio;
            for (int r = 0; r < o.runs; ++r) {
                // Alternate which goes first, so that neither always runs on a warmer machine.
                Sample sa, sb;
                if (r % 2 == 0) {
                    sa = time_process(self_args(file, sc.name), "this strata");
                    sb = time_process(baseline_args(file, sc.name), "the baseline");
                } else {
                    sb = time_process(baseline_args(file, sc.name), "the baseline");
                    sa = time_process(self_args(file, sc.name), "this strata");
                }
                a.push_back(sa);
                b.push_back(sb);
                wall_ratio.push_back(sa.wall_s / sb.wall_s);
                cpu_ratio.push_back(sb.cpu_s > 0 ? sa.cpu_s / sb.cpu_s : 1.0);
            }
            auto med = [](const std::vector<Sample>& v, double Sample::*f) {
                std::vector<double> x;
                for (const auto& s : v) x.push_back(s.*f);
                return median(x);
            };
            const double rw = median(wall_ratio), rc = median(cpu_ratio);
            log_wall += std::log(rw);
            log_cpu += std::log(rc);
            ++cases;
            std::cout << fmt::format("{:<40} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>7.0f} {:>7.0f} {:>8.3f} ({:.3f}-{:.3f}) {:>8.3f}\n",
                                     sc.name.substr(0, 40), med(a, &Sample::wall_s), med(b, &Sample::wall_s),
                                     med(a, &Sample::cpu_s), med(b, &Sample::cpu_s), med(a, &Sample::rss_mib),
                                     med(b, &Sample::rss_mib), rw, *std::min_element(wall_ratio.begin(), wall_ratio.end()),
                                     *std::max_element(wall_ratio.begin(), wall_ratio.end()), rc)
                      << std::flush;
        }
    }
    if (cases == 0) throw InputError("bench: no case to run");
    std::cout << fmt::format("geometric mean over {} case(s): A/B wall {:.3f}, A/B cpu {:.3f}; load average at end: {}\n", cases,
                             std::exp(log_wall / cases), std::exp(log_cpu / cases), load_average());
    return 0;
}

}  // namespace strata::cli
