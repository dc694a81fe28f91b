// The neuron runtime: the torch integration's index.
//
// "neuron" emulates an AWS NeuronCore on host memory. The device itself is
// the driver (driver/neuron_driver.h: devices, memory, copies, streams,
// events, as C calls prefixed ndrv, emulated on host memory and threads in
// driver/*.cpp); it is what a vendor replaces. Everything declared here is
// the integration, which plugs that device into torch and calls only the
// driver for what the device does: device enumeration and the current device
// (NeuronRuntime.cpp, which also turns driver errors into torch errors), the
// caching device memory allocator over ndrvMalloc (NeuronDeviceAllocator.cpp),
// pinned host memory (NeuronHostAllocator.cpp), streams and events over the
// driver's (NeuronStream.cpp), generators (NeuronGenerator.cpp), host
// execution of ATen kernels (NeuronHostExecution.cpp, and unboxed for the hot
// operators in NeuronDirectKernels.cpp) and the profiler's device timing,
// from those events (NeuronProfiler.cpp). The torch.distributed backend, gloo
// over aliases of device memory, is in NeuronProcessGroup.cpp (its own
// header: it needs c10d's). The opt-in asynchronous mode
// (NEURON_LAUNCH_BLOCKING=0: kernels launched on the driver's streams, each
// run by its own worker thread) is in NeuronAsync.cpp.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/util/ArrayRef.h>

#include "driver/neuron_driver.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace at {
class Tensor;
} // namespace at

namespace neuron {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
constexpr const char* kBackendName = "neuron";

// ---- devices (NeuronRuntime.cpp) ------------------------------------------

// Number of visible NeuronCores (the driver reads NEURON_RT_VISIBLE_CORES).
// Throws a c10::Error naming the variable when its value is malformed.
c10::DeviceIndex device_count();
// Same, but 0 on a malformed value: for interfaces that must not throw.
c10::DeviceIndex device_count_noexcept() noexcept;
// Throws a c10::AcceleratorError (torch.AcceleratorError, a RuntimeError)
// when `index` is not a visible device, as CUDA does for an invalid ordinal.
void check_device_index(c10::DeviceIndex index);
// -1 (the "current device" placeholder) becomes the current device.
c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);

// Initializes the runtime on first use; raises in a forked child of an
// initialized parent (the runtime's state cannot be inherited through fork).
void lazy_init();
bool is_initialized();
bool is_in_bad_fork();

// Per-device memory capacity in bytes (the driver's totalGlobalMem).
size_t device_memory_capacity();
// While alive, `device` is the driver's current device on this thread: for the
// driver calls that act on the current device (ndrvMalloc, stream and event
// creation, ndrvDeviceSynchronize) made for a device named explicitly.
class DriverDeviceScope {
 public:
  explicit DriverDeviceScope(c10::DeviceIndex device);
  ~DriverDeviceScope();
  DriverDeviceScope(const DriverDeviceScope&) = delete;
  DriverDeviceScope& operator=(const DriverDeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Raises the torch error for a failed driver call: an invalid device is a
// c10::AcceleratorError (torch.AcceleratorError) carrying the code, memory
// exhaustion an OutOfMemoryError, a malformed setting a c10::Error whose
// message is the driver's detail; anything else a c10::Error naming `call`.
[[noreturn]] void throw_driver_error(ndrvError_t error, const char* call);
#define NEURON_DRIVER_CHECK(expr)                          \
  do {                                                     \
    const ndrvError_t neuron_driver_error_ = (expr);       \
    if (neuron_driver_error_ != ndrvSuccess) {             \
      ::neuron::throw_driver_error(neuron_driver_error_, #expr); \
    }                                                      \
  } while (false)
std::string format_bytes(size_t bytes);

// The dtypes a NeuronCore computes in. float64, complex128 and the quantized
// dtypes are absent.
bool is_supported_dtype(c10::ScalarType dtype);
// Raises TypeError naming the dtype and the device, suggesting float32 (or,
// for a quantized dtype, what check_not_quantized raises).
void check_supported_dtype(c10::ScalarType dtype);
// Raises NotImplementedError for a quantized dtype: neuron has no quantized
// kernels, so a quantized tensor is refused when it would be created on the
// device, naming the fix (dequantize first, or stay on the CPU).
void check_not_quantized(c10::ScalarType dtype);

// ---- device memory (NeuronDeviceAllocator.cpp) ----------------------------

c10::DeviceAllocator* device_allocator();
// Allocates `nbytes` of `device`'s memory, whatever the current device.
c10::DataPtr allocate_device_memory(c10::DeviceIndex device, size_t nbytes);
// Allocates device memory of `device` but tags the DataPtr as CPU memory:
// used while a CPU kernel runs on device memory (see host execution).
c10::DataPtr allocate_for_host_execution(c10::DeviceIndex device, size_t nbytes);
// torch.empty_strided(size, stride, dtype=dtype, device="neuron") without
// the dispatcher (NeuronOps.cpp): the buffers of inductor's generated code
// (compile.py), as torch._C._dynamo.guards._empty_strided_cpu is the CPU's.
at::Tensor empty_strided_on_current_device(c10::IntArrayRef size, c10::IntArrayRef stride,
                                           c10::ScalarType dtype);
// True if the DataPtr is memory of `device` from the neuron device allocator.
bool is_device_allocation(const c10::DataPtr& data_ptr, c10::DeviceIndex device);
// Frees `ptr` if it is a live device block (of any device); false otherwise.
bool free_if_device_memory(void* ptr);

// ---- pinned host memory (NeuronHostAllocator.cpp) --------------------------

c10::Allocator* host_allocator();
bool is_pinned_ptr(const void* ptr);

// ---- host execution (NeuronHostExecution.cpp) -----------------------------

// While alive, CPU allocations on this thread come from `device`'s memory.
class HostExecutionScope {
 public:
  explicit HostExecutionScope(c10::DeviceIndex device);
  ~HostExecutionScope();
  HostExecutionScope(const HostExecutionScope&) = delete;
  HostExecutionScope& operator=(const HostExecutionScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// ---- asynchronous execution (NeuronAsync.cpp) ------------------------------

// True when NEURON_LAUNCH_BLOCKING=0: host execution enqueues kernels on the
// current stream's worker instead of running them. Default: false.
bool async_enabled();
// Appends `work` to `stream`'s queue (async mode only); returns at once.
void enqueue_on_stream(const c10::Stream& stream, std::function<void()> work);
// True when all work enqueued on `stream` has completed.
bool stream_idle(const c10::Stream& stream);
// Wait for the work enqueued so far; rethrow the first error it raised.
void drain_stream(const c10::Stream& stream);
void drain_device(c10::DeviceIndex device);
// Before reading or writing device memory on the issuing thread: waits for
// the current stream of `device` (no-op in synchronous mode).
void drain_current_stream(c10::DeviceIndex device);
// For the lifetime of the scope, releases the GIL if this thread holds it. A
// thread waiting for a stream's worker must not hold it: the worker may need it
// (dropping the last reference to a storage Python has seen), and some callers
// (torch.accelerator.memory_stats, compiled code) wait with the GIL held.
class GilReleasedWhileWaiting {
 public:
  GilReleasedWhileWaiting();
  ~GilReleasedWhileWaiting();
  GilReleasedWhileWaiting(const GilReleasedWhileWaiting&) = delete;
  GilReleasedWhileWaiting& operator=(const GilReleasedWhileWaiting&) = delete;

 private:
  void* thread_state_ = nullptr;
};

} // namespace neuron
