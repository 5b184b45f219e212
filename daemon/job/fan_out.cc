#include "daemon/job/fan_out.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace gnmr {

FanOut::FanOut(int helpers) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

FanOut::~FanOut() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

int FanOut::DefaultHelpers() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores <= 1 ? 0 : static_cast<int>(std::min(cores - 1, 3u));
}

uint64_t FanOut::Drain(Task* task) {
  uint64_t ranges = 0;
  try {
    for (;;) {
      const size_t begin = task->next.fetch_add(task->grain);
      if (begin >= task->n) return ranges;
      (*task->work)(begin, std::min(task->n, begin + task->grain));
      ++ranges;
    }
  } catch (...) {
    exceptions_++;
    spdlog::error("fan-out: a broadcast's range threw; some of its streams were not sent to");
  }
  return ranges;
}

void FanOut::Run(size_t n, size_t grain, const std::function<void(size_t, size_t)>& work) {
  if (n == 0) return;
  runs_++;
  Task task;
  task.n = n;
  task.grain = std::max<size_t>(grain, 1);
  task.work = &work;
  // Shared: run_mu_ is held from here to the end of the function, where it
  // is let go (Drain catches everything, so nothing throws in between).
  const bool shared = !threads_.empty() && n > task.grain && run_mu_.TryLock();
  if (!shared) {
    Drain(&task);
    return;
  }
  {
    MutexLock lock(mu_);
    task_ = &task;
    ++task_seq_;
  }
  wake_.notify_all();
  Drain(&task);
  {
    // `task` and `work` live on this stack: no helper may still use them.
    MutexLock lock(mu_);
    task_ = nullptr;
    left_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) { return in_task_ == 0; });
  }
  run_mu_.Unlock();
}

void FanOut::HelperLoop() {
  uint64_t seen = 0;
  MutexLock lock(mu_);
  for (;;) {
    wake_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) {
      return stopping_ || (task_ != nullptr && task_seq_ != seen);
    });
    if (stopping_) return;
    seen = task_seq_;
    Task* task = task_;
    ++in_task_;
    lock.Unlock();
    ranges_by_helpers_ += Drain(task);
    lock.Lock();
    if (--in_task_ == 0) left_.notify_all();
  }
}

}  // namespace gnmr
