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
// signatures. Every call returns 0 on success, else an errno value
// (ndrvSharedErrorString names it).
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Allocates `size` (> 0) bytes of shareable device memory, zero-filled. On
// success `*ptr` is its address in this process and `*handle` a handle that
// another process can open; the caller owns both until ndrvFreeShared.
int ndrvMallocShared(size_t size, void** ptr, int* handle);

// Maps `size` bytes of the shared allocation behind `handle` (a handle
// received from another process; the caller keeps owning it). On success
// `*ptr` is its address in this process.
int ndrvOpenShared(int handle, size_t size, void** ptr);

// Releases this process's mapping `ptr` of `size` bytes and its handle. The
// memory itself is released when no process maps it or holds a handle to it.
int ndrvFreeShared(void* ptr, size_t size, int handle);

// A message for an error code of the calls above.
const char* ndrvSharedErrorString(int error);

#ifdef __cplusplus
} // extern "C"
#endif
