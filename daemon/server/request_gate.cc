#include "daemon/server/request_gate.h"

#include <string>

namespace gnmr {

void RequestGate::Ticket::Reset() {
  if (gate_ != nullptr) gate_->Release(bytes_);
  gate_ = nullptr;
  bytes_ = 0;
}

Status RequestGate::Admit(uint64_t bytes, Ticket* ticket) {
  ticket->Reset();
  MutexLock lock(mu_);
  if (in_flight_ > 0 && in_flight_ + bytes > max_bytes_) {
    return Status(StatusCode::kResourceExhausted,
                  "gnmrd is serving " + std::to_string(in_flight_) +
                      " bytes of requests; this one of " + std::to_string(bytes) +
                      " bytes would exceed max_request_bytes_in_flight (" +
                      std::to_string(max_bytes_) + "): retry shortly");
  }
  in_flight_ += bytes;
  ticket->gate_ = this;
  ticket->bytes_ = bytes;
  return Status::Ok();
}

Status RequestGate::AdmitAnswer(uint64_t bytes, Ticket* ticket) {
  MutexLock lock(mu_);
  const uint64_t own = ticket->gate_ == this ? ticket->bytes_ : 0;
  const uint64_t others = in_flight_ - own;
  if (others > 0 && in_flight_ + bytes > max_bytes_) {
    return Status(StatusCode::kResourceExhausted,
                  "gnmrd is serving " + std::to_string(others) +
                      " bytes of other requests; this answer of " + std::to_string(bytes) +
                      " bytes would exceed max_request_bytes_in_flight (" +
                      std::to_string(max_bytes_) + "): retry shortly");
  }
  in_flight_ += bytes;
  ticket->gate_ = this;
  ticket->bytes_ = own + bytes;
  return Status::Ok();
}

uint64_t RequestGate::in_flight() const {
  MutexLock lock(mu_);
  return in_flight_;
}

void RequestGate::Release(uint64_t bytes) {
  MutexLock lock(mu_);
  in_flight_ -= bytes;
}

}  // namespace gnmr
