#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace zt {

namespace {

constexpr double kWidth = 720, kHeight = 440;
constexpr double kLeft = 80, kRight = 180, kTop = 40, kBottom = 60;  // margins; legend right
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

// Colour-blind-friendly palette (Okabe-Ito), cycled.
const char* colour(size_t i) {
  static const char* const palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                        "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3))
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  void pad() {  // a degenerate range gets some width
    if (empty()) {
      lo = 0;
      hi = 1;
    } else if (lo == hi) {
      const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= d;
      hi += d;
    }
  }
};

void open_svg(std::ostringstream& svg, const std::string& title) {
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">"
      << xml_escape(title) << "</text>\n";
}

void axis_labels(std::ostringstream& svg, const std::string& x_label, const std::string& y_label) {
  svg << "<text x=\"" << num(kLeft + kPlotW / 2) << "\" y=\"" << num(kHeight - 14)
      << "\" text-anchor=\"middle\">" << xml_escape(x_label) << "</text>\n"
      << "<text transform=\"translate(18 " << num(kTop + kPlotH / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << xml_escape(y_label) << "</text>\n"
      << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kPlotW << "\" height=\""
      << kPlotH << "\" fill=\"none\" stroke=\"#444\"/>\n";
}

// Horizontal grid lines and labels of the y axis; returns the value → pixel mapping's range.
Range y_axis(std::ostringstream& svg, Range y) {
  y.pad();
  const std::vector<double> ticks = nice_ticks(y.lo, y.hi);
  y.lo = std::min(y.lo, ticks.front());
  y.hi = std::max(y.hi, ticks.back());
  for (double t : ticks) {
    const double py = kTop + kPlotH - (t - y.lo) / (y.hi - y.lo) * kPlotH;
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + kPlotW << "\" y1=\"" << num(py)
        << "\" y2=\"" << num(py) << "\" stroke=\"#ddd\"/>\n"
        << "<text x=\"" << kLeft - 6 << "\" y=\"" << num(py + 4) << "\" text-anchor=\"end\">"
        << tick_label(t) << "</text>\n";
  }
  return y;
}

void legend(std::ostringstream& svg, const std::vector<PlotSeries>& series) {
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = kTop + 10 + 18.0 * static_cast<double>(i);
    svg << "<rect x=\"" << kLeft + kPlotW + 12 << "\" y=\"" << num(y - 9)
        << "\" width=\"12\" height=\"12\" fill=\"" << colour(i) << "\"/>\n"
        << "<text x=\"" << kLeft + kPlotW + 30 << "\" y=\"" << num(y + 1) << "\">"
        << xml_escape(series[i].label) << "</text>\n";
  }
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 0.5; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
    if (ticks.size() > 50) break;
  }
  return ticks;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_svg(const LinePlot& plot) {
  auto fx = [&](double x) { return plot.x_log2 ? std::log2(x) : x; };
  Range xr, yr;
  for (const auto& s : plot.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.y[i]) || (plot.x_log2 && !(s.x[i] > 0))) continue;
      xr.add(fx(s.x[i]));
      yr.add(s.y[i]);
    }
  std::ostringstream svg;
  open_svg(svg, plot.title);
  const Range y = y_axis(svg, yr);
  xr.pad();
  std::vector<double> xticks;
  if (plot.x_log2) {
    for (double e = std::floor(xr.lo); e <= std::ceil(xr.hi); e += 1) xticks.push_back(e);
    xr.lo = std::min(xr.lo, xticks.front());
    xr.hi = std::max(xr.hi, xticks.back());
    if (xr.lo == xr.hi) xr.pad();
  } else {
    xticks = nice_ticks(xr.lo, xr.hi);
    xr.lo = std::min(xr.lo, xticks.front());
    xr.hi = std::max(xr.hi, xticks.back());
  }
  auto px = [&](double x) { return kLeft + (fx(x) - xr.lo) / (xr.hi - xr.lo) * kPlotW; };
  auto py = [&](double v) { return kTop + kPlotH - (v - y.lo) / (y.hi - y.lo) * kPlotH; };
  for (double t : xticks) {
    const double x = kLeft + (t - xr.lo) / (xr.hi - xr.lo) * kPlotW;
    svg << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << kTop + kPlotH
        << "\" y2=\"" << kTop + kPlotH + 5 << "\" stroke=\"#444\"/>\n"
        << "<text x=\"" << num(x) << "\" y=\"" << kTop + kPlotH + 18 << "\" text-anchor=\"middle\">"
        << tick_label(plot.x_log2 ? std::exp2(t) : t) << "</text>\n";
  }
  axis_labels(svg, plot.x_label, plot.y_label);
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    std::string points;
    for (size_t k = 0; k < std::min(s.x.size(), s.y.size()); ++k) {
      if (!std::isfinite(s.y[k]) || (plot.x_log2 && !(s.x[k] > 0))) continue;
      points += num(px(s.x[k])) + "," + num(py(s.y[k])) + " ";
      if (plot.markers)
        svg << "<circle cx=\"" << num(px(s.x[k])) << "\" cy=\"" << num(py(s.y[k]))
            << "\" r=\"3.5\" fill=\"" << colour(i) << "\"/>\n";
    }
    if (!points.empty())
      svg << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colour(i) << "\" points=\""
          << points << "\"/>\n";
  }
  legend(svg, plot.series);
  svg << "</svg>\n";
  return svg.str();
}

std::string render_svg(const BarChart& chart) {
  Range yr;
  yr.add(0);
  for (const auto& s : chart.series)
    for (double v : s.y) yr.add(v);
  std::ostringstream svg;
  open_svg(svg, chart.title);
  const Range y = y_axis(svg, yr);
  const size_t groups = std::max<size_t>(1, chart.categories.size());
  const double group_w = kPlotW / static_cast<double>(groups);
  const double bar_w =
      group_w * 0.8 / static_cast<double>(std::max<size_t>(1, chart.series.size()));
  auto py = [&](double v) { return kTop + kPlotH - (v - y.lo) / (y.hi - y.lo) * kPlotH; };
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double gx = kLeft + group_w * static_cast<double>(c);
    svg << "<text x=\"" << num(gx + group_w / 2) << "\" y=\"" << kTop + kPlotH + 18
        << "\" text-anchor=\"middle\">" << xml_escape(chart.categories[c]) << "</text>\n";
    for (size_t i = 0; i < chart.series.size(); ++i) {
      if (c >= chart.series[i].y.size() || !std::isfinite(chart.series[i].y[c])) continue;
      const double v = chart.series[i].y[c];
      const double top = py(std::max(v, 0.0)), bottom = py(std::min(v, 0.0));
      svg << "<rect x=\"" << num(gx + group_w * 0.1 + bar_w * static_cast<double>(i)) << "\" y=\""
          << num(top) << "\" width=\"" << num(bar_w) << "\" height=\""
          << num(std::max(bottom - top, 0.5)) << "\" fill=\"" << colour(i) << "\"/>\n";
    }
  }
  axis_labels(svg, "", chart.y_label);
  legend(svg, chart.series);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace zt
