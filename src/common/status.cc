#include "common/status.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ciuic {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kNotADirectory:
      return "NotADirectory";
    case StatusCode::kIsADirectory:
      return "IsADirectory";
    case StatusCode::kNotEmpty:
      return "NotEmpty";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNoSpace:
      return "NoSpace";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kTimedOut:
      return "TimedOut";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kNameTooLong:
      return "NameTooLong";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kStale:
      return "Stale";
    case StatusCode::kCrossDevice:
      return "CrossDevice";
    case StatusCode::kTooManyLinks:
      return "TooManyLinks";
    case StatusCode::kNotPermitted:
      return "NotPermitted";
    case StatusCode::kBusy:
      return "Busy";
    case StatusCode::kLoop:
      return "Loop";
  }
  return "Unknown";
}

int Status::ToErrno() const {
  switch (code_) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNotFound:
      return ENOENT;
    case StatusCode::kAlreadyExists:
      return EEXIST;
    case StatusCode::kNotADirectory:
      return ENOTDIR;
    case StatusCode::kIsADirectory:
      return EISDIR;
    case StatusCode::kNotEmpty:
      return ENOTEMPTY;
    case StatusCode::kPermissionDenied:
      return EACCES;
    case StatusCode::kInvalidArgument:
      return EINVAL;
    case StatusCode::kNoSpace:
      return ENOSPC;
    case StatusCode::kIoError:
      return EIO;
    case StatusCode::kCorruption:
      return EIO;
    case StatusCode::kInternal:
      return EIO;
    case StatusCode::kUnavailable:
      return EAGAIN;
    case StatusCode::kTimedOut:
      return ETIMEDOUT;
    case StatusCode::kAborted:
      return EINTR;
    case StatusCode::kNameTooLong:
      return ENAMETOOLONG;
    case StatusCode::kNotSupported:
      return EOPNOTSUPP;
    case StatusCode::kStale:
      return ESTALE;
    case StatusCode::kCrossDevice:
      return EXDEV;
    case StatusCode::kTooManyLinks:
      return EMLINK;
    case StatusCode::kNotPermitted:
      return EPERM;
    case StatusCode::kBusy:
      return EBUSY;
    case StatusCode::kLoop:
      return ELOOP;
  }
  return EIO;
}

StatusCode StatusCodeFromErrno(int err) {
  switch (err) {
    case 0:
      return StatusCode::kOk;
    case ENOENT:
      return StatusCode::kNotFound;
    case EEXIST:
      return StatusCode::kAlreadyExists;
    case ENOTDIR:
      return StatusCode::kNotADirectory;
    case EISDIR:
      return StatusCode::kIsADirectory;
    case ENOTEMPTY:
      return StatusCode::kNotEmpty;
    case EACCES:
      return StatusCode::kPermissionDenied;
    case EPERM:
      return StatusCode::kNotPermitted;
    case EINVAL:
      return StatusCode::kInvalidArgument;
    case ENOSPC:
    case EDQUOT:
      return StatusCode::kNoSpace;
    case EAGAIN:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
      return StatusCode::kUnavailable;
    case ETIMEDOUT:
      return StatusCode::kTimedOut;
    case EINTR:
      return StatusCode::kAborted;
    case ENAMETOOLONG:
      return StatusCode::kNameTooLong;
    case EOPNOTSUPP:
      return StatusCode::kNotSupported;
    case ESTALE:
      return StatusCode::kStale;
    case EXDEV:
      return StatusCode::kCrossDevice;
    case EMLINK:
      return StatusCode::kTooManyLinks;
    case EBUSY:
      return StatusCode::kBusy;
    case ELOOP:
      return StatusCode::kLoop;
    default:
      return StatusCode::kIoError;
  }
}

Status Status::FromErrno(int err, std::string_view what) {
  return Status(StatusCodeFromErrno(err), fmt::format("{}: {}", what, std::strerror(err)));
}

std::string Status::ToString() const {
  if (ok())
    return "OK";
  return fmt::format("{}: {}", StatusCodeName(code_), msg_);
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok())
    return *this;
  return Status(code_, fmt::format("{}: {}", prefix, msg_));
}

}  // namespace ciuic
