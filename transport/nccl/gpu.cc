#include "transport/nccl/gpu.h"

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "transport/nccl/log.h"
#include "transport/nccl/net_abi.h"

#ifdef PRISM_NCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace prism::nccl {
namespace {

#ifdef PRISM_NCCL_HAVE_CUDA
absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

// The CUDA runtime (statically linked; it loads libcuda.so.1 itself).
class CudaRuntime final : public GpuRuntime {
 public:
  CudaRuntime() {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) {
      name_ = absl::StrCat("cuda runtime ", v / 1000, ".", (v % 1000) / 10);
    }
  }
  const char* Name() const override { return name_.c_str(); }
  absl::StatusOr<int> DeviceCount() override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      return CudaStatus(e, "cudaGetDeviceCount");
    }
    return n;
  }
  absl::Status CheckDevicePointer(const void* p, size_t n) override {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaStatus(e, "cudaPointerGetAttributes");
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
      return absl::InvalidArgumentError(
          absl::StrCat("not device memory (cudaMemoryType ", a.type, ")"));
    }
    (void)n;  // the copies fail cleanly if the range leaves the allocation
    return absl::OkStatus();
  }
  absl::StatusOr<void*> AllocPinned(size_t n) override {
    void* p = nullptr;
    if (absl::Status s = CudaStatus(cudaHostAlloc(&p, n, cudaHostAllocPortable),
                                    "cudaHostAlloc");
        !s.ok()) {
      return s;
    }
    return p;
  }
  void FreePinned(void* p) override { (void)cudaFreeHost(p); }
  absl::StatusOr<GpuStream> CreateStream() override {
    cudaStream_t s = nullptr;
    if (absl::Status st =
            CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags");
        !st.ok()) {
      return st;
    }
    return static_cast<GpuStream>(s);
  }
  void DestroyStream(GpuStream s) override {
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  absl::StatusOr<GpuEvent> CreateEvent() override {
    cudaEvent_t e = nullptr;
    if (absl::Status st =
            CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags");
        !st.ok()) {
      return st;
    }
    return static_cast<GpuEvent>(e);
  }
  void DestroyEvent(GpuEvent e) override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
  absl::Status CopyAsync(void* dst, const void* src, size_t n, bool to_device,
                         GpuStream s) override {
    return CudaStatus(cudaMemcpyAsync(dst, src, n,
                                      to_device ? cudaMemcpyHostToDevice
                                                : cudaMemcpyDeviceToHost,
                                      static_cast<cudaStream_t>(s)),
                      "cudaMemcpyAsync");
  }
  absl::Status Record(GpuEvent e, GpuStream s) override {
    return CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(e),
                                      static_cast<cudaStream_t>(s)),
                      "cudaEventRecord");
  }
  absl::Status Query(GpuEvent e) override {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaSuccess) return absl::OkStatus();
    if (r == cudaErrorNotReady) return absl::UnavailableError("not ready");
    return CudaStatus(r, "cudaEventQuery");
  }
  absl::Status Synchronize(GpuStream s) override {
    return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(s)),
                      "cudaStreamSynchronize");
  }

 private:
  std::string name_ = "cuda runtime";
};
#endif  // PRISM_NCCL_HAVE_CUDA

struct GpuState {
  std::mutex mu;
  bool decided = false;
  GpuRuntime* rt = nullptr;
  int ptr_support = kPrismNcclPtrHost;
};

GpuState& State() {
  static GpuState* s = new GpuState();  // never destroyed
  return *s;
}

int PtrBits(GpuRuntime* rt) {
  return rt == nullptr
             ? kPrismNcclPtrHost
             : kPrismNcclPtrHost | kPrismNcclPtrCuda | kPrismNcclPtrDmaBuf;
}

}  // namespace

bool GpuBuiltWithCuda() {
#ifdef PRISM_NCCL_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int GpuInit(bool staging) {
  GpuState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.decided) return st.ptr_support;
  st.decided = true;
#ifdef PRISM_NCCL_HAVE_CUDA
  static CudaRuntime* cuda = new CudaRuntime();  // never destroyed
  absl::StatusOr<int> n = cuda->DeviceCount();
  if (n.ok() && *n > 0 && !staging) {
    PRISM_NCCL_LOG(kPrismNcclLogInfo, kPrismNcclFlagInit | kPrismNcclFlagNet,
                   "%s, %d device(s): host memory only (ptrSupport HOST): "
                   "NCCL stages device data through its own host buffers; "
                   "PRISM_NCCL_GPU_STAGING=1 advertises CUDA|DMABUF (copies "
                   "in the proxy thread, can deadlock, see docs/nccl.md)",
                   cuda->Name(), *n);
  } else if (!n.ok() || *n <= 0) {
    PRISM_NCCL_LOG(
        kPrismNcclLogInfo, kPrismNcclFlagInit | kPrismNcclFlagNet,
        "built with CUDA (%s) but no usable CUDA device (%s): host memory "
        "only (ptrSupport HOST)",
        cuda->Name(),
        n.ok() ? "0 devices" : std::string(n.status().message()).c_str());
  } else {
    st.rt = cuda;
    PRISM_NCCL_LOG(kPrismNcclLogInfo, kPrismNcclFlagInit | kPrismNcclFlagNet,
                   "%s, %d device(s): ptrSupport HOST|CUDA|DMABUF, device "
                   "memory staged through pinned host buffers",
                   cuda->Name(), *n);
  }
#else
  (void)staging;  // nothing to stage without CUDA
  PRISM_NCCL_LOG(kPrismNcclLogInfo, kPrismNcclFlagInit | kPrismNcclFlagNet,
                 "built without CUDA: host memory only (ptrSupport HOST)");
#endif
  st.ptr_support = PtrBits(st.rt);
  return st.ptr_support;
}

GpuRuntime* Gpu() {
  GpuState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.rt;
}

void SetGpuRuntimeForTesting(GpuRuntime* rt) {
  GpuState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  st.decided = true;
  st.rt = rt;
  st.ptr_support = PtrBits(rt);
}

}  // namespace prism::nccl
