// Inline SVG charts generated in C++ for the self-contained HTML report: line/scatter charts with
// whiskers, guide lines and labels, and stacked bar charts. No scripts or external resources; every
// piece of text passes through html_escape. Points carry a tooltip (<title> and data-tip).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cnnergy::report {

// Escapes & < > " ' for HTML text and attribute values; bytes that are not valid UTF-8 become U+FFFD.
std::string html_escape(std::string_view s);

// Tick positions of a linear axis: 1, 2, 2.5 or 5 times a power of ten, about `target` of them,
// covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
std::string format_tick(double v, double step);

struct ChartSeries {
  std::string name;
  std::vector<double> x, y;
  std::vector<double> y_low, y_high;  // whiskers (empty, or one per point)
  std::vector<std::string> tips;      // tooltip per point (empty, or one per point)
  std::string color;                  // empty: the next palette colour
  bool line = true;
  bool markers = true;
  bool dashed = false;
  bool in_legend = true;
  bool sets_range = true;             // guide lines (iso-metric curves) must not stretch the axes
  double marker_radius = 3.5;
  double line_width = 2;
};

struct ChartAxis {
  std::string title;
  std::optional<double> min, max;     // forced limits; otherwise the data's range with a margin
  std::vector<std::string> categories;  // non-empty: categorical axis, x values index into it
};

class Chart {
 public:
  Chart(std::string id, std::string title, ChartAxis x, ChartAxis y);
  void add(ChartSeries series);
  void add_label(double x, double y, std::string text, std::string color = "#333");
  void set_size(int width, int height);
  std::string svg() const;

 private:
  struct Label {
    double x, y;
    std::string text, color;
  };
  std::string id_, title_;
  ChartAxis x_, y_;
  std::vector<ChartSeries> series_;
  std::vector<Label> labels_;
  int width_ = 560, height_ = 360;
};

struct BarStack {
  std::string name;
  std::vector<double> values;             // one per category
  std::vector<std::string> tips;          // optional, one per category
};

// Stacked bars, one bar per category; horizontal bars suit long category names (layers).
std::string stacked_bars_svg(const std::string& id, const std::string& title, const std::vector<std::string>& categories,
                             const std::vector<BarStack>& stacks, const std::string& value_title, bool horizontal);

// The palette (Okabe-Ito, readable by colour-blind readers).
const std::string& palette_color(std::size_t i);

}  // namespace cnnergy::report
