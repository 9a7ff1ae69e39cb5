// --trace-groups: which GPU groups a trace shows.
#include "trace_groups.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <stdexcept>

namespace strata::cli {

void set_trace_groups(const std::string& text, SimulationOptions& o) {
    if (text.empty()) return;
    auto fail = [&](const std::string& why) {
        throw InputError(
            "--trace-groups '" + text + "': " + why +
            "; expected comma-separated stages=A[-B] and replicas=A[-B], e.g. 'stages=0-3,replicas=0'");
    };
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos) fail("'" + item + "' has no '='");
        const std::string key = item.substr(0, eq), range = item.substr(eq + 1);
        int lo = 0, hi = 0;
        const std::size_t dash = range.find('-');
        try {
            std::size_t used = 0;
            lo = std::stoi(range.substr(0, dash), &used);
            if (used != range.substr(0, dash).size()) fail("'" + range + "' is not a number or range");
            hi = lo;
            if (dash != std::string::npos) {
                hi = std::stoi(range.substr(dash + 1), &used);
                if (used != range.size() - dash - 1) fail("'" + range + "' is not a number or range");
            }
        } catch (const std::logic_error&) {
            fail("'" + range + "' is not a number or range");
        }
        if (lo < 0 || hi < lo) fail("'" + range + "' is not a range A-B with 0 <= A <= B");
        if (key == "stages") {
            o.trace_first_stage = lo;
            o.trace_last_stage = hi;
        } else if (key == "replicas") {
            o.trace_first_replica = lo;
            o.trace_last_replica = hi;
        } else {
            fail("unknown key '" + key + "' (valid: stages, replicas)");
        }
        at = comma + 1;
    }
}

}  // namespace strata::cli
