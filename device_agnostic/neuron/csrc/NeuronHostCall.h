// One host-executed call, as the boxed fallback (NeuronHostExecution.cpp)
// and the asynchronous mode's deferral policy (NeuronAsyncPolicy.cpp) see it:
// the operator's schema facts, the call's host views and its boxed stack.
// Internal to the backend; the direct kernels use NeuronHostExecution.h.
#pragma once

#include "NeuronRuntime.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <c10/core/Storage.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace neuron {

struct DeferralFacts; // the asynchronous mode's per-operator state (NeuronAsyncPolicy.cpp)

// What host execution reads from an operator's schema on every call,
// computed once per operator. Deciding these per call cost string compares
// (the index operators' names), TypePtr copies (atomic reference counts) and
// alias-info walks for every argument of every operator; the facts never
// change while the operator is registered. Facts are never freed (a
// deregistered operator's are retired), so their address identifies the
// operator for as long as the process lives.
struct OperatorFacts {
  struct Argument {
    bool written = false;              // alias info with a write: out= or in-place
    bool optional_tensor_list = false; // Tensor?[] (indices of index/index_put)
    bool generator = false;            // Generator or Generator?
    bool cpu_index = false;            // "indices" of an index operator: CPU tensors allowed
  };
  struct Return {
    bool tensor = false;       // of type Tensor
    bool aliased = false;      // has alias info (a view, or an in-place/out= result)
    bool written = false;      // the alias info writes: the result is an argument
    int written_argument = -1; // the first argument written under the same alias set
  };
  c10::SmallVector<Argument, 8> arguments;
  c10::SmallVector<Return, 2> returns;

  // Owned by the asynchronous mode's policy, made on its first use
  // (deferral_facts() in NeuronAsyncPolicy.cpp).
  mutable std::once_flag deferral_once;
  mutable std::shared_ptr<DeferralFacts> deferral;

  explicit OperatorFacts(const c10::FunctionSchema& schema);
};

// The host views made for one call: one CPU storage per neuron storage, so
// that inputs aliasing each other still alias each other on the host; and one
// view per neuron tensor, so that a tensor passed twice is one tensor on the
// host too. CPU kernels tell `torch.mul(x, y, out=x)` from a fresh out= by
// identity (TensorIterator marks an output that is also an input
// read-write, and refuses to resize it to the broadcast shape): with two
// views of x the kernel resized x instead of raising as on the CPU.
class HostViews {
 public:
  at::Tensor view_of(const at::Tensor& tensor);

  // The neuron storage that `host_storage` stands for, if it is one of ours.
  std::optional<c10::Storage> device_storage_of(const c10::StorageImpl* host_storage) const;

  // A CPU storage over a neuron storage's bytes, resizable through the
  // host-execution allocator (a kernel that grows an out= argument gets
  // device memory, which the fallback adopts).
  static c10::Storage wrap(c10::StorageImpl* device_storage);
  // A CPU tensor with `like`'s geometry and conj/neg bits over `storage`.
  static at::Tensor make_view(const at::Tensor& like, c10::Storage storage);

 private:
  at::Tensor make_view_of(const at::Tensor& tensor);

  struct StoragePair {
    c10::Storage device;
    c10::Storage host;
  };
  c10::SmallVector<StoragePair, 4> storages_;
  // The views by the neuron TensorImpl they stand for (not owned: the caller's
  // stack holds it for the call; never dereferenced).
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 4> tensors_;
};

// One boxed call on its way through host execution.
struct HostCall {
  const c10::OperatorHandle& op;
  const OperatorFacts& facts;
  torch::jit::Stack& stack;
  size_t first;               // the index of the first argument on the stack
  c10::DeviceIndex device;    // the neuron device the call runs on
  HostViews& views;
  // Replaces the stack's neuron arguments by host views (the fallback's step 2).
  c10::function_ref<void()> to_host_arguments;

  const c10::IValue& argument(size_t i) const {
    return stack[first + i];
  }
};

// A synchronous call whose Meta prediction asynchronous mode has not checked
// yet for its argument signature: after the call ran, its results decide
// whether later calls of that signature may be deferred.
class PendingMetaCheck {
 public:
  void expect(const OperatorFacts& facts, std::string signature,
              std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> predicted);
  // Records whether the results on `stack` (from `first`) match; a no-op
  // when nothing is pending.
  void after_synchronous_run(const torch::jit::Stack& stack, size_t first);

 private:
  const OperatorFacts* facts_ = nullptr;
  std::string signature_;
  std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> predicted_;
};

// Asynchronous mode: defers `call` to its device's current stream when its
// results' metadata is known without running it (NeuronAsyncPolicy.cpp), and
// then returns true with the results on the stack. Returns false when the
// call must run synchronously; `check` then may hold a prediction to confirm.
bool try_defer(HostCall& call, PendingMetaCheck& check);

} // namespace neuron
