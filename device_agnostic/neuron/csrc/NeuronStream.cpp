#include "NeuronStream.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

namespace neuron {
namespace {

// Stream ids: 0 is the default stream; pool streams are
// 1 + level * kStreamsPerPool + slot, level 0 for normal priority and 1 for
// high priority, like CUDA's fixed-size pools handed out round-robin.
constexpr int kStreamsPerPool = 32;
constexpr int kPriorityLevels = 2;
constexpr int kMaxDevices = 64;
static_assert(kStreamsPerPool * kPriorityLevels == kMaxStreamId);

std::array<std::array<std::atomic<uint32_t>, kPriorityLevels>, kMaxDevices> g_next_slot{};

thread_local std::array<c10::StreamId, kMaxDevices> tls_current_stream{};

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, device), id);
}

// The torch-side state of an event: the driver's event, and what torch's
// rules need (its device, whether it times, whether it was ever recorded).
struct NeuronEvent {
  c10::DeviceIndex device;
  bool enable_timing;
  bool recorded = false;
  ndrvEvent_t handle = nullptr;

  ~NeuronEvent() {
    ndrvEventDestroy(handle);
  }
};

std::array<std::array<std::atomic<DriverStream*>, kMaxStreamId + 1>, kMaxDevices> g_driver_streams{};
std::mutex g_driver_streams_mutex;

} // namespace

void check_stream(const c10::Stream& stream) {
  TORCH_CHECK(
      stream.device_type() == kDeviceType, "Expected a neuron stream, but got a stream of ",
      stream.device_type(), ".");
  check_device_index(stream.device_index());
  const auto id = stream.id();
  TORCH_CHECK(id >= 0 && id <= kMaxStreamId,
              "Invalid neuron stream id ", id, " on device ",
              static_cast<int>(stream.device_index()), ".");
}

DriverStream* find_driver_stream(c10::DeviceIndex device, c10::StreamId id) {
  return g_driver_streams[device][id].load(std::memory_order_acquire);
}

DriverStream& driver_stream(const c10::Stream& stream) {
  const auto device = stream.device_index();
  const auto id = stream.id();
  if (auto* found = find_driver_stream(device, id)) {
    return *found;
  }
  std::lock_guard<std::mutex> lock(g_driver_streams_mutex);
  auto& slot = g_driver_streams[device][id];
  if (slot.load() == nullptr) {
    auto created = std::make_unique<DriverStream>();
    DriverDeviceScope on_device(device);
    const int priority = id > kStreamsPerPool ? kHighestPriority : kLowestPriority;
    NEURON_DRIVER_CHECK(ndrvStreamCreateWithPriority(&created->handle, priority));
    slot.store(created.release(), std::memory_order_release); // never freed
  }
  return *slot.load();
}

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve_device_index(device);
  return make_stream(device, tls_current_stream[device]);
}

c10::Stream default_stream(c10::DeviceIndex device) {
  return make_stream(resolve_device_index(device), 0);
}

c10::Stream stream_from_pool(c10::DeviceIndex device, int priority) {
  device = resolve_device_index(device);
  lazy_init();
  const int level = priority < 0 ? 1 : 0;
  const uint32_t slot = g_next_slot[device][level].fetch_add(1) % kStreamsPerPool;
  return make_stream(device, 1 + level * kStreamsPerPool + static_cast<int>(slot));
}

c10::Stream exchange_stream(c10::Stream stream) {
  check_stream(stream);
  const auto device = stream.device_index();
  const auto previous = make_stream(device, tls_current_stream[device]);
  tls_current_stream[device] = stream.id();
  return previous;
}

int stream_priority(const c10::Stream& stream) {
  check_stream(stream);
  return stream.id() > kStreamsPerPool ? kHighestPriority : kLowestPriority;
}

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device,
                  c10::EventFlag flag) {
  check_stream(stream);
  TORCH_CHECK(device == -1 || device == stream.device_index(), "Event device index ",
              static_cast<int>(device), " does not match recording stream's device index ",
              static_cast<int>(stream.device_index()), ".");
  auto* neuron_event = static_cast<NeuronEvent*>(*event);
  if (neuron_event == nullptr) {
    lazy_init();
    auto created = std::make_unique<NeuronEvent>();
    created->device = stream.device_index();
    created->enable_timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    DriverDeviceScope on_device(created->device);
    NEURON_DRIVER_CHECK(ndrvEventCreateWithFlags(
        &created->handle, created->enable_timing ? ndrvEventEnableTiming : ndrvEventDefault));
    neuron_event = created.release();
    *event = neuron_event;
  }
  TORCH_CHECK(neuron_event->device == stream.device_index(), "Event device ",
              static_cast<int>(neuron_event->device),
              " does not match recording stream's device ",
              static_cast<int>(stream.device_index()), ".");
  neuron_event->recorded = true;
  // Completes after the work launched on the stream so far: at once in
  // synchronous mode, where that work has all run on the issuing thread.
  NEURON_DRIVER_CHECK(ndrvEventRecord(neuron_event->handle, driver_stream(stream).handle));
}

void block_on_event(void* event, const c10::Stream& stream) {
  check_stream(stream);
  // An event that was never recorded does nothing, as in CUDA. In synchronous
  // mode the recorded work has completed: nothing to wait for.
  auto* neuron_event = static_cast<NeuronEvent*>(event);
  if (neuron_event == nullptr || !async_enabled()) {
    return;
  }
  // Work issued to `stream` after this point waits for the recorded work.
  NEURON_DRIVER_CHECK(ndrvStreamWaitEvent(driver_stream(stream).handle, neuron_event->handle));
}

bool query_event(void* event) {
  auto* neuron_event = static_cast<NeuronEvent*>(event);
  if (neuron_event == nullptr) {
    return true;
  }
  const ndrvError_t error = ndrvEventQuery(neuron_event->handle);
  if (error == ndrvErrorNotReady) {
    return false;
  }
  NEURON_DRIVER_CHECK(error);
  return true;
}

void synchronize_event(void* event) {
  auto* neuron_event = static_cast<NeuronEvent*>(event);
  if (neuron_event == nullptr) {
    return;
  }
  GilReleasedWhileWaiting no_gil; // the worker completing it may need the GIL
  NEURON_DRIVER_CHECK(ndrvEventSynchronize(neuron_event->handle));
}

double event_elapsed_ms(void* start, void* end) {
  auto* first = static_cast<NeuronEvent*>(start);
  auto* second = static_cast<NeuronEvent*>(end);
  TORCH_CHECK(first != nullptr && second != nullptr && first->recorded && second->recorded,
              "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(first->enable_timing && second->enable_timing,
              "Both events must be created with argument 'enable_timing=True'.");
  TORCH_CHECK(first->device == second->device,
              "Both events must be recorded on the same device to calculate elapsed time, "
              "but got neuron:", static_cast<int>(first->device), " and neuron:",
              static_cast<int>(second->device), ".");
  synchronize_event(start);
  synchronize_event(end);
  double milliseconds = 0.0;
  NEURON_DRIVER_CHECK(ndrvEventElapsedTime(&milliseconds, first->handle, second->handle));
  return milliseconds;
}

c10::DeviceIndex event_device(void* event) {
  const auto* neuron_event = static_cast<const NeuronEvent*>(event);
  return neuron_event == nullptr ? static_cast<c10::DeviceIndex>(-1) : neuron_event->device;
}

void destroy_event(void* event) noexcept {
  delete static_cast<NeuronEvent*>(event);
}

} // namespace neuron
