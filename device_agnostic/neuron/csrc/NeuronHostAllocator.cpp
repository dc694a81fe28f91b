// Pinned host memory: page-locked staging buffers for host<->device copies.
//
// On a NeuronCore, DMA needs page-locked host memory: the driver allocates it
// (ndrvMallocHost) and answers for any pointer inside it
// (ndrvPointerGetAttributes), so slices of a pinned tensor are pinned too.
// This allocator keeps torch's statistics.
#include "NeuronRuntime.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_map>

namespace neuron {
namespace {

void pinned_deleter(void* ptr);

class NeuronHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) {
      return {nullptr, nullptr, &pinned_deleter, c10::Device(c10::DeviceType::CPU)};
    }
    void* ptr = nullptr;
    const ndrvError_t error = ndrvMallocHost(&ptr, nbytes);
    TORCH_CHECK_WITH(OutOfMemoryError, error != ndrvErrorMemoryAllocation,
                     "neuron: could not allocate ", format_bytes(nbytes),
                     " of pinned host memory.");
    NEURON_DRIVER_CHECK(error);
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(nbytes);
    stats_.allocations.increase(1);
    stats_.allocated_bytes.increase(nbytes);
    stats_.num_host_alloc += 1;
    return {ptr, ptr, &pinned_deleter, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &pinned_deleter;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    NEURON_DRIVER_CHECK(ndrvMemcpy(dest, src, count, ndrvMemcpyHostToHost));
  }

  void release(void* ptr) {
    if (ptr == nullptr) {
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = ranges_.find(reinterpret_cast<uintptr_t>(ptr));
      TORCH_INTERNAL_ASSERT(it != ranges_.end(), "neuron: freeing unknown pinned memory");
      stats_.active_requests.decrease(1);
      stats_.active_bytes.decrease(it->second);
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(it->second);
      stats_.num_host_free += 1;
      ranges_.erase(it);
    }
    NEURON_DRIVER_CHECK(ndrvFreeHost(ptr));
  }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    // Copies complete before the stream moves on (NeuronStream.cpp), so a
    // pinned block can be reused as soon as it is freed.
    return true;
  }

  void empty_cache() override {
    // Nothing is cached: freed pinned blocks go straight back to the host.
  }

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : {&stats_.active_requests, &stats_.active_bytes,
                       &stats_.allocations, &stats_.allocated_bytes}) {
      stat->reset_accumulated();
    }
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : {&stats_.active_requests, &stats_.active_bytes,
                       &stats_.allocations, &stats_.allocated_bytes}) {
      stat->reset_peak();
    }
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uintptr_t, size_t> ranges_; // start address -> size, for the stats
  at::HostStats stats_;
};

NeuronHostAllocator g_host_allocator;

void pinned_deleter(void* ptr) {
  g_host_allocator.release(ptr);
}

struct RegisterHostAllocator {
  RegisterHostAllocator() {
    at::setHostAllocator(kDeviceType, &g_host_allocator);
  }
};
RegisterHostAllocator g_register_host_allocator;

} // namespace

c10::Allocator* host_allocator() {
  return &g_host_allocator;
}

bool is_pinned_ptr(const void* ptr) {
  if (ptr == nullptr) {
    return false;
  }
  ndrvPointerAttributes attributes;
  NEURON_DRIVER_CHECK(ndrvPointerGetAttributes(&attributes, ptr));
  return attributes.type == ndrvMemoryTypeHost;
}

} // namespace neuron
