// Events: markers recorded on a stream, completed when the stream reaches them.
//
// Emulation: an event counts its records and its completions. Recording on a
// stream with pending work launches the completion on the stream (it runs
// after that work); recording on an idle stream completes at once, so that a
// query right after is true, as on an idle CUDA stream, and no worker thread
// is started for it. A timing event takes a steady_clock timestamp when it
// completes. The counters are shared with the work that completes or waits
// for them, so destroying an event with work pending is safe.
#include "internal.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace {

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
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return completed >= generation; });
  }

  uint64_t latest_record() {
    std::lock_guard<std::mutex> lock(mutex);
    return recorded;
  }
};

} // namespace

struct ndrvEvent {
  unsigned int flags;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

extern "C" {

ndrvError_t ndrvEventCreateWithFlags(ndrvEvent_t* event, unsigned int flags) {
  if (event == nullptr || (flags & ~static_cast<unsigned int>(ndrvEventEnableTiming)) != 0) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvEventCreateWithFlags: bad argument");
  }
  *event = new ndrvEvent{flags};
  return ndrvSuccess;
}

ndrvError_t ndrvEventRecord(ndrvEvent_t event, ndrvStream_t stream) {
  if (event == nullptr || stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvEventRecord: event or stream is NULL");
  }
  auto state = event->state;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    generation = ++state->recorded;
  }
  if (ndrv::stream_idle(stream)) {
    state->complete(generation);
  } else {
    ndrv::enqueue(stream, [state, generation] { state->complete(generation); });
  }
  return ndrvSuccess;
}

ndrvError_t ndrvStreamWaitEvent(ndrvStream_t stream, ndrvEvent_t event) {
  if (event == nullptr || stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle,
                      "ndrvStreamWaitEvent: event or stream is NULL");
  }
  auto state = event->state;
  const uint64_t generation = state->latest_record();
  // The waited-for record was launched before this wait, so no cycle forms.
  ndrv::enqueue(stream, [state, generation] { state->wait_for(generation); });
  return ndrvSuccess;
}

ndrvError_t ndrvEventQuery(ndrvEvent_t event) {
  if (event == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvEventQuery: event is NULL");
  }
  std::lock_guard<std::mutex> lock(event->state->mutex);
  return event->state->completed >= event->state->recorded ? ndrvSuccess : ndrvErrorNotReady;
}

ndrvError_t ndrvEventSynchronize(ndrvEvent_t event) {
  if (event == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvEventSynchronize: event is NULL");
  }
  event->state->wait_for(event->state->latest_record());
  return ndrvSuccess;
}

ndrvError_t ndrvEventElapsedTime(double* ms, ndrvEvent_t start, ndrvEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvEventElapsedTime: a NULL argument");
  }
  if ((start->flags & end->flags & ndrvEventEnableTiming) == 0) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle,
                      "ndrvEventElapsedTime: both events need ndrvEventEnableTiming");
  }
  if (start->state->latest_record() == 0 || end->state->latest_record() == 0) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle,
                      "ndrvEventElapsedTime: both events must be recorded");
  }
  ndrvEventSynchronize(start);
  ndrvEventSynchronize(end);
  std::chrono::steady_clock::time_point from;
  std::chrono::steady_clock::time_point to;
  {
    std::lock_guard<std::mutex> lock(start->state->mutex);
    from = start->state->timestamp;
  }
  {
    std::lock_guard<std::mutex> lock(end->state->mutex);
    to = end->state->timestamp;
  }
  const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  *ms = static_cast<double>(nanoseconds) / 1e6;
  return ndrvSuccess;
}

ndrvError_t ndrvEventDestroy(ndrvEvent_t event) {
  delete event;
  return ndrvSuccess;
}

} // extern "C"
