#include "programs/gnmrctl/table.h"

#include <cmath>
#include <cstdio>

#include "controller/types/config_codec.h"
#include "gnmr/config.h"

namespace gnmr {
namespace cli {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  for (const Column& c : columns_) widths_.push_back(c.header.size());
}

void Table::Widen(const std::vector<std::string>& cells) {
  for (size_t i = 0; i < cells.size() && i < widths_.size(); ++i) {
    widths_[i] = std::max(widths_[i], cells[i].size());
  }
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  Widen(cells);
  rows_.push_back(std::move(cells));
}

std::string Table::Line(const std::vector<std::string>& cells, const std::string& indent) const {
  std::string line = indent;
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (i > 0) line += "  ";
    const std::string& cell = cells[i];
    const std::string pad(widths_[i] - std::min(widths_[i], cell.size()), ' ');
    line += columns_[i].align == Align::kRight ? pad + cell : cell + pad;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + "\n";
}

std::vector<std::string> Table::Headers() const {
  std::vector<std::string> cells;
  for (const Column& c : columns_) cells.push_back(c.header);
  return cells;
}

std::string Table::Render(const std::string& indent) const {
  std::string out = Line(Headers(), indent);
  for (const auto& row : rows_) out += Line(row, indent);
  return out;
}

std::string Table::RenderNew(bool header) {
  std::string out = header ? Line(Headers(), "") : "";
  for (; rendered_ < rows_.size(); ++rendered_) out += Line(rows_[rendered_], "");
  return out;
}

std::string FormatNumber(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return FormatNumber(fraction);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100.0 * fraction);
  return buf;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  char buf[64];
  if (seconds < 1) {
    std::snprintf(buf, sizeof(buf), "%.0fms", seconds * 1e3);
  } else if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.1fs", seconds);
  } else {
    const auto s = static_cast<long long>(seconds);
    if (s < 3600) {
      std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
    } else if (s < 86400) {
      std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, s / 60 % 60);
    } else {
      std::snprintf(buf, sizeof(buf), "%lldd%02lldh", s / 86400, s / 3600 % 24);
    }
  }
  return buf;
}

std::string FormatStep(int64_t step) { return step < 0 ? "-" : std::to_string(step); }

std::string ActionText(v1::Action a) { return ActionName(FromProto(a)); }
std::string TriggerText(v1::Trigger t) { return TriggerName(FromProto(t)); }

std::string ForwardRatiosText(double fwd_ratio, double saturation_ratio, double underflow_ratio) {
  if (fwd_ratio == 0.0 && saturation_ratio == 0.0 && underflow_ratio == 0.0) return "-";
  return FormatNumber(fwd_ratio, 3) + "/" + FormatNumber(saturation_ratio, 3) + "/" +
         FormatNumber(underflow_ratio, 3);
}

std::string QuantizerRatiosText(double fwd_ratio, double saturation_ratio, double underflow_ratio,
                                double bwd_ratio) {
  const std::string forward = ForwardRatiosText(fwd_ratio, saturation_ratio, underflow_ratio);
  if (bwd_ratio == 0.0) return forward;
  return (forward == "-" ? "" : forward + " ") + "B" + FormatNumber(bwd_ratio, 3);
}

std::string ForwardFiguresText(const v1::Event& e) {
  if (!EventHasStatistics(e.kind())) return "-";
  return QuantizerRatiosText(e.fwd_ratio(), e.saturation_ratio(), e.underflow_ratio(),
                             e.bwd_ratio());
}

}  // namespace cli
}  // namespace gnmr
