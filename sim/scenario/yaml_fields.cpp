// Strict YAML reading with source locations (see yaml_fields.hpp).
#include "yaml_fields.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <unordered_map>

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

/// Walks a freshly parsed document once, before anything reads it: counts the nodes as the readers will see
/// them (an alias counts again at each use, so "billion laughs" stops at the limit, not at the memory's),
/// bounds the nesting, rejects duplicate and non-scalar keys, and remembers the last quoted scalar (see
/// check_unclosed_quote).
class DocumentCheck {
public:
    DocumentCheck(const std::string& file, const std::string& text) : file_(file), text_(text) {}

    void walk(const YAML::Node& n, int depth, const std::string& path = "") {
        if (++visited_ > limits::kMaxNodes) {
            throw InputError(where(file_, n.Mark()) + ": more than " + std::to_string(limits::kMaxNodes) +
                             " YAML values (an alias counts at each use); the loader's limit, an experiment needs far fewer");
        }
        if (depth > limits::kMaxDepth) {
            throw InputError(where(file_, n.Mark()) + ": YAML nested more than " + std::to_string(limits::kMaxDepth) +
                             " levels deep; the loader's limit");
        }
        if (n.IsScalar()) {
            note_scalar(n);
        } else if (n.IsSequence()) {
            std::size_t i = 0;
            for (const YAML::Node& item : n) {
                // No list in a scenario, system or profile file takes an empty item ("-" alone, "[1, , 2]").
                if (item.IsNull()) {
                    throw InputError(where(file_, empty_item_mark(item.Mark())) + ": " + path + "[" +
                                     std::to_string(i) + "]: empty list item; expected a value");
                }
                walk(item, depth + 1, path + "[" + std::to_string(i) + "]");
                ++i;
            }
        } else if (n.IsMap()) {
            std::unordered_map<std::string, YAML::Mark> seen;
            for (auto it = n.begin(); it != n.end(); ++it) {
                const YAML::Node key = it->first;
                if (!key.IsScalar()) {
                    throw InputError(where(file_, key.Mark()) + ": expected a plain name as the key, got " +
                                     (key.IsSequence() ? "a list" : key.IsMap() ? "a mapping" : "nothing"));
                }
                note_scalar(key);
                const auto [first, fresh] = seen.emplace(key.Scalar(), key.Mark());
                if (!fresh) {
                    throw InputError(where(file_, key.Mark()) + ": duplicate key '" + key.Scalar() + "' (first at " +
                                     where(file_, first->second) + "); each key may be given once");
                }
                ++visited_;
                walk(it->second, depth + 1, path.empty() ? key.Scalar() : path + "." + key.Scalar());
            }
        }
    }

    /// yaml-cpp 0.7 accepts a quoted scalar left open at the end of the file (`name: "abc` and a newline):
    /// only the last quoted scalar can run to the end, so it alone is scanned for its closing quote.
    void check_unclosed_quote(const std::string& text) const {
        if (last_quoted_pos_ < 0 || static_cast<std::size_t>(last_quoted_pos_) >= text.size()) return;
        const auto pos = static_cast<std::size_t>(last_quoted_pos_);
        const char q = text[pos];
        if (q != '"' && q != '\'') return;  // a block scalar (| or >)
        for (std::size_t i = pos + 1; i < text.size(); ++i) {
            if (q == '"' && text[i] == '\\') {
                ++i;
            } else if (text[i] == q) {
                if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
                    ++i;
                } else {
                    return;
                }
            }
        }
        throw InputError(where(file_, last_quoted_mark_) + ": unclosed quote (" + std::string(1, q) +
                         "): the string runs to the end of the file");
    }

private:
    /// yaml-cpp marks an empty item at the next token (the next line, or past the end of the file): the item is
    /// where its '-', ',' or '[' is, the last such character before the mark outside a comment. An explicit null
    /// ("~", "null") is marked where it is written.
    YAML::Mark empty_item_mark(const YAML::Mark& mark) const {
        if (mark.pos < 0) return mark;
        auto pos = std::min(static_cast<std::size_t>(mark.pos), text_.size());
        const auto written = [&](const char* word) {
            const std::size_t n = std::char_traits<char>::length(word);
            if (text_.compare(pos, n, word) != 0) return false;
            return pos + n >= text_.size() || std::string_view(" \t\r\n,]#").find(text_[pos + n]) != std::string_view::npos;
        };
        if (written("~") || written("null") || written("Null") || written("NULL")) return mark;
        // Walk back line by line; on each line only what comes before a comment counts.
        std::size_t line_end = pos;
        int line = mark.line;
        while (true) {
            const std::size_t line_start = text_.rfind('\n', line_end == 0 ? std::string::npos : line_end - 1);
            const std::size_t begin = line_start == std::string::npos ? 0 : line_start + 1;
            std::size_t stop = line_end;
            for (std::size_t i = begin; i < line_end; ++i) {
                if (text_[i] == '#' && (i == begin || text_[i - 1] == ' ' || text_[i - 1] == '\t')) {
                    stop = i;
                    break;
                }
            }
            for (std::size_t i = stop; i > begin; --i) {
                const char c = text_[i - 1];
                if (c == ' ' || c == '\t' || c == '\r') continue;
                if (c != '-' && c != ',' && c != '[') return mark;
                YAML::Mark m;
                m.pos = static_cast<int>(i - 1);
                m.line = line;
                m.column = static_cast<int>(i - 1 - begin);
                return m;
            }
            if (begin == 0 || line <= 0) return mark;
            line_end = begin - 1;
            --line;
        }
    }

    void note_scalar(const YAML::Node& n) {
        if (n.Tag() == "!" && n.Mark().pos > last_quoted_pos_) {
            last_quoted_pos_ = n.Mark().pos;
            last_quoted_mark_ = n.Mark();
        }
    }

    const std::string& file_;
    const std::string& text_;
    std::size_t visited_ = 0;
    int last_quoted_pos_ = -1;
    YAML::Mark last_quoted_mark_;
};

/// Records where the first two documents of a stream start (the parser's events, nothing built).
class DocumentStarts : public YAML::EventHandler {
public:
    int count = 0;
    YAML::Mark first, second;
    void OnDocumentStart(const YAML::Mark& mark) override {
        if (++count == 1) first = mark;
        else if (count == 2) second = mark;
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

YAML::Node parse_mapping(const std::string& text, const std::string& file) {
    if (text.size() > limits::kMaxFileBytes) {
        YAML::Mark at;  // where the limit is crossed
        at.pos = static_cast<int>(limits::kMaxFileBytes);
        at.line = static_cast<int>(std::count(text.begin(), text.begin() + limits::kMaxFileBytes, '\n'));
        const auto nl = text.rfind('\n', limits::kMaxFileBytes - 1);
        at.column = static_cast<int>(nl == std::string::npos ? limits::kMaxFileBytes : limits::kMaxFileBytes - nl - 1);
        throw InputError(where(file, at) + ": the file is longer than the loader's limit of " +
                         std::to_string(limits::kMaxFileBytes) + " bytes for one YAML file");
    }
    // Before parsing (yaml-cpp takes microseconds and hundreds of bytes per value): a value needs at least one
    // separator (, - : [ { or a line break), so twice the value limit in separators is more than any file
    // within the limit needs.
    {
        YAML::Mark at;
        at.line = 0;
        at.column = 0;
        std::size_t separators = 0;
        for (std::size_t i = 0; i < text.size(); ++i) {
            const char c = text[i];
            if (c == ',' || c == '-' || c == ':' || c == '[' || c == '{' || c == '\n') {
                if (++separators > 2 * limits::kMaxNodes) {
                    throw InputError(where(file, at) + ": more than " + std::to_string(2 * limits::kMaxNodes) +
                                     " separators (, - : [ { and line breaks): more YAML values than the loader's limit of " +
                                     std::to_string(limits::kMaxNodes));
                }
            }
            if (c == '\n') {
                ++at.line;
                at.column = 0;
            } else {
                ++at.column;
            }
        }
    }
    try {
        // yaml-cpp's LoadAll loops forever on some malformed text (a lone ','): the documents are counted with
        // the parser instead, at most two, and a document that starts where the previous one did is an error.
        {
            std::istringstream in(text);
            YAML::Parser parser(in);
            DocumentStarts starts;
            if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts) && starts.count >= 2) {
                if (starts.second.pos <= starts.first.pos) {
                    const auto at = static_cast<std::size_t>(std::max(starts.second.pos, 0));
                    throw InputError(where(file, starts.second) + ": YAML syntax error: unexpected '" +
                                     (at < text.size() ? std::string(1, text[at]) : std::string("end of file")) + "'");
                }
                throw InputError(where(file, starts.second) +
                                 ": a second YAML document ('---'); a file holds one mapping (split it into files)");
            }
        }
        YAML::Node node = YAML::Load(text);
        if (!node.IsDefined() || node.IsNull()) {
            throw InputError(file + ":1:1: the file is empty, expected a YAML mapping");
        }
        if (!node.IsMap()) {
            throw InputError(where(file, node.Mark()) + ": expected a YAML mapping (key: value lines)");
        }
        DocumentCheck check(file, text);
        check.walk(node, 0);
        check.check_unclosed_quote(text);
        return node;
    } catch (const YAML::Exception& e) {
        throw InputError(where(file, e.mark) + ": YAML syntax error: " + e.msg);
    }
}
}  // namespace

namespace {
thread_local InputRecorder* g_recorder = nullptr;
}  // namespace

InputRecorder::InputRecorder() : previous_(g_recorder) { g_recorder = this; }
InputRecorder::~InputRecorder() { g_recorder = previous_; }
void InputRecorder::add(const std::filesystem::path& file) {
    const std::filesystem::path f = file.lexically_normal();
    if (std::find(files_.begin(), files_.end(), f) == files_.end()) files_.push_back(f);
}

YAML::Node load_file(const std::filesystem::path& file) {
    if (g_recorder) g_recorder->add(file);
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) {
        throw InputError(file.string() + ": file not found");
    }
    if (std::filesystem::is_directory(file, ec)) {
        throw InputError(file.string() + ": is a directory, expected a YAML file");
    }
    if (!std::filesystem::is_regular_file(file, ec)) {
        throw InputError(file.string() + ": not a regular file (a device, pipe or socket), expected a YAML file");
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string() + ": cannot be read (permission denied?)");
    // Read at most one byte past the limit: the size on disk is not trusted (a /proc file says 0).
    std::string text(limits::kMaxFileBytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) throw InputError(file.string() + ": read error");
    text.resize(static_cast<std::size_t>(in.gcount()));
    return parse_mapping(text, file.string());
}

YAML::Node load_text(const std::string& text, const std::string& origin) { return parse_mapping(text, origin); }

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
    for (const auto& [key, e] : entries_) {
        if (std::find(known.begin(), known.end(), key) != known.end()) continue;
        std::string msg = where(e.file, e.key.Mark()) + ": unknown key '" + key + "' in " + part_ + ".";
        if (auto hint = did_you_mean(key, known)) msg += " Did you mean '" + *hint + "'?";
        msg += " Valid keys: " + join(known) + ".";
        throw InputError(msg);
    }
}

const Fields::Entry* Fields::find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
}

std::string Fields::loc(const std::string& key) const {
    if (const Entry* e = find(key)) return where(e->file, e->key.Mark());
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

const Fields::Entry& Fields::require(const std::string& key, const std::function<std::string()>& expected) const {
    const Entry* e = find(key);
    if (!e) {
        throw InputError(origin_ + ": " + part_ + ": missing required key '" + key + "' (expected " + expected() +
                         ")");
    }
    return *e;
}

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
    const Entry& e = require(key, expected);
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
                v = static_cast<long long>(d);
            }
        } catch (const std::exception&) {
            ok = false;
        }
    }
    if (!ok || v < min || v > max) fail_type(e, key, expected());
    return v;
}

double Fields::get_double(const std::string& key, double min, double max, std::optional<double> fallback) const {
    auto expected = [&] { return "a number in [" + std::to_string(min) + ", " + std::to_string(max) + "]"; };
    if (!has(key) && fallback) return *fallback;
    const Entry& e = require(key, expected);
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
    const Entry& e = require(key, [] { return std::string("true or false"); });
    if (e.value.IsScalar()) {
        const std::string& s = e.value.Scalar();
        if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
        if (s == "false" || s == "False" || s == "no" || s == "off") return false;
    }
    fail_type(e, key, "true or false");
}

std::string Fields::get_string(const std::string& key, std::optional<std::string> fallback) const {
    if (!has(key) && fallback) return *fallback;
    const Entry& e = require(key, [] { return std::string("a string"); });
    if (!e.value.IsScalar() || e.value.Scalar().empty()) fail_type(e, key, "a non-empty string");
    return e.value.Scalar();
}

std::string Fields::get_choice(const std::string& key, std::span<const std::string_view> choices,
                               std::optional<std::string> fallback) const {
    if (!has(key) && fallback) return *fallback;
    auto expected_text = [&] { return "one of: " + join(choices); };
    const Entry& e = require(key, expected_text);
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
                                             std::vector<std::string> fallback) const {
    const std::string expected = "a list of: " + join(choices);
    if (!has(key)) return fallback;
    const Entry& e = require(key, [&] { return expected; });
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
    if (out.empty()) fail_type(e, key, "a non-empty list of: " + join(choices));
    return out;
}

}  // namespace strata::yamlio
