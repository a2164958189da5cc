#include "cli/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.h"

namespace fp8lm::cli::svg {
namespace {

constexpr const char* kFont = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";
constexpr const char* kInk = "#222222";
constexpr const char* kMuted = "#666666";
constexpr const char* kGrid = "#e4e4e4";
constexpr double kCharWidth = 6.6;  // about one character of the 12 px legend text

// Pixel coordinates: two decimals are finer than any screen.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", std::abs(v) < 0.005 ? 0.0 : v);
  return buf;
}

// Data values in attributes: enough digits to read them back.
std::string raw(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string attr(const char* name, const std::string& value) {
  return std::string(" ") + name + "=\"" + escape(value) + "\"";
}

// The frame every chart shares: the plot rectangle inside margins that leave
// room for the title, the tick labels, the axis labels and the legend.
struct Frame {
  double width = 0, height = 0;
  double left = 0, top = 0, right = 0, bottom = 0;  // the plot area's edges
  double plot_w() const { return right - left; }
  double plot_h() const { return bottom - top; }
};

Frame make_frame(int width, int height, bool subtitle, size_t longest_legend) {
  Frame f;
  f.width = width;
  f.height = height;
  const double legend = std::clamp(34.0 + kCharWidth * double(longest_legend), 110.0, 330.0);
  f.left = 78;
  f.top = subtitle ? 62 : 44;
  f.right = double(width) - legend - 10;
  f.bottom = double(height) - 54;
  if (f.plot_w() < 120 || f.plot_h() < 100) throw Error("chart: " + std::to_string(width) + "×" +
                                                          std::to_string(height) + " px leaves no room to plot");
  return f;
}

std::string open_svg(const Frame& f, const std::string& id, const std::string& title, const std::string& subtitle) {
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\"" + attr("class", "chart") + attr("data-chart", id) +
                  attr("width", raw(f.width)) + attr("height", raw(f.height)) +
                  attr("viewBox", "0 0 " + raw(f.width) + " " + raw(f.height)) + attr("font-family", kFont) +
                  attr("font-size", "12") + attr("role", "img") + attr("aria-label", title) + ">\n";
  s += "<title>" + escape(title) + "</title>\n";
  s += "<rect" + attr("width", raw(f.width)) + attr("height", raw(f.height)) + attr("fill", "#ffffff") + "/>\n";
  s += "<text class=\"title\"" + attr("x", px(f.left)) + attr("y", "24") + attr("font-size", "16") +
       attr("font-weight", "600") + attr("fill", kInk) + ">" + escape(title) + "</text>\n";
  if (!subtitle.empty())
    s += "<text class=\"subtitle\"" + attr("x", px(f.left)) + attr("y", "43") + attr("fill", kMuted) + ">" +
         escape(subtitle) + "</text>\n";
  s += "<rect class=\"plot-area\"" + attr("x", px(f.left)) + attr("y", px(f.top)) + attr("width", px(f.plot_w())) +
       attr("height", px(f.plot_h())) + attr("fill", "none") + "/>\n";
  return s;
}

// Gridlines, tick marks and labels of the y axis, the axis line and its label.
std::string y_axis(const Frame& f, const Scale& sy, const std::vector<Tick>& ticks, const std::string& label) {
  std::string s = "<g class=\"axis y\">\n";
  for (const Tick& t : ticks) {
    const std::string y = px(sy.map(t.value));
    s += "<line" + attr("x1", px(f.left)) + attr("x2", px(f.right)) + attr("y1", y) + attr("y2", y) +
         attr("stroke", kGrid) + "/>\n";
    s += "<text class=\"tick\"" + attr("x", px(f.left - 8)) + attr("y", px(sy.map(t.value) + 4)) +
         attr("text-anchor", "end") + attr("fill", kInk) + attr("data-value", raw(t.value)) + ">" +
         escape(t.label) + "</text>\n";
  }
  s += "<line" + attr("x1", px(f.left)) + attr("x2", px(f.left)) + attr("y1", px(f.top)) + attr("y2", px(f.bottom)) +
       attr("stroke", kInk) + "/>\n";
  const std::string mid = px((f.top + f.bottom) / 2);
  s += "<text class=\"axis-label\"" + attr("x", "18") + attr("y", mid) + attr("transform", "rotate(-90 18 " + mid + ")") +
       attr("text-anchor", "middle") + attr("fill", kInk) + ">" + escape(label) + "</text>\n";
  return s + "</g>\n";
}

std::string x_axis_label(const Frame& f, const std::string& label) {
  return "<text class=\"axis-label\"" + attr("x", px((f.left + f.right) / 2)) + attr("y", px(f.height - 12)) +
         attr("text-anchor", "middle") + attr("fill", kInk) + ">" + escape(label) + "</text>\n";
}

std::string x_axis_line(const Frame& f) {
  return "<line" + attr("x1", px(f.left)) + attr("x2", px(f.right)) + attr("y1", px(f.bottom)) +
         attr("y2", px(f.bottom)) + attr("stroke", kInk) + "/>\n";
}

// The domain of an axis over `values` (the axis's fixed ends winning).
Domain axis_domain(const Axis& a, std::vector<double> values, const std::string& chart) {
  if (a.log) {
    values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !(v > 0); }), values.end());
    if ((a.min && !(*a.min > 0)) || (a.max && !(*a.max > 0)))
      throw Error("chart " + chart + ": the log axis '" + a.label + "' has an end at or below 0");
  }
  for (double t : a.ticks) values.push_back(t);
  if (a.min) values.push_back(*a.min);
  if (a.max) values.push_back(*a.max);
  if (values.empty()) {
    if (a.log) return {1.0, 10.0};
    return {0.0, 1.0};
  }
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  Domain d = nice_domain(*lo, *hi, a.log, a.from_zero);
  if (!a.ticks.empty()) d = {*lo, *hi};  // fixed ticks: the axis spans them (and the data)
  if (a.min) d.lo = *a.min;
  if (a.max) d.hi = *a.max;
  if (!(d.hi > d.lo)) throw Error("chart " + chart + ": the axis '" + a.label + "' has an empty range");
  return d;
}

std::vector<Tick> axis_ticks(const Axis& a, const Domain& d) {
  if (a.ticks.empty()) return a.log ? log_ticks(d.lo, d.hi) : linear_ticks(d.lo, d.hi);
  std::vector<Tick> out;
  for (double t : a.ticks)
    if (t >= d.lo && t <= d.hi) out.push_back({t, format_tick(t)});
  return out;
}

double text_length(const std::string& s) {
  size_t n = 0;  // UTF-8: count the characters, not the bytes
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return double(n);
}

double legend_row_y(const Frame& f, size_t row) { return f.top + 10 + 20.0 * double(row); }

std::string legend_text(double x, double y, const std::string& text) {
  return "<text" + attr("x", px(x)) + attr("y", px(y + 4)) + attr("fill", kInk) + ">" + escape(text) + "</text>\n";
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // XML 1.0 allows tab, newline and carriage return among the control characters.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') break;
        out += c;
    }
  }
  return out;
}

std::string format_tick(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  const char* suffix = "";
  double x = v;
  if (a >= 1e9 - 0.5) x = v / 1e9, suffix = "G";
  else if (a >= 1e6 - 0.5) x = v / 1e6, suffix = "M";
  else if (a >= 1e3 - 0.5) x = v / 1e3, suffix = "k";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%s", x, suffix);
  return buf;
}

std::string format_number(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::abs(v);
  char buf[48];
  if (a >= 1000) {
    std::snprintf(buf, sizeof buf, "%.0f", a);
    std::string digits = buf, grouped;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
      grouped += digits[i];
    }
    return (v < 0 ? "-" : "") + grouped;
  }
  if (a >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 1) std::snprintf(buf, sizeof buf, "%.2f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

double Scale::map(double v) const {
  if (log) {
    const double l0 = std::log10(d0), l1 = std::log10(d1);
    return r0 + (std::log10(v) - l0) / (l1 - l0) * (r1 - r0);
  }
  return r0 + (v - d0) / (d1 - d0) * (r1 - r0);
}

namespace {
double nice_step(double raw_step) {
  const double e = std::pow(10.0, std::floor(std::log10(raw_step)));
  const double f = raw_step / e;
  const double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
  return nice * e;
}
}  // namespace

Domain nice_domain(double lo, double hi, bool log, bool from_zero, int target) {
  if (log) {
    if (!(lo > 0) || !(hi > 0)) throw Error("a log axis needs values above 0");
    double l = std::floor(std::log10(lo) + 1e-9), h = std::ceil(std::log10(hi) - 1e-9);
    if (h <= l) h = l + 1;
    return {std::pow(10.0, l), std::pow(10.0, h)};
  }
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (hi == lo) {  // one value: a range around it
    const double pad = lo == 0 ? 1.0 : std::abs(lo) / 2;
    if (lo != 0) lo -= pad;
    hi += pad;
  }
  const double step = nice_step((hi - lo) / double(std::max(1, target - 1)));
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step};
}

std::vector<Tick> linear_ticks(double lo, double hi, int target) {
  std::vector<Tick> out;
  if (!(hi > lo)) return out;
  const double step = nice_step((hi - lo) / double(std::max(1, target - 1)));
  const double first = std::ceil(lo / step - 1e-9);
  for (double i = first; i * step <= hi + step * 1e-9; i += 1) {
    double v = i * step;
    if (std::abs(v) < step * 1e-9) v = 0;
    out.push_back({v, format_tick(v)});
  }
  return out;
}

std::vector<Tick> log_ticks(double lo, double hi) {
  std::vector<Tick> out;
  if (!(lo > 0) || !(hi > lo)) return out;
  const int e0 = int(std::ceil(std::log10(lo) - 1e-9)), e1 = int(std::floor(std::log10(hi) + 1e-9));
  const int decades = e1 - e0 + 1;
  if (decades < 4) {
    for (int e = e0 - 1; e <= e1; ++e)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back({v, format_tick(v)});
      }
    return out;
  }
  const int every = (decades + 7) / 8;
  for (int e = e0; e <= e1; e += every) out.push_back({std::pow(10.0, e), format_tick(std::pow(10.0, e))});
  return out;
}

const std::string& palette(size_t i) {
  static const std::vector<std::string> kColors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                   "#E69F00", "#56B4E9", "#000000", "#999933"};
  return kColors[i % kColors.size()];
}

std::string render(const LineChart& c) {
  std::vector<double> xs, ys;
  size_t longest = 0;
  for (const Series& s : c.series) {
    if (s.in_legend) longest = std::max(longest, size_t(text_length(s.name)));
    for (const Point& p : s.points) {
      xs.push_back(p.x);
      if (p.y) ys.push_back(*p.y);
    }
  }
  for (const LegendNote& n : c.notes) longest = std::max(longest, size_t(text_length(n.text)));
  const Frame f = make_frame(c.width, c.height, !c.subtitle.empty(), longest);
  const Domain dx = axis_domain(c.x, xs, c.id), dy = axis_domain(c.y, ys, c.id);
  const Scale sx{dx.lo, dx.hi, f.left, f.right, c.x.log}, sy{dy.lo, dy.hi, f.bottom, f.top, c.y.log};

  std::string s = open_svg(f, c.id, c.title, c.subtitle);
  s += y_axis(f, sy, axis_ticks(c.y, dy), c.y.label);
  s += "<g class=\"axis x\">\n";
  for (const Tick& t : axis_ticks(c.x, dx)) {
    const std::string x = px(sx.map(t.value));
    s += "<line" + attr("x1", x) + attr("x2", x) + attr("y1", px(f.top)) + attr("y2", px(f.bottom)) +
         attr("stroke", kGrid) + "/>\n";
    s += "<text class=\"tick\"" + attr("x", x) + attr("y", px(f.bottom + 18)) + attr("text-anchor", "middle") +
         attr("fill", kInk) + attr("data-value", raw(t.value)) + ">" + escape(t.label) + "</text>\n";
  }
  s += x_axis_line(f) + x_axis_label(f, c.x.label) + "</g>\n";

  auto plottable = [&](const Point& p) {
    return p.y && std::isfinite(*p.y) && std::isfinite(p.x) && (!c.y.log || *p.y > 0) && (!c.x.log || p.x > 0);
  };
  // Reference lines first, under the measurements.
  for (int pass = 0; pass < 2; ++pass)
    for (const Series& ser : c.series) {
      if (ser.reference != (pass == 0)) continue;
      s += "<g class=\"series\"" + attr("data-series", ser.name) + ">\n";
      std::string d;
      bool pen_down = false;
      for (const Point& p : ser.points) {
        if (!plottable(p)) {
          pen_down = false;
          continue;
        }
        d += std::string(d.empty() ? "" : " ") + (pen_down ? "L" : "M") + px(sx.map(p.x)) + " " + px(sy.map(*p.y));
        pen_down = true;
      }
      if (!d.empty())
        s += "<path" + attr("class", ser.reference ? "line ref" : "line") + attr("d", d) + attr("fill", "none") +
             attr("stroke", ser.color) + attr("stroke-width", ser.reference ? "1.5" : "2") +
             (ser.reference ? attr("stroke-dasharray", "6 4") : "") + "/>\n";
      if (!ser.reference)
        for (const Point& p : ser.points) {
          if (!plottable(p)) continue;
          s += "<circle class=\"pt\"" + attr("data-series", ser.name) + attr("data-x", raw(p.x)) +
               attr("data-y", raw(*p.y)) + attr("cx", px(sx.map(p.x))) + attr("cy", px(sy.map(*p.y))) +
               attr("r", "3.5") + attr("fill", ser.color) + ">";
          if (!p.tip.empty()) s += "<title>" + escape(p.tip) + "</title>";
          s += "</circle>\n";
        }
      s += "</g>\n";
    }

  s += "<g class=\"legend\">\n";
  const double lx = f.right + 16;
  size_t row = 0;
  for (const Series& ser : c.series) {
    if (!ser.in_legend) continue;
    const double y = legend_row_y(f, row++);
    s += "<line" + attr("x1", px(lx)) + attr("x2", px(lx + 22)) + attr("y1", px(y)) + attr("y2", px(y)) +
         attr("stroke", ser.color) + attr("stroke-width", "2") +
         (ser.reference ? attr("stroke-dasharray", "6 4") : "") + "/>\n";
    if (!ser.reference)
      s += "<circle" + attr("cx", px(lx + 11)) + attr("cy", px(y)) + attr("r", "3.5") + attr("fill", ser.color) + "/>\n";
    s += legend_text(lx + 28, y, ser.name);
  }
  for (const LegendNote& n : c.notes) {
    const double y = legend_row_y(f, row++);
    s += "<line" + attr("x1", px(lx)) + attr("x2", px(lx + 22)) + attr("y1", px(y)) + attr("y2", px(y)) +
         attr("stroke", kMuted) + attr("stroke-width", "1.5") + (n.dashed ? attr("stroke-dasharray", "6 4") : "") +
         "/>\n";
    s += legend_text(lx + 28, y, n.text);
  }
  return s + "</g>\n</svg>\n";
}

std::string render(const BarChart& c) {
  const size_t groups = c.groups.size(), levels = c.levels.size();
  if (levels == 0) throw Error("chart " + c.id + ": a bar chart needs at least one level");
  std::vector<double> ys;
  size_t longest = 0;
  for (const BarSeries& ser : c.series) {
    if (ser.bars.size() != groups)
      throw Error("chart " + c.id + ": series '" + ser.name + "' has " + std::to_string(ser.bars.size()) +
                  " bars for " + std::to_string(groups) + " groups");
    longest = std::max(longest, size_t(text_length(ser.name)));
    for (const Bar& b : ser.bars) {
      if (b.values.size() != levels)
        throw Error("chart " + c.id + ": a bar of series '" + ser.name + "' has " + std::to_string(b.values.size()) +
                    " values for " + std::to_string(levels) + " levels");
      for (const std::optional<double>& v : b.values)
        if (v && std::isfinite(*v)) ys.push_back(*v);
    }
  }
  for (const std::string& l : c.levels) longest = std::max(longest, size_t(text_length(l)) + 8);
  const Frame f = make_frame(c.width, c.height, !c.subtitle.empty(), longest);
  const Domain dy = axis_domain(c.y, ys, c.id);
  const Scale sy{dy.lo, dy.hi, f.bottom, f.top, c.y.log};
  // Lighter shades for the higher levels, drawn behind.
  auto opacity = [&](size_t level) { return levels == 1 ? 1.0 : 1.0 - 0.7 * double(level) / double(levels - 1); };

  std::string s = open_svg(f, c.id, c.title, c.subtitle);
  s += y_axis(f, sy, axis_ticks(c.y, dy), c.y.label);
  const double group_w = groups > 0 ? f.plot_w() / double(groups) : f.plot_w();
  const double bar_w = group_w * 0.8 / double(std::max<size_t>(1, c.series.size()));
  s += "<g class=\"axis x\">\n";
  for (size_t g = 0; g < groups; ++g)
    s += "<text class=\"tick\"" + attr("x", px(f.left + group_w * (double(g) + 0.5))) + attr("y", px(f.bottom + 18)) +
         attr("text-anchor", "middle") + attr("fill", kInk) + ">" + escape(c.groups[g]) + "</text>\n";
  s += x_axis_line(f) + x_axis_label(f, c.x_label) + "</g>\n";

  for (size_t si = 0; si < c.series.size(); ++si) {
    const BarSeries& ser = c.series[si];
    s += "<g class=\"series\"" + attr("data-series", ser.name) + ">\n";
    for (size_t g = 0; g < groups; ++g) {
      const Bar& b = ser.bars[g];
      const double x = f.left + group_w * double(g) + group_w * 0.1 + bar_w * double(si);
      double top = f.bottom;
      for (size_t l = levels; l-- > 0;) {
        const std::optional<double>& v = b.values[l];
        if (!v || !std::isfinite(*v) || (c.y.log && !(*v > 0))) continue;
        const double y = std::clamp(sy.map(std::clamp(*v, dy.lo, dy.hi)), f.top, f.bottom);
        top = std::min(top, y);
        s += "<rect class=\"bar\"" + attr("data-series", ser.name) + attr("data-group", c.groups[g]) +
             attr("data-level", c.levels[l]) + attr("data-value", raw(*v)) + attr("x", px(x + 1)) + attr("y", px(y)) +
             attr("width", px(std::max(1.0, bar_w - 2))) + attr("height", px(f.bottom - y)) +
             attr("fill", ser.color) + (levels > 1 ? attr("fill-opacity", raw(opacity(l))) : "") + ">";
        std::string tip = b.tip.empty() ? ser.name + ", " + c.groups[g] : b.tip;
        if (!c.levels[l].empty()) tip += " " + c.levels[l];
        s += "<title>" + escape(tip + ": " + format_number(*v)) + "</title></rect>\n";
      }
      if (!b.note.empty() && top < f.bottom) {
        const double cx = x + bar_w / 2;
        // A narrow bar takes its note upright along it.
        if (bar_w < 6.4 * double(text_length(b.note)) + 2)
          s += "<text class=\"note\"" + attr("x", px(cx + 4)) + attr("y", px(top - 4)) +
               attr("transform", "rotate(-90 " + px(cx + 4) + " " + px(top - 4) + ")") + attr("font-size", "11") +
               attr("fill", kInk) + ">" + escape(b.note) + "</text>\n";
        else
          s += "<text class=\"note\"" + attr("x", px(cx)) + attr("y", px(top - 4)) + attr("text-anchor", "middle") +
               attr("font-size", "11") + attr("fill", kInk) + ">" + escape(b.note) + "</text>\n";
      }
    }
    s += "</g>\n";
  }

  s += "<g class=\"legend\">\n";
  const double lx = f.right + 16;
  size_t row = 0;
  for (const BarSeries& ser : c.series) {
    const double y = legend_row_y(f, row++);
    s += "<rect" + attr("x", px(lx + 4)) + attr("y", px(y - 6)) + attr("width", "12") + attr("height", "12") +
         attr("fill", ser.color) + "/>\n";
    s += legend_text(lx + 28, y, ser.name);
  }
  if (levels > 1)
    for (size_t l = 0; l < levels; ++l) {
      const double y = legend_row_y(f, row++);
      s += "<rect" + attr("x", px(lx + 4)) + attr("y", px(y - 6)) + attr("width", "12") + attr("height", "12") +
           attr("fill", kMuted) + attr("fill-opacity", raw(opacity(l))) + "/>\n";
      s += legend_text(lx + 28, y, "shade: " + c.levels[l]);
    }
  return s + "</g>\n</svg>\n";
}

}  // namespace fp8lm::cli::svg
