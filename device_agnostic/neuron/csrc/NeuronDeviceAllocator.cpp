// Device memory: a caching allocator over host memory with a per-device
// capacity, modelled on the CUDA caching allocator's design.
//
// - Requests are rounded up to 512 bytes.
// - Requests of at most 1 MiB come from the small pool (2 MiB segments);
//   larger ones from the large pool (20 MiB segments below 10 MiB, else the
//   request rounded up to 2 MiB).
// - Freed blocks stay cached in their pool, are reused best-fit, split when
//   the remainder is worth keeping and merged with free neighbours.
// - Segments are released only by empty_cache() or when a request would
//   otherwise exceed the capacity; past it, torch.OutOfMemoryError.
// No Python and no GIL are involved: each device has its own mutex.
#include "NeuronRuntime.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace neuron {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = size_t{1} << 20;
constexpr size_t kSmallBuffer = size_t{2} << 20;
constexpr size_t kLargeBuffer = size_t{20} << 20;
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;
constexpr size_t kSegmentAlignment = 4096;

struct Block;

struct BlockComparator {
  bool operator()(const Block* a, const Block* b) const;
};
using BlockPool = std::set<Block*, BlockComparator>;

struct Block {
  c10::DeviceIndex device;
  bool small;          // which pool it belongs to
  size_t size;         // bytes of the block
  size_t requested;    // bytes the caller asked for (when allocated)
  char* ptr;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours within the same segment
  Block* next = nullptr;
};

bool BlockComparator::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) {
    return a->size < b->size;
  }
  return a->ptr < b->ptr;
}

size_t round_size(size_t size) {
  return size < kMinBlockSize ? kMinBlockSize
                              : kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) {
    return kSmallBuffer;
  }
  if (size < kMinLargeAlloc) {
    return kLargeBuffer;
  }
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

constexpr size_t kMaxDevices = 64;

// Each device has its own deleter, so that a DataPtr's context can be its
// pointer (as c10::Allocator::raw_allocate requires) and freeing still knows
// the device without a global lookup.
template <size_t Device>
void delete_on_device(void* ptr);

template <size_t... Devices>
constexpr std::array<c10::DeleterFnPtr, sizeof...(Devices)> make_deleters(
    std::index_sequence<Devices...> /*unused*/) {
  return {&delete_on_device<Devices>...};
}

constexpr auto kDeleters = make_deleters(std::make_index_sequence<kMaxDevices>{});

// One device's memory: pools, live blocks and statistics, under one mutex.
class DeviceMemory {
 public:
  explicit DeviceMemory(c10::DeviceIndex device) : device_(device) {}

  Block* allocate(size_t requested) {
    const size_t size = round_size(requested);
    const bool small = size <= kSmallSize;
    std::lock_guard<std::mutex> lock(mutex_);
    BlockPool& pool = small ? small_pool_ : large_pool_;
    Block* block = take_free_block(pool, size);
    if (block == nullptr) {
      block = allocate_segment(size, small, requested);
    }
    if (should_split(block, size)) {
      auto* remainder = new Block{device_, small, block->size - size, 0, block->ptr + size};
      remainder->prev = block;
      remainder->next = block->next;
      if (remainder->next != nullptr) {
        remainder->next->prev = remainder;
      }
      block->next = remainder;
      block->size = size;
      pool.insert(remainder);
      update(stats_.inactive_split, small, +1);
      update(stats_.inactive_split_bytes, small, static_cast<int64_t>(remainder->size));
    }
    block->allocated = true;
    block->requested = requested;
    live_[block->ptr] = block;
    update(stats_.allocation, small, +1);
    update(stats_.allocated_bytes, small, static_cast<int64_t>(block->size));
    update(stats_.active, small, +1);
    update(stats_.active_bytes, small, static_cast<int64_t>(block->size));
    update(stats_.requested_bytes, small, static_cast<int64_t>(requested));
    return block;
  }

  // Frees the block at `ptr`; false if `ptr` is not a live block of this device.
  bool free(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      return false;
    }
    Block* block = it->second;
    live_.erase(it);
    const bool small = block->small;
    block->allocated = false;
    update(stats_.allocation, small, -1);
    update(stats_.allocated_bytes, small, -static_cast<int64_t>(block->size));
    update(stats_.active, small, -1);
    update(stats_.active_bytes, small, -static_cast<int64_t>(block->size));
    update(stats_.requested_bytes, small, -static_cast<int64_t>(block->requested));
    BlockPool& pool = small ? small_pool_ : large_pool_;
    block = merge(block, block->prev, pool);
    block = merge(block, block->next, pool);
    if (block->prev != nullptr || block->next != nullptr) {
      update(stats_.inactive_split, small, +1);
      update(stats_.inactive_split_bytes, small, static_cast<int64_t>(block->size));
    }
    pool.insert(block);
    return true;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_free_segments(small_pool_);
    release_free_segments(large_pool_);
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat_array([](StatArray& array) {
      for (auto& stat : array) {
        stat.reset_accumulated();
      }
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
    stats_.oversize_allocations.reset_accumulated();
    stats_.oversize_segments.reset_accumulated();
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat_array([](StatArray& array) {
      for (auto& stat : array) {
        stat.reset_peak();
      }
    });
    stats_.oversize_allocations.reset_peak();
    stats_.oversize_segments.reset_peak();
  }

  std::pair<size_t, size_t> memory_info() {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t capacity = device_memory_capacity();
    return {capacity - reserved(), capacity};
  }

 private:
  size_t reserved() const {
    return static_cast<size_t>(
        stats_.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].current);
  }

  static void update(StatArray& array, bool small, int64_t amount) {
    for (size_t type : {static_cast<size_t>(StatType::AGGREGATE),
                        static_cast<size_t>(small ? StatType::SMALL_POOL
                                                  : StatType::LARGE_POOL)}) {
      if (amount >= 0) {
        array[type].increase(static_cast<size_t>(amount));
      } else {
        array[type].decrease(static_cast<size_t>(-amount));
      }
    }
  }

  template <typename F>
  void for_each_stat_array(F f) {
    f(stats_.allocation);
    f(stats_.segment);
    f(stats_.active);
    f(stats_.inactive_split);
    f(stats_.allocated_bytes);
    f(stats_.reserved_bytes);
    f(stats_.active_bytes);
    f(stats_.inactive_split_bytes);
    f(stats_.requested_bytes);
  }

  Block* take_free_block(BlockPool& pool, size_t size) {
    Block key{device_, false, size, 0, nullptr};
    auto it = pool.lower_bound(&key);
    if (it == pool.end()) {
      return nullptr;
    }
    Block* block = *it;
    pool.erase(it);
    if (block->prev != nullptr || block->next != nullptr) {
      update(stats_.inactive_split, block->small, -1);
      update(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
    }
    return block;
  }

  static bool should_split(const Block* block, size_t size) {
    const size_t remaining = block->size - size;
    return block->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  }

  Block* allocate_segment(size_t size, bool small, size_t requested) {
    const size_t bytes = segment_size(size);
    const size_t capacity = device_memory_capacity();
    if (reserved() + bytes > capacity) {
      // Like CUDA: free the cache and retry before declaring OOM.
      stats_.num_alloc_retries += 1;
      release_free_segments(small_pool_);
      release_free_segments(large_pool_);
    }
    void* ptr = nullptr;
    if (reserved() + bytes <= capacity) {
      if (posix_memalign(&ptr, kSegmentAlignment, bytes) != 0) {
        ptr = nullptr;
      }
    }
    if (ptr == nullptr) {
      stats_.num_ooms += 1;
      const size_t allocated = static_cast<size_t>(
          stats_.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current);
      const size_t reserved_now = reserved();
      const size_t free_now = capacity > reserved_now ? capacity - reserved_now : 0;
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "Neuron out of memory. Tried to allocate ",
          format_bytes(requested), ". NeuronCore ", static_cast<int>(device_),
          " has a total capacity of ", format_bytes(capacity), " of which ",
          format_bytes(free_now), " is free. Of the allocated memory ",
          format_bytes(allocated), " is allocated by PyTorch, and ",
          format_bytes(reserved_now - allocated),
          " is reserved by PyTorch but unallocated. Free tensors, call "
          "torch.accelerator.empty_cache(), or raise the capacity with "
          "NEURON_DEVICE_MEMORY (e.g. NEURON_DEVICE_MEMORY=32GiB).");
    }
    stats_.num_device_alloc += 1;
    update(stats_.segment, small, +1);
    update(stats_.reserved_bytes, small, static_cast<int64_t>(bytes));
    if (!small && size >= kMinLargeAlloc) {
      stats_.oversize_segments.increase(1);
    }
    return new Block{device_, small, bytes, 0, static_cast<char*>(ptr)};
  }

  // Merges `neighbour` into `block` if it is free; returns the merged block.
  Block* merge(Block* block, Block* neighbour, BlockPool& pool) {
    if (neighbour == nullptr || neighbour->allocated) {
      return block;
    }
    pool.erase(neighbour);
    update(stats_.inactive_split, block->small, -1);
    update(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(neighbour->size));
    if (neighbour == block->prev) {
      neighbour->size += block->size;
      neighbour->next = block->next;
      if (block->next != nullptr) {
        block->next->prev = neighbour;
      }
      delete block;
      return neighbour;
    }
    block->size += neighbour->size;
    block->next = neighbour->next;
    if (neighbour->next != nullptr) {
      neighbour->next->prev = block;
    }
    delete neighbour;
    return block;
  }

  // Returns whole free segments (blocks with no neighbours) to the host.
  void release_free_segments(BlockPool& pool) {
    for (auto it = pool.begin(); it != pool.end();) {
      Block* block = *it;
      if (block->prev == nullptr && block->next == nullptr) {
        update(stats_.segment, block->small, -1);
        update(stats_.reserved_bytes, block->small, -static_cast<int64_t>(block->size));
        if (!block->small && block->size >= kMinLargeAlloc) {
          stats_.oversize_segments.decrease(1);
        }
        stats_.num_device_free += 1;
        std::free(block->ptr);
        delete block;
        it = pool.erase(it);
      } else {
        ++it;
      }
    }
  }

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  BlockPool small_pool_;
  BlockPool large_pool_;
  DeviceStats stats_;
  ska::flat_hash_map<void*, Block*> live_;
};

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  DeviceMemory& memory(c10::DeviceIndex device) {
    std::call_once(init_once_, [this] {
      const auto count = device_count();
      for (c10::DeviceIndex i = 0; i < count; ++i) {
        devices_.push_back(std::make_unique<DeviceMemory>(i));
      }
    });
    check_device_index(device);
    return *devices_[device];
  }

  c10::DataPtr allocate_tagged(size_t nbytes, c10::DeviceIndex device, c10::Device tag) {
    DeviceMemory& device_memory = memory(device);
    if (nbytes == 0) {
      return {nullptr, nullptr, kDeleters[device], tag};
    }
    lazy_init();
    Block* block = device_memory.allocate(nbytes);
    return {block->ptr, block->ptr, kDeleters[device], tag};
  }

  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    return allocate_tagged(nbytes, device, c10::Device(kDeviceType, device));
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_on_any_device;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override {
    return is_initialized();
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    if (!is_initialized()) {
      return;
    }
    for (auto& device : devices_) {
      device->empty_cache();
    }
  }

  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // Streams execute in issue order on the host (see NeuronStream.cpp), so a
    // block is never in use by a stream after its tensor is freed.
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    // Async mode: storages dropped by the host are freed when the work using
    // them has run; count them as freed, as CUDA's allocator does at once.
    if (async_enabled() && device >= 0) {
      drain_device(device);
    }
    return memory(resolve_device_index(device)).stats();
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    memory(resolve_device_index(device)).reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    memory(resolve_device_index(device)).reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    return memory(resolve_device_index(device)).memory_info();
  }

  void free_on(size_t device, void* ptr) {
    const bool freed = devices_[device]->free(ptr);
    TORCH_INTERNAL_ASSERT(freed, "neuron: freeing memory that is not a live block of neuron:",
                          device);
  }

  // Frees `ptr` if it is a live block of any device; false otherwise.
  bool free_if_owned(void* ptr) {
    if (!is_initialized()) {
      return false;
    }
    for (auto& device : devices_) {
      if (device->free(ptr)) {
        return true;
      }
    }
    return false;
  }

  static void delete_on_any_device(void* ptr);

 private:
  std::once_flag init_once_;
  std::vector<std::unique_ptr<DeviceMemory>> devices_;
};

NeuronDeviceAllocator g_allocator;

template <size_t Device>
void delete_on_device(void* ptr) {
  // A forked child must not touch the parent's allocator state (its mutexes
  // may have been held at fork time); the memory dies with the process.
  if (ptr == nullptr || is_in_bad_fork()) {
    return;
  }
  g_allocator.free_on(Device, ptr);
}

void NeuronDeviceAllocator::delete_on_any_device(void* ptr) {
  if (ptr == nullptr || is_in_bad_fork()) {
    return;
  }
  const bool freed = g_allocator.free_if_owned(ptr);
  TORCH_INTERNAL_ASSERT(freed, "neuron: freeing memory that is not a live device block");
}

} // namespace

c10::DeviceAllocator* device_allocator() {
  return &g_allocator;
}

c10::DataPtr allocate_device_memory(c10::DeviceIndex device, size_t nbytes) {
  return g_allocator.allocate_tagged(nbytes, device, c10::Device(kDeviceType, device));
}

c10::DataPtr allocate_for_host_execution(c10::DeviceIndex device, size_t nbytes) {
  return g_allocator.allocate_tagged(nbytes, device, c10::Device(c10::DeviceType::CPU));
}

bool is_device_allocation(const c10::DataPtr& data_ptr, c10::DeviceIndex device) {
  return device >= 0 && static_cast<size_t>(device) < kMaxDevices &&
      data_ptr.get_deleter() == kDeleters[device];
}

bool free_if_device_memory(void* ptr) {
  return ptr != nullptr && !is_in_bad_fork() && g_allocator.free_if_owned(ptr);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

} // namespace neuron
