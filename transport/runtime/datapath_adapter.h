// DatapathAdapter: what the endpoint needs from a datapath beyond the burst
// interface: peer slots that are reserved when a connection is created and
// filled in when it connects, the local addresses for the connection blob,
// descriptors to sleep on, and counters.
//
// Thread safety: every method but FillStats runs on the loop thread (or
// before the loop starts). FillStats may run on any thread.
#ifndef PRISM_TRANSPORT_RUNTIME_DATAPATH_ADAPTER_H_
#define PRISM_TRANSPORT_RUNTIME_DATAPATH_ADAPTER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/endpoint.h"
#include "transport/datapath.h"
#include "transport/runtime/conn_blob.h"
#include "transport/runtime/event_loop.h"

namespace prism::runtime {

class DatapathAdapter {
 public:
  virtual ~DatapathAdapter() = default;
  virtual Datapath* datapath() = 0;
  virtual std::vector<int> wait_fds() = 0;
  // Longest the loop may sleep without a descriptor event (loopback: short,
  // since arrivals do not wake it).
  virtual Time max_sleep() const { return kMillisecond; }
  // How long the loop polls after its last useful iteration before sleeping
  // (EndpointOptions::idle_spin_us = -1).
  virtual Time idle_spin() const { return 50 * kMicrosecond; }
  virtual BlobDatapath kind() const = 0;
  // A peer slot id >= 1, or 0 when none could be made (reserve_error()
  // says why).
  virtual uint32_t ReservePeer() = 0;
  virtual absl::Status reserve_error() const {
    return absl::ResourceExhaustedError("datapath: no peer slot");
  }
  virtual absl::Status SetPeer(uint32_t id, const ConnInfoWire& remote) = 0;
  virtual void RemovePeer(uint32_t id) = 0;
  // The datapath part of the blob for peer slot `id`.
  virtual absl::Status FillLocal(uint32_t id, ConnInfoWire* w) = 0;
  virtual void FillStats(DatapathStats* s) = 0;
  // The engine's placer (EngineOptions::placer); nullptr: the engine's own
  // memcpy placer.
  virtual Placer* placer() { return nullptr; }
  // Called before the loop sleeps on wait_fds(); the loop then iterates once
  // more and sleeps only if that found nothing (verbs: arms the completion
  // channel).
  virtual bool has_arm_wait() const { return false; }
  virtual void ArmWait() {}
  // After the engine registered `mr` over `addr` (verbs: NIC registration
  // and advertisement to connected peers). An error undoes the engine's.
  virtual absl::Status RegisterMemory(const MemoryRegion& mr, void* addr) {
    (void)mr;
    (void)addr;
    return absl::OkStatus();
  }
  virtual void DeregisterMemory(uint32_t lkey) { (void)lkey; }
  // The engine connection `conn` was created on peer slot `peer`.
  virtual void BindConnection(uint32_t peer, ConnId conn) {
    (void)peer;
    (void)conn;
  }
  // Between the engine's completions and the application's (verbs: the
  // message close); nullptr: none. Owned by the adapter.
  virtual CompletionFilter* completion_filter() { return nullptr; }
  // The engine the loop drives, once it exists (udp: receive in place).
  virtual void AttachEngine(Engine* engine) { (void)engine; }
  // The fate-sharing hint for a connection of `num_paths` paths over
  // `num_planes` planes (ConnectionOptions::path_groups); empty: none
  // (udp: from the source routes, RouteFailureGroups).
  virtual std::vector<uint16_t> FailureGroups(uint16_t num_paths,
                                              uint16_t num_planes) const {
    (void)num_paths;
    (void)num_planes;
    return {};
  }
};

// The in-process datapath: every loopback endpoint of the process is a port
// of one shared loopback::LoopbackNetwork (guarded by a mutex).
absl::StatusOr<std::unique_ptr<DatapathAdapter>> MakeLoopbackAdapter(
    const EndpointOptions& options);

// libibverbs (verbs_adapter.cc, built with prism_verbs only; elsewhere
// Unimplemented).
absl::StatusOr<std::unique_ptr<DatapathAdapter>> MakeVerbsAdapter(
    const EndpointOptions& options);

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_DATAPATH_ADAPTER_H_
