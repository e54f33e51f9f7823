// Non-blocking TCP helpers for the plugin's side channel.
//
// Every call returns immediately: NCCL drives connection setup and data by
// polling, so nothing here may block. Sockets are created O_NONBLOCK |
// O_CLOEXEC with TCP_NODELAY; writes use MSG_NOSIGNAL (a dead peer is an
// error, never a SIGPIPE).
//
// Thread safety: functions are stateless; a descriptor is used by one thread
// at a time (the owning comm's mutex).
#ifndef PRISM_TRANSPORT_NCCL_SOCKET_H_
#define PRISM_TRANSPORT_NCCL_SOCKET_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace prism::nccl {

// Outcome of one non-blocking transfer attempt.
enum class Io {
  kOk,      // moved >= 1 byte (see *moved), or nothing was asked
  kAgain,   // would block; moved nothing
  kClosed,  // peer closed the connection (orderly EOF)
  kError,   // socket error (errno preserved in *err)
};

// Listening socket bound to `addr` (port taken from it, 0 = ephemeral);
// returns the fd and writes the bound address into *bound.
absl::StatusOr<int> TcpListen(const sockaddr_storage& addr, socklen_t len,
                              sockaddr_storage* bound, socklen_t* bound_len);
// Starts a non-blocking connect; the fd is writable once connected.
absl::StatusOr<int> TcpConnectStart(const sockaddr_storage& addr, socklen_t len,
                                    int sock_buf_bytes);
// Connect progress: Io::kOk once connected, kAgain while pending, kError if
// it failed (*err = errno of the failure).
Io TcpConnectPoll(int fd, int* err);
// Accepts one pending connection: fd >= 0, or -1 with Io::kAgain / kError.
int TcpAccept(int listen_fd, int sock_buf_bytes, Io* io, int* err);

Io SendSome(int fd, const void* data, size_t len, size_t* moved, int* err);
Io RecvSome(int fd, void* data, size_t len, size_t* moved, int* err);

void CloseFd(int fd);

}  // namespace prism::nccl

#endif  // PRISM_TRANSPORT_NCCL_SOCKET_H_
