// `strata plot`: draws figures from strata's JSON results with plots/make_plots.py (python3 + matplotlib).
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

struct PlotOptions {
    std::vector<std::string> paths;   ///< result files or directories; none: the --out directory (default out)
    std::string out;                  ///< where the figures go; empty: next to each input
    std::string format;               ///< comma-separated figure formats; empty: the script's default (png,svg)
};

/// The plotting script: $STRATA_PLOTS (the script or its folder) when set; otherwise next to an installed binary
/// (<prefix>/share/strata/plots/make_plots.py, relative to /proc/self/exe), then plots/make_plots.py in the
/// executable's folder or one of the folders above it (a build folder inside a source tree). Throws InputError
/// naming every place it looked.
std::string find_plot_script();

/// Runs the script on the inputs; returns the exit status for main: 0 when it drew something, 2 when it drew
/// nothing (it says why), 1 when it failed otherwise. Throws InputError when the script or python3 is missing.
int plot_command(const PlotOptions& options);

}  // namespace strata::cli
