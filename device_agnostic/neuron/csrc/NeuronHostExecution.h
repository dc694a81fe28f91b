// Host execution: every ATen operator without a neuron kernel runs the CPU
// kernel directly on device memory (NeuronCore memory is host memory here).
#pragma once

#include "NeuronRuntime.h"

#include <ATen/core/Tensor.h>

namespace neuron {

// A CPU tensor over the same bytes as the neuron tensor `tensor`: same
// sizes, strides, offset, dtype, conj and neg bits. No copy.
at::Tensor host_view(const at::Tensor& tensor);

// Routes structured operators straight to their CPU kernels (see the .cpp).
// Called once, when the Python module loads, after all kernels registered.
void register_host_execution_for_structured_ops();

// How many operators host execution holds cached schema facts for: each
// operator run once, less those deregistered since (used by the tests).
size_t host_execution_cached_operators();

} // namespace neuron
