// Logging: thin macros over spdlog so that only logging.cc includes it.
// Thread-safe. Levels: debug, info, warn, error. CIUIC_LOG_LEVEL=debug|info|warn|error sets it.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace ciuic::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Writes one line at `level`. Cheap to call when the level is off.
void Write(Level level, std::string_view msg);
bool Enabled(Level level);
void SetLevel(Level level);
// Directs logs to `path` (appending) instead of stderr; used by the servers' --log flag.
void SetFile(const std::string& path);
// Sets the process name shown in each line ("mds", "oss0", ...).
void SetName(const std::string& name);

}  // namespace ciuic::log

#define CIUIC_LOG_AT_(lvl, ...)                             \
  do {                                                      \
    if (::ciuic::log::Enabled(lvl)) {                       \
      ::ciuic::log::Write(lvl, ::fmt::format(__VA_ARGS__)); \
    }                                                       \
  } while (0)
#define LOG_DEBUG(...) CIUIC_LOG_AT_(::ciuic::log::Level::kDebug, __VA_ARGS__)
#define LOG_INFO(...) CIUIC_LOG_AT_(::ciuic::log::Level::kInfo, __VA_ARGS__)
#define LOG_WARN(...) CIUIC_LOG_AT_(::ciuic::log::Level::kWarn, __VA_ARGS__)
#define LOG_ERROR(...) CIUIC_LOG_AT_(::ciuic::log::Level::kError, __VA_ARGS__)
