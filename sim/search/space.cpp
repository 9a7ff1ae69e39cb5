// The search's space: the keys it varies, what each tries by default, and `--fix` constraints on them
// (see include/strata/search.hpp).
#include "strata/search.hpp"

#include "strata/errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace strata {

namespace {

enum class KeyKind { integer, boolean, recompute, modules, offload };

struct KeyDef {
    const char* name;
    KeyKind kind;
    std::vector<int> SearchSpace::*ints = nullptr;
    std::vector<bool> SearchSpace::*bools = nullptr;
    const char* default_values;
};

const std::vector<KeyDef>& key_defs() {
    static const std::vector<KeyDef> defs = {
        {"tensor", KeyKind::integer, &SearchSpace::tensor, nullptr,
         "every divisor of the GPUs up to the GPUs per node"},
        {"context_parallel", KeyKind::integer, &SearchSpace::context_parallel, nullptr, "1"},
        {"pipeline", KeyKind::integer, &SearchSpace::pipeline, nullptr, "every divisor up to the layers"},
        {"data", KeyKind::integer, &SearchSpace::data, nullptr, "what the GPUs leave"},
        {"interleave", KeyKind::integer, &SearchSpace::interleave, nullptr, "1..4"},
        {"microbatch", KeyKind::integer, &SearchSpace::microbatch, nullptr, "1,2,4,8"},
        {"recompute", KeyKind::recompute, nullptr, nullptr,
         "none,selective,full,block (block: full recompute of the fewest first layers of each model chunk that fit)"},
        {"recompute_modules", KeyKind::modules, nullptr, nullptr,
         "with selective recompute, every set of core_attn, layernorm, mlp "
         "(core_attn,layernorm,core_attn+layernorm,mlp,"
         "core_attn+mlp,layernorm+mlp,core_attn+layernorm+mlp) the candidate's layers can run: layernorm only with "
         "local layers, only core_attn with te_transformer_layer; fixed alone, only selective recompute is tried"},
        {"offload_modules", KeyKind::offload, nullptr, nullptr,
         "none (fine-grained activation offloading off; sets of attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm "
         "joined by +, or none: e.g. none,qkv_linear+core_attn+attn_proj, each tried with every recompute policy it "
         "runs with: not full or block; Transformer Engine's layers only)"},
        {"sequence_parallel", KeyKind::boolean, nullptr, &SearchSpace::sequence_parallel, "off,on (on where t > 1)"},
        {"distributed_optimizer", KeyKind::boolean, nullptr, &SearchSpace::distributed_optimizer,
         "off,on (on where d x c > 1)"},
        {"fsdp", KeyKind::boolean, nullptr, &SearchSpace::fsdp,
         "off (on only with the distributed optimizer, pipeline 1 and d x c > 1: Megatron-FSDP, whose candidates run "
         "overlap_grad_reduce and overlap_param_gather, its own, unvaried, and in FP8 gather FP8 parameters)"},
        {"overlap_grad_reduce", KeyKind::boolean, nullptr, &SearchSpace::overlap_grad_reduce,
         "off,on (on where d x c > 1)"},
        {"overlap_param_gather", KeyKind::boolean, nullptr, &SearchSpace::overlap_param_gather,
         "off (on only with the distributed optimizer)"},
        {"tp_comm_overlap", KeyKind::boolean, nullptr, &SearchSpace::tp_comm_overlap,
         "off (on only with t > 1 and SP)"},
        {"ends_in_split", KeyKind::boolean, nullptr, &SearchSpace::ends_in_split,
         "off,on (on only where the layers do not split evenly over pipeline x interleave: the embedding and/or the "
         "loss counted as layers, account_for_*_in_pipeline_split)"},
    };
    return defs;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ')
        s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> parts;
    for (std::size_t pos = 0;;) {
        const std::size_t next = s.find(sep, pos);
        parts.push_back(trim(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos)));
        if (next == std::string_view::npos) return parts;
        pos = next + 1;
    }
}

std::optional<int> positive(std::string_view s) {
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v < 1) return std::nullopt;
    return v;
}

/// A module set's names joined by + (`item`), each checked against `known` (an unknown one throws `bad()`).
template <typename Known, typename Bad>
std::vector<std::string> module_names(std::string_view item, const Known& known, const Bad& bad) {
    std::vector<std::string> names;
    for (std::string_view name : split(item, '+')) {
        if (std::find(known.begin(), known.end(), name) == known.end()) throw bad();
        names.emplace_back(name);
    }
    return names;
}

/// The module set recompute_modules_index numbers `i`.
RecomputeModules modules_of_index(int i) {
    return {(i & 1) != 0, (i & 2) != 0, (i & 4) != 0};
}

}  // namespace

std::vector<RecomputeModules> every_recompute_modules_set() {
    std::vector<RecomputeModules> all;
    for (int i = 1; i < 8; ++i)
        all.push_back(modules_of_index(i));
    return all;
}

std::string recompute_label(const ExecutionSpec& e) {
    if (e.recompute == Recompute::full && e.recompute_method == RecomputeMethod::block && e.recompute_layers > 0)
        return fmt::format("block:{}", e.recompute_layers);
    if (e.recompute != Recompute::selective) return to_string(e.recompute);
    const RecomputeModules& m = e.recompute_modules;
    if (m == RecomputeModules{}) return "selective";
    std::string s;
    for (const auto& [on, name] : {std::pair{m.core_attn, "attn"}, {m.layernorm, "ln"}, {m.mlp, "mlp"}})
        if (on) s += (s.empty() ? "sel:" : "+") + std::string(name);
    return s;
}

std::vector<VariedKey> search_varied_execution_keys() {
    auto fix = [](std::string_view key, std::string_view note = "") {
        return fmt::format("restrict it with --fix {}=VALUES instead{}", key, note);
    };
    std::vector<VariedKey> varied;
    for (const SearchKey& k : search_keys())
        varied.push_back({k.name, fix(k.name)});
    varied.push_back({"global_batch", "it is the search's own (--global-batch; Python: global_batch=)"});
    varied.push_back({"schedule", fix("interleave", " (1: 1F1B; 2 and more: the interleaved schedule)")});
    for (const char* key : {"account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"})
        varied.push_back({key, fix("ends_in_split")});
    // Partial full recompute is the recompute key's block value.
    for (const char* key : {"recompute_layers", "recompute_method"})
        varied.push_back(
            {key,
             fix("recompute", " (block: full recompute of the fewest first layers of each model chunk that fit)")});
    return varied;
}

const std::vector<SearchKey>& search_keys() {
    static const std::vector<SearchKey> keys = [] {
        std::vector<SearchKey> k;
        for (const auto& d : key_defs())
            k.push_back({d.name, d.default_values});
        return k;
    }();
    return keys;
}

void apply_constraint(SearchSpace& space, const std::string& constraint, const std::string& option) {
    const std::size_t eq = constraint.find('=');
    auto names = [] {
        std::string all;
        for (const auto& d : key_defs())
            all += (all.empty() ? "" : ", ") + std::string(d.name);
        return all;
    };
    if (eq == std::string::npos)
        throw InputError(
            fmt::format("search: {} '{}': expected KEY=VALUES (e.g. tensor=8, pipeline=4..16, "
                        "recompute=selective,full); keys: {}",
                        option, constraint, names()));
    const std::string key(trim(std::string_view(constraint).substr(0, eq)));
    const std::string_view values = trim(std::string_view(constraint).substr(eq + 1));
    const auto def = std::find_if(key_defs().begin(), key_defs().end(), [&](const KeyDef& d) { return key == d.name; });
    if (def == key_defs().end())
        throw InputError(fmt::format("search: {} '{}': unknown key '{}'; keys: {}", option, constraint, key, names()));
    auto bad = [&](std::string_view item, const char* expected) {
        return InputError(fmt::format("search: {} '{}': '{}' is not {}", option, constraint, item, expected));
    };
    if (values.empty()) throw bad(values, "a value");
    switch (def->kind) {
        case KeyKind::integer: {
            std::set<int> set;
            for (std::string_view item : split(values, ',')) {
                const std::size_t dots = item.find("..");
                const auto lo = positive(dots == std::string_view::npos ? item : trim(item.substr(0, dots)));
                const auto hi = dots == std::string_view::npos ? lo : positive(trim(item.substr(dots + 2)));
                if (!lo || !hi) throw bad(item, "a positive whole number or a range LO..HI of them (e.g. 8, 4..16)");
                if (*hi < *lo) throw bad(item, "a range LO..HI with LO <= HI");
                if (*hi - *lo > 100'000) throw bad(item, "a range of at most 100000 values");
                for (int v = *lo; v <= *hi; ++v)
                    set.insert(v);
            }
            space.*(def->ints) = std::vector<int>(set.begin(), set.end());
            return;
        }
        case KeyKind::boolean: {
            bool off = false, on = false;
            for (std::string_view item : split(values, ',')) {
                if (item == "on" || item == "true")
                    on = true;
                else if (item == "off" || item == "false")
                    off = true;
                else
                    throw bad(item, "on, off, true or false");
            }
            auto& v = space.*(def->bools);
            v.clear();
            if (off) v.push_back(false);
            if (on) v.push_back(true);
            return;
        }
        case KeyKind::recompute: {
            const Recompute all[] = {Recompute::none, Recompute::selective, Recompute::full};
            std::set<int> set;
            bool block = false;
            for (std::string_view item : split(values, ',')) {
                if (item == "block") {
                    block = true;
                    continue;
                }
                const auto it =
                    std::find_if(std::begin(all), std::end(all), [&](Recompute r) { return item == to_string(r); });
                if (it == std::end(all)) throw bad(item, "none, selective, full or block");
                set.insert(int(it - std::begin(all)));
            }
            space.recompute.clear();
            for (int i : set)
                space.recompute.push_back(all[i]);
            space.block_recompute = block;
            space.recompute_fixed = true;
            return;
        }
        case KeyKind::modules: {
            // Each set parsed by the loader's own table (recompute_modules_named), once its names are checked.
            std::map<int, RecomputeModules> sets;  // by recompute_modules_index: sorted, no repeats
            for (std::string_view item : split(values, ',')) {
                const std::vector<std::string> listed = module_names(item, kRecomputeModuleNames, [&] {
                    return bad(item, "a set of modules joined by + (core_attn, layernorm, mlp; e.g. layernorm+mlp)");
                });
                const RecomputeModules m = recompute_modules_named(listed);
                sets.emplace(recompute_modules_index(m), m);
            }
            space.modules_fixed = true;
            space.recompute_modules.clear();
            for (const auto& [index, m] : sets)
                space.recompute_modules.push_back(m);
            return;
        }
        case KeyKind::offload: {
            std::map<int, OffloadModules> sets;  // by offload_modules_index
            for (std::string_view item : split(values, ',')) {
                const std::vector<std::string> listed =
                    item == "none" ? std::vector<std::string>{} : module_names(item, kOffloadModuleNames, [&] {
                        return bad(item,
                                   "none or a set of modules joined by + (attn_norm, qkv_linear, core_attn, "
                                   "attn_proj, mlp_norm; e.g. qkv_linear+core_attn+attn_proj)");
                    });
                const OffloadModules m = offload_modules_named(listed);
                sets.emplace(offload_modules_index(m), m);
            }
            space.offload_modules.clear();
            for (const auto& [index, m] : sets)
                space.offload_modules.push_back(m);
            return;
        }
    }
}

}  // namespace strata
