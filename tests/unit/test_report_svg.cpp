// The SVG chart writer (report/svg_plot.h): well-formed documents, escaping, ticks, skipped points.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "report/svg_plot.h"

namespace zt {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(ReportSvg, NiceTicksCoverTheRangeWithRoundSteps) {
  const auto ticks = nice_ticks(0.3, 9.7, 5);
  ASSERT_GE(ticks.size(), 3u);
  EXPECT_LE(ticks.front(), 0.3);
  EXPECT_GE(ticks.back(), 9.7);
  EXPECT_DOUBLE_EQ(ticks[1] - ticks[0], 2.0);
  const auto small = nice_ticks(5.41, 5.57, 4);
  EXPECT_NEAR(small[1] - small[0], 0.05, 1e-12);
}

TEST(ReportSvg, LinePlotHasOnePolylinePerSeriesAndEscapesText) {
  LinePlot plot{"Loss <&> \"curves\"", "step", "loss", false, false, {}};
  plot.series.push_back({"a&b", {1, 2, 3}, {5.5, 5.0, 4.2}});
  plot.series.push_back({"second", {1, 2}, {5.6, NAN}});  // NaN skipped, one point left
  const std::string svg = render_svg(plot);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2);
  EXPECT_NE(svg.find("Loss &lt;&amp;&gt; &quot;curves&quot;"), std::string::npos);
  EXPECT_NE(svg.find(">a&amp;b<"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(count(svg, "<svg"), 1);
}

TEST(ReportSvg, Log2AxisLabelsRankCountsAndMarksPoints) {
  LinePlot plot{"Throughput", "ranks", "tokens/s",
                true,         true,    {{"ZeRO-3", {1, 2, 4}, {10, 19, 35}}}};
  const std::string svg = render_svg(plot);
  EXPECT_EQ(count(svg, "<circle"), 3);
  for (const char* label : {">1<", ">2<", ">4<"}) EXPECT_NE(svg.find(label), std::string::npos);
}

TEST(ReportSvg, BarChartDrawsOneBarPerSeriesAndCategory) {
  BarChart chart{"Memory", "MiB", {"Z2 x2", "Z3 x2", "Z3 x4"}, {}};
  chart.series.push_back({"params", {}, {1.0, 0.5, 0.25}});
  chart.series.push_back({"grads", {}, {2.0, 1.0, 0.5}});
  const std::string svg = render_svg(chart);
  // background + plot frame + 2 legend swatches + 6 bars
  EXPECT_EQ(count(svg, "<rect"), 1 + 1 + 2 + 6);
  EXPECT_NE(svg.find("Z3 x4"), std::string::npos);
}

TEST(ReportSvg, EmptyPlotIsStillAValidDocument) {
  const std::string svg = render_svg(LinePlot{"empty", "x", "y", false, false, {}});
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

}  // namespace
}  // namespace zt
