// The one logger of the library: leveled, to stderr, thread-safe. Front-ends (CLI, Python) own
// progress bars; library code only logs.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace deepinfer::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Initialised once from DEEPINFER_LOG_LEVEL (debug|info|warn|error|off); default warn.
Level level();
void set_level(Level level);
// Parses a level name; throws deepinfer::Error naming the bad value.
Level parse_level(std::string_view name);

void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kError) write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace deepinfer::log
