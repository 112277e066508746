// SVG chart rendering: axes with nice ticks, series, whiskers, legends, stacked bars.
#include "report/svg.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/errors.hpp"

namespace cnnergy::report {

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Estimated width of text at the 11-12 px sans-serif the report uses, for layout.
double text_width(const std::string& s) { return 6.6 * static_cast<double>(s.size()); }

std::string truncate(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t cut = n - 1;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return s.substr(0, cut) + "\xE2\x80\xA6";
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool valid() const { return lo <= hi; }
};

}  // namespace

const std::string& palette_color(std::size_t i) {
  static const std::array<std::string, 8> kColors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                     "#E69F00", "#56B4E9", "#000000", "#999933"};
  return kColors[i % kColors.size()];
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '&': out += "&amp;"; ++i; continue;
      case '<': out += "&lt;"; ++i; continue;
      case '>': out += "&gt;"; ++i; continue;
      case '"': out += "&quot;"; ++i; continue;
      case '\'': out += "&#39;"; ++i; continue;
      default: break;
    }
    if (c < 0x80) {
      if (c < 0x20 && c != '\n' && c != '\t') out += ' ';  // control characters are not valid in HTML text
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-300) {
    const double pad = lo != 0 ? std::fabs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(target, 2);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string format_tick(double v, double step) {
  char buf[32];
  const double a = std::max(std::fabs(v), std::fabs(step));
  if (a >= 1e6 || (a > 0 && a < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    if (std::fabs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) > 1e-6) ++decimals;  // 2.5
    std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 6), v);
  }
  return buf;
}

Chart::Chart(std::string id, std::string title, ChartAxis x, ChartAxis y)
    : id_(std::move(id)), title_(std::move(title)), x_(std::move(x)), y_(std::move(y)) {}

void Chart::add(ChartSeries s) {
  if (s.y.size() != s.x.size() || (!s.y_low.empty() && s.y_low.size() != s.y.size()) ||
      (!s.y_high.empty() && s.y_high.size() != s.y.size()) || (!s.tips.empty() && s.tips.size() != s.y.size()))
    throw InvalidArgument("chart series '" + s.name + "': x, y, whiskers and tips must have the same length");
  if (s.color.empty()) s.color = palette_color(series_.size());
  series_.push_back(std::move(s));
}

void Chart::add_label(double x, double y, std::string text, std::string color) {
  labels_.push_back({x, y, std::move(text), std::move(color)});
}

void Chart::set_size(int width, int height) {
  width_ = std::max(width, 200);
  height_ = std::max(height, 150);
}

std::string Chart::svg() const {
  // Axis ranges from the series that set them, with a 5 % margin; forced limits win.
  Range xr, yr;
  for (const auto& s : series_) {
    if (!s.sets_range) continue;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      xr.add(s.x[i]);
      yr.add(s.y[i]);
      if (!s.y_low.empty()) yr.add(s.y_low[i]);
      if (!s.y_high.empty()) yr.add(s.y_high[i]);
    }
  }
  const bool categorical = !x_.categories.empty();
  if (categorical) {
    xr.lo = -0.5;
    xr.hi = static_cast<double>(x_.categories.size()) - 0.5;
  }
  if (!xr.valid()) xr = Range{0, 1};
  if (!yr.valid()) yr = Range{0, 1};
  auto pad = [](Range r, std::optional<double> mn, std::optional<double> mx, bool categorical_axis) {
    const double span = r.hi - r.lo > 0 ? r.hi - r.lo : (r.hi != 0 ? std::fabs(r.hi) : 1.0);
    if (!categorical_axis) {
      r.lo -= 0.05 * span;
      r.hi += 0.05 * span;
    }
    if (mn) r.lo = *mn;
    if (mx) r.hi = *mx;
    if (r.hi <= r.lo) r.hi = r.lo + 1;
    return r;
  };
  xr = pad(xr, x_.min, x_.max, categorical);
  yr = pad(yr, y_.min, y_.max, false);

  // Legend rows below the plot.
  std::vector<const ChartSeries*> legend;
  for (const auto& s : series_)
    if (s.in_legend && !s.name.empty()) legend.push_back(&s);
  const double left = 72, right = 16, top = 34;
  std::vector<std::vector<const ChartSeries*>> rows(1);
  double row_w = 0;
  const double avail = width_ - left - right;
  for (const auto* s : legend) {
    const double w = 28 + text_width(truncate(s->name, 48)) + 14;
    if (row_w + w > avail && !rows.back().empty()) {
      rows.emplace_back();
      row_w = 0;
    }
    rows.back().push_back(s);
    row_w += w;
  }
  const double legend_h = legend.empty() ? 0 : 18.0 * static_cast<double>(rows.size()) + 6;
  const double x_label_h = categorical ? 62 : 44;
  const double height = height_ + legend_h;
  const double bottom = x_label_h + legend_h;
  const double pw = width_ - left - right, ph = height - top - bottom;
  auto px = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * pw; };
  auto py = [&](double y) { return top + ph - (y - yr.lo) / (yr.hi - yr.lo) * ph; };

  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"" + html_escape(id_) + "\" viewBox=\"0 0 " +
       std::to_string(width_) + " " + fmt(height) + "\" width=\"" + std::to_string(width_) + "\" height=\"" + fmt(height) +
       "\" role=\"img\" aria-label=\"" + html_escape(title_) + "\">\n";
  o += "<defs><clipPath id=\"" + html_escape(id_) + "-clip\"><rect x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" +
       fmt(pw) + "\" height=\"" + fmt(ph) + "\"/></clipPath></defs>\n";
  o += "<text class=\"chart-title\" x=\"" + fmt(left) + "\" y=\"20\">" + html_escape(title_) + "</text>\n";
  o += "<rect class=\"plot\" x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(pw) + "\" height=\"" + fmt(ph) + "\"/>\n";

  // y grid and ticks
  const auto yt = nice_ticks(yr.lo, yr.hi);
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : yt) {
    if (t < yr.lo - 1e-12 || t > yr.hi + 1e-12) continue;
    o += "<line class=\"grid\" x1=\"" + fmt(left) + "\" x2=\"" + fmt(left + pw) + "\" y1=\"" + fmt(py(t)) + "\" y2=\"" + fmt(py(t)) + "\"/>";
    o += "<text class=\"tick\" text-anchor=\"end\" x=\"" + fmt(left - 6) + "\" y=\"" + fmt(py(t) + 4) + "\">" +
         html_escape(format_tick(t, ystep)) + "</text>\n";
  }
  // x grid and ticks
  if (categorical) {
    for (std::size_t i = 0; i < x_.categories.size(); ++i) {
      const double x = px(static_cast<double>(i));
      o += "<text class=\"tick\" text-anchor=\"end\" transform=\"translate(" + fmt(x + 4) + "," + fmt(top + ph + 14) +
           ") rotate(-30)\">" + html_escape(truncate(x_.categories[i], 18)) + "</text>\n";
    }
  } else {
    const auto xt = nice_ticks(xr.lo, xr.hi);
    const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
    for (double t : xt) {
      if (t < xr.lo - 1e-12 || t > xr.hi + 1e-12) continue;
      o += "<line class=\"grid\" y1=\"" + fmt(top) + "\" y2=\"" + fmt(top + ph) + "\" x1=\"" + fmt(px(t)) + "\" x2=\"" + fmt(px(t)) + "\"/>";
      o += "<text class=\"tick\" text-anchor=\"middle\" x=\"" + fmt(px(t)) + "\" y=\"" + fmt(top + ph + 16) + "\">" +
           html_escape(format_tick(t, xstep)) + "</text>\n";
    }
  }
  o += "<text class=\"axis-title\" text-anchor=\"middle\" x=\"" + fmt(left + pw / 2) + "\" y=\"" + fmt(top + ph + x_label_h - 8) +
       "\">" + html_escape(x_.title) + "</text>\n";
  o += "<text class=\"axis-title\" text-anchor=\"middle\" transform=\"translate(16," + fmt(top + ph / 2) + ") rotate(-90)\">" +
       html_escape(y_.title) + "</text>\n";

  // series, clipped to the plot
  o += "<g clip-path=\"url(#" + html_escape(id_) + "-clip)\">\n";
  for (const auto& s : series_) {
    const std::string col = html_escape(s.color);
    if (s.line) {
      std::string pts;
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
        pts += fmt(px(s.x[i])) + "," + fmt(py(s.y[i])) + " ";
      }
      if (!pts.empty())
        o += "<polyline fill=\"none\" stroke=\"" + col + "\" stroke-width=\"" + fmt(s.line_width) + "\"" +
             (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + pts + "\"/>\n";
    }
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      if (!s.y_low.empty() && std::isfinite(s.y_low[i]) && std::isfinite(s.y_high[i]) && s.y_high[i] > s.y_low[i])
        o += "<line stroke=\"" + col + "\" stroke-width=\"1.2\" x1=\"" + fmt(px(s.x[i])) + "\" x2=\"" + fmt(px(s.x[i])) +
             "\" y1=\"" + fmt(py(s.y_low[i])) + "\" y2=\"" + fmt(py(s.y_high[i])) + "\"/>";
      if (!s.markers) continue;
      const std::string tip = s.tips.empty() ? s.name : s.tips[i];
      o += "<circle class=\"pt\" cx=\"" + fmt(px(s.x[i])) + "\" cy=\"" + fmt(py(s.y[i])) + "\" r=\"" + fmt(s.marker_radius) +
           "\" fill=\"" + col + "\" data-tip=\"" + html_escape(tip) + "\"><title>" + html_escape(tip) + "</title></circle>\n";
    }
  }
  for (const auto& l : labels_) {
    // Labels right of their point, or left of it in the right part of the plot, so they stay inside.
    const bool right_side = px(l.x) > left + 0.55 * pw;
    o += "<text class=\"label\" text-anchor=\"" + std::string(right_side ? "end" : "start") + "\" x=\"" +
         fmt(px(l.x) + (right_side ? -8 : 8)) + "\" y=\"" + fmt(py(l.y) - 7) + "\" fill=\"" + html_escape(l.color) + "\">" +
         html_escape(l.text) + "</text>\n";
  }
  o += "</g>\n";

  // legend
  double ly = top + ph + x_label_h + 8;
  for (const auto& row : rows) {
    double lx = left;
    for (const auto* s : row) {
      const std::string col = html_escape(s->color);
      if (s->line)
        o += "<line stroke=\"" + col + "\" stroke-width=\"" + fmt(s->line_width) + "\"" + (s->dashed ? " stroke-dasharray=\"6 4\"" : "") +
             " x1=\"" + fmt(lx) + "\" x2=\"" + fmt(lx + 22) + "\" y1=\"" + fmt(ly) + "\" y2=\"" + fmt(ly) + "\"/>";
      if (s->markers) o += "<circle cx=\"" + fmt(lx + 11) + "\" cy=\"" + fmt(ly) + "\" r=\"3.5\" fill=\"" + col + "\"/>";
      const std::string name = truncate(s->name, 48);
      o += "<text class=\"legend\" x=\"" + fmt(lx + 28) + "\" y=\"" + fmt(ly + 4) + "\">" + html_escape(name) + "</text>\n";
      lx += 28 + text_width(name) + 14;
    }
    ly += 18;
  }
  o += "</svg>\n";
  return o;
}

std::string stacked_bars_svg(const std::string& id, const std::string& title, const std::vector<std::string>& categories,
                             const std::vector<BarStack>& stacks, const std::string& value_title, bool horizontal) {
  for (const auto& s : stacks)
    if (s.values.size() != categories.size() || (!s.tips.empty() && s.tips.size() != categories.size()))
      throw InvalidArgument("stacked bars '" + title + "': every stack needs one value per category");
  double max_total = 0;
  for (std::size_t c = 0; c < categories.size(); ++c) {
    double t = 0;
    for (const auto& s : stacks) t += std::max(0.0, s.values[c]);
    max_total = std::max(max_total, t);
  }
  if (max_total <= 0) max_total = 1;
  auto ticks = nice_ticks(0, max_total);
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : max_total;
  if (!ticks.empty() && ticks.back() < max_total * (1 - 1e-9)) ticks.push_back(ticks.back() + step);  // axis ends on a tick
  const double vmax = ticks.empty() ? max_total : ticks.back();
  const double n = static_cast<double>(std::max<std::size_t>(categories.size(), 1));
  const double legend_h = 24;
  const double width = 860;
  const double left = horizontal ? 190 : 72, right = 16, top = 34;
  const double plot_len = horizontal ? std::max(120.0, 16.0 * n) : 300;
  const double bottom = (horizontal ? 44 : 70) + legend_h;
  const double height = top + plot_len + bottom;
  const double pw = width - left - right, ph = plot_len;
  const double band = (horizontal ? ph : pw) / n;
  auto vpos = [&](double v) { return horizontal ? left + v / vmax * pw : top + ph - v / vmax * ph; };

  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"" + html_escape(id) + "\" viewBox=\"0 0 " +
                  fmt(width) + " " + fmt(height) + "\" width=\"" + fmt(width) + "\" height=\"" + fmt(height) +
                  "\" role=\"img\" aria-label=\"" + html_escape(title) + "\">\n";
  o += "<text class=\"chart-title\" x=\"" + fmt(left) + "\" y=\"20\">" + html_escape(title) + "</text>\n";
  o += "<rect class=\"plot\" x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(pw) + "\" height=\"" + fmt(ph) + "\"/>\n";
  for (double t : ticks) {
    const double p = vpos(t);
    if (horizontal) {
      o += "<line class=\"grid\" y1=\"" + fmt(top) + "\" y2=\"" + fmt(top + ph) + "\" x1=\"" + fmt(p) + "\" x2=\"" + fmt(p) + "\"/>";
      o += "<text class=\"tick\" text-anchor=\"middle\" x=\"" + fmt(p) + "\" y=\"" + fmt(top + ph + 16) + "\">" +
           html_escape(format_tick(t, step)) + "</text>\n";
    } else {
      o += "<line class=\"grid\" x1=\"" + fmt(left) + "\" x2=\"" + fmt(left + pw) + "\" y1=\"" + fmt(p) + "\" y2=\"" + fmt(p) + "\"/>";
      o += "<text class=\"tick\" text-anchor=\"end\" x=\"" + fmt(left - 6) + "\" y=\"" + fmt(p + 4) + "\">" +
           html_escape(format_tick(t, step)) + "</text>\n";
    }
  }
  for (std::size_t c = 0; c < categories.size(); ++c) {
    const double mid = (horizontal ? top : left) + band * (static_cast<double>(c) + 0.5);
    const double thick = std::min(band * 0.7, 40.0);
    double acc = 0;
    for (std::size_t k = 0; k < stacks.size(); ++k) {
      const double v = std::max(0.0, stacks[k].values[c]);
      if (v <= 0) continue;
      const double a = vpos(acc), b = vpos(acc + v);
      const std::string tip = stacks[k].tips.empty() ? categories[c] + ": " + stacks[k].name : stacks[k].tips[c];
      const std::string geom = horizontal ? "x=\"" + fmt(a) + "\" y=\"" + fmt(mid - thick / 2) + "\" width=\"" + fmt(b - a) +
                                                "\" height=\"" + fmt(thick) + "\""
                                          : "x=\"" + fmt(mid - thick / 2) + "\" y=\"" + fmt(b) + "\" width=\"" + fmt(thick) +
                                                "\" height=\"" + fmt(a - b) + "\"";
      o += "<rect class=\"bar\" " + geom + " fill=\"" + palette_color(k) + "\" data-tip=\"" + html_escape(tip) + "\"><title>" +
           html_escape(tip) + "</title></rect>\n";
      acc += v;
    }
    const std::string name = html_escape(truncate(categories[c], horizontal ? 28 : 22));
    if (horizontal)
      o += "<text class=\"tick\" text-anchor=\"end\" x=\"" + fmt(left - 6) + "\" y=\"" + fmt(mid + 4) + "\">" + name + "</text>\n";
    else
      o += "<text class=\"tick\" text-anchor=\"end\" transform=\"translate(" + fmt(mid + 4) + "," + fmt(top + ph + 14) +
           ") rotate(-30)\">" + name + "</text>\n";
  }
  if (horizontal)
    o += "<text class=\"axis-title\" text-anchor=\"middle\" x=\"" + fmt(left + pw / 2) + "\" y=\"" + fmt(top + ph + 36) + "\">" +
         html_escape(value_title) + "</text>\n";
  else
    o += "<text class=\"axis-title\" text-anchor=\"middle\" transform=\"translate(16," + fmt(top + ph / 2) + ") rotate(-90)\">" +
         html_escape(value_title) + "</text>\n";
  double lx = left;
  const double ly = height - 12;
  for (std::size_t k = 0; k < stacks.size(); ++k) {
    o += "<rect x=\"" + fmt(lx) + "\" y=\"" + fmt(ly - 9) + "\" width=\"12\" height=\"12\" fill=\"" + palette_color(k) + "\"/>";
    const std::string name = truncate(stacks[k].name, 30);
    o += "<text class=\"legend\" x=\"" + fmt(lx + 17) + "\" y=\"" + fmt(ly + 1) + "\">" + html_escape(name) + "</text>\n";
    lx += 17 + text_width(name) + 16;
  }
  o += "</svg>\n";
  return o;
}

}  // namespace cnnergy::report
