// Fault points: named places where a test can inject an error.
//
//   CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("oss.write.before_fsync"));
//
// With CIUIC_FAULT_INJECTION compiled in, an armed point returns its status (for a given number
// of hits); otherwise CIUIC_FAULT is Status::OK() and costs nothing. Thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace ciuic {

// Returns the injected status for `name` if armed, else OK.
Status FaultCheck(const char* name);

// Arms `name` to return `status` for the next `count` hits (-1: forever) while in scope.
class ScopedFault {
 public:
  ScopedFault(std::string name, Status status, int count = -1);
  ~ScopedFault();
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;
  // Returns how many times the point fired.
  int hits() const;

 private:
  std::string name_;
};

}  // namespace ciuic

#ifdef CIUIC_FAULT_INJECTION
#define CIUIC_FAULT(name) ::ciuic::FaultCheck(name)
#else
#define CIUIC_FAULT(name) ::ciuic::Status::OK()
#endif
