// Strict YAML reading with source locations (see yaml_fields.hpp).
#include "yaml_fields.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <tuple>

namespace strata::yamlio {

std::string where(const std::string& file, const YAML::Mark& mark) {
    if (mark.line < 0) return file;
    return file + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

std::string where_value(const std::string& file, const YAML::Node& key, const YAML::Node& value) {
    // yaml-cpp marks an empty value at the next token (the next line, or past the end of the file).
    return where(file, value.IsNull() || value.Mark().line < 0 ? key.Mark() : value.Mark());
}

std::string where_value(const std::string& file, const YAML::Node& map, const std::string& key) {
    if (map.IsMap()) {
        for (auto it = map.begin(); it != map.end(); ++it) {
            if (it->first.IsScalar() && it->first.Scalar() == key) return where_value(file, it->first, it->second);
        }
    }
    return where(file, map.Mark());
}

namespace {
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}
}  // namespace

std::optional<std::string> did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
    // Bounded: the distance is at least the difference in length, so a candidate whose length differs by more
    // than the tolerance is skipped, and a word far longer than any key gets no hint (no quadratic work).
    const std::size_t tolerance = std::max<std::size_t>(2, word.size() / 3);
    std::optional<std::string> best;
    std::size_t best_d = std::numeric_limits<std::size_t>::max();
    if (word.size() > limits::kMaxHintLength) return best;
    for (auto c : candidates) {
        const std::size_t gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
        if (gap > tolerance) continue;
        std::size_t d = edit_distance(word, c);
        if (d < best_d) {
            best_d = d;
            best = std::string(c);
        }
    }
    if (best && best_d <= tolerance) return best;
    return std::nullopt;
}

std::string join(std::span<const std::string_view> words) {
    std::string out;
    for (auto w : words) {
        if (!out.empty()) out += ", ";
        out += w;
    }
    return out;
}

std::string number_text(double v) {
    std::array<char, 32> buf{};
    const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);  // shortest that reads back
    std::string out(buf.data(), ec == std::errc() ? end : buf.data());
    const auto e = out.find('e');
    if (e == std::string::npos) return out;
    std::string exponent = out.substr(e + 1);
    const bool negative = exponent[0] == '-';
    if (exponent[0] == '+' || negative) exponent.erase(0, 1);
    exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
    return out.substr(0, e + 1) + (negative ? "-" : "") + exponent;
}

Fields::Fields(std::string part, std::string origin) : part_(std::move(part)), origin_(std::move(origin)) {}

void Fields::reset(const YAML::Node& node, const std::string& file) {
    entries_.clear();
    origin_ = where(file, node.Mark());
    merge(node, file);
}

void Fields::merge(const YAML::Node& node, const std::string& file, std::span<const std::string_view> skip) {
    if (!node.IsMap()) {
        throw InputError(where(file, node.Mark()) + ": " + part_ + ": expected a mapping of keys");
    }
    std::map<std::string, YAML::Mark> seen;
    flatten(node, "", file, skip, seen);
}

void Fields::flatten(const YAML::Node& node, const std::string& prefix, const std::string& file,
                     std::span<const std::string_view> skip, std::map<std::string, YAML::Mark>& seen) {
    for (auto it = node.begin(); it != node.end(); ++it) {
        if (!it->first.IsScalar()) {
            throw InputError(where(file, it->first.Mark()) + ": " + part_ + ": keys must be plain names");
        }
        std::string key = prefix + it->first.Scalar();
        if (prefix.empty() && std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
        if (it->second.IsMap()) {
            flatten(it->second, key + ".", file, {}, seen);
        } else {
            // The same key written dotted and nested in one mapping (network.rails: and network: {rails:}).
            const auto [first, fresh] = seen.emplace(key, it->first.Mark());
            if (!fresh) {
                throw InputError(where(file, it->first.Mark()) + ": " + part_ + "." + key + ": given twice (first at " +
                                 where(file, first->second) + ")");
            }
            // Erase, then emplace: YAML::Node::operator= would write through the node shared with the
            // Fields this one was copied from (an experiment-level part), leaking a case's override.
            entries_.erase(key);
            entries_.emplace(key, Entry{it->first, it->second, file});
        }
    }
}

void Fields::set(const std::string& key, const YAML::Node& key_node, const YAML::Node& value, const std::string& file) {
    entries_.erase(key);
    entries_.emplace(key, Entry{key_node, value, file});
}

void Fields::check_known(std::span<const std::string_view> known) const {
    // The first unknown key as written (entries_ is in key order), and how many more there are.
    const std::pair<const std::string, Entry>* first = nullptr;
    std::size_t unknown = 0;
    auto position = [](const Entry& e) { return std::tuple(e.file, e.key.Mark().line, e.key.Mark().column); };
    for (const auto& entry : entries_) {
        if (std::find(known.begin(), known.end(), entry.first) != known.end()) continue;
        ++unknown;
        if (first == nullptr || position(entry.second) < position(first->second)) first = &entry;
    }
    if (first == nullptr) return;
    const auto& [key, e] = *first;
    std::string msg = where(e.file, e.key.Mark()) + ": unknown key '" + key + "' in " + part_ + ".";
    if (auto hint = did_you_mean(key, known)) msg += " Did you mean '" + *hint + "'?";
    if (unknown > 1) msg += " (" + std::to_string(unknown - 1) + " more unknown key" + (unknown > 2 ? "s" : "") + " after it.)";
    msg += " Valid keys: " + join(known) + ".";
    throw InputError(msg);
}

const Fields::Entry* Fields::find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
}

std::string Fields::loc(const std::string& key) const {
    if (const Entry* e = find(key)) return where(e->file, e->key.Mark());
    return origin_;
}

std::string Fields::missing_location(const std::string& key) const {
    // A dotted key belongs in a mapping: where its first written sibling is (device.peak_flops: the first key
    // under `device:`), the longest such prefix first; the part's own location when none is written.
    for (std::size_t dot = key.rfind('.'); dot != std::string::npos && dot > 0; dot = key.rfind('.', dot - 1)) {
        const std::string prefix = key.substr(0, dot + 1);
        const Entry* first = nullptr;
        for (auto it = entries_.lower_bound(prefix); it != entries_.end() && it->first.starts_with(prefix); ++it) {
            if (it->second.key.Mark().line < 0) continue;
            if (!first || (it->second.file == first->file && it->second.key.Mark().pos < first->key.Mark().pos))
                first = &it->second;
        }
        if (first) return where(first->file, first->key.Mark());
    }
    return origin_;
}

std::string Fields::file_of(const std::string& key) const {
    if (const Entry* e = find(key)) return e->file;
    auto colon = origin_.find(':');
    return colon == std::string::npos ? origin_ : origin_.substr(0, colon);
}

void Fields::fail(const std::string& key, const std::string& message) const {
    throw InputError(loc(key) + ": " + part_ + "." + key + ": " + message);
}

const Fields::Entry* Fields::require(const std::string& key, const std::function<std::string()>& expected) const {
    const Entry* e = find(key);
    if (!e) {
        MissingKey m{missing_location(key), part_, key, expected()};
        if (!missing_.keys) throw_missing({m});
        missing_.keys->push_back(std::move(m));
    }
    return e;
}

bool Fields::need(const std::string& key, const std::string& expected) const {
    return require(key, [&] { return expected; }) != nullptr;
}

void throw_missing(const std::vector<MissingKey>& missing) {
    std::string msg;
    for (const MissingKey& m : missing) {
        if (!msg.empty()) msg += "\n";
        msg += m.where + ": " + m.part + ": missing required key '" + m.key + "' (expected " + m.expected + ")";
    }
    if (!msg.empty()) throw InputError(msg);
}

CollectMissing::CollectMissing(const Fields& fields, std::vector<MissingKey>& sink)
    : fields_(fields), previous_(fields.missing_.keys) {
    fields_.missing_.keys = &sink;
}

CollectMissing::~CollectMissing() { fields_.missing_.keys = previous_; }

void Fields::fail_type(const Entry& e, const std::string& key, const std::string& expected) const {
    std::string got = e.value.IsScalar() ? "'" + e.value.Scalar() + "'"
                      : e.value.IsSequence() ? "a list"
                      : e.value.IsNull()     ? "nothing"
                                             : "a mapping";
    throw InputError(where_value(e.file, e.key, e.value) + ": " + part_ + "." + key + ": expected " + expected +
                     ", got " + got);
}

long long Fields::get_int(const std::string& key, long long min, long long max,
                          std::optional<long long> fallback) const {
    // The message texts are built only on failure: a 100000-case sweep reads every key of every case.
    auto expected = [&] { return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]"; };
    if (!has(key) && fallback) return *fallback;
    const Entry* found = require(key, expected);
    if (!found) return min;
    const Entry& e = *found;
    long long v = 0;
    bool ok = e.value.IsScalar();
    if (ok) {
        const std::string& s = e.value.Scalar();
        try {
            std::size_t pos = 0;
            v = std::stoll(s, &pos, 10);
            if (pos != s.size()) {
                // Accept integral values written in scientific notation (e.g. 2.24e3).
                double d = std::stod(s, &pos);
                ok = pos == s.size() && std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e18;
                if (ok) v = static_cast<long long>(d);  // converted only once known to fit (1e30 would not)
            }
        } catch (const std::exception&) {
            ok = false;
        }
    }
    if (!ok || v < min || v > max) fail_type(e, key, expected());
    return v;
}

double Fields::get_double(const std::string& key, double min, double max, std::optional<double> fallback) const {
    auto expected = [&] { return "a number in [" + number_text(min) + ", " + number_text(max) + "]"; };
    if (!has(key) && fallback) return *fallback;
    const Entry* found = require(key, expected);
    if (!found) return min;
    const Entry& e = *found;
    double v = 0;
    bool ok = e.value.IsScalar();
    if (ok) {
        const std::string& s = e.value.Scalar();
        try {
            std::size_t pos = 0;
            v = std::stod(s, &pos);
            ok = pos == s.size() && std::isfinite(v);
        } catch (const std::exception&) {
            ok = false;
        }
    }
    if (!ok || v < min || v > max) fail_type(e, key, expected());
    return v;
}

bool Fields::get_bool(const std::string& key, std::optional<bool> fallback) const {
    if (!has(key) && fallback) return *fallback;
    const Entry* found = require(key, [] { return std::string("true or false"); });
    if (!found) return false;
    const Entry& e = *found;
    if (e.value.IsScalar()) {
        const std::string& s = e.value.Scalar();
        if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
        if (s == "false" || s == "False" || s == "no" || s == "off") return false;
    }
    fail_type(e, key, "true or false");
}

std::string Fields::get_string(const std::string& key, std::optional<std::string> fallback) const {
    if (!has(key) && fallback) return *fallback;
    const Entry* found = require(key, [] { return std::string("a string"); });
    if (!found) return {};
    const Entry& e = *found;
    if (!e.value.IsScalar() || e.value.Scalar().empty()) fail_type(e, key, "a non-empty string");
    return e.value.Scalar();
}

std::string Fields::get_choice(const std::string& key, std::span<const std::string_view> choices,
                               std::optional<std::string> fallback) const {
    if (!has(key) && fallback) return *fallback;
    auto expected_text = [&] { return "one of: " + join(choices); };
    const Entry* found = require(key, expected_text);
    if (!found) return std::string(choices.front());
    const Entry& e = *found;
    if (e.value.IsScalar()) {
        const std::string& s = e.value.Scalar();
        if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
        const std::string expected = expected_text();
        std::string msg = where(e.file, e.value.Mark()) + ": " + part_ + "." + key + ": '" + s +
                          "' is not valid; expected " + expected;
        if (auto hint = did_you_mean(s, choices)) msg += " (did you mean '" + *hint + "'?)";
        throw InputError(msg);
    }
    fail_type(e, key, expected_text());
}

std::vector<std::string> Fields::get_choices(const std::string& key, std::span<const std::string_view> choices,
                                             std::vector<std::string> fallback, bool allow_empty) const {
    const std::string expected = "a list of: " + join(choices);
    const Entry* found = find(key);
    if (!found) return fallback;
    const Entry& e = *found;
    std::vector<YAML::Node> items;
    if (e.value.IsScalar()) {
        items.push_back(e.value);
    } else if (e.value.IsSequence()) {
        for (const auto& item : e.value) items.push_back(item);
    } else {
        fail_type(e, key, expected);
    }
    std::vector<std::string> out;
    for (const YAML::Node& item : items) {
        if (!item.IsScalar()) fail_type(e, key, expected);
        const std::string& s = item.Scalar();
        if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
            std::string msg = where(e.file, item.Mark()) + ": " + part_ + "." + key + ": '" + s + "' is not valid; expected " +
                              expected;
            if (auto hint = did_you_mean(s, choices)) msg += " (did you mean '" + *hint + "'?)";
            throw InputError(msg);
        }
        if (std::find(out.begin(), out.end(), s) != out.end())
            throw InputError(where(e.file, item.Mark()) + ": " + part_ + "." + key + ": '" + s + "' is listed twice");
        out.push_back(s);
    }
    if (out.empty() && !allow_empty) fail_type(e, key, "a non-empty list of: " + join(choices));
    return out;
}

}  // namespace strata::yamlio
