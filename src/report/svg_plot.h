// A small SVG chart writer (no dependencies): line plots of numeric series and grouped bar
// charts, with axes, ticks, labels and a legend. Used by the run report (loss and step-time
// curves) and by `zerotrain report` (throughput vs ranks, memory per rank, loss overlays).
#pragma once
#include <string>
#include <vector>

namespace zt {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // same length; non-finite points are skipped
};

struct LinePlot {
  std::string title, x_label, y_label;
  bool x_log2 = false;  // powers of two on the x axis (rank counts)
  bool markers = false;
  std::vector<PlotSeries> series;
};

// Bars grouped by category (x), one bar per series in every group; series[i].y[c] is the value
// of series i in category c (x is unused).
struct BarChart {
  std::string title, y_label;
  std::vector<std::string> categories;
  std::vector<PlotSeries> series;
};

std::string render_svg(const LinePlot& plot);
std::string render_svg(const BarChart& chart);

// "nice" tick values covering [lo, hi] (1, 2, 5 × 10^k steps), about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// XML text escaping (&, <, >, ", ').
std::string xml_escape(const std::string& text);

}  // namespace zt
