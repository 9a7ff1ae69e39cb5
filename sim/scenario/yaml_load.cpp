// Loading YAML safely: a file or text parsed into one mapping, within the loader's limits (size, values, depth),
// with duplicate keys, second documents and open quotes refused (see yaml_fields.hpp), and the files an
// experiment reads recorded.
#include "yaml_fields.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace strata::yamlio {

namespace {

/// Walks a freshly parsed document once, before anything reads it: counts the nodes as the readers will see
/// them (an alias counts again at each use, so "billion laughs" stops at the limit, not at the memory's),
/// bounds the nesting, rejects duplicate and non-scalar keys, and remembers the last quoted scalar (see
/// check_unclosed_quote).
class DocumentCheck {
public:
    DocumentCheck(const std::string& file) : file_(file) {}

    void walk(const YAML::Node& n, int depth) {
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
            for (const YAML::Node& item : n) walk(item, depth + 1);
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
                walk(it->second, depth + 1);
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
    void note_scalar(const YAML::Node& n) {
        if (n.Tag() == "!" && n.Mark().pos > last_quoted_pos_) {
            last_quoted_pos_ = n.Mark().pos;
            last_quoted_mark_ = n.Mark();
        }
    }

    const std::string& file_;
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
        DocumentCheck check(file);
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

}  // namespace strata::yamlio
