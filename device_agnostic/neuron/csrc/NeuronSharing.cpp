// Storages shared between processes: the torch side of torch.multiprocessing
// for neuron (the Python side is multiprocessing.py).
//
// CUDA shares any device allocation through an IPC handle. Neuron's device
// memory comes from a caching allocator whose segments another process cannot
// map, so sharing works as the CPU's does: share_memory_() (or putting a
// tensor on a torch.multiprocessing queue) moves the storage's bytes into a
// shareable allocation of the driver (driver/neuron_driver_ipc.h), keeping the
// storage object, its device and every tensor viewing it. The receiving
// process maps that allocation from its handle and wraps it as a storage on
// the same device index. Each process's mapping is its storage's DataPtr;
// freeing the storage unmaps it, and the memory lives until the last process
// lets go (the handle keeps it alive, not the producer, unlike CUDA IPC).
//
// A shared storage is not resizable, as the CPU's shared storages. Shared
// allocations are outside the caching allocator: they do not count in
// torch.neuron.memory_allocated() or against NEURON_DEVICE_MEMORY.
#include "NeuronRuntime.h"
#include "driver/neuron_driver_ipc.h"

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <mutex>
#include <tuple>
#include <utility>

namespace py = pybind11;

namespace neuron {
namespace {

// One process's mapping of a shared allocation: the DataPtr's context.
struct SharedMapping {
  void* ptr;
  size_t size;
  int handle; // owned: closed with the mapping
};

void free_shared_mapping(void* context) {
  auto* mapping = static_cast<SharedMapping*>(context);
  // Nothing to report to at this point (a DataPtr's deleter cannot throw):
  // a failed unmap leaks the mapping, as a failed free would.
  ndrvFreeShared(mapping->ptr, mapping->size, mapping->handle);
  delete mapping;
}

void check_driver(ndrvError_t error, const char* call, size_t nbytes) {
  TORCH_CHECK(error == ndrvSuccess, "neuron: ", call, " of ", format_bytes(nbytes),
              " of shared device memory failed: ", ndrvGetErrorString(error), " (",
              ndrvGetLastErrorDetail(), ")",
              ". Sharing neuron tensors between processes needs shared memory (on Linux, "
              "/dev/shm or memfd); clone() the tensor to keep it in this process only.");
}

c10::DataPtr shared_data_ptr(void* ptr, size_t nbytes, int handle, c10::DeviceIndex device) {
  auto* mapping = new SharedMapping{ptr, nbytes, handle};
  return {ptr, mapping, &free_shared_mapping, c10::Device(kDeviceType, device)};
}

SharedMapping* shared_mapping_of(const c10::Storage& storage) {
  return storage.data_ptr().cast_context<SharedMapping>(&free_shared_mapping);
}

c10::Storage storage_of(const at::Tensor& carrier) {
  TORCH_CHECK(carrier.device().type() == kDeviceType,
              "neuron sharing: expected a tensor over a neuron storage, got one on ",
              carrier.device());
  return carrier.storage();
}

// Serialises moving storages into shared memory: two threads sharing the
// same storage at once must not both copy it (torch's CPU path has the same
// lock, in torch/storage.py).
std::mutex g_share_mutex;

// Moves the storage's bytes into a shared allocation (once: a no-op for a
// storage already shared, or an empty one, which has nothing to map).
void share_storage(const at::Tensor& carrier) {
  c10::Storage storage = storage_of(carrier);
  std::lock_guard<std::mutex> lock(g_share_mutex);
  const size_t nbytes = storage.nbytes();
  if (nbytes == 0 || shared_mapping_of(storage) != nullptr) {
    return;
  }
  const c10::DeviceIndex device = carrier.device().index();
  // Asynchronous mode: the queued work that writes these bytes runs first.
  if (async_enabled()) {
    drain_device(device);
  }
  void* ptr = nullptr;
  int handle = -1;
  check_driver(ndrvMallocShared(nbytes, &ptr, &handle), "allocating", nbytes);
  std::memcpy(ptr, storage.data(), nbytes);
  // The old device block goes back to the caching allocator when the
  // returned DataPtr dies at the end of this statement.
  storage.unsafeGetStorageImpl()->set_data_ptr(shared_data_ptr(ptr, nbytes, handle, device));
  storage.unsafeGetStorageImpl()->set_resizable(false);
}

bool is_shared(const at::Tensor& carrier) {
  return shared_mapping_of(storage_of(carrier)) != nullptr;
}

// The handle and size to send to another process, sharing the storage first.
// The handle stays owned by the storage: the sender duplicates it.
std::tuple<int, size_t> shared_handle(const at::Tensor& carrier) {
  share_storage(carrier);
  const c10::Storage storage = storage_of(carrier);
  auto* mapping = shared_mapping_of(storage);
  TORCH_CHECK(mapping != nullptr, "neuron sharing: an empty storage has no shared handle");
  return {mapping->handle, mapping->size};
}

// A uint8 neuron tensor over a storage of `nbytes` mapping the shared
// allocation behind `handle`, on `device`. Takes ownership of `handle` (it is
// closed with the mapping, or at once if mapping fails).
at::Tensor open_shared(int handle, size_t nbytes, int device_index) {
  const auto device = static_cast<c10::DeviceIndex>(device_index);
  void* ptr = nullptr;
  try {
    check_device_index(device);
    lazy_init();
    check_driver(ndrvOpenShared(handle, nbytes, &ptr), "mapping", nbytes);
  } catch (...) {
    ndrvFreeShared(nullptr, 0, handle);
    throw;
  }
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, shared_data_ptr(ptr, nbytes, handle, device),
      device_allocator(), /*resizable=*/false));
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::Make<uint8_t>());
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous({static_cast<int64_t>(nbytes)});
  return tensor;
}

} // namespace

void register_sharing_bindings(py::module_& m) {
  m.def("_share_storage", &share_storage, py::arg("carrier"),
        py::call_guard<py::gil_scoped_release>(),
        "Move the neuron storage under `carrier` into shared device memory (once).");
  m.def("_is_shared_storage", &is_shared, py::arg("carrier"),
        "Whether the neuron storage under `carrier` is in shared device memory.");
  m.def("_shared_storage_handle", &shared_handle, py::arg("carrier"),
        py::call_guard<py::gil_scoped_release>(),
        "(handle, nbytes) of the neuron storage under `carrier`, moved to shared memory first; "
        "the handle (a file descriptor) stays owned by the storage.");
  m.def("_open_shared_storage", &open_shared, py::arg("handle"), py::arg("nbytes"),
        py::arg("device"),
        "A uint8 neuron tensor over the shared allocation behind `handle` (a file descriptor "
        "this call takes ownership of), on neuron:`device`.");
}

} // namespace neuron
