// Error strings and the per-thread detail of the last failed call.
#include "internal.h"

namespace {
thread_local std::string tls_last_detail;
} // namespace

namespace ndrv {

ndrvError_t fail(ndrvError_t error, std::string detail) {
  tls_last_detail = std::move(detail);
  return error;
}

} // namespace ndrv

extern "C" {

const char* ndrvGetErrorString(ndrvError_t error) {
  switch (error) {
    case ndrvSuccess:
      return "no error";
    case ndrvErrorInvalidValue:
      return "invalid argument";
    case ndrvErrorMemoryAllocation:
      return "out of memory";
    case ndrvErrorInitializationError:
      return "initialization error";
    case ndrvErrorInvalidDevice:
      return "invalid device ordinal";
    case ndrvErrorInvalidResourceHandle:
      return "invalid resource handle";
    case ndrvErrorNotReady:
      return "device not ready";
  }
  return "unrecognized error code";
}

const char* ndrvGetLastErrorDetail(void) {
  return tls_last_detail.c_str();
}

} // extern "C"
