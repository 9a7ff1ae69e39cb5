// The execution part of a scenario (parts.hpp): its keys, each read and checked (type, range, choices), and the
// keys that must go together. How the parts are combined into cases is scenario.cpp's.
#include "parts.hpp"
#include "strata/scenario.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

namespace strata {

namespace {
using yamlio::Fields;

constexpr std::array<std::string_view, 62> kExecutionKeys = {
    "tensor", "pipeline", "data", "interleave", "sequence_parallel", "recompute", "microbatch", "global_batch",
    "schedule", "distributed_optimizer", "fsdp", "overlap_grad_reduce", "precision", "gradient_accumulation_fusion",
    "async_tp_comm", "attention", "first_stage_layers", "last_stage_layers", "recompute_layers", "recompute_method",
    "context_parallel", "recompute_modules", "offload_modules", "tp_comm_overlap", "tp_overlap_proj_fprop",
    "tp_overlap_fc2_fprop", "overlap_param_gather", "gradient_average", "grad_reduce_in_fp32", "cross_entropy",
    "fp8_recipe", "fp8_param_gather", "tp_only_amax_red", "embedding_reduce_scatter", "check_for_nan_in_grad",
    "fp32_embedding_grads", "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "overlap_p2p_comm",
    "p2p_pair_order", "host_gap_forward_us", "host_gap_backward_us", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "overlap_param_gather_with_optimizer_step", "tp_overlap_sm_margin",
    "tp_overlap_aggregate", "tp_overlap_fp8_buf", "grad_buckets", "bucket_size", "transformer_impl", "fp8_scale_update",
    // tp_overlap_num_sm, a mapping from userbuffer overlap (kTpOverlapNames) to its num_sm, flattened.
    "tp_overlap_num_sm.qkv_fprop", "tp_overlap_num_sm.fc1_fprop", "tp_overlap_num_sm.proj_dgrad",
    "tp_overlap_num_sm.fc2_dgrad", "tp_overlap_num_sm.proj_fprop", "tp_overlap_num_sm.fc2_fprop",
    "tp_overlap_num_sm.qkv_dgrad", "tp_overlap_num_sm.qkv_wgrad", "tp_overlap_num_sm.fc1_dgrad",
    "tp_overlap_num_sm.fc1_wgrad"};

}  // namespace

std::span<const std::string_view> execution_keys() { return kExecutionKeys; }

ExecutionSpec parts::read_execution(const Fields& f) {
    f.check_known(kExecutionKeys);
    ExecutionSpec e;
    e.tensor = static_cast<int>(f.get_int("tensor", 1, 1 << 16));
    e.pipeline = static_cast<int>(f.get_int("pipeline", 1, 1 << 16));
    e.data = static_cast<int>(f.get_int("data", 1, 1 << 20, 1));
    e.context = static_cast<int>(f.get_int("context_parallel", 1, 1 << 12, 1));
    e.interleave = static_cast<int>(f.get_int("interleave", 1, 1 << 10, 1));
    e.sequence_parallel = f.get_bool("sequence_parallel", false);
    constexpr std::array<std::string_view, 3> rc = {"none", "selective", "full"};
    std::string r = f.get_choice("recompute", rc);
    e.recompute = r == "none" ? Recompute::none : r == "selective" ? Recompute::selective : Recompute::full;
    e.microbatch = static_cast<int>(f.get_int("microbatch", 1, 1 << 20));
    e.global_batch = static_cast<int>(f.get_int("global_batch", 1, 1 << 30));
    constexpr std::array<std::string_view, 3> sc = {"1f1b", "interleaved", "gpipe"};
    std::string s = f.get_choice("schedule", sc, e.interleave > 1 ? "interleaved" : "1f1b");
    e.schedule = s == "1f1b" ? Schedule::one_f_one_b : s == "interleaved" ? Schedule::interleaved : Schedule::gpipe;
    e.distributed_optimizer = f.get_bool("distributed_optimizer", false);
    e.fsdp = f.get_bool("fsdp", false);
    e.overlap_grad_reduce = f.get_bool("overlap_grad_reduce", false);
    e.overlap_param_gather = f.get_bool("overlap_param_gather", false);
    e.overlap_param_gather_with_optimizer_step = f.get_bool("overlap_param_gather_with_optimizer_step", false);
    constexpr std::array<std::string_view, 4> gb = {"layer", "megatron_core", "nemo_apex", "nemo_apex_layers"};
    e.grad_buckets = *grad_buckets_named(f.get_choice("grad_buckets", gb, "layer"));
    // Parameters per bucket; like Megatron-Core's, inert without overlap_grad_reduce (one reduction of everything).
    // 0: Megatron-Core's default (what the results echo where no bucket size is in force).
    e.bucket_size = double(f.get_int("bucket_size", 0, 1LL << 40, 0));
    if (e.bucket_size > 0 && e.grad_buckets != GradBuckets::megatron_core)
        f.fail("bucket_size", "bucket_size (parameters per gradient bucket) needs grad_buckets: megatron_core; "
                              "grad_buckets: layer makes one bucket per transformer layer, nemo_apex one group per "
                              "layer or model chunk (Apex's bucket_cap_mb sets no boundary there)");
    constexpr std::array<std::string_view, 3> ga = {"scale", "scale_always", "in_collective"};
    e.gradient_average = *gradient_average_named(f.get_choice("gradient_average", ga, "scale"));
    e.gradient_accumulation_fusion = f.get_bool("gradient_accumulation_fusion", true);
    e.async_tp_comm = f.get_bool("async_tp_comm", true);
    e.tp_comm_overlap = f.get_bool("tp_comm_overlap", false);
    constexpr std::array<std::string_view, 3> pc = {"bf16", "fp16", "fp8"};
    e.precision = *precision_named(f.get_choice("precision", pc, "bf16"));
    e.grad_reduce_in_fp32 = f.get_bool("grad_reduce_in_fp32", true);
    if (f.has("grad_reduce_in_fp32") && e.grad_reduce_in_fp32 && e.precision == Precision::fp16)
        f.fail("grad_reduce_in_fp32", "grad_reduce_in_fp32: true applies to bf16 and fp8 training; fp16 training keeps "
                                      "16-bit gradients (Megatron's --accumulate-allreduce-grads-in-fp32 with fp16 is not modelled)");
    constexpr std::array<std::string_view, 3> at = {"unfused", "flash", "flash2"};
    e.attention = *attention_named(f.get_choice("attention", at, "unfused"));
    constexpr std::array<std::string_view, 3> ce = {"unfused", "fused", "te"};
    e.cross_entropy = *cross_entropy_named(f.get_choice("cross_entropy", ce, "unfused"));
    constexpr std::array<std::string_view, 4> ti = {"auto", "local", "transformer_engine", "te_transformer_layer"};
    e.transformer_impl = *transformer_impl_named(f.get_choice("transformer_impl", ti, "auto"));
    constexpr std::array<std::string_view, 2> fr = {"delayed", "current"};
    e.fp8_recipe = *fp8_recipe_named(f.get_choice("fp8_recipe", fr, "delayed"));
    // Like TE's own, inert without FP8 delayed scaling (so that `--set execution.precision=bf16` works on such a file).
    constexpr std::array<std::string_view, 3> su = {"per_region", "per_module", "per_module_fused"};
    e.fp8_scale_update = *fp8_scale_update_named(f.get_choice("fp8_scale_update", su, "per_region"));
    e.fp8_param_gather = f.get_bool("fp8_param_gather", false);
    e.tp_only_amax_red = f.get_bool("tp_only_amax_red", false);
    // Like TE's ub_cfg without --tp-comm-overlap, these have no effect while tp_comm_overlap is off (so that
    // `--set execution.tp_comm_overlap=false` works on a file that names them).
    constexpr std::array<std::string_view, 2> rs = {"pipeline", "ring_exchange"};
    e.tp_overlap_proj_fprop = *tp_overlap_rs_named(f.get_choice("tp_overlap_proj_fprop", rs, "pipeline"));
    e.tp_overlap_fc2_fprop = *tp_overlap_rs_named(f.get_choice("tp_overlap_fc2_fprop", rs, "pipeline"));
    // Each overlap's SMs (ub_cfg num_sm, set_sm_margin); checked against the device's SM count where the case is built.
    for (std::size_t i = 0; i < kTpOverlapNames.size(); ++i) {
        const std::string key = "tp_overlap_num_sm." + std::string(kTpOverlapNames[i]);
        e.tp_overlap_config.num_sm[i] = static_cast<int>(f.get_int(key, 1, 1024, e.tp_overlap_config.num_sm[i]));
    }
    const auto index = [](const std::string& name) {
        return std::size_t(std::find(kTpOverlapNames.begin(), kTpOverlapNames.end(), name) - kTpOverlapNames.begin());
    };
    for (const std::string& name : f.get_choices("tp_overlap_sm_margin", kTpOverlapNames, {}, true))
        e.tp_overlap_config.sm_margin[index(name)] = true;
    for (const std::string& name : f.get_choices("tp_overlap_aggregate", kTpOverlapRingGathers, {}, true))
        e.tp_overlap_config.aggregate[index(name)] = true;
    for (const std::string& name : f.get_choices("tp_overlap_fp8_buf", kTpOverlapForwardScatters, {}, true))
        e.tp_overlap_config.fp8_buf[index(name)] = true;
    e.embedding_reduce_scatter = f.get_bool("embedding_reduce_scatter", true);
    e.check_for_nan_in_grad = f.get_bool("check_for_nan_in_grad", false);
    e.fp32_embedding_grads = f.get_bool("fp32_embedding_grads", false);
    e.defer_embedding_wgrad_compute = f.get_bool("defer_embedding_wgrad_compute", false);
    e.wgrad_deferral_limit = static_cast<int>(f.get_int("wgrad_deferral_limit", 0, 1 << 20, 0));
    e.overlap_p2p_comm = f.get_bool("overlap_p2p_comm", false);
    e.p2p_pair_order = f.get_bool("p2p_pair_order", true);
    e.host_gap_forward = Time::from_us(f.get_double("host_gap_forward_us", 0.0, 1e6, 0.0));
    e.host_gap_backward = Time::from_us(f.get_double("host_gap_backward_us", 0.0, 1e6, 0.0));
    e.first_stage_layers = static_cast<int>(f.get_int("first_stage_layers", 1, 1 << 16, 0));
    e.last_stage_layers = static_cast<int>(f.get_int("last_stage_layers", 1, 1 << 16, 0));
    e.embedding_in_pipeline_split = f.get_bool("account_for_embedding_in_pipeline_split", false);
    e.loss_in_pipeline_split = f.get_bool("account_for_loss_in_pipeline_split", false);
    e.recompute_layers = static_cast<int>(f.get_int("recompute_layers", 0, 1 << 16, 0));  // 0: every layer
    constexpr std::array<std::string_view, 2> rm = {"uniform", "block"};
    e.recompute_method = f.get_choice("recompute_method", rm, "uniform") == "uniform" ? RecomputeMethod::uniform : RecomputeMethod::block;
    // Without selective recompute only [] (what the results echo there: no module recomputed) is accepted; with it, at
    // least one module. recompute_method uniform is the default and needs nothing.
    const std::vector<std::string> modules =
        f.get_choices("recompute_modules", kRecomputeModuleNames, names_of(RecomputeModules{}), true);
    if (f.has("recompute_modules") && e.recompute != Recompute::selective && !modules.empty())
        f.fail("recompute_modules", "recompute_modules needs recompute: selective");
    if (e.recompute == Recompute::selective && modules.empty())
        f.fail("recompute_modules",
               "recompute: selective needs at least one module in recompute_modules (valid: "
               "core_attn, layernorm, mlp)");
    if (!modules.empty()) e.recompute_modules = recompute_modules_named(modules);
    // Fine-grained activation offloading: the modules whose saved tensors go to host memory ([] or absent: off).
    e.offload_modules = offload_modules_named(f.get_choices("offload_modules", kOffloadModuleNames, {}, true));
    if (e.recompute_method != RecomputeMethod::uniform && e.recompute_layers == 0)
        f.fail("recompute_method", "recompute_method needs recompute_layers (how many layers it applies to)");
    return e;
}

}  // namespace strata
