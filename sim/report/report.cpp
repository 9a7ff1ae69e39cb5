// Renders case results as a terminal table and JSON (docs/results.schema.json; README.md); csv.cpp the CSV.
#include "strata/report.hpp"

#include "strata/cost.hpp"
#include "strata/layer.hpp"
#include "strata/power.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace strata {

CaseResult analyze(const Scenario& sc) {
    CaseResult r;
    r.scenario = sc;
    r.memory = estimate_memory(sc.model, sc.execution, sc.system.device_memory());
    const LayerPlan plan = build_layer(layer_config(sc.model, sc.execution));
    CostModel cost(sc.system.device);
    const SustainedClock clock = sustain_for(cost, sc.model, sc.execution);
    r.layer.compute_speed = clock.speed;
    r.layer.compute_speed_fp8 = clock.speed_fp8;
    r.layer.sm_clock_mhz = clock.clock_mhz;
    r.layer.headroom_ms = 1e3 * clock.headroom_s;
    r.layer.headroom_saving_fraction = clock.saving_fraction;
    const ContextRing ring = cost.context_ring(sc.execution, sc.system);
    r.layer.forward_ms = cost.pass_time(plan.forward, sc.execution.tensor, ring).ms();
    r.layer.backward_ms = cost.pass_time(plan.backward, sc.execution.tensor, ring).ms();
    bool any_measured = false, any_analytical = false;
    for (const auto* pass : {&plan.forward, &plan.backward}) {
        for (const auto& step : *pass) {
            for (const auto& k : step.kernels) {
                (cost.kernel(k).source == CostSource::measured ? any_measured : any_analytical) = true;
            }
        }
    }
    r.layer.cost_source = any_measured && any_analytical ? "mixed" : any_measured ? "measured" : "analytical";
    return r;
}

namespace {
/// Kernels of the simulator's Megatron layer that strata-calibrate's measured layer does not run
/// (calibrate/layer.cu): the bias gradients, the separate residual-gradient adds (its layer-norm backward adds
/// the residual branch's gradient itself), and selective recompute's re-run of attention x values (it re-runs
/// Q K^T, softmax and dropout only; Megatron's checkpointed core attention re-runs the whole module). The check
/// compares like with like: these are left out of the prediction.
bool not_in_calibration_layer(const Kernel& k) {
    const auto ends_with = [&](std::string_view tail) {
        return k.name.size() >= tail.size() && k.name.compare(k.name.size() - tail.size(), tail.size(), tail) == 0;
    };
    return ends_with(".bias-grad") || ends_with("residual-grad-add") || k.name == "recompute.attn.av";
}
}  // namespace

double print_profile_check(std::ostream& out, const DeviceProfile& profile) {
    const CostModel cost(profile);
    out << fmt::format("profile {} ({}), {} measured layer(s)\n", profile.name, profile.file, profile.measured_layers.size());
    if (!profile.measured_sms_held.empty() && profile.sm_count > 0) {
        // What the interference of overlapped collectives will use, beside what the share of the SMs would say.
        std::string line = fmt::format("a GEMM with SMs held (measured.sms_held) of {}:", profile.sm_count);
        for (const MeasuredSmsHeld& e : profile.measured_sms_held)
            line += fmt::format(" {} -> {:.3f}x{} (share {:.3f}x)", e.sms, e.slowdown,
                                e.per_wave > 0 ? fmt::format(", {:.3f} + {:.3f} / waves for a GEMM", e.base, e.per_wave) : "",
                                1.0 / sm_share_speed(profile, e.sms));
        out << line << "\n";
    }
    if (!profile.measured_attention_sms_held.empty() && profile.sm_count > 0) {
        std::string line = "fused attention (cuDNN's) with SMs held (measured.attention_sms_held):";
        for (const MeasuredSmsHeld& e : profile.measured_attention_sms_held)
            line +=
                fmt::format(" {} -> {:.3f}x (share {:.3f}x)", e.sms, e.slowdown, 1.0 / sm_share_speed(profile, e.sms));
        out << line << "; FlashAttention-2's kernels at the share\n";
    }
    if (profile.measured_layers.empty()) return 0;
    out << fmt::format("{:<34} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>14} {:>14}\n", "layer (a, h, s, b, t, SP, recompute)",
                       "meas fwd", "pred fwd", "err", "meas bwd", "pred bwd", "err", "act meas B", "act model B");
    double worst = 0;
    for (const auto& l : profile.measured_layers) {
        ModelSpec m;
        m.name = "measured";
        m.heads = l.heads;
        m.hidden = l.hidden;
        m.layers = 1;
        m.seq_len = l.seq_len;
        m.vocab = 51200;
        m.ffn_hidden = 4 * l.hidden;
        const Recompute rc = l.recompute == "none" ? Recompute::none : l.recompute == "selective" ? Recompute::selective : Recompute::full;
        const LayerPlan plan = build_layer({&m, l.tensor, l.sequence_parallel, rc, l.microbatch});
        // The measurement leaves the collectives out when the calibration had fewer GPUs than t.
        const bool with_comm = profile.gpus_used >= l.tensor;
        auto predict = [&](std::vector<Step> pass) {
            for (auto& step : pass) std::erase_if(step.kernels, not_in_calibration_layer);
            if (with_comm) return cost.pass_time(pass, l.tensor).ms();
            Time t = Time::zero();
            for (const auto& step : pass)
                if (step.kind == Step::Kind::compute) t += cost.compute_step(step);
            return t.ms();
        };
        const double pf = predict(plan.forward), pb = predict(plan.backward);
        const double ef = l.forward_ms > 0 ? pf / l.forward_ms - 1 : 0, eb = l.backward_ms > 0 ? pb / l.backward_ms - 1 : 0;
        worst = std::max({worst, std::abs(ef), std::abs(eb)});
        out << fmt::format("{:<34} {:>9.3f} {:>9.3f} {:>6.1f}% {:>9.3f} {:>9.3f} {:>6.1f}% {:>14} {:>14}{}\n",
                           fmt::format("{}, {}, {}, {}, {}, {}, {}", l.heads, l.hidden, l.seq_len, l.microbatch, l.tensor,
                                       l.sequence_parallel ? "on" : "off", l.recompute),
                           l.forward_ms, pf, 100 * ef, l.backward_ms, pb, 100 * eb, l.activation_bytes,
                           plan.stored_bytes.value, with_comm ? "" : "  (compute only)");
    }
    out << fmt::format("largest time error {:.1f}%\n", 100 * worst);
    out << "prediction: the layer's kernels that strata-calibrate's layer runs (left out: bias gradients, the separate "
           "residual-gradient adds, selective recompute's attention x values re-run)\n";
    return worst;
}

double tokens_per_s(const Scenario& sc, const IterationResult& it) {
    return double(sc.execution.global_batch) * sc.model.seq_len / it.iteration_time_s;
}
double tflops_per_gpu(const Scenario& sc, const IterationResult& it) {
    return model_flops_per_iteration(sc.model, sc.execution.global_batch).value /
           (it.iteration_time_s * sc.execution.gpus()) / 1e12;
}

double estimate_error(const ScreenRecord& s, const IterationResult& it) { return s.estimate_s / it.iteration_time_s - 1; }

namespace {
/// Each userbuffer overlap's num_sm, by name.
nlohmann::json tp_overlap_num_sm_json(const TpOverlapConfig& sms) {
    nlohmann::json j = nlohmann::json::object();
    for (std::size_t i = 0; i < kTpOverlapNames.size(); ++i) j[std::string(kTpOverlapNames[i])] = sms.num_sm[i];
    return j;
}
std::string gib(Bytes b) { return fmt::format("{:.2f}", b.gib()); }
/// A row the table marks `*`: simulated with representative replicas where there are replicas to represent.
bool marked_representative(const CaseResult& r) {
    return r.iteration && r.iteration->representative_replicas && r.scenario.execution.data > 1;
}
}  // namespace

void print_table(std::ostream& out, const std::string& title, const std::vector<CaseResult>& results) {
    out << title << "\n";
    const bool engine = std::any_of(results.begin(), results.end(), [](const auto& r) { return r.iteration.has_value(); });
    // With context parallelism anywhere, the tensor column shows t x c.
    const bool cp = std::any_of(results.begin(), results.end(), [](const auto& r) { return r.scenario.execution.context > 1; });
    // The case column as wide as the longest name (at least 48, at most 160: a sweep's names carry its values).
    std::size_t width = 48;
    for (const auto& r : results) width = std::max(width, std::min<std::size_t>(r.scenario.name.size(), 160));
    const auto name_of = [width](const std::string& name) {
        return name.size() <= width ? name : name.substr(0, width - 3) + "...";
    };
    std::string header = fmt::format("{:<{}} {:>4} {:>4} {:>4} {:>3} {:>3} {:>9} {:>12} {:>11} {:>9} {:>9} {:>9}",
                                     "case", width, cp ? "t xc" : "t", "p", "d", "SP", "m", "recompute", "act/layer MB",
                                     "act/GPU GiB", "peak GiB", "fwd ms", "bwd ms");
    if (engine) header += fmt::format(" {:>8} {:>6} {:>6} {:>7} {:>15}", "iter s", "MFU%", "HFU%", "bubble%", "exposed% t/p/d");
    // With host gaps anywhere (the 2022 software's synchronisations), their share of the iteration in a column.
    const bool host = engine && std::any_of(results.begin(), results.end(), [](const auto& r) {
                          return r.iteration && r.iteration->host_gap > Time::zero();
                      });
    if (host) header += fmt::format(" {:>6}", "host%");
    out << header << "\n" << std::string(header.size(), '-') << "\n";
    for (const auto& r : results) {
        const auto& e = r.scenario.execution;
        if (r.error) {
            out << fmt::format("{:<{}} error: {}\n", name_of(r.scenario.name), width, *r.error);
            continue;
        }
        std::string peak = gib(r.memory.peak_stage.total()) + (r.memory.fits() ? "" : "!");
        std::string line = fmt::format("{:<{}} {:>4} {:>4} {:>4} {:>3} {:>3} {:>9} {:>12.1f} {:>11} {:>9} {:>9.2f} {:>9.2f}",
                                       name_of(r.scenario.name), width,
                                       cp ? fmt::format("{}x{}", e.tensor, e.context) : std::to_string(e.tensor), e.pipeline, e.data,
                                       e.sequence_parallel ? "on" : "off", e.interleave, to_string(e.recompute),
                                       double(r.memory.activation_per_layer.value) / 1e6, gib(r.memory.activation_first_stage),
                                       peak, r.layer.forward_ms, r.layer.backward_ms);
        if (r.iteration) {
            const auto& it = *r.iteration;
            const double pct = 100 / it.iteration_time_s;
            line += fmt::format(" {:>8.3f} {:>6.1f} {:>6.1f} {:>7.1f} {:>15}", it.iteration_time_s, 100 * it.mfu, 100 * it.hfu,
                                100 * it.bubble_fraction,
                                fmt::format("{:.1f}/{:.1f}/{:.1f}", pct * it.exposed_comm.tensor.seconds(),
                                            pct * it.exposed_comm.pipeline.seconds(), pct * it.exposed_comm.data_parallel.seconds()));
            if (host) line += fmt::format(" {:>6.1f}", pct * it.host_gap.seconds());
            if (it.oom) line += "  OOM";
            if (marked_representative(r)) line += "  *";
        }
        out << line << "\n";
    }
    const bool any_oom = std::any_of(results.begin(), results.end(), [](const auto& r) { return !r.error && !r.memory.fits(); });
    if (any_oom) out << "! = exceeds the device memory capacity (out of memory)\n";
    out << "act/GPU = first-stage activations (paper eq. 5 with the schedule's in-flight microbatches, plus section 4.5)\n";
    if (engine)
        out << "exposed% t/p/d = communication the GPUs wait for, in % of the iteration: tensor-parallel / pipeline / "
               "data-parallel (JSON exposed_comm_*_s)\n";
    if (host)
        out << "host% = the GPU idle while its host issues the next unit after a synchronisation (execution "
               "host_gap_*_us), in % of the iteration (JSON host_gap_s); not in bubble%\n";
    // A model of today's kind with the paper's unfused attention (strata's default): rarely what the user means.
    const auto unfused_today = [](const CaseResult& r) {
        return r.scenario.execution.attention == Attention::unfused && r.scenario.model.todays_kind();
    };
    const auto n_unfused = std::count_if(results.begin(), results.end(), unfused_today);
    if (n_unfused > 0)
        out << fmt::format(
            "note: '{}'{}:\n  a model of today's kind (grouped-query attention, SwiGLU, RMSNorm or rotary positions) "
            "with attention unfused (strata's\n  default, the paper's 2022 kernels, which store every s x s score); "
            "Megatron-Core with Transformer Engine runs fused\n  attention (execution.attention: flash)\n",
            std::find_if(results.begin(), results.end(), unfused_today)->scenario.name,
            n_unfused > 1 ? fmt::format(" and {} more", n_unfused - 1) : "");
    if (std::any_of(results.begin(), results.end(), marked_representative))
        out << "* = simulated with representative replicas (the data-parallel replicas of replica 0's node, each at "
               "the pace of the slowest it stands for; see README 'Speed'), not every GPU group\n";
}

std::string to_json(const std::string& experiment, const std::vector<CaseResult>& results,
                    const Provenance* provenance, const SearchSummary* search) {
    nlohmann::ordered_json root;
    root["experiment"] = experiment;
    if (provenance) {
        auto& p = root["provenance"];
        p["strata"] = provenance->strata_version;
        p["git_revision"] = provenance->git_revision;
        p["inputs"] = nlohmann::ordered_json::array();
        for (const auto& in : provenance->inputs) p["inputs"].push_back({{"file", in.file}, {"sha256", in.sha256}});
    }
    if (search) {
        auto& s = root["search"];
        s["gpus"] = search->gpus;
        s["global_batch"] = search->global_batch;
        s["constraints"] = search->constraints;
        s["enumerated"] = search->enumerated;
        s["rejected"] = nlohmann::ordered_json::object();
        for (const auto& [reason, count] : search->rejected) s["rejected"][reason] = count;
        s["screened"] = search->screened;
        s["margin"] = search->margin;
        s["within_margin"] = search->within_margin;
        s["simulate_top"] = search->simulate_top;
        s["simulate_max"] = search->simulate_max;
        s["simulated"] = search->simulated;
        s["overturned_by_estimate_rank"] = search->overturned_by;
        s["replicas"] = search->representative_replicas ? "representative" : "all";
        if (search->best_in_full_s) s["best_in_full_s"] = *search->best_in_full_s;
    }
    root["results"] = nlohmann::ordered_json::array();
    for (const auto& r : results) {
        const auto& m = r.scenario.model;
        const auto& e = r.scenario.execution;
        nlohmann::ordered_json j;
        j["name"] = r.scenario.name;
        if (r.screen) {
            auto& sj = j["screen"];
            sj["estimate_s"] = r.screen->estimate_s;
            sj["estimate_rank"] = r.screen->estimate_rank;
            sj["simulated_rank"] = r.screen->simulated_rank;
            if (r.iteration) sj["estimate_error"] = estimate_error(*r.screen, *r.iteration);
        }
        j["model"] = {{"name", m.name},
                      {"heads", m.heads},
                      {"hidden", m.hidden},
                      {"layers", m.layers},
                      {"seq_len", m.seq_len},
                      {"vocab", m.vocab},
                      {"ffn_hidden", m.ffn_hidden},
                      {"kv_heads", m.query_groups()},
                      {"mlp", to_string(m.mlp)},
                      {"norm", to_string(m.norm)},
                      {"linear_bias", m.linear_bias},
                      {"dropout", m.dropout},
                      {"position_embedding", to_string(m.position_embedding)},
                      {"tied_embeddings", m.tied_embeddings},
                      {"parameters", std::llround(total_parameters(m))}};
        j["execution"] = {{"tensor", e.tensor},
                          {"pipeline", e.pipeline},
                          {"data", e.data},
                          {"interleave", e.interleave},
                          {"sequence_parallel", e.sequence_parallel},
                          {"recompute", to_string(e.recompute)},
                          {"microbatch", e.microbatch},
                          {"global_batch", e.global_batch},
                          {"schedule", to_string(e.schedule)},
                          {"distributed_optimizer", e.distributed_optimizer},
                          {"fsdp", e.fsdp},
                          // In force: Megatron-FSDP overlaps both by itself.
                          {"overlap_grad_reduce", e.overlap_grad_reduce || e.fsdp},
                          {"overlap_param_gather", e.overlap_param_gather || e.fsdp},
                          {"gradient_average", to_string(e.gradient_average)},
                          {"grad_reduce_in_fp32", e.fp32_gradients()},
                          {"gradient_accumulation_fusion", e.gradient_accumulation_fusion},
                          {"async_tp_comm", e.async_tp_comm},
                          {"tp_comm_overlap", e.tp_comm_overlap},
                          {"tp_overlap_proj_fprop", to_string(e.tp_overlap_proj_fprop)},
                          {"tp_overlap_fc2_fprop", to_string(e.tp_overlap_fc2_fprop)},
                          {"tp_overlap_num_sm", tp_overlap_num_sm_json(e.tp_overlap_config)},
                          {"tp_overlap_sm_margin", overlap_names(e.tp_overlap_config.sm_margin)},
                          {"tp_overlap_aggregate", overlap_names(e.tp_overlap_config.aggregate)},
                          {"tp_overlap_fp8_buf", overlap_names(e.tp_overlap_config.fp8_buf)},
                          {"precision", to_string(e.precision)},
                          {"attention", to_string(e.attention)},
                          {"cross_entropy", to_string(e.cross_entropy)},
                          {"transformer_impl", to_string(e.transformer_impl_in_force())},
                          {"fp8_recipe", to_string(e.fp8_recipe)},
                          {"fp8_scale_update", to_string(e.fp8_scale_update)},
                          {"fp8_param_gather", e.fp8_param_gather},
                          {"tp_only_amax_red", e.tp_only_amax_red},
                          {"embedding_reduce_scatter", e.embedding_reduce_scatter},
                          {"check_for_nan_in_grad", e.check_for_nan_in_grad},
                          {"fp32_embedding_grads", e.fp32_embedding_grads},
                          {"defer_embedding_wgrad_compute", e.defer_embedding_wgrad_compute},
                          {"wgrad_deferral_limit", e.wgrad_deferral_limit},
                          {"overlap_p2p_comm", e.overlap_p2p_comm},
                          {"p2p_pair_order", e.p2p_pair_order},
                          {"host_gap_forward_us", e.host_gap_forward.seconds() * 1e6},
                          {"host_gap_backward_us", e.host_gap_backward.seconds() * 1e6},
                          {"overlap_param_gather_with_optimizer_step", e.overlap_param_gather_with_optimizer_step},
                          {"grad_buckets", to_string(e.grad_buckets)},
                          {"bucket_size", e.bucket_size_in_force()},
                          {"context_parallel", e.context},
                          {"recompute_modules", names_of(e.recompute_modules_in_force())},
                          {"offload_modules", names_of(e.offload_modules)},
                          {"recompute_layers", e.recompute_layers},
                          {"recompute_method", to_string(e.recompute_method)},
                          {"first_stage_layers", e.layers_on_stage(m.layers, 0)},
                          {"last_stage_layers", e.layers_on_stage(m.layers, e.pipeline - 1)},
                          {"account_for_embedding_in_pipeline_split", e.embedding_in_pipeline_split},
                          {"account_for_loss_in_pipeline_split", e.loss_in_pipeline_split},
                          {"gpus", e.gpus()}};
        j["system"] = r.scenario.system.name;
        j["device_profile"] = {{"name", r.scenario.system.device.name}, {"kind", r.scenario.system.device.kind}};
        const VariationSpec& var = r.scenario.system.variation;
        j["variation"] = {{"gpu_sigma", var.gpu_sigma}, {"span_sigma", var.span_sigma},
                          {"span_hold_ms", var.span_hold.ms()}, {"seed", var.seed},
                          {"timing_reference_gpus", r.scenario.system.device.timing_reference_gpus}};
        // The system as simulated (overrides included), so that cases that differ only in the system differ here.
        const SystemSpec& sys = r.scenario.system;
        const NetworkSpec& n = sys.network;
        j["system_spec"] = {
            {"gpus_per_node", sys.gpus_per_node},
            {"memory_capacity_bytes", sys.memory_capacity.value},
            {"memory_reserved_bytes", sys.memory_reserved.value},
            {"network",
             {{"nvlink_bandwidth_bytes_per_s", n.nvlink_bandwidth.value},
              {"nvlink_latency_us", n.nvlink_latency.us()},
              {"rails", n.rails},
              {"nic_bandwidth_bytes_per_s", n.nic_bandwidth.value},
              {"nic_latency_us", n.nic_latency.us()},
              {"nodes_per_leaf", n.nodes_per_leaf},
              {"spines_per_rail", n.spines_per_rail},
              {"oversubscription", n.oversubscription},
              {"tiers", n.tiers},
              {"routing", to_string(n.routing)},
              {"switch_latency_us", n.switch_latency.us()},
              {"collective_step_latency_intra_us", n.collective_step_latency_intra.us()},
              {"collective_step_latency_inter_us", n.collective_step_latency_inter.us()},
              {"hierarchical_collectives", n.hierarchical_collectives},
              {"p2p_latency_us", n.p2p_latency.us()},
              {"nccl_channels_per_nic", n.nccl_channels_per_nic},
              {"device_to_host_bandwidth_bytes_per_s", n.device_to_host_bandwidth.value},
              {"host_to_device_bandwidth_bytes_per_s", n.host_to_device_bandwidth.value},
              {"host_copy_latency_us", n.host_copy_latency.us()},
              {"pcie_bandwidth_bytes_per_s", n.pcie_bandwidth.value}}},
            {"power_limit_w", sys.device.power.limit_w},
            {"optimizer",
             {{"bytes_per_param_step", sys.optimizer.bytes_per_param_step},
              {"bytes_per_param_step_fp16", sys.optimizer.bytes_per_param_step_fp16},
              {"fixed_overhead_ms", sys.optimizer.fixed_overhead.ms()}}}};
        if (r.error) {
            j["error"] = *r.error;
            root["results"].push_back(j);
            continue;
        }
        const auto& mem = r.memory;
        const auto& ps = mem.peak_stage;
        j["memory"] = {{"activation_bytes_per_layer", mem.activation_per_layer.value},
                       {"activation_bytes_first_stage", mem.activation_first_stage.value},
                       {"activation_bytes_first_stage_layers", mem.activation_first_stage_layers.value},
                       {"weights_bytes", ps.weights.value},
                       {"gradients_bytes", ps.gradients.value},
                       {"optimizer_bytes", ps.optimizer.value},
                       {"peak_bytes", ps.total().value},
                       {"peak_stage", ps.stage},
                       {"capacity_bytes", mem.capacity.value},
                       {"reserved_bytes", ps.reserved.value},
                       {"fits", mem.fits()},
                       {"margin_bytes", mem.margin().value}};
        // Every pipeline stage at its own peak, by category: one array per category, indexed by stage.
        auto& by_stage = j["memory"]["by_stage"];
        const auto stage_array = [&](const char* key, auto value) {
            auto& a = by_stage[key] = nlohmann::ordered_json::array();
            for (const StageMemory& sm : mem.stages) a.push_back(value(sm));
        };
        const auto category = [&](const char* key, MemoryCategory c) {
            stage_array(key, [c](const StageMemory& sm) { return sm.bytes(c).value; });
        };
        category("weights_bytes", MemoryCategory::weights);
        category("gradients_bytes", MemoryCategory::gradients);
        category("optimizer_bytes", MemoryCategory::optimizer);
        category("activations_bytes", MemoryCategory::activations);
        category("embedding_output_bytes", MemoryCategory::embedding_output);
        category("recompute_bytes", MemoryCategory::recompute);
        category("attention_workspace_bytes", MemoryCategory::attention);
        category("reserved_bytes", MemoryCategory::reserved);
        stage_array("total_bytes", [](const StageMemory& sm) { return sm.total().value; });
        stage_array("units_in_flight", [](const StageMemory& sm) { return sm.units_in_flight; });
        j["layer"] = {{"forward_ms", r.layer.forward_ms}, {"backward_ms", r.layer.backward_ms},
                      {"cost_source", r.layer.cost_source}};
        if (e.offload_modules.any()) {
            const LayerOffload o = build_layer(layer_config(m, e)).offload;
            j["layer"]["offload"] = {{"copied_bytes", o.copied.value}, {"freed_bytes", o.freed.value},
                                     {"reloaded_bytes", o.reloaded.value}, {"tensors", o.copies}};
        }
        if (r.layer.sm_clock_mhz > 0) {
            j["layer"]["compute_speed"] = r.layer.compute_speed;
            j["layer"]["compute_speed_fp8"] = r.layer.compute_speed_fp8;
            j["layer"]["sm_clock_mhz"] = std::round(r.layer.sm_clock_mhz);
            if (r.layer.headroom_ms > 0)
                j["layer"].update({{"headroom_ms", r.layer.headroom_ms}, {"headroom_saving_fraction", r.layer.headroom_saving_fraction}});
        }
        auto& per_stage = j["parameters_per_gpu_by_stage"] = nlohmann::ordered_json::array();
        for (int st = 0; st < e.pipeline; ++st) per_stage.push_back(std::llround(parameters_on_stage(m, e, st)));
        if (r.iteration) {
            const auto& it = *r.iteration;
            j["iteration_time_s"] = it.iteration_time_s;
            j["mfu"] = it.mfu;
            j["hfu"] = it.hfu;
            j["model_flops_per_iteration"] = model_flops_per_iteration(m, e.global_batch).value;
            j["tokens_per_s"] = tokens_per_s(r.scenario, it);
            j["tflops_per_gpu"] = tflops_per_gpu(r.scenario, it);
            j["bubble_fraction"] = it.bubble_fraction;
            j["exposed_comm_s"] = it.exposed_comm_s;
            j["exposed_comm_tensor_s"] = it.exposed_comm.tensor.seconds();
            j["exposed_comm_pipeline_s"] = it.exposed_comm.pipeline.seconds();
            j["exposed_comm_data_parallel_s"] = it.exposed_comm.data_parallel.seconds();
            j["host_gap_s"] = it.host_gap.seconds();
            j["stage_busy_s"] = it.stage_busy_s;
            if (e.offload_modules.any())
                j["host_copies_busy_s"] = {{"device_to_host", it.host_copies_out.seconds()},
                                           {"host_to_device", it.host_copies_in.seconds()}};
            j["slowest_group_factor"] = it.slowest_group_factor;
            j["simulated_memory"] = {{"peak_bytes", it.peak_memory.value},
                                     {"peak_stage", it.peak_memory_stage},
                                     {"first_stage_activation_peak_bytes", it.first_stage_activation_peak.value},
                                     {"oom", it.oom},
                                     {"oom_detail", it.oom_detail}};
            j["engine"] = {{"events", it.events}, {"tasks", it.tasks}};
            if (it.representative_replicas) j["engine"]["replicas"] = "representative";
        }
        root["results"].push_back(j);
    }
    return root.dump(2) + "\n";
}

}  // namespace strata
