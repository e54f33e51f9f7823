// GPU memory for the verbs datapath: a dma-buf file descriptor for a CUDA
// device allocation, to register with VerbsDatapath::RegisterDmabuf()
// (ibv_reg_dmabuf_mr), so the NIC writes straight into GPU memory.
//
// Built with PRISM_VERBS_CUDA (CMake defines it when the CUDA headers are
// found). libcuda is loaded at run time (dlopen), so a binary built with it
// still runs on a host without a GPU driver: the call then fails with
// Unavailable. Without PRISM_VERBS_CUDA it fails with Unimplemented.
// Untested on hardware here: the development and CI machines have no GPU
// and soft-RoCE has no dma-buf memory registration.
//
// Thread safety: thread-safe (libcuda is loaded once).
#ifndef PRISM_TRANSPORT_BACKENDS_VERBS_GPU_MEMORY_H_
#define PRISM_TRANSPORT_BACKENDS_VERBS_GPU_MEMORY_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace prism::verbs {

struct DmabufHandle {
  int fd = -1;          // owned by the caller (close() after registering)
  uint64_t offset = 0;  // offset of `ptr` inside the dma-buf
};

// REQUIRES: [ptr, ptr + len) is a CUDA device allocation; the range is
// rounded out to the GPU page size (64 KiB) by the driver call.
absl::StatusOr<DmabufHandle> CudaDmabuf(const void* ptr, size_t len);

}  // namespace prism::verbs

#endif  // PRISM_TRANSPORT_BACKENDS_VERBS_GPU_MEMORY_H_
