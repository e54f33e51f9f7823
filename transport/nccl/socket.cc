#include "transport/nccl/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prism::nccl {
namespace {

void Tune(int fd, int sock_buf_bytes) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (sock_buf_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sock_buf_bytes,
               sizeof(sock_buf_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sock_buf_bytes,
               sizeof(sock_buf_bytes));
  }
}

}  // namespace

absl::StatusOr<int> TcpListen(const sockaddr_storage& addr, socklen_t len,
                              sockaddr_storage* bound, socklen_t* bound_len) {
  const int fd =
      socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 ||
      listen(fd, 128) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("bind/listen: ", strerror(e)));
  }
  *bound_len = sizeof(*bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(bound), bound_len) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("getsockname: ", strerror(e)));
  }
  return fd;
}

absl::StatusOr<int> TcpConnectStart(const sockaddr_storage& addr, socklen_t len,
                                    int sock_buf_bytes) {
  const int fd =
      socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  Tune(fd, sock_buf_bytes);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 &&
      errno != EINPROGRESS) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", strerror(e)));
  }
  return fd;
}

Io TcpConnectPoll(int fd, int* err) {
  pollfd p{fd, POLLOUT, 0};
  const int r = poll(&p, 1, 0);
  if (r < 0) {
    *err = errno;
    return errno == EINTR ? Io::kAgain : Io::kError;
  }
  if (r == 0) return Io::kAgain;
  int so_error = 0;
  socklen_t l = sizeof(so_error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &l) != 0) {
    *err = errno;
    return Io::kError;
  }
  if (so_error != 0) {
    *err = so_error;
    return Io::kError;
  }
  return Io::kOk;
}

int TcpAccept(int listen_fd, int sock_buf_bytes, Io* io, int* err) {
  const int fd =
      accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    const bool again = errno == EAGAIN || errno == EWOULDBLOCK ||
                       errno == EINTR || errno == ECONNABORTED;
    *io = again ? Io::kAgain : Io::kError;
    return -1;
  }
  Tune(fd, sock_buf_bytes);
  *io = Io::kOk;
  return fd;
}

Io SendSome(int fd, const void* data, size_t len, size_t* moved, int* err) {
  *moved = 0;
  if (len == 0) return Io::kOk;
  const ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n > 0) {
    *moved = static_cast<size_t>(n);
    return Io::kOk;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return Io::kAgain;
  }
  *err = n < 0 ? errno : EPIPE;
  return Io::kError;
}

Io RecvSome(int fd, void* data, size_t len, size_t* moved, int* err) {
  *moved = 0;
  if (len == 0) return Io::kOk;
  const ssize_t n = recv(fd, data, len, MSG_DONTWAIT);
  if (n > 0) {
    *moved = static_cast<size_t>(n);
    return Io::kOk;
  }
  if (n == 0) return Io::kClosed;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    return Io::kAgain;
  }
  *err = errno;
  return Io::kError;
}

void CloseFd(int fd) {
  if (fd >= 0) close(fd);
}

}  // namespace prism::nccl
