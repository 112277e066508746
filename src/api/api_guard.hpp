// The C API's error boundary: every exported function runs its body through guarded(), which turns
// the typed exceptions of core/errors.hpp into a cnnergy_status and keeps the message for
// cnnergy_last_error() (per thread), so no C++ exception ever crosses into C.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "cnnergy/cnnergy.h"
#include "core/errors.hpp"

namespace cnnergy::api {

std::string& last_error();  // this thread's message

inline cnnergy_status set_error(cnnergy_status status, const std::string& message) {
  last_error() = message;
  return status;
}

inline cnnergy_status status_of(const Error& e) {
  switch (e.code()) {
    case ExitCode::kUsage:
      return CNNERGY_ERROR_INVALID_ARGUMENT;
    case ExitCode::kData:
      return CNNERGY_ERROR_DATA;
    case ExitCode::kUnsupported:
      return CNNERGY_ERROR_NOT_SUPPORTED;
    case ExitCode::kPermission:
      return CNNERGY_ERROR_PERMISSION;
    case ExitCode::kDevice:
    case ExitCode::kOutOfMemory:
    case ExitCode::kChildFailed:
      return CNNERGY_ERROR_DEVICE;
    default:
      return CNNERGY_ERROR_INTERNAL;
  }
}

template <typename F>
cnnergy_status guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    return set_error(status_of(e), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(CNNERGY_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return set_error(CNNERGY_ERROR_INTERNAL, e.what());
  } catch (...) {
    return set_error(CNNERGY_ERROR_INTERNAL, "unknown error");
  }
}

}  // namespace cnnergy::api
