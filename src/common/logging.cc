#include "common/logging.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace ciuic::log {
namespace {

Level InitialLevel() {
  const char* env = std::getenv("CIUIC_LOG_LEVEL");
  if (env == nullptr)
    return Level::kWarn;
  std::string_view v(env);
  if (v == "debug")
    return Level::kDebug;
  if (v == "info")
    return Level::kInfo;
  if (v == "error")
    return Level::kError;
  return Level::kWarn;
}

std::atomic<int> g_level{static_cast<int>(InitialLevel())};
std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;  // guarded by g_mu for replacement

std::shared_ptr<spdlog::logger> Logger() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_logger) {
    g_logger = std::make_shared<spdlog::logger>("ciuic",
                                                std::make_shared<spdlog::sinks::stderr_sink_mt>());
    g_logger->set_pattern("%Y-%m-%dT%H:%M:%S.%f %^%L%$ [%n] %v");
    g_logger->set_level(spdlog::level::trace);
    g_logger->flush_on(spdlog::level::warn);
  }
  return g_logger;
}

}  // namespace

bool Enabled(Level level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}
void SetLevel(Level level) {
  g_level.store(static_cast<int>(level));
}

void Write(Level level, std::string_view msg) {
  auto logger = Logger();
  switch (level) {
    case Level::kDebug:
      logger->debug("{}", msg);
      break;
    case Level::kInfo:
      logger->info("{}", msg);
      break;
    case Level::kWarn:
      logger->warn("{}", msg);
      break;
    case Level::kError:
      logger->error("{}", msg);
      break;
  }
}

void SetFile(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
  auto logger = std::make_shared<spdlog::logger>("ciuic", sink);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%f %L [%n] %v");
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::info);
  std::lock_guard<std::mutex> lock(g_mu);
  g_logger = logger;
}

void SetName(const std::string& name) {
  auto logger = Logger();
  auto copy =
      std::make_shared<spdlog::logger>(name, logger->sinks().begin(), logger->sinks().end());
  copy->set_pattern("%Y-%m-%dT%H:%M:%S.%f %L [%n] %v");
  copy->set_level(spdlog::level::trace);
  copy->flush_on(spdlog::level::info);
  std::lock_guard<std::mutex> lock(g_mu);
  g_logger = copy;
}

}  // namespace ciuic::log
