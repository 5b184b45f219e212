// `gnmrctl replay --variant`: the real binary prints one what-if row per
// config (base first), each row equal to what a plain replay of that config
// reports; --table, --out, and the error for a bad variant.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

const std::string kSource = GNMR_SOURCE_DIR;
const std::string kTrace = kSource + "/examples/traces/example.csv";
const std::string kConfig = kSource + "/examples/configs/replay.yaml";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The numbers of a row: admissions, nonfinite, gnmr, delta, denials,
// releases, global skips, recovery %, peak.
struct Row {
  std::string label;
  long admissions = -1, nonfinite = -1, gnmr = -1, delta = -1, denials = -1, releases = -1,
       skips = -1, peak = -1;
  double recovery_percent = -1;
};

// A table row: the label is everything before the last 9 fields.
Row ParseRow(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string f; in >> f;) fields.push_back(f);
  Row r;
  if (fields.size() < 10) return r;
  const size_t n = fields.size();
  for (size_t i = 0; i + 9 < n; ++i) r.label += (i > 0 ? " " : "") + fields[i];
  r.admissions = std::stol(fields[n - 9]);
  r.nonfinite = std::stol(fields[n - 8]);
  r.gnmr = std::stol(fields[n - 7]);
  r.delta = std::stol(fields[n - 6]);
  r.denials = std::stol(fields[n - 5]);
  r.releases = std::stol(fields[n - 4]);
  r.skips = std::stol(fields[n - 3]);
  r.recovery_percent = std::stod(fields[n - 2]);  // "1.08%"
  r.peak = std::stol(fields[n - 1]);
  return r;
}

// The same numbers from a plain replay's summary on stderr.
Row ParseSummary(const std::string& err) {
  Row r;
  const size_t a = err.find("admissions: ");
  const size_t f = err.find("recovery fraction: ");
  const size_t p = err.find("peak units in recovery: ");
  if (a == std::string::npos || f == std::string::npos || p == std::string::npos) return r;
  std::sscanf(err.c_str() + a,
              "admissions: %ld (nonfinite %ld, gnmr %ld, delta %ld); denials: %ld; releases: "
              "%ld; global skips: %ld",
              &r.admissions, &r.nonfinite, &r.gnmr, &r.delta, &r.denials, &r.releases, &r.skips);
  double fraction = -1;
  std::sscanf(err.c_str() + f, "recovery fraction: %lf", &fraction);
  r.recovery_percent = fraction * 100.0;
  std::sscanf(err.c_str() + p, "peak units in recovery: %ld", &r.peak);
  return r;
}

class ReplayWhatIf : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "/gnmrctl_whatif_" + info->name();
    ASSERT_EQ(std::system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "'").c_str()), 0);
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }

  int Run(const std::string& args) {
    const std::string cmd = std::string("'") + GNMRCTL_PATH + "' " + args + " >'" + dir_ +
                            "/stdout' 2>'" + dir_ + "/stderr'";
    const int status = std::system(cmd.c_str());
    out_ = ReadFile(dir_ + "/stdout");
    err_ = ReadFile(dir_ + "/stderr");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string dir_, out_, err_;
};

TEST_F(ReplayWhatIf, OneRowPerVariantEachAsItsOwnReplay) {
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"tau=2", "--set tau=2"},
      {"max_o=1", "--set max_o=1"},
      {"tau=2,max_o=1,lock_steps=30", "--set tau=2 --set max_o=1 --set lock_steps=30"},
      {"actions=[{pattern: \"*\", action: clip}],max_o=2",
       "--set 'actions=[{pattern: \"*\", action: clip}]' --set max_o=2"}};
  std::string args = "replay --trace '" + kTrace + "' --config '" + kConfig + "'";
  for (const auto& [spec, sets] : variants) args += " --variant '" + spec + "'";
  ASSERT_EQ(Run(args), 0) << err_;
  const std::vector<std::string> lines = Lines(out_);
  ASSERT_EQ(lines.size(), 1 + 1 + variants.size()) << out_;
  EXPECT_EQ(lines[0].rfind("variant", 0), 0u) << lines[0];
  for (const char* column : {"admissions", "nonfinite", "gnmr", "delta", "denials", "releases",
                             "global skips", "recovery fraction", "peak in recovery"}) {
    EXPECT_NE(lines[0].find(column), std::string::npos) << column;
  }
  EXPECT_NE(err_.find("what-if " + kTrace + ": 320 steps (0..319), 26 units, 5 config(s)"),
            std::string::npos)
      << err_;

  std::vector<std::pair<std::string, std::string>> all = {{"base", ""}};
  all.insert(all.end(), variants.begin(), variants.end());
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].first);
    const Row row = ParseRow(lines[1 + i]);
    EXPECT_EQ(row.label, all[i].first);
    ASSERT_EQ(Run("replay --trace '" + kTrace + "' --config '" + kConfig + "' " + all[i].second +
                  " --out '" + dir_ + "/d.jsonl'"),
              0)
        << err_;
    const Row want = ParseSummary(err_);
    ASSERT_GE(want.admissions, 0) << err_;
    EXPECT_EQ(row.admissions, want.admissions);
    EXPECT_EQ(row.nonfinite, want.nonfinite);
    EXPECT_EQ(row.gnmr, want.gnmr);
    EXPECT_EQ(row.delta, want.delta);
    EXPECT_EQ(row.denials, want.denials);
    EXPECT_EQ(row.releases, want.releases);
    EXPECT_EQ(row.skips, want.skips);
    EXPECT_NEAR(row.recovery_percent, want.recovery_percent, 0.006);  // two decimals
    EXPECT_EQ(row.peak, want.peak);
    EXPECT_EQ(row.admissions, row.nonfinite + row.gnmr + row.delta);
  }
  // The variants change what they should: max_o=1 caps the peak at one
  // unit and denies more than the base's max_o=3.
  const Row base = ParseRow(lines[1]);
  const Row one = ParseRow(lines[3]);
  EXPECT_EQ(one.peak, 1);
  EXPECT_GT(one.denials, base.denials);
}

TEST_F(ReplayWhatIf, TableAloneAndToAFile) {
  ASSERT_EQ(Run("replay --trace '" + kTrace + "' --table --quiet"), 0) << err_;
  EXPECT_EQ(Lines(out_).size(), 2u) << out_;
  EXPECT_EQ(ParseRow(Lines(out_)[1]).label, "base");
  EXPECT_EQ(err_, "");

  ASSERT_EQ(Run("replay --trace '" + kTrace + "' --variant max_o=1 --out '" + dir_ +
                "/table.txt' --quiet"),
            0)
      << err_;
  EXPECT_EQ(out_, "");
  const std::vector<std::string> lines = Lines(ReadFile(dir_ + "/table.txt"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(ParseRow(lines[2]).label, "max_o=1");
}

TEST_F(ReplayWhatIf, ABadVariantIsAUsageErrorNamingIt) {
  EXPECT_EQ(Run("replay --trace '" + kTrace + "' --variant tau=3 --variant 'max_o=2,tau=x'"), 2);
  EXPECT_EQ(err_,
            "gnmrctl: --variant 'max_o=2,tau=x': tau=x: config key 'tau' must be a number, "
            "got 'x'\n");
  EXPECT_EQ(out_, "");
  EXPECT_EQ(Run("replay --trace '" + kTrace + "' --variant 'tau=3,'"), 2);
  EXPECT_EQ(err_, "gnmrctl: --variant 'tau=3,': empty override (write key=value[,key=value...])\n");
  EXPECT_EQ(Run("replay --trace '" + kTrace + "' --variant nokey=1"), 2);
  EXPECT_NE(err_.find("unknown config key 'nokey'"), std::string::npos) << err_;
}

}  // namespace
