// Asynchronous execution (opt-in: NEURON_LAUNCH_BLOCKING=0).
//
// By default (NEURON_LAUNCH_BLOCKING unset or 1) every operation runs to
// completion on the thread that issues it and nothing here is used.
//
// In asynchronous mode each stream owns one queue and one worker thread,
// created when work is first enqueued on it. The queue is a FIFO of closures;
// the worker runs them one at a time, in order, so work on a stream keeps its
// issue order, and two streams' work runs concurrently. Each queue counts the
// closures enqueued and the closures completed: a stream is idle when the two
// are equal, and draining a stream waits until the completed count reaches
// the enqueued count seen on entry (work enqueued later is not waited for).
//
// A closure is destroyed, on the worker, before it counts as completed: the
// storages it holds (which keep device memory alive while work is pending)
// are released before any drain returns, so memory freed by a drained stream
// is back in the allocator, and memory still used by pending work is never
// freed (stricter than CUDA's record_stream: no block is reused while any
// queued closure references it).
//
// A closure that throws does not stop the stream: the first error is kept
// and rethrown by the next drain of that stream (like CUDA's asynchronous
// error reporting at the next synchronizing call).
#include "NeuronStream.h"

#include <Python.h>

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace neuron {
namespace {

constexpr int kMaxDevices = 64;
// Stream ids 0..64 (see NeuronStream.cpp: default stream + two pools of 32).
constexpr int kMaxStreamIds = 65;

bool read_async_enabled() {
  const char* value = std::getenv("NEURON_LAUNCH_BLOCKING");
  if (value == nullptr || *value == '\0') {
    return false;
  }
  if (std::strcmp(value, "0") == 0) {
    return true;
  }
  TORCH_CHECK(std::strcmp(value, "1") == 0, "NEURON_LAUNCH_BLOCKING must be 0 (asynchronous "
              "execution on per-stream worker threads) or 1 (synchronous, the default), but "
              "got '", value, "'.");
  return false;
}

class StreamQueue {
 public:
  StreamQueue() : worker_([this] { loop(); }) {
    worker_.detach(); // lives as long as the process (queues are never freed)
  }

  void enqueue(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(work));
      ++enqueued_;
    }
    cv_.notify_all();
  }

  bool idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ == enqueued_;
  }

  void drain() {
    std::exception_ptr error;
    {
      GilReleasedWhileWaiting no_gil;
      std::unique_lock<std::mutex> lock(mutex_);
      const uint64_t target = enqueued_;
      cv_.wait(lock, [&] { return completed_ >= target; });
      std::swap(error, error_);
    }
    if (error) {
      std::rethrow_exception(error);
    }
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !tasks_.empty(); });
        work = std::move(tasks_.front());
        tasks_.pop_front();
      }
      std::exception_ptr error;
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
      work = nullptr; // release the storages it holds before counting it done
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error && !error_) {
          error_ = error;
        }
        ++completed_;
      }
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_; // new work, and completed work
  std::deque<std::function<void()>> tasks_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  std::exception_ptr error_;
  std::thread worker_;
};

std::array<std::array<std::atomic<StreamQueue*>, kMaxStreamIds>, kMaxDevices> g_queues{};
std::mutex g_queues_mutex;

StreamQueue* find_queue(const c10::Stream& stream) {
  return g_queues[stream.device_index()][stream.id()].load(std::memory_order_acquire);
}

StreamQueue& queue_of(const c10::Stream& stream) {
  if (auto* queue = find_queue(stream)) {
    return *queue;
  }
  std::lock_guard<std::mutex> lock(g_queues_mutex);
  auto& slot = g_queues[stream.device_index()][stream.id()];
  if (slot.load() == nullptr) {
    slot.store(new StreamQueue(), std::memory_order_release); // never freed
  }
  return *slot.load();
}

} // namespace

GilReleasedWhileWaiting::GilReleasedWhileWaiting() {
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
    thread_state_ = PyEval_SaveThread();
  }
}

GilReleasedWhileWaiting::~GilReleasedWhileWaiting() {
  if (thread_state_ != nullptr) {
    PyEval_RestoreThread(static_cast<PyThreadState*>(thread_state_));
  }
}

bool async_enabled() {
  static const bool enabled = read_async_enabled();
  return enabled;
}

void enqueue_on_stream(const c10::Stream& stream, std::function<void()> work) {
  TORCH_INTERNAL_ASSERT(async_enabled());
  queue_of(stream).enqueue(std::move(work));
}

bool stream_idle(const c10::Stream& stream) {
  auto* queue = find_queue(stream);
  return queue == nullptr || queue->idle();
}

void drain_stream(const c10::Stream& stream) {
  if (auto* queue = find_queue(stream)) {
    queue->drain();
  }
}

void drain_device(c10::DeviceIndex device) {
  for (int id = 0; id < kMaxStreamIds; ++id) {
    if (auto* queue = g_queues[device][id].load(std::memory_order_acquire)) {
      queue->drain();
    }
  }
}

void drain_current_stream(c10::DeviceIndex device) {
  if (async_enabled()) {
    drain_stream(current_stream(resolve_device_index(device)));
  }
}

} // namespace neuron
