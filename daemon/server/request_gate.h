// RequestGate: bounds the bytes of unary requests (Register, the Admin
// calls) that gnmrd parses and serves at once (docs/limits.md, "Memory").
//
// A request costs far more than its bytes while it is served: a Register's
// parsed units, their specs and name sets take ~10x its wire bytes before
// any cap can refuse it (bench/memory_caps, "inflight"). Without a bound, K
// clients sending large Registers at once would need K times that.
//
//   RequestGate::Ticket ticket;
//   Status s = gate.Admit(bytes, &ticket);  // before parsing
//   if (!s.ok()) return s;                   // RESOURCE_EXHAUSTED
//   ... parse and serve; the ticket gives the bytes back when it ends.
//
// A request, and then its answer (AdmitAnswer), is admitted when the bytes
// in flight plus its own stay within `max_bytes`, or when nothing else is in
// flight (so one request of any
// size max_message_bytes allows always gets through). Refused requests are
// retried by the client library (it retries every failed Register with
// backoff), so a burst of large Registers is served a few at a time.
#pragma once

#include <cstdint>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/status.h"

namespace gnmr {

class RequestGate {
 public:
  explicit RequestGate(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Holds admitted bytes until it is destroyed or reset.
  class Ticket {
   public:
    Ticket() = default;
    ~Ticket() { Reset(); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    void Reset();

   private:
    friend class RequestGate;
    RequestGate* gate_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // OK and `ticket` holds `bytes`, or RESOURCE_EXHAUSTED naming
  // max_request_bytes_in_flight (the ticket is left empty).
  Status Admit(uint64_t bytes, Ticket* ticket);

  // The answer to an admitted request (`ticket`), `bytes` long, before it is
  // serialized: an answer can be far larger than its request (ExportState,
  // ListUnits of a large job). Admitted like a request, where "alone" means
  // no other call in flight; on OK the ticket holds both. On
  // RESOURCE_EXHAUSTED the ticket keeps what it had.
  Status AdmitAnswer(uint64_t bytes, Ticket* ticket);

  uint64_t in_flight() const;
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  void Release(uint64_t bytes);

  const uint64_t max_bytes_;
  mutable Mutex mu_;
  uint64_t in_flight_ GNMR_GUARDED_BY(mu_) = 0;
};

}  // namespace gnmr
