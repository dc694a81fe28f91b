// The neuron child profiler of libkineto (NeuronKinetoPlugin.cpp).
#pragma once

namespace neuron {

// Whether a kineto session is timing neuron operators now. The legacy
// profiler's stubs (NeuronProfiler.cpp) then time nothing themselves: the
// session's device activities already carry that time.
bool kineto_session_recording();

} // namespace neuron
