// Status and StatusOr: the error type of every fallible call on engine/'s request path.
//
// Codes carry the gRPC numbering so that server/ maps them onto grpc::Status in one function
// without a lookup table. engine/ and kernels/ must build on machines without gRPC or Abseil
// (the GPU check machine has neither), hence this small type instead of absl::Status.
// Policy: untrusted input (files, requests, flags) yields an error Status naming the field and
// the limit; a broken internal invariant is a bug and aborts.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "kernels/common/check.h"

namespace streamd {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : state_(std::move(status)) {  // NOLINT: implicit like absl
    STREAMD_CHECK_MSG(!std::get<Status>(state_).ok(), "StatusOr built from an OK status");
  }
  StatusOr(T value) : state_(std::move(value)) {}  // NOLINT: implicit like absl

  bool ok() const { return std::holds_alternative<T>(state_); }
  Status status() const { return ok() ? Status() : std::get<Status>(state_); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> state_;
};

}  // namespace streamd

#define STREAMD_CONCAT_INNER(a, b) a##b
#define STREAMD_CONCAT(a, b) STREAMD_CONCAT_INNER(a, b)

#define STREAMD_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::streamd::Status streamd_status_ = (expr);        \
    if (!streamd_status_.ok()) return streamd_status_; \
  } while (0)

#define STREAMD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

// STREAMD_ASSIGN_OR_RETURN(auto x, MakeX());
#define STREAMD_ASSIGN_OR_RETURN(lhs, expr) \
  STREAMD_ASSIGN_OR_RETURN_IMPL(STREAMD_CONCAT(streamd_or_, __LINE__), lhs, expr)
