// nccl_plugin_perf: bandwidth of the mini-NCCL driver through the plugin.
//
//   nccl_plugin_perf [size_bytes] [messages] [outstanding]
//
// Loads libnccl-net-prism.so like NCCL 2.28 (NCCL_NET_PLUGIN, default
// "prism"), then this process receives and an exec'd copy of itself sends
// `messages` messages of `size_bytes` with `outstanding` (<= 32) requests in
// flight, on device 0 (PRISM_* variables as for NCCL). Prints one line with
// MB/s measured at the receiver and the CPU time both processes used
// (getrusage), per MB moved. Compare with prism_perf on the same datapath
// options (tests/nccl/plugin_vs_perf.sh, docs/nccl.md).
//
// PRISM_NCCL_PERF_THREADS=1: the sender is a second thread of this process
// (its own comm and buffer on the same plugin instance, on device 1 when
// there are two, e.g. PRISM_ADDRS=127.0.0.1,127.0.0.2: its own endpoint)
// instead of an exec'd process: the thread layout of endpoint_poll_perf, the
// plugin-free baseline (two processes that sched_yield to each other pay a full
// address space switch per yield on this VM, which neither prism_perf,
// blocking, nor two NCCL nodes, on separate machines, pay).
// PRISM_NCCL_PERF_IDLE_US=N: sleep N us when a poll made no progress
// instead of sched_yield (NCCL's proxy spins; prism_perf blocks).
// PRISM_NCCL_PERF_VERIFY=1: every message carries a pattern (message index)
// checked byte by byte at the receiver. PRISM_NCCL_PERF_CUDA=1: the buffers
// are CUDA device memory (cudaMalloc through a dlopen'ed libcudart,
// registered as NCCL_PTR_CUDA), for tests/nccl/gpu_check.sh on a GPU machine.
#include <dlfcn.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/nccl/mini_nccl.h"

namespace {

using prism::nccl_test::LoadNet;
using prism::nccl_test::Net;
using prism::nccl_test::ReadAll;
using prism::nccl_test::TestLogger;

int Die(const char* what) {
  fprintf(stderr, "nccl_plugin_perf: %s\n", what);
  return 1;
}

// The CUDA runtime calls the device-buffer mode needs (looked up at run
// time: the driver never links CUDA).
struct Cuda {
  int (*set_device)(int) = nullptr;
  int (*malloc)(void**, size_t) = nullptr;
  int (*free)(void*) = nullptr;
  int (*memcpy)(void*, const void*, size_t, int) = nullptr;  // kind 4: default
  int (*synchronize)() = nullptr;
  bool Load() {
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) h = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return false;
    set_device = reinterpret_cast<int (*)(int)>(dlsym(h, "cudaSetDevice"));
    malloc = reinterpret_cast<int (*)(void**, size_t)>(dlsym(h, "cudaMalloc"));
    free = reinterpret_cast<int (*)(void*)>(dlsym(h, "cudaFree"));
    memcpy = reinterpret_cast<int (*)(void*, const void*, size_t, int)>(
        dlsym(h, "cudaMemcpy"));
    synchronize =
        reinterpret_cast<int (*)()>(dlsym(h, "cudaDeviceSynchronize"));
    return set_device && malloc && free && memcpy && synchronize;
  }
};

// Nothing progressed: sched_yield as NCCL's idle proxy thread does, or
// (PRISM_NCCL_PERF_IDLE_US > 0) sleep, so that the CPU time measured is the
// plugin's and Prism's work rather than the driver's spinning.
void Idle(long idle_us) {
  if (idle_us > 0) {
    usleep(static_cast<useconds_t>(idle_us));
  } else {
    sched_yield();
  }
}

// Runs one plugin call, adding its duration to *ns and one to *calls.
template <typename Fn>
int Timed(int64_t* ns, int64_t* calls, Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  const int r = fn();
  *ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now() - t0)
             .count();
  ++*calls;
  return r;
}

bool EnvOn(const char* name) {
  const char* v = getenv(name);
  return v != nullptr && strcmp(v, "1") == 0;
}

double CpuSeconds(int who) {
  rusage ru{};
  getrusage(who, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
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
  const bool verify = EnvOn("PRISM_NCCL_PERF_VERIFY");
  const char* idle_env = getenv("PRISM_NCCL_PERF_IDLE_US");
  const long idle_us = idle_env != nullptr ? atol(idle_env) : 0;
  const bool cuda = EnvOn("PRISM_NCCL_PERF_CUDA");
  std::vector<char> host(size * depth);
  char* buf = host.data();
  int ptr_type = kPrismNcclPtrHost;
  Cuda cu;
  if (cuda) {
    void* d = nullptr;
    if (!cu.Load() || cu.set_device(0) != 0 ||
        cu.malloc(&d, host.size() > 0 ? host.size() : 1) != 0) {
      return Die("PRISM_NCCL_PERF_CUDA=1: no CUDA runtime or device");
    }
    PrismNcclPropertiesV11 props;
    if (n->get_properties(0, &props) != 0 ||
        (props.ptr_support & kPrismNcclPtrCuda) == 0) {
      return Die("PRISM_NCCL_PERF_CUDA=1: ptrSupport has no NCCL_PTR_CUDA");
    }
    buf = static_cast<char*>(d);
    ptr_type = kPrismNcclPtrCuda;
  }
  // Message m's bytes: a pattern of (m, offset), written into the buffer
  // (through cudaMemcpy for device memory) and checked at the receiver.
  std::vector<uint8_t> pat(verify ? size : 0);

  long bad = 0;
  auto check = [&](long m, const char* src, int got) {
    if (got != static_cast<int>(size)) return false;
    if (cuda) {
      if (cu.memcpy(pat.data(), src, size, 4) != 0) return false;
      src = reinterpret_cast<const char*>(pat.data());
    }
    return prism::nccl_test::CheckPattern(reinterpret_cast<const uint8_t*>(src),
                                          size, 5, m, 0) == -1;
  };
  char handle[kPrismNcclHandleMaxSize];
  int64_t in_plugin = 0, calls = 0;  // ns inside isend/irecv/test, calls

  // The sender: connects with `handle`, sends `msgs` messages, and prints
  // its in-plugin time and driver thread CPU. Returns 0 or 1.
  auto run_sender = [&](const char* handle_in) -> int {
    char* sbuf = buf;
    std::vector<char> own;
    if (!child) {  // a thread of the receiver's process: its own buffer
      own.resize(host.size());
      sbuf = own.data();
      if (cuda) {
        void* d = nullptr;
        if (cu.malloc(&d, own.size() > 0 ? own.size() : 1) != 0) {
          return Die("cudaMalloc");
        }
        sbuf = static_cast<char*>(d);
      }
    }
    char h[kPrismNcclHandleMaxSize];
    memcpy(h, handle_in, sizeof(h));
    // Its own pattern buffer (the receiver's `check` uses `pat`).
    std::vector<uint8_t> spat(verify ? size : 0);
    auto sfill = [&](long m, char* dst) {
      prism::nccl_test::FillPattern(spat.data(), size, 5, m, 0);
      // cudaMemcpy from pageable memory may return before the DMA into the
      // device buffer is done; the plugin copies it out on a stream of its
      // own, so the data must be there first (as NCCL's kernel has finished
      // writing a buffer before its proxy calls isend).
      if (cuda) {
        return cu.memcpy(dst, spat.data(), size, 4) == 0 &&
               cu.synchronize() == 0;
      }
      memcpy(dst, spat.data(), size);
      return true;
    };
    int64_t s_in_plugin = 0, s_calls = 0;
    // A thread sender uses device 1 where there is one (PRISM_ADDRS with
    // two addresses): its own Prism endpoint and loop thread, as a separate
    // process (and endpoint_poll_perf's sender) has.
    int ndev = 0;
    if (n->devices(&ndev) != 0) return Die("devices");
    const int sdev = !child && ndev >= 2 ? 1 : 0;
    void* sc = nullptr;
    while (sc == nullptr) {
      if (n->connect(ctx, sdev, h, &sc, nullptr) != 0) {
        return Die("connect");
      }
    }
    void* mh = nullptr;
    if (n->reg_mr(sc, sbuf, host.size(), ptr_type, &mh) != 0) {
      return Die("regMr");
    }
    std::vector<void*> win(depth, nullptr);
    long posted = 0, done = 0;
    while (done < msgs) {
      bool progressed = false;
      if (posted < msgs && posted - done < depth) {
        void* r = nullptr;
        char* slot = sbuf + (posted % depth) * size;
        if (verify && !sfill(posted, slot)) return Die("fill");
        if (Timed(&s_in_plugin, &s_calls, [&] {
              return n->isend(sc, slot, size, 1, mh, nullptr, &r);
            }) != 0) {
          return Die("isend");
        }
        if (r != nullptr) {
          win[posted++ % depth] = r;
          progressed = true;
        }
      }
      if (done < posted) {
        int d = 0;
        if (Timed(&s_in_plugin, &s_calls, [&] {
              return n->test(win[done % depth], &d, nullptr);
            }) != 0) {
          return Die("test");
        }
        if (d) {
          ++done;
          progressed = true;
        }
      }
      if (!progressed) Idle(idle_us);
    }
    // This thread's CPU: the driver's own work, the plugin calls and the
    // polling between them (the endpoint's loop thread is not included).
    printf(
        "nccl_plugin_perf: sender in plugin calls %.3f s (%lld calls), "
        "sender driver thread cpu %.3f s\n",
        s_in_plugin / 1e9, static_cast<long long>(s_calls),
        CpuSeconds(RUSAGE_THREAD));
    fflush(stdout);
    n->dereg_mr(sc, mh);
    n->close_send(sc);
    if (cuda && sbuf != buf) cu.free(sbuf);
    return 0;
  };

  if (child) {
    if (!ReadAll(atoi(argv[2]), handle, sizeof(handle))) {
      return Die("no handle");
    }
    const int rc = run_sender(handle);
    n->finalize(ctx);
    if (cuda) cu.free(buf);
    return rc;
  }

  void* lc = nullptr;
  if (n->listen(ctx, 0, handle, &lc) != 0) return Die("listen");
  const bool threads = EnvOn("PRISM_NCCL_PERF_THREADS");
  std::thread sender_thread;
  int sender_rc = 0;
  int fds[2];
  if (threads) {
    sender_thread = std::thread([&] { sender_rc = run_sender(handle); });
  } else if (pipe(fds) != 0) {
    return Die("pipe");
  }
  const pid_t child_pid = threads ? -1 : fork();
  if (child_pid == 0) {
    const std::string fd = std::to_string(fds[0]);
    const std::string s = std::to_string(size), m = std::to_string(msgs),
                      d = std::to_string(depth);
    execl("/proc/self/exe", argv[0], "--sender", fd.c_str(), s.c_str(),
          m.c_str(), d.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (!threads && write(fds[1], handle, sizeof(handle)) != sizeof(handle)) {
    return Die("handle write");
  }
  void* rc = nullptr;
  while (rc == nullptr) {
    if (n->accept(lc, &rc, nullptr) != 0) return Die("accept");
  }
  n->close_listen(lc);
  void* mh = nullptr;
  if (n->reg_mr(rc, buf, host.size(), ptr_type, &mh) != 0) {
    return Die("regMr");
  }
  std::vector<void*> win(depth, nullptr);
  long posted = 0, done = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (done < msgs) {
    bool progressed = false;
    if (posted < msgs && posted - done < depth) {
      void* data = buf + (posted % depth) * size;
      size_t sz = size;
      int tag = 1;
      void* r = nullptr;
      if (Timed(&in_plugin, &calls, [&] {
            return n->irecv(rc, 1, &data, &sz, &tag, &mh, nullptr, &r);
          }) != 0) {
        return Die("irecv");
      }
      if (r != nullptr) {
        win[posted++ % depth] = r;
        progressed = true;
      }
    }
    if (done < posted) {
      int d = 0, got = 0;
      if (Timed(&in_plugin, &calls,
                [&] { return n->test(win[done % depth], &d, &got); }) != 0) {
        return Die("test");
      }
      if (d) {
        if (done == 0) t0 = std::chrono::steady_clock::now();  // warm-up
        if (verify && !check(done, buf + (done % depth) * size, got)) ++bad;
        ++done;
        progressed = true;
      }
    }
    if (!progressed) Idle(idle_us);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  const double mb = static_cast<double>(size) * (msgs - 1) / 1e6;
  const double driver_cpu = CpuSeconds(RUSAGE_THREAD);
  // The sender completes when its last WRITE is acknowledged; keep this
  // side's endpoint up until then.
  int status = 0;
  if (threads) {
    sender_thread.join();
  } else {
    waitpid(child_pid, &status, 0);
  }
  n->dereg_mr(rc, mh);
  n->close_recv(rc);
  n->finalize(ctx);
  if (cuda) cu.free(buf);
  // CPU of both processes over the whole run (setup included), per MB.
  const double cpu = CpuSeconds(RUSAGE_SELF) + CpuSeconds(RUSAGE_CHILDREN);
  const char* dp = getenv("PRISM_DATAPATH");
  printf(
      "nccl_plugin_perf: datapath %s%s size %zu msgs %ld outstanding %d: "
      "%.1f MB/s (%.3f s), cpu %.3f s = %.1f us/MB (receiver in plugin "
      "calls %.3f s (%lld calls), receiver driver thread %.3f s)%s\n",
      dp != nullptr ? dp : "default", cuda ? " (CUDA buffers)" : "", size, msgs,
      depth, mb / secs, secs, cpu,
      cpu * 1e6 / (static_cast<double>(size) * msgs / 1e6), in_plugin / 1e9,
      static_cast<long long>(calls), driver_cpu,
      verify ? (bad == 0 ? ", verified" : ", VERIFY FAILED") : "");
  if (bad != 0) {
    fprintf(stderr, "nccl_plugin_perf: %ld messages had wrong bytes\n", bad);
    return 1;
  }
  if (threads) return sender_rc;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
