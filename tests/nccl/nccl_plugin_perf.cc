// nccl_plugin_perf: bandwidth of the mini-NCCL driver through the plugin.
//
//   nccl_plugin_perf [size_bytes] [messages] [outstanding]
//
// Loads libnccl-net-prism.so like NCCL 2.28 (NCCL_NET_PLUGIN, default
// "prism"), then this process receives and an exec'd copy of itself sends
// `messages` messages of `size_bytes` with `outstanding` (<= 32) requests in
// flight, on device 0 (PRISM_* variables as for NCCL). Prints one line with
// MB/s measured at the receiver. Compare with prism_perf on the same
// datapath options (see docs/nccl.md).
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/nccl/mini_nccl.h"

namespace {

using prism::nccl_test::LoadNet;
using prism::nccl_test::Net;
using prism::nccl_test::TestLogger;

int Die(const char* what) {
  fprintf(stderr, "nccl_plugin_perf: %s\n", what);
  return 1;
}

bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= r;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool child = argc >= 2 && strcmp(argv[1], "--sender") == 0;
  const int a0 = child ? 3 : 1;
  const size_t size = argc > a0 ? strtoull(argv[a0], nullptr, 0) : 1 << 20;
  const long msgs = argc > a0 + 1 ? atol(argv[a0 + 1]) : 2000;
  int depth = argc > a0 + 2 ? atoi(argv[a0 + 2]) : 32;
  if (depth < 1 || depth > 32) depth = 32;
  const char* env = getenv("NCCL_NET_PLUGIN");
  Net net;
  std::string err;
  if (!LoadNet(env != nullptr ? env : "prism", &net, &err) ||
      net.version != 11) {
    return Die(("plugin did not load: " + err).c_str());
  }
  const PrismNcclNetV11* n = net.v11();
  void* ctx = nullptr;
  if (n->init(&ctx, 1, nullptr, TestLogger, nullptr) != 0) {
    return Die("init failed");
  }
  std::vector<char> buf(size * depth);
  char handle[kPrismNcclHandleMaxSize];

  if (child) {
    if (!ReadAll(atoi(argv[2]), handle, sizeof(handle))) {
      return Die("no handle");
    }
    void* sc = nullptr;
    while (sc == nullptr) {
      if (n->connect(ctx, 0, handle, &sc, nullptr) != 0) {
        return Die("connect");
      }
    }
    void* mh = nullptr;
    if (n->reg_mr(sc, buf.data(), buf.size(), kPrismNcclPtrHost, &mh) != 0) {
      return Die("regMr");
    }
    std::vector<void*> win(depth, nullptr);
    long posted = 0, done = 0;
    while (done < msgs) {
      bool progressed = false;
      if (posted < msgs && posted - done < depth) {
        void* r = nullptr;
        if (n->isend(sc, buf.data() + (posted % depth) * size, size, 1, mh,
                     nullptr, &r) != 0) {
          return Die("isend");
        }
        if (r != nullptr) {
          win[posted++ % depth] = r;
          progressed = true;
        }
      }
      if (done < posted) {
        int d = 0;
        if (n->test(win[done % depth], &d, nullptr) != 0) return Die("test");
        if (d) {
          ++done;
          progressed = true;
        }
      }
      if (!progressed) sched_yield();  // as NCCL's idle proxy thread does
    }
    n->dereg_mr(sc, mh);
    n->close_send(sc);
    n->finalize(ctx);
    return 0;
  }

  void* lc = nullptr;
  if (n->listen(ctx, 0, handle, &lc) != 0) return Die("listen");
  int fds[2];
  if (pipe(fds) != 0) return Die("pipe");
  const pid_t child_pid = fork();
  if (child_pid == 0) {
    const std::string fd = std::to_string(fds[0]);
    const std::string s = std::to_string(size), m = std::to_string(msgs),
                      d = std::to_string(depth);
    execl("/proc/self/exe", argv[0], "--sender", fd.c_str(), s.c_str(),
          m.c_str(), d.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (write(fds[1], handle, sizeof(handle)) != sizeof(handle)) {
    return Die("handle write");
  }
  void* rc = nullptr;
  while (rc == nullptr) {
    if (n->accept(lc, &rc, nullptr) != 0) return Die("accept");
  }
  n->close_listen(lc);
  void* mh = nullptr;
  if (n->reg_mr(rc, buf.data(), buf.size(), kPrismNcclPtrHost, &mh) != 0) {
    return Die("regMr");
  }
  std::vector<void*> win(depth, nullptr);
  long posted = 0, done = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (done < msgs) {
    bool progressed = false;
    if (posted < msgs && posted - done < depth) {
      void* data = buf.data() + (posted % depth) * size;
      size_t sz = size;
      int tag = 1;
      void* r = nullptr;
      if (n->irecv(rc, 1, &data, &sz, &tag, &mh, nullptr, &r) != 0) {
        return Die("irecv");
      }
      if (r != nullptr) {
        win[posted++ % depth] = r;
        progressed = true;
      }
    }
    if (done < posted) {
      int d = 0, got = 0;
      if (n->test(win[done % depth], &d, &got) != 0) return Die("test");
      if (d) {
        if (done == 0) t0 = std::chrono::steady_clock::now();  // warm-up
        ++done;
        progressed = true;
      }
    }
    if (!progressed) sched_yield();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  const double mb = static_cast<double>(size) * (msgs - 1) / 1e6;
  const char* dp = getenv("PRISM_DATAPATH");
  printf(
      "nccl_plugin_perf: datapath %s size %zu msgs %ld outstanding %d: "
      "%.1f MB/s (%.3f s)\n",
      dp != nullptr ? dp : "default", size, msgs, depth, mb / secs, secs);
  // The sender completes when its last WRITE is acknowledged; keep this
  // side's endpoint up until then.
  int status = 0;
  waitpid(child_pid, &status, 0);
  n->dereg_mr(rc, mh);
  n->close_recv(rc);
  n->finalize(ctx);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
