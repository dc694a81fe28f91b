// Profiler stubs: the legacy profiler's per-operator hooks on neuron.
//
// torch.autograd.profiler.profile(use_device="neuron") runs in the
// KINETO_PRIVATEUSE1_FALLBACK state: for every operator it calls record() when
// the operator starts and again when it ends, and elapsed() between the two
// when the results are read, as the operator's one (inclusive) device "kernel".
// Without registered stubs torch's defaults throw from record() inside the
// RecordFunction callback of every operator.
//
// The device time itself comes from kineto: NeuronKinetoPlugin.cpp's session
// times every operator in this state too, as kernels on the device's track of
// the trace (which elapsed() cannot put there: torch writes no legacy kernels
// into the Chrome trace). While it does, record() takes no event and elapsed()
// reads 0, or each operator's device time would be counted twice. Otherwise
// (no kineto session timing) the stubs time the operator themselves, from the
// runtime's own events (NeuronStream.cpp): an event recorded on the current
// stream, timed like torch.Event(enable_timing=True).
#include "NeuronKinetoPlugin.h"
#include "NeuronStream.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <functional>

namespace neuron {
namespace {

using torch::profiler::impl::ProfilerStubs;
using torch::profiler::impl::ProfilerVoidEventStub;

struct NeuronProfilerStubs final : ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const auto index = current_device();
    if (device != nullptr) {
      *device = index;
    }
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    if (kineto_session_recording()) {
      *event = ProfilerVoidEventStub(); // no event: the kineto session times it
      return;
    }
    void* raw = nullptr;
    record_event(&raw, current_stream(index), index, c10::EventFlag::BACKEND_DEFAULT);
    // The profiler owns the event: it goes with the last copy of the stub,
    // after elapsed() has read it.
    *event = ProfilerVoidEventStub(raw, destroy_event);
  }

  // Microseconds, as the CUDA stubs return. The profiler reads this without
  // catching (KinetoEvent::privateuse1ElapsedUs), so it never throws: a pair
  // that cannot be timed on one device's clock reads 0 (no device time).
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    if (start == nullptr || end == nullptr || !*start || !*end ||
        event_device(start->get()) != event_device(end->get())) {
      return 0.0F;
    }
    return static_cast<float>(event_elapsed_ms(start->get(), end->get()) * 1000.0);
  }

  // Annotations (the NVTX/ITT markers of emit_nvtx/emit_itt): neuron has no
  // external tracer to send them to.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(c10::Device(kDeviceType, current_device()));
    for (c10::DeviceIndex index = 0; index < device_count(); ++index) {
      guard.set_index(index);
      op(index);
    }
  }

  // Issued work has completed when the host returns from it.
  void synchronize() const override {}
};

const bool registered = [] {
  static NeuronProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

} // namespace
} // namespace neuron
