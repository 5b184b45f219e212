// Eventually(): the one way tests wait on real threads and processes (a
// daemon's stream, a client's I/O thread, a child gnmrd). Polls `condition`
// until it holds or `limit` passes and returns whether it held; never a
// fixed sleep standing in for "long enough". Limits are generous, because
// the suite must pass on a loaded 2-core machine: they bound a hang, they
// do not assert speed. Time that the code under test reads through an
// injected clock is driven by the test instead (no waiting at all).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace gnmr::testing {

inline bool Eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = std::chrono::seconds(10),
                       std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(poll);
  }
  return condition();
}

}  // namespace gnmr::testing
