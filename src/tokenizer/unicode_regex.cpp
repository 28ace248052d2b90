// PCRE2 wrapper: compile with UTF|UCP, JIT when available, thread-local match data and JIT stack.
#include "tokenizer/unicode_regex.h"

#include <pcre2.h>

#include <fmt/format.h>

#include <span>

#include "common/error.h"
#include "common/utf8.h"
#include "tokenizer/onig_unicode_tables.h"

namespace deepinfer::tokenizer {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "unknown PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buffer));
}

// Per-thread scratch: one match data block (only group 0 is read) and a JIT stack large enough
// for long whitespace or letter runs; freed when the thread exits.
struct ThreadScratch {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() {
    if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
};

ThreadScratch& scratch() {
  thread_local ThreadScratch instance;
  return instance;
}

// Class-body text (no brackets) listing the ranges, e.g. "\\x{1c89}-\\x{1c8a}\\x{a7cb}".
std::string class_body(std::span<const onig_tables::Range> ranges) {
  std::string out;
  for (const auto& r : ranges) {
    out += fmt::format("\\x{{{:x}}}", static_cast<std::uint32_t>(r.first));
    if (r.last != r.first) out += fmt::format("-\\x{{{:x}}}", static_cast<std::uint32_t>(r.last));
  }
  return out;
}

// The code points Oniguruma's \p{name} has beyond PCRE2's tables, or nullptr.
const std::string* onig_additions(std::string_view name) {
  static const std::string letter = class_body(onig_tables::kLetter);
  static const std::string number = class_body(onig_tables::kNumber);
  static const std::string punctuation = class_body(onig_tables::kPunctuation);
  static const std::string symbol = class_body(onig_tables::kSymbol);
  static const std::string mark = class_body(onig_tables::kMark);
  if (name == "L") return &letter;
  if (name == "N") return &number;
  if (name == "P") return &punctuation;
  if (name == "S") return &symbol;
  if (name == "M") return &mark;
  return nullptr;
}

const std::string& onig_space() {
  static const std::string body = class_body(onig_tables::kSpace);
  return body;
}

}  // namespace

// HF tokenizers runs its regexes on Oniguruma, whose Unicode tables are newer than PCRE2's and
// whose \s is the White_Space property (PCRE2's also has U+180E). We rewrite \p{L} \p{N}
// \p{P} \p{S} \p{M} (and \P{..} outside a class) to include Oniguruma's extra code points, and
// \s / \S (outside a class) to Oniguruma's list, so both engines agree on every code point.
std::string to_oniguruma_classes(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  bool in_class = false;
  std::size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      if (d == 'Q') {  // \Q...\E is literal text
        const std::size_t e = p.find("\\E", i + 2);
        const std::size_t stop = e == std::string_view::npos ? p.size() : e + 2;
        out.append(p.substr(i, stop - i));
        i = stop;
        continue;
      }
      if ((d == 'p' || d == 'P') && i + 2 < p.size()) {
        std::size_t end = i + 3;
        std::string_view name = p.substr(i + 2, 1);
        if (p[i + 2] == '{') {
          const std::size_t close = p.find('}', i + 3);
          if (close == std::string_view::npos) break;  // malformed: PCRE2 reports it below
          name = p.substr(i + 3, close - i - 3);
          end = close + 1;
        }
        const std::string_view original = p.substr(i, end - i);
        const std::string* extra = onig_additions(name);
        if (extra != nullptr && d == 'p') {
          out += in_class ? fmt::format("{}{}", original, *extra) : fmt::format("[{}{}]", original, *extra);
        } else if (extra != nullptr && !in_class) {
          out += fmt::format("[^\\p{{{}}}{}]", name, *extra);
        } else {
          out.append(original);
        }
        i = end;
        continue;
      }
      if (d == 's' || (d == 'S' && !in_class)) {
        out += in_class ? onig_space() : fmt::format("[{}{}]", d == 'S' ? "^" : "", onig_space());
        i += 2;
        continue;
      }
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a literal ] first in a class
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const std::size_t e = p.find(":]", i + 2);
      if (e != std::string_view::npos) {
        out.append(p.substr(i, e + 2 - i));
        i = e + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  if (i < p.size()) out.append(p.substr(i));
  return out;
}

struct UnicodeRegex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

UnicodeRegex::UnicodeRegex(std::string_view pattern, std::string_view what, Options options)
    : pattern_(pattern), what_(what), compiled_(std::make_unique<Compiled>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  uint32_t flags = PCRE2_UTF | PCRE2_NO_UTF_CHECK;
  flags |= options.literal ? PCRE2_LITERAL : PCRE2_UCP;  // PCRE2 refuses UCP with LITERAL
  if (options.anchored) flags |= PCRE2_ANCHORED;
  DI_CHECK(utf8::is_valid(pattern), "{}: pattern is not valid UTF-8", what_);
  const std::string source = options.literal ? std::string(pattern) : to_oniguruma_classes(pattern);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), flags, &error_code,
                                  &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    throw_error("{}: cannot compile regex '{}' at offset {}: {}", what_, pattern_, error_offset,
                pcre2_message(error_code));
  }
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

UnicodeRegex::~UnicodeRegex() = default;
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;

namespace {

// One search from `start`; returns false when there is no further match.
bool search(const pcre2_code* code, bool jit, std::string_view text, std::size_t start, MatchSpan& span,
            std::string_view what) {
  constexpr uint32_t options = 0;
  ThreadScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = jit ? pcre2_jit_match(code, subject, text.size(), start, options, s.match_data, s.context)
               : pcre2_match(code, subject, text.size(), start, options | PCRE2_NO_UTF_CHECK, s.match_data, s.context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    // Pathological input for the JIT stack: the interpreter keeps its frames on the heap.
    rc = pcre2_match(code, subject, text.size(), start, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s.match_data,
                     s.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw_error("{}: regex match failed: {}", what, pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.match_data);
  span = {ovector[0], ovector[1]};
  return true;
}

std::size_t char_length_at(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return 1;
  const auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

}  // namespace

void UnicodeRegex::find_all(std::string_view text, std::vector<MatchSpan>& out) const {
  out.clear();
  std::size_t last_end = 0;
  bool skip_next_empty = false;
  MatchSpan span{};
  while (last_end <= text.size()) {
    if (!search(compiled_->code, compiled_->jit, text, last_end, span, what_)) break;
    last_end = span.end;
    if (span.start == span.end) {
      last_end += char_length_at(text, last_end);
      if (skip_next_empty) {
        skip_next_empty = false;
        continue;
      }
    } else {
      skip_next_empty = true;
    }
    out.push_back(span);
  }
}

bool UnicodeRegex::matches_at(std::string_view text, std::size_t pos) const {
  MatchSpan span{};
  return search(compiled_->code, compiled_->jit, text, pos, span, what_);
}

}  // namespace deepinfer::tokenizer
