// The operators neuron implements itself: memory (empty, empty_strided,
// resize_, set_), views (as_strided, view, _reshape_alias), copies between
// devices, reading a scalar, stream recording, dropout (whose CPU kernel
// would draw from the CPU generator) and the shallow-copy compatibility that
// lets `module.to("neuron")` keep its Parameters. Everything else runs
// through host execution (NeuronHostExecution.cpp; the hot operators through
// its unboxed form, NeuronDirectKernels.cpp).
#include "NeuronGenerator.h"
#include "NeuronHostExecution.h"
#include "NeuronKinetoPlugin.h"
#include "NeuronStream.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace neuron {
namespace {

constexpr c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);

c10::DeviceIndex target_device(std::optional<c10::Device> device) {
  if (!device.has_value() || device->type() != kDeviceType) {
    return current_device();
  }
  return resolve_device_index(device->index());
}

void check_strided(std::optional<c10::Layout> layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      c10::layout_or_default(layout) == c10::Layout::Strided,
      "neuron supports only strided (dense) tensors, but got layout ", *layout,
      ". Create the tensor on the CPU instead.");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<c10::MemoryFormat> memory_format) {
  const auto scalar_type = c10::dtype_or_default(dtype);
  check_supported_dtype(scalar_type);
  check_strided(layout);
  c10::DeviceGuard guard(c10::Device(kDeviceType, target_device(device)));
  return at::detail::empty_generic(size, device_allocator(), kNeuronKeys, scalar_type,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> /*pin_memory*/) {
  const auto scalar_type = c10::dtype_or_default(dtype);
  check_supported_dtype(scalar_type);
  check_strided(layout);
  c10::DeviceGuard guard(c10::Device(kDeviceType, target_device(device)));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kNeuronKeys,
                                           scalar_type);
}

} // namespace

at::Tensor empty_strided_on_current_device(c10::IntArrayRef size, c10::IntArrayRef stride,
                                           c10::ScalarType dtype) {
  check_supported_dtype(dtype);
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kNeuronKeys, dtype);
}

namespace {

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Growing storage allocates on the tensor's device, not the current one.
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  // Growing copies the old bytes and frees them, which work queued on any
  // stream may still use through host views: wait for the device.
  if (async_enabled()) {
    drain_device(self.device().index());
  }
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return self.set_(std::move(storage), 0, {0}, {});
}

// Both tensors' bytes are host memory: copy through CPU views of them, which
// handles dtype conversion, broadcasting and any strides.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.defined() && dst.defined(), "neuron: copy of an undefined tensor");
  const bool self_on_neuron = self.device().type() == kDeviceType;
  const bool dst_on_neuron = dst.device().type() == kDeviceType;
  TORCH_CHECK((self_on_neuron || self.is_cpu()) && (dst_on_neuron || dst.is_cpu()),
              "neuron can copy to and from the CPU and neuron devices only, but got a copy "
              "from ", self.device(), " to ", dst.device(), ".");
  if (dst_on_neuron) {
    check_supported_dtype(dst.scalar_type());
  }
  if (dst.numel() == 0) {
    return dst;
  }
  note_device_work();
  // Copies run on the issuing thread: in async mode, after the current
  // stream's pending work (a copy to the CPU synchronizes, as on CUDA).
  if (self_on_neuron) {
    drain_current_stream(self.device().index());
  }
  if (dst_on_neuron && !(self_on_neuron && self.device() == dst.device())) {
    drain_current_stream(dst.device().index());
  }
  auto source = self_on_neuron ? host_view(self) : self;
  auto target = dst_on_neuron ? host_view(dst) : dst;
  // Copies complete before returning: non_blocking is satisfied trivially.
  target.copy_(source);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.device().type() == kDeviceType) {
    resize_(dst, self.sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  note_device_work();
  drain_current_stream(self.device().index()); // .item() synchronizes
  return at::_local_scalar_dense(host_view(self));
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  check_stream(stream);
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

// Same semantics as ATen's CPU native_dropout, but the mask is drawn from the
// neuron generator (its CPU kernel would draw from the CPU generator).
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  if (input.numel() == 0) {
    return std::make_tuple(input, at::empty_like(input, input.options()));
  }
  if (train.has_value() && !*train) {
    return std::make_tuple(input.clone(), at::ones_like(input, input.options().dtype(at::kBool)));
  }
  const double keep = 1.0 - p;
  const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  auto mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(keep);
  auto output = input.mul(mask).mul_(scale);
  return std::make_tuple(output, mask);
}

// `param.data = other` swaps `param`'s TensorImpl contents for `other`'s,
// and `Module._apply` does that (keeping the Parameter object, so tied weights
// stay tied and an optimizer built before the move sees the moved data) only
// when this says the two are compatible. Upstream's answer knows the in-tree
// dense backends only. A neuron tensor is a plain TensorImpl over strided
// storage, exactly like a dense CPU one, so the two are compatible both ways.
// Anything else (sparse, quantized, nested, ...) keeps upstream's answer.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto is_dense = [](c10::DispatchKeySet keys) {
    constexpr auto dense_backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
        keys.has_any(dense_backends) &&
        !keys.has_any(c10::DispatchKeySet(
            {c10::DispatchKey::Quantized, c10::DispatchKey::Sparse,
             c10::DispatchKey::SparseCsr, c10::DispatchKey::NestedTensor}));
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
      (is_dense(self.key_set()) && is_dense(from.key_set()));
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("native_dropout", TORCH_FN(native_dropout));
}

// copy_from handles conjugate and negative views itself (the host views carry
// the bits, and the CPU copy_ resolves them). Without these fallthroughs the
// Conjugate/Negative fallbacks would materialize the view first, by a clone,
// whose copy_ comes back to _copy_from: an unbounded recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace neuron
