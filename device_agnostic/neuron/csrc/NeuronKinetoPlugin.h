// The neuron child profiler of libkineto (NeuronKinetoPlugin.cpp).
#pragma once

#include <cstdint>

namespace neuron {

// Whether a kineto session is timing neuron operators now. The legacy
// profiler's stubs (NeuronProfiler.cpp) then time nothing themselves: the
// session's device activities already carry that time.
bool kineto_session_recording();

// How much work this thread has issued to neuron devices: every operator run
// by host execution and every copy or scalar read of device memory counts one.
// The session gives an operator's stretch of time a device activity only if
// this moved during it, so the CPU operators of a program that also uses
// neuron get no neuron kernels (kineto's hooks say which operator runs, not on
// which device).
uint64_t& thread_device_work();
inline void note_device_work() {
  ++thread_device_work();
}

} // namespace neuron
