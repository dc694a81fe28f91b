// The driver's shared-memory calls: device memory that other processes can map.
//
// What the torch integration (NeuronSharing.cpp) calls to share a storage
// between processes, shaped as a vendor runtime's IPC calls
// (cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle; Level
// Zero and ROCm export the same thing as a dma-buf file descriptor). The
// emulation (ipc.cpp) backs an allocation with an anonymous memfd mapped
// MAP_SHARED: its handle is the file descriptor, which torch.multiprocessing
// passes to the receiving process (DupFd), where ndrvOpenShared maps the same
// pages. The memory lives as long as any process maps it or holds its handle,
// so a producer may free its side while a consumer still uses it.
//
// A vendor replaces ipc.cpp with calls into its runtime, keeping these
// signatures. Every call returns an ndrvError_t (neuron_driver.h):
// ndrvErrorInvalidValue for a bad argument or a handle smaller than the size
// asked for, ndrvErrorMemoryAllocation when the system refuses the memory or
// the mapping; ndrvGetLastErrorDetail says why (the system's errno text).
#pragma once

#include "neuron_driver.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Allocates `size` (> 0) bytes of shareable device memory, zero-filled. On
// success `*ptr` is its address in this process and `*handle` a handle that
// another process can open; the caller owns both until ndrvFreeShared.
ndrvError_t ndrvMallocShared(size_t size, void** ptr, int* handle);

// Maps `size` bytes of the shared allocation behind `handle` (a handle
// received from another process; the caller keeps owning it). On success
// `*ptr` is its address in this process.
ndrvError_t ndrvOpenShared(int handle, size_t size, void** ptr);

// Releases this process's mapping `ptr` of `size` bytes and its handle. The
// memory itself is released when no process maps it or holds a handle to it.
ndrvError_t ndrvFreeShared(void* ptr, size_t size, int handle);

#ifdef __cplusplus
} // extern "C"
#endif
