// Random number generators: one default generator per device, plus the
// generators users create with torch.Generator(device="neuron").
#pragma once

#include "NeuronRuntime.h"

#include <ATen/core/Generator.h>

#include <optional>

namespace neuron {

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The CPU engine that draws a neuron generator's numbers when a CPU kernel
// runs on device memory: `generator` if given (it must be a neuron generator
// of `device`), else `device`'s default generator.
at::Generator host_engine(const std::optional<at::Generator>& generator,
                          c10::DeviceIndex device);

} // namespace neuron
