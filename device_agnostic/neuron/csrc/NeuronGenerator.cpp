// A neuron generator owns a CPU engine (mt19937, the engine of torch's CPU
// generator): host execution runs CPU kernels, which accept
// only CPU generators, so each neuron generator hands them its own engine.
// Seeds and states therefore mean on neuron what they mean on CPU, and each
// device's stream of numbers is independent of every other device's.
#include "NeuronGenerator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <vector>

namespace neuron {
namespace {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  NeuronGeneratorImpl(c10::DeviceIndex device, at::Generator engine)
      : c10::GeneratorImpl(c10::Device(kDeviceType, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        engine_(std::move(engine)) {}

  NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
      : NeuronGeneratorImpl(device, at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(engine_.unsafeGetGeneratorImpl()->mutex_);
    engine_.set_current_seed(seed);
  }

  uint64_t current_seed() const override {
    return engine_.current_seed();
  }

  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(engine_.unsafeGetGeneratorImpl()->mutex_);
    return engine_.seed();
  }

  void set_offset(uint64_t offset) override {
    std::lock_guard<std::mutex> lock(engine_.unsafeGetGeneratorImpl()->mutex_);
    engine_.set_offset(offset);
  }

  uint64_t get_offset() const override {
    return engine_.get_offset();
  }

  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK_TYPE(
        new_state.device().is_cpu() && new_state.dtype() == at::kByte,
        "A neuron RNG state must be a torch.ByteTensor on the CPU (as returned by "
        "torch.neuron.get_rng_state()), but got a tensor of dtype ",
        new_state.dtype(), " on ", new_state.device(), ".");
    std::lock_guard<std::mutex> lock(engine_.unsafeGetGeneratorImpl()->mutex_);
    engine_.unsafeGetGeneratorImpl()->set_state(new_state);
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(engine_.unsafeGetGeneratorImpl()->mutex_);
    return engine_.unsafeGetGeneratorImpl()->get_state();
  }

  static c10::DeviceType device_type() {
    return kDeviceType;
  }

  const at::Generator& engine() const {
    return engine_;
  }

 private:
  NeuronGeneratorImpl* clone_impl() const override {
    std::lock_guard<std::mutex> lock(engine_.unsafeGetGeneratorImpl()->mutex_);
    return new NeuronGeneratorImpl(device().index(), engine_.clone());
  }

  at::Generator engine_;
};

std::once_flag g_defaults_once;
std::vector<at::Generator> g_default_generators;

} // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  device = resolve_device_index(device);
  std::call_once(g_defaults_once, [] {
    const auto count = device_count();
    for (c10::DeviceIndex i = 0; i < count; ++i) {
      g_default_generators.push_back(
          at::make_generator<NeuronGeneratorImpl>(i, c10::default_rng_seed_val));
    }
  });
  return g_default_generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  device = resolve_device_index(device);
  return at::make_generator<NeuronGeneratorImpl>(device, c10::default_rng_seed_val);
}

at::Generator host_engine(const std::optional<at::Generator>& generator,
                          c10::DeviceIndex device) {
  if (!generator.has_value() || !generator->defined()) {
    return default_generator(device).get<NeuronGeneratorImpl>()->engine();
  }
  TORCH_CHECK(generator->device().type() == kDeviceType,
              "Expected a 'neuron' device type for generator but found '",
              generator->device().type(), "'");
  TORCH_CHECK(generator->device().index() == device, "Expected a generator of neuron:",
              static_cast<int>(device), " but got one of ", generator->device(), ".");
  return generator->get<NeuronGeneratorImpl>()->engine();
}

} // namespace neuron
