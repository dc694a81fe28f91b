// What the driver's files share; not part of the driver's API.
#pragma once

#include "neuron_driver.h"

#include <functional>
#include <string>

namespace ndrv {

constexpr int kMaxDevices = 64;

// Records `detail` as this thread's last error detail and returns `error`.
ndrvError_t fail(ndrvError_t error, std::string detail);

// The device count, or an error (with its detail recorded) when
// NEURON_RT_VISIBLE_CORES is malformed.
ndrvError_t device_count(int* count);
// ndrvSuccess if `device` is a visible device; else the error, detail recorded.
ndrvError_t check_device(int device);
// The per-device capacity in bytes, or an error when NEURON_DEVICE_MEMORY is
// malformed.
ndrvError_t device_capacity(size_t* bytes);
int current_device();

// Appends `work` to `stream`'s queue; it runs on the stream's worker after the
// work before it.
void enqueue(ndrvStream_t stream, std::function<void()> work);
// True when all work enqueued on `stream` has completed.
bool stream_idle(ndrvStream_t stream);

} // namespace ndrv
