// Configuration search (see include/strata/search.hpp).
//
// Screen: per-stage time per microbatch = layers per stage x (forward + backward) of the analytical layer
// model (tensor-parallel collectives included) plus the embedding / output layer; iteration estimate =
// (microbatches + (p - 1) / m) x that + data-parallel gradient reduction over the NIC rails + optimizer.
// The screen only orders candidates; the reported times are simulated.
#include "strata/search.hpp"

#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace strata {

namespace {

double estimate(const Scenario& sc, const CostModel& cost) {
    const ExecutionSpec& e = sc.execution;
    const LayerConfig lc = layer_config(sc.model, e);
    const LayerPlan layer = build_layer(lc);
    const double per_layer = (cost.pass_time(layer.forward, e.tensor) + cost.pass_time(layer.backward, e.tensor)).seconds();
    const OutputPlan out = build_output(lc);
    const double output = (cost.pass_time(out.forward, e.tensor) + cost.pass_time(out.backward, e.tensor)).seconds();
    const int layers_per_stage = sc.model.layers / e.pipeline;
    const double stage = layers_per_stage * per_layer + (e.pipeline == 1 ? output : output / 2);
    const double n = e.microbatches();
    double t = (n + double(e.pipeline - 1) / e.interleave) * stage;
    const double params = parameters_on_stage(sc.model, e, 0);
    const BytesPerParam bpp = bytes_per_param(e);
    if (e.data > 1) {
        const double grads = params * bpp.gradients;
        const double bw = e.tensor * e.pipeline * e.data > sc.system.gpus_per_node ? sc.system.network.nic_bandwidth.value
                                                                                  : sc.system.network.nvlink_bandwidth.value;
        t += 2.0 * (e.data - 1) / e.data * grads / bw;
    }
    t += sc.system.optimizer_step_seconds(params / (e.distributed_optimizer ? e.data : 1), e.precision);
    return t;
}

std::vector<int> divisors(int n) {
    std::vector<int> d;
    for (int i = 1; i <= n; ++i)
        if (n % i == 0) d.push_back(i);
    return d;
}

}  // namespace

SearchResult search(const SearchRequest& req) {
    if (req.gpus <= 0) throw InputError("search: --gpus must be positive");
    if (req.global_batch <= 0) throw InputError("search: --global-batch must be positive");
    if (req.base.attention == Attention::flash && req.system.device.flash_forward_efficiency <= 0)
        throw InputError("search: --attention flash needs a flash_attention block in the device profile " + req.system.device.file);
    if (req.base.precision == Precision::fp8 && req.system.device.peak_flops_fp8 <= 0)
        throw InputError("search: --precision fp8 needs device.peak_flops_fp8 in the device profile " + req.system.device.file);
    const auto t0 = std::chrono::steady_clock::now();
    SearchResult res;
    const CostModel cost(req.system.device);
    auto candidate = [&](const ExecutionSpec& e) {
        Scenario sc;
        sc.name = "candidate";
        sc.model = req.model;
        sc.system = req.system;
        sc.execution = e;
        return sc;
    };
    std::vector<SearchCandidate> fits;
    const Recompute policies[] = {Recompute::none, Recompute::selective, Recompute::full};
    for (int t : divisors(req.gpus)) {
        if (t > req.system.gpus_per_node) break;
        for (int p : divisors(req.gpus / t)) {
            if (p > req.model.layers) break;
            const int d = req.gpus / (t * p);
            for (int m = 1; m <= std::max(1, req.max_interleave); ++m) {
                for (int b : req.microbatches) {
                    for (Recompute rc : policies) {
                        for (int sp = 0; sp <= (t > 1 ? 1 : 0); ++sp) {
                            for (int dopt = 0; dopt <= (d > 1 ? 1 : 0); ++dopt) {
                                ++res.enumerated;
                                Scenario sc = candidate(req.base);
                                ExecutionSpec& e = sc.execution;
                                e.tensor = t;
                                e.pipeline = p;
                                e.data = d;
                                e.interleave = m;
                                e.schedule = m > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
                                e.microbatch = b;
                                e.global_batch = req.global_batch;
                                e.recompute = rc;
                                e.sequence_parallel = sp == 1;
                                e.distributed_optimizer = dopt == 1;
                                try {
                                    validate(sc);
                                } catch (const InputError&) {
                                    ++res.rejected["infeasible sizes (divisibility, schedule)"];
                                    continue;
                                }
                                if (!estimate_memory(sc.model, sc.execution, sc.system.device_memory()).fits()) {
                                    ++res.rejected["out of memory (analytical)"];
                                    continue;
                                }
                                fits.push_back({e, estimate(sc, cost), {}});
                            }
                        }
                    }
                }
            }
        }
    }
    res.screened = fits.size();
    std::stable_sort(fits.begin(), fits.end(), [](const auto& a, const auto& b) { return a.estimate_s < b.estimate_s; });
    const std::size_t k = std::min<std::size_t>(fits.size(), std::size_t(std::max(0, req.simulate_top)));
    fits.resize(k);
    std::vector<Scenario> chosen;
    chosen.reserve(k);
    for (const auto& f : fits) chosen.push_back(candidate(f.execution));
    const RunOutcome run = req.runner ? req.runner(chosen, CaseOptions{})
                                      : run_cases(chosen, CaseOptions{}, req.jobs > 0 ? unsigned(req.jobs) : 0u, req.progress);
    for (std::size_t i = 0; i < k; ++i) {
        fits[i].result = run.results[i];
        if (fits[i].result.iteration) continue;
        const std::string what = "search: a simulated candidate failed: " + fits[i].result.error.value_or("not simulated");
        if (run.failures & kCaseSimulation) throw SimulationError(what);
        throw InputError(what);
    }
    std::stable_sort(fits.begin(), fits.end(), [](const auto& a, const auto& b) {
        const bool ao = a.result.iteration->oom, bo = b.result.iteration->oom;
        if (ao != bo) return !ao;
        return a.result.iteration->iteration_time_s < b.result.iteration->iteration_time_s;
    });
    res.simulated = std::move(fits);
    res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

std::vector<CaseResult> ranked_results(const SearchResult& result, int top) {
    std::vector<CaseResult> out;
    for (const auto& c : result.simulated) {
        if (int(out.size()) >= top) break;
        out.push_back(c.result);
        out.back().scenario.name = "rank " + std::to_string(out.size());
    }
    return out;
}

}  // namespace strata
