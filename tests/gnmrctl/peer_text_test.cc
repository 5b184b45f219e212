// gnmrctl prints names that came from peers (unit names, event details,
// job ids, client versions) escaped: no byte of theirs reaches the
// operator's terminal as a control sequence or a line break.
#include "tests/gnmrctl/ctl_harness.h"

namespace gnmr::testing {
namespace {

TEST_F(CtlTest, EventsEscapeUnitNamesAndDetails) {
  Start();
  DriveSpike();
  v1::Event forged;
  forged.set_kind(v1::EVENT_KIND_DENIAL);
  forged.set_observed_step(10);
  forged.set_unit("evil\x1b[2J\nunit");
  forged.set_detail("line1\r\n[critical] forged\x07");
  {
    std::lock_guard<std::mutex> lock(listener_.mu);
    listener_.events["j"].push_back(forged);
  }
  CtlResult r = Run({"events", "--job", "j", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  const auto lines = LinesWith(r.out, "evil\\x1b[2J\\x0aunit");
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_NE(lines[0].find("line1\\x0d\\x0a[critical] forged\\x07"), std::string::npos) << r.out;
}

TEST_F(CtlTest, UnitsEscapeNamesThatReachedTheDaemon) {
  Start();
  DriveSpike();
  // Register refuses such names; ImportState is the other way in (and
  // may refuse them too: then there is nothing to print).
  v1::ControllerState state = ExportVia("j");
  ASSERT_GT(state.units_size(), 0);
  v1::UnitHistory* added = state.add_units();
  *added = state.units(0);
  added->set_name("layers.9.attn\x1b]0;pwned\x07\nX");
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
  v1::ImportStateRequest req;
  req.set_job_id("j");
  *req.mutable_state() = state;
  v1::ImportStateResponse resp;
  const grpc::Status st = Admin()->ImportState(&ctx, req, &resp);
  if (!st.ok()) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    return;
  }
  CtlResult r = Run({"units", "--job", "j", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_EQ(LinesWith(r.out, "layers.9.attn\\x1b]0;pwned\\x07\\x0aX").size(), 1u) << r.out;
}

}  // namespace
}  // namespace gnmr::testing
