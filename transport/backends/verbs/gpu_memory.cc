// CudaDmabuf:
// cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) through a
// run-time loaded libcuda (see gpu_memory.h).
#include "transport/backends/verbs/gpu_memory.h"

#include "absl/strings/str_cat.h"

#ifdef PRISM_VERBS_CUDA
#include <dlfcn.h>

#include <mutex>
#endif

namespace prism::verbs {

#ifdef PRISM_VERBS_CUDA
namespace {
// CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr,
//     size_t size, CUmemRangeHandleType type, unsigned long long flags);
using GetHandleFn = int (*)(void*, unsigned long long, size_t, int,
                            unsigned long long);
constexpr int kDmabufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
constexpr uint64_t kGpuPage = 64 * 1024;

GetHandleFn LoadGetHandle() {
  static GetHandleFn fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return GetHandleFn{nullptr};
    return reinterpret_cast<GetHandleFn>(
        dlsym(lib, "cuMemGetHandleForAddressRange"));
  }();
  return fn;
}
}  // namespace

absl::StatusOr<DmabufHandle> CudaDmabuf(const void* ptr, size_t len) {
  if (ptr == nullptr || len == 0) {
    return absl::InvalidArgumentError("null or empty GPU range");
  }
  GetHandleFn fn = LoadGetHandle();
  if (fn == nullptr) {
    return absl::UnavailableError(
        "libcuda.so.1 with cuMemGetHandleForAddressRange not available");
  }
  const uint64_t a = reinterpret_cast<uint64_t>(ptr);
  const uint64_t base = a & ~(kGpuPage - 1);
  const uint64_t end = (a + len + kGpuPage - 1) & ~(kGpuPage - 1);
  int fd = -1;
  const int rc = fn(&fd, base, end - base, kDmabufFd, 0);
  if (rc != 0 || fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cuMemGetHandleForAddressRange failed: CUresult ", rc));
  }
  return DmabufHandle{fd, a - base};
}
#else
absl::StatusOr<DmabufHandle> CudaDmabuf(const void*, size_t) {
  return absl::UnimplementedError(
      "built without CUDA headers (PRISM_VERBS_CUDA): no GPU memory");
}
#endif

}  // namespace prism::verbs
