// Asynchronous execution (opt-in: NEURON_LAUNCH_BLOCKING=0).
//
// By default (NEURON_LAUNCH_BLOCKING unset or 1) every operation runs to
// completion on the thread that issues it and nothing here is used.
//
// In asynchronous mode host execution launches each kernel on its stream's
// driver stream (ndrvLaunchHostFunc, driver/stream.cpp): the driver runs a
// stream's work one at a time, in launch order, and two streams' work
// concurrently. Draining a stream waits (ndrvStreamSynchronize) for the work
// launched before the drain, not for work launched later.
//
// A kernel's closure is destroyed, on the driver's worker, before the driver
// counts it as completed: the storages it holds (which keep device memory
// alive while work is pending) are released before any drain returns, so
// memory freed by a drained stream is back in the allocator, and memory still
// used by pending work is never freed (stricter than CUDA's record_stream: no
// block is reused while any launched closure references it).
//
// A closure that throws does not stop the stream: the first error is kept
// and rethrown by the next drain of that stream (like CUDA's asynchronous
// error reporting at the next synchronizing call). The driver is C and never
// sees the exception: the trampoline below catches it.
#include "NeuronStream.h"

#include <Python.h>

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>

namespace neuron {
namespace {

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

// What a launch carries to the driver's worker: the closure, and where to
// keep the error it raises.
struct Launch {
  std::function<void()> work;
  DriverStream* stream;
};

void run_launch(void* data) {
  std::unique_ptr<Launch> launch(static_cast<Launch*>(data));
  std::exception_ptr error;
  try {
    launch->work();
  } catch (...) {
    error = std::current_exception();
  }
  DriverStream* stream = launch->stream;
  launch.reset(); // release the storages it holds before the driver counts it done
  if (error) {
    std::lock_guard<std::mutex> lock(stream->error_mutex);
    if (!stream->error) {
      stream->error = error;
    }
  }
}

// Rethrows (and forgets) the first error raised by work on `stream`.
void rethrow_error(DriverStream& stream) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(stream.error_mutex);
    std::swap(error, stream.error);
  }
  if (error) {
    std::rethrow_exception(error);
  }
}

void drain(DriverStream& stream) {
  {
    GilReleasedWhileWaiting no_gil;
    NEURON_DRIVER_CHECK(ndrvStreamSynchronize(stream.handle));
  }
  rethrow_error(stream);
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
  DriverStream& target = driver_stream(stream);
  auto launch = std::make_unique<Launch>(Launch{std::move(work), &target});
  NEURON_DRIVER_CHECK(ndrvLaunchHostFunc(target.handle, &run_launch, launch.get()));
  launch.release(); // run_launch owns it now
}

bool stream_idle(const c10::Stream& stream) {
  auto* target = find_driver_stream(stream.device_index(), stream.id());
  if (target == nullptr) {
    return true;
  }
  const ndrvError_t error = ndrvStreamQuery(target->handle);
  if (error == ndrvErrorNotReady) {
    return false;
  }
  NEURON_DRIVER_CHECK(error);
  return true;
}

void drain_stream(const c10::Stream& stream) {
  if (auto* target = find_driver_stream(stream.device_index(), stream.id())) {
    drain(*target);
  }
}

void drain_device(c10::DeviceIndex device) {
  bool any = false;
  for (int id = 0; id <= kMaxStreamId && !any; ++id) {
    any = find_driver_stream(device, id) != nullptr;
  }
  if (!any) {
    return; // no stream of the device was ever used
  }
  {
    GilReleasedWhileWaiting no_gil;
    DriverDeviceScope on_device(device);
    NEURON_DRIVER_CHECK(ndrvDeviceSynchronize());
  }
  for (int id = 0; id <= kMaxStreamId; ++id) {
    if (auto* target = find_driver_stream(device, id)) {
      rethrow_error(*target);
    }
  }
}

void drain_current_stream(c10::DeviceIndex device) {
  if (async_enabled()) {
    drain_stream(current_stream(resolve_device_index(device)));
  }
}

} // namespace neuron
