// Fixed pool of worker threads owned by one engine instance (no global state).
#pragma once
#include <functional>

namespace mb {
class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads includes the calling thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int size() const;
  // Runs fn(thread_index) on every thread (the caller is thread 0) and returns when all are done.
  // Work splitting is the caller's business; this keeps the per-call overhead to one barrier.
  // One caller at a time, and not from inside fn (the pool has one job slot). An exception
  // thrown by fn on any thread is rethrown here after all threads finished.
  // Idle workers spin ~100 us after a job (cheap back-to-back calls), then sleep.
  void run(const std::function<void(int ith, int nth)>& fn);
 private:
  struct Impl;
  Impl* impl_;
};
}  // namespace mb
