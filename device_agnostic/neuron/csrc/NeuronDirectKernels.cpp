// Direct kernels: the hot operators (elementwise arithmetic, reductions,
// matmuls, softmax, the ops of an MLP training step) registered unboxed for
// neuron, so that they skip the boxed fallback (NeuronHostExecution.cpp).
//
// The boxed fallback costs about 0.4 us per operator beyond the CPU kernel.
// A perf profile put most of it in three places this file avoids or shrinks:
//   - boxing the arguments into an IValue stack, and the GIL round trips it
//     causes: with torch's PyObject preservation, a Python-owned TensorImpl
//     whose reference count goes from 1 to 2 (a stack slot) increfs its
//     Python object, and back to 1 decrefs it, each under the GIL, while the
//     operator runs with the GIL released. Here arguments stay references;
//   - the fallback's generic logic (schema facts, walking the stack, alias
//     bookkeeping for out= arguments). Here each kernel knows its signature
//     at compile time;
//   - one host view (a StorageImpl and a TensorImpl) allocated, filled and
//     freed per neuron input. Here a thread keeps a few host views of past
//     calls that nothing else holds any more (ViewPool) and refills one
//     (data pointer, sizes, strides) instead; an argument passed twice
//     (`x * x`) gets one view, as on the CPU, and inputs of one storage
//     share one host storage, as in the fallback.
//
// Each kernel does what the fallback does for the same call, in the same
// order: device checks (CUDA's rule: neuron tensors of one device, plus 0-dim
// CPU tensors as inputs, never as written arguments), host views, the CPU
// kernel (at::cpu::<op>, the function the CPU dispatch key runs) inside a
// HostExecutionScope so that results are born in device memory, results
// retagged as neuron tensors without a copy. Autocast, autograd and the
// ADInplaceOrView keys sit above the backend key, so they are untouched; type
// promotion, broadcasting, type errors and overlap checks are the CPU
// kernel's own. The profiler sees each call as device work (note_device_work).
//
// In asynchronous mode (NEURON_LAUNCH_BLOCKING=0) every direct kernel hands
// its call to the boxed fallback, which defers it to the current stream in
// issue order (or drains the stream and runs it): one deferral mechanism.
//
// NEURON_DIRECT_KERNELS=0 leaves the operators to the boxed fallback (for
// comparisons; read once, when the extension loads).
#include "NeuronHostExecution.h"
#include "NeuronKinetoPlugin.h"

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_log_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_cpu_dispatch.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/fill_cpu_dispatch.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/nll_loss_backward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/relu_cpu_dispatch.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_cpu_dispatch.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/threshold_backward_cpu_dispatch.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/zero_cpu_dispatch.h>
#include <ATen/ops/zero_ops.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace neuron {
namespace {

// The most tensor arguments a direct kernel takes (nll_loss_backward: 5).
constexpr size_t kMaxTensors = 6;

void no_delete(void* /*unused*/) {}

// Host views kept for reuse by this thread's direct kernels. A view returns
// here after a call only when nothing else holds it or its storage (use
// counts of 1: no kernel kept a reference, no Python object exists for it),
// so refilling it cannot change a tensor anyone can see. Views are made and
// reused outside inference mode only, so their dispatch keys are always
// those of a fresh CPU tensor made outside it.
class ViewPool {
 public:
  // A host view of `tensor` (whose storage is `device_storage`) over its own
  // host storage. `reuse`: outside inference mode.
  at::Tensor take(const at::Tensor& tensor, c10::StorageImpl* device_storage, bool reuse) {
    if (!reuse) {
      return host_view_over(tensor, host_storage_of(device_storage));
    }
    // Any view of the dtype will do; one already over these bytes (a loop
    // passing the same tensors call after call) needs only its geometry
    // checked.
    const void* data = device_storage->data();
    size_t pick = free_.size();
    for (size_t i = free_.size(); i-- > 0;) {
      if (free_[i].dtype() != tensor.dtype()) {
        continue;
      }
      pick = i;
      if (free_[i].unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()->data() == data) {
        break;
      }
    }
    if (pick == free_.size()) {
      return host_view_over(tensor, host_storage_of(device_storage));
    }
    at::Tensor view = std::move(free_[pick]);
    free_[pick] = std::move(free_.back());
    free_.pop_back();
    refill(view, tensor, device_storage);
    return view;
  }

  void give_back(at::Tensor&& view, bool reuse) {
    if (reuse && free_.size() < kCapacity && view.use_count() == 1 &&
        view.weak_use_count() == 1 && view.storage().use_count() == 1) {
      free_.push_back(std::move(view));
    }
  }

 private:
  // Points `view` at `tensor`'s bytes with its geometry and bits. A loop
  // calling the same operator on tensors of one shape (the common case)
  // finds the sizes and strides already right, and skips recomputing the
  // contiguity flags.
  static void refill(at::Tensor& view, const at::Tensor& tensor,
                     c10::StorageImpl* device_storage) {
    auto* impl = view.unsafeGetTensorImpl();
    auto* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    void* data = device_storage->mutable_data();
    if (storage->data() != data) {
      storage->set_data_ptr_noswap(
          c10::DataPtr(data, data, &no_delete, c10::Device(c10::DeviceType::CPU)));
    }
    if (storage->nbytes() != device_storage->nbytes()) {
      storage->set_nbytes(device_storage->nbytes());
    }
    if (same(view.sizes(), tensor.sizes()) && same(view.strides(), tensor.strides())) {
      if (view.storage_offset() != tensor.storage_offset()) {
        impl->set_storage_offset(tensor.storage_offset());
      }
    } else {
      impl->set_sizes_and_strides(tensor.sizes(), tensor.strides(), tensor.storage_offset());
    }
    if (view.is_conj() != tensor.is_conj()) {
      impl->_set_conj(tensor.is_conj());
    }
    if (view.is_neg() != tensor.is_neg()) {
      impl->_set_neg(tensor.is_neg());
    }
  }

  // IntArrayRef's operator== calls memcmp, a library call costlier than the
  // comparison of a few sizes it does here.
  static bool same(c10::IntArrayRef a, c10::IntArrayRef b) {
    if (a.size() != b.size()) {
      return false;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) {
        return false;
      }
    }
    return true;
  }

  static constexpr size_t kCapacity = 8;
  std::vector<at::Tensor> free_;
};

// What a thread's direct kernels keep: one thread-local, looked up once per
// call (each thread_local of a shared library costs a __tls_get_addr call).
struct ThreadState {
  uint64_t calls = 0;
  ViewPool pool;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

// One call's tensor arguments: the device they agree on, and their host views.
class DirectCall {
 public:
  explicit DirectCall(ViewPool& pool)
      : pool_(pool), reuse_views_(!c10::InferenceMode::is_enabled()) {}
  DirectCall(const DirectCall&) = delete;
  DirectCall& operator=(const DirectCall&) = delete;
  ~DirectCall() {
    for (size_t i = 0; i < count_; ++i) {
      if (views_[i].pooled) {
        pool_.give_back(std::move(views_[i].view), reuse_views_);
      }
    }
  }

  // A tensor argument; `written` for in-place (self) arguments. CUDA's rule:
  // CPU scalars as inputs only (a result written into a CPU tensor would
  // leave it holding device memory).
  void note(const at::Tensor& tensor, bool written) {
    if (tensor.defined()) {
      agreement_.note(tensor.device(), !written && tensor.dim() == 0);
    }
  }
  void note(const std::optional<at::Tensor>& tensor, bool /*written*/) {
    if (tensor.has_value()) {
      note(*tensor, false);
    }
  }
  template <class T>
  void note(const T& /*value*/, bool /*written*/) {}

  // The same check and message as the fallback's (DeviceAgreement).
  void check(const char* name, const char* overload_name) {
    device_ = agreement_.settle(agreement_.found() ? -1 : current_device(), name,
                                *overload_name != '\0' ? "." : "", overload_name);
  }

  c10::DeviceIndex device() const {
    return device_;
  }

  // What the CPU kernel gets for each argument: a host view for a neuron
  // tensor, anything else unchanged.
  const at::Tensor& host(const at::Tensor& tensor) {
    if (!tensor.defined() || tensor.device().type() != kDeviceType) {
      return tensor;
    }
    return view_of(tensor);
  }
  at::Tensor& host(at::Tensor& tensor) {
    TORCH_INTERNAL_ASSERT(tensor.defined() && tensor.device().type() == kDeviceType);
    return view_of(tensor);
  }
  std::optional<at::Tensor> host(const std::optional<at::Tensor>& tensor) {
    if (!tensor.has_value()) {
      return std::nullopt;
    }
    return host(*tensor);
  }
  template <class T>
  T&& host(T&& value) {
    return std::forward<T>(value);
  }

  // A returned tensor as a neuron tensor: a view of an input's storage maps
  // back to that input's neuron storage; a fresh result is adopted.
  at::Tensor result(at::Tensor&& host, const char* name, const char* overload_name) {
    if (host.defined() && host.has_storage()) {
      const auto* storage = host.storage().unsafeGetStorageImpl();
      for (size_t i = 0; i < count_; ++i) {
        if (views_[i].view.storage().unsafeGetStorageImpl() == storage) {
          return device_tensor_over(host, views_[i].original->storage());
        }
      }
    }
    return fresh_result_to_device(std::move(host), device_, name, overload_name);
  }

 private:
  struct View {
    const at::Tensor* original = nullptr; // the caller's argument, alive for the call
    at::Tensor view;
    bool pooled = false; // over its own host storage, from the pool
  };

  at::Tensor& view_of(const at::Tensor& tensor) {
    const auto* impl = tensor.unsafeGetTensorImpl();
    auto* storage = tensor.storage().unsafeGetStorageImpl();
    c10::Storage host_storage;
    for (size_t i = 0; i < count_; ++i) {
      if (views_[i].original->unsafeGetTensorImpl() == impl) {
        return views_[i].view; // the same tensor twice: one view, as on the CPU
      }
      if (!host_storage && views_[i].original->storage().unsafeGetStorageImpl() == storage) {
        host_storage = views_[i].view.storage(); // inputs aliasing each other still do
      }
    }
    TORCH_INTERNAL_ASSERT(count_ < kMaxTensors);
    auto& entry = views_[count_++];
    entry.original = &tensor;
    if (host_storage) {
      entry.view = host_view_over(tensor, std::move(host_storage));
    } else {
      entry.view = pool_.take(tensor, storage, reuse_views_);
      entry.pooled = true;
    }
    return entry.view;
  }

  ViewPool& pool_;
  const bool reuse_views_; // outside inference mode, views made there have its keys
  DeviceAgreement agreement_;
  c10::DeviceIndex device_ = -1;
  std::array<View, kMaxTensors> views_;
  size_t count_ = 0;
};

template <class T>
constexpr bool is_written_v = std::is_same_v<T, at::Tensor&>;

// The direct kernel of operator `Op` (an at::_ops struct: its name, for the
// fallback and messages) running the CPU function `cpu_fn`, whose signature
// is the kernel's (SymInt arguments as int64_t, which the dispatcher accepts).
template <class Op, auto cpu_fn, class Signature = std::remove_pointer_t<decltype(cpu_fn)>>
struct Direct;

template <class Op, auto cpu_fn, class Ret, class... Args>
struct Direct<Op, cpu_fn, Ret(Args...)> {
  static Ret call(Args... args) {
    if (async_enabled()) {
      return boxed(args...);
    }
    auto& state = thread_state();
    ++state.calls;
    note_device_work();
    DirectCall call(state.pool);
    (call.note(args, is_written_v<Args>), ...);
    call.check(Op::name, Op::overload_name);
    if constexpr (std::is_same_v<Ret, at::Tensor>) {
      at::Tensor result;
      {
        HostExecutionScope scope(call.device());
        result = cpu_fn(call.host(args)...);
      }
      return call.result(std::move(result), Op::name, Op::overload_name);
    } else if constexpr (std::is_same_v<Ret, std::tuple<at::Tensor, at::Tensor>>) {
      std::tuple<at::Tensor, at::Tensor> results;
      {
        HostExecutionScope scope(call.device());
        results = cpu_fn(call.host(args)...);
      }
      return std::make_tuple(
          call.result(std::move(std::get<0>(results)), Op::name, Op::overload_name),
          call.result(std::move(std::get<1>(results)), Op::name, Op::overload_name));
    } else {
      // In place: the kernel writes through self's host view and cannot
      // resize it; the result is self.
      static_assert(std::is_same_v<Ret, at::Tensor&>);
      {
        HostExecutionScope scope(call.device());
        cpu_fn(call.host(args)...);
      }
      return std::get<0>(std::forward_as_tuple(args...));
    }
  }

  // The call boxed and run by the fallback (asynchronous mode).
  static Ret boxed(Args... args) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
        c10::BoxedKernel::makeFromFunction<&host_execution_fallback>(), op,
        c10::DispatchKeySet(), args...);
  }
};

// convolution_overrideable's CPU function: aten::convolution's kernel for
// the CPU (the device-generic one, which picks the CPU convolution), as the
// fallback runs it. ATen routes convolutions on PrivateUse1 here.
at::Tensor convolution_on_host(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation,
                               bool transposed, c10::IntArrayRef output_padding,
                               int64_t groups) {
  return at::_ops::convolution::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), input, weight, bias,
      c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), transposed, c10::fromIntArrayRefSlow(output_padding),
      groups);
}

// convolution_overrideable's kernel: the direct kernel (or, in asynchronous
// mode, the fallback it hands the call to), its result then converted to the
// memory format torch predicts for neuron (convolution_memory_format; no
// copy when the CPU kernel's result already has it).
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  return Direct<at::_ops::convolution, &convolution_on_host>::call(
             input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
      .contiguous(convolution_memory_format(input, weight));
}

bool direct_kernels_enabled() {
  const char* value = std::getenv("NEURON_DIRECT_KERNELS");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "1") == 0) {
    return true;
  }
  TORCH_CHECK(std::strcmp(value, "0") == 0, "NEURON_DIRECT_KERNELS must be 0 (every operator "
              "through the boxed fallback) or 1 (direct kernels for the hot operators, the "
              "default), but got '", value, "'.");
  return false;
}

#define NEURON_DIRECT(name, op, fn) library.impl(name, TORCH_FN((Direct<at::_ops::op, fn>::call)))

} // namespace

uint64_t& thread_direct_kernel_calls() {
  return thread_state().calls;
}

void register_direct_kernels() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  if (!direct_kernels_enabled()) {
    library.impl("convolution_overrideable",
                 torch::CppFunction::makeFromBoxedFunction<&convolution_overrideable_fallback>());
    return;
  }
  // Named aten::convolution (messages, and the boxed fallback of asynchronous
  // mode, which runs aten::convolution on the same arguments).
  library.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  using BinaryFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
  using BinaryInplaceFn = at::Tensor& (*)(at::Tensor&, const at::Tensor&);
  NEURON_DIRECT("add.Tensor", add_Tensor, &at::cpu::add);
  NEURON_DIRECT("add_.Tensor", add__Tensor, &at::cpu::add_);
  NEURON_DIRECT("sub.Tensor", sub_Tensor, &at::cpu::sub);
  NEURON_DIRECT("sub_.Tensor", sub__Tensor, &at::cpu::sub_);
  NEURON_DIRECT("mul.Tensor", mul_Tensor, &at::cpu::mul);
  NEURON_DIRECT("mul_.Tensor", mul__Tensor, &at::cpu::mul_);
  NEURON_DIRECT("div.Tensor", div_Tensor, static_cast<BinaryFn>(&at::cpu::div));
  NEURON_DIRECT("div_.Tensor", div__Tensor, static_cast<BinaryInplaceFn>(&at::cpu::div_));
  NEURON_DIRECT("sum.dim_IntList", sum_dim_IntList, &at::cpu::sum);
  NEURON_DIRECT("mm", mm, &at::cpu::mm);
  NEURON_DIRECT("addmm", addmm, &at::cpu::addmm);
  NEURON_DIRECT("bmm", bmm, &at::cpu::bmm);
  NEURON_DIRECT("_softmax", _softmax, &at::cpu::_softmax);
  NEURON_DIRECT("_log_softmax", _log_softmax, &at::cpu::_log_softmax);
  NEURON_DIRECT("_softmax_backward_data", _softmax_backward_data,
                &at::cpu::_softmax_backward_data);
  NEURON_DIRECT("_log_softmax_backward_data", _log_softmax_backward_data,
                &at::cpu::_log_softmax_backward_data);
  NEURON_DIRECT("relu", relu, &at::cpu::relu);
  NEURON_DIRECT("relu_", relu_, &at::cpu::relu_);
  NEURON_DIRECT("threshold_backward", threshold_backward, &at::cpu::threshold_backward);
  NEURON_DIRECT("nll_loss_forward", nll_loss_forward, &at::cpu::nll_loss_forward);
  NEURON_DIRECT("nll_loss_backward", nll_loss_backward, &at::cpu::nll_loss_backward);
  NEURON_DIRECT("fill_.Scalar", fill__Scalar,
                static_cast<at::Tensor& (*)(at::Tensor&, const at::Scalar&)>(&at::cpu::fill_));
  NEURON_DIRECT("zero_", zero_, &at::cpu::zero_);
}

} // namespace neuron
