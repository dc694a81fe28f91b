// Asynchronous mode's deferral policy (NEURON_LAUNCH_BLOCKING=0): which
// host-executed calls go to the current stream's worker (NeuronAsync.cpp)
// instead of running at once, and the Meta-kernel predictions that decide it.
//
// A call is deferred only when its results' metadata is known without
// running it: every tensor argument is a plain neuron tensor or a Python
// number (no other CPU tensors, lists, generators, device arguments or
// conj/neg bits), every return is a tensor that is either new or an
// in-place/out= argument (no views), checks the CPU kernel makes at the call
// are also the Meta kernel's, and the Meta kernel computes the results'
// sizes, strides and dtypes without resizing any in-place/out= argument.
// New results are allocated on the issuing thread; the worker runs the CPU
// kernel on host views and copies each new result into its preallocated
// tensor. The closure holds the host views and the device storages (never a
// neuron TensorImpl, which may own a Python object), so memory stays alive
// until the work ran.
//
// Trust: a signature's Meta kernel (per argument dtypes and number kinds) is
// used only after one synchronous call of that signature returned what it
// predicted (PendingMetaCheck): some Meta kernels give a result dtype the CPU
// kernel does not (native_layer_norm's float16 mean and rstd are Float on
// Meta, Half on the CPU), and a deferred call cannot change the dtype of a
// result it already returned. Prediction cache: a trusted signature's
// predictions are cached by everything a Meta kernel's answer depends on
// (prediction_key): many Meta kernels are Python (torch._refs, about 250 us
// per operator), where the lookup costs microseconds.
#include "NeuronHostCall.h"
#include "NeuronStream.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace neuron {

// What the Meta kernel predicted for one result.
struct Prediction {
  bool tensor = false; // a Tensor (else the call is not deferred)
  bool defined = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Layout layout = c10::kStrided;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
};
using Predictions = std::vector<Prediction>;

enum class MetaTrust : uint8_t { kUnchecked, kTrusted, kDistrusted };

// Per operator: the trust of each argument signature, and the cached
// predictions of trusted ones (bounded: a loop over ever new shapes asks the
// Meta kernel each time).
struct DeferralFacts {
  std::mutex mutex;
  std::unordered_map<std::string, MetaTrust> trust;
  std::unordered_map<std::string, Predictions> predictions;
  static constexpr size_t kMaxCachedPredictions = 256;

  MetaTrust meta_trust(const std::string& signature) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = trust.find(signature);
    return it == trust.end() ? MetaTrust::kUnchecked : it->second;
  }
  void set_meta_trust(const std::string& signature, MetaTrust value) {
    std::lock_guard<std::mutex> lock(mutex);
    trust[signature] = value;
  }
  std::optional<Predictions> cached_prediction(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = predictions.find(key);
    return it == predictions.end() ? std::nullopt : std::optional<Predictions>(it->second);
  }
  void cache_prediction(const std::string& key, const Predictions& value) {
    std::lock_guard<std::mutex> lock(mutex);
    if (predictions.size() < kMaxCachedPredictions) {
      predictions.emplace(key, value);
    }
  }
};

namespace {

DeferralFacts& deferral_facts(const OperatorFacts& facts) {
  std::call_once(facts.deferral_once,
                 [&facts] { facts.deferral = std::make_shared<DeferralFacts>(); });
  return *facts.deferral;
}

bool holds_tensor(const c10::IValue& list) {
  for (const c10::IValue element : list.toListRef()) {
    if (!element.isInt() && !element.isDouble() && !element.isBool() && !element.isNone()) {
      return true;
    }
  }
  return false;
}

bool is_neuron_tensor(const c10::IValue& value) {
  return value.isTensor() && value.toTensor().defined() &&
      value.toTensor().device().type() == kDeviceType;
}

// Every tensor argument a plain neuron tensor or a Python number, at least
// one neuron tensor, and no argument of a kind the prediction cannot know.
bool arguments_are_deferrable(const HostCall& call) {
  const auto& arguments = call.op.schema().arguments();
  bool any_tensor = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto& value = call.argument(i);
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      if (!tensor.defined() ||
          (tensor.is_cpu() && tensor.unsafeGetTensorImpl()->is_wrapped_number())) {
        continue; // a Python number: a fresh CPU scalar that nothing else sees
      }
      if (tensor.device().type() != kDeviceType || tensor.is_conj() || tensor.is_neg() ||
          tensor.layout() != c10::kStrided || !tensor.has_storage()) {
        return false;
      }
      any_tensor = true;
    } else if (value.isTensorList() || call.facts.arguments[i].optional_tensor_list ||
               (value.isList() && holds_tensor(value)) || value.isDevice() ||
               value.isGenerator() || call.facts.arguments[i].generator || value.isObject() ||
               value.isCapsule()) {
      return false;
    } else if (value.isInt() &&
               arguments[i].real_type()->kind() == c10::TypeKind::ScalarTypeType &&
               c10::isQIntType(static_cast<c10::ScalarType>(value.toInt()))) {
      return false; // quantize_per_tensor's Meta kernel claims a float result: run it here
    }
  }
  return any_tensor;
}

// Whether the written argument `written` partly overlaps another neuron
// tensor argument (`x[1:].add_(x[:-1])`): the CPU kernel refuses that, so
// the call must run here, where the error reaches the caller. The same
// memory exactly (`x.add_(x)`) is fine.
bool overlaps_another(const HostCall& call, size_t written) {
  const auto& target = call.argument(written).toTensor();
  for (size_t k = call.first; k < call.stack.size(); ++k) {
    const auto& value = call.stack[k];
    if (k == call.first + written || !is_neuron_tensor(value)) {
      continue;
    }
    const auto status = at::get_overlap_status(target, value.toTensor());
    if (status == at::MemOverlapStatus::Partial || status == at::MemOverlapStatus::TooHard) {
      return true;
    }
  }
  return false;
}

int category(c10::ScalarType type) {
  return c10::isComplexType(type) ? 3 : c10::isFloatingType(type) ? 2 : type == c10::kBool ? 0 : 1;
}

// Checks some CPU kernels make that their Meta kernels do not (bool
// subtraction, a cast to a lower category in place, writes to internally
// overlapping memory) must raise at the call: such calls run synchronously.
// Deferred calls have one dtype among their neuron tensors, not bool, and
// Python numbers (not bool) of no higher category; no argument written is
// overlapping.
bool checks_are_in_the_meta_kernel(const HostCall& call) {
  const size_t count = call.op.schema().arguments().size();
  std::optional<c10::ScalarType> dtype;
  for (size_t i = 0; i < count; ++i) {
    if (!is_neuron_tensor(call.argument(i))) {
      continue;
    }
    const auto& tensor = call.argument(i).toTensor();
    if (tensor.scalar_type() == c10::kBool || (dtype && *dtype != tensor.scalar_type())) {
      return false;
    }
    dtype = tensor.scalar_type();
    if (call.facts.arguments[i].written &&
        (at::has_internal_overlap(tensor) != at::MemOverlap::No || overlaps_another(call, i))) {
      return false;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    const auto& value = call.argument(i);
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_cpu() &&
        (!dtype || value.toTensor().scalar_type() == c10::kBool ||
         category(value.toTensor().scalar_type()) > category(*dtype))) {
      return false;
    }
    if (value.isScalar() &&
        (value.isBool() || (dtype && category(value.toScalar().type()) > category(*dtype)))) {
      return false;
    }
  }
  return true;
}

// The tensor argument that return `j` (a write alias) refers to, or -1.
int written_argument(const HostCall& call, size_t j) {
  const int candidate = call.facts.returns[j].written_argument;
  if (candidate >= 0 && call.argument(static_cast<size_t>(candidate)).isTensor()) {
    return candidate;
  }
  // The first argument of that alias set is not a tensor (a list): search the others.
  const auto& schema = call.op.schema();
  const auto* alias = schema.returns()[j].alias_info();
  if (alias == nullptr) {
    return -1;
  }
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* argument_alias = arguments[i].alias_info();
    if (argument_alias != nullptr && argument_alias->isWrite() &&
        argument_alias->beforeSets() == alias->beforeSets() && call.argument(i).isTensor()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// Every return a tensor that is new or a written argument (no views).
bool returns_are_deferrable(const HostCall& call) {
  for (size_t j = 0; j < call.facts.returns.size(); ++j) {
    const auto& ret = call.facts.returns[j];
    if (!ret.tensor || (ret.aliased && (!ret.written || written_argument(call, j) < 0))) {
      return false;
    }
  }
  return true;
}

// The key of the trust table: per argument, a tensor's dtype, a number's
// kind, a dtype argument's value, or nothing for anything else.
std::string argument_signature(const HostCall& call) {
  const auto& arguments = call.op.schema().arguments();
  std::string signature;
  signature.reserve(2 * arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto& value = call.argument(i);
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      signature += !tensor.defined() ? '-' : tensor.is_cpu() ? 'w' : 't';
      signature += static_cast<char>(tensor.defined() ? static_cast<int>(tensor.scalar_type()) : 0);
    } else if (value.isDouble()) {
      signature += "d.";
    } else if (value.isComplexDouble()) {
      signature += "c.";
    } else if (value.isBool()) {
      signature += "b.";
    } else if (value.isInt() &&
               arguments[i].real_type()->kind() == c10::TypeKind::ScalarTypeType) {
      signature += 's';
      signature += static_cast<char>(value.toInt());
    } else if (value.isInt()) {
      signature += "i.";
    } else {
      signature += "..";
    }
  }
  return signature;
}

// Appends one argument's part of prediction_key; false for a kind it does not know.
bool append_key(std::string& key, const c10::IValue& value) {
  const auto append = [&key](const auto& raw) {
    key.append(reinterpret_cast<const char*>(&raw), sizeof(raw));
  };
  const auto append_list = [&](const auto& values) {
    append(values.size());
    for (const auto element : values) {
      append(element);
    }
  };
  if (value.isTensor()) {
    const auto& tensor = value.toTensor();
    if (!tensor.defined()) {
      key += 'u';
    } else if (tensor.is_cpu()) { // a Python number (the policy admits no other)
      key += 'w';
      append(tensor.scalar_type());
      key.append(static_cast<const char*>(tensor.const_data_ptr()), tensor.dtype().itemsize());
    } else {
      key += 't';
      append(tensor.scalar_type());
      append_list(tensor.sizes());
      append_list(tensor.strides());
      append(tensor.storage_offset());
      append(tensor.storage().nbytes());
    }
  } else if (value.isNone()) {
    key += 'n';
  } else if (value.isDouble()) {
    key += 'd';
    append(value.toDouble());
  } else if (value.isInt()) {
    key += 'i';
    append(value.toInt());
  } else if (value.isBool()) {
    key += 'b';
    append(value.toBool());
  } else if (value.isComplexDouble()) {
    key += 'c';
    append(value.toComplexDouble());
  } else if (value.isString()) {
    key += 's';
    append(value.toStringRef().size());
    key += value.toStringRef();
  } else if (value.isIntList()) {
    key += 'I';
    append_list(value.toIntList().vec());
  } else if (value.isDoubleList()) {
    key += 'D';
    append_list(value.toDoubleList().vec());
  } else if (value.isBoolList()) {
    key += 'B';
    append_list(value.toBoolList().vec());
  } else {
    return false;
  }
  return true;
}

// Everything a Meta kernel's answer can depend on: per argument, a neuron
// tensor's dtype, sizes, strides, offset and storage size, a Python number's
// dtype and value, the value of every other argument; and the default dtype
// (integer true division's result). nullopt for an argument kind it does not
// know: such calls ask the Meta kernel every time.
std::optional<std::string> prediction_key(const HostCall& call) {
  std::string key;
  key.reserve(64);
  const auto dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  key.append(reinterpret_cast<const char*>(&dtype), sizeof(dtype));
  const size_t count = call.op.schema().arguments().size();
  for (size_t i = 0; i < count; ++i) {
    if (!append_key(key, call.argument(i))) {
      return std::nullopt;
    }
  }
  return key;
}

at::Tensor meta_twin(const at::Tensor& tensor) {
  const auto itemsize = static_cast<int64_t>(tensor.dtype().itemsize());
  const auto elements = static_cast<int64_t>(tensor.storage().nbytes()) / itemsize;
  auto base = at::empty(
      {elements}, at::TensorOptions().dtype(tensor.scalar_type()).device(c10::DeviceType::Meta));
  return base.as_strided(tensor.sizes(), tensor.strides(), tensor.storage_offset());
}

// The Meta kernel's answer on meta twins of the arguments; nullopt if it
// raises (none, or data-dependent).
std::optional<Predictions> ask_the_meta_kernel(const HostCall& call) {
  torch::jit::Stack meta_stack(call.stack.begin() + static_cast<std::ptrdiff_t>(call.first),
                               call.stack.end());
  for (auto& value : meta_stack) {
    if (is_neuron_tensor(value)) {
      value = meta_twin(value.toTensor());
    }
  }
  try {
    call.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  Predictions predictions(meta_stack.size());
  for (size_t j = 0; j < meta_stack.size(); ++j) {
    auto& prediction = predictions[j];
    prediction.tensor = meta_stack[j].isTensor();
    if (!prediction.tensor || !meta_stack[j].toTensor().defined()) {
      continue;
    }
    const auto& meta = meta_stack[j].toTensor();
    prediction.defined = true;
    prediction.dtype = meta.scalar_type();
    prediction.layout = meta.layout();
    if (meta.layout() == c10::kStrided) {
      prediction.sizes = meta.sizes().vec();
      prediction.strides = meta.strides().vec();
      prediction.storage_offset = meta.storage_offset();
    }
  }
  return predictions;
}

// The results' metadata this call will have: from the cache of a trusted
// signature, else from the Meta kernel (cached when the signature is trusted).
std::optional<Predictions> predict_results(const HostCall& call, DeferralFacts& deferral,
                                           MetaTrust trust) {
  std::optional<std::string> key;
  if (trust == MetaTrust::kTrusted) {
    key = prediction_key(call);
    if (key) {
      if (auto cached = deferral.cached_prediction(*key)) {
        return cached;
      }
    }
  }
  auto predictions = ask_the_meta_kernel(call);
  if (predictions && key) {
    deferral.cache_prediction(*key, *predictions);
  }
  return predictions;
}

// One deferred kernel: the CPU kernel's boxed arguments (host views), the
// host views of the new results, and the device storages behind them all.
struct DeferredKernel {
  std::optional<c10::OperatorHandle> op;
  c10::DeviceIndex device = -1;
  torch::jit::Stack stack;
  std::vector<at::Tensor> outputs;
  HostViews views;
  // The issuing thread's inference mode: its results (and their host views)
  // are inference tensors, which only inference mode may write.
  bool inference_mode = false;

  void run() {
    std::optional<c10::InferenceMode> inference;
    if (inference_mode) {
      inference.emplace();
    }
    HostExecutionScope scope(device);
    op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
    for (size_t j = 0; j < outputs.size() && j < stack.size(); ++j) {
      if (outputs[j].defined()) {
        // copy_ would broadcast or cast silently where a Meta kernel disagrees
        // with the CPU kernel: fail loudly instead (at the next synchronization).
        const auto& result = stack[j].toTensor();
        TORCH_CHECK(result.sizes() == outputs[j].sizes() &&
                        result.scalar_type() == outputs[j].scalar_type(),
                    "neuron asynchronous mode: the Meta kernel of '", op->schema().operator_name(),
                    "' predicted a ", outputs[j].scalar_type(), " result of size ",
                    outputs[j].sizes(), " but its CPU kernel returned a ", result.scalar_type(),
                    " of size ", result.sizes(), ". Please report it; run with "
                    "NEURON_LAUNCH_BLOCKING=1 meanwhile.");
        outputs[j].copy_(result);
      }
    }
    stack.clear();
  }
};

// The results a deferred call returns at once: its written arguments as they
// are, new tensors allocated as predicted. Empty when the call must run
// synchronously after all (a result neuron cannot hold, or a written argument
// the kernel would resize).
std::vector<at::Tensor> allocate_results(const HostCall& call, const Predictions& predictions) {
  const size_t count = call.facts.returns.size();
  std::vector<at::Tensor> results(count);
  for (size_t j = 0; j < count; ++j) {
    const auto& prediction = predictions[j];
    if (!prediction.defined || prediction.layout != c10::kStrided ||
        !is_supported_dtype(prediction.dtype)) {
      return {};
    }
    if (call.facts.returns[j].aliased) {
      const auto& original = call.argument(written_argument(call, j)).toTensor();
      if (c10::IntArrayRef(prediction.sizes) != original.sizes() ||
          c10::IntArrayRef(prediction.strides) != original.strides() ||
          prediction.storage_offset != original.storage_offset() ||
          prediction.dtype != original.scalar_type()) {
        return {}; // the kernel would resize it: run synchronously
      }
      results[j] = original;
    }
  }
  for (size_t j = 0; j < count; ++j) {
    if (!results[j].defined()) {
      const auto& prediction = predictions[j];
      results[j] = at::empty_strided(
          prediction.sizes, prediction.strides,
          at::TensorOptions().dtype(prediction.dtype).device(kDeviceType, call.device));
    }
  }
  return results;
}

// Hands the call to the current stream's worker and leaves `results` on the stack.
void enqueue(HostCall& call, std::vector<at::Tensor> results) {
  call.to_host_arguments(); // host views of the arguments, for the worker
  auto work = std::make_shared<DeferredKernel>();
  work->op = call.op;
  work->device = call.device;
  work->inference_mode = c10::InferenceMode::is_enabled();
  work->stack.assign(call.stack.begin() + static_cast<std::ptrdiff_t>(call.first),
                     call.stack.end());
  for (size_t j = 0; j < results.size(); ++j) {
    if (!call.facts.returns[j].aliased) {
      work->outputs.push_back(call.views.view_of(results[j]));
    } else {
      work->outputs.emplace_back(); // written in place by the kernel
    }
  }
  work->views = std::move(call.views);
  enqueue_on_stream(current_stream(call.device), [work] { work->run(); });
  torch::jit::drop(call.stack, call.op.schema().arguments().size());
  for (auto& result : results) {
    call.stack.emplace_back(std::move(result));
  }
}

} // namespace

bool try_defer(HostCall& call, PendingMetaCheck& check) {
  if (!arguments_are_deferrable(call) || !checks_are_in_the_meta_kernel(call) ||
      !returns_are_deferrable(call)) {
    return false;
  }
  // A signature whose Meta kernel once predicted wrongly runs synchronously,
  // without asking the Meta kernel again.
  auto& deferral = deferral_facts(call.facts);
  std::string signature = argument_signature(call);
  const auto trust = deferral.meta_trust(signature);
  if (trust == MetaTrust::kDistrusted) {
    return false;
  }
  const auto predictions = predict_results(call, deferral, trust);
  if (!predictions || predictions->size() != call.facts.returns.size()) {
    return false; // no Meta kernel, or data-dependent: run synchronously
  }
  for (const auto& prediction : *predictions) {
    if (!prediction.tensor) {
      return false;
    }
  }
  if (trust == MetaTrust::kUnchecked) {
    // Run this call synchronously and compare its results with the prediction.
    std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> predicted;
    for (const auto& prediction : *predictions) {
      predicted.emplace_back(prediction.defined ? prediction.dtype : c10::ScalarType::Undefined,
                             prediction.defined ? prediction.sizes : std::vector<int64_t>{});
    }
    check.expect(call.facts, std::move(signature), std::move(predicted));
    return false;
  }
  auto results = allocate_results(call, *predictions);
  if (results.empty() && !call.facts.returns.empty()) {
    return false;
  }
  enqueue(call, std::move(results));
  return true;
}

void PendingMetaCheck::expect(const OperatorFacts& facts, std::string signature,
                              std::vector<std::pair<c10::ScalarType, std::vector<int64_t>>> predicted) {
  facts_ = &facts;
  signature_ = std::move(signature);
  predicted_ = std::move(predicted);
}

void PendingMetaCheck::after_synchronous_run(const torch::jit::Stack& stack, size_t first) {
  if (facts_ == nullptr) {
    return;
  }
  bool matches = stack.size() == first + predicted_.size();
  for (size_t j = 0; matches && j < predicted_.size(); ++j) {
    const auto& value = stack[first + j];
    const auto& [dtype, sizes] = predicted_[j];
    if (!value.isTensor() || !value.toTensor().defined()) {
      matches = dtype == c10::ScalarType::Undefined;
      continue;
    }
    const auto& result = value.toTensor();
    matches = result.scalar_type() == dtype && result.sizes().vec() == sizes;
  }
  deferral_facts(*facts_).set_meta_trust(signature_,
                                         matches ? MetaTrust::kTrusted : MetaTrust::kDistrusted);
  facts_ = nullptr;
}

} // namespace neuron
