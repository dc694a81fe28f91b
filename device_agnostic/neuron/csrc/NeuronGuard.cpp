// The device guard: how c10 (DeviceGuard, StreamGuard, torch.accelerator,
// torch.Stream/torch.Event) switches devices and streams on neuron.
#include "NeuronStream.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace neuron {
namespace {

void check_device_type(const c10::Device& device) {
  TORCH_CHECK(device.type() == kDeviceType, "Expected a neuron device, but got ", device, ".");
}

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kDeviceType;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    check_device_type(device);
    const auto previous = current_device();
    if (device.index() != previous) {
      set_device(device.index());
    }
    return c10::Device(kDeviceType, previous);
  }

  c10::Device getDevice() const override {
    return c10::Device(kDeviceType, current_device());
  }

  void setDevice(c10::Device device) const override {
    check_device_type(device);
    set_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      set_device(device.index());
    } catch (...) {
      // Restoring a device that was valid when saved cannot fail; never throw
      // from a destructor path.
    }
  }

  c10::Stream getStream(c10::Device device) const override {
    return current_stream(device.index());
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(device.index());
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override {
    return stream_from_pool(device.index(), high_priority ? kHighestPriority : kLowestPriority);
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return stream_from_pool(device.index(), priority);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return exchange_stream(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count_noexcept();
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    resolve_device_index(device.index());
    c10::DeviceCapability capability;
    capability.capability_data.supported_scalar_types.has_Double = 0;
    capability.capability_data.supported_scalar_types.has_ComplexDouble = 0;
    return capability;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    record_event(event, stream, device_index, flag);
  }

  void block(void* event, const c10::Stream& stream) const override {
    block_on_event(event, stream);
  }

  bool queryEvent(void* event) const override {
    return query_event(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    destroy_event(event);
  }

  bool queryStream(const c10::Stream& stream) const override {
    check_stream(stream);
    return stream_idle(stream); // always idle in synchronous mode (NeuronStream.h)
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    check_stream(stream);
    drain_stream(stream);
  }

  void synchronizeEvent(void* event) const override {
    synchronize_event(event);
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    drain_device(resolve_device_index(device_index));
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    return event_elapsed_ms(start, end);
  }
};

} // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

} // namespace neuron
