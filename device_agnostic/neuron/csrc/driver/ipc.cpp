// The emulation of the driver's shared-memory calls (neuron_driver_ipc.h):
// an anonymous memfd per allocation, mapped MAP_SHARED in every process that
// opens it. Linux only (memfd_create); the handle is the file descriptor.
#include "internal.h"
#include "neuron_driver_ipc.h"

#include <errno.h>
#include <string.h>

#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

// The system refused: a memory error, its errno text as the detail.
ndrvError_t system_failure(const char* call, int error) {
  return ndrv::fail(ndrvErrorMemoryAllocation, std::string(call) + ": " + strerror(error));
}

} // namespace

extern "C" {

ndrvError_t ndrvMallocShared(size_t size, void** ptr, int* handle) {
  if (size == 0 || ptr == nullptr || handle == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvMallocShared: a size of 0 or a null pointer");
  }
  // Close-on-exec: a child that execs must not keep the memory alive; a
  // process that should get it receives it explicitly (SCM_RIGHTS).
  const int fd = memfd_create("neuron-shared", MFD_CLOEXEC);
  if (fd < 0) {
    return system_failure("memfd_create", errno);
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int error = errno;
    close(fd);
    return system_failure("ftruncate", error);
  }
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return system_failure("mmap", error);
  }
  *ptr = mapped;
  *handle = fd;
  return ndrvSuccess;
}

ndrvError_t ndrvOpenShared(int handle, size_t size, void** ptr) {
  if (handle < 0 || size == 0 || ptr == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue,
                      "ndrvOpenShared: a negative handle, a size of 0 or a null pointer");
  }
  // A handle smaller than `size` would map pages past the end of the file,
  // which fault (SIGBUS) when touched: refuse it here.
  struct stat status {};
  if (fstat(handle, &status) != 0) {
    return ndrv::fail(ndrvErrorInvalidValue,
                      std::string("ndrvOpenShared: fstat of the handle: ") + strerror(errno));
  }
  if (status.st_size < 0 || static_cast<size_t>(status.st_size) < size) {
    return ndrv::fail(ndrvErrorInvalidValue,
                      "ndrvOpenShared: the handle's allocation is smaller than the size asked for");
  }
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, handle, 0);
  if (mapped == MAP_FAILED) {
    return system_failure("mmap", errno);
  }
  *ptr = mapped;
  return ndrvSuccess;
}

ndrvError_t ndrvFreeShared(void* ptr, size_t size, int handle) {
  ndrvError_t result = ndrvSuccess;
  if (ptr != nullptr && munmap(ptr, size) != 0) {
    result = ndrv::fail(ndrvErrorInvalidValue, std::string("munmap: ") + strerror(errno));
  }
  if (handle >= 0 && close(handle) != 0 && result == ndrvSuccess) {
    result = ndrv::fail(ndrvErrorInvalidResourceHandle, std::string("close: ") + strerror(errno));
  }
  return result;
}

} // extern "C"
