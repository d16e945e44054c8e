#include "ops/log.h"

#include <cstdlib>
#include <memory>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace devplug {
namespace {

// %* -> "<N>" with N the syslog priority of the message's level.
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kPrio[] = {'7', '7', '6', '4', '3', '2', '6'};
    const char text[] = {'<', kPrio[msg.level], '>'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }
};

}  // namespace

void SetupLogging(const char* program) {
  auto logger = spdlog::stderr_color_mt(program);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%v");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

void SetLogLevel(LogLevel level) {
  using L = LogLevel;
  switch (level) {
    case L::kTrace:
      spdlog::set_level(spdlog::level::trace);
      break;
    case L::kDebug:
      spdlog::set_level(spdlog::level::debug);
      break;
    case L::kInfo:
      spdlog::set_level(spdlog::level::info);
      break;
    case L::kWarn:
      spdlog::set_level(spdlog::level::warn);
      break;
    case L::kError:
      spdlog::set_level(spdlog::level::err);
      break;
  }
}

}  // namespace devplug
