#include "controller/replay/trace_reader.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "controller/replay/trace_csv.h"

namespace gnmr {
namespace {

struct ColumnName {
  const char* name;
  uint8_t col;  // TraceReader::Col
  // A count column's field (an empty value reads as 0): StoreField runs for
  // every field, and a table costs it less than a case per count.
  uint64_t UnitSample::*count = nullptr;
};
// Same order as TraceReader::Col, kIgnore excluded.
constexpr ColumnName kColumns[] = {{"step", 1},
                                   {"unit", 2},
                                   {"sumsq", 3},
                                   {"amax", 4},
                                   {"nonfinite", 5, &UnitSample::nonfinite},
                                   {"zeros", 6, &UnitSample::zeros},
                                   {"numel", 7, &UnitSample::numel},
                                   {"fwd_sumsq", 8},
                                   {"fwd_amax", 9},
                                   {"fwd_saturated", 10, &UnitSample::fwd_saturated},
                                   {"fwd_zeros", 11, &UnitSample::fwd_zeros},
                                   {"fwd_numel", 12, &UnitSample::fwd_numel},
                                   {"fwd_order", 13, &UnitSample::fwd_order},
                                   {"fwd_blocks", 14, &UnitSample::fwd_blocks},
                                   {"fwd_saturated_blocks", 15, &UnitSample::fwd_saturated_blocks},
                                   {"fwd_dead_blocks", 16, &UnitSample::fwd_dead_blocks},
                                   {"fwd_scale_clamps", 17, &UnitSample::fwd_scale_clamps},
                                   {"fwd_source_numel", 18, &UnitSample::fwd_source_numel},
                                   {"fwd_underflow", 19, &UnitSample::fwd_underflow},
                                   {"fwd_error_sumsq", 20},
                                   {"fwd_source_sumsq", 21},
                                   {"bwd_saturated", 22, &UnitSample::bwd_saturated},
                                   {"bwd_zeros", 23, &UnitSample::bwd_zeros},
                                   {"bwd_numel", 24, &UnitSample::bwd_numel},
                                   {"bwd_order", 25, &UnitSample::bwd_order},
                                   {"bwd_sumsq", 26}};

template <typename T>
bool ParseNumber(std::string_view f, T* out) {
  if (!f.empty() && f.front() == '+') f.remove_prefix(1);
  const char* end = f.data() + f.size();
  auto r = std::from_chars(f.data(), end, *out);
  return !f.empty() && r.ec == std::errc() && r.ptr == end;
}

std::string Quoted(std::string_view s) {
  constexpr size_t kMax = 64;  // keep error lines short
  return "'" + std::string(s.substr(0, kMax)) + (s.size() > kMax ? "...'" : "'");
}

}  // namespace

Status TraceReader::Error(uint64_t line, const std::string& problem) const {
  return InvalidArgument(name_ + ":" + std::to_string(line) + ": " + problem);
}

Status TraceReader::ParseHeader(std::string_view line) {
  if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // BOM
  const char* p = line.data();
  const char* const e = p + line.size();
  for (;;) {
    // A column name may be quoted, whatever the form (the header is one line).
    std::string_view name;
    const char* comma = nullptr;
    GNMR_RETURN_IF_ERROR(QuotedField(&p, e, &field_scratch_, &name, &comma));
    Col col = kIgnore;
    for (const ColumnName& c : kColumns) {
      if (name == c.name) col = static_cast<Col>(c.col);
    }
    for (size_t i = 0; i < header_.size(); ++i) {
      if (col != kIgnore && header_[i] == name) {
        return Error(line_no_, "duplicate column " + Quoted(name));
      }
    }
    header_.emplace_back(name);
    cols_.push_back(col);
    if (comma == nullptr) break;
    p = comma + 1;
  }
  for (const char* required : {"step", "unit", "sumsq"}) {
    if (!has_column(required)) {
      return Error(line_no_, "missing column '" + std::string(required) +
                                 "' in the header (required: step, unit, "
                                 "sumsq; optional: amax, nonfinite, zeros, "
                                 "numel, fwd_sumsq, fwd_amax, fwd_saturated, "
                                 "fwd_zeros, fwd_numel, fwd_order, fwd_blocks, "
                                 "fwd_saturated_blocks, fwd_dead_blocks, "
                                 "fwd_scale_clamps, fwd_source_numel, fwd_underflow, "
                                 "fwd_error_sumsq, fwd_source_sumsq, bwd_sumsq, "
                                 "bwd_saturated, bwd_zeros, bwd_numel, bwd_order)");
    }
  }
  // The old recorder's form keeps its meaning (trace_reader.h): with the
  // unit last nothing is quoted.
  quoted_ = cols_.back() != kUnit;
  return Status::Ok();
}

bool TraceReader::has_column(std::string_view column) const {
  for (const std::string& h : header_) {
    if (h == column) return true;
  }
  return false;
}

Status TraceReader::QuotedField(const char** p, const char* e, std::string* scratch,
                                std::string_view* f, const char** comma) {
  switch (ReadCsvField(p, e, scratch, f, comma)) {
    case CsvField::kOk:
      return Status::Ok();
    case CsvField::kUnclosedQuote:
      return Error(line_no_, "a quoted field has no closing quote");
    case CsvField::kTextAfterQuote:
      break;
  }
  return Error(line_no_, "text after the closing quote of " + Quoted(*f) +
                             " (a quote inside a quoted field is doubled: \"\")");
}

Status TraceReader::ParseRow(std::string_view line, Row* row) {
  row->sample = UnitSample();
  const char* p = line.data();
  const char* const e = p + line.size();
  // All fields read, no more than the header's (a field past them leaves it false).
  bool complete = false;
  for (size_t i = 0; i < cols_.size(); ++i) {
    std::string_view f;
    const char* comma;
    GNMR_RETURN_IF_ERROR(ReadField(i, &p, e, &f, &comma));
    GNMR_RETURN_IF_ERROR(StoreField(i, f, row));
    if (comma == nullptr) {
      complete = i + 1 == cols_.size();
      break;
    }
    p = comma + 1;
  }
  if (!complete) return FieldCountError(line);
  return CheckForwardCounts(row->sample);
}

Status TraceReader::ReadField(size_t i, const char** p, const char* e, std::string_view* f,
                              const char** comma) {
  if (quoted_ && *p < e && (**p == '"' || **p == ' ' || **p == '\t')) {
    return QuotedField(p, e, cols_[i] == kUnit ? &unit_scratch_ : &field_scratch_, f, comma);
  }
  // A unit in the last column of the old form runs to the end of the
  // line: a unit name may hold commas, and that form quotes nothing.
  const bool rest_of_line = !quoted_ && cols_[i] == kUnit && i + 1 == cols_.size();
  *comma = rest_of_line
               ? nullptr
               : static_cast<const char*>(std::memchr(*p, ',', static_cast<size_t>(e - *p)));
  *f = std::string_view(*p, static_cast<size_t>((*comma != nullptr ? *comma : e) - *p));
  if (!f->empty() &&
      (f->front() == ' ' || f->back() == ' ' || f->front() == '\t' || f->back() == '\t')) {
    *f = TrimBlanks(*f);
  }
  return Status::Ok();
}

// Inlined: it runs for every field, and replay lives on rows per second
// (bench_replay).
__attribute__((always_inline)) Status TraceReader::StoreField(size_t i, std::string_view f,
                                                              Row* row) {
  UnitSample& s = row->sample;
  bool ok = true;
  switch (cols_[i]) {
    case kIgnore:
      break;
    case kStep:
      ok = ParseNumber(f, &row->step);
      if (ok && (row->step < 0 || row->step > kMaxStep)) return StepRangeError(row->step, f);
      break;
    case kUnit:
      if (f.empty()) return Error(line_no_, "empty unit name");
      row->unit = f;
      break;
    case kSumsq:
      ok = ParseNumber(f, &s.sumsq);
      // NaN and +/-Inf are signals (non-finite); a negative number is not.
      if (ok && std::isfinite(s.sumsq) && s.sumsq < 0.0) {
        return Error(line_no_, "column 'sumsq': " + Quoted(f) +
                                   " is negative (a sum of squares is >= "
                                   "0, nan or inf)");
      }
      break;
    case kFwdSumsq:
      ok = f.empty() || ParseNumber(f, &s.fwd_sumsq);
      if (ok && std::isfinite(s.fwd_sumsq) && s.fwd_sumsq < 0.0) {
        return Error(line_no_, "column 'fwd_sumsq': " + Quoted(f) + " is negative");
      }
      break;
    case kBwdSumsq:
      ok = f.empty() || ParseNumber(f, &s.bwd_sumsq);
      if (ok && std::isfinite(s.bwd_sumsq) && s.bwd_sumsq < 0.0) {
        return Error(line_no_, "column 'bwd_sumsq': " + Quoted(f) + " is negative");
      }
      break;
    case kAmax:
      ok = f.empty() || ParseNumber(f, &s.amax);
      break;
    case kFwdAmax:
      ok = f.empty() || ParseNumber(f, &s.fwd_amax);
      break;
    case kFwdErrorSumsq:
    case kFwdSourceSumsq: {
      double& v = cols_[i] == kFwdErrorSumsq ? s.fwd_error_sumsq : s.fwd_source_sumsq;
      ok = f.empty() || ParseNumber(f, &v);
      if (ok && !FiniteSumOfSquares(v)) {
        return Error(line_no_,
                     "column '" + header_[i] + "': " + Quoted(f) + " is not a finite number >= 0");
      }
      break;
    }
    default:  // a count
      ok = f.empty() || ParseNumber(f, &(s.*kColumns[cols_[i] - 1].count));
      break;
  }
  if (!ok) return ValueError(i, f);
  return Status::Ok();
}

Status TraceReader::StepRangeError(int64_t step, std::string_view f) const {
  if (step < 0) return Error(line_no_, "step " + std::string(f) + " is negative");
  // Above kMaxStep: the controller would refuse it.
  return Error(line_no_,
               "step " + std::string(f) + " is above the largest step " + std::to_string(kMaxStep));
}

Status TraceReader::ValueError(size_t i, std::string_view f) const {
  const Col c = cols_[i];
  const bool count = (c >= kNonfinite && c <= kNumel) ||
                     (c >= kFwdSaturated && c <= kFwdUnderflow) ||
                     (c >= kBwdSaturated && c <= kBwdOrder);
  return Error(line_no_, "column '" + header_[i] + "': " +
                             (f.empty() ? std::string("empty value")
                                        : Quoted(f) + " is not " +
                                              (count ? "a non-negative integer" : "a number")));
}

Status TraceReader::FieldCountError(std::string_view line) const {
  size_t fields = 1;
  if (quoted_) {
    fields = CountCsvFields(line);
  } else {
    for (char c : line) fields += c == ',' ? 1 : 0;
  }
  return Error(line_no_, "expected " + std::to_string(cols_.size()) +
                             " fields as in the header, got " + std::to_string(fields));
}

// The controller refuses these (Controller::Observe); say it here, with the
// line, rather than accept a trace replay cannot take.
Status TraceReader::CheckForwardCounts(const UnitSample& u) const {
  if (u.fwd_saturated > u.fwd_numel || u.fwd_zeros > u.fwd_numel) {
    return Error(line_no_, "fwd_saturated (" + std::to_string(u.fwd_saturated) +
                               ") and fwd_zeros (" + std::to_string(u.fwd_zeros) +
                               ") cannot exceed fwd_numel (" + std::to_string(u.fwd_numel) + ")");
  }
  if (!ForwardCountsFit(u)) {  // the block counts
    return Error(line_no_, "fwd_blocks (" + std::to_string(u.fwd_blocks) +
                               ") cannot exceed fwd_numel (" + std::to_string(u.fwd_numel) +
                               "), nor fwd_saturated_blocks (" +
                               std::to_string(u.fwd_saturated_blocks) + "), fwd_dead_blocks (" +
                               std::to_string(u.fwd_dead_blocks) + ") or fwd_scale_clamps (" +
                               std::to_string(u.fwd_scale_clamps) + ") fwd_blocks, nor " +
                               "fwd_source_numel (" + std::to_string(u.fwd_source_numel) +
                               ") fwd_numel, nor fwd_underflow (" +
                               std::to_string(u.fwd_underflow) + ") fwd_source_numel");
  }
  if (!BackwardCountsFit(u)) {
    return Error(line_no_, "bwd_saturated (" + std::to_string(u.bwd_saturated) +
                               ") and bwd_zeros (" + std::to_string(u.bwd_zeros) +
                               ") cannot exceed bwd_numel (" + std::to_string(u.bwd_numel) + ")");
  }
  return Status::Ok();
}

Status TraceReader::Next(TraceStep* out, bool* got) {
  out->samples.clear();
  bool in_step = false;
  if (has_pending_) {
    has_pending_ = false;
    in_step = true;
    step_ = pending_.step;
    out->step = pending_.step;
    out->first_line = pending_line_;
    out->samples.push_back(pending_.sample);
  }
  std::string_view line;
  bool more = false;
  Row row;
  for (;;) {
    GNMR_RETURN_IF_ERROR(NextLine(&line, &more));
    if (!more) break;
    if (line.empty() || IsBlank(line)) continue;
    GNMR_RETURN_IF_ERROR(ParseRow(line, &row));
    ++rows_;
    const bool new_step = !in_step;
    if (in_step && row.step != step_) {
      if (row.step < step_) {
        return Error(line_no_, "step " + std::to_string(row.step) + " goes backwards after step " +
                                   std::to_string(step_) +
                                   " (steps must increase and the rows of "
                                   "a step be contiguous)");
      }
      ++epoch_;  // the row opens the next step: keep it for the next call
      prev_slot_ = 0;
      row.sample.unit_id = Resolve(row.unit);
      seen_epoch_[row.sample.unit_id] = epoch_;
      seen_line_[row.sample.unit_id] = line_no_;
      pending_ = row;
      pending_.unit = std::string_view();  // points into the chunk
      pending_line_ = line_no_;
      has_pending_ = true;
      break;
    }
    if (new_step) {
      if (started_ && row.step <= step_) {
        return Error(line_no_, "step " + std::to_string(row.step) + " goes backwards after step " +
                                   std::to_string(step_));
      }
      ++epoch_;
      prev_slot_ = 0;
      started_ = in_step = true;
      step_ = out->step = row.step;
      out->first_line = line_no_;
    }
    const uint32_t id = Resolve(row.unit);
    if (seen_epoch_[id] == epoch_) {
      return Error(line_no_, "unit " + Quoted(row.unit) + " appears twice in step " +
                                 std::to_string(step_) + " (first on line " +
                                 std::to_string(seen_line_[id]) + ")");
    }
    seen_epoch_[id] = epoch_;
    seen_line_[id] = line_no_;
    row.sample.unit_id = id;
    out->samples.push_back(row.sample);
  }
  *got = in_step;
  return Status::Ok();
}

}  // namespace gnmr
