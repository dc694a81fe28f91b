// The PrivateUse1 hooks: how ATen's device-generic code (torch.accelerator,
// pinned memory, generators, storage resizing) reaches the neuron runtime.
#include "NeuronGenerator.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <cstring>

namespace neuron {
namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  void init() const override {
    lazy_init();
  }

  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count_noexcept() > 0;
  }

  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    check_device_index(device_index);
    return is_initialized();
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count_noexcept();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const auto previous = current_device();
    if (device != previous) {
      set_device(device);
    }
    return previous;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned_ptr(data);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return host_allocator();
  }

  c10::Device getDeviceFromPtr(void* /*data*/) const override {
    // Device memory is host memory: a pointer alone does not say which
    // NeuronCore owns it. The current device is the only sound answer for
    // code that builds tensors over external pointers (torch.from_blob).
    return c10::Device(kDeviceType, current_device());
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    // Asynchronous mode: work queued on any stream may still read or write
    // the old bytes through host views, which would outlive the memory freed
    // here (FSDP2 frees and regrows parameters this way between layers).
    if (async_enabled()) {
      drain_device(impl->device().index());
    }
    c10::DataPtr fresh = allocate_device_memory(impl->device().index(), new_bytes);
    const size_t kept = std::min(new_bytes, impl->nbytes());
    if (kept > 0) {
      NEURON_DRIVER_CHECK(ndrvMemcpy(fresh.get(), impl->data(), kept, ndrvMemcpyDeviceToDevice));
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }

};

struct RegisterHooks {
  RegisterHooks() {
    static NeuronHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
RegisterHooks g_register_hooks;

} // namespace
} // namespace neuron
