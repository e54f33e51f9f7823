#include "transport/runtime/event_loop.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace prism::runtime {
namespace {

// A WRITE's error that means it was flushed (its connection failed, was
// closed, or is gone), as opposed to one rejected on a live connection
// (bad lkey, local range): the two are ordered differently (Iterate).
bool IsFlushCode(absl::StatusCode code) {
  return code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kCancelled ||
         code == absl::StatusCode::kNotFound;
}

}  // namespace

Time MonotonicNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Time>(ts.tv_sec) * kSecond +
         static_cast<Time>(ts.tv_nsec) * kNanosecond;
}

EventLoop::EventLoop(Engine* engine, Datapath* datapath,
                     const LoopOptions& options)
    : engine_(engine), dp_(datapath), opt_(options) {
  if (opt_.cq_capacity == 0) opt_.cq_capacity = 1;
  // Start small (an endpoint whose application keeps up never needs more)
  // and double on demand up to the power of two at or above cq_capacity.
  size_t initial = 1;
  while (initial < std::min<size_t>(opt_.cq_capacity, 1024)) initial <<= 1;
  cq_buf_.resize(initial);
}

EventLoop::~EventLoop() {
  Stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::Status EventLoop::Start() {
  if (running_.load()) return absl::FailedPreconditionError("loop running");
  if (epoll_fd_ < 0) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0)
      return absl::InternalError(
          absl::StrCat("epoll/eventfd: ", strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    for (int fd : opt_.wait_fds) {
      ev.data.fd = fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
        return absl::InternalError(
            absl::StrCat("epoll_ctl: ", strerror(errno)));
    }
  }
  stop_.store(false);
  running_.store(true);
  thread_ = std::thread([this] { ThreadMain(); });
  loop_id_.store(thread_.get_id());
  return absl::OkStatus();
}

void EventLoop::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  Wake();
  thread_.join();
  running_.store(false);
  loop_id_.store(std::thread::id());
  // Release callers still waiting on commands (the loop will not run them).
  std::lock_guard<std::mutex> l(cmd_mu_);
  for (Command* c : cmds_) {
    (*c->fn)(MonotonicNow());
    c->done = true;
  }
  cmds_.clear();
  cmd_cv_.notify_all();
}

void EventLoop::Wake() {
  if (wake_fd_ < 0) return;
  // One eventfd write per sleep: submitters that find the loop still
  // asleep after another one woke it skip the syscall.
  if (sleeping_.load() && !wake_sent_.exchange(true)) {
    uint64_t one = 1;
    ssize_t r = write(wake_fd_, &one, sizeof(one));
    (void)r;
    loop_wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
}

void EventLoop::Run(const std::function<void(Time)>& fn) {
  if (!running_.load() || std::this_thread::get_id() == loop_id_.load()) {
    fn(MonotonicNow());
    return;
  }
  Command cmd{&fn};
  std::unique_lock<std::mutex> l(cmd_mu_);
  if (!running_.load()) {
    l.unlock();
    fn(MonotonicNow());
    return;
  }
  cmds_.push_back(&cmd);
  has_cmds_.store(true);
  Wake();
  cmd_cv_.wait(l, [&] { return cmd.done; });
}

void EventLoop::ConnectionClosed(ConnId conn) {
  // WRITEs posted before the close may still be in the submission queue:
  // take them first (Iterate does the same, in the same order).
  {
    std::lock_guard<std::mutex> l(sq_mu_);
    for (auto& s : sq_) pending_.push_back(s);
    sq_.clear();
  }
  // The engine's completions of the connection (its kCancelled WRITEs; a
  // kConnectionError it had not yet given out) are the last it queued:
  // the loop's go after them.
  const uint64_t mark = engine_polled_ + engine_->CompletionsQueued();
  absl::StatusCode code = absl::StatusCode::kCancelled;
  auto f = std::find(failed_.begin(), failed_.end(), conn);
  if (f != failed_.end()) {
    code = absl::StatusCode::kAborted;  // it had failed first
    failed_.erase(f);
  }
  for (Submit& s : pending_) {
    if (s.conn != conn) continue;
    if (s.held) {
      // Rejected before the close, waiting for earlier WRITEs: those now
      // complete (kCancelled) among the engine's queued completions; its
      // own error goes after them.
      s.held = false;
      s.release_at = mark;
      continue;
    }
    if (s.error != absl::StatusCode::kOk) continue;
    s.error = code;
    s.release_at = mark;
  }
  writes_.erase(conn);
  if (mark > engine_polled_) closed_.push_back(Closed{conn, mark});
  parked_.erase(std::remove(parked_.begin(), parked_.end(), conn),
                parked_.end());
}

bool EventLoop::HeldBehindEarlierWrites(const Submit& s) const {
  if (!s.held) return false;
  const auto w = writes_.find(s.conn);
  if (w != writes_.end() && w->second.completed < s.after_writes) return true;
  return opt_.completion_filter != nullptr &&
         opt_.completion_filter->HoldsWrites(s.conn);
}

void EventLoop::NoteEngineCompletions(const Completion* c, size_t n) {
  engine_polled_ += n;
  for (size_t i = 0; i < n; ++i) {
    if (c[i].type == CompletionType::kWrite) {
      const auto w = writes_.find(c[i].conn);
      if (w != writes_.end()) ++w->second.completed;
      continue;
    }
    if (c[i].type != CompletionType::kConnectionError) continue;
    const ConnId conn = c[i].conn;
    bool closed = false;
    for (const Closed& x : closed_) closed |= x.conn == conn;
    if (!closed) {
      if (std::find(failed_.begin(), failed_.end(), conn) == failed_.end())
        failed_.push_back(conn);
      continue;
    }
    // Closed after it failed, before the loop saw the failure: its WRITEs
    // still here were flushed by the failure, not cancelled by the close.
    for (Submit& s : pending_) {
      if (s.conn == conn && s.error == absl::StatusCode::kCancelled)
        s.error = absl::StatusCode::kAborted;
    }
  }
  if (!closed_.empty()) {
    closed_.erase(std::remove_if(closed_.begin(), closed_.end(),
                                 [&](const Closed& x) {
                                   return x.release_at <= engine_polled_;
                                 }),
                  closed_.end());
  }
}

bool EventLoop::EmitFlushed(const Completion& c) {
  if (opt_.completion_filter == nullptr) return PushCompletions(&c, 1);
  opt_.completion_filter->Offer(&c, 1);
  ++filter_held_;
  return false;
}

absl::Status EventLoop::Post(ConnId conn, const WriteRequest& req) {
  if (queued_.load(std::memory_order_relaxed) >= opt_.submit_queue_size)
    return absl::ResourceExhaustedError("submission queue full");
  // Reserve the WRITE's place in the completion queue (released when the
  // application polls its kWrite completion), so one that never polls is
  // told so here instead of piling WRITEs up behind a full queue.
  uint64_t used = cq_used_.load(std::memory_order_relaxed);
  do {
    if (used >= opt_.cq_capacity) {
      writes_refused_cq_full_.fetch_add(1, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(absl::StrCat(
          "completion queue full: ", used,
          " unpolled completions + outstanding WRITEs >= cq_capacity ",
          opt_.cq_capacity, "; poll completions, then post again"));
    }
  } while (!cq_used_.compare_exchange_weak(used, used + 1,
                                           std::memory_order_relaxed));
  {
    std::lock_guard<std::mutex> l(sq_mu_);
    sq_.push_back(Submit{conn, req});
  }
  queued_.fetch_add(1, std::memory_order_relaxed);
  Wake();
  return absl::OkStatus();
}

size_t EventLoop::PopLocked(Completion* out, size_t max) {
  const size_t n = std::min(max, cq_size_);
  const size_t mask = cq_buf_.size() - 1;
  for (size_t i = 0; i < n; ++i) out[i] = cq_buf_[(cq_head_ + i) & mask];
  cq_head_ = (cq_head_ + n) & mask;
  cq_size_ -= n;
  if (n > 0) {
    cq_used_.fetch_sub(n, std::memory_order_relaxed);
    cq_depth_.store(cq_size_, std::memory_order_relaxed);
  }
  return n;
}

void EventLoop::AfterPop(size_t n) {
  // The loop sets cq_stalled_ before it sleeps and re-checks the room
  // after announcing the sleep (Sleep), so either it sees this room or
  // Wake() sees it asleep: no lost wake-up.
  if (n > 0 && cq_stalled_.load() && cq_stalled_.exchange(false)) Wake();
}

size_t EventLoop::Poll(Completion* out, size_t max) {
  size_t n;
  {
    std::lock_guard<std::mutex> l(cq_mu_);
    n = PopLocked(out, max);
  }
  AfterPop(n);
  return n;
}

size_t EventLoop::Wait(Completion* out, size_t max, Time timeout) {
  size_t n;
  {
    std::unique_lock<std::mutex> l(cq_mu_);
    if (cq_size_ == 0 && timeout > 0) {
      ++cq_waiters_;
      cq_cv_.wait_for(l, std::chrono::nanoseconds(timeout / kNanosecond),
                      [&] { return cq_size_ != 0; });
      --cq_waiters_;
    }
    n = PopLocked(out, max);
  }
  AfterPop(n);
  return n;
}

LoopCounters EventLoop::counters() const {
  LoopCounters c;
  c.iterations = iterations_.load(std::memory_order_relaxed);
  c.sleeps = sleeps_.load(std::memory_order_relaxed);
  c.stalls = stalls_.load(std::memory_order_relaxed);
  c.stall_time = stall_time_.load(std::memory_order_relaxed);
  c.max_gap = max_gap_.load(std::memory_order_relaxed);
  c.tx_deferred = tx_deferred_.load(std::memory_order_relaxed);
  c.writes_deferred = writes_deferred_.load(std::memory_order_relaxed);
  c.loop_wakeups = loop_wakeups_.load(std::memory_order_relaxed);
  c.app_wakeups = app_wakeups_.load(std::memory_order_relaxed);
  c.writes_refused_cq_full =
      writes_refused_cq_full_.load(std::memory_order_relaxed);
  c.cq_full_stalls = cq_full_stalls_.load(std::memory_order_relaxed);
  c.cq_depth = cq_depth_.load(std::memory_order_relaxed);
  c.cq_peak = cq_peak_.load(std::memory_order_relaxed);
  return c;
}

void EventLoop::ThreadMain() {
  loop_id_.store(std::this_thread::get_id());
  if (opt_.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(opt_.cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  Time last_work = MonotonicNow();
  Time prev = last_work;
  while (!stop_.load(std::memory_order_relaxed)) {
    const Time now = MonotonicNow();
    const Time gap = now - prev;
    prev = now;
    if (gap > max_gap_.load(std::memory_order_relaxed))
      max_gap_.store(gap, std::memory_order_relaxed);
    if (gap > kStallGap) {
      stalls_.store(stalls_.load(std::memory_order_relaxed) + 1,
                    std::memory_order_relaxed);
      stall_time_.store(stall_time_.load(std::memory_order_relaxed) + gap,
                        std::memory_order_relaxed);
    }
    iterations_.store(iterations_.load(std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
    if (Iterate(now)) {
      last_work = now;
      continue;
    }
    if (opt_.busy_poll || now - last_work < opt_.spin) continue;
    Sleep(now);
  }
}

void EventLoop::Sleep(Time now) {
  const Time next = engine_->NextEventTime();
  Time wait = opt_.max_sleep;
  if (next != kTimeInfinite) wait = std::min(wait, next - now);
  if (tx_pending_ > 0) wait = std::min<Time>(wait, 20 * kMicrosecond);
  if (wait <= 2 * kMicrosecond) return;  // too short to sleep: spin
  if (opt_.arm_wait) {
    opt_.arm_wait();
    if (Iterate(MonotonicNow())) return;
  }
  wake_sent_.store(false);
  sleeping_.store(true);
  // Re-check after announcing the sleep (pairs with Wake(); for the
  // completion queue, with AfterPop()).
  bool work = has_cmds_.load() || queued_.load() > pending_.size() ||
              (room_stalled_ && CqRoom() > 0);
  if (!work) {
    timespec ts{static_cast<time_t>(wait / kSecond),
                static_cast<long>((wait % kSecond) / kNanosecond)};
    epoll_event evs[8];
    int n = epoll_pwait2(epoll_fd_, evs, 8, &ts, nullptr);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == wake_fd_) {
        uint64_t v;
        ssize_t r = read(wake_fd_, &v, sizeof(v));
        (void)r;
      }
    }
    sleeps_.store(sleeps_.load(std::memory_order_relaxed) + 1,
                  std::memory_order_relaxed);
  }
  sleeping_.store(false);
}

size_t EventLoop::CqQueued() {
  std::lock_guard<std::mutex> l(cq_mu_);
  return cq_size_;
}

size_t EventLoop::CqRoom() {
  size_t used;
  {
    std::lock_guard<std::mutex> l(cq_mu_);
    used = cq_size_ + filter_held_;
  }
  return used >= opt_.cq_capacity ? 0 : opt_.cq_capacity - used;
}

bool EventLoop::PushCompletions(const Completion* c, size_t n) {
  std::lock_guard<std::mutex> l(cq_mu_);
  if (cq_size_ + n > cq_buf_.size()) {
    // Double (the callers keep cq_size_ <= cq_capacity, so this stops at
    // the power of two at or above it), unrolling the ring in place.
    size_t cap = cq_buf_.size();
    while (cap < cq_size_ + n) cap <<= 1;
    std::vector<Completion> grown(cap);
    const size_t mask = cq_buf_.size() - 1;
    for (size_t i = 0; i < cq_size_; ++i)
      grown[i] = cq_buf_[(cq_head_ + i) & mask];
    cq_buf_.swap(grown);
    cq_head_ = 0;
  }
  const size_t mask = cq_buf_.size() - 1;
  uint64_t fresh = 0;  // completions that held no reservation
  for (size_t i = 0; i < n; ++i) {
    cq_buf_[(cq_head_ + cq_size_ + i) & mask] = c[i];
    fresh += c[i].type != CompletionType::kWrite;
  }
  cq_size_ += n;
  if (fresh > 0) cq_used_.fetch_add(fresh, std::memory_order_relaxed);
  cq_depth_.store(cq_size_, std::memory_order_relaxed);
  if (cq_size_ > cq_peak_.load(std::memory_order_relaxed))
    cq_peak_.store(cq_size_, std::memory_order_relaxed);
  return cq_waiters_ > 0;
}

bool EventLoop::Iterate(Time now) {
  bool work = false;
  // A thread blocked in Wait is notified once per iteration, after the
  // lock is released (a waiter woken under the lock would block on it
  // again: two context switches instead of one).
  bool notify = false;
  // 1. Control calls.
  if (has_cmds_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> l(cmd_mu_);
    for (Command* c : cmds_) {
      (*c->fn)(now);
      c->done = true;
    }
    cmds_.clear();
    has_cmds_.store(false);
    cmd_cv_.notify_all();
    work = true;
  }
  // Submissions: first those kept from earlier iterations, then new ones.
  {
    std::lock_guard<std::mutex> l(sq_mu_);
    sq_local_.swap(sq_);
  }
  if (!sq_local_.empty()) {
    for (auto& s : sq_local_) pending_.push_back(s);
    sq_local_.clear();
  }
  bool out_of_room = false;
  if (!pending_.empty()) {
    blocked_.clear();
    size_t taken = 0;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (std::find(blocked_.begin(), blocked_.end(), it->conn) !=
          blocked_.end()) {
        ++it;
        continue;
      }
      if (it->error == absl::StatusCode::kOk &&
          std::find(failed_.begin(), failed_.end(), it->conn) !=
              failed_.end()) {
        // Its connection failed and the engine's completions of it (its
        // kConnectionError last) have left the engine: flushed.
        it->error = absl::StatusCode::kAborted;
      }
      if (it->error == absl::StatusCode::kOk &&
          (engine_cq_full_ || std::find(parked_.begin(), parked_.end(),
                                        it->conn) != parked_.end())) {
        // Parked: the engine refused and nothing that could change its
        // answer has happened since (see step 4).
        blocked_.push_back(it->conn);
        ++it;
        continue;
      }
      if (it->error != absl::StatusCode::kOk &&
          (engine_polled_ < it->release_at || HeldBehindEarlierWrites(*it))) {
        // Its closed connection's own completions are still in the engine,
        // or (held) its connection's earlier WRITEs have not completed.
        blocked_.push_back(it->conn);
        ++it;
        continue;
      }
      absl::Status s = it->error != absl::StatusCode::kOk
                           ? absl::Status(it->error, "")
                           : engine_->PostWrite(now, it->conn, it->req);
      if (absl::IsResourceExhausted(s) && it->error == absl::StatusCode::kOk) {
        // Refused for want of a completion slot (the engine's whole queue:
        // every connection's WRITEs wait) or for the connection's
        // max_outstanding_messages (only its own). Either way only
        // completions leaving the engine (step 4) make room, so the WRITE
        // is parked until then rather than retried every iteration (each
        // retry would count another engine writes_refused_cq_full).
        blocked_.push_back(it->conn);
        writes_deferred_.store(
            writes_deferred_.load(std::memory_order_relaxed) + 1,
            std::memory_order_relaxed);
        if (engine_->CompletionQueueFull()) {
          engine_cq_full_ = true;
        } else {
          parked_.push_back(it->conn);
        }
        ++it;
        continue;
      }
      if (absl::IsAborted(s) && it->error == absl::StatusCode::kOk) {
        // The connection failed; its flushed WRITEs and kConnectionError
        // are still in the engine. This one completes (kAborted) after
        // them: parked until completions leave the engine.
        blocked_.push_back(it->conn);
        parked_.push_back(it->conn);
        ++it;
        continue;
      }
      if (s.ok()) ++writes_[it->conn].accepted;
      if (!s.ok() && it->error == absl::StatusCode::kOk &&
          !IsFlushCode(s.code())) {
        // Rejected on a live connection (bad lkey, local range): behind
        // the connection's earlier WRITEs, in posting order (Submit::held).
        // Later WRITEs of the connection wait behind it.
        const auto w = writes_.find(it->conn);
        it->error = s.code();
        it->after_writes = w == writes_.end() ? 0 : w->second.accepted;
        it->held = true;
        if (HeldBehindEarlierWrites(*it)) {
          blocked_.push_back(it->conn);
          ++it;
          continue;
        }
      }
      if (!s.ok()) {
        if (CqRoom() == 0) {
          // Its error completion waits for room (in order: later WRITEs
          // of the connection wait behind it).
          it->error = s.code();
          blocked_.push_back(it->conn);
          out_of_room = true;
          ++it;
          continue;
        }
        Completion c;
        c.type = CompletionType::kWrite;
        c.status = s.code();
        c.conn = it->conn;
        c.wr_id = it->req.wr_id;
        c.byte_len = it->req.length;
        c.remote_addr = it->req.remote_addr;
        if (IsFlushCode(s.code())) {
          // Flushed by a failure or a close (or for a connection gone):
          // behind the engine's own completions, which may still sit in
          // the filter. (An error for a WRITE on a live connection, e.g. a
          // bad lkey, goes straight to the queue: through the verbs
          // filter it would release the connection's held completions
          // before their message close.)
          notify |= EmitFlushed(c);
        } else {
          notify |= PushCompletions(&c, 1);
        }
      }
      it = pending_.erase(it);
      ++taken;
    }
    if (taken) {
      queued_.fetch_sub(taken, std::memory_order_relaxed);
      work = true;
    }
  }
  // 2. Receive: drain what has arrived (up to kRxRounds bursts) before the
  // timers run, so acknowledgements that sat in the socket while this
  // thread was descheduled count before a tail-loss probe or RTO fires.
  for (int round = 0; round < kRxRounds; ++round) {
    const size_t n = dp_->RxBurst(now, rx_, kBurst);
    if (n == 0) break;
    engine_->OnReceive(now, rx_, n);
    work = true;
    if (n < kBurst) break;
  }
  // 3. Transmit.
  for (int round = 0; round < kTxRounds; ++round) {
    size_t got = 0;
    if (tx_pending_ < kTxBurst) {
      got =
          engine_->PollTransmit(now, tx_ + tx_pending_, kTxBurst - tx_pending_);
      tx_pending_ += got;
    }
    if (tx_pending_ == 0) break;
    const size_t sent = dp_->TxBurst(now, tx_, tx_pending_);
    if (sent > 0) work = true;
    if (sent < tx_pending_) {
      memmove(static_cast<void*>(tx_), tx_ + sent,
              (tx_pending_ - sent) * sizeof(TxPacket));
      tx_deferred_.store(
          tx_deferred_.load(std::memory_order_relaxed) + (tx_pending_ - sent),
          std::memory_order_relaxed);
    }
    tx_pending_ -= sent;
    if (sent == 0 || got == 0) break;
  }
  // 4. Completions, as far as the queue has room (it only grows while this
  // runs: the application takes, the loop alone adds). Engine completions
  // left behind keep the engine's queue occupied, which is what engages its
  // backpressure; its PollCompletions, called as soon as room appears,
  // resumes the deliveries it held.
  size_t room = CqRoom();
  if (room == 0 && filter_held_ > 0 && CqQueued() == 0) {
    // The filter holds all the room and the application has nothing to
    // poll, so polling cannot free any: what would release the held ones
    // (a kConnectionError: verbs ReleaseAll) may be behind them in the
    // engine. Let a burst through; the filter may then hold more than
    // cq_capacity, but the queue itself stays within it (below).
    room = kBurst;
  }
  while (room > 0) {
    const size_t want = std::min(room, kBurst);
    const size_t k = engine_->PollCompletions(comp_, want);
    if (k == 0) break;
    work = true;
    NoteEngineCompletions(comp_, k);
    // Room in the engine's queue (and, for a kWrite, a connection's
    // outstanding count may have dropped; or a failed connection's
    // kConnectionError came out): parked WRITEs try again.
    engine_cq_full_ = false;
    parked_.clear();
    room -= k;
    if (opt_.completion_filter != nullptr) {
      opt_.completion_filter->Offer(comp_, k);
      filter_held_ += k;
    } else {
      notify |= PushCompletions(comp_, k);
    }
    if (k < want) break;
  }
  if (room == 0) out_of_room = true;
  // Completions the filter releases now (also when the engine had none:
  // what releases them may have arrived in this iteration's receive), as
  // many as the queue has room for (all of them, but for the case above);
  // the rest stay in the filter's own ready list.
  if (opt_.completion_filter != nullptr) {
    const size_t queued = CqQueued();
    size_t fit = queued >= opt_.cq_capacity ? 0 : opt_.cq_capacity - queued;
    while (fit > 0) {
      const size_t want = std::min(fit, kBurst);
      const size_t k = opt_.completion_filter->Poll(comp_, want);
      if (k == 0) break;
      fit -= k;
      work = true;
      filter_held_ -= std::min(filter_held_, k);
      notify |= PushCompletions(comp_, k);
      if (k < want) break;
    }
  }
  if (out_of_room) {
    if (!room_stalled_) cq_full_stalls_.fetch_add(1, std::memory_order_relaxed);
    // Before the sleep re-checks the room (see AfterPop).
    cq_stalled_.store(true);
  }
  room_stalled_ = out_of_room;
  if (notify) {
    cq_cv_.notify_all();
    app_wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
  return work;
}

}  // namespace prism::runtime
