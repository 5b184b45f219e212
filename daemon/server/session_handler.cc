#include "daemon/server/session_handler.h"

namespace gnmr {

Status SessionHandler::Handle(const v1::ClientMessage& msg, size_t bytes, const std::string& token,
                              const std::shared_ptr<DecisionSink>& sink) {
  if (!job_) {
    if (msg.kind_case() != v1::ClientMessage::kHello) {
      return FailedPrecondition("the first Session message must be a SessionHello");
    }
    const v1::SessionHello& hello = msg.hello();
    StatusOr<std::shared_ptr<Job>> job = registry_->Authenticate(hello.job_id(), token);
    if (!job.ok()) return job.status();
    GNMR_RETURN_IF_ERROR((*job)->Attach(hello.rank(), hello.session_id(), sink));
    job_ = *job;
    rank_ = hello.rank();
    session_id_ = hello.session_id();
    return Status::Ok();
  }
  switch (msg.kind_case()) {
    case v1::ClientMessage::kStats:
      return job_->OnStats(rank_, session_id_, msg.stats(), bytes, job_->Now());
    case v1::ClientMessage::kAck:
      return job_->OnAck(rank_, session_id_, msg.ack());
    case v1::ClientMessage::kHello:
      return FailedPrecondition("SessionHello sent twice on one stream");
    default:
      return InvalidArgument("empty ClientMessage");
  }
}

void SessionHandler::Ended(const DecisionSink* sink) {
  if (job_) job_->Detach(rank_, session_id_, sink);
}

}  // namespace gnmr
