// Devices, the current device, lazy initialization and fork safety, over the
// driver (driver/neuron_driver.h); driver errors become torch errors here.
#include "NeuronRuntime.h"

#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <string>

namespace neuron {
namespace {

constexpr const char* kVisibleCoresEnv = "NEURON_RT_VISIBLE_CORES";
// cudaErrorInvalidDevice's value, which ndrvErrorInvalidDevice shares: the
// error code an AcceleratorError for an invalid device ordinal carries.
static_assert(ndrvErrorInvalidDevice == 101);

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_in_bad_fork{false};
std::once_flag g_atfork_once;

// Like CUDA: a child forked after initialization cannot use the device.
void on_fork_child() {
  if (g_initialized.load()) {
    g_in_bad_fork.store(true);
  }
  g_initialized.store(false);
}

} // namespace

c10::DeviceIndex device_count() {
  int count = 0;
  const auto error = ndrvGetDeviceCount(&count);
  // A malformed NEURON_RT_VISIBLE_CORES: the driver's detail says how to fix it.
  TORCH_CHECK(error == ndrvSuccess, ndrvGetLastErrorDetail());
  return static_cast<c10::DeviceIndex>(count);
}

c10::DeviceIndex device_count_noexcept() noexcept {
  int count = 0;
  return ndrvGetDeviceCount(&count) == ndrvSuccess ? static_cast<c10::DeviceIndex>(count) : 0;
}

void check_device_index(c10::DeviceIndex index) {
  const auto count = device_count();
  if (index >= 0 && index < count) {
    return;
  }
  // An AcceleratorError (a RuntimeError in Python), as CUDA raises for an
  // invalid ordinal: code written `except RuntimeError` must catch ours too.
  throw c10::AcceleratorError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, ndrvErrorInvalidDevice,
      c10::str("Invalid neuron device index ", static_cast<int>(index), ": this process has ",
               static_cast<int>(count), " neuron device(s), so the index must be in [0, ",
               static_cast<int>(count), "). Set ", kVisibleCoresEnv,
               " (e.g. \"0-3\") to expose more NeuronCores."));
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index == -1) {
    return current_device();
  }
  check_device_index(index);
  return index;
}

c10::DeviceIndex current_device() {
  int device = 0;
  ndrvGetDevice(&device); // cannot fail
  return static_cast<c10::DeviceIndex>(device);
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  if (index != current_device()) {
    lazy_init();
  }
  NEURON_DRIVER_CHECK(ndrvSetDevice(index));
}

void lazy_init() {
  if (g_initialized.load(std::memory_order_acquire)) {
    return;
  }
  TORCH_CHECK(
      !g_in_bad_fork.load(),
      "Cannot re-initialize neuron in forked subprocess. To use neuron with "
      "multiprocessing, you must use the 'spawn' start method "
      "(multiprocessing.set_start_method('spawn')).");
  device_count(); // a malformed environment fails here, loudly
  std::call_once(g_atfork_once, [] {
    pthread_atfork(nullptr, nullptr, &on_fork_child);
  });
  g_initialized.store(true, std::memory_order_release);
}

bool is_initialized() {
  return g_initialized.load();
}

bool is_in_bad_fork() {
  return g_in_bad_fork.load();
}

size_t device_memory_capacity() {
  ndrvDeviceProp properties;
  NEURON_DRIVER_CHECK(ndrvGetDeviceProperties(&properties, 0));
  return properties.totalGlobalMem;
}

DriverDeviceScope::DriverDeviceScope(c10::DeviceIndex device) {
  ndrvGetDevice(&previous_);
  if (previous_ != device) {
    NEURON_DRIVER_CHECK(ndrvSetDevice(device));
    changed_ = true;
  }
}

DriverDeviceScope::~DriverDeviceScope() {
  if (changed_) {
    ndrvSetDevice(previous_); // was current before, so it is valid
  }
}

void throw_driver_error(ndrvError_t error, const char* call) {
  const std::string detail = ndrvGetLastErrorDetail();
  switch (error) {
    case ndrvErrorInvalidDevice:
      throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, error,
                                  c10::str("neuron: ", call, ": ", ndrvGetErrorString(error),
                                           " (", detail, ")."));
    case ndrvErrorMemoryAllocation:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron: ", call, ": ",
                       ndrvGetErrorString(error), " (", detail, ").");
    case ndrvErrorInitializationError:
      // A malformed setting: the detail names it and the fix, and is the message.
      TORCH_CHECK(false, detail);
    default:
      TORCH_CHECK(false, "neuron: ", call, " failed: ", ndrvGetErrorString(error), " (code ",
                  static_cast<int>(error), detail.empty() ? "" : ": ", detail, ").");
  }
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  std::ostringstream out;
  out.precision(unit == 0 ? 0 : 2);
  out << std::fixed << value << " " << units[unit];
  return out.str();
}

bool is_supported_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Double:
    case c10::ScalarType::ComplexDouble:
      return false;
    default:
      return !c10::isQIntType(dtype);
  }
}

void check_supported_dtype(c10::ScalarType dtype) {
  if (is_supported_dtype(dtype)) {
    return;
  }
  check_not_quantized(dtype);
  // Python's names, since that is what users write.
  const bool complex = dtype == c10::ScalarType::ComplexDouble;
  const char* name = complex ? "torch.complex128" : "torch.float64";
  TORCH_CHECK_TYPE(false, "Cannot create or move a ", name,
                   " tensor to neuron: the NeuronCore does not support ", name, ". Please use ",
                   complex ? "torch.complex64" : "torch.float32", " instead.");
}

void check_not_quantized(c10::ScalarType dtype) {
  if (!c10::isQIntType(dtype)) {
    return;
  }
  const auto name = std::string(c10::getDtypeNames(dtype).first);
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "Cannot create or move a quantized tensor (torch.", name,
      ") to neuron: the neuron backend has no quantized kernels. Dequantize it first "
      "(tensor.dequantize()) and move the float tensor, or keep quantized tensors on the CPU.");
}

} // namespace neuron
