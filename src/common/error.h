// The one exception type of deepinfer: thrown on load and validation paths with a message that
// names the file, tensor, field or value at fault. Never thrown from kernels or the per-token path.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace deepinfer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// throw_error("tensor {}: expected shape {}, got {}", name, want, got)
template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deepinfer

// Checks an invariant of our own input handling; on failure throws deepinfer::Error with the
// formatted message. Cheap enough for load paths; keep it out of inner loops.
#define DI_CHECK(cond, ...)                    \
  do {                                         \
    if (!(cond)) {                             \
      ::deepinfer::throw_error(__VA_ARGS__);   \
    }                                          \
  } while (false)
