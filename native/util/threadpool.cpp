// Persistent workers released by a generation counter. Decode issues ~200 small matmuls per token,
// so a run() must cost about one cache-line round trip, not a futex wake: workers spin on the
// counter for a while after each job and only then sleep on a condition variable.
#include "threadpool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MB_CPU_RELAX() _mm_pause()
#else
#define MB_CPU_RELAX() std::this_thread::yield()
#endif

namespace mb {

namespace {
// Spin for ~100 us (measured on the clock, since pause costs 10-140 cycles depending on the
// CPU): long enough to bridge the single-threaded gaps between the matmuls of one token (norms,
// rope, attention), short enough not to burn a core between tokens or requests.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr int kClockEvery = 32;  // pauses between clock reads
constexpr int kPureSpinBatches = 8;

// Waits until pred() holds or the spin time is over; returns pred().
template <typename Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  const auto end = std::chrono::steady_clock::now() + kSpinTime;
  for (int batch = 0;; batch++) {
    for (int i = 0; i < kClockEvery; i++) {
      MB_CPU_RELAX();
      if (pred()) return true;
    }
    if (std::chrono::steady_clock::now() >= end) return pred();
    // after a short pure spin (~5-10 us, the common wait), let another runnable thread have the
    // core when there are more threads than cores: the thread being waited for may be one of them
    if (batch >= kPureSpinBatches) std::this_thread::yield();
  }
}
}  // namespace

struct ThreadPool::Impl {
  int n = 1;
  std::vector<std::thread> threads;
  const std::function<void(int, int)>* job = nullptr;
  alignas(64) std::atomic<uint64_t> generation{0};
  alignas(64) std::atomic<int> pending{0};
  alignas(64) std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::mutex err_mu;
  std::exception_ptr error;

  void worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = seen;
      spin_until([&] { return (g = generation.load(std::memory_order_acquire)) != seen; });
      if (g == seen) {
        // seq_cst pairing with run(): either run() sees sleepers > 0 and notifies under the
        // mutex, or this thread sees the new generation before waiting.
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return generation.load(std::memory_order_seq_cst) != seen; });
        sleepers.fetch_sub(1, std::memory_order_relaxed);
        g = generation.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop.load(std::memory_order_acquire)) return;
      try {
        (*job)(ith, n);
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!error) error = std::current_exception();
      }
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void release() {
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lk(mu); }
      cv.notify_all();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  impl_->n = n_threads < 1 ? 1 : n_threads;
  for (int i = 1; i < impl_->n; i++) impl_->threads.emplace_back([this, i] { impl_->worker(i); });
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->release();
  for (auto& t : impl_->threads) t.join();
  delete impl_;
}

int ThreadPool::size() const { return impl_->n; }

void ThreadPool::run(const std::function<void(int ith, int nth)>& fn) {
  Impl& p = *impl_;
  if (p.n == 1) {
    fn(0, 1);
    return;
  }
  p.job = &fn;
  p.pending.store(p.n - 1, std::memory_order_relaxed);
  p.release();
  std::exception_ptr mine;
  try {
    fn(0, p.n);
  } catch (...) {
    mine = std::current_exception();
  }
  // The caller's own share usually ends last, so this wait is short; yield after a while in
  // case a worker was descheduled (the machine may be oversubscribed).
  auto done = [&] { return p.pending.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done))
    while (!done()) std::this_thread::yield();
  if (mine) std::rethrow_exception(mine);
  if (p.error) {
    std::exception_ptr e = p.error;
    p.error = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace mb
