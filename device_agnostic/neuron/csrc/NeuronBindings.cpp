// The Python module device_agnostic.neuron._C: the runtime calls that
// torch's generic APIs do not already expose. Everything else reaches neuron
// through torch (torch.accelerator, torch.Stream, torch.Event, ...).
#include "NeuronGenerator.h"
#include "NeuronHostExecution.h"
#include "NeuronProcessGroup.h"
#include "NeuronStream.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace neuron {
namespace {

// Allocates and frees device memory from `threads` native threads while the
// caller keeps holding the GIL: it returns only if allocation never needs
// the GIL. Used by the tests.
int64_t allocate_from_native_threads(int device, int64_t nbytes, int threads, int iterations) {
  std::atomic<int64_t> done{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < iterations; ++i) {
        auto data = allocate_device_memory(static_cast<c10::DeviceIndex>(device),
                                           static_cast<size_t>(nbytes) * (1 + i % 3));
        done.fetch_add(data.get() != nullptr ? 1 : 0);
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  return done.load();
}

} // namespace

// NeuronSharing.cpp: storages shared between processes.
void register_sharing_bindings(py::module_& m);

} // namespace neuron

PYBIND11_MODULE(_C, m) {
  using namespace neuron;
  m.doc() = "The neuron runtime (an AWS NeuronCore emulated on host memory).";
  register_direct_kernels();
  register_host_execution_for_structured_ops();
  m.def("_device_count", [] { return static_cast<int>(device_count()); },
        "Number of visible NeuronCores (NEURON_RT_VISIBLE_CORES); raises on a malformed value.");
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int index) { set_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("_lazy_init", &lazy_init);
  m.def("_is_initialized", &is_initialized);
  m.def("_is_in_bad_fork", &is_in_bad_fork);
  m.def("_device_memory_capacity", &device_memory_capacity);
  m.def("_default_generator", [](int index) {
    const auto& generator = default_generator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(generator));
  });
  m.def("_stream_priority", [](int device, int64_t stream_id) {
    return stream_priority(c10::Stream(c10::Stream::UNSAFE,
                                       c10::Device(kDeviceType, static_cast<c10::DeviceIndex>(device)),
                                       stream_id));
  });
  m.def("_allocate_from_native_threads", &allocate_from_native_threads);
  m.def("_driver_error_string", [](int code) {
    return std::string(ndrvGetErrorString(static_cast<ndrvError_t>(code)));
  }, "The driver's description of an ndrvError_t code (used by the tests).");
  m.def("_raise_driver_error", [](int code) {
    throw_driver_error(static_cast<ndrvError_t>(code), "_raise_driver_error");
  }, "Raise the torch error a failed driver call with this code becomes (used by the tests).");
  m.def("_driver_pointer_attributes", [](uintptr_t address) {
    ndrvPointerAttributes attributes;
    NEURON_DRIVER_CHECK(
        ndrvPointerGetAttributes(&attributes, reinterpret_cast<const void*>(address)));
    const char* type = attributes.type == ndrvMemoryTypeDevice ? "device"
        : attributes.type == ndrvMemoryTypeHost                ? "host"
                                                               : "unregistered";
    return py::make_tuple(type, attributes.device, reinterpret_cast<uintptr_t>(attributes.base),
                          attributes.size);
  }, "What the driver knows of an address: (type, device, allocation base, allocation size).");
  m.def("_host_execution_cached_operators", &host_execution_cached_operators,
        "How many operators' schema facts host execution holds (used by the tests).");
  m.def("_direct_kernel_calls", [] { return thread_direct_kernel_calls(); },
        "How many calls the direct kernels ran on this thread (used by the tests).");
  m.def("_boxed_fallback_calls", [] { return thread_boxed_fallback_calls(); },
        "How many calls the boxed fallback ran on this thread (used by the tests).");
  m.def("_async_enabled", &async_enabled,
        "Whether work runs asynchronously on per-stream workers (NEURON_LAUNCH_BLOCKING=0).");
  m.def("_empty_strided", &empty_strided_on_current_device, py::arg("size"), py::arg("stride"),
        py::arg("dtype"),
        "empty_strided on the current neuron device, without the dispatcher (inductor's buffers)");
  m.def("_drain_current_stream", [](int device) {
    drain_current_stream(static_cast<c10::DeviceIndex>(device));
  }, py::arg("device") = -1, py::call_guard<py::gil_scoped_release>(),
        // Without the GIL: queued work may need it (e.g. to free a tensor's Python object).
        "Wait for the work queued on `device`'s current stream (asynchronous mode; a no-op "
        "otherwise). Compiled kernels call it before reading device memory on the host.");
  // Takes and returns torch._C._distributed_c10d.Backend objects: call only
  // after torch.distributed is imported (it registers that Python type).
  m.def("_make_process_group", &make_process_group, py::arg("host_backend"),
        "The neuron process-group backend over `host_backend` (a ProcessGroupGloo).");
  m.def("_process_group_host_alias", &process_group_host_alias,
        "The CPU tensor aliasing a neuron tensor's bytes that the process group hands gloo.");
  register_sharing_bindings(m);
}
