// Host execution of ATen kernels on device memory, zero-copy both ways.
//
// The boxed fallback below receives every operator that has no neuron kernel.
// It
//   1. checks that all tensors live on one neuron device (0-dim CPU tensors,
//      and CPU indices for indexing, are allowed as inputs, as on CUDA; never
//      as out= or in-place arguments, which receive the result);
//   2. replaces each neuron tensor with a CPU view of the same bytes
//      (host_view), a neuron device argument with "cpu" and a neuron
//      generator with its CPU engine;
//   3. runs the CPU kernel inside a HostExecutionScope, which makes the CPU
//      allocator hand out this device's memory: outputs and temporaries are
//      born in device memory, and count in its statistics;
//   4. turns results back into neuron tensors without copying: results that
//      alias an input become views of the input's neuron storage, results in
//      device memory are re-tagged as neuron storage; only a result the kernel
//      placed elsewhere (a static buffer, say) is copied.
// Out= and in-place arguments that the kernel resized are moved onto their
// new storage and metadata.
//
// In asynchronous mode (NEURON_LAUNCH_BLOCKING=0) the call is first offered to
// the deferral policy (try_defer, NeuronAsyncPolicy.cpp), which queues it on
// the current stream when that is provably safe; otherwise it runs here after
// the stream's pending work. This file keeps only the host execution itself.
#include "NeuronHostExecution.h"

#include "NeuronHostCall.h"

#include "NeuronGenerator.h"
#include "NeuronKinetoPlugin.h"
#include "NeuronStream.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/op_registration.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

namespace neuron {
namespace {

thread_local c10::DeviceIndex tls_host_execution_device = -1;

// The process's CPU allocator, wrapped: inside a HostExecutionScope it
// allocates the scope's device memory (tagged as CPU memory so that CPU
// kernels accept it); everywhere else it is the CPU allocator, untouched.
class HostExecutionAllocator final : public c10::Allocator {
 public:
  void install() {
    cpu_ = c10::GetCPUAllocator();
    cpu_raw_deleter_ = cpu_->raw_deleter();
    c10::SetCPUAllocator(this, /*priority=*/0);
  }

  static void raw_delete(void* ptr) {
    if (!free_if_device_memory(ptr) && cpu_raw_deleter_ != nullptr) {
      cpu_raw_deleter_(ptr);
    }
  }

  c10::DataPtr allocate(size_t nbytes) override {
    if (tls_host_execution_device >= 0) {
      return allocate_for_host_execution(tls_host_execution_device, nbytes);
    }
    return cpu_->allocate(nbytes);
  }

  // c10::Allocator::raw_allocate/raw_deallocate free through raw_deleter(),
  // which must work for both kinds of memory this allocator hands out.
  c10::DeleterFnPtr raw_deleter() const override {
    return &raw_delete;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* cpu_ = nullptr;
  static inline c10::DeleterFnPtr cpu_raw_deleter_ = nullptr;
};

HostExecutionAllocator g_host_execution_allocator;

struct InstallHostExecutionAllocator {
  InstallHostExecutionAllocator() {
    g_host_execution_allocator.install();
  }
};
InstallHostExecutionAllocator g_install_host_execution_allocator;

void no_delete(void* /*unused*/) {}

bool is_optional_tensor_list(const c10::Argument& argument) {
  const auto& type = argument.type();
  if (type->kind() != c10::TypeKind::ListType) {
    return false;
  }
  const auto& element = type->containedType(0);
  return element->kind() == c10::TypeKind::OptionalType &&
      element->castRaw<c10::OptionalType>()->getElementType()->kind() ==
      c10::TypeKind::TensorType;
}

bool is_generator(const c10::Argument& argument) {
  c10::TypePtr type = argument.type();
  if (type->kind() == c10::TypeKind::OptionalType) {
    type = type->castRaw<c10::OptionalType>()->getElementType();
  }
  return type->kind() == c10::TypeKind::GeneratorType;
}

} // namespace

OperatorFacts::OperatorFacts(const c10::FunctionSchema& schema) {
  const auto& name = schema.name();
  const bool index_op = name == "aten::index" || name == "aten::index_put_" ||
      name == "aten::index_put" || name == "aten::_index_put_impl_";
  const auto& schema_arguments = schema.arguments();
  arguments.resize(schema_arguments.size());
  for (size_t i = 0; i < schema_arguments.size(); ++i) {
    const auto& argument = schema_arguments[i];
    const auto* alias = argument.alias_info();
    arguments[i].written = alias != nullptr && alias->isWrite();
    arguments[i].optional_tensor_list = is_optional_tensor_list(argument);
    arguments[i].generator = is_generator(argument);
    arguments[i].cpu_index = index_op && argument.name() == "indices";
  }
  const auto& schema_returns = schema.returns();
  returns.resize(schema_returns.size());
  for (size_t j = 0; j < schema_returns.size(); ++j) {
    const auto& ret = schema_returns[j];
    const auto* alias = ret.alias_info();
    returns[j].tensor = ret.type()->kind() == c10::TypeKind::TensorType;
    returns[j].aliased = alias != nullptr;
    returns[j].written = alias != nullptr && alias->isWrite();
    if (alias == nullptr || !alias->isWrite()) {
      continue;
    }
    for (size_t i = 0; i < schema_arguments.size(); ++i) {
      const auto* argument_alias = schema_arguments[i].alias_info();
      if (argument_alias != nullptr && argument_alias->isWrite() &&
          argument_alias->beforeSets() == alias->beforeSets()) {
        returns[j].written_argument = static_cast<int>(i);
        break;
      }
    }
  }
}

at::Tensor HostViews::view_of(const at::Tensor& tensor) {
  const auto* impl = tensor.unsafeGetTensorImpl();
  for (const auto& seen : tensors_) {
    if (seen.first == impl) {
      return seen.second;
    }
  }
  auto view = make_view_of(tensor);
  tensors_.emplace_back(impl, view);
  return view;
}

at::Tensor HostViews::make_view_of(const at::Tensor& tensor) {
  auto* device_storage = tensor.storage().unsafeGetStorageImpl();
  c10::Storage host_storage;
  for (const auto& pair : storages_) {
    if (pair.device.unsafeGetStorageImpl() == device_storage) {
      host_storage = pair.host;
    }
  }
  if (!host_storage) {
    host_storage = wrap(device_storage);
    storages_.push_back({tensor.storage(), host_storage});
  }
  return make_view(tensor, std::move(host_storage));
}

std::optional<c10::Storage> HostViews::device_storage_of(
    const c10::StorageImpl* host_storage) const {
  for (const auto& pair : storages_) {
    if (pair.host.unsafeGetStorageImpl() == host_storage) {
      return pair.device;
    }
  }
  return std::nullopt;
}

c10::Storage HostViews::wrap(c10::StorageImpl* device_storage) {
  void* data = device_storage->mutable_data();
  // Resizable through the host-execution allocator: a kernel that grows an
  // out= argument gets device memory, which sync_mutated() adopts. Unless the
  // device storage is not (shared memory, NeuronSharing.cpp): the kernel's
  // resize then fails as resize_ does, instead of unsharing it.
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), device_storage->nbytes(),
      c10::DataPtr(data, data, &no_delete, c10::Device(c10::DeviceType::CPU)),
      &g_host_execution_allocator, /*resizable=*/device_storage->resizable()));
}

at::Tensor HostViews::make_view(const at::Tensor& like, c10::Storage storage) {
  auto view = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), like.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                    like.storage_offset());
  if (like.is_conj()) {
    view._set_conj(true);
  }
  if (like.is_neg()) {
    view._set_neg(true);
  }
  return view;
}

namespace {

// The dispatch keys of a plain dense CPU tensor made outside inference mode
// (what TensorImpl's constructor gives a CPU storage): backend, autograd,
// ADInplaceOrView and autocast keys.
c10::DispatchKeySet fresh_cpu_keys() {
  static const c10::DispatchKeySet keys =
      c10::DispatchKeySet(c10::DispatchKey::CPU) |
      c10::getAutogradRelatedKeySetFromBackend(c10::BackendComponent::CPUBit) |
      c10::getAutocastRelatedKeySetFromBackend(c10::BackendComponent::CPUBit);
  return keys;
}

// A neuron tensor with `host`'s geometry over `storage`.
at::Tensor device_tensor(const at::Tensor& host, c10::Storage storage) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                      host.storage_offset());
  if (host.is_conj()) {
    tensor._set_conj(true);
  }
  if (host.is_neg()) {
    tensor._set_neg(true);
  }
  return tensor;
}

// Makes the DataPtr `data` (device memory tagged as CPU memory, or any host
// memory) into neuron storage of `device`.
c10::DataPtr adopt(c10::DataPtr data, size_t nbytes, c10::DeviceIndex device) {
  if (is_device_allocation(data, device)) {
    data.unsafe_set_device(c10::Device(kDeviceType, device));
    return data;
  }
  // Memory the kernel did not get from the CPU allocator: copy it over.
  auto fresh = allocate_device_memory(device, nbytes);
  if (nbytes > 0) {
    NEURON_DRIVER_CHECK(ndrvMemcpy(fresh.get(), data.get(), nbytes, ndrvMemcpyHostToDevice));
  }
  return fresh;
}

// A ZeroTensor (what `_efficientzerotensor` makes, and the backward of
// `sgn` for real inputs): a tensor of zeros that owns no memory, whose data
// pointer is null. The CPU kernel's result has none to copy; its neuron
// counterpart has none either, as CUDA's. The allocator lives as long as the
// process (the storage keeps a raw pointer to it).
at::Tensor device_zero_tensor(const at::Tensor& host, c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::unordered_map<c10::DeviceIndex, std::unique_ptr<at::native::ZeroTensorAllocator>>
      allocators;
  at::native::ZeroTensorAllocator* allocator = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = allocators[device];
    if (!slot) {
      slot = std::make_unique<at::native::ZeroTensorAllocator>(c10::Device(kDeviceType, device));
    }
    allocator = slot.get();
  }
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
      c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(
      host.sizes(), allocator, keys, host.scalar_type(), std::nullopt);
}

// The facts of every operator host execution has run, keyed by the address
// of the operator's schema, which is stable while the operator is registered.
// A dispatcher listener drops an operator's entry when its schema is
// deregistered (a torch.library.Library going away), because the address may
// then be reused by another operator; an operator registered later simply
// gets its entry on its first call. Each thread keeps a small direct-mapped
// cache in front of the map, so the hot path takes no lock; a deregistration
// bumps a generation counter that invalidates every thread's cache. Facts of
// deregistered operators are retired, never freed: a thread may still hold a
// pointer to them, and they are a few hundred bytes per deregistration.
class OperatorFactsCache {
 public:
  static OperatorFactsCache& instance() {
    static auto* cache = new OperatorFactsCache(); // never destroyed: used at exit
    return *cache;
  }

  const OperatorFacts& get(const c10::FunctionSchema& schema) {
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    auto& slot = tls_slots()[slot_index(&schema)];
    if (slot.schema == &schema && slot.generation == generation) {
      return *slot.facts;
    }
    const OperatorFacts* facts = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& entry = facts_[&schema];
      if (!entry) {
        entry = std::make_unique<OperatorFacts>(schema);
      }
      facts = entry.get();
    }
    slot = {&schema, generation, facts};
    return *facts;
  }

  void forget(const c10::FunctionSchema& schema) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = facts_.find(&schema);
    if (it != facts_.end()) {
      retired_.push_back(std::move(it->second));
      facts_.erase(it);
    }
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return facts_.size();
  }

 private:
  static constexpr size_t kSlots = 64;
  struct Slot {
    const c10::FunctionSchema* schema = nullptr;
    uint64_t generation = 0;
    const OperatorFacts* facts = nullptr;
  };

  static std::array<Slot, kSlots>& tls_slots() {
    thread_local std::array<Slot, kSlots> slots{};
    return slots;
  }

  static size_t slot_index(const c10::FunctionSchema* schema) {
    const auto bits = reinterpret_cast<uintptr_t>(schema);
    return (bits >> 4 ^ bits >> 10) % kSlots;
  }

  std::mutex mutex_;
  std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OperatorFacts>> facts_;
  std::vector<std::unique_ptr<OperatorFacts>> retired_;
  std::atomic<uint64_t> generation_{1}; // 1: a zeroed slot never matches
};

class ForgetDeregisteredOperators final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle& /*op*/) override {}
  // Called before the schema is removed, with the dispatcher's lock held
  // (the cache never calls into the dispatcher under its own lock).
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    OperatorFactsCache::instance().forget(op.schema());
  }
};

struct InstallFactsListener {
  InstallFactsListener() {
    // The handle is kept for the life of the process: unregistering the
    // listener at exit could run after the dispatcher's own destruction.
    static auto* handle = new c10::RegistrationHandleRAII(
        c10::Dispatcher::singleton().addRegistrationListener(
            std::make_unique<ForgetDeregisteredOperators>()));
    (void)handle;
  }
};
InstallFactsListener g_install_facts_listener;

class HostExecution {
 public:
  HostExecution(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : op_(op),
        schema_(op.schema()),
        facts_(OperatorFactsCache::instance().get(schema_)),
        stack_(*stack),
        first_(stack->size() - schema_.arguments().size()) {}

  void run() {
    note_device_work();
    find_device();
    TORCH_CHECK_NOT_IMPLEMENTED(
        op_.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU), "The operator '",
        schema_.operator_name(),
        "' is not implemented for neuron: it has no CPU kernel to execute on "
        "device memory. Move the inputs to the CPU for this operation, or "
        "register a neuron kernel for it.");
    PendingMetaCheck meta_check;
    if (async_enabled()) {
      // The deferral policy is the asynchronous mode's (NeuronAsyncPolicy.cpp).
      const auto to_host = [this] { to_host_arguments(); };
      HostCall call{op_, facts_, stack_, first_, device_, views_, to_host};
      if (try_defer(call, meta_check)) {
        return;
      }
      // Not provably safe to defer: run here, after the stream's work.
      drain_current_stream(device_);
    }
    to_host_arguments();
    {
      HostExecutionScope scope(device_);
      op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack_);
    }
    sync_mutated();
    to_device_results();
    meta_check.after_synchronous_run(stack_, first_);
  }

 private:
  bool allows_cpu_tensor(size_t argument, const at::Tensor& tensor) const {
    // CUDA allows CPU scalars as inputs only: a result written into a CPU
    // tensor would leave it holding device memory.
    const auto& facts = facts_.arguments[argument];
    if (facts.written) {
      return false;
    }
    if (tensor.dim() == 0) {
      return true; // CPU scalars mix with device tensors, as on CUDA
    }
    // CUDA accepts CPU index tensors for indexing and moves them over.
    return facts.cpu_index;
  }

  void note_tensor(DeviceAgreement& agreement, size_t argument, const at::Tensor& tensor) {
    if (tensor.defined()) {
      agreement.note(tensor.device(), allows_cpu_tensor(argument, tensor));
    }
  }

  template <typename F>
  void for_each_tensor_argument(F f) {
    const auto& arguments = schema_.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      auto& value = stack_[first_ + i];
      if (value.isTensor()) {
        f(i, value.toTensor());
      } else if (value.isTensorList()) {
        for (const at::Tensor& tensor : value.toTensorList()) {
          f(i, tensor);
        }
      } else if (value.isList()) {
        for (const c10::IValue element : value.toListRef()) {
          if (element.isTensor()) {
            f(i, element.toTensor());
          }
        }
      }
    }
  }

  void find_device() {
    DeviceAgreement agreement;
    for_each_tensor_argument([this, &agreement](size_t i, const at::Tensor& tensor) {
      note_tensor(agreement, i, tensor);
    });
    c10::DeviceIndex otherwise = -1;
    const auto& arguments = schema_.arguments();
    for (size_t i = 0; i < arguments.size() && !agreement.found() && otherwise < 0; ++i) {
      const auto& value = stack_[first_ + i];
      if (value.isDevice() && value.toDevice().type() == kDeviceType) {
        otherwise = resolve_device_index(value.toDevice().index());
      }
    }
    if (!agreement.found() && otherwise < 0) {
      otherwise = current_device();
    }
    device_ = agreement.settle(otherwise, schema_.operator_name());
  }

  at::Tensor to_host(const at::Tensor& tensor, bool mutated) {
    if (!tensor.defined() || tensor.device().type() != kDeviceType) {
      return tensor;
    }
    auto view = views_.view_of(tensor);
    if (mutated) {
      mutated_.emplace_back(tensor, view);
    }
    return view;
  }

  void to_host_arguments() {
    const auto& arguments = facts_.arguments;
    for (size_t i = 0; i < arguments.size(); ++i) {
      auto& value = stack_[first_ + i];
      const bool mutated = arguments[i].written;
      if (value.isTensor()) {
        value = to_host(value.toTensor(), mutated);
      } else if (value.isTensorList()) {
        auto tensors = value.toTensorList();
        c10::List<at::Tensor> host;
        host.reserve(tensors.size());
        for (const at::Tensor& tensor : tensors) {
          host.push_back(to_host(tensor, mutated));
        }
        value = std::move(host);
      } else if (value.isList() && arguments[i].optional_tensor_list) {
        auto tensors = value.to<c10::List<std::optional<at::Tensor>>>();
        c10::List<std::optional<at::Tensor>> host;
        host.reserve(tensors.size());
        for (const std::optional<at::Tensor>& tensor : tensors) {
          host.push_back(tensor.has_value() ? std::optional<at::Tensor>(to_host(*tensor, mutated))
                                            : std::nullopt);
        }
        value = std::move(host);
      } else if (value.isDevice() && value.toDevice().type() == kDeviceType) {
        value = c10::Device(c10::DeviceType::CPU);
      } else if (arguments[i].generator) {
        std::optional<at::Generator> generator;
        if (value.isGenerator()) {
          generator = value.toGenerator();
        }
        value = host_engine(generator, device_);
      }
    }
  }

  // Out= and in-place arguments: the kernel may have resized them, which
  // changed the host view's storage and metadata but not the neuron tensor's.
  void sync_mutated() {
    for (auto& [tensor, view] : mutated_) {
      auto* device_storage = tensor.storage().unsafeGetStorageImpl();
      auto* host_storage = view.storage().unsafeGetStorageImpl();
      if (host_storage->data() != device_storage->data() ||
          host_storage->nbytes() != device_storage->nbytes()) {
        const size_t nbytes = host_storage->nbytes();
        c10::DataPtr data = host_storage->set_data_ptr(
            c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
        host_storage->set_nbytes(0);
        device_storage->set_data_ptr_noswap(adopt(std::move(data), nbytes, device_));
        device_storage->set_nbytes(nbytes);
        // Keep the host view pointing at the bytes, for results aliasing it.
        void* bytes = device_storage->mutable_data();
        host_storage->set_data_ptr_noswap(
            c10::DataPtr(bytes, bytes, &no_delete, c10::Device(c10::DeviceType::CPU)));
        host_storage->set_nbytes(nbytes);
      }
      if (tensor.sizes() != view.sizes() || tensor.strides() != view.strides() ||
          tensor.storage_offset() != view.storage_offset()) {
        tensor.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(),
                                                            view.storage_offset());
      }
    }
  }

  at::Tensor to_device(at::Tensor host) {
    if (!host.defined() || !host.device().is_cpu()) {
      return host;
    }
    if (host.layout() == c10::kStrided && host.has_storage()) {
      if (auto device_storage = views_.device_storage_of(host.storage().unsafeGetStorageImpl())) {
        // A view of an input (or the input itself): same neuron storage.
        return device_tensor(host, std::move(*device_storage));
      }
    }
    return fresh_to_device(std::move(host), device_, schema_.name().c_str(),
                           schema_.overload_name().c_str());
  }

 public:
  // A result that aliases no input: its storage (device memory the kernel
  // got from the CPU allocator, or other host memory, which is copied)
  // becomes neuron storage of `device`.
  static at::Tensor fresh_to_device(at::Tensor&& host, c10::DeviceIndex device,
                                    const char* name, const char* overload_name) {
    if (!host.defined() || !host.device().is_cpu()) {
      return std::move(host);
    }
    // A sparse, quantized or mkldnn result cannot live on neuron: never hand
    // back a CPU tensor in its place. A quantized result would otherwise pass
    // as a plain tensor of a qint dtype, losing its quantizer.
    if (host.is_quantized()) {
      check_not_quantized(host.scalar_type());
    }
    if (host._is_zerotensor()) {
      check_supported_dtype(host.scalar_type());
      return device_zero_tensor(host, device);
    }
    TORCH_CHECK_NOT_IMPLEMENTED(
        host.layout() == c10::kStrided && host.has_storage(), "The operator '", name,
        *overload_name != '\0' ? "." : "", overload_name, "' returned a ", host.layout(),
        " tensor; neuron supports only strided (dense) tensors. Move the input to the CPU "
        "for this operation.");
    auto* host_storage = host.storage().unsafeGetStorageImpl();
    check_supported_dtype(host.scalar_type());
    if (is_device_allocation(host_storage->data_ptr(), device)) {
      // The common case: the kernel allocated it in device memory (a
      // HostExecutionScope); only its tag changes.
      host_storage->_mutable_data_ptr_no_checks().unsafe_set_device(c10::Device(kDeviceType, device));
      host_storage->set_allocator(device_allocator());
    } else if (host_storage->data_ptr().device().type() != kDeviceType) {
      const size_t nbytes = host_storage->nbytes();
      c10::DataPtr data = host_storage->set_data_ptr(
          c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
      host_storage->set_data_ptr_noswap(adopt(std::move(data), nbytes, device));
      host_storage->set_allocator(device_allocator());
    }
    // The storage now is neuron storage (results may share it, so it is
    // converted once and then reused as is).
    auto* impl = host.unsafeGetTensorImpl();
    if (host.use_count() == 1 && host.weak_use_count() == 1 &&
        typeid(*impl) == typeid(c10::TensorImpl) && impl->allow_tensor_metadata_change() &&
        impl->key_set() == fresh_cpu_keys()) {
      // Nothing but this reference holds the kernel's fresh result, a plain
      // dense CPU tensor (no conj/neg/zero-tensor bits, not an inference
      // tensor): make its TensorImpl a neuron tensor in place (device from
      // the storage, backend keys) instead of allocating and filling a second
      // TensorImpl for every result. Anything else is wrapped as before.
      impl->set_storage_keep_dtype(host.storage());
      impl->_change_backend_component_keys(c10::Device(kDeviceType, device));
      return std::move(host);
    }
    return device_tensor(host, host.storage());
  }

 private:
  void to_device_results() {
    const auto& returns = facts_.returns;
    for (size_t j = 0; j < returns.size(); ++j) {
      auto& value = stack_[first_ + j];
      if (returns[j].written && value.isTensor()) {
        // An in-place or out= result is the argument itself.
        value = original_of(value.toTensor());
      } else if (value.isTensor()) {
        value = to_device(std::move(value).toTensor()); // moved: a fresh result is retagged
      } else if (value.isTensorList()) {
        auto tensors = value.toTensorList();
        c10::List<at::Tensor> results;
        results.reserve(tensors.size());
        for (const at::Tensor& tensor : tensors) {
          results.push_back(to_device(tensor));
        }
        value = std::move(results);
      }
    }
  }

  at::Tensor original_of(const at::Tensor& host) {
    for (auto& [tensor, view] : mutated_) {
      if (view.unsafeGetTensorImpl() == host.unsafeGetTensorImpl()) {
        return tensor;
      }
    }
    return to_device(host);
  }

  const c10::OperatorHandle& op_;
  const c10::FunctionSchema& schema_;
  const OperatorFacts& facts_;
  torch::jit::Stack& stack_;
  const size_t first_;
  c10::DeviceIndex device_ = -1;
  HostViews views_;
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> mutated_;
};

// Factories of quantized neuron tensors (torch.empty(..., dtype=torch.qint8,
// device="neuron"), torch._empty_affine_quantized, ...) dispatch to
// QuantizedPrivateUse1: refuse them with the fix instead of "Could not run".
void refuse_quantized(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "The operator '", op.schema().operator_name(),
      "' would create or use a quantized neuron tensor, but the neuron backend has no quantized "
      "kernels. Dequantize it first (tensor.dequantize()) and move the float tensor, or keep "
      "quantized tensors on the CPU.");
}

// Sparse neuron tensors (torch.sparse_coo_tensor(..., device="neuron"),
// to_sparse_csr on a neuron tensor's creation path, ...) dispatch to
// SparsePrivateUse1 and SparseCsrPrivateUse1: refuse them with the fix
// instead of "Could not run ... from the 'Sparseneuron' backend". Sparse
// results of dense neuron operators are refused where they are adopted
// (fresh_to_device).
void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "The operator '", op.schema().operator_name(),
      "' would create or use a sparse neuron tensor, but neuron supports only strided (dense) "
      "tensors. Keep sparse tensors on the CPU, or make the tensor dense (to_dense()) before "
      "moving it to neuron.");
}

void convolution_backward_overrideable(const c10::OperatorHandle& op,
                                       torch::jit::Stack* stack) {
  static const auto convolution_backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  // convolution_backward takes bias_sizes after weight; the overrideable
  // form does not, because the bias gradient's size is the output channels.
  const size_t first = stack->size() - op.schema().arguments().size();
  const auto& weight = (*stack)[first + 2].toTensor();
  const bool transposed = (*stack)[first + 6].toBool();
  const int64_t groups = (*stack)[first + 8].toInt();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  const at::MemoryFormat format = convolution_memory_format((*stack)[first + 1].toTensor(), weight);
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(first + 3),
                c10::IValue(std::vector<int64_t>{channels}));
  HostExecution(convolution_backward, stack).run();
  // grad_input and grad_weight in torch's predicted format; grad_bias is 1-d.
  for (size_t i = stack->size() - 3; i < stack->size() - 1; ++i) {
    if ((*stack)[i].isTensor() && (*stack)[i].toTensor().defined()) {
      (*stack)[i] = (*stack)[i].toTensor().contiguous(format);
    }
  }
}

} // namespace

// ATen routes convolutions on PrivateUse1 to the *_overrideable operators,
// whose default kernels throw. Neuron runs the device-generic operators,
// which pick the CPU convolution kernels, on device memory instead. (The
// direct kernel of convolution_overrideable, NeuronDirectKernels.cpp, does
// the same unboxed; this is its boxed form.)
void convolution_overrideable_fallback(const c10::OperatorHandle& op,
                                       torch::jit::Stack* stack) {
  static const auto convolution =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  const size_t first = stack->size() - op.schema().arguments().size();
  const at::MemoryFormat format =
      convolution_memory_format((*stack)[first].toTensor(), (*stack)[first + 1].toTensor());
  host_execution_fallback(convolution, stack);
  stack->back() = stack->back().toTensor().contiguous(format);
}

at::MemoryFormat convolution_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  return at::native::_determine_backend_memory_format(input, weight,
                                                      at::native::ConvBackend::Overrideable);
}

void host_execution_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  ++thread_boxed_fallback_calls();
  HostExecution(op, stack).run();
}

uint64_t& thread_boxed_fallback_calls() {
  thread_local uint64_t calls = 0;
  return calls;
}

c10::Storage host_storage_of(c10::StorageImpl* device_storage) {
  return HostViews::wrap(device_storage);
}

at::Tensor host_view_over(const at::Tensor& tensor, c10::Storage host_storage) {
  return HostViews::make_view(tensor, std::move(host_storage));
}

at::Tensor device_tensor_over(const at::Tensor& host, c10::Storage device_storage) {
  return device_tensor(host, std::move(device_storage));
}

at::Tensor fresh_result_to_device(at::Tensor&& host, c10::DeviceIndex device, const char* name,
                                  const char* overload_name) {
  return HostExecution::fresh_to_device(std::move(host), device, name, overload_name);
}

void register_host_execution_for_structured_ops() {
  // Structured operators have one CPU kernel for the functional form, and for
  // other backends a generic (CompositeExplicitAutogradNonFunctional) wrapper
  // that allocates the output and calls the out= form. On neuron that wrapper
  // would allocate, then host-execute the out= kernel with a shape-0-dim output
  // it must resize (and warn about). Running the CPU functional kernel itself
  // is both faithful to CPU semantics and one dispatch cheaper. The same holds
  // for the few operators with a CPU kernel and a generic decomposition
  // (CompositeExplicitAutograd: native_layer_norm, native_group_norm, addr,
  // ...): the decomposition rounds differently from the CPU kernel.
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    auto op = dispatcher.findOp(name);
    if (!op.has_value() || name.name.rfind("aten::", 0) != 0 ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd))) {
      continue;
    }
    const std::string qualified =
        name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    const std::string unqualified = qualified.substr(6);
    library.impl(unqualified.c_str(),
                 torch::CppFunction::makeFromBoxedFunction<&host_execution_fallback>());
  }
}

HostExecutionScope::HostExecutionScope(c10::DeviceIndex device)
    : previous_(tls_host_execution_device) {
  tls_host_execution_device = device;
}

HostExecutionScope::~HostExecutionScope() {
  tls_host_execution_device = previous_;
}

size_t host_execution_cached_operators() {
  return OperatorFactsCache::instance().size();
}

at::Tensor host_view(const at::Tensor& tensor) {
  return HostViews::make_view(tensor, HostViews::wrap(tensor.storage().unsafeGetStorageImpl()));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&host_execution_fallback>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Operators whose only kernel is a CompositeExplicitAutograd one that calls
  // a DispatchStub with the tensors' device type (conj_physical_stub,
  // kaiser_window_stub): on neuron an internal assert ("DispatchStub: missing
  // kernel for neuron"). Host execution runs that composite kernel on CPU
  // views (a factory's device argument made the CPU), where the stub has the
  // CPU's kernel, inside one host call (so the asynchronous mode defers it
  // whole). Registering the CPU kernels as the stubs' PrivateUse1 kernels
  // instead would run them on the calling thread, racing the deferred
  // operators that made their inputs. The list is what a scan of every
  // operator neuron reaches through a composite kernel finds
  // (tests/test_neuron_operators.py, test_no_composite_operator_reaches_a_dispatch_stub);
  // their out= forms call these.
  for (const char* name :
       {"conj_physical_", "kaiser_window", "kaiser_window.periodic", "kaiser_window.beta"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&host_execution_fallback>());
  }
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolution_backward_overrideable>());
}

} // namespace neuron
