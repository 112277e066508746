// Typed errors for the whole library. Library code throws these; `main` turns them into a message
// and an exit code (see exit_code()). No library code calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace cnnergy {

// Process exit codes, documented in `cnnergy --help`.
enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,        // a bug or an unexpected failure
  kUsage = 2,           // bad flag, unknown model/layer/algorithm, impossible value
  kData = 3,            // missing, truncated or malformed file (data set, model, journal, database)
  kUnsupported = 4,     // no GPU / driver / feature on this machine
  kOutOfMemory = 5,     // a batch or model that does not fit
  kPermission = 6,      // no permission to change a device setting
  kDevice = 7,          // a CUDA/cuDNN/cuBLAS/NCCL/NVML call failed
  kChildFailed = 8,     // an external command run by `monitor`/`sweep` failed to start
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }
  int exit_code() const { return static_cast<int>(code_); }

 private:
  ExitCode code_;
};

#define CNNERGY_DEFINE_ERROR(Name, Code)                                   \
  class Name : public Error {                                              \
   public:                                                                 \
    explicit Name(const std::string& what) : Error(ExitCode::Code, what) {} \
  };

CNNERGY_DEFINE_ERROR(InternalError, kInternal)
CNNERGY_DEFINE_ERROR(InvalidArgument, kUsage)     // user-supplied value is wrong
CNNERGY_DEFINE_ERROR(ShapeError, kUsage)          // shapes that do not fit together
CNNERGY_DEFINE_ERROR(DataError, kData)            // malformed or missing input files
CNNERGY_DEFINE_ERROR(NotSupported, kUnsupported)  // feature or device absent
CNNERGY_DEFINE_ERROR(OutOfMemory, kOutOfMemory)   // allocation failed; message says how much
CNNERGY_DEFINE_ERROR(PermissionDenied, kPermission)
CNNERGY_DEFINE_ERROR(DeviceError, kDevice)        // a device library call failed

#undef CNNERGY_DEFINE_ERROR

// Throws InternalError with file:line when an invariant the code relies on does not hold.
#define CNNERGY_CHECK(cond, msg)                                                        \
  do {                                                                                 \
    if (!(cond))                                                                       \
      throw ::cnnergy::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                     ": check failed: " #cond ": " + (msg));           \
  } while (0)

}  // namespace cnnergy
