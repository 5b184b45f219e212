// C API smoke test: options, error codes and messages, the whole per-step
// call sequence against an absent daemon, plan accessors, counters.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"

namespace {

TEST(CApi, ErrorsCarryCodeAndMessage) {
  gnmr_client* c = reinterpret_cast<gnmr_client*>(0x1);
  EXPECT_EQ(gnmr_client_create(nullptr, &c), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()), "");
  gnmr_options o;
  gnmr_options_init(&o);
  o.job_id = "capi";
  EXPECT_EQ(gnmr_client_create(&o, &c), GNMR_EINVALID_ARGUMENT);  // no target
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(gnmr_last_error()).find("target"), std::string::npos);
  o.struct_size = 3;
  o.target = "unix:/nonexistent";
  EXPECT_EQ(gnmr_client_create(&o, &c), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe(nullptr, 0), GNMR_EINVALID_ARGUMENT);
  gnmr_client_destroy(nullptr);
}

// pipeline_stage (later 0.2) reaches the library; a caller built against
// the header before it passes the older size, and gets stage 0.
TEST(CApi, PipelineStageIsReadOnlyFromCallersThatHaveIt) {
  gnmr_options o;
  gnmr_options_init(&o);
  o.target = "unix:/nonexistent/gnmrd.sock";
  o.job_id = "capi";
  o.world_size = 2;
  o.pipeline_stage = 2;
  gnmr_client* c = nullptr;
  EXPECT_EQ(gnmr_client_create(&o, &c), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("pipeline_stage 2 must be < world_size 2"),
            std::string::npos)
      << gnmr_last_error();
  o.struct_size = static_cast<uint32_t>(offsetof(gnmr_options, pipeline_stage));
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK) << gnmr_last_error();
  gnmr_client_destroy(c);
}

// attach_timeout_ms (later 0.2): its default is ClientOptions', it is
// checked, and a caller built against the header before it passes the
// older size and gets the default, whatever lies past its struct.
TEST(CApi, AttachTimeoutIsReadOnlyFromCallersThatHaveIt) {
  gnmr_options o;
  gnmr_options_init(&o);
  EXPECT_EQ(o.attach_timeout_ms, gnmr::ClientOptions().attach_timeout.count());
  EXPECT_EQ(o.decision_wait_ms, gnmr::ClientOptions().decision_wait.count());
  o.target = "unix:/nonexistent/gnmrd.sock";
  o.job_id = "capi";
  o.attach_timeout_ms = 0;
  gnmr_client* c = nullptr;
  EXPECT_EQ(gnmr_client_create(&o, &c), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("attach_timeout"), std::string::npos)
      << gnmr_last_error();
  o.struct_size = static_cast<uint32_t>(offsetof(gnmr_options, attach_timeout_ms));
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK) << gnmr_last_error();
  gnmr_client_destroy(c);
}

TEST(CApi, FullStepSequenceFailsOpen) {
  const std::string target = "unix:/tmp/gnmr_capi_" + std::to_string(getpid()) + ".sock";
  gnmr_options o;
  gnmr_options_init(&o);
  o.target = target.c_str();
  o.job_id = "capi";
  o.rank = 1;
  o.world_size = 2;
  o.token = "secret";
  gnmr_client* c = nullptr;
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK) << gnmr_last_error();

  std::vector<float> g(5000, 0.25f);
  std::vector<uint16_t> h(3000, 0x3c00);  // bf16 1.875 / fp16 1.0
  gnmr_tensor t[2] = {{g.data(), g.size(), GNMR_DTYPE_FP32}, {h.data(), h.size(), GNMR_DTYPE_FP16}};
  uint32_t unit = 99;
  ASSERT_EQ(gnmr_add_unit(c, "layers.0.attn.qkv", t, 2, 1, 2, &unit), GNMR_OK) << gnmr_last_error();
  EXPECT_EQ(unit, 0u);
  EXPECT_EQ(gnmr_add_unit(c, "layers.0.attn.qkv", t, 1, 0, 1, &unit), GNMR_EALREADY_EXISTS);
  gnmr_tensor bad = {h.data(), h.size(), 99};  // fp8 is supported now; 99 is no dtype
  EXPECT_EQ(gnmr_add_unit(c, "bad", &bad, 1, 0, 1, &unit), GNMR_EINVALID_ARGUMENT);
  // 0.2: scale_inv_ptr reaches the library (a misaligned one is named).
  alignas(8) static const unsigned char scale_bytes[8] = {};
  gnmr_tensor fp8 = {h.data(),           h.size(), GNMR_DTYPE_FP8_E4M3FN,
                     GNMR_LOCATION_HOST, 0.0f,     reinterpret_cast<const float*>(scale_bytes + 1)};
  EXPECT_EQ(gnmr_add_unit(c, "fp8", &fp8, 1, 0, 1, &unit), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("scale_inv_ptr"), std::string::npos)
      << gnmr_last_error();
  EXPECT_EQ(gnmr_observe(c, 0), GNMR_EFAILED_PRECONDITION);
  ASSERT_EQ(gnmr_start(c), GNMR_OK);

  gnmr_plan* plan = gnmr_plan_new();
  ASSERT_NE(plan, nullptr);
  for (int64_t step = 0; step < 10; ++step) {
    ASSERT_EQ(gnmr_observe(c, step), GNMR_OK) << gnmr_last_error();
    ASSERT_EQ(gnmr_plan_for(c, step, plan), GNMR_OK);
    gnmr_plan_info info;
    ASSERT_EQ(gnmr_plan_info_get(plan, &info), GNMR_OK);
    EXPECT_EQ(info.step, step);
    EXPECT_EQ(info.has_decision, 0);
    EXPECT_EQ(info.num_entries, 0u);
    EXPECT_EQ(info.skip_step, 0);
    EXPECT_EQ(info.miss_reason, step == 0 ? GNMR_MISS_NO_DECISION_YET : GNMR_MISS_DISCONNECTED);
    ASSERT_EQ(gnmr_ack(c, plan), GNMR_OK);
  }
  gnmr_plan_entry e;
  EXPECT_EQ(gnmr_plan_entry_get(plan, 0, &e), GNMR_EOUT_OF_RANGE);
  int32_t denied_clip = -1;
  EXPECT_EQ(gnmr_plan_entry_denied_clip(plan, 0, &denied_clip), GNMR_EOUT_OF_RANGE);
  EXPECT_EQ(gnmr_plan_entry_denied_clip(nullptr, 0, &denied_clip), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_plan_entry_denied_clip(plan, 0, nullptr), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(denied_clip, -1);
  gnmr_entry_reason why{};
  EXPECT_EQ(gnmr_plan_entry_reason(plan, 0, &why), GNMR_EOUT_OF_RANGE);
  EXPECT_EQ(gnmr_plan_entry_reason(nullptr, 0, &why), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe(c, 3), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("increase"), std::string::npos);

  gnmr_tensor moved[2] = {{g.data(), g.size(), GNMR_DTYPE_FP32},
                          {h.data(), h.size(), GNMR_DTYPE_BF16}};
  EXPECT_EQ(gnmr_set_tensors(c, 0, moved, 2), GNMR_OK);
  EXPECT_EQ(gnmr_set_tensors(c, 0, moved, 1), GNMR_EINVALID_ARGUMENT);  // numel changes

  gnmr_counters k;
  ASSERT_EQ(gnmr_get_counters(c, &k), GNMR_OK);
  EXPECT_EQ(k.reports_enqueued, 10u);
  EXPECT_EQ(k.connected, 0);
  EXPECT_EQ(k.missed_decisions, 9u);  // steps 1..9 were due, no daemon
  // gnmr_get_counters writes no further than an earlier 0.2 caller's
  // struct reaches; gnmr_get_counters_sized fills the fields appended since.
  constexpr size_t kBase = offsetof(gnmr_counters, attach_failures);
  std::vector<unsigned char> old_struct(sizeof(gnmr_counters), 0xab);
  ASSERT_EQ(gnmr_get_counters(c, reinterpret_cast<gnmr_counters*>(old_struct.data())), GNMR_OK);
  for (size_t i = kBase; i < old_struct.size(); ++i) ASSERT_EQ(old_struct[i], 0xab) << i;
  EXPECT_EQ(gnmr_get_counters_sized(c, &k, kBase - 1), GNMR_EINVALID_ARGUMENT);
  k.attach_failures = k.steps_without_decision = 77;
  ASSERT_EQ(gnmr_get_counters_sized(c, &k, sizeof(k)), GNMR_OK) << gnmr_last_error();
  EXPECT_EQ(k.steps_without_decision, 10u);  // none of the 10 plans had one
  EXPECT_EQ(k.attach_failures, 0u);          // no daemon, no stream
  EXPECT_EQ(k.reports_enqueued, 10u);
  EXPECT_EQ(gnmr_flush(c, 10), 0);
  EXPECT_EQ(gnmr_wait_connected(c, 2000), GNMR_EUNAVAILABLE);
  EXPECT_NE(std::string(gnmr_last_error()).find("ENOENT"), std::string::npos) << gnmr_last_error();
  gnmr_plan_free(plan);
  gnmr_client_destroy(c);
}

}  // namespace
