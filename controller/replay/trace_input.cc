// TraceReader's input side (trace_reader.h): the file or buffer read in
// chunks and cut into lines, and the table that turns a row's unit name
// into its id. A trace repeats the same units in the same order every step,
// so Resolve first tries the unit that followed the previous one last time
// (next_after_) and only then hashes the name.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>

#include "controller/replay/trace_csv.h"
#include "controller/replay/trace_reader.h"

namespace gnmr {
namespace {

constexpr size_t kChunk = 1 << 20;   // bytes read from a file at once
constexpr size_t kMaxLine = kChunk;  // longer lines are an error (files)
constexpr uint32_t kNoGuess = std::numeric_limits<uint32_t>::max();

}  // namespace

TraceReader::TraceReader() : next_after_(1, kNoGuess) {}

TraceReader::~TraceReader() {
  if (file_ != nullptr) std::fclose(file_);
}

Status TraceReader::OpenFile(const std::string& path) {
  name_ = path;
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    return NotFound(path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fileno(file_), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return InvalidArgument(path + ": is a directory, not a trace");
    }
    if (S_ISREG(st.st_mode)) total_bytes_ = static_cast<uint64_t>(st.st_size);
  }
  buf_.resize(kChunk);
  data_ = pos_ = end_ = buf_.data();
  return Begin();
}

Status TraceReader::OpenBuffer(std::string_view data, std::string name) {
  name_ = std::move(name);
  data_ = pos_ = data.data();
  end_ = data.data() + data.size();
  eof_ = true;
  total_bytes_ = data.size();
  return Begin();
}

Status TraceReader::Begin() {
  std::string_view line;
  bool got = false;
  for (;;) {
    GNMR_RETURN_IF_ERROR(NextLine(&line, &got));
    if (!got) {
      return Error(line_no_ == 0 ? 1 : line_no_,
                   "empty trace: expected a header such as "
                   "'step,unit,sumsq,amax,nonfinite,zeros,numel'");
    }
    if (!IsBlank(line)) return ParseHeader(line);
  }
}

Status TraceReader::Refill() {
  const size_t keep = static_cast<size_t>(end_ - pos_);
  base_offset_ += static_cast<uint64_t>(pos_ - data_);
  if (keep >= kMaxLine) return Error(line_no_ + 1, "line longer than 1 MiB");
  if (keep > 0 && pos_ != buf_.data()) std::memmove(buf_.data(), pos_, keep);
  const size_t want = buf_.size() - keep;
  const size_t n = std::fread(buf_.data() + keep, 1, want, file_);
  if (n < want) {
    if (std::ferror(file_)) {
      return DataLoss(name_ + ": read error: " + std::strerror(errno));
    }
    eof_ = true;
  }
  data_ = pos_ = buf_.data();
  end_ = data_ + keep + n;
  return Status::Ok();
}

Status TraceReader::NextLine(std::string_view* line, bool* got) {
  line_no_ += record_lines_;
  record_lines_ = 0;
  size_t scanned = 0;  // bytes after pos_ already known to be in the record
  for (;;) {
    const char* from = pos_ + scanned;
    const void* nl =
        from == end_ ? nullptr : std::memchr(from, '\n', static_cast<size_t>(end_ - from));
    const char* stop = static_cast<const char*>(nl);
    if (stop == nullptr && eof_) {
      if (pos_ == end_) {
        *got = false;
        return Status::Ok();
      }
      stop = end_;  // last line without a newline
    }
    // A newline inside a quoted field belongs to the field.
    if (stop != nullptr && stop != end_ && quoted_ &&
        EndsInsideQuotes(std::string_view(from, static_cast<size_t>(stop - from)), scanned > 0)) {
      scanned = static_cast<size_t>(stop + 1 - pos_);
      ++record_lines_;
      continue;
    }
    if (stop != nullptr) {
      size_t len = static_cast<size_t>(stop - pos_);
      if (len > 0 && pos_[len - 1] == '\r') --len;
      *line = std::string_view(pos_, len);
      pos_ = stop == end_ ? end_ : stop + 1;
      ++line_no_;
      *got = true;
      return Status::Ok();
    }
    GNMR_RETURN_IF_ERROR(Refill());  // keeps [pos_, end_): `scanned` stays valid
  }
}

void TraceReader::Rehash(size_t capacity) {
  slots_.assign(capacity, 0);
  const size_t mask = capacity - 1;
  for (uint32_t id = 0; id < views_.size(); ++id) {
    size_t i = hashes_[id] & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = id + 1;
  }
}

uint32_t TraceReader::Lookup(std::string_view unit, uint64_t hash) {
  if (slots_.empty()) Rehash(64);
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i] != 0) {
    const uint32_t id = slots_[i] - 1;
    if (hashes_[id] == hash && views_[id] == unit) return id;
    i = (i + 1) & mask;
  }
  const uint32_t id = static_cast<uint32_t>(views_.size());
  names_.emplace_back(unit);
  views_.push_back(names_.back());
  hashes_.push_back(hash);
  next_after_.push_back(kNoGuess);
  seen_epoch_.push_back(0);
  seen_line_.push_back(0);
  slots_[i] = id + 1;
  if (views_.size() * 2 > slots_.size()) Rehash(slots_.size() * 2);
  return id;
}

uint32_t TraceReader::Resolve(std::string_view unit) {
  const uint32_t guess = next_after_[prev_slot_];
  uint32_t id;
  if (guess != kNoGuess && views_[guess] == unit) {
    id = guess;
  } else {
    id = Lookup(unit, std::hash<std::string_view>()(unit));
  }
  next_after_[prev_slot_] = id;
  prev_slot_ = static_cast<size_t>(id) + 1;
  return id;
}

}  // namespace gnmr
