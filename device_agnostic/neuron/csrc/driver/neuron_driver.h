// The neuron driver: the device runtime the torch integration calls.
//
// This is the seam a vendor replaces. Every call below is what the
// integration (csrc/Neuron*.cpp) asks of the device: count and describe the
// devices, allocate and copy memory, run work on streams, record and wait for
// events. It is shaped like a vendor runtime (CUDA's runtime API, OpenReg's
// fake driver): plain C functions returning an error code, no torch and no
// c10. This implementation emulates the device on the host: device memory is
// host memory (memory.cpp), a stream is a FIFO run by a worker thread of its
// own (stream.cpp), events are completion counters with a timestamp
// (event.cpp), and the devices come from NEURON_RT_VISIBLE_CORES and
// NEURON_DEVICE_MEMORY (device.cpp). The comment on each function says what a
// real runtime does there; a port replaces the bodies, not the integration.
//
// Threading: every function may be called from any thread. The current
// device is per thread, as in CUDA.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Error codes. The values of those CUDA also has are CUDA's, so that an error
// surfaced to Python (torch.AcceleratorError carries the code) reads alike.
typedef enum ndrvError_t {
  ndrvSuccess = 0,
  ndrvErrorInvalidValue = 1,            // a null pointer, an unknown flag or kind
  ndrvErrorMemoryAllocation = 2,        // the device (or pinned host) memory is exhausted
  ndrvErrorInitializationError = 3,     // the runtime's configuration is malformed
  ndrvErrorInvalidDevice = 101,         // a device ordinal out of range
  ndrvErrorInvalidResourceHandle = 400, // an unknown stream, event or pointer
  ndrvErrorNotReady = 600,              // queried work has not completed yet
} ndrvError_t;

// Handles: a stream (an ordered queue of work on one device) and an event (a
// marker recorded on a stream).
typedef struct ndrvStream* ndrvStream_t;
typedef struct ndrvEvent* ndrvEvent_t;

// A short fixed description of `error` ("invalid device ordinal").
const char* ndrvGetErrorString(ndrvError_t error);
// The last failed call's explanation on this thread, naming what to fix
// (e.g. which environment variable is malformed and how); "" if none.
// Ours: a real runtime's logs; CUDA has only the fixed strings.
const char* ndrvGetLastErrorDetail(void);

// ---- devices (device.cpp) ---------------------------------------------------

typedef struct ndrvDeviceProp {
  char name[64];          // e.g. "NeuronCore (emulated)"
  size_t totalGlobalMem;  // bytes of device memory
} ndrvDeviceProp;

// Number of devices visible to this process (real: enumerate the hardware,
// filtered by the runtime's visibility variable). Read once.
ndrvError_t ndrvGetDeviceCount(int* count);
// Name and memory size of `device` (real: query the device's firmware).
ndrvError_t ndrvGetDeviceProperties(ndrvDeviceProp* prop, int device);
// Makes `device` this thread's current device: where ndrvMalloc, stream and
// event creation go (real: bind the thread to the device's context).
ndrvError_t ndrvSetDevice(int device);
// This thread's current device (0 until ndrvSetDevice).
ndrvError_t ndrvGetDevice(int* device);
// Waits until all work launched on the current device's streams so far has
// completed (real: block on the device's queues).
ndrvError_t ndrvDeviceSynchronize(void);

// ---- memory (memory.cpp) ----------------------------------------------------

typedef enum ndrvMemcpyKind {
  ndrvMemcpyHostToHost = 0,
  ndrvMemcpyHostToDevice = 1,
  ndrvMemcpyDeviceToHost = 2,
  ndrvMemcpyDeviceToDevice = 3,
} ndrvMemcpyKind;

typedef enum ndrvMemoryType {
  ndrvMemoryTypeUnregistered = 0, // memory the driver did not allocate
  ndrvMemoryTypeHost = 1,         // pinned host memory (ndrvMallocHost)
  ndrvMemoryTypeDevice = 2,       // device memory (ndrvMalloc)
} ndrvMemoryType;

typedef struct ndrvPointerAttributes {
  ndrvMemoryType type;
  int device;       // the owning device (device memory), else -1
  void* base;       // start of the allocation holding the pointer, else NULL
  size_t size;      // its size in bytes, else 0
} ndrvPointerAttributes;

// Allocates `size` bytes of the current device's memory, 4096-byte aligned;
// ndrvErrorMemoryAllocation past the device's capacity (real: carve from the
// device's HBM). The caching allocator above calls it per segment only.
ndrvError_t ndrvMalloc(void** ptr, size_t size);
// Frees memory from ndrvMalloc, on whichever device (real: return to HBM).
ndrvError_t ndrvFree(void* ptr);
// Allocates page-locked host memory the device can DMA from, 64-byte aligned
// (real: pin and register with the device's IOMMU).
ndrvError_t ndrvMallocHost(void** ptr, size_t size);
// Frees memory from ndrvMallocHost (real: unregister and unpin).
ndrvError_t ndrvFreeHost(void* ptr);
// Copies `count` bytes and returns when done (real: DMA between host and
// HBM, or within HBM).
ndrvError_t ndrvMemcpy(void* dst, const void* src, size_t count, ndrvMemcpyKind kind);
// Copies on `stream`, after the work launched on it before (real: a DMA
// descriptor queued on the stream).
ndrvError_t ndrvMemcpyAsync(void* dst, const void* src, size_t count, ndrvMemcpyKind kind,
                            ndrvStream_t stream);
// Free and total bytes of `device`'s memory (real: the device's allocator;
// cudaMemGetInfo asks about the current device, ours names it).
ndrvError_t ndrvMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
// What the driver knows of `ptr`: device memory, pinned host memory or
// neither; any address inside an allocation answers (real: the unified
// address space's page tables).
ndrvError_t ndrvPointerGetAttributes(ndrvPointerAttributes* attributes, const void* ptr);

// ---- streams (stream.cpp) ---------------------------------------------------

// The device's "kernel": a host function run on the stream's worker. A real
// runtime launches compiled device code here instead.
typedef void (*ndrvHostFn_t)(void* user_data);

// Creates a stream on the current device; priority 0 is normal, negative is
// higher (real: allocate a hardware queue).
ndrvError_t ndrvStreamCreateWithPriority(ndrvStream_t* stream, int priority);
// Waits for the stream's work and destroys it (real: release the queue).
ndrvError_t ndrvStreamDestroy(ndrvStream_t stream);
// The priority the stream was created with (real: the queue's priority).
ndrvError_t ndrvStreamGetPriority(ndrvStream_t stream, int* priority);
// Runs `fn(user_data)` on `stream` after the work launched on it before and
// returns at once; work on one stream runs in launch order, two streams' work
// concurrently (real: as cudaLaunchHostFunc; kernels are launched alike).
ndrvError_t ndrvLaunchHostFunc(ndrvStream_t stream, ndrvHostFn_t fn, void* user_data);
// ndrvSuccess when all work launched on `stream` has completed, else
// ndrvErrorNotReady (real: poll the queue).
ndrvError_t ndrvStreamQuery(ndrvStream_t stream);
// Waits until the work launched on `stream` so far has completed.
ndrvError_t ndrvStreamSynchronize(ndrvStream_t stream);
// Work launched on `stream` after this call waits until `event`'s latest
// record has completed (real: a semaphore wait queued on the stream).
ndrvError_t ndrvStreamWaitEvent(ndrvStream_t stream, ndrvEvent_t event);

// ---- events (event.cpp) -----------------------------------------------------

typedef enum ndrvEventFlags {
  ndrvEventDefault = 0x0,       // records completion only
  ndrvEventEnableTiming = 0x1,  // also takes a timestamp at completion
} ndrvEventFlags;

// Creates an event (real: allocate a device semaphore).
ndrvError_t ndrvEventCreateWithFlags(ndrvEvent_t* event, unsigned int flags);
// Marks the point after the work launched on `stream` so far; the event
// completes when that work has (real: a semaphore signal queued on the stream).
ndrvError_t ndrvEventRecord(ndrvEvent_t event, ndrvStream_t stream);
// ndrvSuccess when the latest record has completed (or none was made), else
// ndrvErrorNotReady.
ndrvError_t ndrvEventQuery(ndrvEvent_t event);
// Waits until the latest record has completed.
ndrvError_t ndrvEventSynchronize(ndrvEvent_t event);
// Milliseconds between the completions of two timing events' latest records,
// after waiting for both (real: read the device's timestamps). CUDA returns a
// float; ours a double, which keeps nanoseconds for the profiler.
ndrvError_t ndrvEventElapsedTime(double* ms, ndrvEvent_t start, ndrvEvent_t end);
// Destroys an event; work still to complete it is unaffected.
ndrvError_t ndrvEventDestroy(ndrvEvent_t event);

#ifdef __cplusplus
} // extern "C"
#endif
