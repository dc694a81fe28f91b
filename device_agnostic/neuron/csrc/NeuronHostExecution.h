// Host execution: every ATen operator without a neuron kernel runs the CPU
// kernel directly on device memory (NeuronCore memory is host memory here).
#pragma once

#include "NeuronRuntime.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>

namespace neuron {

// Which neuron device one call's tensor arguments are on, and whether one is
// on another device. CUDA's rule and message: every tensor on one device,
// except the CPU tensors an argument may take (0-dim inputs, index tensors).
// Shared by the fallback and the direct kernels, so both raise alike.
class DeviceAgreement {
 public:
  // `cpu_allowed`: a CPU tensor may be this argument.
  void note(c10::Device device, bool cpu_allowed) {
    if (device.type() == kDeviceType) {
      if (index_ < 0) {
        index_ = device.index();
      } else if (device.index() != index_) {
        mismatch_ = device;
      }
    } else if (!(device.is_cpu() && cpu_allowed)) {
      mismatch_ = device;
    }
  }

  // Whether a neuron tensor argument named the device.
  bool found() const {
    return index_ >= 0;
  }

  // The device the call runs on (the arguments', else `otherwise`); raises
  // "Expected all tensors to be on the same device" naming the operator
  // (`op`, streamed into the message) if two devices met.
  template <class... Op>
  c10::DeviceIndex settle(c10::DeviceIndex otherwise, const Op&... op) const {
    const c10::DeviceIndex index = index_ >= 0 ? index_ : otherwise;
    TORCH_CHECK(!mismatch_.has_value(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                c10::Device(kDeviceType, index), " and ", *mismatch_,
                "! (when checking arguments for ", op..., ")");
    return index;
  }

 private:
  c10::DeviceIndex index_ = -1;
  std::optional<c10::Device> mismatch_;
};

// A CPU tensor over the same bytes as the neuron tensor `tensor`: same
// sizes, strides, offset, dtype, conj and neg bits. No copy.
at::Tensor host_view(const at::Tensor& tensor);

// Routes structured operators straight to their CPU kernels (see the .cpp).
// Called once, when the Python module loads, after all kernels registered.
void register_host_execution_for_structured_ops();

// How many operators host execution holds cached schema facts for: each
// operator run once, less those deregistered since (used by the tests).
size_t host_execution_cached_operators();

// Registers the direct kernels (NeuronDirectKernels.cpp) unless
// NEURON_DIRECT_KERNELS=0. Called once, when the Python module loads, before
// register_host_execution_for_structured_ops (which skips operators that
// already have a neuron kernel).
void register_direct_kernels();

// How many calls the direct kernels have run themselves on this thread (not
// those handed to the fallback in asynchronous mode; used by the tests).
uint64_t& thread_direct_kernel_calls();

// The boxed fallback itself: every operator without a neuron kernel, and
// the direct kernels (NeuronDirectKernels.cpp) for the calls they leave to it.
void host_execution_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// convolution_overrideable, boxed: aten::convolution by host execution
// (registered by register_direct_kernels when the direct kernels are off).
void convolution_overrideable_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The memory format of a neuron convolution's result (and of its input and
// weight gradients): the one torch predicts for a PrivateUse1 convolution
// (at::native::_determine_backend_memory_format for ConvBackend::Overrideable,
// which FakeTensor's convolution uses, so what torch.compile's generated code
// asserts), contiguous in torch 2.13. The CPU's kernels return channels-last
// for a channels-last input or weight; the result is converted (one copy)
// where they differ.
at::MemoryFormat convolution_memory_format(const at::Tensor& input, const at::Tensor& weight);

// How many calls the boxed fallback has run on this thread (used by the
// tests to tell which path an operator took).
uint64_t& thread_boxed_fallback_calls();

// The pieces of host execution the direct kernels share (NeuronDirectKernels.cpp).
// A CPU storage over a neuron storage's bytes, resizable through the
// host-execution allocator; and a CPU tensor with `tensor`'s geometry over it.
c10::Storage host_storage_of(c10::StorageImpl* device_storage);
at::Tensor host_view_over(const at::Tensor& tensor, c10::Storage host_storage);
// A neuron tensor with `host`'s geometry over `device_storage` (a result
// aliasing an input).
at::Tensor device_tensor_over(const at::Tensor& host, c10::Storage device_storage);
// A kernel's fresh result (aliasing no input), made a neuron tensor of
// `device` without a copy when it lies in device memory; retagged in place
// when `host` is its only reference. Raises for results neuron cannot hold.
at::Tensor fresh_result_to_device(at::Tensor&& host, c10::DeviceIndex device, const char* name,
                                  const char* overload_name);

} // namespace neuron
