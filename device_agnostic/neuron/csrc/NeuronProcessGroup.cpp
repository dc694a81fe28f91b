// The "neuron" process-group backend of torch.distributed: gloo, zero-copy.
//
// A neuron tensor's bytes are host memory, so gloo can move them as they lie:
// every collective hands the wrapped CPU backend (a ProcessGroupGloo made in
// device_agnostic/neuron/distributed.py) CPU tensors that alias the neuron
// tensors' storage -- same pointer, sizes, strides and offset. Results land
// directly in the neuron tensors' own memory; nothing is staged or copied
// back. Each alias owns a reference to the neuron storage, so a tensor freed
// by Python while gloo's worker thread still reads or writes it stays alive
// until the work is done.
//
// The Work objects returned are gloo's, wrapped so that result() and the
// future's value are the neuron tensors the caller passed (DDP's reducer reads
// the allreduced bucket from the future). CPU tensors pass through unchanged:
// init_process_group("neuron") serves CPU tensors (object collectives, a CPU
// barrier) with the same gloo context.
#include "NeuronProcessGroup.h"

#include "NeuronRuntime.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <utility>
#include <vector>

namespace neuron {
namespace {

void release_storage(void* context) {
  delete static_cast<c10::Storage*>(context);
}

// A CPU tensor over the bytes of neuron tensor `tensor`, holding a reference
// to its storage. CPU tensors are returned as they are.
at::Tensor host_alias(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().is_cpu()) {
    return tensor;
  }
  TORCH_CHECK(tensor.device().type() == kDeviceType,
              "The neuron process group moves neuron and CPU tensors; got a tensor on ",
              tensor.device(), ". Use a process group of that device's backend (",
              "init_process_group(backend=\"cpu:gloo,neuron:neuron,<device>:<backend>\")).");
  TORCH_CHECK(!tensor.is_conj() && !tensor.is_neg(),
              "The neuron process group cannot move a tensor with a lazy conj/neg bit; call "
              ".resolve_conj() / .resolve_neg() first.");
  drain_current_stream(tensor.device().index()); // gloo reads it on the host
  const c10::Storage& storage = tensor.storage();
  void* data = storage.mutable_data();
  c10::DataPtr data_ptr(data, new c10::Storage(storage), &release_storage,
                        c10::Device(c10::DeviceType::CPU));
  auto alias_storage = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage.nbytes(), std::move(data_ptr),
      /*allocator=*/nullptr, /*resizable=*/false));
  auto alias = at::detail::make_tensor<c10::TensorImpl>(
      std::move(alias_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), tensor.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(tensor.sizes(), tensor.strides(),
                                                     tensor.storage_offset());
  return alias;
}

std::vector<at::Tensor> host_aliases(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> aliases;
  aliases.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    aliases.push_back(host_alias(tensor));
  }
  return aliases;
}

std::vector<std::vector<at::Tensor>> host_aliases(
    const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> aliases;
  aliases.reserve(lists.size());
  for (const auto& list : lists) {
    aliases.push_back(host_aliases(list));
  }
  return aliases;
}

// gloo reads device memory from the host, as .cpu() does: work queued on the
// tensors' current streams must be finished first.
void wait_for_device_work(const std::vector<at::Tensor>& tensors) {
  const auto* guard = c10::impl::getDeviceGuardImpl(kDeviceType);
  c10::DeviceIndex last = -1;
  for (const auto& tensor : tensors) {
    if (tensor.defined() && tensor.device().type() == kDeviceType &&
        tensor.device().index() != last) {
      last = tensor.device().index();
      guard->synchronizeStream(guard->getStream(tensor.device()));
    }
  }
}

void wait_for_device_work(const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& list : lists) {
    wait_for_device_work(list);
  }
}

// gloo's work, reporting the caller's neuron tensors as its result.
class NeuronWork : public c10d::Work {
 public:
  NeuronWork(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> outputs)
      : c10d::Work(-1, work->retrieveOpType()), work_(std::move(work)),
        outputs_(std::move(outputs)) {}

  bool isCompleted() override { return work_->isCompleted(); }
  bool isSuccess() const override { return work_->isSuccess(); }
  std::exception_ptr exception() const override { return work_->exception(); }
  int sourceRank() const override { return work_->sourceRank(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override { work_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout) override { return work_->wait(timeout); }
  void abort() override { work_->abort(); }
  float getDuration() const override { return work_->getDuration(); }
  uint64_t getSequencenumber() const override { return work_->getSequencenumber(); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    // The CPU future completes when gloo is done; its value is the CPU
    // aliases. The child future's value is the neuron tensors themselves.
    auto outputs = outputs_;
    return work_->getFuture()->then(
        [outputs](c10::ivalue::Future& /*done*/) { return c10::IValue(outputs); },
        c10::ListType::ofTensors());
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> outputs_;
};

c10::intrusive_ptr<c10d::Work> wrap(c10::intrusive_ptr<c10d::Work> work,
                                    std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<NeuronWork>(std::move(work), std::move(outputs));
}

class ProcessGroupNeuron : public c10d::Backend {
 public:
  explicit ProcessGroupNeuron(c10::intrusive_ptr<c10d::Backend> host)
      : c10d::Backend(host->getRank(), host->getSize()), host_(std::move(host)) {}

  const std::string getBackendName() const override { return kBackendName; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return host_->getBackendOptions(); }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void setGroupUid(const std::string& pg_uid) override {
    c10d::Backend::setGroupUid(pg_uid);
    host_->setGroupUid(pg_uid);
  }
  void abort() override { host_->abort(); }
  void shutdown() override { host_->shutdown(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->broadcast(aliases, opts), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->allreduce(aliases, opts), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->allreduce_coalesced(aliases, opts), tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->reduce(aliases, opts), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->allgather(output_aliases, input_aliases, opts), flatten(outputs));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    wait_for_device_work({input, output});
    auto output_alias = host_alias(output);
    auto input_alias = host_alias(input);
    return wrap(host_->_allgather_base(output_alias, input_alias, opts), {output});
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->allgather_coalesced(output_aliases, input_aliases, opts),
                flatten(outputs));
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->allgather_into_tensor_coalesced(output_aliases, input_aliases, opts),
                outputs);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->gather(output_aliases, input_aliases, opts), flatten(outputs));
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->scatter(output_aliases, input_aliases, opts), outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->reduce_scatter(output_aliases, input_aliases, opts), outputs);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    wait_for_device_work({input, output});
    auto output_alias = host_alias(output);
    auto input_alias = host_alias(input);
    return wrap(host_->_reduce_scatter_base(output_alias, input_alias, opts), {output});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->reduce_scatter_tensor_coalesced(output_aliases, input_aliases, opts),
                outputs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override {
    wait_for_device_work({input, output});
    auto output_alias = host_alias(output);
    auto input_alias = host_alias(input);
    return wrap(host_->alltoall_base(output_alias, input_alias, output_split_sizes,
                                     input_split_sizes, opts),
                {output});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    wait_for_device_work(inputs);
    wait_for_device_work(outputs);
    auto output_aliases = host_aliases(outputs);
    auto input_aliases = host_aliases(inputs);
    return wrap(host_->alltoall(output_aliases, input_aliases, opts), outputs);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->send(aliases, dst_rank, tag), tensors);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->recv(aliases, src_rank, tag), tensors);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override {
    wait_for_device_work(tensors);
    auto aliases = host_aliases(tensors);
    return wrap(host_->recvAnysource(aliases, tag), tensors);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    // gloo's barrier carries no data; the device tensor ProcessGroup made
    // for dispatch is not needed.
    return host_->barrier(opts);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }

 private:
  static std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
    std::vector<at::Tensor> flat;
    for (const auto& list : lists) {
      flat.insert(flat.end(), list.begin(), list.end());
    }
    return flat;
  }

  c10::intrusive_ptr<c10d::Backend> host_;
};

} // namespace

c10::intrusive_ptr<c10d::Backend> make_process_group(c10::intrusive_ptr<c10d::Backend> host) {
  TORCH_CHECK(host, "The neuron process group needs a CPU backend (ProcessGroupGloo) to wrap.");
  return c10::make_intrusive<ProcessGroupNeuron>(std::move(host));
}

at::Tensor process_group_host_alias(const at::Tensor& tensor) {
  return host_alias(tensor);
}

} // namespace neuron
