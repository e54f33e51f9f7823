// One prism::Endpoint per NCCL device, shared by every comm on that device,
// and the demultiplexer that routes the endpoint's completions to comms.
//
// Only built with the Prism data path (PRISM_NCCL_HAVE_ENDPOINT).
//
// Endpoints are created by the first listen/connect on a device and destroyed
// by ReleaseIdleEndpoints() (the last finalize) once no comm uses them;
// destroying an endpoint joins its loop thread.
//
// Thread safety: all methods are thread-safe. Lock order (never reversed):
// comm mutex -> DeviceEndpoint poll mutex -> route mutex -> sink's own
// inbox lock. CompletionSink::Deliver runs under the route mutex and must
// only queue.
#ifndef PRISM_TRANSPORT_NCCL_ENDPOINT_POOL_H_
#define PRISM_TRANSPORT_NCCL_ENDPOINT_POOL_H_

#ifdef PRISM_NCCL_HAVE_ENDPOINT

#include <map>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "prism/endpoint.h"
#include "transport/nccl/comm.h"

namespace prism::nccl {

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void Deliver(const Completion& c) = 0;
};

class DeviceEndpoint {
 public:
  // The device's endpoint, created on first use (counts one user; pair with
  // Release()).
  static absl::StatusOr<DeviceEndpoint*> Acquire(const DeviceContext& dev);
  void Release();

  Endpoint* ep() { return ep_.get(); }
  void AddRoute(ConnId conn, CompletionSink* sink);
  void RemoveRoute(ConnId conn);
  // Moves every available completion to its connection's sink. Returns at
  // once when another thread is polling (it delivers to every sink).
  void Poll();

  // Destroys endpoints no comm uses (called when the last init context is
  // finalized).
  static void ReleaseIdleEndpoints();

  // Tests only: endpoints created from now on come from `factory` instead
  // of Endpoint::Create (nullptr: Endpoint::Create again), e.g. a wrapper
  // that refuses chosen PostWrites. Production code never calls it; the
  // plugin library does not export it.
  using Factory =
      absl::StatusOr<std::unique_ptr<Endpoint>> (*)(const EndpointOptions&);
  static void SetFactoryForTesting(Factory factory);

 private:
  std::unique_ptr<Endpoint> ep_;
  int users_ = 0;  // guarded by the pool mutex
  std::mutex poll_mu_;
  Completion cq_[64];  // guarded by poll_mu_ (not a per-call array: Poll
                       // runs on every test() and would initialise it)
  std::mutex route_mu_;
  std::map<ConnId, CompletionSink*> routes_;
  uint64_t unrouted_ = 0;
};

}  // namespace prism::nccl

#endif  // PRISM_NCCL_HAVE_ENDPOINT
#endif  // PRISM_TRANSPORT_NCCL_ENDPOINT_POOL_H_
