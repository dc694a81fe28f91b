// The "neuron" process-group backend (NeuronProcessGroup.cpp): gloo moving
// neuron tensors in place, through CPU tensors that alias their bytes.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace neuron {

// A c10d backend that runs every collective of `host` (a CPU backend:
// ProcessGroupGloo) on CPU aliases of the neuron tensors it is given.
c10::intrusive_ptr<c10d::Backend> make_process_group(c10::intrusive_ptr<c10d::Backend> host);

// The CPU alias the process group hands gloo for `tensor` (same bytes; keeps
// the neuron storage alive). Exposed for the tests.
at::Tensor process_group_host_alias(const at::Tensor& tensor);

} // namespace neuron
