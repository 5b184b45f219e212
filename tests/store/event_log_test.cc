// EventLog and its JSON Lines format: valid JSON whatever the input,
// round trip, ring bound and filtering, reload after restart, torn lines,
// unwritable directories, concurrent appends.
#include "daemon/store/event_log.h"

#include <cmath>
#include <sstream>
#include <thread>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "controller/publish/event_json.h"
#include "controller/publish/wire_names.h"
#include "tests/store/scratch_dir.h"

namespace gnmr {
namespace store {
namespace {

using testing_util::Lines;
using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;

v1::Event MakeEvent(int64_t step, const std::string& kind = "admission") {
  v1::Event e;
  e.set_observed_step(step);
  e.set_apply_step(step + 1);
  e.set_kind(EventKindFromName(kind));
  e.set_unit("layers." + std::to_string(step % 7) + ".mlp.fc1");
  e.set_action(v1::ACTION_CLIP);
  e.set_trigger(v1::TRIGGER_GNMR);
  e.set_gnmr(3.25);
  e.set_delta(0.5);
  e.set_norm(12.0);
  e.set_mu(4.0);
  e.set_until(step + 21);
  e.set_detail("r=1.3");
  e.set_time_unix(1767225600.25);
  return e;
}

google::protobuf::Struct ParseJson(const std::string& line) {
  google::protobuf::Struct s;
  const auto st = google::protobuf::util::JsonStringToMessage(line, &s);
  EXPECT_TRUE(st.ok()) << st.ToString() << "\n" << line;
  return s;
}

EventLogOptions WithRing(size_t capacity) {
  EventLogOptions options;
  options.ring_capacity = capacity;
  return options;
}

std::string EventsPath(const ScratchDir& dir, const std::string& job) {
  return dir.path() + "/jobs/" + job + "/events.jsonl";
}

TEST(EventJsonTest, LineRoundTripsAndIsValidJson) {
  const v1::Event e = MakeEvent(120);
  std::string line;
  AppendEventJsonLine("job-1", e, &line);
  ASSERT_EQ(line.back(), '\n');
  google::protobuf::Struct s = ParseJson(line);
  EXPECT_EQ(s.fields().at("job_id").string_value(), "job-1");
  EXPECT_EQ(s.fields().at("action").string_value(), "clip");
  EXPECT_EQ(s.fields().at("trigger").string_value(), "gnmr");
  EXPECT_EQ(s.fields().at("observed_step").number_value(), 120);
  EXPECT_EQ(s.fields().size(), 17u);
  StatusOr<v1::Event> back = ParseEventJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->SerializeAsString(), e.SerializeAsString());
}

// The forward channel's figures (proto fields 15-17) round-trip, and a
// line written before they existed reads them as 0.
TEST(EventJsonTest, ForwardFiguresRoundTripAndOldLinesReadThemAsZero) {
  v1::Event e = MakeEvent(7);
  e.set_trigger(v1::TRIGGER_SATURATION);
  e.set_fwd_ratio(1.25);
  e.set_saturation_ratio(300);
  e.set_underflow_ratio(-0.125);
  std::string line;
  AppendEventJsonLine("j", e, &line);
  google::protobuf::Struct s = ParseJson(line);
  EXPECT_EQ(s.fields().at("fwd_ratio").number_value(), 1.25);
  EXPECT_EQ(s.fields().at("saturation_ratio").number_value(), 300);
  EXPECT_EQ(s.fields().at("underflow_ratio").number_value(), -0.125);
  StatusOr<v1::Event> back = ParseEventJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->SerializeAsString(), e.SerializeAsString());

  // A line of an older gnmrd: exactly the keys it wrote.
  StatusOr<v1::Event> old = ParseEventJsonLine(
      R"({"job_id":"j","observed_step":120,"apply_step":121,"kind":"admission",)"
      R"("unit":"u","action":"promote","trigger":"gnmr","gnmr":3.1,"delta":0.4,)"
      R"("norm":12.5,"mu":4,"until":141,"detail":"","time_unix":1767225600.25})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->gnmr(), 3.1);
  EXPECT_EQ(old->fwd_ratio(), 0.0);
  EXPECT_EQ(old->saturation_ratio(), 0.0);
  EXPECT_EQ(old->underflow_ratio(), 0.0);
  // Hostile values: the types are checked like every other number's.
  EXPECT_FALSE(ParseEventJsonLine(R"({"fwd_ratio":"big"})").ok());
  StatusOr<v1::Event> null_figure = ParseEventJsonLine(R"({"saturation_ratio":null})");
  ASSERT_TRUE(null_figure.ok());
  EXPECT_TRUE(std::isnan(null_figure->saturation_ratio()));
}

// The backward channel's B (field 18) round-trips, and is written only
// when the backward channel judged the sample: every other line keeps its
// keys.
TEST(EventJsonTest, TheBackwardFigureRoundTripsAndIsWrittenOnlyWhenJudged) {
  v1::Event e = MakeEvent(7);
  e.set_trigger(v1::TRIGGER_BACKWARD);
  e.set_bwd_ratio(16.5);
  std::string line;
  AppendEventJsonLine("j", e, &line);
  google::protobuf::Struct s = ParseJson(line);
  EXPECT_EQ(s.fields().at("bwd_ratio").number_value(), 16.5);
  EXPECT_EQ(s.fields().at("trigger").string_value(), "backward");
  StatusOr<v1::Event> back = ParseEventJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->SerializeAsString(), e.SerializeAsString());
  e.set_bwd_ratio(0.0);
  line.clear();
  AppendEventJsonLine("j", e, &line);
  EXPECT_EQ(line.find("bwd_ratio"), std::string::npos) << line;
  EXPECT_FALSE(ParseEventJsonLine(R"({"bwd_ratio":"big"})").ok());
  EXPECT_EQ(v1::Event::descriptor()->FindFieldByName("bwd_ratio")->number(), 18);
}

// On the wire (Admin ListEvents) the figures are fields new to Event: an
// older gnmrd's events read them as 0 and an older gnmrctl skips them.
// Renumbering them would misread every event already sent.
TEST(EventJsonTest, ForwardFiguresKeepTheirFieldNumbers) {
  const google::protobuf::Descriptor* d = v1::Event::descriptor();
  EXPECT_EQ(d->FindFieldByName("fwd_ratio")->number(), 15);
  EXPECT_EQ(d->FindFieldByName("saturation_ratio")->number(), 16);
  EXPECT_EQ(d->FindFieldByName("underflow_ratio")->number(), 17);
}

TEST(EventJsonTest, NonFiniteIsNullAndHostileStringsStayValid) {
  v1::Event e = MakeEvent(5, "denied_clip");
  e.set_gnmr(NAN);
  e.set_norm(INFINITY);
  e.set_mu(-INFINITY);
  e.set_unit("quote\" back\\slash\nnew\tline\x01\xff\xc3(");
  e.set_detail(std::string(100000, 'd'));
  e.set_action(static_cast<v1::Action>(42));  // open enum: unknown value
  std::string line;
  AppendEventJsonLine(std::string(1000, '\x02'), e, &line);
  EXPECT_LE(line.size(), kMaxEventLineBytes);
  google::protobuf::Struct s = ParseJson(line);
  EXPECT_EQ(s.fields().at("gnmr").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(s.fields().at("norm").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(s.fields().at("action").number_value(), 42);
  StatusOr<v1::Event> back = ParseEventJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(std::isnan(back->gnmr()));
  EXPECT_TRUE(std::isnan(back->norm()));
  EXPECT_EQ(back->delta(), 0.5);
  EXPECT_EQ(back->action(), 42);
  EXPECT_EQ(back->unit(), "quote\" back\\slash\nnew\tline\x01\xEF\xBF\xBD\xEF\xBF\xBD(");
  EXPECT_EQ(back->detail().size(), 1024u);
}

// A line holds only what its kind carries: a release or a global skip has
// no action (it read "promote"), and an event no rule triggered no trigger
// (it read "none"). Absent keys read back as the proto's defaults.
TEST(EventJsonTest, KindsWithoutActionOrTriggerLeaveThemOut) {
  v1::Event skip = MakeEvent(9, "global_skip");
  skip.clear_action();
  skip.clear_trigger();
  std::string line;
  AppendEventJsonLine("j", skip, &line);
  google::protobuf::Struct s = ParseJson(line);
  EXPECT_EQ(s.fields().count("action"), 0u) << line;
  EXPECT_EQ(s.fields().count("trigger"), 0u) << line;
  StatusOr<v1::Event> back = ParseEventJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->SerializeAsString(), skip.SerializeAsString());

  // A release keeps no action either, even one set by mistake; a denial
  // keeps its trigger but has no action.
  line.clear();
  AppendEventJsonLine("j", MakeEvent(9, "release"), &line);
  EXPECT_EQ(ParseJson(line).fields().count("action"), 0u) << line;
  line.clear();
  AppendEventJsonLine("j", MakeEvent(9, "denial"), &line);
  s = ParseJson(line);
  EXPECT_EQ(s.fields().count("action"), 0u) << line;
  EXPECT_EQ(s.fields().at("trigger").string_value(), "gnmr");
}

// A fuzz finding (docs/fuzzing.md): "mu":-.0 parsed to -0, was written as
// "-0", which reads back as +0 and was then written as "0".
TEST(EventJsonTest, NegativeZeroRendersTheSameTwice) {
  StatusOr<v1::Event> e = ParseEventJsonLine(
      R"({"observed_step":1,"kind":"admission","unit":"u","mu":-.0,"norm":-0.0})");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::string once, twice;
  AppendEventJsonLine("j", *e, &once);
  EXPECT_NE(once.find("\"mu\":0,"), std::string::npos) << once;
  StatusOr<v1::Event> back = ParseEventJsonLine(once);
  ASSERT_TRUE(back.ok());
  AppendEventJsonLine("j", *back, &twice);
  EXPECT_EQ(once, twice);
}

TEST(EventJsonTest, SanitizeUtf8) {
  EXPECT_EQ(SanitizeUtf8("ok \xc3\xa9", 100), "ok \xc3\xa9");
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80", 100), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("\xc0\xaf", 100), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("ab\xc3\xa9", 3), "ab");  // never splits a character
  EXPECT_EQ(SanitizeUtf8("\xf0\x9f\x92\xa5", 4), "\xf0\x9f\x92\xa5");
}

TEST(EventJsonTest, RejectsMalformedLines) {
  for (const std::string bad :
       {"", "{", "[1]", "{\"observed_step\":1.5}", "{\"kind\":3}", "{\"action\":\"explode\"}",
        "{\"gnmr\":\"x\"}", "{\"until\":1e30}"}) {
    EXPECT_FALSE(ParseEventJsonLine(bad).ok()) << bad;
  }
  EXPECT_TRUE(ParseEventJsonLine("{\"future_key\":[1,2]}").ok());
}

TEST(EventLogTest, WritesOneValidJsonLinePerEvent) {
  ScratchDir dir;
  EventLog log(dir.path());
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(log.Append("j", MakeEvent(i)));
  v1::Event no_time = MakeEvent(25, "config_change");
  no_time.set_time_unix(0);
  ASSERT_TRUE(log.Append("j", no_time));
  ASSERT_TRUE(log.Flush().ok());
  const std::vector<std::string> lines = Lines(ReadFileOrEmpty(EventsPath(dir, "j")));
  ASSERT_EQ(lines.size(), 26u);
  for (size_t i = 0; i < lines.size(); ++i) {
    google::protobuf::Struct s = ParseJson(lines[i]);
    EXPECT_EQ(s.fields().at("observed_step").number_value(), static_cast<double>(i));
  }
  EXPECT_GT(ParseJson(lines.back()).fields().at("time_unix").number_value(), 1.6e9);
  const EventLog::Counters c = log.counters();
  EXPECT_EQ(c.appended, 26u);
  EXPECT_EQ(c.written, 26u);
  EXPECT_EQ(c.dropped, 0u);
}

TEST(EventLogTest, BatchAppendKeepsOrderUnderOneLock) {
  ScratchDir dir;
  EventLog log(dir.path(), WithRing(3));
  std::vector<v1::Event> batch;
  for (int i = 0; i < 5; ++i) batch.push_back(MakeEvent(i));
  EXPECT_EQ(log.Append("j", batch), 5u);
  const std::vector<v1::Event> ring = log.List("j", 0, 0);
  ASSERT_EQ(ring.size(), 3u);
  EXPECT_EQ(ring.front().observed_step(), 2);
  ASSERT_TRUE(log.Flush().ok());
  const std::vector<std::string> lines = Lines(ReadFileOrEmpty(EventsPath(dir, "j")));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(ParseEventJsonLine(lines[4])->observed_step(), 4);
}

TEST(EventLogTest, RingIsBoundedAndListFilters) {
  ScratchDir dir;
  EventLog log(dir.path(), WithRing(100));
  for (int i = 0; i < 250; ++i) log.Append("j", MakeEvent(i));
  log.Append("other", MakeEvent(1000));

  std::vector<v1::Event> all = log.List("j", 0, 0);
  ASSERT_EQ(all.size(), 100u);
  EXPECT_EQ(all.front().observed_step(), 150);
  EXPECT_EQ(all.back().observed_step(), 249);

  std::vector<v1::Event> since = log.List("j", 200, 0);
  ASSERT_EQ(since.size(), 50u);
  EXPECT_EQ(since.front().observed_step(), 200);

  std::vector<v1::Event> newest = log.List("j", 0, 10);  // newest 10
  ASSERT_EQ(newest.size(), 10u);
  EXPECT_EQ(newest.front().observed_step(), 240);
  EXPECT_EQ(newest.back().observed_step(), 249);

  EXPECT_TRUE(log.List("j", 250, 0).empty());
  EXPECT_TRUE(log.List("unknown", 0, 0).empty());
  EXPECT_EQ(log.List("other", 0, 0).size(), 1u);
  // The file has every event, not only the ring's.
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(Lines(ReadFileOrEmpty(EventsPath(dir, "j"))).size(), 250u);
}

// Issue 12 item 8: a job's ring is bounded in bytes, not only in events
// (10,000 events of 256-byte names held ~10 MiB a job), and so is the
// write buffer; a huge detail is capped as in the file.
TEST(EventLogTest, RingAndBufferAreBoundedInBytes) {
  ScratchDir dir;
  EventLogOptions options = WithRing(100000);
  options.ring_bytes = 64u << 10;
  options.max_buffered_bytes = 32u << 10;
  options.flush_interval = std::chrono::hours(1);  // the buffer fills
  EventLog log(dir.path(), options);
  for (int i = 0; i < 5000; ++i) {
    v1::Event e = MakeEvent(i);
    e.set_unit(std::string(200, 'u') + std::to_string(i));
    e.set_detail(std::string(5000, 'd'));
    log.Append("j", std::move(e));
  }
  const std::vector<v1::Event> ring = log.List("j", 0, 100000);
  ASSERT_FALSE(ring.empty());
  EXPECT_EQ(ring.back().observed_step(), 4999);  // the newest are kept
  EXPECT_EQ(ring.back().detail().size(), 1024u);
  size_t bytes = 0;
  for (const v1::Event& e : ring) bytes += EventMemoryBytes(e);
  EXPECT_LE(bytes, options.ring_bytes);
  EXPECT_LE(bytes + EventMemoryBytes(ring.front()), RingMemoryBound(options));
  EXPECT_LT(ring.size(), 5000u);
  EXPECT_GT(ring.size(), 20u);
  // The buffer took what fits in 32 KiB (the writer woke at half of it:
  // what it took out is written), the rest is counted as dropped.
  EXPECT_GT(log.counters().dropped, 0u);
  ASSERT_TRUE(log.Flush().ok());
  const EventLog::Counters c = log.counters();
  EXPECT_EQ(c.written + c.dropped, 5000u);
}

TEST(EventLogTest, ReloadTailAfterRestart) {
  ScratchDir dir;
  const EventLogOptions options = WithRing(100);
  {
    EventLog log(dir.path(), options);
    for (int i = 0; i < 150; ++i) log.Append("j", MakeEvent(i));
  }  // destructor flushes
  EventLog log(dir.path(), options);
  EXPECT_TRUE(log.List("j", 0, 0).empty());
  ASSERT_TRUE(log.ReloadTail("j").ok());
  std::vector<v1::Event> events = log.List("j", 0, 0);
  ASSERT_EQ(events.size(), 100u);
  EXPECT_EQ(events.front().observed_step(), 50);
  EXPECT_EQ(events.back().SerializeAsString(), MakeEvent(149).SerializeAsString());
  // Once the ring is in use, a reload would duplicate: refused.
  EXPECT_EQ(log.ReloadTail("j").code(), StatusCode::kFailedPrecondition);
  // A job without a file reloads nothing, successfully.
  EXPECT_TRUE(log.ReloadTail("never-seen").ok());
  EXPECT_TRUE(log.List("never-seen", 0, 0).empty());
}

TEST(EventLogTest, TornLastLineIsSkippedAndRepairedBeforeAppending) {
  ScratchDir dir;
  {
    EventLog log(dir.path());
    log.Append("j", MakeEvent(1));
    log.Append("j", MakeEvent(2));
  }
  const std::string path = EventsPath(dir, "j");
  // A crash mid-write: a torn line without '\n', and a garbage line.
  WriteFileOrFail(path, ReadFileOrEmpty(path) + "not json\n{\"job_id\":\"j\",\"obs");
  EventLog log(dir.path());
  ASSERT_TRUE(log.ReloadTail("j").ok());
  EXPECT_EQ(log.List("j", 0, 0).size(), 2u);
  EXPECT_EQ(log.counters().reload_skipped, 1u);  // "not json"; torn tail unread
  log.Append("j", MakeEvent(3));
  ASSERT_TRUE(log.Flush().ok());
  const std::vector<std::string> lines = Lines(ReadFileOrEmpty(path));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[3], "{\"job_id\":\"j\",\"obs");  // torn line stays alone
  EXPECT_TRUE(ParseEventJsonLine(lines[4]).ok()) << lines[4];
}

TEST(EventLogTest, UnwritableDirectoryIsCountedNeverFatal) {
  ScratchDir dir;
  WriteFileOrFail(dir / "file", "x");
  EventLog log(dir / "file");
  EXPECT_TRUE(log.Append("j", MakeEvent(1)));
  Status s = log.Flush();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(log.counters().write_failures, 1u);
  EXPECT_EQ(log.List("j", 0, 0).size(), 1u);  // still served from memory
  EXPECT_TRUE(log.Flush().ok());              // the error was reported once
}

TEST(EventLogTest, AppendAfterStopIsDroppedFromFileButKeptInMemory) {
  ScratchDir dir;
  EventLog log(dir.path());
  log.Stop();
  EXPECT_FALSE(log.Append("j", MakeEvent(1)));
  EXPECT_EQ(log.counters().dropped, 1u);
  EXPECT_EQ(log.List("j", 0, 0).size(), 1u);
  EXPECT_TRUE(log.Flush().ok());
}

TEST(EventLogTest, ConcurrentAppendersLoseNothingButCountedDrops) {
  ScratchDir dir;
  EventLogOptions options;
  options.max_buffered = 256;  // small: drops are possible, and counted
  options.flush_interval = std::chrono::milliseconds(1);
  EventLog log(dir.path(), options);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < kEach; ++i) {
        log.Append(t % 2 == 0 ? "even" : "odd", MakeEvent(i));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_TRUE(log.Flush().ok());
  const EventLog::Counters c = log.counters();
  EXPECT_EQ(c.appended, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(c.written + c.dropped, c.appended);
  const size_t lines = Lines(ReadFileOrEmpty(EventsPath(dir, "even"))).size() +
                       Lines(ReadFileOrEmpty(EventsPath(dir, "odd"))).size();
  EXPECT_EQ(lines, c.written);
}

}  // namespace
}  // namespace store
}  // namespace gnmr
