// Charts as inline SVG, written by hand for `fp8lm bench report`: line charts
// over linear or logarithmic axes and grouped bar charts, each with its title,
// axes, ticks, axis labels (units included) and a legend. No plotting library
// and no script: a chart is a string of SVG that an HTML page inlines or a
// file holds, drawn the same in any browser and on GitHub.
//
// What the output promises (tests/cpp/test_bench_report.cpp reads it back):
//   - the plot area is `<rect class="plot-area" x= y= width= height=>`; a value
//     v lands at Scale::map(v) of that rectangle, the axis domain running left
//     to right and bottom to top;
//   - every measured point is one `<circle class="pt" data-series= data-x= data-y=>`,
//     a series' line a `<path class="line">` (dashed: `class="line ref"`) through
//     them in order, every bar one `<rect class="bar" data-series= data-group=
//     data-level= data-value=>`, a bar's note (a ratio) a `<text class="note">`;
//   - every label, name and tooltip is XML-escaped, so the chart is well-formed
//     XML whatever the names hold; nothing references anything outside it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm::cli::svg {

// Text for XML content and attributes: & < > " ' as entities, control
// characters XML forbids dropped.
std::string escape(std::string_view text);

// A tick label: 0, 0.25, 5, 250, 2.5k, 10k, 1.5M, 2G.
std::string format_tick(double v);
// A value in a label or a table: 6,065 · 227 · 12.8 · 4.41 · 0.0123.
std::string format_number(double v);

// A coordinate map from a domain [d0, d1] onto pixels [r0, r1], linear or
// logarithmic (then both domain ends must be above 0).
struct Scale {
  double d0 = 0.0, d1 = 1.0;
  double r0 = 0.0, r1 = 1.0;
  bool log = false;
  double map(double v) const;
};

struct Tick {
  double value = 0.0;
  std::string label;
};
// Steps of 1, 2, 2.5 or 5 × 10^k from lo to hi inclusive, about `target` of them
// (lo and hi as nice_domain gives them).
std::vector<Tick> linear_ticks(double lo, double hi, int target = 6);
// Powers of ten in [lo, hi]; with fewer than four of them the 2× and 5×
// multiples between as well; with more than eight, every second (third, …).
std::vector<Tick> log_ticks(double lo, double hi);
// The domain an axis shows for data in [lo, hi]: linear — from 0 when
// `from_zero`, ends on a tick step; log — the powers of ten around the data.
struct Domain {
  double lo = 0.0, hi = 1.0;
};
Domain nice_domain(double lo, double hi, bool log, bool from_zero, int target = 6);

struct Axis {
  std::string label;  // with its unit: "decode tokens/s"
  bool log = false;
  bool from_zero = true;       // linear: the domain starts at 0
  std::optional<double> min;   // a fixed domain; else nice_domain of the data
  std::optional<double> max;
  std::vector<double> ticks;   // fixed ticks (e.g. the batch sizes measured); else nice ones
};

struct Point {
  double x = 0.0;
  std::optional<double> y;  // absent: not measured (the line breaks there)
  std::string tip;          // hover text (an SVG <title>)
};

struct Series {
  std::string name;
  std::string color;       // "#rrggbb"
  std::vector<Point> points;
  bool reference = false;  // a model's line (a roofline): dashed, no markers, not a measured point
  bool in_legend = true;
};

// One extra legend row: a dashed or solid line sample and its text.
struct LegendNote {
  std::string text;
  bool dashed = true;
};

struct LineChart {
  std::string id;  // the chart's name in the page and in --svg-dir file names
  std::string title;
  std::string subtitle;
  Axis x, y;
  std::vector<Series> series;
  std::vector<LegendNote> notes;
  int width = 780, height = 440;
};

struct Bar {
  std::vector<std::optional<double>> values;  // one per level of the chart (p50, p90, p99; or one)
  std::string note;                           // above the bar: "1.28×"
  std::string tip;
};

struct BarSeries {
  std::string name;
  std::string color;
  std::vector<Bar> bars;  // one per group
};

// Groups along x (batch sizes, concurrencies), one bar per series in each. A
// chart with several levels draws them over each other in one bar, the largest
// at the back, lighter (percentiles: p99 behind p90 behind p50).
struct BarChart {
  std::string id;
  std::string title;
  std::string subtitle;
  std::string x_label;
  std::vector<std::string> groups;
  std::vector<std::string> levels = {""};
  Axis y;
  std::vector<BarSeries> series;
  int width = 780, height = 440;
};

// The chart as an <svg> element (with its xmlns); throws fp8lm::Error for a
// chart that cannot be drawn (a log axis over values ≤ 0, a series whose bars
// do not match the groups), naming the chart.
std::string render(const LineChart& chart);
std::string render(const BarChart& chart);

// Colour-blind-safe colours (Okabe & Ito), in order; past the last they repeat.
const std::string& palette(size_t i);

}  // namespace fp8lm::cli::svg
