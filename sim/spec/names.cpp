// The spec structs' names: each enum's name in files and reports, and the names the loaders accept (see
// include/strata/spec.hpp).
#include "strata/spec.hpp"

#include "strata/collective.hpp"
#include "strata/errors.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

const char* to_string(Recompute r) {
    switch (r) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::full: return "full";
    }
    return "?";
}
const char* to_string(Schedule s) {
    switch (s) {
        case Schedule::one_f_one_b: return "1f1b";
        case Schedule::interleaved: return "interleaved";
        case Schedule::gpipe: return "gpipe";
    }
    return "?";
}
const char* to_string(Precision p) {
    switch (p) {
        case Precision::bf16: return "bf16";
        case Precision::fp16: return "fp16";
        case Precision::fp8: return "fp8";
    }
    return "?";
}
const char* to_string(Mlp m) {
    switch (m) {
        case Mlp::gelu: return "gelu";
        case Mlp::swiglu: return "swiglu";
        case Mlp::squared_relu: return "squared_relu";
    }
    return "?";
}
const char* to_string(Norm n) { return n == Norm::layernorm ? "layernorm" : "rmsnorm"; }
const char* to_string(PositionEmbedding p) { return p == PositionEmbedding::learned ? "learned" : "rope"; }
const char* to_string(Attention a) {
    switch (a) {
        case Attention::unfused: return "unfused";
        case Attention::flash: return "flash";
        case Attention::flash2: return "flash2";
    }
    return "?";
}
const char* to_string(CrossEntropy c) {
    switch (c) {
        case CrossEntropy::unfused: return "unfused";
        case CrossEntropy::fused: return "fused";
        case CrossEntropy::te: return "te";
    }
    return "?";
}
const char* to_string(TransformerImpl t) {
    switch (t) {
        case TransformerImpl::automatic:
            return "auto";
        case TransformerImpl::local:
            return "local";
        case TransformerImpl::transformer_engine:
            return "transformer_engine";
        case TransformerImpl::te_transformer_layer:
            return "te_transformer_layer";
    }
    return "?";
}
const char* to_string(Fp8Recipe r) { return r == Fp8Recipe::delayed ? "delayed" : "current"; }
const char* to_string(Fp8ScaleUpdate u) {
    switch (u) {
        case Fp8ScaleUpdate::per_region:
            return "per_region";
        case Fp8ScaleUpdate::per_module:
            return "per_module";
        case Fp8ScaleUpdate::per_module_fused:
            return "per_module_fused";
    }
    return "?";
}
const char* to_string(TpOverlapRs m) { return m == TpOverlapRs::pipeline ? "pipeline" : "ring_exchange"; }
const char* to_string(RecomputeMethod m) { return m == RecomputeMethod::uniform ? "uniform" : "block"; }
const char* to_string(GradientAverage g) {
    switch (g) {
        case GradientAverage::scale: return "scale";
        case GradientAverage::scale_always: return "scale_always";
        case GradientAverage::in_collective: return "in_collective";
    }
    return "?";
}
const char* to_string(GradBuckets b) {
    switch (b) {
        case GradBuckets::layer: return "layer";
        case GradBuckets::megatron_core: return "megatron_core";
        case GradBuckets::nemo_apex: return "nemo_apex";
        case GradBuckets::nemo_apex_layers: return "nemo_apex_layers";
    }
    return "?";
}
const char* to_string(Routing r) { return r == Routing::hash ? "hash" : "adaptive"; }
std::optional<Routing> routing_named(std::string_view name) {
    for (const Routing r : {Routing::hash, Routing::adaptive})
        if (name == to_string(r)) return r;
    return std::nullopt;
}
std::optional<Precision> precision_named(std::string_view name) {
    for (const Precision p : {Precision::bf16, Precision::fp16, Precision::fp8})
        if (name == to_string(p)) return p;
    return std::nullopt;
}

std::optional<GradBuckets> grad_buckets_named(std::string_view name) {
    for (const GradBuckets b : {GradBuckets::layer, GradBuckets::megatron_core, GradBuckets::nemo_apex, GradBuckets::nemo_apex_layers})
        if (name == to_string(b)) return b;
    return std::nullopt;
}

std::optional<GradientAverage> gradient_average_named(std::string_view name) {
    for (const GradientAverage g : {GradientAverage::scale, GradientAverage::scale_always, GradientAverage::in_collective})
        if (name == to_string(g)) return g;
    return std::nullopt;
}

std::optional<CrossEntropy> cross_entropy_named(std::string_view name) {
    for (const CrossEntropy c : {CrossEntropy::unfused, CrossEntropy::fused, CrossEntropy::te})
        if (name == to_string(c)) return c;
    return std::nullopt;
}

std::optional<TransformerImpl> transformer_impl_named(std::string_view name) {
    for (const TransformerImpl t : {TransformerImpl::automatic, TransformerImpl::local,
                                    TransformerImpl::transformer_engine, TransformerImpl::te_transformer_layer})
        if (name == to_string(t)) return t;
    return std::nullopt;
}

std::optional<TpOverlapRs> tp_overlap_rs_named(std::string_view name) {
    for (const TpOverlapRs m : {TpOverlapRs::pipeline, TpOverlapRs::ring_exchange})
        if (name == to_string(m)) return m;
    return std::nullopt;
}

std::optional<Fp8ScaleUpdate> fp8_scale_update_named(std::string_view name) {
    for (const Fp8ScaleUpdate u :
         {Fp8ScaleUpdate::per_region, Fp8ScaleUpdate::per_module, Fp8ScaleUpdate::per_module_fused})
        if (name == to_string(u)) return u;
    return std::nullopt;
}

std::optional<Fp8Recipe> fp8_recipe_named(std::string_view name) {
    for (const Fp8Recipe r : {Fp8Recipe::delayed, Fp8Recipe::current})
        if (name == to_string(r)) return r;
    return std::nullopt;
}

std::optional<Attention> attention_named(std::string_view name) {
    for (const Attention a : {Attention::unfused, Attention::flash, Attention::flash2})
        if (name == to_string(a)) return a;
    return std::nullopt;
}

RecomputeModules recompute_modules_named(const std::vector<std::string>& names) {
    RecomputeModules m{false, false, false};
    bool* flags[] = {&m.core_attn, &m.layernorm, &m.mlp};
    for (const std::string& name : names) {
        const auto it = std::find(kRecomputeModuleNames.begin(), kRecomputeModuleNames.end(), name);
        if (it == kRecomputeModuleNames.end()) throw Error("recompute_modules: unknown module '" + name + "'");
        *flags[it - kRecomputeModuleNames.begin()] = true;
    }
    return m;
}

std::vector<std::string> overlap_names(const std::array<bool, 10>& set) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kTpOverlapNames.size(); ++i)
        if (set[i]) out.emplace_back(kTpOverlapNames[i]);
    return out;
}

std::string num_sm_text(const TpOverlapConfig& config) {
    std::string out;
    for (std::size_t i = 0; i < kTpOverlapNames.size(); ++i)
        out += (i ? " " : "") + std::string(kTpOverlapNames[i]) + ":" + std::to_string(config.num_sm[i]);
    return out;
}

OffloadModules offload_modules_named(const std::vector<std::string>& names) {
    OffloadModules m;
    bool* flags[] = {&m.attn_norm, &m.qkv_linear, &m.core_attn, &m.attn_proj, &m.mlp_norm};
    for (const std::string& name : names) {
        const auto it = std::find(kOffloadModuleNames.begin(), kOffloadModuleNames.end(), name);
        if (it == kOffloadModuleNames.end()) throw Error("offload_modules: unknown module '" + name + "'");
        *flags[it - kOffloadModuleNames.begin()] = true;
    }
    return m;
}

std::vector<std::string> names_of(const OffloadModules& m) {
    const bool flags[] = {m.attn_norm, m.qkv_linear, m.core_attn, m.attn_proj, m.mlp_norm};
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kOffloadModuleNames.size(); ++i)
        if (flags[i]) out.emplace_back(kOffloadModuleNames[i]);
    return out;
}

std::vector<std::string> names_of(const RecomputeModules& m) {
    const bool flags[] = {m.core_attn, m.layernorm, m.mlp};
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kRecomputeModuleNames.size(); ++i)
        if (flags[i]) out.emplace_back(kRecomputeModuleNames[i]);
    return out;
}

const char* to_string(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::all_reduce: return "all-reduce";
        case CollectiveKind::all_gather: return "all-gather";
        case CollectiveKind::reduce_scatter: return "reduce-scatter";
    }
    return "?";
}

}  // namespace strata
