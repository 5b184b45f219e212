// What the client's I/O thread writes on a Session stream (IoLoop,
// io_loop.h), once the daemon attached it: the reports the training thread
// queued in the Outbox (held back instead while this rank stands by,
// standby_reports.h), the held ones the job wants when it is elected, and
// the acks, each after the report of its step. Between turns it waits for
// the Outbox, or polls while reports wait for their GPU results.
#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "client/src/io_loop.h"
#include "client/src/report_wire.h"
#include "common/mutex.h"

namespace gnmr {
namespace {

constexpr auto kIdleWait = std::chrono::milliseconds(100);
constexpr auto kGpuPollInterval = std::chrono::microseconds(200);

Mutex g_hook_mu;
std::function<void()> g_report_write_hook GNMR_GUARDED_BY(g_hook_mu);

void RunReportWriteHook() {
  std::function<void()> hook;
  {
    MutexLock lock(g_hook_mu);
    hook = g_report_write_hook;
  }
  if (hook) hook();
}

}  // namespace

void SetReportWriteHookForTesting(std::function<void()> hook) {
  MutexLock lock(g_hook_mu);
  g_report_write_hook = std::move(hook);
}

Status IoLoop::Pump(Stream* stream, const std::atomic<bool>& broken, bool* write_failed) {
  v1::ClientMessage ack_msg;
  for (;;) {
    if (Stopping()) return Status(StatusCode::kCancelled, "stopping");
    if (broken.load(std::memory_order_acquire)) {
      return Status(StatusCode::kUnavailable, "Session: stream ended by the daemon");
    }
    if (!SendWanted(stream)) {
      *write_failed = true;
      return Status(StatusCode::kUnavailable, "Session: write failed");
    }
    if (gpu_ != nullptr) gpu_->Drain(true);  // completed launches -> queued reports
    bool reported = false;
    if (Report* r = outbox_->PopReport()) {
      bool ok = false;
      bool held = false;
      Status failed;
      try {
        RunReportWriteHook();
        ReportToStepStats(*r, unit_ids_, handles_by_id_, options_.pipeline_stage,
                          out_.mutable_stats());
        if (standby_.standby()) {  // another replica reports: keep it
          standby_.Hold(std::move(*out_.mutable_stats()));
          held = ok = true;
        } else {
          ok = stream->Write(out_);
          if (ok) standby_.Sent(r->step);
        }
      } catch (const std::exception& e) {
        failed = Internal(std::string("writing a report: ") + e.what());
      } catch (...) {
        failed = Internal("writing a report: unknown exception");
      }
      if (!failed.ok()) {
        outbox_->Release(r, false);  // never leak a slot
        return failed;
      }
      if (ok)
        (held ? shared_->reports_held : shared_->reports_sent)
            .fetch_add(1, std::memory_order_relaxed);
      outbox_->Release(r, ok);
      if (!ok) {
        *write_failed = true;
        return Status(StatusCode::kUnavailable, "Session: write failed");
      }
      reported = true;
    }
    // Acks after the report: a trainer acks step s after Observe(s), so a
    // standby's ack of s finds the note of its held report s (TakeNote).
    AckItem a;
    while (outbox_->PopAck(&a)) {
      v1::Ack* ack = ack_msg.mutable_ack();
      ack->set_step(a.step);
      ack->set_sequence(a.sequence);
      ack->set_digest(a.digest);
      ack->set_has_decision(a.has_decision);
      ack->set_generation(a.generation);
      ack->set_skip_step(a.skip_step);
      if (!standby_.TakeNote(std::chrono::steady_clock::now(), ack->mutable_standby())) {
        ack->clear_standby();
      }
      const bool ok = stream->Write(ack_msg);
      // Counted before the outbox lets Flush() return.
      if (ok) shared_->acks_sent.fetch_add(1, std::memory_order_relaxed);
      outbox_->AckDone();
      if (!ok) {
        *write_failed = true;
        return Status(StatusCode::kUnavailable, "Session: write failed");
      }
    }
    if (reported) continue;
    if (gpu_ != nullptr && gpu_->pending() > 0) {
      outbox_->Wait(kGpuPollInterval);
    } else {
      outbox_->Wait(kIdleWait);
    }
  }
}

bool IoLoop::SendWanted(Stream* stream) {
  std::vector<v1::StepStats> wanted = standby_.TakeWanted();
  for (v1::StepStats& s : wanted) {
    const int64_t step = s.step();
    *out_.mutable_stats() = std::move(s);
    if (!stream->Write(out_)) return false;
    standby_.Sent(step);
    shared_->reports_sent.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

}  // namespace gnmr
