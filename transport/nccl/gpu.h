// GPU memory for the NCCL net plugin: the few CUDA runtime operations the
// plugin needs to stage device memory through pinned host buffers.
//
// Prism's UDP and TCP data paths cannot read or write device memory, so a
// buffer registered with NCCL_PTR_CUDA gets a pinned host mirror of the same
// size (allocated by regMr). Sends copy device -> mirror with an async copy on
// a plugin-owned stream and post the Prism WRITE from the mirror once the
// copy's event has completed; receives land in the mirror and are copied
// mirror -> device before test() reports them done (so iflush has nothing
// left to do and returns a NULL request).
//
// Which runtime is used is decided once per process (GpuInit, called by the
// first init): the CUDA runtime when the plugin was built with CUDA
// (PRISM_NCCL_HAVE_CUDA, CMake auto-detects the toolkit and links the static
// runtime, which loads libcuda.so.1 at run time), it reports at least one
// device AND staging was asked for (PRISM_NCCL_GPU_STAGING=1); otherwise
// none, and the plugin supports host memory only. Tests replace the runtime
// with SetGpuRuntimeForTesting.
//
// Why staging is off by default (docs/nccl.md, "GPU run"): on an H200 with
// NCCL 2.28.9 and two ranks on one GPU, torch point-to-point send/recv under
// forced GPUDirect (NCCL_NET_GDR_LEVEL=SYS) hung every time: a staged
// receive's mirror -> device copy, issued from NCCL's proxy thread while
// NCCL's kernels spin waiting for that proxy, never completed (also with
// CUDA_DEVICE_MAX_CONNECTIONS=32; cause not established). A network proxy
// should not need the GPU's engines to make progress; with host memory only,
// NCCL's own kernel moves the bytes to and from its host buffers and nothing
// in the plugin waits on the GPU.
//
// Thread safety: GpuInit/Gpu/SetGpuRuntimeForTesting are thread-safe. A
// GpuRuntime's methods may be called from any thread; the plugin calls them
// for one comm only under that comm's mutex.
#ifndef PRISM_TRANSPORT_NCCL_GPU_H_
#define PRISM_TRANSPORT_NCCL_GPU_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace prism::nccl {

using GpuStream = void*;
using GpuEvent = void*;

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  // For logs ("cuda 13.0", "fake").
  virtual const char* Name() const = 0;
  // Usable devices; an error or 0 means host memory only.
  virtual absl::StatusOr<int> DeviceCount() = 0;
  // OK when [p, p + n) is device (or managed) memory this runtime can copy.
  virtual absl::Status CheckDevicePointer(const void* p, size_t n) = 0;
  virtual absl::StatusOr<void*> AllocPinned(size_t n) = 0;
  virtual void FreePinned(void* p) = 0;
  virtual absl::StatusOr<GpuStream> CreateStream() = 0;
  virtual void DestroyStream(GpuStream s) = 0;
  virtual absl::StatusOr<GpuEvent> CreateEvent() = 0;
  virtual void DestroyEvent(GpuEvent e) = 0;
  // Enqueues a copy on `s` (to_device: host -> device, else device -> host).
  virtual absl::Status CopyAsync(void* dst, const void* src, size_t n,
                                 bool to_device, GpuStream s) = 0;
  // Records `e` after everything enqueued on `s` so far.
  virtual absl::Status Record(GpuEvent e, GpuStream s) = 0;
  // OK: the work before `e` is complete; Unavailable: not yet; else failed.
  virtual absl::Status Query(GpuEvent e) = 0;
  // Waits for everything enqueued on `s` (teardown only).
  virtual absl::Status Synchronize(GpuStream s) = 0;
};

// Decides the process's runtime once and logs the decision (INFO); returns
// the NCCL_PTR_* bits that follow from it (always NCCL_PTR_HOST). `staging`
// (PRISM_NCCL_GPU_STAGING) is read by the first call only.
int GpuInit(bool staging);
// The runtime decided by GpuInit; nullptr: host memory only.
GpuRuntime* Gpu();
// True when the plugin was built with the CUDA runtime.
bool GpuBuiltWithCuda();
// Tests: makes `rt` (not owned; nullptr = host only) the runtime, as if
// GpuInit had chosen it. Call before any comm exists.
void SetGpuRuntimeForTesting(GpuRuntime* rt);

}  // namespace prism::nccl

#endif  // PRISM_TRANSPORT_NCCL_GPU_H_
