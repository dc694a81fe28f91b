// Device memory: a caching allocator over host memory with a per-device
// capacity, modelled on the CUDA caching allocator's design.
//
// - Requests are rounded up to 512 bytes.
// - Requests of at most 1 MiB come from the small pool (2 MiB segments);
//   larger ones from the large pool (20 MiB segments below 10 MiB, else the
//   request rounded up to 2 MiB).
// - Freed blocks stay cached in their pool, are reused best-fit, split when
//   the remainder is worth keeping and merged with free neighbours.
// - Best fit is CUDA's order, (size, address); a pool keeps its blocks up to
//   2 MiB in one bucket per size (see BlockPool), so that the commonest
//   allocate/free cycle walks no tree and allocates no node.
// - Segments are released only by empty_cache() or when a request would
//   otherwise exceed the capacity; past it, torch.OutOfMemoryError.
// No Python and no GIL are involved: each device has its own mutex.
// Segments come from the driver (ndrvMalloc/ndrvFree, driver/memory.cpp);
// the policy above is torch-side, as CUDA's caching allocator is.
#include "NeuronRuntime.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
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

// The free blocks of one pool, in best-fit order: by size, then address (the
// CUDA caching allocator's order, so that which block a request gets does not
// depend on how the pool stores them). Blocks up to kBucketedMax (every block
// of the small pool, which serves the commonest requests) sit in one bucket
// per size, under a two-level bitmap of the buckets that hold any: finding the
// best fit is two bit scans, and taking or returning a block allocates
// nothing. Larger blocks are few and sit in an ordered set.
class BlockPool {
 public:
  // The best-fitting free block of at least `size` bytes (a multiple of
  // kMinBlockSize), removed from the pool; nullptr if none is large enough.
  Block* take(size_t size) {
    if (size <= kBucketedMax) {
      const size_t index = first_nonempty_from(bucket_of(size));
      if (index < kBuckets) {
        auto& bucket = buckets_[index];
        Block* block = bucket.back(); // the lowest address
        bucket.pop_back();
        if (bucket.empty()) {
          mark_empty(index);
        }
        return block;
      }
    }
    auto it = size <= kBucketedMax ? large_.begin() : large_.lower_bound(size);
    if (it == large_.end()) {
      return nullptr;
    }
    Block* block = *it;
    large_.erase(it);
    return block;
  }

  void insert(Block* block) {
    if (block->size > kBucketedMax) {
      large_.insert(block);
      return;
    }
    const size_t index = bucket_of(block->size);
    auto& bucket = buckets_[index];
    bucket.insert(std::lower_bound(bucket.begin(), bucket.end(), block, higher_address), block);
    nonempty_[index / 64] |= uint64_t{1} << (index % 64);
    nonempty_words_ |= uint64_t{1} << (index / 64);
  }

  void erase(Block* block) {
    if (block->size > kBucketedMax) {
      large_.erase(block);
      return;
    }
    const size_t index = bucket_of(block->size);
    auto& bucket = buckets_[index];
    auto it = std::lower_bound(bucket.begin(), bucket.end(), block, higher_address);
    TORCH_INTERNAL_ASSERT(it != bucket.end() && *it == block, "neuron: a free block is missing from its pool");
    bucket.erase(it);
    if (bucket.empty()) {
      mark_empty(index);
    }
  }

  // Removes the blocks for which `remove` holds and returns them.
  template <class Predicate>
  std::vector<Block*> remove_if(Predicate remove) {
    std::vector<Block*> removed;
    for (size_t index = 0; index < buckets_.size(); ++index) {
      auto& bucket = buckets_[index];
      for (Block* block : bucket) {
        if (remove(block)) {
          removed.push_back(block);
        }
      }
      std::erase_if(bucket, remove);
      if (bucket.empty()) {
        mark_empty(index);
      }
    }
    for (auto it = large_.begin(); it != large_.end();) {
      if (remove(*it)) {
        removed.push_back(*it);
        it = large_.erase(it);
      } else {
        ++it;
      }
    }
    return removed;
  }

 private:
  static constexpr size_t kBucketedMax = kSmallBuffer; // a whole small segment
  static constexpr size_t kBuckets = kBucketedMax / kMinBlockSize;

  static size_t bucket_of(size_t size) {
    return size / kMinBlockSize - 1;
  }

  // The first non-empty bucket at or after `index`; kBuckets if none. Two
  // bitmap levels: a bit per bucket, and a bit per word of those.
  size_t first_nonempty_from(size_t index) const {
    size_t word = index / 64;
    const uint64_t bits = nonempty_[word] & (~uint64_t{0} << (index % 64));
    if (bits != 0) {
      return word * 64 + static_cast<size_t>(std::countr_zero(bits));
    }
    if (word + 1 == kWords) {
      return kBuckets;
    }
    const uint64_t words = nonempty_words_ & (~uint64_t{0} << (word + 1));
    if (words == 0) {
      return kBuckets;
    }
    word = static_cast<size_t>(std::countr_zero(words));
    return word * 64 + static_cast<size_t>(std::countr_zero(nonempty_[word]));
  }

  void mark_empty(size_t index) {
    uint64_t& word = nonempty_[index / 64];
    word &= ~(uint64_t{1} << (index % 64));
    if (word == 0) {
      nonempty_words_ &= ~(uint64_t{1} << (index / 64));
    }
  }

  // Each bucket is ordered by descending address, so that the best block
  // (the lowest address) is at the back.
  static bool higher_address(const Block* a, const Block* b) {
    return a->ptr > b->ptr;
  }

  struct BySizeThenAddress {
    using is_transparent = void;
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
    bool operator()(const Block* a, size_t size) const {
      return a->size < size;
    }
    bool operator()(size_t size, const Block* b) const {
      return size < b->size;
    }
  };

  std::vector<std::vector<Block*>> buckets_ = std::vector<std::vector<Block*>>(kBuckets);
  static constexpr size_t kWords = kBuckets / 64;
  static_assert(kWords <= 64, "one word of the second bitmap level per 64 buckets");
  std::array<uint64_t, kWords> nonempty_{};
  uint64_t nonempty_words_ = 0;
  std::set<Block*, BySizeThenAddress> large_;
};

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
      Block* remainder = make_block(small, block->size - size, block->ptr + size);
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
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    NEURON_DRIVER_CHECK(ndrvMemGetInfo(device_, &free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }

 private:
  size_t reserved() const {
    return static_cast<size_t>(
        stats_.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].current);
  }

  // Adds `amount` to the aggregate statistic and to its pool's (written out:
  // it runs nine times per allocate/free cycle).
  static void update(StatArray& array, bool small, int64_t amount) {
    Stat& aggregate = array[static_cast<size_t>(StatType::AGGREGATE)];
    Stat& pool = array[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)];
    if (amount >= 0) {
      aggregate.increase(static_cast<size_t>(amount));
      pool.increase(static_cast<size_t>(amount));
    } else {
      aggregate.decrease(static_cast<size_t>(-amount));
      pool.decrease(static_cast<size_t>(-amount));
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
    Block* block = pool.take(size);
    if (block == nullptr) {
      return nullptr;
    }
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

  // A segment of this device's memory from the driver (whatever the current
  // device); nullptr when the driver has none left.
  void* driver_malloc(size_t bytes) const {
    void* ptr = nullptr;
    ndrvError_t error = ndrvSuccess;
    {
      DriverDeviceScope on_device(device_);
      error = ndrvMalloc(&ptr, bytes);
    }
    if (error == ndrvErrorMemoryAllocation) {
      return nullptr;
    }
    NEURON_DRIVER_CHECK(error);
    return ptr;
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
      ptr = driver_malloc(bytes);
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
    return make_block(small, bytes, static_cast<char*>(ptr));
  }

  // Block records are reused: a split makes one and the merge at the next
  // free drops it again, on every allocate/free cycle of a small tensor.
  Block* make_block(bool small, size_t size, char* ptr) {
    if (spare_blocks_.empty()) {
      return new Block{device_, small, size, 0, ptr};
    }
    Block* block = spare_blocks_.back();
    spare_blocks_.pop_back();
    *block = Block{device_, small, size, 0, ptr};
    return block;
  }

  void drop_block(Block* block) {
    if (spare_blocks_.size() < kSpareBlocks) {
      spare_blocks_.push_back(block);
    } else {
      delete block;
    }
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
      drop_block(block);
      return neighbour;
    }
    block->size += neighbour->size;
    block->next = neighbour->next;
    if (neighbour->next != nullptr) {
      neighbour->next->prev = block;
    }
    drop_block(neighbour);
    return block;
  }

  // Returns whole free segments (blocks with no neighbours) to the host.
  void release_free_segments(BlockPool& pool) {
    const auto whole_segments =
        pool.remove_if([](const Block* block) { return block->prev == nullptr && block->next == nullptr; });
    for (Block* block : whole_segments) {
      update(stats_.segment, block->small, -1);
      update(stats_.reserved_bytes, block->small, -static_cast<int64_t>(block->size));
      if (!block->small && block->size >= kMinLargeAlloc) {
        stats_.oversize_segments.decrease(1);
      }
      stats_.num_device_free += 1;
      NEURON_DRIVER_CHECK(ndrvFree(block->ptr));
      drop_block(block);
    }
  }

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  BlockPool small_pool_;
  BlockPool large_pool_;
  DeviceStats stats_;
  ska::flat_hash_map<void*, Block*> live_;
  static constexpr size_t kSpareBlocks = 64;
  std::vector<Block*> spare_blocks_;
};

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  DeviceMemory& memory(c10::DeviceIndex device) {
    if (!devices_ready_.load(std::memory_order_acquire)) {
      std::call_once(init_once_, [this] {
        const auto count = device_count();
        for (c10::DeviceIndex i = 0; i < count; ++i) {
          devices_.push_back(std::make_unique<DeviceMemory>(i));
        }
        devices_ready_.store(true, std::memory_order_release);
      });
    }
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
      check_device_index(device); // raises, naming the valid indices
      TORCH_INTERNAL_ASSERT(false, "neuron: device index ", static_cast<int>(device), " passed the check");
    }
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
    NEURON_DRIVER_CHECK(ndrvMemcpy(dest, src, count, ndrvMemcpyDeviceToDevice));
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
  std::atomic<bool> devices_ready_{false}; // set once devices_ is filled
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
