// `strata search`'s human-readable report.
#include "search_report.hpp"

#include "strata/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

namespace strata::cli {

namespace {
/// From this sequence length on, the report notes that context parallelism is searched only when asked.
constexpr int kLongSequence = 16384;
}  // namespace

bool print_search(std::ostream& human, const SearchRequest& req, const SearchResult& r,
                  const std::vector<std::string>& fix, int top, double margin_pct, bool attention_by_default) {
    human << fmt::format("search: {} on {} GPUs of {}, global batch {}\n", req.model.name, req.gpus, req.system.name,
                         req.global_batch);
    std::string constraints;
    for (const std::string& f : fix) constraints += " " + f;
    if (!constraints.empty()) human << "constraints:" << constraints << "\n";
    const ExecutionSpec& b = req.base;
    human << fmt::format("every candidate: attention {}, precision {}, gradient average {}, gradients reduced in {}\n",
                         to_string(b.attention), to_string(b.precision), to_string(b.gradient_average),
                         b.fp32_gradients() ? "fp32" : "16 bits");
    if (attention_by_default && b.attention == Attention::unfused && req.model.todays_kind())
        human << "note: attention unfused is the default (the paper's 2022 kernels, which store every s x s score, so "
                 "its selective\n  recompute pays); for a model of today's kind such as this one Megatron-Core with "
                 "Transformer Engine\n  runs fused attention: --attention flash\n";
    // Context parallelism is searched only when asked; at long sequences it is what holds the activations. The note's
    // suggestion: the powers of two up to 16 that divide the GPUs.
    const bool cp_named = std::any_of(
        fix.begin(), fix.end(), [](const std::string& f) { return f.find("context_parallel") != std::string::npos; });
    if (req.space.context_parallel == std::vector<int>{1} && !cp_named && req.model.seq_len >= kLongSequence) {
        std::string values = "1";
        for (int c = 2; c <= 16 && req.gpus % c == 0; c *= 2)
            values += fmt::format(",{}", c);
        human << fmt::format(
            "note: context parallelism is not searched unless asked (--fix context_parallel={}); "
            "at sequence {}\n  it divides the activations, which decide what fits\n",
            values, req.model.seq_len);
    }
    human << fmt::format(
        "{} configurations enumerated; {} fit in memory{} and were ranked by the analytical estimate\n", r.enumerated,
        r.screened,
        r.rejected.count(kDominated) ? ", less those recomputing or offloading more than another that fits," : "");
    for (const auto& [reason, count] : r.rejected) human << fmt::format("  rejected: {} x {}\n", count, reason);
    if (r.simulated.empty()) {
        std::cerr << "error: " << search_failure(req, r, !constraints.empty()) << "\n";
        return false;
    }
    human << fmt::format("simulated {} of {}: the best {} estimates and every other within {:g}% of the best estimate "
                         "({} within it), at most {}\n", r.simulated.size(), r.screened,
                         std::min<std::size_t>(r.screened, std::size_t(req.simulate_top)), margin_pct, r.within_margin,
                         std::max(req.simulate_top, req.simulate_max));
    if (r.within_margin > r.simulated.size())
        human << fmt::format("note: {} candidates are within the margin; only the best {} estimates were simulated "
                             "(raise --simulate-max, or narrow --margin)\n", r.within_margin, r.simulated.size());
    human << "t tensor, c context (when > 1), p pipeline, d data-parallel; m interleave (model chunks per stage), "
             "b microbatch;\nSP sequence parallelism, dopt distributed optimizer (fsdp: Megatron-FSDP), ogr "
             "overlap_grad_reduce; "
             "estim s the analytical screen, sim s simulated,\nerr% estimate vs simulated, est# rank by estimate; "
             "tok/s tokens per second, TF/s model TFLOP/s per GPU\n";
    const bool cp = std::any_of(r.simulated.begin(), r.simulated.end(), [](const auto& c) { return c.execution.context > 1; });
    const bool ends = std::any_of(r.simulated.begin(), r.simulated.end(),
                                  [](const auto& c) { return c.execution.split_counts_ends(); });
    if (ends)
        human << "split: the embedding (e) and / or the loss (l) counted as layers in the pipeline split "
                 "(account_for_*_in_pipeline_split), - none\n";
    // The split's column, where a candidate counts the embedding or the loss.
    auto split = [&](const ExecutionSpec& e) -> std::string {
        if (!ends) return "";
        const char* v = e.embedding_in_pipeline_split ? (e.loss_in_pipeline_split ? "e+l" : "e")
                                                      : (e.loss_in_pipeline_split ? "l" : "-");
        return fmt::format(" {:>5}", v);
    };
    // The recompute column: wide enough for a selective module set's label (sel:ln+mlp), with a legend where one shows.
    std::size_t rc_width = 9;
    bool modules_shown = false, norms_shown = false, block_shown = false;
    for (int i = 0; i < std::min<int>(top, int(r.simulated.size())); ++i) {
        const ExecutionSpec& e = r.simulated[std::size_t(i)].execution;
        const std::string label = recompute_label(e);
        rc_width = std::max(rc_width, label.size());
        modules_shown = modules_shown || label.rfind("sel:", 0) == 0;
        block_shown = block_shown || label.rfind("block:", 0) == 0;
        norms_shown = norms_shown || e.recompute_modules_in_force().layernorm;
    }
    if (block_shown)
        human
            << "block:K full recompute of the first K layers of each model chunk (recompute_method block), the fewest "
               "that fit\n";
    if (modules_shown)
        human << "recompute sel:X selective recompute of the modules X (attn the attention core, ln the norms, mlp the "
                 "whole MLP);\n  selective alone: the attention core (the paper's)\n";
    // The searched switches the fixed columns leave out, each given a column where the simulated candidates differ
    // in it (otherwise two rows could read the same).
    struct Switch {
        const char* column;
        const char* legend;
        bool (*on)(const ExecutionSpec&);
    };
    static constexpr Switch switches[] = {
        {"opg", "overlap_param_gather", [](const ExecutionSpec& e) { return e.overlap_param_gather; }},
        {"tpo", "tp_comm_overlap", [](const ExecutionSpec& e) { return e.tp_comm_overlap; }},
        {"off", "offload_modules: activations offloaded to host memory (JSON: which modules)",
         [](const ExecutionSpec& e) { return e.offload_modules.any(); }}};
    std::vector<const Switch*> shown;
    for (const Switch& w : switches)
        if (std::any_of(r.simulated.begin(), r.simulated.end(),
                        [&](const auto& c) { return w.on(c.execution) != w.on(r.simulated.front().execution); })) {
            shown.push_back(&w);
            human << fmt::format("{} {}\n", w.column, w.legend);
        }
    auto switch_columns = [&](const ExecutionSpec* e) {
        std::string out;
        for (const Switch* w : shown) out += fmt::format(" {:>3}", e == nullptr ? w->column : w->on(*e) ? "on" : "off");
        return out;
    };
    human << fmt::format(
        "{:>4} {:>3}{} {:>3} {:>4} {:>2} {:>2} {:>9} {:>3} {:>4} {:>3}{} {:>9} {:>9} {:>6} {:>4} {:>9} {:>6} "
        "{:>6} {:>8}\n",
        "rank", "t", cp ? fmt::format(" {:>3}", "c") : "", "p", "d",
        fmt::format("{:>2}{}", "m", ends ? fmt::format(" {:>5}", "split") : ""), "b",
        fmt::format("{:>{}}", "recompute", rc_width), "SP", "dopt", "ogr", switch_columns(nullptr), "estim s", "sim s",
        "err%", "est#", "tok/s", "TF/s", "MFU%", "peak GiB");
    int rank = 0;
    for (const auto& c : r.simulated) {
        if (rank >= top) break;
        const auto& e = c.execution;
        const auto& it = *c.result.iteration;
        const Scenario& sc = c.result.scenario;
        human << fmt::format(
            "{:>4} {:>3}{} {:>3} {:>4} {:>2} {:>2} {:>9} {:>3} {:>4} {:>3}{} {:>9.3f} {:>9.3f} {:>+6.1f} {:>4} "
            "{:>9.0f} {:>6.1f} {:>6.1f} {:>8.2f}{}\n",
            ++rank, e.tensor, cp ? fmt::format(" {:>3}", e.context) : "", e.pipeline, e.data,
            fmt::format("{:>2}{}", e.interleave, split(e)), e.microbatch,
            fmt::format("{:>{}}", recompute_label(e), rc_width), e.sequence_parallel ? "on" : "off",
            e.fsdp                    ? "fsdp"
            : e.distributed_optimizer ? "on"
                                      : "off",
            e.overlap_grad_reduce ? "on" : "off", switch_columns(&e), c.estimate_s, it.iteration_time_s,
            100 * (c.estimate_s / it.iteration_time_s - 1), c.estimate_rank, tokens_per_s(sc, it),
            tflops_per_gpu(sc, it), 100 * it.mfu, it.peak_memory.gib(), it.oom ? "  OOM" : "");
    }
    if (const int by = screen_overturned(r)) {
        const auto best_estimate = std::find_if(r.simulated.begin(), r.simulated.end(),
                                                [](const auto& c) { return c.estimate_rank == 1; });
        human << fmt::format("screen ranking overturned: #{} by estimate is fastest simulated ({:.3f} s); the best "
                             "estimate simulated {:.3f} s, rank {}\n", by, r.simulated.front().result.iteration->iteration_time_s,
                             best_estimate->result.iteration->iteration_time_s, best_estimate - r.simulated.begin() + 1);
    } else {
        human << "screen ranking held at the top: the best estimate is also the fastest simulated\n";
    }
    if (r.best_in_full) {
        const double full = r.best_in_full->iteration->iteration_time_s;
        const double rep = r.simulated.front().result.iteration->iteration_time_s;
        human << fmt::format(
            "simulated with representative replicas (--replicas representative); rank 1 again with "
            "every GPU group: {:.3f} s ({:+.2f}% representative vs full)\n",
            full, 100 * (rep / full - 1));
    }
    if (norms_shown)
        human
            << "note: recomputing the norms (ln) needs Megatron-Core's local layers (transformer_impl local, the "
               "default in 16 bits\n  without tp_comm_overlap); Transformer Engine's layers, Megatron-Core's "
               "default transformer_impl, fuse each norm\n  into the next linear layer, where it cannot be recomputed: "
               "--set execution.transformer_impl=transformer_engine searches those\n";
    return true;
}

}  // namespace strata::cli
