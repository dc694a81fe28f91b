// Memory: device memory, pinned host memory, copies, pointer attributes.
//
// Emulation: device memory is host memory from posix_memalign, counted
// against the device's capacity (NEURON_DEVICE_MEMORY); "pinned" host memory
// is ordinary host memory that the driver records, so that any address inside
// it answers ndrvPointerGetAttributes; every copy is a memcpy.
#include "internal.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

namespace {

constexpr size_t kDeviceAlignment = 4096;
constexpr size_t kHostAlignment = 64;

struct Allocation {
  size_t size;
  ndrvMemoryType type;
  int device; // -1 for host memory
};

// Never destroyed: memory may be freed by other static objects' destructors
// at exit, after this file's statics would have been.
struct State {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations; // start address -> allocation
  std::array<size_t, ndrv::kMaxDevices> used{}; // bytes of device memory in use
};
State& g = *new State;

// The allocation holding `ptr`, or end(). Caller holds g.mutex.
std::map<uintptr_t, Allocation>::iterator find_holding(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = g.allocations.upper_bound(address);
  if (it == g.allocations.begin()) {
    return g.allocations.end();
  }
  --it;
  return address < it->first + it->second.size ? it : g.allocations.end();
}

ndrvError_t free_of_type(void* ptr, ndrvMemoryType type, const char* call) {
  if (ptr == nullptr) {
    return ndrvSuccess;
  }
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    auto it = g.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g.allocations.end() || it->second.type != type) {
      return ndrv::fail(ndrvErrorInvalidValue,
                        std::string(call) + ": the pointer is not the start of an allocation "
                                            "of the right kind");
    }
    if (type == ndrvMemoryTypeDevice) {
      g.used[it->second.device] -= it->second.size;
    }
    g.allocations.erase(it);
  }
  std::free(ptr);
  return ndrvSuccess;
}

} // namespace

extern "C" {

ndrvError_t ndrvMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvMalloc: ptr is NULL");
  }
  *ptr = nullptr;
  if (size == 0) {
    return ndrvSuccess;
  }
  size_t capacity = 0;
  if (const auto error = ndrv::device_capacity(&capacity); error != ndrvSuccess) {
    return error;
  }
  const int device = ndrv::current_device();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (size > capacity - g.used[device]) {
    return ndrv::fail(ndrvErrorMemoryAllocation, "the device's capacity is exhausted");
  }
  void* memory = nullptr;
  if (posix_memalign(&memory, kDeviceAlignment, size) != 0) {
    return ndrv::fail(ndrvErrorMemoryAllocation, "the host is out of memory");
  }
  g.allocations[reinterpret_cast<uintptr_t>(memory)] = {size, ndrvMemoryTypeDevice, device};
  g.used[device] += size;
  *ptr = memory;
  return ndrvSuccess;
}

ndrvError_t ndrvFree(void* ptr) {
  return free_of_type(ptr, ndrvMemoryTypeDevice, "ndrvFree");
}

ndrvError_t ndrvMallocHost(void** ptr, size_t size) {
  if (ptr == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvMallocHost: ptr is NULL");
  }
  *ptr = nullptr;
  if (size == 0) {
    return ndrvSuccess;
  }
  void* memory = nullptr;
  if (posix_memalign(&memory, kHostAlignment, size) != 0) {
    return ndrv::fail(ndrvErrorMemoryAllocation, "the host is out of memory");
  }
  std::lock_guard<std::mutex> lock(g.mutex);
  g.allocations[reinterpret_cast<uintptr_t>(memory)] = {size, ndrvMemoryTypeHost, -1};
  *ptr = memory;
  return ndrvSuccess;
}

ndrvError_t ndrvFreeHost(void* ptr) {
  return free_of_type(ptr, ndrvMemoryTypeHost, "ndrvFreeHost");
}

ndrvError_t ndrvMemcpy(void* dst, const void* src, size_t count, ndrvMemcpyKind kind) {
  if (kind < ndrvMemcpyHostToHost || kind > ndrvMemcpyDeviceToDevice) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvMemcpy: unknown copy kind");
  }
  if (count > 0) {
    std::memcpy(dst, src, count); // host and device share one address space here
  }
  return ndrvSuccess;
}

ndrvError_t ndrvMemcpyAsync(void* dst, const void* src, size_t count, ndrvMemcpyKind kind,
                            ndrvStream_t stream) {
  if (kind < ndrvMemcpyHostToHost || kind > ndrvMemcpyDeviceToDevice) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvMemcpyAsync: unknown copy kind");
  }
  if (stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvMemcpyAsync: stream is NULL");
  }
  if (count > 0) {
    ndrv::enqueue(stream, [dst, src, count] { std::memcpy(dst, src, count); });
  }
  return ndrvSuccess;
}

ndrvError_t ndrvMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvMemGetInfo: an output is NULL");
  }
  if (const auto error = ndrv::check_device(device); error != ndrvSuccess) {
    return error;
  }
  size_t capacity = 0;
  if (const auto error = ndrv::device_capacity(&capacity); error != ndrvSuccess) {
    return error;
  }
  std::lock_guard<std::mutex> lock(g.mutex);
  *free_bytes = capacity - g.used[device];
  *total_bytes = capacity;
  return ndrvSuccess;
}

ndrvError_t ndrvPointerGetAttributes(ndrvPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvPointerGetAttributes: attributes is NULL");
  }
  *attributes = {ndrvMemoryTypeUnregistered, -1, nullptr, 0};
  std::lock_guard<std::mutex> lock(g.mutex);
  const auto it = find_holding(ptr);
  if (it != g.allocations.end()) {
    *attributes = {it->second.type, it->second.device, reinterpret_cast<void*>(it->first),
                   it->second.size};
  }
  return ndrvSuccess;
}

} // extern "C"
