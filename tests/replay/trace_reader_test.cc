// TraceReader: column orders, optional columns, nan/inf, name resolution,
// chunked file reading, and every input error with its line number.
#include "controller/replay/trace_reader.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

struct Row {
  int64_t step;
  std::string unit;
  UnitSample s;
};

// Reads every step of `text`; fails the test on error.
std::vector<Row> ReadAll(const std::string& text, TraceReader* r) {
  EXPECT_TRUE(r->OpenBuffer(text, "t.csv").ok());
  std::vector<Row> rows;
  TraceStep step;
  for (;;) {
    bool got = false;
    Status s = r->Next(&step, &got);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok() || !got) break;
    for (const UnitSample& u : step.samples) {
      rows.push_back({step.step, std::string(r->unit_name(u.unit_id)), u});
    }
  }
  return rows;
}

std::vector<Row> ReadAll(const std::string& text) {
  TraceReader r;
  return ReadAll(text, &r);
}

// Writes `text` to a file `name` in the test's temporary directory;
// returns its path ("" on failure).
std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return "";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok ? path : "";
}

// The first error reading `text` (header or rows); "" if none.
std::string FirstError(const std::string& text) {
  TraceReader r;
  Status s = r.OpenBuffer(text, "t.csv");
  TraceStep step;
  bool got = true;
  while (s.ok() && got) s = r.Next(&step, &got);
  return s.message();
}

TEST(TraceReader, GroupsRowsIntoStepsWithFirstAppearanceIds) {
  TraceReader r;
  const std::string text =
      "step,unit,sumsq\n"
      "3,b,4\n"
      "3,a,9\n"
      "7,a,1\n"
      "7,c,2.5\n";
  ASSERT_TRUE(r.OpenBuffer(text, "t.csv").ok());
  TraceStep step;
  bool got = false;
  ASSERT_TRUE(r.Next(&step, &got).ok());
  ASSERT_TRUE(got);
  EXPECT_EQ(step.step, 3);
  EXPECT_EQ(step.first_line, 2u);
  ASSERT_EQ(step.samples.size(), 2u);
  EXPECT_EQ(step.samples[0].unit_id, 0u);  // b first seen
  EXPECT_EQ(step.samples[0].sumsq, 4.0);
  EXPECT_EQ(step.samples[1].unit_id, 1u);
  ASSERT_TRUE(r.Next(&step, &got).ok());
  ASSERT_TRUE(got);
  EXPECT_EQ(step.step, 7);
  EXPECT_EQ(step.first_line, 4u);
  ASSERT_EQ(step.samples.size(), 2u);
  EXPECT_EQ(step.samples[0].unit_id, 1u);  // a keeps its id
  EXPECT_EQ(step.samples[1].unit_id, 2u);
  EXPECT_EQ(step.samples[1].sumsq, 2.5);
  ASSERT_TRUE(r.Next(&step, &got).ok());
  EXPECT_FALSE(got);
  EXPECT_EQ(r.num_units(), 3u);
  EXPECT_EQ(r.unit_name(0), "b");
  EXPECT_EQ(r.unit_name(2), "c");
  EXPECT_EQ(r.rows(), 4u);
  EXPECT_EQ(r.bytes_consumed(), text.size());
}

TEST(TraceReader, ColumnsInAnyOrder) {
  auto rows = ReadAll(
      "numel,nonfinite,unit,zeros,sumsq,amax,step\n"
      "100,2,x,7,16,0.5,11\n");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 11);
  EXPECT_EQ(rows[0].unit, "x");
  EXPECT_EQ(rows[0].s.sumsq, 16.0);
  EXPECT_EQ(rows[0].s.amax, 0.5);
  EXPECT_EQ(rows[0].s.nonfinite, 2u);
  EXPECT_EQ(rows[0].s.zeros, 7u);
  EXPECT_EQ(rows[0].s.numel, 100u);
}

TEST(TraceReader, ForwardColumnsWithTheirOrder) {
  auto rows = ReadAll(
      "step,unit,sumsq,fwd_sumsq,fwd_amax,fwd_saturated,fwd_zeros,fwd_numel,fwd_order\n"
      "3,v,1,256,9,2,5,100,3\n"
      "3,o,1,4,1,0,0,100,\n"
      "3,fc1,1,4,1,0,0,100,4294967297\n");  // stage 1, position 1: all 64 bits
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].s.fwd_sumsq, 256.0);
  EXPECT_EQ(rows[0].s.fwd_numel, 100u);
  EXPECT_EQ(rows[0].s.fwd_order, 3u);
  EXPECT_EQ(rows[1].s.fwd_order, 0u);  // empty: unknown
  EXPECT_EQ(rows[2].s.fwd_order, ForwardOrderKey(1, 1));
}

// The block columns (docs/statistics.md, "Block columns"): read by name,
// empty is 0, and counts that do not fit are an error with the line.
TEST(TraceReader, BlockColumnsAndTheirBounds) {
  auto rows = ReadAll(
      "step,unit,sumsq,fwd_numel,fwd_blocks,fwd_saturated_blocks,fwd_dead_blocks,"
      "fwd_scale_clamps\n"
      "3,v,1,1024,32,2,1,3\n"
      "3,o,1,100,,,,\n");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].s.fwd_blocks, 32u);
  EXPECT_EQ(rows[0].s.fwd_saturated_blocks, 2u);
  EXPECT_EQ(rows[0].s.fwd_dead_blocks, 1u);
  EXPECT_EQ(rows[0].s.fwd_scale_clamps, 3u);
  EXPECT_EQ(rows[1].s.fwd_blocks, 0u);
  const std::string head = "step,unit,sumsq,fwd_numel,fwd_blocks,fwd_dead_blocks\n";
  EXPECT_EQ(FirstError(head + "1,a,1,64,8,9\n"),
            "t.csv:2: fwd_blocks (8) cannot exceed fwd_numel (64), nor "
            "fwd_saturated_blocks (0), fwd_dead_blocks (9) or fwd_scale_clamps (0) fwd_blocks, "
            "nor fwd_source_numel (0) fwd_numel, nor fwd_underflow (0) fwd_source_numel");
  EXPECT_NE(FirstError(head + "1,a,1,64,65,0\n").find("fwd_blocks (65) cannot exceed"),
            std::string::npos);
}

// Source columns (docs/statistics.md, "Source columns"): the two counts as
// counts, the two sums finite and >= 0; counts that do not fit are an error
// with the line.
TEST(TraceReader, SourceColumnsAndTheirBounds) {
  const std::string head =
      "step,unit,sumsq,fwd_numel,fwd_source_numel,fwd_underflow,fwd_error_sumsq,"
      "fwd_source_sumsq\n";
  auto rows = ReadAll(head + "3,v,1,1024,1024,7,0.125,1e3\n3,o,1,100,,,,\n");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].s.fwd_source_numel, 1024u);
  EXPECT_EQ(rows[0].s.fwd_underflow, 7u);
  EXPECT_EQ(rows[0].s.fwd_error_sumsq, 0.125);
  EXPECT_EQ(rows[0].s.fwd_source_sumsq, 1e3);
  EXPECT_EQ(rows[1].s.fwd_source_numel, 0u);
  EXPECT_EQ(rows[1].s.fwd_error_sumsq, 0.0);
  EXPECT_EQ(FirstError(head + "1,a,1,64,64,0,-1,1\n"),
            "t.csv:2: column 'fwd_error_sumsq': '-1' is not a finite number >= 0");
  EXPECT_EQ(FirstError(head + "1,a,1,64,64,0,1,nan\n"),
            "t.csv:2: column 'fwd_source_sumsq': 'nan' is not a finite number >= 0");
  EXPECT_EQ(FirstError(head + "1,a,1,64,64,x,1,1\n"),
            "t.csv:2: column 'fwd_underflow': 'x' is not a non-negative integer");
  EXPECT_NE(FirstError(head + "1,a,1,64,65,0,1,1\n").find("nor fwd_source_numel (65) fwd_numel"),
            std::string::npos);
  EXPECT_NE(FirstError(head + "1,a,1,64,8,9,1,1\n").find("nor fwd_underflow (9) fwd_source_numel"),
            std::string::npos);
}

TEST(TraceReader, BackwardColumnsAndTheirBounds) {
  const std::string head =
      "step,unit,sumsq,bwd_sumsq,bwd_saturated,bwd_zeros,bwd_numel,bwd_order\n";
  auto rows = ReadAll(head + "3,v,1,2.5,1,7,1024,4294967298\n3,o,1,,,,,\n4,v,1,nan,0,0,8,1\n");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].s.bwd_sumsq, 2.5);
  EXPECT_EQ(rows[0].s.bwd_saturated, 1u);
  EXPECT_EQ(rows[0].s.bwd_zeros, 7u);
  EXPECT_EQ(rows[0].s.bwd_numel, 1024u);
  EXPECT_EQ(rows[0].s.bwd_order, BackwardOrderKey(kMaxPipelineStages - 2, 2));
  EXPECT_EQ(rows[1].s.bwd_numel, 0u);
  EXPECT_TRUE(std::isnan(rows[2].s.bwd_sumsq));  // a signal, as for the gradient
  EXPECT_EQ(FirstError(head + "1,a,1,-1,0,0,8,1\n"),
            "t.csv:2: column 'bwd_sumsq': '-1' is negative");
  EXPECT_EQ(FirstError(head + "1,a,1,1,x,0,8,1\n"),
            "t.csv:2: column 'bwd_saturated': 'x' is not a non-negative integer");
  EXPECT_EQ(FirstError(head + "1,a,1,1,0,9,8,1\n"),
            "t.csv:2: bwd_saturated (0) and bwd_zeros (9) cannot exceed bwd_numel (8)");
}

// The unit last is the form gnmrd's recorder wrote before it quoted: the
// name runs to the end of the line, commas and quotes as they are, so
// those traces read as they always did.
TEST(TraceReader, UnitInTheLastColumnRunsToTheEndOfTheLine) {
  auto rows = ReadAll(
      "step,sumsq,amax,nonfinite,zeros,numel,unit\n"
      "4,2.5,0.5,0,1,8,layers.0,fc\"1\"\n"
      "4,1,0,0,0,8,plain\n"
      "4,1,0,0,0,8,\"q\"\n"
      "4,1,0,0,0,8,\"a,b\"\n");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].unit, "layers.0,fc\"1\"");
  EXPECT_EQ(rows[0].s.sumsq, 2.5);
  EXPECT_EQ(rows[0].s.numel, 8u);
  EXPECT_EQ(rows[1].unit, "plain");
  EXPECT_EQ(rows[2].unit, "\"q\"");  // verbatim: nothing is quoted in this form
  EXPECT_EQ(rows[3].unit, "\"a,b\"");
  // Not last: a comma still separates fields.
  EXPECT_EQ(FirstError("step,unit,sumsq\n1,a,b,1\n"),
            "t.csv:2: column 'sumsq': 'b' is not a number");
}

// Any other header: RFC 4180 fields, as gnmrd's recorder writes them. A
// quoted field holds commas, doubled quotes and newlines and is not
// trimmed; a quote inside an unquoted field is an ordinary character.
// Lines count the newlines inside fields, so errors name the right line.
TEST(TraceReader, QuotedFieldsAreRfc4180) {
  TraceReader r;
  auto rows = ReadAll(
      "step,\"unit\",sumsq,note\n"                   // 1
      "1,\"a,b\",2.5,x\n"                            // 2
      "1,\"say \"\"hi\"\"\",\"3\",\"two\nlines\"\n"  // 3-4
      "1, \" padded \" ,1,\n"                        // 5
      "1,plain\"quote,1,\"\"\n"                      // 6
      "2,\"cr\r\nlf\",4,\"a,\"\"b\"\"\r\nc\"\r\n"    // 7-8
      "3,\"a,b\",1,\n",                              // 9
      &r);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].unit, "a,b");
  EXPECT_EQ(rows[0].s.sumsq, 2.5);
  EXPECT_EQ(rows[1].unit, "say \"hi\"");
  EXPECT_EQ(rows[1].s.sumsq, 3.0);
  EXPECT_EQ(rows[2].unit, " padded ");
  EXPECT_EQ(rows[3].unit, "plain\"quote");
  EXPECT_EQ(rows[4].step, 2);
  EXPECT_EQ(rows[4].unit, "cr\r\nlf");
  EXPECT_EQ(rows[4].s.sumsq, 4.0);
  EXPECT_EQ(rows[5].unit, "a,b");
  EXPECT_EQ(rows[5].s.unit_id, 0u);  // the same unit as on line 2
  EXPECT_EQ(r.num_units(), 5u);
  EXPECT_EQ(FirstError("step,unit,sumsq\n1,\"a\nb\",1\n\n2,\"a\nb\",x\n"),
            "t.csv:5: column 'sumsq': 'x' is not a number");
}

// Each line of a quoted field that runs over many lines is scanned once:
// 200,000 newlines inside one field (within the 1 MiB record bound) read
// at once, not in 200,000 rescans of the record so far, in a file read
// chunk by chunk as in a buffer.
TEST(TraceReader, AFieldOverManyLinesIsScannedOnce) {
  const std::string name = "a" + std::string(200000, '\n') + "b";
  const std::string text = "step,unit,sumsq\n1,\"" + name + "\",1\n2,x,1\n";
  TraceReader r;
  auto rows = ReadAll(text, &r);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].unit, name);
  EXPECT_EQ(rows[1].step, 2);
  EXPECT_EQ(FirstError(text + "3,x,bad\n"), "t.csv:200004: column 'sumsq': 'bad' is not a number");
  const std::string path = WriteTempFile("many_lines.csv", text);
  ASSERT_NE(path, "");
  TraceReader from_file;
  ASSERT_TRUE(from_file.OpenFile(path).ok());
  TraceStep step;
  bool got = false;
  ASSERT_TRUE(from_file.Next(&step, &got).ok());
  ASSERT_TRUE(got);
  EXPECT_EQ(from_file.unit_name(0), name);
  std::remove(path.c_str());
}

TEST(TraceReader, OptionalColumnsDefaultToZeroAndUnknownOnesAreIgnored) {
  TraceReader r;
  auto rows = ReadAll(
      "rank,step,unit,sumsq,zeros\n"
      "r0,1,x,2,\n"
      "r1,1,y,3,5\n",
      &r);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].s.amax, 0.0);
  EXPECT_EQ(rows[0].s.numel, 0u);
  EXPECT_EQ(rows[0].s.zeros, 0u);  // empty optional field
  EXPECT_EQ(rows[1].s.zeros, 5u);
  EXPECT_TRUE(r.has_column("zeros"));
  EXPECT_FALSE(r.has_column("amax"));
}

TEST(TraceReader, AcceptsNanAndInfSpellings) {
  auto rows = ReadAll(
      "step,unit,sumsq,amax\n"
      "1,a,nan,inf\n"
      "1,b,NaN,Inf\n"
      "1,c,inf,-inf\n"
      "1,d,Inf,NAN\n"
      "1,e,1e300,-INF\n"
      "1,f,+2.5,0\n"
      "1,g,-inf,0\n");  // a signal like +inf, not a negative number
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[6].s.sumsq, -HUGE_VAL);
  EXPECT_TRUE(std::isnan(rows[0].s.sumsq));
  EXPECT_EQ(rows[0].s.amax, HUGE_VAL);
  EXPECT_TRUE(std::isnan(rows[1].s.sumsq));
  EXPECT_EQ(rows[1].s.amax, HUGE_VAL);
  EXPECT_EQ(rows[2].s.sumsq, HUGE_VAL);
  EXPECT_EQ(rows[2].s.amax, -HUGE_VAL);
  EXPECT_EQ(rows[3].s.sumsq, HUGE_VAL);
  EXPECT_TRUE(std::isnan(rows[3].s.amax));
  EXPECT_EQ(rows[4].s.sumsq, 1e300);
  EXPECT_EQ(rows[4].s.amax, -HUGE_VAL);
  EXPECT_EQ(rows[5].s.sumsq, 2.5);
}

TEST(TraceReader, ToleratesCrlfBlankLinesSpacesBomAndNoFinalNewline) {
  auto rows = ReadAll(
      "\xEF\xBB\xBFstep, unit ,sumsq\r\n"
      "\r\n"
      "1, a , 4 \r\n"
      "\n"
      "2,a,9");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].unit, "a");
  EXPECT_EQ(rows[0].s.sumsq, 4.0);
  EXPECT_EQ(rows[1].step, 2);
  EXPECT_EQ(rows[1].s.sumsq, 9.0);
}

TEST(TraceReader, HeaderOnlyTraceHasNoSteps) { EXPECT_TRUE(ReadAll("step,unit,sumsq\n").empty()); }

// Rows reordered, units missing and new units mid-trace: the next-unit
// prediction misses and the hash lookup must still give stable ids.
TEST(TraceReader, NamesResolveWhateverTheRowOrder) {
  std::string text = "step,unit,sumsq\n";
  const int kUnits = 300;  // several rehashes
  for (int step = 0; step < 6; ++step) {
    for (int k = 0; k < kUnits; ++k) {
      // A different permutation each step (multipliers coprime to 300).
      const int mult[] = {1, 7, 11, 13, 17, 299};
      const int u = (k * mult[step] + 5 * step) % kUnits;
      if (step == 2 && u % 5 == 0) continue;  // a subset
      text +=
          std::to_string(step) + ",unit" + std::to_string(u) + "," + std::to_string(u + 1) + "\n";
    }
  }
  TraceReader r;
  auto rows = ReadAll(text, &r);
  EXPECT_EQ(r.num_units(), static_cast<size_t>(kUnits));
  ASSERT_FALSE(rows.empty());
  for (const Row& row : rows) {
    // The sumsq encodes the unit: the name behind the id must match it.
    EXPECT_EQ("unit" + std::to_string(static_cast<int>(row.s.sumsq) - 1), row.unit);
  }
}

TEST(TraceReader, ReadsFilesLargerThanOneChunk) {
  // ~3 MiB: lines straddle the 1 MiB chunk boundaries.
  std::string text = "step,unit,sumsq,amax,nonfinite,zeros,numel\n";
  for (int step = 0; step < 700; ++step) {
    for (int u = 0; u < 60; ++u) {
      text += std::to_string(step) + ",model.layers." + std::to_string(u) + ".mlp," +
              std::to_string(step * 1000 + u) + ".25,1.5,0,3,99\n";
    }
  }
  const std::string path = WriteTempFile("gnmr_big_trace.csv", text);
  ASSERT_NE(path, "");

  TraceReader file_reader;
  ASSERT_TRUE(file_reader.OpenFile(path).ok());
  EXPECT_EQ(file_reader.total_bytes(), text.size());
  TraceStep step;
  int64_t steps = 0;
  for (;;) {
    bool got = false;
    Status s = file_reader.Next(&step, &got);
    ASSERT_TRUE(s.ok()) << s.message();
    if (!got) break;
    ASSERT_EQ(step.step, steps);
    ASSERT_EQ(step.samples.size(), 60u);
    for (uint32_t u = 0; u < 60; ++u) {
      ASSERT_EQ(step.samples[u].unit_id, u);
      ASSERT_EQ(step.samples[u].sumsq, steps * 1000 + u + 0.25);
      ASSERT_EQ(step.samples[u].numel, 99u);
    }
    ++steps;
  }
  EXPECT_EQ(steps, 700);
  EXPECT_EQ(file_reader.rows(), 700u * 60u);
  EXPECT_EQ(file_reader.bytes_consumed(), text.size());
  std::remove(path.c_str());
}

TEST(TraceReader, RejectsAFileLineLongerThanOneMebibyte) {
  const std::string text = "step,unit,sumsq\n0,a,1\n1," + std::string(3 << 20, 'u') + ",1\n";
  const std::string path = WriteTempFile("gnmr_long_line.csv", text);
  ASSERT_NE(path, "");
  TraceReader r;
  ASSERT_TRUE(r.OpenFile(path).ok());
  TraceStep step;
  bool got = false;
  Status s = r.Next(&step, &got);
  EXPECT_EQ(s.message(), path + ":3: line longer than 1 MiB");
  std::remove(path.c_str());
}

TEST(TraceReader, MissingFileOrDirectoryIsAnInputError) {
  TraceReader r;
  Status s = r.OpenFile("/nonexistent/trace.csv");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/trace.csv: cannot open"), std::string::npos);
  TraceReader d;
  s = d.OpenFile(::testing::TempDir());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), ::testing::TempDir() + ": is a directory, not a trace");
}

struct ErrorCase {
  const char* name;
  const char* text;
  const char* expected;  // full message
};

class TraceReaderError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(TraceReaderError, NamesFileLineAndProblem) {
  EXPECT_EQ(FirstError(GetParam().text), GetParam().expected);
}

const ErrorCase kErrors[] = {
    {"Empty", "",
     "t.csv:1: empty trace: expected a header such as "
     "'step,unit,sumsq,amax,nonfinite,zeros,numel'"},
    {"MissingSumsq", "step,unit,amax\n1,a,2\n",
     "t.csv:1: missing column 'sumsq' in the header (required: step, unit, "
     "sumsq; optional: amax, nonfinite, zeros, numel, fwd_sumsq, fwd_amax, fwd_saturated, "
     "fwd_zeros, fwd_numel, fwd_order, fwd_blocks, fwd_saturated_blocks, fwd_dead_blocks, "
     "fwd_scale_clamps, fwd_source_numel, fwd_underflow, fwd_error_sumsq, fwd_source_sumsq, "
     "bwd_sumsq, bwd_saturated, bwd_zeros, bwd_numel, bwd_order)"},
    {"MissingUnitAfterBlankLines", "\n\nstep,sumsq\n",
     "t.csv:3: missing column 'unit' in the header (required: step, unit, "
     "sumsq; optional: amax, nonfinite, zeros, numel, fwd_sumsq, fwd_amax, fwd_saturated, "
     "fwd_zeros, fwd_numel, fwd_order, fwd_blocks, fwd_saturated_blocks, fwd_dead_blocks, "
     "fwd_scale_clamps, fwd_source_numel, fwd_underflow, fwd_error_sumsq, fwd_source_sumsq, "
     "bwd_sumsq, bwd_saturated, bwd_zeros, bwd_numel, bwd_order)"},
    {"DuplicateColumn", "step,unit,sumsq,unit\n", "t.csv:1: duplicate column 'unit'"},
    {"NonNumericSumsq", "step,unit,sumsq\n1,a,1\n1,b,abc\n",
     "t.csv:3: column 'sumsq': 'abc' is not a number"},
    {"TrailingGarbage", "step,unit,sumsq\n1,a,1.5x\n",
     "t.csv:2: column 'sumsq': '1.5x' is not a number"},
    {"NonNumericStep", "step,unit,sumsq\nten,a,1\n",
     "t.csv:2: column 'step': 'ten' is not a number"},
    {"FractionalStep", "step,unit,sumsq\n1.5,a,1\n",
     "t.csv:2: column 'step': '1.5' is not a number"},
    {"NegativeStep", "step,unit,sumsq\n-1,a,1\n", "t.csv:2: step -1 is negative"},
    // Found by trace_reader_fuzz: read to the end, then refused by replay.
    {"StepAboveTheControllersRange", "step,unit,sumsq\n0,a,1\n6000000000297947182,a,1\n",
     "t.csv:3: step 6000000000297947182 is above the largest step 2305843009213693951"},
    {"EmptySumsq", "step,unit,sumsq\n1,a,\n", "t.csv:2: column 'sumsq': empty value"},
    {"NegativeCount", "step,unit,sumsq,nonfinite\n1,a,1,-1\n",
     "t.csv:2: column 'nonfinite': '-1' is not a non-negative integer"},
    {"NonNumericAmax", "step,unit,sumsq,amax\n1,a,1,big\n",
     "t.csv:2: column 'amax': 'big' is not a number"},
    {"NegativeSumsq", "step,unit,sumsq\n1,a,-0.5\n",
     "t.csv:2: column 'sumsq': '-0.5' is negative (a sum of squares is >= 0, "
     "nan or inf)"},
    {"EmptyUnit", "step,unit,sumsq\n1,,1\n", "t.csv:2: empty unit name"},
    {"TooFewFields", "step,unit,sumsq,amax\n1,a,1,0\n2,a,1\n",
     "t.csv:3: expected 4 fields as in the header, got 3"},
    {"TooManyFields", "step,unit,sumsq\n1,a,1,0,0\n",
     "t.csv:2: expected 3 fields as in the header, got 5"},
    {"StepBackwards", "step,unit,sumsq\n5,a,1\n5,b,1\n4,a,1\n",
     "t.csv:4: step 4 goes backwards after step 5 (steps must increase and "
     "the rows of a step be contiguous)"},
    {"StepNotContiguous", "step,unit,sumsq\n1,a,1\n2,a,1\n\n1,b,1\n",
     "t.csv:5: step 1 goes backwards after step 2 (steps must increase and "
     "the rows of a step be contiguous)"},
    {"DuplicateUnit", "step,unit,sumsq\n1,a,1\n1,b,1\n1,a,2\n",
     "t.csv:4: unit 'a' appears twice in step 1 (first on line 2)"},
    {"UnterminatedQuote", "step,unit,sumsq\n1,a,1\n1,\"b,1\n2,a,1\n",
     "t.csv:3: a quoted field has no closing quote"},
    {"TextAfterTheClosingQuote", "step,unit,sumsq\n1,\"a\"b,1\n",
     "t.csv:2: text after the closing quote of 'a' (a quote inside a quoted field is doubled: "
     "\"\")"},
    {"TooManyFieldsQuotesHonoured", "step,unit,sumsq\n1,\"a,b\",1,2\n",
     "t.csv:2: expected 3 fields as in the header, got 4"},
    {"DuplicateUnitOpeningAStep", "step,unit,sumsq\n1,a,1\n2,a,1\n2,a,2\n",
     "t.csv:4: unit 'a' appears twice in step 2 (first on line 3)"},
};

INSTANTIATE_TEST_SUITE_P(AllCases, TraceReaderError, ::testing::ValuesIn(kErrors),
                         [](const ::testing::TestParamInfo<ErrorCase>& p) {
                           return std::string(p.param.name);
                         });

TEST(TraceReader, ErrorAfterValidStepsStillReportsTheRightLine) {
  TraceReader r;
  ASSERT_TRUE(r.OpenBuffer("step,unit,sumsq\n0,a,1\n1,a,1\n2,a,x\n", "t.csv").ok());
  TraceStep step;
  bool got = false;
  ASSERT_TRUE(r.Next(&step, &got).ok());
  EXPECT_EQ(step.step, 0);
  // Step 1 ends only at the next row, which is bad: the error comes with
  // step 1, before it is handed out.
  Status s = r.Next(&step, &got);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "t.csv:4: column 'sumsq': 'x' is not a number");
}

}  // namespace
}  // namespace gnmr
