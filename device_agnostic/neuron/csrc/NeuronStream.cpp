#include "NeuronStream.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
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

std::array<std::array<std::atomic<uint32_t>, kPriorityLevels>, kMaxDevices> g_next_slot{};

thread_local std::array<c10::StreamId, kMaxDevices> tls_current_stream{};

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, device), id);
}

// An event's completion state, shared with the closures that complete it or
// wait for it (async mode), so that destroying the event is always safe.
// Each record bumps `recorded`; the event is complete when `completed` has
// caught up, i.e. when the work issued before the latest record has run.
struct EventState {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0;
  uint64_t completed = 0;
  std::chrono::steady_clock::time_point timestamp;

  void complete(uint64_t generation) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (generation > completed) {
        completed = generation;
        timestamp = std::chrono::steady_clock::now();
      }
    }
    cv.notify_all();
  }

  void wait_for(uint64_t generation) {
    GilReleasedWhileWaiting no_gil; // the worker completing it may need the GIL
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return completed >= generation; });
  }
};

struct NeuronEvent {
  c10::DeviceIndex device;
  bool enable_timing;
  bool recorded = false;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

} // namespace

void check_stream(const c10::Stream& stream) {
  TORCH_CHECK(
      stream.device_type() == kDeviceType, "Expected a neuron stream, but got a stream of ",
      stream.device_type(), ".");
  check_device_index(stream.device_index());
  const auto id = stream.id();
  TORCH_CHECK(id >= 0 && id <= kStreamsPerPool * kPriorityLevels,
              "Invalid neuron stream id ", id, " on device ",
              static_cast<int>(stream.device_index()), ".");
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
    neuron_event = new NeuronEvent{stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
    *event = neuron_event;
  }
  TORCH_CHECK(neuron_event->device == stream.device_index(), "Event device ",
              static_cast<int>(neuron_event->device),
              " does not match recording stream's device ",
              static_cast<int>(stream.device_index()), ".");
  neuron_event->recorded = true;
  auto state = neuron_event->state;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    generation = ++state->recorded;
  }
  if (async_enabled() && !stream_idle(stream)) {
    // Completes when the stream's worker reaches it: after the work before it.
    enqueue_on_stream(stream, [state, generation] { state->complete(generation); });
  } else {
    // All work issued to the stream so far has completed (synchronous mode, or
    // an idle stream): complete now, so that query() right after is true, as
    // on an idle CUDA stream, and no worker is started for an unused stream.
    state->complete(generation);
  }
}

void block_on_event(void* event, const c10::Stream& stream) {
  check_stream(stream);
  // An event that was never recorded does nothing, as in CUDA. In synchronous
  // mode the recorded work has completed: nothing to wait for.
  auto* neuron_event = static_cast<NeuronEvent*>(event);
  if (neuron_event == nullptr || !async_enabled()) {
    return;
  }
  auto state = neuron_event->state;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    generation = state->recorded;
  }
  // Work issued to `stream` after this point waits for the recorded work. The
  // waited-for generation was enqueued before this wait, so no cycle forms.
  enqueue_on_stream(stream, [state, generation] { state->wait_for(generation); });
}

bool query_event(void* event) {
  auto* neuron_event = static_cast<NeuronEvent*>(event);
  if (neuron_event == nullptr) {
    return true;
  }
  std::lock_guard<std::mutex> lock(neuron_event->state->mutex);
  return neuron_event->state->completed >= neuron_event->state->recorded;
}

void synchronize_event(void* event) {
  auto* neuron_event = static_cast<NeuronEvent*>(event);
  if (neuron_event == nullptr) {
    return;
  }
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(neuron_event->state->mutex);
    generation = neuron_event->state->recorded;
  }
  neuron_event->state->wait_for(generation);
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
  std::chrono::steady_clock::time_point from;
  std::chrono::steady_clock::time_point to;
  {
    std::lock_guard<std::mutex> lock(first->state->mutex);
    from = first->state->timestamp;
  }
  {
    std::lock_guard<std::mutex> lock(second->state->mutex);
    to = second->state->timestamp;
  }
  const auto nanoseconds =
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  return static_cast<double>(nanoseconds) / 1e6;
}

c10::DeviceIndex event_device(void* event) {
  const auto* neuron_event = static_cast<const NeuronEvent*>(event);
  return neuron_event == nullptr ? static_cast<c10::DeviceIndex>(-1) : neuron_event->device;
}

void destroy_event(void* event) noexcept {
  delete static_cast<NeuronEvent*>(event);
}

} // namespace neuron
