// Loading YAML safely: a file or text parsed into one mapping, within the loader's limits (size, values, depth),
// with duplicate keys, second documents and open quotes refused (see yaml_fields.hpp), and the files an
// experiment reads recorded.
#include "yaml_fields.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace strata::yamlio {

namespace {

/// Walks a freshly parsed document once, before anything reads it: counts the nodes as the readers will see
/// them (an alias counts again at each use, so "billion laughs" stops at the limit, not at the memory's),
/// bounds the nesting, rejects duplicate and non-scalar keys, and remembers the last quoted scalar (see
/// check_unclosed_quote).
class DocumentCheck {
public:
    DocumentCheck(const std::string& file, const std::string& text) : file_(file), text_(text) {}

    /// Where the walk is, as a chain of frames on the stack: the path text (`sweep.execution.microbatch[1]`) is
    /// only written when an error needs it, not for every node of every file.
    struct Frame {
        const Frame* parent;
        const std::string* key;  ///< a mapping's key, or null for a list item
        std::size_t index;       ///< the list item's index
    };
    static std::string path_of(const Frame* f) {
        if (f == nullptr) return {};
        std::string head = path_of(f->parent);
        if (f->key == nullptr) return head + "[" + std::to_string(f->index) + "]";
        return head.empty() ? *f->key : head + "." + *f->key;
    }

    void walk(const YAML::Node& n, int depth, const Frame* frame = nullptr) {
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
                const Frame here{frame, nullptr, i};
                if (item.IsNull()) {
                    throw InputError(where(file_, empty_item_mark(item.Mark())) + ": " + path_of(&here) +
                                     ": empty list item; expected a value");
                }
                walk(item, depth + 1, &here);
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
                const Frame here{frame, &key.Scalar(), 0};
                walk(it->second, depth + 1, &here);
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

}  // namespace strata::yamlio
