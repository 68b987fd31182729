// The daemon's logging: spdlog's default logger, set up once at start-up from the config.
//
// Formats (logging.format):
//   text  [2025-01-31T12:00:00.123Z] [info] session=42 opened: sinks=4 window=1020
//   json  {"ts":"2025-01-31T12:00:00.123Z","level":"info","msg":"opened: ...","session":42}
// Text indents the further lines of a multi-line message (the effective config) by two spaces
// and escapes other control characters (\r, \x1b); JSON is one line per record, escaped per
// RFC 8259 with invalid UTF-8 replaced by U+FFFD. Either way a message (which may quote client
// text) can never forge a record. Times are UTC with milliseconds. "session" appears
// only on lines logged inside a SessionLogScope (LogSession makes one).
//
// Level policy (docs/CONFIG.md): info = lifecycle (start-up, effective config, listening,
// session open/close, shutdown); debug = per request (append, generate, finish, admission
// waits); trace = per step and per token. Nothing per token or per step is ever logged at info.
//
// The logger is synchronous: records are formatted on the logging thread, which is what lets
// SessionLogScope use a thread-local. Do not swap in an async logger.
#pragma once

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <utility>

#include "engine/util/status.h"
#include "server/config/server_config.h"

namespace streamd {

// Replaces spdlog's default logger with one that writes to stderr (or to `sink`) at `level` and
// above, formatted as `format`. Call at start-up before other threads log; calling it again
// replaces the logger. INVALID_ARGUMENT for an out-of-range enum value.
Status SetupLogging(LogLevel level, LogFormat format);
Status SetupLogging(LogLevel level, LogFormat format, spdlog::sink_ptr sink);

spdlog::level::level_enum ToSpdlogLevel(LogLevel level);

// While alive, every record this thread logs carries `session`. Scopes nest: the enclosing id
// is restored on destruction.
class SessionLogScope {
 public:
  explicit SessionLogScope(uint64_t session);
  ~SessionLogScope();
  SessionLogScope(const SessionLogScope&) = delete;
  SessionLogScope& operator=(const SessionLogScope&) = delete;

 private:
  bool had_session_;
  uint64_t previous_;
};

// One record about one session, e.g.
//   LogSession(LogLevel::kInfo, id, "opened: sinks={} window={}", sinks, window);
// The arguments are not formatted when `level` is filtered out.
template <typename... Args>
void LogSession(LogLevel level, uint64_t session, spdlog::format_string_t<Args...> fmt,
                Args&&... args) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  const spdlog::level::level_enum spd_level = ToSpdlogLevel(level);
  if (!logger->should_log(spd_level)) return;
  SessionLogScope scope(session);
  logger->log(spd_level, fmt, std::forward<Args>(args)...);
}

}  // namespace streamd
