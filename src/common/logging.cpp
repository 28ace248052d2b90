// Logger implementation: one mutex around stderr writes so lines from threads never interleave.
#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "common/env.h"
#include "common/error.h"

namespace deepinfer::log {
namespace {

std::atomic<int>& level_storage() {
  static std::atomic<int> storage{static_cast<int>(parse_level(env::flags().log_level))};
  return storage;
}

std::mutex& write_mutex() {
  static std::mutex mutex;
  return mutex;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "?";
}

}  // namespace

Level level() { return static_cast<Level>(level_storage().load(std::memory_order_relaxed)); }

void set_level(Level level) { level_storage().store(static_cast<int>(level)); }

Level parse_level(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  throw_error("log level '{}' is not one of debug, info, warn, error, off", name);
}

void write(Level level, std::string_view message) {
  using Clock = std::chrono::system_clock;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      Clock::now().time_since_epoch()).count() % 86'400'000;
  const std::string line = fmt::format("[deepinfer {:02}:{:02}:{:02}.{:03} {}] {}\n", ms / 3'600'000,
                                       ms / 60'000 % 60, ms / 1000 % 60, ms % 1000,
                                       level_name(level), message);
  std::lock_guard<std::mutex> lock(write_mutex());
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace deepinfer::log
