// A fake GPU runtime (transport/nccl/gpu.h) for the NCCL plugin's tests:
// no GPU needed. It keeps "device memory" in allocations of its own and runs
// every copy lazily, one queued operation per event query, so a WRITE posted
// before its device -> host copy finished (or a receive reported done before
// its host -> device copy) shows up as wrong bytes: fresh pinned mirrors are
// filled with 0xa5, fresh device memory with 0xdd. Used by nccl_gpu_test and
// nccl_write_refusal_test (a staged send's WRITE is posted later, from
// SendComm::PostPending).
//
// Thread safety: every method takes the fake's mutex.
#ifndef PRISM_TESTS_NCCL_FAKE_GPU_H_
#define PRISM_TESTS_NCCL_FAKE_GPU_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/nccl/gpu.h"

namespace prism::nccl {

class FakeGpu final : public GpuRuntime {
 public:
  struct Stats {
    int d2h = 0;
    int h2d = 0;
    int bad_copies = 0;  // a copy whose ends are not device/pinned memory
    int pinned_live = 0;
    int streams_live = 0;
    int events_live = 0;
  };

  const char* Name() const override { return "fake"; }
  absl::StatusOr<int> DeviceCount() override { return 1; }

  // "cudaMalloc".
  uint8_t* AllocDevice(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* p = new uint8_t[n];
    memset(p, 0xdd, n);
    device_[p] = n;
    return p;
  }
  void FreeDevice(uint8_t* p) {
    std::lock_guard<std::mutex> lock(mu_);
    device_.erase(p);
    delete[] p;
  }
  absl::Status CheckDevicePointer(const void* p, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    return InDevice(p, n) ? absl::OkStatus()
                          : absl::InvalidArgumentError("not device memory");
  }
  absl::StatusOr<void*> AllocPinned(size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* p = new uint8_t[n];
    memset(p, 0xa5, n);
    pinned_[p] = n;
    ++stats_.pinned_live;
    return p;
  }
  void FreePinned(void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pinned_.find(static_cast<uint8_t*>(p));
    if (it == pinned_.end()) {
      ++stats_.bad_copies;
      return;
    }
    pinned_.erase(it);
    delete[] static_cast<uint8_t*>(p);
    --stats_.pinned_live;
  }
  absl::StatusOr<GpuStream> CreateStream() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.streams_live;
    return static_cast<GpuStream>(new Stream());
  }
  void DestroyStream(GpuStream s) override {
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.streams_live;
    delete static_cast<Stream*>(s);
  }
  absl::StatusOr<GpuEvent> CreateEvent() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.events_live;
    return static_cast<GpuEvent>(new Event());
  }
  void DestroyEvent(GpuEvent e) override {
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.events_live;
    delete static_cast<Event*>(e);
  }
  absl::Status CopyAsync(void* dst, const void* src, size_t n, bool to_device,
                         GpuStream s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_copies_ > 0) {
      --fail_copies_;
      return absl::InternalError("injected copy failure");
    }
    const bool ok = to_device ? InDevice(dst, n) && InPinned(src, n)
                              : InPinned(dst, n) && InDevice(src, n);
    if (!ok) {
      ++stats_.bad_copies;
      return absl::InvalidArgumentError("copy outside device/pinned memory");
    }
    ++(to_device ? stats_.h2d : stats_.d2h);
    static_cast<Stream*>(s)->ops.push_back(Op{dst, src, n, nullptr});
    return absl::OkStatus();
  }
  absl::Status Record(GpuEvent e, GpuStream s) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* ev = static_cast<Event*>(e);
    ev->pending = true;
    static_cast<Stream*>(s)->ops.push_back(Op{nullptr, nullptr, 0, ev});
    ev->stream = static_cast<Stream*>(s);
    return absl::OkStatus();
  }
  absl::Status Query(GpuEvent e) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* ev = static_cast<Event*>(e);
    // The copy engine makes progress, unless stalled.
    if (ev->pending && !stalled_) RunOne(ev->stream);
    return ev->pending ? absl::UnavailableError("not ready") : absl::OkStatus();
  }
  absl::Status Synchronize(GpuStream s) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* st = static_cast<Stream*>(s);
    while (!st->ops.empty()) RunOne(st);
    return absl::OkStatus();
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void FailNextCopies(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_copies_ = n;
  }
  // Stalled: copies make no progress (as the H200 run saw, docs/nccl.md).
  void Stall(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    stalled_ = on;
  }

 private:
  struct Event;
  struct Op {
    void* dst;
    const void* src;
    size_t n;
    Event* ev;  // a recorded event instead of a copy
  };
  struct Stream {
    std::deque<Op> ops;
  };
  struct Event {
    bool pending = false;
    Stream* stream = nullptr;
  };

  void RunOne(Stream* s) {
    if (s->ops.empty()) return;
    const Op op = s->ops.front();
    s->ops.pop_front();
    if (op.ev != nullptr) {
      op.ev->pending = false;
    } else if (op.n > 0) {
      memcpy(op.dst, op.src, op.n);
    }
  }
  static bool In(const std::map<uint8_t*, size_t>& m, const void* p, size_t n) {
    const auto* q = static_cast<const uint8_t*>(p);
    auto it = m.upper_bound(const_cast<uint8_t*>(q));
    if (it == m.begin()) return false;
    --it;
    return q >= it->first && q + n <= it->first + it->second;
  }
  bool InDevice(const void* p, size_t n) const { return In(device_, p, n); }
  bool InPinned(const void* p, size_t n) const { return In(pinned_, p, n); }

  std::mutex mu_;
  std::map<uint8_t*, size_t> device_;
  std::map<uint8_t*, size_t> pinned_;
  Stats stats_;
  int fail_copies_ = 0;
  bool stalled_ = false;
};

}  // namespace prism::nccl

#endif  // PRISM_TESTS_NCCL_FAKE_GPU_H_
