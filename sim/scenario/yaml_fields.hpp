// Strict YAML reading with source locations: every value remembers the file and line it came from,
// so that any problem is reported as `file:line:col: message` naming the key and what was expected.
// Private to sim/: yaml-cpp types never appear in include/strata/.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::yamlio {

/// What the loader accepts at most, checked before anything is built from the input (README "Tests: fuzzing").
namespace limits {
inline constexpr std::size_t kMaxFileBytes = 1 << 20;  ///< one YAML file (the largest shipped is 10 kB)
inline constexpr std::size_t kMaxNodes = 50000;        ///< values in one file, an alias counted at each use
inline constexpr int kMaxDepth = 32;                   ///< nesting of mappings and lists
inline constexpr std::size_t kMaxHintLength = 64;      ///< longer unknown words get no "did you mean"
inline constexpr std::size_t kMaxCases = 10000;        ///< cases of one experiment (cases x sweep)
}  // namespace limits

/// `file:line:col` (1-based) for a node.
std::string where(const std::string& file, const YAML::Mark& mark);
/// Where a value is, or its key when the value is empty (yaml-cpp marks an empty value at the next token).
std::string where_value(const std::string& file, const YAML::Node& key, const YAML::Node& value);
/// The same for the entry `key` of mapping `map` (the mapping's own location when it has no such key).
std::string where_value(const std::string& file, const YAML::Node& map, const std::string& key);

/// Loads a YAML file; a missing, unreadable or malformed file throws InputError with its location.
YAML::Node load_file(const std::filesystem::path& file);

/// While one lives, records every file load_file reads on this thread (an experiment's inputs: its own file,
/// the part files and device profiles), each once, in the order first read.
class InputRecorder {
public:
    InputRecorder();
    ~InputRecorder();
    InputRecorder(const InputRecorder&) = delete;
    InputRecorder& operator=(const InputRecorder&) = delete;
    void add(const std::filesystem::path& file);
    [[nodiscard]] const std::vector<std::filesystem::path>& files() const { return files_; }

private:
    std::vector<std::filesystem::path> files_;
    InputRecorder* previous_;
};
/// The same for YAML text already in memory; `origin` names it in messages.
YAML::Node load_text(const std::string& text, const std::string& origin);

/// Closest candidate by edit distance, if it is close enough to be a plausible typo.
std::optional<std::string> did_you_mean(std::string_view word, std::span<const std::string_view> candidates);

/// "a, b, c"
std::string join(std::span<const std::string_view> words);

/// A number as a message writes it: the shortest text that reads back as `v` (64, 0.13, 1e15, 1048576).
std::string number_text(double v);

/// A required key that was not given: where it belongs (its part's mapping, `file:line:col`), the part, the key
/// and what it expects.
struct MissingKey {
    std::string where;
    std::string part;
    std::string key;
    std::string expected;
};

/// One InputError naming every key of `missing`, a line each (`file:line:col: part: missing required key 'k'
/// (expected ...)`); returns when `missing` is empty.
void throw_missing(const std::vector<MissingKey>& missing);

class Fields;

/// While one lives, a missing required key read from `fields` is recorded in `sink` and the getter returns a
/// stand-in value (the range's minimum, false, an empty string, the first choice) instead of throwing, so a
/// reader goes on and finds every missing key; the caller then calls throw_missing. Any other error a reader
/// throws while keys are missing may come from a stand-in: the missing keys are the error to report then.
class CollectMissing {
public:
    CollectMissing(const Fields& fields, std::vector<MissingKey>& sink);
    ~CollectMissing();
    CollectMissing(const CollectMissing&) = delete;
    CollectMissing& operator=(const CollectMissing&) = delete;

private:
    const Fields& fields_;
    std::vector<MissingKey>* previous_;
};

/// A flattened mapping (nested mappings become dotted keys) whose entries remember their file.
/// Later merges override earlier ones key by key.
class Fields {
public:
    struct Entry {
        YAML::Node key;
        YAML::Node value;
        std::string file;
    };

    Fields(std::string part, std::string origin);

    /// Replaces everything with the mapping `node` read from `file`.
    void reset(const YAML::Node& node, const std::string& file);
    /// Overrides key by key with the mapping `node` read from `file`. Keys in `skip` are ignored.
    void merge(const YAML::Node& node, const std::string& file, std::span<const std::string_view> skip = {});

    /// Sets one (flat) key to `value`, `key_node` giving its location. No new YAML node is built, so no
    /// yaml-cpp memory is merged between documents (which makes large sweeps quadratic).
    void set(const std::string& key, const YAML::Node& key_node, const YAML::Node& value, const std::string& file);

    /// Every key must be one of `known`; otherwise InputError with a "did you mean" hint.
    void check_known(std::span<const std::string_view> known) const;

    [[nodiscard]] bool has(const std::string& key) const { return entries_.count(key) != 0; }
    [[nodiscard]] const Entry* find(const std::string& key) const;
    /// Location of the key if present, else of the part itself.
    [[nodiscard]] std::string loc(const std::string& key) const;
    [[nodiscard]] const std::string& part() const { return part_; }
    /// The file the key's value came from (or the part's origin).
    [[nodiscard]] std::string file_of(const std::string& key) const;

    long long get_int(const std::string& key, long long min, long long max,
                      std::optional<long long> fallback = std::nullopt) const;
    double get_double(const std::string& key, double min, double max,
                      std::optional<double> fallback = std::nullopt) const;
    bool get_bool(const std::string& key, std::optional<bool> fallback = std::nullopt) const;
    std::string get_string(const std::string& key, std::optional<std::string> fallback = std::nullopt) const;
    std::string get_choice(const std::string& key, std::span<const std::string_view> choices,
                           std::optional<std::string> fallback = std::nullopt) const;

    /// A list of distinct choices (a YAML sequence of strings, or one string for a one-element list); `[]` only with
    /// allow_empty.
    std::vector<std::string> get_choices(const std::string& key, std::span<const std::string_view> choices,
                                         std::vector<std::string> fallback, bool allow_empty = false) const;

    /// Throws InputError located at `key` (or the part when absent).
    [[noreturn]] void fail(const std::string& key, const std::string& message) const;

    /// A key required only in some cases (the getter gives it a fallback): when absent, reported as a missing
    /// required key expecting `expected` (recorded under a CollectMissing, thrown otherwise). True when present.
    bool need(const std::string& key, const std::string& expected) const;

private:
    /// `seen`: the flat keys of this one mapping so far (a key written dotted and nested is an error).
    void flatten(const YAML::Node& node, const std::string& prefix, const std::string& file,
                 std::span<const std::string_view> skip, std::map<std::string, YAML::Mark>& seen);
    /// The entry of `key`; when absent, InputError saying `expected()` (built only then), or, under a
    /// CollectMissing, nullptr after recording the key.
    const Entry* require(const std::string& key, const std::function<std::string()>& expected) const;
    [[noreturn]] void fail_type(const Entry& e, const std::string& key, const std::string& expected) const;

    friend class CollectMissing;
    /// Where CollectMissing records missing keys; a copy of the Fields does not share it.
    struct MissingSink {
        std::vector<MissingKey>* keys = nullptr;
        MissingSink() = default;
        MissingSink(const MissingSink&) {}
        MissingSink& operator=(const MissingSink&) { return *this; }
    };

    std::string part_;
    std::string origin_;
    std::map<std::string, Entry> entries_;
    /// Where a missing `key` is reported (see require).
    [[nodiscard]] std::string missing_location(const std::string& key) const;
    mutable MissingSink missing_;
};

}  // namespace strata::yamlio
