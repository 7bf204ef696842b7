// Status and Result<T>: the one error idiom of ciuic.
//
// A Status is a closed code plus a human-readable message. Result<T> holds either a value or a
// non-OK Status. Both are [[nodiscard]]; ignoring an error takes IgnoreError() and a reason.
// Thread-safety: values, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ciuic {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound = 1,
  kAlreadyExists = 2,
  kNotADirectory = 3,
  kIsADirectory = 4,
  kNotEmpty = 5,
  kPermissionDenied = 6,
  kInvalidArgument = 7,
  kNoSpace = 8,
  kIoError = 9,
  kCorruption = 10,
  kInternal = 11,
  kUnavailable = 12,
  kTimedOut = 13,
  kAborted = 14,
  // Not in the style guide's list, but POSIX needs them to be distinguishable.
  kNameTooLong = 15,
  kNotSupported = 16,
  kStale = 17,
  kCrossDevice = 18,
  kTooManyLinks = 19,
  kNotPermitted = 20,  // EPERM, as opposed to EACCES
  kBusy = 21,
  kLoop = 22,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status OK() { return Status(); }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status NotADirectory(std::string m) { return {StatusCode::kNotADirectory, std::move(m)}; }
  static Status IsADirectory(std::string m) { return {StatusCode::kIsADirectory, std::move(m)}; }
  static Status NotEmpty(std::string m) { return {StatusCode::kNotEmpty, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status TimedOut(std::string m) { return {StatusCode::kTimedOut, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status NameTooLong(std::string m) { return {StatusCode::kNameTooLong, std::move(m)}; }
  static Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
  static Status Stale(std::string m) { return {StatusCode::kStale, std::move(m)}; }
  static Status CrossDevice(std::string m) { return {StatusCode::kCrossDevice, std::move(m)}; }
  static Status TooManyLinks(std::string m) { return {StatusCode::kTooManyLinks, std::move(m)}; }
  static Status NotPermitted(std::string m) { return {StatusCode::kNotPermitted, std::move(m)}; }
  static Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
  static Status Loop(std::string m) { return {StatusCode::kLoop, std::move(m)}; }
  // Builds a Status from an errno value, prefixed by `what`.
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  // True for kUnavailable, kTimedOut and kAborted: the caller may retry.
  bool IsRetryable() const {
    return code_ == StatusCode::kUnavailable || code_ == StatusCode::kTimedOut ||
           code_ == StatusCode::kAborted;
  }
  // Returns the errno that FUSE and Python report for this status (0 for OK).
  int ToErrno() const;
  // "NotFound: /a/b".
  std::string ToString() const;
  // Returns a copy with `prefix: ` put before the message.
  Status WithContext(std::string_view prefix) const;
  // Explicitly drops the status; callers say why in a comment.
  void IgnoreError() const {}

  bool operator==(const Status& o) const { return code_ == o.code_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string msg_;
};

// Maps an errno to a StatusCode.
StatusCode StatusCodeFromErrno(int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  // A default-constructed Result is an error (asio's co_spawn needs T()).
  Result() : v_(Status(StatusCode::kInternal, "uninitialized Result")) {}
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      v_ = Status(StatusCode::kInternal, "Result built from an OK status");
    }
  }

  bool ok() const { return v_.index() == 0; }
  const Status& status() const& {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  Status status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T value_or(T other) const& { return ok() ? value() : std::move(other); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ciuic

#define CIUIC_CONCAT_INNER_(a, b) a##b
#define CIUIC_CONCAT_(a, b) CIUIC_CONCAT_INNER_(a, b)

#define CIUIC_RETURN_IF_ERROR(expr) \
  do {                              \
    ::ciuic::Status _st = (expr);   \
    if (!_st.ok())                  \
      return _st;                   \
  } while (0)

#define CIUIC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok())                                     \
    return std::move(tmp).status();                  \
  lhs = std::move(tmp).value()

#define CIUIC_ASSIGN_OR_RETURN(lhs, expr) \
  CIUIC_ASSIGN_OR_RETURN_IMPL_(CIUIC_CONCAT_(_res_, __LINE__), lhs, expr)

#define CIUIC_CO_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::ciuic::Status _st = (expr);      \
    if (!_st.ok())                     \
      co_return _st;                   \
  } while (0)

#define CIUIC_CO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok())                                        \
    co_return std::move(tmp).status();                  \
  lhs = std::move(tmp).value()

#define CIUIC_CO_ASSIGN_OR_RETURN(lhs, expr) \
  CIUIC_CO_ASSIGN_OR_RETURN_IMPL_(CIUIC_CONCAT_(_res_, __LINE__), lhs, expr)
