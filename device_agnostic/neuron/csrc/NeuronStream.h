// Streams and events of the neuron runtime, over the driver's streams and
// events (driver/stream.cpp, driver/event.cpp).
//
// Execution model (default, NEURON_LAUNCH_BLOCKING=1): every operation runs
// to completion on the host thread that issues it, in issue order. A stream
// is therefore always idle when queried, work on one stream stays in that
// stream's order, and an event's timestamp is taken when it is recorded (all
// earlier work being already done). In the opt-in asynchronous mode
// (NEURON_LAUNCH_BLOCKING=0, NeuronAsync.cpp) recording an event enqueues its
// completion on the stream, and waiting on one enqueues a wait for it. The
// bookkeeping (pools, priorities, a thread-local current stream per device,
// event devices and timing flags) follows CUDA's rules, so that code written
// against torch.Stream/torch.Event behaves, and fails, as it would there.
#pragma once

#include "NeuronRuntime.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <exception>
#include <mutex>

namespace neuron {

// Priorities follow CUDA: 0 is normal, negative is higher priority.
constexpr int kLowestPriority = 0;
constexpr int kHighestPriority = -1;

c10::Stream current_stream(c10::DeviceIndex device);
c10::Stream default_stream(c10::DeviceIndex device);
c10::Stream stream_from_pool(c10::DeviceIndex device, int priority);
// Makes `stream` current for its device on this thread; returns the previous.
c10::Stream exchange_stream(c10::Stream stream);
int stream_priority(const c10::Stream& stream);
void check_stream(const c10::Stream& stream);

// The driver stream behind a c10 stream (one per device and stream id,
// created on first use, never destroyed), and the first error raised by work
// launched on it in asynchronous mode, kept for the next drain to rethrow.
struct DriverStream {
  ndrvStream_t handle = nullptr;
  std::mutex error_mutex;
  std::exception_ptr error;
};
DriverStream& driver_stream(const c10::Stream& stream);
// nullptr for a stream nothing has used yet (it has no pending work).
DriverStream* find_driver_stream(c10::DeviceIndex device, c10::StreamId id);
// Stream ids run from 0 (the default stream) to kMaxStreamId.
constexpr int kMaxStreamId = 64;

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device,
                  c10::EventFlag flag);
void block_on_event(void* event, const c10::Stream& stream);
bool query_event(void* event);
void synchronize_event(void* event);
double event_elapsed_ms(void* start, void* end);
// The device an event was created for; -1 for an event never recorded.
c10::DeviceIndex event_device(void* event);
void destroy_event(void* event) noexcept;

} // namespace neuron
