#include "tests/soak/bad_clients.h"

#include <condition_variable>
#include <random>

#include <grpcpp/generic/generic_stub.h>

namespace gnmr::soak {
namespace {

using Code = grpc::StatusCode;

v1::ClientMessage Hello(const std::string& job, uint32_t rank, uint64_t session) {
  v1::ClientMessage m;
  m.mutable_hello()->set_job_id(job);
  m.mutable_hello()->set_rank(rank);
  m.mutable_hello()->set_session_id(session);
  return m;
}

v1::ClientMessage Stats(int64_t step, const std::vector<uint32_t>& ids, size_t values) {
  v1::ClientMessage m;
  v1::StepStats* s = m.mutable_stats();
  s->set_step(step);
  for (uint32_t id : ids) s->add_unit_id(id);
  for (size_t i = 0; i < values; ++i) s->add_sumsq(1.0);
  return m;
}

v1::RegisterRequest JunkRegister(const std::string& job) {
  v1::RegisterRequest req;
  req.set_job_id(job);
  req.set_rank(0);
  req.set_world_size(1);
  req.set_client_version("soak-bad-client");
  for (int u = 0; u < 4; ++u) {
    v1::UnitSpec* s = req.add_units();
    s->set_name("junk." + std::to_string(u));
    s->set_numel(64);
    s->set_shard_count(1);
  }
  return req;
}

}  // namespace

BadClients::BadClients(BadClientSettings settings) : settings_(std::move(settings)) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetMaxSendMessageSize(-1);
  channel_ = grpc::CreateCustomChannel(settings_.target, grpc::InsecureChannelCredentials(), args);
  gnmr_ = v1::Gnmr::NewStub(channel_);
  admin_ = v1::Admin::NewStub(channel_);
  generic_ = std::make_unique<grpc::GenericStub>(channel_);
}

BadClients::~BadClients() { Stop(); }

void BadClients::Start() {
  thread_ = std::thread([this] {
    for (uint64_t n = 0; !stop_.load(); ++n) {
      try {
        RunOnce(n);
      } catch (const std::exception& e) {
        Outcome("exception", grpc::Status(Code::UNKNOWN, e.what()), {});
      }
      std::this_thread::sleep_for(settings_.pause);
    }
  });
}

void BadClients::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

BadClients::Report BadClients::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_;
}

void BadClients::Outcome(const std::string& attack, const grpc::Status& s,
                         std::set<grpc::StatusCode> expected) {
  std::lock_guard<std::mutex> lock(mu_);
  if (expected.count(s.error_code())) {
    ++report_.expected[attack];
  } else if ((s.error_code() == Code::UNAVAILABLE || s.error_code() == Code::DEADLINE_EXCEEDED ||
              s.error_code() == Code::CANCELLED) &&
             down_.load()) {
    ++report_.unavailable;
  } else {
    ++report_.unexpected;
    if (report_.unexpected_samples.size() < 10) {
      report_.unexpected_samples.push_back(attack + ": code " + std::to_string(s.error_code()) +
                                           " " + s.error_message());
    }
  }
}

grpc::Status BadClients::GarbageUnary(const std::string& method, size_t bytes) {
  static thread_local std::mt19937_64 rng(12345);
  std::string garbage(bytes, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  // A field header that promises more bytes than follow: never parses.
  garbage[0] = 0x0a;
  garbage[1] = static_cast<char>(0x7f);
  grpc::Slice slice(garbage);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic_->UnaryCall(&ctx, method, grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

grpc::Status BadClients::RegisterJunk(const std::string& job, v1::RegisterResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.AddMetadata("x-gnmr-token", "junk-token");
  return gnmr_->Register(&ctx, JunkRegister(job), resp);
}

grpc::Status BadClients::SessionWith(const std::string& token, const v1::ClientMessage& hello,
                                     const std::vector<v1::ClientMessage>& then) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-gnmr-token", token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stream = gnmr_->Session(&ctx);
  if (stream->Write(hello)) {
    for (const v1::ClientMessage& m : then) {
      if (!stream->Write(m)) break;
    }
  }
  stream->WritesDone();
  v1::ServerMessage in;
  while (stream->Read(&in)) {
  }
  return stream->Finish();
}

grpc::Status BadClients::DeleteJob(const std::string& job, const std::string& token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.AddMetadata("x-gnmr-admin-token", token);
  v1::DeleteJobRequest req;
  req.set_job_id(job);
  v1::DeleteJobResponse resp;
  return admin_->DeleteJob(&ctx, req, &resp);
}

void BadClients::RunOnce(uint64_t n) {
  const std::string junk = "junk-" + std::to_string(n);
  switch (n % 10) {
    case 0:
      Outcome("garbage Register", GarbageUnary("/gnmr.v1.Gnmr/Register", 64 + n % 512),
              {Code::INVALID_ARGUMENT});
      Outcome("garbage ImportState", GarbageUnary("/gnmr.v1.Admin/ImportState", 200),
              {Code::INVALID_ARGUMENT, Code::UNAUTHENTICATED});
      break;
    case 1: {  // the soak job with a wrong token
      v1::RegisterRequest req = JunkRegister(settings_.main_job);
      grpc::ClientContext ctx;
      ctx.AddMetadata("x-gnmr-token", "not-the-token");
      v1::RegisterResponse resp;
      Outcome("wrong job token", gnmr_->Register(&ctx, req, &resp), {Code::UNAUTHENTICATED});
      Outcome("wrong token Session",
              SessionWith("not-the-token", Hello(settings_.main_job, 0, 1), {}),
              {Code::UNAUTHENTICATED});
      break;
    }
    case 2:  // a hello naming a session that is not the rank's
      Outcome("foreign session",
              SessionWith(settings_.main_job_token,
                          Hello(settings_.main_job, static_cast<uint32_t>(n % 7), 0xbad5e55), {}),
              {Code::FAILED_PRECONDITION, Code::NOT_FOUND});
      break;
    case 3:
      Outcome("wrong admin token", DeleteJob(settings_.main_job, "wrong-admin-token"),
              {Code::UNAUTHENTICATED});
      break;
    case 4: {  // a junk job, then a step far ahead and a normal one
      v1::RegisterResponse resp;
      grpc::Status s = RegisterJunk(junk, &resp);
      Outcome("junk Register", s, {Code::OK});
      if (!s.ok()) break;
      std::vector<uint32_t> ids(resp.unit_ids().begin(), resp.unit_ids().end());
      Outcome("huge step",
              SessionWith("junk-token", Hello(junk, 0, resp.session_id()),
                          {Stats((int64_t{1} << 61) - 1, ids, ids.size()), Stats(5, ids, 4)}),
              // Accepted as it stands, or refused once steps are bounded.
              {Code::OK, Code::OUT_OF_RANGE, Code::INVALID_ARGUMENT, Code::FAILED_PRECONDITION});
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++report_.junk_jobs;
      }
      break;
    }
    case 5: {  // a junk job's stream with a negative step, then bad columns
      v1::RegisterResponse resp;
      grpc::Status s = RegisterJunk(junk, &resp);
      Outcome("junk Register", s, {Code::OK});
      if (!s.ok()) break;
      std::vector<uint32_t> ids(resp.unit_ids().begin(), resp.unit_ids().end());
      Outcome("negative step",
              SessionWith("junk-token", Hello(junk, 0, resp.session_id()), {Stats(-3, ids, 4)}),
              {Code::INVALID_ARGUMENT});
      s = RegisterJunk(junk, &resp);
      Outcome("junk Register", s, {Code::OK});
      if (!s.ok()) break;
      Outcome("mismatched columns",
              SessionWith("junk-token", Hello(junk, 0, resp.session_id()), {Stats(1, ids, 2)}),
              {Code::INVALID_ARGUMENT});
      std::lock_guard<std::mutex> lock(mu_);
      ++report_.junk_jobs;
      break;
    }
    case 6: {  // registrations that cannot be valid
      v1::RegisterRequest req = JunkRegister(junk);
      req.set_world_size(0);
      grpc::ClientContext a;
      v1::RegisterResponse resp;
      Outcome("world size 0", gnmr_->Register(&a, req, &resp), {Code::INVALID_ARGUMENT});
      req = JunkRegister("bad\x1b[31mjob\n");
      grpc::ClientContext b;
      Outcome("bad job id", gnmr_->Register(&b, req, &resp), {Code::INVALID_ARGUMENT});
      req = JunkRegister(junk);
      req.mutable_units(1)->set_name(req.units(0).name());
      grpc::ClientContext c;
      Outcome("duplicate unit", gnmr_->Register(&c, req, &resp), {Code::INVALID_ARGUMENT});
      break;
    }
    case 7:
      if (n % 50 == 7) {  // over max_message_bytes (8 MiB)
        v1::RegisterRequest req = JunkRegister(junk);
        req.set_client_version(std::string(9 << 20, 'x'));
        grpc::ClientContext ctx;
        v1::RegisterResponse resp;
        Outcome("oversized message", gnmr_->Register(&ctx, req, &resp), {Code::RESOURCE_EXHAUSTED});
      }
      break;
    case 8:  // the operator deletes an older junk job (it may have expired)
      if (n >= 20) {
        Outcome("operator delete",
                DeleteJob("junk-" + std::to_string(n - 14), settings_.admin_token),
                {Code::OK, Code::NOT_FOUND});
      }
      break;
    case 9: {  // a junk job left registered without a stream: expires
      v1::RegisterResponse resp;
      Outcome("junk Register", RegisterJunk(junk, &resp), {Code::OK});
      std::lock_guard<std::mutex> lock(mu_);
      ++report_.junk_jobs;
      break;
    }
  }
}

}  // namespace gnmr::soak
