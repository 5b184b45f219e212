// Status: the error type returned at every boundary of the project.
//
// Modelled on LevelDB/Abseil: a cheap value that is either OK or carries a
// code and a human-readable message. Code that crosses a module boundary
// returns Status (or StatusOr<T>) instead of throwing, so that neither the
// daemon nor a trainer linking the client can be taken down by an exception.
// Both are [[nodiscard]]: an error is handled or explicitly dropped
// (`(void)f();` with a comment saying why).
//
//   Status Load(const std::string& path) {
//     GNMR_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
//     GNMR_RETURN_IF_ERROR(Parse(bytes));
//     return Status::Ok();
//   }
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "gnmr/export.h"

namespace gnmr {

// Codes mirror the gRPC canonical codes the daemon answers with, so a Status
// maps onto the wire without a translation table.
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

GNMR_EXPORT const char* StatusCodeName(StatusCode code);

class [[nodiscard]] GNMR_EXPORT Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK", or "CODE_NAME: message".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// One helper per code, as Abseil's absl::NotFoundError() & co.
inline Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
inline Status Unknown(std::string m) { return Status(StatusCode::kUnknown, std::move(m)); }
inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status DeadlineExceeded(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status AlreadyExists(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status PermissionDenied(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status Aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status Unimplemented(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
inline Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
inline Status DataLoss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status Unauthenticated(std::string m) {
  return Status(StatusCode::kUnauthenticated, std::move(m));
}

// Thrown by StatusOr::value() on an error: a programming error, caught by
// the API guards (the client's Guard, the server's handlers) like any other
// exception and reported with the status it carried.
class GNMR_EXPORT BadStatusOrAccess : public std::logic_error {
 public:
  explicit BadStatusOrAccess(const Status& s)
      : std::logic_error("value() of a StatusOr holding " + s.ToString()) {}
};

// StatusOr<T>: a value or the Status explaining why there is none. Built
// from an OK Status it holds Internal instead (there is no value to hold),
// as Abseil's does.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit
  StatusOr(Status status)                      // NOLINT: implicit
      : v_(status.ok() ? Internal("StatusOr built from an OK status: no value")
                       : std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    Check();
    return std::get<T>(v_);
  }
  const T& value() const& {
    Check();
    return std::get<T>(v_);
  }
  T&& value() && {
    Check();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void Check() const {
    if (!ok()) throw BadStatusOrAccess(std::get<Status>(v_));
  }

  std::variant<T, Status> v_;
};

}  // namespace gnmr

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define GNMR_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::gnmr::Status gnmr_status_ = (expr);        \
    if (!gnmr_status_.ok()) return gnmr_status_; \
  } while (false)

// `lhs = value of expr` (a StatusOr), or returns its Status from the
// enclosing function. `lhs` may declare a variable: GNMR_ASSIGN_OR_RETURN(
// auto x, F()). Expands to more than one statement: not after a bare if.
#define GNMR_ASSIGN_OR_RETURN(lhs, expr) \
  GNMR_ASSIGN_OR_RETURN_IMPL(GNMR_STATUS_CONCAT(gnmr_statusor_, __LINE__), lhs, expr)
#define GNMR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
#define GNMR_STATUS_CONCAT(a, b) GNMR_STATUS_CONCAT_INNER(a, b)
#define GNMR_STATUS_CONCAT_INNER(a, b) a##b
