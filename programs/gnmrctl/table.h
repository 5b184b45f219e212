// Human-readable output of gnmrctl: aligned tables and number formatting
// (NaN as `nan`, a fixed number of significant digits, durations, steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/publish/wire_names.h"  // EventHasStatistics, EventHasAction
#include "gnmr/v1/controller.pb.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {
namespace cli {

class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
  };

  explicit Table(std::vector<Column> columns);

  // A row with one cell per column (missing cells are empty).
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  // The header and every row, columns two spaces apart, each line prefixed
  // with `indent`; trailing spaces are trimmed.
  std::string Render(const std::string& indent = "") const;
  // Only the rows added since the last RenderNew (or all, the first time),
  // with the header first if `header`. Widths only grow, so a stream of
  // calls (events --follow) stays aligned as far as it can.
  std::string RenderNew(bool header);

 private:
  std::string Line(const std::vector<std::string>& cells, const std::string& indent) const;
  void Widen(const std::vector<std::string>& cells);
  std::vector<std::string> Headers() const;

  std::vector<Column> columns_;
  std::vector<size_t> widths_;
  std::vector<std::vector<std::string>> rows_;
  size_t rendered_ = 0;
};

// `digits` significant digits ("%.*g"); NaN is "nan", infinities "inf" and
// "-inf".
std::string FormatNumber(double v, int digits = 4);
// A fraction as a percentage with two decimals ("12.50%").
std::string FormatPercent(double fraction);
// Seconds as "850ms", "12.3s", "5m07s", "3h02m", "4d05h".
std::string FormatDuration(double seconds);
// A step, or "-" when negative (none yet).
std::string FormatStep(int64_t step);

// Lower-case names of the wire enums: "promote", "gnmr", ...
std::string ActionText(v1::Action a);
std::string TriggerText(v1::Trigger t);

// The forward channel's ratios F/S/U ("10/1/0") in one column, so a table
// stays narrow; "-" when all are 0 (the sample was not evaluated: no
// forward statistics, warmup, non-finite).
std::string ForwardRatiosText(double fwd_ratio, double saturation_ratio, double underflow_ratio);
// The same, followed by the backward channel's B ("10/1/0 B16", "B16")
// when it judged the sample.
std::string QuantizerRatiosText(double fwd_ratio, double saturation_ratio, double underflow_ratio,
                                double bwd_ratio);
// ForwardRatiosText of an admission or denial, whichever rule triggered it
// (how close a gradient-triggered unit's forward pass came), "-" for any
// other event (--json carries them for every event).
std::string ForwardFiguresText(const v1::Event& e);

}  // namespace cli
}  // namespace gnmr
