// TraceReader: a fast, streaming reader of replay traces.
//
// A trace is CSV with a header naming its columns in any order: required
// `step,unit,sumsq`, optional `amax,nonfinite,zeros,numel` and the forward
// channel's `fwd_sumsq,fwd_amax,fwd_saturated,fwd_zeros,fwd_numel,fwd_order`
// and its block columns `fwd_blocks,fwd_saturated_blocks,fwd_dead_blocks,
// fwd_scale_clamps`, its source columns `fwd_source_numel,fwd_underflow,
// fwd_error_sumsq,fwd_source_sumsq`, and the backward channel's
// `bwd_sumsq,bwd_saturated,bwd_zeros,bwd_numel,bwd_order` (other columns
// are ignored, so a writer may add columns). One row per
// unit and observed step; the rows of a step are contiguous and steps never
// go backwards; a step is in [0, kMaxStep], as the controller takes it.
// `sumsq` and `amax` accept `nan`, `inf`, `-inf` in any case (NaN and +-Inf
// are signals, not errors, as in the daemon's StepStats), but a finite
// sumsq must not be negative. Blank lines are skipped; an empty optional
// field reads as 0.
//
// Quoting depends on where the header puts `unit`:
// - not last (gnmrd's recorder writes `step,unit,sumsq,...`): fields are
//   RFC 4180 (trace_csv.h): a field whose first non-blank character is a
//   quote runs to the closing quote, may hold commas, doubled quotes and
//   newlines, and is not trimmed;
// - last (the form gnmrd's recorder wrote before it quoted,
//   `step,sumsq,amax,nonfinite,zeros,numel,unit`): nothing is quoted and
//   the unit runs to the end of the line, commas and quotes included, so
//   those traces read exactly as they always did.
//
// Why it looks the way it does: replay must sustain millions of rows per
// second, so the reader streams the file in large chunks (bounded memory),
// parses numbers with std::from_chars, does no per-row allocation, and
// resolves unit names by predicting the next unit from the previous step's
// row order before falling back to a hash lookup. Units get dense ids in
// first-appearance order, which is the order `gnmrctl replay` registers
// them with the controller.
//
// Every error is InvalidArgument "FILE:LINE: problem" (1-based line).
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "controller/types/decision.h"
#include "gnmr/status.h"

namespace gnmr {

// The rows of one observed step. unit_id is the reader's unit id.
struct TraceStep {
  int64_t step = 0;
  uint64_t first_line = 0;  // line of the step's first row
  std::vector<UnitSample> samples;
};

class TraceReader {
 public:
  TraceReader();
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Opens a trace file and reads its header.
  Status OpenFile(const std::string& path);
  // Reads a trace from memory; `data` must outlive the reader. `name`
  // stands for the file in messages.
  Status OpenBuffer(std::string_view data, std::string name);

  // Reads the next step into `out` (its vector is reused). Sets *got to
  // false at the end of the trace.
  Status Next(TraceStep* out, bool* got);

  size_t num_units() const { return views_.size(); }
  std::string_view unit_name(uint32_t id) const { return views_[id]; }
  const std::string& name() const { return name_; }
  bool has_column(std::string_view column) const;

  uint64_t rows() const { return rows_; }
  uint64_t bytes_consumed() const { return base_offset_ + static_cast<uint64_t>(pos_ - data_); }
  uint64_t total_bytes() const { return total_bytes_; }  // 0 if unknown

 private:
  enum Col : uint8_t {
    kIgnore,
    kStep,
    kUnit,
    kSumsq,
    kAmax,
    kNonfinite,
    kZeros,
    kNumel,
    kFwdSumsq,
    kFwdAmax,
    kFwdSaturated,
    kFwdZeros,
    kFwdNumel,
    kFwdOrder,
    kFwdBlocks,
    kFwdSaturatedBlocks,
    kFwdDeadBlocks,
    kFwdScaleClamps,
    kFwdSourceNumel,
    kFwdUnderflow,
    kFwdErrorSumsq,  // the last two are numbers, not counts
    kFwdSourceSumsq,
    kBwdSaturated,  // counts
    kBwdZeros,
    kBwdNumel,
    kBwdOrder,
    kBwdSumsq,  // a number
  };
  struct Row {
    int64_t step = 0;
    std::string_view unit;
    UnitSample sample;
  };

  Status Begin();
  // Points *line at the next line (without its newline), false at the end.
  Status NextLine(std::string_view* line, bool* got);
  Status Refill();
  Status ParseHeader(std::string_view line);
  Status ParseRow(std::string_view line, Row* row);
  // ParseRow's steps (inline: they run for every field). ReadField: field
  // i at *p, its text *f and *comma the comma after it (null at the end).
  inline Status ReadField(size_t i, const char** p, const char* e, std::string_view* f,
                          const char** comma);
  // Field i's value into *row, range-checked as the controller checks it.
  inline Status StoreField(size_t i, std::string_view f, Row* row);
  Status StepRangeError(int64_t step, std::string_view f) const;
  Status ValueError(size_t i, std::string_view f) const;  // f is not a value of column i
  Status FieldCountError(std::string_view line) const;    // not as many fields as the header
  Status CheckForwardCounts(const UnitSample& u) const;
  // The field at *p, which may be quoted (or start with blanks): *f its
  // text, *comma the comma after it (null at the end of the row).
  Status QuotedField(const char** p, const char* e, std::string* scratch, std::string_view* f,
                     const char** comma);
  // Resolves a unit name to its id, registering it on first sight.
  uint32_t Resolve(std::string_view unit);
  uint32_t Lookup(std::string_view unit, uint64_t hash);
  void Rehash(size_t capacity);
  Status Error(uint64_t line, const std::string& problem) const;

  std::string name_;
  std::FILE* file_ = nullptr;
  std::vector<char> buf_;  // file mode: the current chunk
  const char* data_ = nullptr;
  const char* pos_ = nullptr;
  const char* end_ = nullptr;
  bool eof_ = false;
  uint64_t base_offset_ = 0;  // file offset of data_
  uint64_t total_bytes_ = 0;
  uint64_t line_no_ = 0;       // the current record's first line
  uint64_t record_lines_ = 0;  // ... and the newlines inside it
  uint64_t rows_ = 0;

  std::vector<Col> cols_;
  std::vector<std::string> header_;
  bool quoted_ = false;        // RFC 4180 rows (above), set by the header
  std::string unit_scratch_;   // a quoted unit with doubled quotes
  std::string field_scratch_;  // any other such field

  // Units: names with stable storage, views for fast compares, an
  // open-addressing table of id + 1 (0 = empty) and each id's hash.
  std::deque<std::string> names_;
  std::vector<std::string_view> views_;
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> slots_;
  // next_after_[k]: the unit that followed unit k - 1 last time (k = 0:
  // the first unit of a step); the guess for the next row.
  std::vector<uint32_t> next_after_;
  size_t prev_slot_ = 0;

  // Duplicate detection within a step.
  std::vector<uint64_t> seen_epoch_;
  std::vector<uint64_t> seen_line_;
  uint64_t epoch_ = 0;

  bool started_ = false;      // a step has been read
  int64_t step_ = 0;          // the step being read
  bool has_pending_ = false;  // first row of the next step, already parsed
  Row pending_;
  uint64_t pending_line_ = 0;
};

}  // namespace gnmr
