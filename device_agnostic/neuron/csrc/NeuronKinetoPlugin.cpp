// Device activities for kineto: the neuron timeline of torch's profiler.
//
// torch.profiler (and the legacy torch.autograd.profiler) collect their trace
// through libkineto. On CUDA, CUPTI adds one "kernel" activity per piece of
// device work, linked to the CPU operator that launched it; torch turns those
// into device time (key_averages' "Self NEURON" / "NEURON total") and the
// Chrome trace draws them on a device track. This file is neuron's CUPTI: a
// libkineto child profiler (IActivityProfiler), registered with
// libkineto::api().registerProfilerFactory, whose session
//   - learns which operator is running from the correlation ids torch pushes
//     and pops around every operator on the thread that runs it;
//   - records one event of the backend's own (NeuronStream.cpp, as
//     torch.Event(enable_timing=True)) on the current stream at each push and
//     pop, so the stretch between two consecutive events belongs to the
//     innermost operator open at the time: an operator's own device work,
//     without that of the operators it calls;
//   - reports each stretch as a CONCURRENT_KERNEL activity on the device's
//     track (pid = device, tid = stream), linked to its operator.
//
// Own work only, because torch adds an operator's device time to every
// enclosing operator itself (FunctionEvent.device_time_total sums the
// children's): timing aten::linear whole as well as the aten::addmm inside it
// would count the same work twice.
//
// kineto configures every child profiler whatever activities were asked for.
// The session times operators when device activities were asked for
// (ProfilerActivity.PrivateUse1) or the legacy profiler runs for neuron
// (use_device="neuron", which asks for CPU activities only); a CPU-only
// torch.profiler run gets no device events, as on CUDA. While the session
// times operators NeuronProfiler.cpp's stubs record nothing, or the legacy
// path would count the device time twice (kineto_session_recording()).
#include "NeuronKinetoPlugin.h"
#include "NeuronStream.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <kineto/libkineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace neuron {
namespace {

using libkineto::ActivityType;
using Event = std::shared_ptr<void>;

// Whether the session times operators now. Every operator's push and pop
// reads it, so it is one atomic, not a lock.
std::atomic<bool> recording{false};

Event new_event() {
  const auto device = current_device();
  void* raw = nullptr;
  record_event(&raw, current_stream(device), device, c10::EventFlag::BACKEND_DEFAULT);
  return {raw, [](void* event) { destroy_event(event); }};
}

// An operator that has started and not ended on this thread, and where its
// current stretch of own work began: at its start, or at the end of the
// operator that last ran inside it.
struct OpenOperator {
  uint64_t correlation_id;
  Event since;
};

// A stretch of one operator's own work on the device, between two events: the
// device time of the operator minus that of the operators inside it. An
// operator whose work is split by nested operators has several (aten::mm's
// resolve_conj before the product, for one).
struct Stretch {
  uint64_t correlation_id;
  c10::StreamId stream;
  Event from;
  Event to;
};

// Correlation ids are pushed and popped on the thread that runs the operator,
// so the open operators are per thread; and per recording (generation), so
// that operators left open when one recording stopped do not leak into the
// next.
struct ThreadStack {
  uint64_t generation = 0;
  std::vector<OpenOperator> open;
};
thread_local ThreadStack tls_stack;
std::atomic<uint64_t> generation{0};

ThreadStack& thread_stack() {
  auto& stack = tls_stack;
  const auto current = generation.load(std::memory_order_relaxed);
  if (stack.generation != current) {
    stack.open.clear();
    stack.generation = current;
  }
  return stack;
}

class NeuronKinetoSession final : public libkineto::IActivityProfilerSession {
 public:
  // `device_activities`: the profiler asked for device activities
  // (ProfilerActivity.PrivateUse1 brings CONCURRENT_KERNEL).
  explicit NeuronKinetoSession(bool device_activities) : device_activities_(device_activities) {}

  void start() override {
    // The legacy profiler (use_device="neuron") asks kineto for CPU activities
    // only, but wants device time; a CPU-only torch.profiler run does not.
    const bool legacy = torch::profiler::impl::getProfilerConfig().state ==
                        torch::profiler::impl::ProfilerState::KINETO_PRIVATEUSE1_FALLBACK;
    if (!device_activities_ && !legacy) {
      return;
    }
    // torch.profiler.profile() asks for every supported activity, ours
    // included: a program that has not used neuron is not timed on it (its
    // operators ran on other devices), and the profiler does not initialize
    // the runtime (a fork after that would leave children unable to use it).
    if (!is_initialized() || is_in_bad_fork()) {
      return;
    }
    timing_ = true;
    start_ns_ = c10::getTime();
    generation.fetch_add(1);
    recording.store(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (timing_) {
      recording.store(false);
      end_ns_ = c10::getTime();
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  // Both run inside torch's callback of every operator, which must not throw:
  // a failure stops the timing and is reported through errors().
  void pushCorrelationId(uint64_t id) override {
    if (!recording.load(std::memory_order_relaxed)) {
      return;
    }
    guarded([&] {
      auto& stack = thread_stack();
      auto now = new_event();
      if (!stack.open.empty()) {
        add_stretch(stack.open.back(), now);
      }
      stack.open.push_back({id, std::move(now)});
    });
  }

  void popCorrelationId() override {
    if (!recording.load(std::memory_order_relaxed)) {
      return;
    }
    guarded([&] {
      auto& stack = thread_stack();
      if (stack.open.empty()) {
        return; // it started before this recording did
      }
      auto now = new_event();
      add_stretch(stack.open.back(), now);
      stack.open.pop_back();
      if (!stack.open.empty()) {
        stack.open.back().since = std::move(now);
      }
    });
  }

  std::vector<std::string> errors() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return errors_;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t /*start*/,
                    int64_t /*end*/) override {
    if (!timing_) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, "neuron");
    for (const auto& stretch : stretches_) {
      const auto device = event_device(stretch.from.get());
      const auto from_ns = host_ns(device, stretch.from.get());
      const auto to_ns = host_ns(device, stretch.to.get());
      if (to_ns <= from_ns) {
        continue; // no work between the two events
      }
      // The kernel is named after its operator, but not the same: key_averages
      // groups events by name, and a kernel is no second call of its operator.
      const auto* op = linked_activity(static_cast<int32_t>(stretch.correlation_id));
      buffer_->emplace_activity(buffer_->span, ActivityType::CONCURRENT_KERNEL,
                                "neuron::" + (op != nullptr ? op->name() : std::string("kernel")));
      auto& kernel = *buffer_->activities.back();
      kernel.startTime = from_ns;
      kernel.endTime = to_ns;
      kernel.id = static_cast<int32_t>(stretch.correlation_id);
      kernel.device = device;
      kernel.resource = static_cast<int32_t>(stretch.stream);
      kernel.linked = op;
      kernel.log(logger);
      streams_.emplace(device, stretch.stream);
    }
    buffer_->gpuOpCount = static_cast<int>(buffer_->activities.size());
    stretches_.clear();
    anchors_.clear();
  }

  // The device track's name in the trace viewer (the first device that ran
  // work; one session describes one device).
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (streams_.empty()) {
      return nullptr;
    }
    const auto device = streams_.begin()->first;
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        device, kSortIndex + device, "neuron " + std::to_string(device), "neuron"});
  }

  // One row per stream that ran work, under its device.
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_) {
      infos.push_back(
          {stream, stream, device, "neuron stream " + std::to_string(stream)});
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

 private:
  // Device tracks after the CPU's in the viewer, as CUDA's are.
  static constexpr int64_t kSortIndex = 0x1000000;

  template <typename F>
  void guarded(F&& body) {
    try {
      body();
    } catch (const std::exception& error) {
      recording.store(false);
      std::lock_guard<std::mutex> lock(mutex_);
      errors_.push_back(std::string("neuron: device timing stopped: ") + error.what());
    }
  }

  void add_stretch(const OpenOperator& op, const Event& to) {
    // A stretch that changed device on the way has no device time: its two
    // events are on different devices' clocks on real hardware.
    if (event_device(op.since.get()) != event_device(to.get())) {
      return;
    }
    const auto stream = current_stream(event_device(to.get())).id();
    std::lock_guard<std::mutex> lock(mutex_);
    stretches_.push_back({op.correlation_id, stream, op.since, to});
  }

  // An event's time on kineto's clock (ns since the epoch): the time elapsed
  // since an anchor event of the same device, recorded at a known time. In
  // synchronous mode an event is stamped as it is recorded, so the anchor is
  // exact; in asynchronous mode it is late by the stream's backlog.
  int64_t host_ns(c10::DeviceIndex device, void* event) {
    auto anchor = anchors_.find(device);
    if (anchor == anchors_.end()) {
      c10::DeviceGuard guard(c10::Device(kDeviceType, device));
      const auto now_ns = c10::getTime();
      auto mark = new_event();
      synchronize_event(mark.get());
      anchor = anchors_.emplace(device, Anchor{std::move(mark), now_ns}).first;
    }
    const auto& [mark, mark_ns] = anchor->second;
    return mark_ns + static_cast<int64_t>(event_elapsed_ms(mark.get(), event) * 1e6);
  }

  struct Anchor {
    Event event;
    int64_t host_ns;
  };

  const bool device_activities_;
  bool timing_ = false;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  std::mutex mutex_;
  std::deque<Stretch> stretches_;
  std::vector<std::string> errors_;
  std::unordered_map<c10::DeviceIndex, Anchor> anchors_;
  std::set<std::pair<c10::DeviceIndex, c10::StreamId>> streams_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class NeuronKinetoProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    return std::make_unique<NeuronKinetoSession>(
        activity_types.count(ActivityType::CONCURRENT_KERNEL) != 0);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_ = "neuron";
  std::set<ActivityType> activities_ = {ActivityType::CONCURRENT_KERNEL};
};

// At load: kineto creates one profiler from the factory when it initializes,
// or at once if it already has.
const bool registered = [] {
  libkineto::api().registerProfilerFactory(
      [] { return std::make_unique<NeuronKinetoProfiler>(); });
  return true;
}();

} // namespace

bool kineto_session_recording() {
  return recording.load(std::memory_order_relaxed);
}

} // namespace neuron
