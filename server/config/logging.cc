#include "server/config/logging.h"

#include <spdlog/formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <memory>
#include <string_view>

namespace streamd {
namespace {

thread_local bool t_has_session = false;
thread_local uint64_t t_session = 0;

void Append(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

std::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// 2025-01-31T12:00:00.123Z
void AppendTime(spdlog::memory_buf_t& dest, spdlog::log_clock::time_point time) {
  const int64_t ms = std::chrono::floor<std::chrono::milliseconds>(time.time_since_epoch()).count();
  const int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm utc{};
  gmtime_r(&t, &utc);
  std::array<char, 48> buf{};
  const int n = std::snprintf(buf.data(), buf.size(), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                              utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                              utc.tm_min, utc.tm_sec, static_cast<int>(ms - secs * 1000));
  Append(dest, std::string_view(buf.data(), static_cast<size_t>(n)));
}

void AppendHexEscape(spdlog::memory_buf_t& dest, const char* prefix, unsigned value, int digits) {
  std::array<char, 16> buf{};
  const int n = std::snprintf(buf.data(), buf.size(), "%s%0*x", prefix, digits, value);
  Append(dest, std::string_view(buf.data(), static_cast<size_t>(n)));
}

// Length of the valid UTF-8 sequence at text[i], or 0 when the bytes there are not one.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = at(i);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // no overlong forms
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + len > text.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return len;
}

// A JSON string literal with quotes; invalid UTF-8 becomes U+FFFD.
void AppendJsonString(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      dest.push_back('\\');
      dest.push_back(c);
    } else if (c == '\n') {
      Append(dest, "\\n");
    } else if (c == '\t') {
      Append(dest, "\\t");
    } else if (c == '\r') {
      Append(dest, "\\r");
    } else if (u < 0x20 || u == 0x7F) {
      AppendHexEscape(dest, "\\u", u, 4);
    } else if (u >= 0x80) {
      const size_t len = Utf8Length(text, i);
      if (len == 0) {
        Append(dest, "\\ufffd");
        ++i;
      } else {
        Append(dest, text.substr(i, len));
        i += len;
      }
      continue;
    } else {
      dest.push_back(c);
    }
    ++i;
  }
  dest.push_back('"');
}

// The message of a text record: further lines are indented by two spaces (so no message can
// start a line that looks like a record), other control characters are escaped, UTF-8 passes.
void AppendTextMessage(spdlog::memory_buf_t& dest, std::string_view text) {
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      Append(dest, "\n  ");
    } else if (c == '\r') {
      Append(dest, "\\r");
    } else if ((u < 0x20 && c != '\t') || u == 0x7F) {
      AppendHexEscape(dest, "\\x", u, 2);
    } else {
      dest.push_back(c);
    }
  }
}

class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(LogFormat format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    const std::string_view level = LevelName(msg.level);
    if (format_ == LogFormat::kJson) {
      Append(dest, "{\"ts\":\"");
      AppendTime(dest, msg.time);
      Append(dest, "\",\"level\":\"");
      Append(dest, level);
      Append(dest, "\",\"msg\":");
      AppendJsonString(dest, payload);
      if (t_has_session) {
        Append(dest, ",\"session\":");
        Append(dest, std::to_string(t_session));
      }
      Append(dest, "}\n");
      return;
    }
    dest.push_back('[');
    AppendTime(dest, msg.time);
    Append(dest, "] [");
    Append(dest, level);
    Append(dest, "] ");
    if (t_has_session) {
      Append(dest, "session=");
      Append(dest, std::to_string(t_session));
      dest.push_back(' ');
    }
    AppendTextMessage(dest, payload);
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(format_);
  }

 private:
  LogFormat format_;
};

}  // namespace

spdlog::level::level_enum ToSpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

Status SetupLogging(LogLevel level, LogFormat format) {
  return SetupLogging(level, format, std::make_shared<spdlog::sinks::stderr_sink_mt>());
}

Status SetupLogging(LogLevel level, LogFormat format, spdlog::sink_ptr sink) {
  if (static_cast<unsigned>(level) > static_cast<unsigned>(LogLevel::kError)) {
    return InvalidArgumentError("logging: level " + std::to_string(static_cast<int>(level)) +
                                " is not a LogLevel");
  }
  if (format != LogFormat::kText && format != LogFormat::kJson) {
    return InvalidArgumentError("logging: format " + std::to_string(static_cast<int>(format)) +
                                " is not a LogFormat");
  }
  if (sink == nullptr) return InvalidArgumentError("logging: sink is null");
  try {
    auto logger = std::make_shared<spdlog::logger>("streamd", std::move(sink));
    logger->set_formatter(std::make_unique<LineFormatter>(format));
    logger->set_level(ToSpdlogLevel(level));
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(std::move(logger));
  } catch (const std::exception& e) {
    return InternalError(std::string("logging: ") + e.what());
  }
  return OkStatus();
}

SessionLogScope::SessionLogScope(uint64_t session)
    : had_session_(t_has_session), previous_(t_session) {
  t_has_session = true;
  t_session = session;
}

SessionLogScope::~SessionLogScope() {
  t_has_session = had_session_;
  t_session = previous_;
}

}  // namespace streamd
