// Configuration search (see include/strata/search.hpp): the candidates each layout enumerates, screened by the
// analytical estimate (estimate.cpp), the best simulated.
#include "strata/search.hpp"

#include "estimate.hpp"

#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/simulate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace strata {

namespace {

std::vector<int> divisors(int n) {
    std::vector<int> d;
    for (int i = 1; i <= n; ++i)
        if (n % i == 0) d.push_back(i);
    return d;
}

bool allowed(const std::vector<int>& values, int v) {
    return values.empty() || std::binary_search(values.begin(), values.end(), v);
}

/// Whether a policy recomputes strictly more than another, by their parts: none 0, selective its module bits (core_attn
/// 1, layernorm 2, mlp 4), full every layer 15, block:K 16 + K. Every policy recomputes more than none and full more
/// than every other; a module set more than its subsets; block:K more than block:K' for K > K'; selective and block
/// are not comparable (all layers in part against some layers whole).
bool recomputes_more(int a, int b) {
    if (a == b || a == 0) return false;
    if (b == 0 || a == 15) return true;
    if (b == 15) return false;
    if (a >= 16 && b >= 16) return a > b;
    if (a >= 16 || b >= 16) return false;
    return (a & b) == b;
}

/// The name of the candidate (messages name it if it fails): its execution keys.
std::string describe(const ExecutionSpec& e) {
    std::string s = fmt::format("t={} p={} d={}", e.tensor, e.pipeline, e.data);
    if (e.context > 1) s += fmt::format(" c={}", e.context);
    s += fmt::format(" m={} b={} recompute={}", e.interleave, e.microbatch, recompute_label(e));
    if (e.sequence_parallel) s += " SP";
    if (e.distributed_optimizer) s += e.fsdp ? " fsdp" : " dopt";
    if (e.overlap_grad_reduce) s += " overlap_grad_reduce";
    if (e.overlap_param_gather) s += " overlap_param_gather";
    if (e.tp_comm_overlap) s += " tp_comm_overlap";
    if (e.embedding_in_pipeline_split && e.loss_in_pipeline_split) s += " split+embedding+loss";
    else if (e.embedding_in_pipeline_split) s += " split+embedding";
    else if (e.loss_in_pipeline_split) s += " split+loss";
    return s;
}

}  // namespace

std::size_t simulation_count(const std::vector<double>& estimates, int top, double margin, int max) {
    const std::size_t n = estimates.size();
    const std::size_t at_least = std::min(n, std::size_t(std::max(0, top)));
    if (n == 0) return 0;
    const double bound = estimates.front() * (1 + std::max(0.0, margin));
    const auto within = std::size_t(std::upper_bound(estimates.begin(), estimates.end(), bound) - estimates.begin());
    const std::size_t cap = std::size_t(std::max({0, top, max}));
    return std::max(at_least, std::min(within, cap));
}

int screen_overturned(const SearchResult& result) {
    if (result.simulated.empty()) return 0;
    const int r = result.simulated.front().estimate_rank;
    return r > 1 ? r : 0;
}

SearchResult search(const SearchRequest& req) {
    if (req.gpus <= 0) throw InputError("search: --gpus must be positive");
    if (req.global_batch <= 0) throw InputError("search: --global-batch must be positive");
    if (fused_attention(req.base.attention) && !req.system.device.has_flash_attention())
        throw InputError(std::string("search: --attention ") + to_string(req.base.attention) +
                         " needs a flash_attention block in the device profile " + req.system.device.file);
    // Without this every candidate would fail validation and the search would end with none, the reason unsaid.
    if (req.base.attention == Attention::flash2 && !req.system.device.has_flash2())
        throw InputError("search: --attention flash2 needs flash_attention.flash2_forward_ratio and flash2_backward_ratio "
                         "in the device profile " + req.system.device.file);
    if (req.base.precision == Precision::fp8 && req.system.device.peak_flops_fp8 <= 0)
        throw InputError("search: --precision fp8 needs device.peak_flops_fp8 in the device profile " + req.system.device.file);
    const auto t0 = std::chrono::steady_clock::now();
    SearchResult res;
    const CostModel cost(req.system.device);
    const SearchSpace& sp = req.space;
    auto candidate = [&](const ExecutionSpec& e) {
        Scenario sc;
        sc.name = describe(e);
        sc.source = req.source;
        sc.model = req.model;
        sc.system = req.system;
        sc.execution = e;
        return sc;
    };
    // The values of a boolean key that apply: true only where `applies`.
    auto values = [](const std::vector<bool>& v, bool applies) {
        std::vector<bool> out;
        for (bool b : v)
            if (!b || applies) out.push_back(b);
        return out;
    };
    // The data-parallel sharding tried: (distributed optimizer, Megatron-FSDP) pairs; FSDP runs its own overlaps
    // (`on`).
    const std::vector<bool> on = {true};
    auto sharding = [&](bool replicated, int p) {
        std::vector<std::pair<bool, bool>> out;
        for (bool dopt : values(sp.distributed_optimizer, replicated))
            for (bool fsdp : values(sp.fsdp, dopt && replicated && p == 1))
                out.emplace_back(dopt, fsdp);
        return out;
    };
    // How the layers split over `chunks` model chunks: evenly (off), or (on, only where the even split does not divide)
    // with the embedding and the loss counted as layers, or one of them (both ways tried).
    struct Split {
        bool embedding = false, loss = false;
    };
    auto splits = [&](int chunks) {
        const int L = req.model.layers;
        std::vector<Split> out;
        for (bool ends : values(sp.ends_in_split, L % chunks != 0)) {
            if (!ends) out.push_back({});
            else if ((L + 2) % chunks == 0) out.push_back({true, true});
            else if ((L + 1) % chunks == 0) {
                out.push_back({true, false});
                out.push_back({false, true});
            }
        }
        return out;
    };
    // What a candidate recomputes (recomputes_more): none 0, selective its modules (core_attn 1, layernorm 2, mlp 4),
    // full every bit (it re-runs all the layer's forward, those modules included); block:K 16 + K.
    struct Policy {
        Recompute recompute;
        RecomputeModules modules;
        int parts;
    };
    // A module set asked for alone asks for selective recompute alone; asked for with a recompute that leaves
    // selective out, it could apply to nothing.
    const bool selective_only = sp.modules_fixed && !sp.recompute_fixed;
    if (sp.modules_fixed && sp.recompute_fixed &&
        std::find(sp.recompute.begin(), sp.recompute.end(), Recompute::selective) == sp.recompute.end())
        throw InputError(
            "search: --fix recompute_modules applies to selective recompute, which the --fix recompute "
            "given leaves out; add selective to it, or leave recompute_modules unfixed");
    if (std::find(sp.fsdp.begin(), sp.fsdp.end(), true) != sp.fsdp.end() &&
        std::find(sp.distributed_optimizer.begin(), sp.distributed_optimizer.end(), true) == sp.distributed_optimizer.end())
        throw InputError("search: --fix fsdp=on needs the distributed optimizer, which the --fix distributed_optimizer "
                         "given leaves out (Megatron-FSDP steps it over the shards); add on to it");
    const bool try_block = sp.block_recompute && !selective_only;
    std::vector<Policy> policies;
    for (Recompute rc : sp.recompute) {
        if (selective_only && rc != Recompute::selective) continue;
        if (rc != Recompute::selective)
            policies.push_back({rc, {}, rc == Recompute::none ? 0 : 15});
        else
            for (const RecomputeModules& m : sp.recompute_modules)
                policies.push_back({rc, m, recompute_modules_index(m)});
    }
    std::vector<SearchCandidate> fits;
    std::vector<int> fit_parts;    // each one's Policy::parts (block:K 16 + K)
    std::vector<int> fit_offload;  // each one's offload_modules_index
    // A candidate kept if its sizes fit together and its memory fits the device, with its estimate.
    auto screen = [&](const ExecutionSpec& e, int parts) {
        ++res.enumerated;
        const Scenario sc = candidate(e);
        if (const std::optional<SpecProblem> problem = find_problem(sc)) {
            const std::string where = problem->part + "." + problem->key;
            if (res.first_infeasible.empty()) res.first_infeasible = sc.source + ": " + where + ": " + problem->message;
            // Sizes and switches the search varies do not fit together; a key it holds fixed (--set, --precision, ...)
            // that a candidate cannot run with is named, so that its count does not read as sizes.
            // The keys set from what the search varies (search_keys) besides their own names.
            static const std::set<std::string, std::less<>> derived = {
                "schedule", "global_batch", "recompute_layers", "recompute_method", "first_stage_layers",
                "last_stage_layers", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"};
            const auto& keys = search_keys();
            const bool varied =
                std::any_of(keys.begin(), keys.end(), [&](const SearchKey& k) { return problem->key == k.name; });
            // A module set the candidate's layers cannot recompute (layernorm under Transformer Engine) is named too, and
            // so is what Megatron-FSDP is not modelled with (FP8 without FP8 parameters, offloading).
            const bool sizes = problem->part != "execution" ||
                               (varied && problem->key != "recompute_modules" && problem->key != "offload_modules" &&
                                problem->key != "fsdp") ||
                               derived.count(problem->key) > 0;
            ++res.rejected[sizes ? std::string("infeasible sizes (divisibility, schedule)")
                                 : "incompatible with " + where + " (" + problem->message + ")"];
            return;
        }
        if (!estimate_memory(sc.model, sc.execution, sc.system.device_memory()).fits()) {
            ++res.rejected["out of memory (analytical)"];
            return;
        }
        fits.push_back({e, search_detail::estimate(sc, cost), 0, {}});
        fit_parts.push_back(parts);
        // What it offloads in effect: a recomputed attention core leaves its group nothing to copy (offload_of), so
        // recomputing it can be faster than copying its tensors, and dominance must not compare it as copying them.
        OffloadModules effective = e.offload_modules;
        if (e.recompute == Recompute::selective && e.recompute_modules.core_attn) effective.core_attn = false;
        fit_offload.push_back(offload_modules_index(effective));
    };
    // One layout (every key but what it recomputes) under each policy; those that fit and recompute a strict superset
    // of what another that fits recomputes are dropped: the same work and more, never faster.
    // Transformer Engine's layers fuse the norms into the linear layers, and its own TransformerLayer checkpoints only
    // the attention core: unless --fix asked for them (then they are tried, and rejected with the reason), the module
    // sets such layers cannot run are not tried.
    // Block recompute of a layout: where full recompute of every layer fits and no recompute does not, the fewest
    // first layers per model chunk, K, that fit (memory falls as K grows; fewer recompute less), found by bisection
    // (the trials are not counted; the one found is screened as a candidate).
    auto fits_in_memory = [&](const ExecutionSpec& x) {
        const Scenario sc = candidate(x);
        return !find_problem(sc) && estimate_memory(sc.model, sc.execution, sc.system.device_memory()).fits();
    };
    // Where --fix names block, a layout it is not tried on is counted, with why (the default search counts none).
    const bool count_untried_block = sp.recompute_fixed && sp.block_recompute;
    auto untried_block = [&](const char* why) {
        if (!count_untried_block) return;
        ++res.enumerated;
        ++res.rejected[std::string("block recompute not tried: ") + why];
    };
    auto screen_block = [&](const ExecutionSpec& e) {
        ExecutionSpec none = e, full = e;
        none.recompute = Recompute::none;
        full.recompute = Recompute::full;
        full.offload_modules = OffloadModules{};  // sizes first: block is full recompute, which offloading refuses
        if (find_problem(candidate(full))) return untried_block("infeasible sizes (divisibility, schedule)");
        if (e.offload_modules.any()) return untried_block("offloading does not run with full recompute");
        if (!fits_in_memory(full)) return untried_block("not even full recompute of every layer fits");
        if (fits_in_memory(none)) return untried_block("no recompute fits (there is nothing to recompute)");
        // K at most every stage's largest chunk (find_problem) and below the largest chunk of all (K of it is full).
        int most = req.model.layers, largest_of_all = 0;
        for (int st = 0; st < e.pipeline; ++st) {
            int largest = 0;
            for (int chunk = 0; chunk < e.interleave; ++chunk)
                largest = std::max(largest, e.layers_in_chunk(req.model.layers, chunk * e.pipeline + st));
            most = std::min(most, largest);
            largest_of_all = std::max(largest_of_all, largest);
        }
        most = std::min(most, largest_of_all - 1);
        ExecutionSpec b = full;
        b.recompute_method = RecomputeMethod::block;
        int lo = 1, hi = most + 1;  // the fewest K in [1, most] that fit; most + 1: none does
        while (lo < hi) {
            b.recompute_layers = lo + (hi - lo) / 2;
            if (fits_in_memory(b))
                hi = b.recompute_layers;
            else
                lo = b.recompute_layers + 1;
        }
        if (lo > most) return untried_block("only full recompute of every layer fits");
        b.recompute_layers = lo;
        screen(b, 16 + lo);
    };
    auto screen_policies = [&](ExecutionSpec e) {
        const std::size_t first = fits.size();
        for (const OffloadModules& offload : sp.offload_modules) {
            e.offload_modules = offload;
            for (const Policy& policy : policies) {
                if (!sp.modules_fixed && policy.recompute == Recompute::selective && !e.can_recompute(policy.modules))
                    continue;
                ExecutionSpec x = e;
                x.recompute = policy.recompute;
                x.recompute_modules = policy.modules;
                screen(x, policy.parts);
            }
            if (try_block) screen_block(e);
        }
        // Dominated: as much recompute and offloading as another that fits, and more of one (offloading's copies
        // only ever add time).
        std::vector<bool> dominated(fits.size() - first, false);
        for (std::size_t a = first; a < fits.size(); ++a)
            for (std::size_t b = first; b < fits.size(); ++b) {
                const bool offloads_as_much = (fit_offload[a] & fit_offload[b]) == fit_offload[b];
                const bool recomputes_as_much =
                    fit_parts[a] == fit_parts[b] || recomputes_more(fit_parts[a], fit_parts[b]);
                if (offloads_as_much && recomputes_as_much &&
                    (fit_offload[a] != fit_offload[b] || fit_parts[a] != fit_parts[b]))
                    dominated[a - first] = true;
            }
        std::size_t kept = first;
        for (std::size_t a = first; a < fits.size(); ++a) {
            if (dominated[a - first]) {
                ++res.rejected[kDominated];
                continue;
            }
            if (kept != a) {
                fits[kept] = std::move(fits[a]);
                fit_parts[kept] = fit_parts[a];
                fit_offload[kept] = fit_offload[a];
            }
            ++kept;
        }
        fits.resize(kept);
        fit_parts.resize(kept);
        fit_offload.resize(kept);
    };
    for (int t : divisors(req.gpus)) {
        if (t > req.system.gpus_per_node) break;
        if (!allowed(sp.tensor, t)) continue;
        for (int c : sp.context_parallel) {
            if ((req.gpus / t) % c != 0) continue;
            for (int p : divisors(req.gpus / (t * c))) {
                if (p > req.model.layers) break;
                const int d = req.gpus / (t * c * p);
                if (!allowed(sp.pipeline, p) || !allowed(sp.data, d)) continue;
                const bool replicated = d * c > 1;
                for (int m : sp.interleave) {
                    for (const Split split : splits(p * m)) {
                        for (int b : sp.microbatch) {
                            for (bool seq : values(sp.sequence_parallel, t > 1)) {
                                for (const auto& [dopt, fsdp] : sharding(replicated, p)) {
                                    for (bool ogr : fsdp ? on : values(sp.overlap_grad_reduce, replicated)) {
                                        for (bool opg : fsdp ? on : values(sp.overlap_param_gather, dopt)) {
                                            for (bool tpo : values(sp.tp_comm_overlap, t > 1 && seq)) {
                                                ExecutionSpec e = req.base;
                                                e.tensor = t;
                                                e.context = c;
                                                e.pipeline = p;
                                                e.data = d;
                                                e.interleave = m;
                                                e.schedule = m > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
                                                e.microbatch = b;
                                                e.global_batch = req.global_batch;
                                                e.sequence_parallel = seq;
                                                e.distributed_optimizer = dopt;
                                                e.fsdp = fsdp;
                                                // FP8 under Megatron-FSDP gathers FP8 parameters (find_problem).
                                                if (fsdp && e.precision == Precision::fp8) e.fp8_param_gather = true;
                                                e.overlap_grad_reduce = ogr;
                                                e.overlap_param_gather = opg;
                                                e.tp_comm_overlap = tpo;
                                                e.embedding_in_pipeline_split = split.embedding;
                                                e.loss_in_pipeline_split = split.loss;
                                                // What full recompute covers is the search's too (block).
                                                e.recompute_layers = 0;
                                                e.recompute_method = RecomputeMethod::uniform;
                                                screen_policies(e);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    res.screened = fits.size();
    std::stable_sort(fits.begin(), fits.end(), [](const auto& a, const auto& b) { return a.estimate_s < b.estimate_s; });
    std::vector<double> estimates;
    estimates.reserve(fits.size());
    for (std::size_t i = 0; i < fits.size(); ++i) {
        fits[i].estimate_rank = int(i + 1);
        estimates.push_back(fits[i].estimate_s);
    }
    res.within_margin = simulation_count(estimates, 0, req.margin, int(fits.size()));
    const std::size_t k = simulation_count(estimates, req.simulate_top, req.margin, req.simulate_max);
    fits.resize(k);
    std::vector<Scenario> chosen;
    chosen.reserve(k);
    for (const auto& f : fits) chosen.push_back(candidate(f.execution));
    CaseOptions options;
    options.simulation.max_tasks = req.max_tasks;
    options.simulation.max_tasks_option = req.max_tasks_option;
    options.simulation.representative_replicas = req.representative_replicas;
    // Simulates `cases` (through the request's runner when it has one); a case that did not simulate throws as the
    // simulation would, the message naming the step (`what`).
    auto simulate_cases = [&](const std::vector<Scenario>& cases, unsigned jobs, const CaseProgress& progress,
                              const std::string& what) {
        RunOutcome out = req.runner ? req.runner(cases, options) : run_cases(cases, options, jobs, progress);
        for (const CaseResult& r : out.results) {
            if (r.iteration) continue;
            const std::string message = "search: " + what + ": " + r.error.value_or("not simulated");
            // A bug is neither the input's nor the simulation's.
            if (r.failure & kCaseInternal) throw std::logic_error(message);
            if (r.failure & kCaseSimulation) throw SimulationError(message);
            throw InputError(message);
        }
        return out;
    };
    const RunOutcome run = simulate_cases(chosen, req.jobs > 0 ? unsigned(req.jobs) : 0u, req.progress,
                                          "a simulated candidate failed");
    for (std::size_t i = 0; i < k; ++i) fits[i].result = run.results[i];
    std::stable_sort(fits.begin(), fits.end(), [](const auto& a, const auto& b) {
        const bool ao = a.result.iteration->oom, bo = b.result.iteration->oom;
        if (ao != bo) return !ao;
        return a.result.iteration->iteration_time_s < b.result.iteration->iteration_time_s;
    });
    for (std::size_t i = 0; i < fits.size(); ++i)
        fits[i].result.screen = ScreenRecord{fits[i].estimate_s, fits[i].estimate_rank, int(i + 1)};
    if (req.representative_replicas && !fits.empty() && !fits.front().result.iteration->oom &&
        fits.front().execution.data > 1) {
        // The winner once more with every GPU group: its exact time, and how far the representative one was.
        options.simulation.representative_replicas = false;
        const std::vector<Scenario> best{chosen[static_cast<std::size_t>(fits.front().estimate_rank - 1)]};
        res.best_in_full = simulate_cases(best, 1u, {}, "the best candidate failed to simulate in full").results.front();
    }
    res.simulated = std::move(fits);
    res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

std::string search_failure(const SearchRequest& req, const SearchResult& r, bool constrained) {
    if (!r.simulated.empty()) return {};
    const std::string what = fmt::format("no execution of {} on {} GPUs with global batch {}", req.model.name, req.gpus,
                                         req.global_batch);
    if (r.enumerated == 0)
        return what + fmt::format(": none to try (tensor x context x pipeline x data = the GPUs, tensor at most the {} GPUs "
                                  "per node, pipeline at most the {} layers{})", req.system.gpus_per_node, req.model.layers,
                                  constrained ? ", within the constraints" : "");
    std::string why;
    for (const auto& [reason, count] : r.rejected) why += fmt::format("{}{} x {}", why.empty() ? "" : ", ", count, reason);
    std::string out = what + " is feasible and fits in memory (rejected: " + why + (constrained ? "; within the constraints)" : ")");
    if (r.screened == 0 && !r.first_infeasible.empty()) out += "; the first infeasible candidate: " + r.first_infeasible;
    return out;
}

SearchSummary search_summary(const SearchRequest& req, const SearchResult& r, const std::vector<std::string>& constraints) {
    SearchSummary s;
    s.gpus = req.gpus;
    s.global_batch = req.global_batch;
    s.constraints = constraints;
    s.enumerated = r.enumerated;
    s.rejected.assign(r.rejected.begin(), r.rejected.end());
    s.screened = r.screened;
    s.margin = req.margin;
    s.within_margin = r.within_margin;
    s.simulate_top = req.simulate_top;
    s.simulate_max = req.simulate_max;
    s.simulated = r.simulated.size();
    s.overturned_by = screen_overturned(r);
    s.representative_replicas = req.representative_replicas;
    if (r.best_in_full) s.best_in_full_s = r.best_in_full->iteration->iteration_time_s;
    return s;
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
