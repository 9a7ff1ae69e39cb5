// `strata plot`: see plot.hpp. The script is found at run time, relative to the executable: the binary holds no
// path of the source tree it was built from.
#include "plot.hpp"

#include "strata/errors.hpp"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

extern char** environ;

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

/// Folders above the executable's searched for plots/make_plots.py (build/strata and build/x/strata find the
/// source tree's).
constexpr int kLevelsUp = 3;

bool readable_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

}  // namespace

std::string find_plot_script() {
    if (const char* env = std::getenv("STRATA_PLOTS"); env != nullptr && *env != '\0') {
        std::error_code ec;
        const fs::path p = fs::is_directory(env, ec) ? fs::path(env) / "make_plots.py" : fs::path(env);
        if (!readable_file(p))
            throw InputError(std::string("STRATA_PLOTS=") + env + ": no plotting script there (" + p.string() +
                             "); set it to make_plots.py or the folder that holds it, or unset it");
        return p.string();
    }
    std::vector<fs::path> looked;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw InputError("plotting script make_plots.py not found: cannot read /proc/self/exe to locate it (" +
                             ec.message() + "); set STRATA_PLOTS to the script or its folder");
    const fs::path bin = exe.parent_path();
    looked.push_back((bin / STRATA_PLOTS_FROM_BIN).lexically_normal());
    fs::path dir = bin;
    for (int level = 0; level <= kLevelsUp; ++level) {
        looked.push_back((dir / "plots" / "make_plots.py").lexically_normal());
        if (!dir.has_parent_path() || dir.parent_path() == dir) break;
        dir = dir.parent_path();
    }
    for (const fs::path& p : looked)
        if (readable_file(p)) return p.string();
    std::string where;
    for (const fs::path& p : looked) where += "\n  " + p.string();
    throw InputError("plotting script make_plots.py not found; looked in:" + where +
                     "\nset STRATA_PLOTS to the script or its folder (it is installed in <prefix>/share/strata/plots/)");
}

int plot_command(const PlotOptions& o) {
    const std::string script = find_plot_script();
    std::vector<std::string> args{"python3", script};
    if (o.paths.empty()) {
        // `strata plot [--out DIR]`: the results in DIR (default out), figures next to them.
        const std::string dir = o.out.empty() ? "out" : o.out;
        args.insert(args.end(), {dir, "--out", dir});
    } else {
        args.insert(args.end(), o.paths.begin(), o.paths.end());
        if (!o.out.empty()) args.insert(args.end(), {"--out", o.out});
    }
    if (!o.format.empty()) args.insert(args.end(), {"--format", o.format});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout << std::flush;
    pid_t pid = 0;
    const int err = posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ);
    if (err != 0)
        throw InputError(std::string("cannot run python3 for the plots: ") + std::strerror(err) +
                         " (apt-get install python3 python3-matplotlib)");
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) throw Error(std::string("plot: waitpid failed: ") + std::strerror(errno));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) return 2;   // nothing plotted; the script said why
    if (WIFEXITED(status))
        std::cerr << "error: the plotting script " << script << " failed (exit status " << WEXITSTATUS(status) << ")\n";
    else
        std::cerr << "error: the plotting script " << script << " was killed by signal " << WTERMSIG(status) << "\n";
    return 1;
}

}  // namespace strata::cli
