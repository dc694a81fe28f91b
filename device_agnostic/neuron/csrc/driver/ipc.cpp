// The emulation of the driver's shared-memory calls (neuron_driver_ipc.h):
// an anonymous memfd per allocation, mapped MAP_SHARED in every process that
// opens it. Linux only (memfd_create); the handle is the file descriptor.
#include "neuron_driver_ipc.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

extern "C" {

int ndrvMallocShared(size_t size, void** ptr, int* handle) {
  if (size == 0 || ptr == nullptr || handle == nullptr) {
    return EINVAL;
  }
  // Close-on-exec: a child that execs must not keep the memory alive; a
  // process that should get it receives it explicitly (SCM_RIGHTS).
  const int fd = memfd_create("neuron-shared", MFD_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int error = errno;
    close(fd);
    return error;
  }
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return error;
  }
  *ptr = mapped;
  *handle = fd;
  return 0;
}

int ndrvOpenShared(int handle, size_t size, void** ptr) {
  if (handle < 0 || size == 0 || ptr == nullptr) {
    return EINVAL;
  }
  // A handle smaller than `size` would map pages past the end of the file,
  // which fault (SIGBUS) when touched: refuse it here.
  struct stat status {};
  if (fstat(handle, &status) != 0) {
    return errno;
  }
  if (status.st_size < 0 || static_cast<size_t>(status.st_size) < size) {
    return EINVAL;
  }
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, handle, 0);
  if (mapped == MAP_FAILED) {
    return errno;
  }
  *ptr = mapped;
  return 0;
}

int ndrvFreeShared(void* ptr, size_t size, int handle) {
  int error = 0;
  if (ptr != nullptr && munmap(ptr, size) != 0) {
    error = errno;
  }
  if (handle >= 0 && close(handle) != 0 && error == 0) {
    error = errno;
  }
  return error;
}

const char* ndrvSharedErrorString(int error) {
  return strerror(error);
}

} // extern "C"
