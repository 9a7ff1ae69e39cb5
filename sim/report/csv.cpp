// Renders case results as CSV (RFC 4180): every execution and system quantity a case can vary, then the results.
#include "strata/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace strata {

namespace {

/// A CSV field, quoted as RFC 4180 asks: in double quotes (inner quotes doubled) when it holds a comma, a quote,
/// or a line break; as is otherwise.
std::string csv_field(const std::string& v) {
    if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
    std::string out = "\"";
    for (char c : v) {
        if (c == '"') out += '"';
        out += c;
    }
    return out + '"';
}

std::string csv_bool(bool b) { return b ? "true" : "false"; }

/// A list of names as one cell, space-separated.
std::string spaced(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& m : names) out += (out.empty() ? "" : " ") + m;
    return out;
}

/// A number as its shortest text, and a column reading the case's network: shared by the two column lists.
constexpr auto num = [](auto v) { return fmt::format("{}", v); };
constexpr auto net = [](auto f) { return [f](const CaseResult& r) { return f(r.scenario.system.network); }; };

/// The CSV's columns: every execution and system quantity a case can vary, then the results.
struct CsvColumn {
    const char* name;
    std::function<std::string(const CaseResult&)> value;  ///< empty string: no value (failed case, not simulated)
};

const std::vector<CsvColumn>& csv_columns() {
    static const std::vector<CsvColumn> columns = [] {
        auto exec = [](auto f) { return [f](const CaseResult& r) { return f(r.scenario.execution); }; };
        std::vector<CsvColumn> c;
        c.push_back({"name", [](const CaseResult& r) { return r.scenario.name; }});
        c.push_back({"model", [](const CaseResult& r) { return r.scenario.model.name; }});
        c.push_back({"system", [](const CaseResult& r) { return r.scenario.system.name; }});
        c.push_back({"device_profile", [](const CaseResult& r) { return r.scenario.system.device.name; }});
        c.push_back({"gpus", exec([](const ExecutionSpec& e) { return num(e.gpus()); })});
        c.push_back({"tensor", exec([](const ExecutionSpec& e) { return num(e.tensor); })});
        c.push_back({"context_parallel", exec([](const ExecutionSpec& e) { return num(e.context); })});
        c.push_back({"pipeline", exec([](const ExecutionSpec& e) { return num(e.pipeline); })});
        c.push_back({"data", exec([](const ExecutionSpec& e) { return num(e.data); })});
        c.push_back({"interleave", exec([](const ExecutionSpec& e) { return num(e.interleave); })});
        c.push_back({"schedule", exec([](const ExecutionSpec& e) { return std::string(to_string(e.schedule)); })});
        c.push_back({"sequence_parallel", exec([](const ExecutionSpec& e) { return csv_bool(e.sequence_parallel); })});
        c.push_back({"recompute", exec([](const ExecutionSpec& e) { return std::string(to_string(e.recompute)); })});
        c.push_back({"recompute_modules",
                     exec([](const ExecutionSpec& e) { return spaced(names_of(e.recompute_modules_in_force())); })});
        c.push_back({"offload_modules", exec([](const ExecutionSpec& e) { return spaced(names_of(e.offload_modules)); })});
        c.push_back({"recompute_layers", exec([](const ExecutionSpec& e) { return num(e.recompute_layers); })});
        c.push_back({"recompute_method",
                     exec([](const ExecutionSpec& e) { return std::string(to_string(e.recompute_method)); })});
        c.push_back({"microbatch", exec([](const ExecutionSpec& e) { return num(e.microbatch); })});
        c.push_back({"global_batch", exec([](const ExecutionSpec& e) { return num(e.global_batch); })});
        c.push_back({"precision", exec([](const ExecutionSpec& e) { return std::string(to_string(e.precision)); })});
        c.push_back({"attention", exec([](const ExecutionSpec& e) { return std::string(to_string(e.attention)); })});
        c.push_back({"cross_entropy", exec([](const ExecutionSpec& e) { return std::string(to_string(e.cross_entropy)); })});
        c.push_back({"transformer_impl", exec([](const ExecutionSpec& e) {
                         return std::string(to_string(e.transformer_impl_in_force()));
                     })});
        c.push_back({"fp8_recipe", exec([](const ExecutionSpec& e) { return std::string(to_string(e.fp8_recipe)); })});
        c.push_back({"fp8_scale_update",
                     exec([](const ExecutionSpec& e) { return std::string(to_string(e.fp8_scale_update)); })});
        c.push_back({"fp8_param_gather", exec([](const ExecutionSpec& e) { return csv_bool(e.fp8_param_gather); })});
        c.push_back({"tp_only_amax_red", exec([](const ExecutionSpec& e) { return csv_bool(e.tp_only_amax_red); })});
        c.push_back({"embedding_reduce_scatter", exec([](const ExecutionSpec& e) { return csv_bool(e.embedding_reduce_scatter); })});
        c.push_back({"check_for_nan_in_grad", exec([](const ExecutionSpec& e) { return csv_bool(e.check_for_nan_in_grad); })});
        c.push_back({"fp32_embedding_grads", exec([](const ExecutionSpec& e) { return csv_bool(e.fp32_embedding_grads); })});
        c.push_back({"defer_embedding_wgrad_compute", exec([](const ExecutionSpec& e) { return csv_bool(e.defer_embedding_wgrad_compute); })});
        c.push_back({"wgrad_deferral_limit", exec([](const ExecutionSpec& e) { return std::to_string(e.wgrad_deferral_limit); })});
        c.push_back({"overlap_p2p_comm", exec([](const ExecutionSpec& e) { return csv_bool(e.overlap_p2p_comm); })});
        c.push_back({"p2p_pair_order", exec([](const ExecutionSpec& e) { return csv_bool(e.p2p_pair_order); })});
        c.push_back({"host_gap_forward_us", exec([](const ExecutionSpec& e) { return num(e.host_gap_forward.seconds() * 1e6); })});
        c.push_back({"host_gap_backward_us", exec([](const ExecutionSpec& e) { return num(e.host_gap_backward.seconds() * 1e6); })});
        c.push_back({"overlap_param_gather_with_optimizer_step",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.overlap_param_gather_with_optimizer_step); })});
        c.push_back({"grad_buckets", exec([](const ExecutionSpec& e) { return std::string(to_string(e.grad_buckets)); })});
        c.push_back({"bucket_size", exec([](const ExecutionSpec& e) { return num(e.bucket_size_in_force()); })});
        c.push_back({"distributed_optimizer",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.distributed_optimizer); })});
        c.push_back({"fsdp", exec([](const ExecutionSpec& e) { return csv_bool(e.fsdp); })});
        c.push_back({"overlap_grad_reduce",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.overlap_grad_reduce || e.fsdp); })});
        c.push_back({"overlap_param_gather",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.overlap_param_gather || e.fsdp); })});
        c.push_back({"gradient_average",
                     exec([](const ExecutionSpec& e) { return std::string(to_string(e.gradient_average)); })});
        c.push_back({"grad_reduce_in_fp32", exec([](const ExecutionSpec& e) { return csv_bool(e.fp32_gradients()); })});
        c.push_back({"tp_comm_overlap", exec([](const ExecutionSpec& e) { return csv_bool(e.tp_comm_overlap); })});
        c.push_back({"tp_overlap_proj_fprop",
                     exec([](const ExecutionSpec& e) { return std::string(to_string(e.tp_overlap_proj_fprop)); })});
        c.push_back({"tp_overlap_fc2_fprop",
                     exec([](const ExecutionSpec& e) { return std::string(to_string(e.tp_overlap_fc2_fprop)); })});
        c.push_back({"tp_overlap_num_sm", exec([](const ExecutionSpec& e) { return num_sm_text(e.tp_overlap_config); })});
        c.push_back({"tp_overlap_sm_margin",
                     exec([](const ExecutionSpec& e) { return spaced(overlap_names(e.tp_overlap_config.sm_margin)); })});
        c.push_back({"tp_overlap_aggregate",
                     exec([](const ExecutionSpec& e) { return spaced(overlap_names(e.tp_overlap_config.aggregate)); })});
        c.push_back({"tp_overlap_fp8_buf",
                     exec([](const ExecutionSpec& e) { return spaced(overlap_names(e.tp_overlap_config.fp8_buf)); })});
        c.push_back({"gradient_accumulation_fusion",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.gradient_accumulation_fusion); })});
        c.push_back({"async_tp_comm", exec([](const ExecutionSpec& e) { return csv_bool(e.async_tp_comm); })});
        c.push_back({"first_stage_layers", [](const CaseResult& r) {
                         return num(r.scenario.execution.layers_on_stage(r.scenario.model.layers, 0));
                     }});
        c.push_back({"last_stage_layers", [](const CaseResult& r) {
                         const ExecutionSpec& e = r.scenario.execution;
                         return num(e.layers_on_stage(r.scenario.model.layers, e.pipeline - 1));
                     }});
        c.push_back({"account_for_embedding_in_pipeline_split",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.embedding_in_pipeline_split); })});
        c.push_back({"account_for_loss_in_pipeline_split",
                     exec([](const ExecutionSpec& e) { return csv_bool(e.loss_in_pipeline_split); })});
        c.push_back({"nvlink_bandwidth_bytes_per_s",
                     net([](const NetworkSpec& n) { return fmt::format("{:g}", n.nvlink_bandwidth.value); })});
        c.push_back({"nic_bandwidth_bytes_per_s",
                     net([](const NetworkSpec& n) { return fmt::format("{:g}", n.nic_bandwidth.value); })});
        c.push_back({"rails", net([](const NetworkSpec& n) { return num(n.rails); })});
        c.push_back({"nodes_per_leaf", net([](const NetworkSpec& n) { return num(n.nodes_per_leaf); })});
        c.push_back({"oversubscription", net([](const NetworkSpec& n) { return fmt::format("{:g}", n.oversubscription); })});
        c.push_back({"tiers", net([](const NetworkSpec& n) { return num(n.tiers); })});
        c.push_back({"power_limit_w",
                     [](const CaseResult& r) { return fmt::format("{:g}", r.scenario.system.device.power.limit_w); }});
        c.push_back({"variation_gpu_sigma",
                     [](const CaseResult& r) { return fmt::format("{:g}", r.scenario.system.variation.gpu_sigma); }});
        c.push_back({"variation_seed", [](const CaseResult& r) { return num(r.scenario.system.variation.seed); }});
        // Results: empty for a failed case; the simulation's only when it ran.
        auto ok = [](auto f) { return [f](const CaseResult& r) { return r.error ? std::string() : f(r); }; };
        auto sim = [](auto f) {
            return [f](const CaseResult& r) { return r.error || !r.iteration ? std::string() : f(*r.iteration, r); };
        };
        c.push_back({"activation_bytes_per_layer", ok([](const CaseResult& r) { return num(r.memory.activation_per_layer.value); })});
        c.push_back({"activation_bytes_first_stage", ok([](const CaseResult& r) { return num(r.memory.activation_first_stage.value); })});
        c.push_back({"peak_bytes", ok([](const CaseResult& r) { return num(r.memory.peak_stage.total().value); })});
        c.push_back({"capacity_bytes", ok([](const CaseResult& r) { return num(r.memory.capacity.value); })});
        c.push_back({"fits", ok([](const CaseResult& r) { return csv_bool(r.memory.fits()); })});
        c.push_back({"forward_ms", ok([](const CaseResult& r) { return fmt::format("{:.4f}", r.layer.forward_ms); })});
        c.push_back({"backward_ms", ok([](const CaseResult& r) { return fmt::format("{:.4f}", r.layer.backward_ms); })});
        c.push_back({"iteration_time_s", sim([](const IterationResult& it, const CaseResult&) {
                         return fmt::format("{:.6f}", it.iteration_time_s);
                     })});
        c.push_back({"mfu", sim([](const IterationResult& it, const CaseResult&) { return fmt::format("{:.5f}", it.mfu); })});
        c.push_back({"hfu", sim([](const IterationResult& it, const CaseResult&) { return fmt::format("{:.5f}", it.hfu); })});
        c.push_back({"tokens_per_s", sim([](const IterationResult& it, const CaseResult& r) {
                         return fmt::format("{:.1f}", tokens_per_s(r.scenario, it));
                     })});
        c.push_back({"tflops_per_gpu", sim([](const IterationResult& it, const CaseResult& r) {
                         return fmt::format("{:.2f}", tflops_per_gpu(r.scenario, it));
                     })});
        c.push_back({"bubble_fraction",
                     sim([](const IterationResult& it, const CaseResult&) { return fmt::format("{:.5f}", it.bubble_fraction); })});
        c.push_back({"exposed_comm_s",
                     sim([](const IterationResult& it, const CaseResult&) { return fmt::format("{:.6f}", it.exposed_comm_s); })});
        c.push_back({"exposed_comm_tensor_s", sim([](const IterationResult& it, const CaseResult&) {
                         return fmt::format("{:.6f}", it.exposed_comm.tensor.seconds());
                     })});
        c.push_back({"exposed_comm_pipeline_s", sim([](const IterationResult& it, const CaseResult&) {
                         return fmt::format("{:.6f}", it.exposed_comm.pipeline.seconds());
                     })});
        c.push_back({"exposed_comm_data_parallel_s", sim([](const IterationResult& it, const CaseResult&) {
                         return fmt::format("{:.6f}", it.exposed_comm.data_parallel.seconds());
                     })});
        c.push_back({"host_gap_s", sim([](const IterationResult& it, const CaseResult&) {
                         return fmt::format("{:.6f}", it.host_gap.seconds());
                     })});
        c.push_back({"simulated_peak_bytes",
                     sim([](const IterationResult& it, const CaseResult&) { return fmt::format("{}", it.peak_memory.value); })});
        c.push_back({"oom", sim([](const IterationResult& it, const CaseResult&) { return csv_bool(it.oom); })});
        c.push_back({"error", [](const CaseResult& r) { return r.error ? *r.error : std::string(); }});
        return c;
    }();
    return columns;
}

/// A search's columns (only when some result has a screen record).
const std::vector<CsvColumn>& csv_screen_columns() {
    static const std::vector<CsvColumn> columns = [] {
        auto screen = [](auto f) { return [f](const CaseResult& r) { return r.screen ? f(*r.screen, r) : std::string(); }; };
        std::vector<CsvColumn> c;
        c.push_back({"estimate_s", screen([](const ScreenRecord& s, const CaseResult&) { return fmt::format("{:.6f}", s.estimate_s); })});
        c.push_back({"estimate_rank", screen([](const ScreenRecord& s, const CaseResult&) { return fmt::format("{}", s.estimate_rank); })});
        c.push_back({"simulated_rank", screen([](const ScreenRecord& s, const CaseResult&) { return fmt::format("{}", s.simulated_rank); })});
        c.push_back({"estimate_error", screen([](const ScreenRecord& s, const CaseResult& r) {
                         return r.iteration ? fmt::format("{:.5f}", estimate_error(s, *r.iteration)) : std::string();
                     })});
        return c;
    }();
    return columns;
}

/// Quantities a sweep or a list of cases can vary that have no column of their own above (model shape, the
/// system's latencies, capacity, optimizer costs): a column each, present only when the file's cases differ in it,
/// so that a file that does not vary them keeps its columns.
const std::vector<CsvColumn>& csv_varying_columns() {
    static const std::vector<CsvColumn> columns = [] {
        auto model = [](auto f) { return [f](const CaseResult& r) { return f(r.scenario.model); }; };
        auto sys = [](auto f) { return [f](const CaseResult& r) { return f(r.scenario.system); }; };
        auto us = [](Time t) { return fmt::format("{:g}", t.us()); };
        std::vector<CsvColumn> c;
        c.push_back({"model_layers", model([](const ModelSpec& m) { return num(m.layers); })});
        c.push_back({"model_hidden", model([](const ModelSpec& m) { return num(m.hidden); })});
        c.push_back({"model_heads", model([](const ModelSpec& m) { return num(m.heads); })});
        c.push_back({"model_kv_heads", model([](const ModelSpec& m) { return num(m.kv_heads); })});
        c.push_back({"model_ffn_hidden", model([](const ModelSpec& m) { return num(m.ffn_hidden); })});
        c.push_back({"model_seq_len", model([](const ModelSpec& m) { return num(m.seq_len); })});
        c.push_back({"model_vocab", model([](const ModelSpec& m) { return num(m.vocab); })});
        c.push_back({"gpus_per_node", sys([](const SystemSpec& y) { return num(y.gpus_per_node); })});
        c.push_back({"memory_capacity_bytes", sys([](const SystemSpec& y) { return num(y.memory_capacity.value); })});
        c.push_back({"memory_reserved_bytes", sys([](const SystemSpec& y) { return num(y.memory_reserved.value); })});
        c.push_back({"nvlink_latency_us", net([us](const NetworkSpec& n) { return us(n.nvlink_latency); })});
        c.push_back({"nic_latency_us", net([us](const NetworkSpec& n) { return us(n.nic_latency); })});
        c.push_back({"switch_latency_us", net([us](const NetworkSpec& n) { return us(n.switch_latency); })});
        c.push_back({"spines_per_rail", net([](const NetworkSpec& n) { return num(n.spines_per_rail); })});
        c.push_back({"routing", net([](const NetworkSpec& n) { return std::string(to_string(n.routing)); })});
        c.push_back({"collective_step_latency_intra_us",
                     net([us](const NetworkSpec& n) { return us(n.collective_step_latency_intra); })});
        c.push_back({"collective_step_latency_inter_us",
                     net([us](const NetworkSpec& n) { return us(n.collective_step_latency_inter); })});
        c.push_back({"hierarchical_collectives",
                     net([](const NetworkSpec& n) { return csv_bool(n.hierarchical_collectives); })});
        c.push_back({"p2p_latency_us", net([us](const NetworkSpec& n) { return us(n.p2p_latency); })});
        c.push_back({"nccl_channels_per_nic", net([](const NetworkSpec& n) { return num(n.nccl_channels_per_nic); })});
        c.push_back({"optimizer_bytes_per_param_step",
                     sys([](const SystemSpec& y) { return fmt::format("{:g}", y.optimizer.bytes_per_param_step); })});
        c.push_back({"optimizer_bytes_per_param_step_fp16",
                     sys([](const SystemSpec& y) { return fmt::format("{:g}", y.optimizer.bytes_per_param_step_fp16); })});
        c.push_back({"optimizer_fixed_overhead_ms",
                     sys([](const SystemSpec& y) { return fmt::format("{:g}", y.optimizer.fixed_overhead.ms()); })});
        c.push_back({"variation_span_sigma",
                     sys([](const SystemSpec& y) { return fmt::format("{:g}", y.variation.span_sigma); })});
        c.push_back({"variation_span_hold_ms",
                     sys([](const SystemSpec& y) { return fmt::format("{:g}", y.variation.span_hold.ms()); })});
        return c;
    }();
    return columns;
}

}  // namespace

std::string to_csv(const std::vector<CaseResult>& results) {
    std::ostringstream o;
    std::vector<CsvColumn> columns = csv_columns();
    // After the execution and system columns (before the results): what these cases vary that has no column above.
    const auto results_begin = std::find_if(columns.begin(), columns.end(),
                                            [](const CsvColumn& c) { return std::string(c.name) == "activation_bytes_per_layer"; });
    std::vector<CsvColumn> varying;
    for (const CsvColumn& c : csv_varying_columns()) {
        const bool varies = !results.empty() && std::any_of(results.begin(), results.end(),
                                        [&](const CaseResult& r) { return c.value(r) != c.value(results.front()); });
        if (varies) varying.push_back(c);
    }
    columns.insert(results_begin, varying.begin(), varying.end());
    if (std::any_of(results.begin(), results.end(), [](const CaseResult& r) { return r.screen.has_value(); }))
        columns.insert(columns.end(), csv_screen_columns().begin(), csv_screen_columns().end());
    // Representative replicas (JSON engine.replicas): a column only when some case was simulated so.
    if (std::any_of(results.begin(), results.end(),
                    [](const CaseResult& r) { return r.iteration && r.iteration->representative_replicas; }))
        columns.push_back({"replicas", [](const CaseResult& r) {
                               if (!r.iteration) return std::string();
                               return std::string(r.iteration->representative_replicas ? "representative"
                                                                                       : "all");
                           }});
    for (std::size_t i = 0; i < columns.size(); ++i) o << (i ? "," : "") << columns[i].name;
    o << "\r\n";
    for (const auto& r : results) {
        for (std::size_t i = 0; i < columns.size(); ++i) o << (i ? "," : "") << csv_field(columns[i].value(r));
        o << "\r\n";
    }
    return o.str();
}

}  // namespace strata
