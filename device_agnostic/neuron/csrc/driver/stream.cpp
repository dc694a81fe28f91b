// Streams: ordered queues of work, and synchronizing a device's streams.
//
// Emulation: a stream is a FIFO of host functions run one at a time, in
// order, by a worker thread of its own, started when work is first launched
// on it (a stream nobody launches on costs no thread). Two streams' work runs
// concurrently. Each stream counts the work launched and the work completed:
// it is idle when the two are equal, and synchronizing waits until the
// completed count reaches the launched count seen on entry (work launched
// later is not waited for). A function's completion is counted after it
// returns, so whatever it releases is released before any synchronize
// returns.
#include "internal.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

struct ndrvStream {
  int device;
  int priority;
  std::mutex mutex;
  std::condition_variable cv; // new work, and completed work
  std::deque<std::function<void()>> tasks;
  // Changed under `mutex`; read without it by the idle check, which every
  // event record makes (the profiler records two per operator).
  std::atomic<uint64_t> enqueued{0};
  std::atomic<uint64_t> completed{0};
  bool stopping = false;
  std::thread worker; // started by the first launch

  void run() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stopping || !tasks.empty(); });
        if (tasks.empty()) {
          return; // stopping, and nothing left
        }
        work = std::move(tasks.front());
        tasks.pop_front();
      }
      work();
      work = nullptr; // release what it holds before counting it done
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++completed;
      }
      cv.notify_all();
    }
  }

  void synchronize() {
    std::unique_lock<std::mutex> lock(mutex);
    const uint64_t target = enqueued.load();
    cv.wait(lock, [&] { return completed.load() >= target; });
  }
};

namespace {

// Never destroyed (streams may be used by other static objects' destructors).
std::mutex& g_streams_mutex = *new std::mutex;
std::vector<ndrvStream*>& g_streams = *new std::vector<ndrvStream*>; // for ndrvDeviceSynchronize

} // namespace

namespace ndrv {

void enqueue(ndrvStream_t stream, std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (!stream->worker.joinable()) {
      stream->worker = std::thread([stream] { stream->run(); });
    }
    stream->tasks.push_back(std::move(work));
    ++stream->enqueued;
  }
  stream->cv.notify_all();
}

bool stream_idle(ndrvStream_t stream) {
  // completed never passes enqueued, so reading it first cannot see a
  // stream with work as idle.
  const uint64_t completed = stream->completed.load(std::memory_order_acquire);
  return completed == stream->enqueued.load(std::memory_order_acquire);
}

} // namespace ndrv

extern "C" {

ndrvError_t ndrvStreamCreateWithPriority(ndrvStream_t* stream, int priority) {
  if (stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvStreamCreateWithPriority: stream is NULL");
  }
  auto* created = new ndrvStream{};
  created->device = ndrv::current_device();
  created->priority = priority < 0 ? -1 : 0;
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    g_streams.push_back(created);
  }
  *stream = created;
  return ndrvSuccess;
}

ndrvError_t ndrvStreamDestroy(ndrvStream_t stream) {
  if (stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvStreamDestroy: stream is NULL");
  }
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    std::erase(g_streams, stream);
  }
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stopping = true; // the worker finishes the queue, then leaves
  }
  stream->cv.notify_all();
  if (stream->worker.joinable()) {
    stream->worker.join();
  }
  delete stream;
  return ndrvSuccess;
}

ndrvError_t ndrvStreamGetPriority(ndrvStream_t stream, int* priority) {
  if (stream == nullptr || priority == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvStreamGetPriority: an argument is NULL");
  }
  *priority = stream->priority;
  return ndrvSuccess;
}

ndrvError_t ndrvLaunchHostFunc(ndrvStream_t stream, ndrvHostFn_t fn, void* user_data) {
  if (stream == nullptr || fn == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvLaunchHostFunc: stream or fn is NULL");
  }
  ndrv::enqueue(stream, [fn, user_data] { fn(user_data); });
  return ndrvSuccess;
}

ndrvError_t ndrvStreamQuery(ndrvStream_t stream) {
  if (stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvStreamQuery: stream is NULL");
  }
  return ndrv::stream_idle(stream) ? ndrvSuccess : ndrvErrorNotReady;
}

ndrvError_t ndrvStreamSynchronize(ndrvStream_t stream) {
  if (stream == nullptr) {
    return ndrv::fail(ndrvErrorInvalidResourceHandle, "ndrvStreamSynchronize: stream is NULL");
  }
  stream->synchronize();
  return ndrvSuccess;
}

ndrvError_t ndrvDeviceSynchronize(void) {
  const int device = ndrv::current_device();
  std::vector<ndrvStream*> streams;
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    for (auto* stream : g_streams) {
      if (stream->device == device) {
        streams.push_back(stream);
      }
    }
  }
  for (auto* stream : streams) {
    stream->synchronize();
  }
  return ndrvSuccess;
}

} // extern "C"
