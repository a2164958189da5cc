// src/cli/svg_chart and src/cli/bench_report: the chart arithmetic (ticks, nice
// domains, linear and log scales), that drawn points and bars land where their
// values say (their coordinates parsed back from the SVG), that every label is
// escaped and the output well-formed XML, the roofline's values, and how
// results files are read, merged and refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_report.h"
#include "cli/svg_chart.h"
#include "common/error.h"
#include "cpp/test_util.h"

namespace fp8lm::cli {
namespace {

using Json = nlohmann::json;
using test::error_of;
using test::expect_error;

// ---- reading the SVG back -----------------------------------------------------------------

// One element's attributes, by a regex over its start tag.
struct Element {
  std::string tag;
  std::map<std::string, std::string> attrs;
  std::string get(const std::string& name) const {
    auto it = attrs.find(name);
    return it == attrs.end() ? "" : it->second;
  }
  double num(const std::string& name) const {
    auto it = attrs.find(name);
    if (it == attrs.end()) ADD_FAILURE() << tag << " has no " << name;
    return it == attrs.end() ? NAN : std::stod(it->second);
  }
};

// The start tags of `tag` elements whose class attribute is `cls` (empty: any).
std::vector<Element> elements(const std::string& svg, const std::string& tag, const std::string& cls = "") {
  std::vector<Element> out;
  const std::regex start("<" + tag + R"(((\s+[\w:-]+="[^"]*")*)\s*/?>)");
  const std::regex attr(R"re(([\w:-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), start); it != std::sregex_iterator(); ++it) {
    Element e{tag, {}};
    const std::string attrs = (*it)[1];
    for (auto a = std::sregex_iterator(attrs.begin(), attrs.end(), attr); a != std::sregex_iterator(); ++a)
      e.attrs[(*a)[1]] = (*a)[2];
    if (cls.empty() || e.get("class") == cls) out.push_back(e);
  }
  return out;
}

// The part of `svg` inside the first <g class="CLS"> … </g> (groups here never nest).
std::string group(const std::string& svg, const std::string& cls) {
  const size_t a = svg.find("<g class=\"" + cls + "\"");
  if (a == std::string::npos) return "";
  return svg.substr(a, svg.find("</g>", a) - a);
}

// A minimal well-formedness check: tags balance, every '<' starts a tag, every '&'
// starts one of the five entities or a numeric one, attribute values are quoted.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  const std::regex entity(R"(^&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)");
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      if (!std::regex_search(s.substr(i, 12), entity)) return "a bare & at " + std::to_string(i);
      continue;
    }
    if (s[i] == '>') return "a bare > at " + std::to_string(i);
    if (s[i] != '<') continue;
    size_t j = i + 1;
    bool quoted = false;
    for (; j < s.size(); ++j) {
      if (s[j] == '"') quoted = !quoted;
      else if (!quoted && s[j] == '<') return "'<' inside a tag at " + std::to_string(j);
      else if (!quoted && s[j] == '>') break;
    }
    if (j == s.size()) return "an unclosed tag at " + std::to_string(i);
    const std::string tag = s.substr(i + 1, j - i - 1);
    i = j;
    if (tag.empty()) return "an empty tag";
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes nothing open";
      stack.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;
    stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
  }
  return stack.empty() ? "" : "<" + stack.back() + "> is never closed";
}

struct Rect {
  double x, y, w, h;
};
Rect plot_area(const std::string& svg) {
  const std::vector<Element> r = elements(svg, "rect", "plot-area");
  EXPECT_EQ(r.size(), 1u);
  if (r.empty()) return {0, 0, 0, 0};
  return {r[0].num("x"), r[0].num("y"), r[0].num("width"), r[0].num("height")};
}

// The inverse of an axis's scale, from two of its tick labels (their value and position).
struct AxisFit {
  bool log = false;
  double a = 0, b = 0;  // position = a + b · f(value)
  double value(double pos) const {
    const double f = (pos - a) / b;
    return log ? std::pow(10.0, f) : f;
  }
};
AxisFit fit_axis(const std::string& svg, const std::string& cls, const char* coord, bool log) {
  const std::vector<Element> ticks = elements(group(svg, cls), "text", "tick");
  EXPECT_GE(ticks.size(), 2u) << cls;
  if (ticks.size() < 2) return {};
  const Element &t0 = ticks.front(), &t1 = ticks.back();
  auto f = [&](double v) { return log ? std::log10(v) : v; };
  const double v0 = f(t0.num("data-value")), v1 = f(t1.num("data-value"));
  double p0 = t0.num(coord), p1 = t1.num(coord);
  if (std::string(coord) == "y") p0 -= 4, p1 -= 4;  // y tick labels sit 4 px below their line
  AxisFit fit{log, 0, (p1 - p0) / (v1 - v0)};
  fit.a = p0 - fit.b * v0;
  return fit;
}

// ---- the arithmetic -------------------------------------------------------------------------

TEST(SvgChart, EscapeReplacesEverySpecialCharacter) {
  EXPECT_EQ(svg::escape("fp8<kv>&\"bf16\"'s"), "fp8&lt;kv&gt;&amp;&quot;bf16&quot;&#39;s");
  EXPECT_EQ(svg::escape(std::string("a\x01" "b\tc\x1f", 6)), "ab\tc");
  EXPECT_EQ(svg::escape("1.28\xC3\x97"), "1.28\xC3\x97");  // UTF-8 passes through
}

TEST(SvgChart, NumberFormats) {
  EXPECT_EQ(svg::format_tick(0), "0");
  EXPECT_EQ(svg::format_tick(0.25), "0.25");
  EXPECT_EQ(svg::format_tick(250), "250");
  EXPECT_EQ(svg::format_tick(1000), "1k");
  EXPECT_EQ(svg::format_tick(2500), "2.5k");
  EXPECT_EQ(svg::format_tick(10000), "10k");
  EXPECT_EQ(svg::format_tick(1.5e6), "1.5M");
  EXPECT_EQ(svg::format_tick(2e9), "2G");
  EXPECT_EQ(svg::format_number(6065.4), "6,065");
  EXPECT_EQ(svg::format_number(1234567), "1,234,567");
  EXPECT_EQ(svg::format_number(227.3), "227");
  EXPECT_EQ(svg::format_number(12.84), "12.8");
  EXPECT_EQ(svg::format_number(4.412), "4.41");
  EXPECT_EQ(svg::format_number(0.01234), "0.0123");
}

std::vector<double> values(const std::vector<svg::Tick>& t) {
  std::vector<double> v;
  for (const svg::Tick& x : t) v.push_back(x.value);
  return v;
}

TEST(SvgChart, LinearTicksAreNiceSteps) {
  const svg::Domain d = svg::nice_domain(3, 97, false, true);
  EXPECT_EQ(d.lo, 0);
  EXPECT_EQ(d.hi, 100);
  EXPECT_EQ(values(svg::linear_ticks(d.lo, d.hi)), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const svg::Domain t = svg::nice_domain(195, 6065, false, true);
  EXPECT_EQ(t.lo, 0);
  EXPECT_EQ(t.hi, 8000);
  EXPECT_EQ(values(svg::linear_ticks(t.lo, t.hi)), (std::vector<double>{0, 2000, 4000, 6000, 8000}));
  const svg::Domain f = svg::nice_domain(0.31, 0.78, false, false);
  EXPECT_NEAR(f.lo, 0.3, 1e-12);
  EXPECT_NEAR(f.hi, 0.8, 1e-12);
  const std::vector<svg::Tick> ft = svg::linear_ticks(f.lo, f.hi);
  ASSERT_EQ(ft.size(), 6u);
  EXPECT_EQ(ft[1].label, "0.4");
  // One value: a range around it.
  const svg::Domain one = svg::nice_domain(5, 5, false, false);
  EXPECT_LT(one.lo, 5);
  EXPECT_GT(one.hi, 5);
}

TEST(SvgChart, LogTicksAndDomains) {
  const svg::Domain d = svg::nice_domain(150, 6000, true, false);
  EXPECT_DOUBLE_EQ(d.lo, 100);
  EXPECT_DOUBLE_EQ(d.hi, 10000);
  EXPECT_EQ(values(svg::log_ticks(d.lo, d.hi)), (std::vector<double>{100, 200, 500, 1000, 2000, 5000, 10000}));
  EXPECT_EQ(values(svg::log_ticks(10, 1e5)), (std::vector<double>{10, 100, 1000, 1e4, 1e5}));
  // A power of ten alone still gets a decade.
  const svg::Domain p = svg::nice_domain(100, 100, true, false);
  EXPECT_DOUBLE_EQ(p.lo, 100);
  EXPECT_DOUBLE_EQ(p.hi, 1000);
  // Fewer than four powers of ten: 2× and 5× between.
  EXPECT_EQ(values(svg::log_ticks(100, 1000)), (std::vector<double>{100, 200, 500, 1000}));
  // Many decades: every second one.
  EXPECT_EQ(values(svg::log_ticks(1, 1e12)), (std::vector<double>{1, 1e2, 1e4, 1e6, 1e8, 1e10, 1e12}));
  EXPECT_EQ(svg::log_ticks(1, 1e12)[3].label, "1M");
  expect_error([] { svg::nice_domain(0, 10, true, false); }, "log axis");
}

TEST(SvgChart, ScalesMapDomainOntoRange) {
  const svg::Scale lin{0, 100, 50, 250, false};
  EXPECT_DOUBLE_EQ(lin.map(0), 50);
  EXPECT_DOUBLE_EQ(lin.map(25), 100);
  EXPECT_DOUBLE_EQ(lin.map(100), 250);
  const svg::Scale log{1, 256, 0, 800, true};  // 8 doublings over 800 px
  EXPECT_NEAR(log.map(1), 0, 1e-9);
  EXPECT_NEAR(log.map(2), 100, 1e-9);
  EXPECT_NEAR(log.map(16), 400, 1e-9);
  EXPECT_NEAR(log.map(256), 800, 1e-9);
  const svg::Scale flipped{0, 10, 400, 40, false};  // y grows downwards
  EXPECT_DOUBLE_EQ(flipped.map(10), 40);
  EXPECT_DOUBLE_EQ(flipped.map(5), 220);
}

// ---- charts drawn and read back ---------------------------------------------------------------

svg::LineChart three_points() {
  svg::LineChart c;
  c.id = "t";
  c.title = "Decode";
  c.x = {"batch", true, true, 1.0, 100.0, {}};
  c.y = {"tokens/s", false, true, 0.0, 100.0, {}};
  c.series.push_back({"fp8", "#0072B2", {{1, 0.0, "a"}, {10, 50.0, "b"}, {100, 100.0, "c"}}});
  return c;
}

TEST(SvgChart, LinePointsLandOnTheirValues) {
  const std::string out = svg::render(three_points());
  EXPECT_EQ(xml_problem(out), "");
  const Rect area = plot_area(out);
  const std::vector<Element> pts = elements(out, "circle", "pt");
  ASSERT_EQ(pts.size(), 3u);
  // x on a log axis from 1 to 100: 10 is the middle; y linear from 0 to 100, upwards.
  const double expect[3][2] = {{area.x, area.y + area.h}, {area.x + area.w / 2, area.y + area.h / 2},
                               {area.x + area.w, area.y}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(pts[i].num("cx"), expect[i][0], 0.01) << i;
    EXPECT_NEAR(pts[i].num("cy"), expect[i][1], 0.01) << i;
    EXPECT_EQ(pts[i].get("data-series"), "fp8");
  }
  EXPECT_EQ(pts[1].get("data-x"), "10");
  EXPECT_EQ(pts[1].get("data-y"), "50");
  // The line goes through them in order.
  const std::vector<Element> lines = elements(out, "path", "line");
  ASSERT_EQ(lines.size(), 1u);
  const std::string d = lines[0].get("d");
  EXPECT_EQ(d.find("M" + std::to_string(area.x).substr(0, 5)), 0u) << d;
  EXPECT_EQ(std::count(d.begin(), d.end(), 'L'), 2);
  // Title, axis labels, tick labels and the legend are there.
  EXPECT_NE(out.find(">Decode</text>"), std::string::npos);
  EXPECT_NE(out.find(">batch</text>"), std::string::npos);
  EXPECT_NE(out.find(">tokens/s</text>"), std::string::npos);
  EXPECT_NE(group(out, "legend").find(">fp8</text>"), std::string::npos);
  EXPECT_EQ(values(svg::log_ticks(1, 100)), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(elements(group(out, "axis x"), "text", "tick").size(), 7u);
}

TEST(SvgChart, FixedTicksAreTheOnesGiven) {
  svg::LineChart c = three_points();
  c.x.ticks = {1, 8, 32, 100};
  const std::string out = svg::render(c);
  const std::vector<Element> ticks = elements(group(out, "axis x"), "text", "tick");
  ASSERT_EQ(ticks.size(), 4u);
  EXPECT_EQ(ticks[1].get("data-value"), "8");
  const Rect area = plot_area(out);
  EXPECT_NEAR(ticks[1].num("x"), area.x + area.w * std::log10(8.0) / 2, 0.01);
}

TEST(SvgChart, MissingValuesBreakTheLine) {
  svg::LineChart c = three_points();
  c.series[0].points[1].y.reset();
  const std::string out = svg::render(c);
  EXPECT_EQ(elements(out, "circle", "pt").size(), 2u);
  const std::string d = elements(out, "path", "line")[0].get("d");
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2) << d;
  EXPECT_EQ(std::count(d.begin(), d.end(), 'L'), 0) << d;
}

TEST(SvgChart, ReferenceLinesAreDashedWithoutPoints) {
  svg::LineChart c = three_points();
  c.series.push_back({"roof", "#0072B2", {{1, 10.0, ""}, {100, 90.0, ""}}, true, false});
  c.notes.push_back({"roofline at 4.29 TB/s", true});
  const std::string out = svg::render(c);
  EXPECT_EQ(elements(out, "circle", "pt").size(), 3u);
  const std::vector<Element> refs = elements(out, "path", "line ref");
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0].get("stroke-dasharray"), "6 4");
  EXPECT_NE(group(out, "legend").find("roofline at 4.29 TB/s"), std::string::npos);
  EXPECT_EQ(group(out, "legend").find(">roof<"), std::string::npos);  // in_legend = false
}

TEST(SvgChart, NamesWithXmlCharactersAreEscapedEverywhere) {
  svg::LineChart c = three_points();
  const std::string nasty = "fp8<b>&\"kv\"'";
  c.title = "T " + nasty;
  c.x.label = nasty;
  c.series[0].name = nasty;
  c.series[0].points[0].tip = nasty;
  const std::string out = svg::render(c);
  EXPECT_EQ(xml_problem(out), "");
  EXPECT_EQ(out.find("<b>"), std::string::npos);
  EXPECT_NE(out.find("data-series=\"fp8&lt;b&gt;&amp;&quot;kv&quot;&#39;\""), std::string::npos);

  svg::BarChart b;
  b.id = "b";
  b.title = nasty;
  b.groups = {nasty};
  b.series.push_back({nasty, "#000000", {{{1.0}, nasty, nasty}}});
  const std::string bars = svg::render(b);
  EXPECT_EQ(xml_problem(bars), "");
  EXPECT_EQ(bars.find("<b>"), std::string::npos);
}

TEST(SvgChart, BarsStandOnTheirValues) {
  svg::BarChart c;
  c.id = "bars";
  c.title = "Side by side";
  c.groups = {"1", "8"};
  c.y = {"tok/s", false, true, 0.0, 100.0, {}};
  c.series.push_back({"bf16", "#0072B2", {{{50.0}, "", ""}, {{100.0}, "", ""}}});
  c.series.push_back({"fp8", "#D55E00", {{{25.0}, "0.50\xC3\x97", ""}, {{std::nullopt}, "", ""}}});
  const std::string out = svg::render(c);
  EXPECT_EQ(xml_problem(out), "");
  const Rect area = plot_area(out);
  const std::vector<Element> bars = elements(out, "rect", "bar");
  ASSERT_EQ(bars.size(), 3u);  // the missing one is not drawn
  const double bottom = area.y + area.h;
  for (const Element& e : bars) {
    EXPECT_NEAR(e.num("y") + e.num("height"), bottom, 0.01);
    EXPECT_NEAR(e.num("height"), area.h * e.num("data-value") / 100.0, 0.01);
  }
  // Groups side by side, series side by side inside them.
  EXPECT_LT(bars[0].num("x"), bars[2].num("x"));  // bf16 group 1, fp8 group 1
  EXPECT_LT(bars[2].num("x"), bars[1].num("x"));  // fp8 group 1, bf16 group 8
  EXPECT_LT(bars[1].num("x"), area.x + area.w);
  EXPECT_GE(bars[0].num("x"), area.x);
  EXPECT_EQ(bars[2].get("data-group"), "1");
  EXPECT_EQ(bars[2].get("data-series"), "fp8");
  const std::vector<Element> notes = elements(out, "text", "note");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(out.find(">0.50\xC3\x97</text>"), std::string::npos);
}

TEST(SvgChart, PercentileLevelsOverlayLargestBehind) {
  svg::BarChart c;
  c.id = "ttft";
  c.title = "TTFT";
  c.groups = {"16"};
  c.levels = {"p50", "p90", "p99"};
  c.y = {"ms", false, true, 0.0, 40.0, {}};
  c.series.push_back({"fp8", "#0072B2", {{{10.0, 20.0, 40.0}, "", ""}}});
  const std::string out = svg::render(c);
  const std::vector<Element> bars = elements(out, "rect", "bar");
  ASSERT_EQ(bars.size(), 3u);
  EXPECT_EQ(bars[0].get("data-level"), "p99");  // drawn first, behind
  EXPECT_EQ(bars[2].get("data-level"), "p50");
  EXPECT_LT(std::stod(bars[0].get("fill-opacity")), std::stod(bars[2].get("fill-opacity")));
  EXPECT_NEAR(bars[0].num("height"), plot_area(out).h, 0.01);
  EXPECT_NE(group(out, "legend").find("shade: p90"), std::string::npos);
}

TEST(SvgChart, UndrawableChartsAreRefusedByName) {
  svg::BarChart c;
  c.id = "bad";
  c.groups = {"1", "2"};
  c.series.push_back({"fp8", "#000000", {{{1.0}, "", ""}}});
  expect_error([&] { svg::render(c); }, "chart bad: series 'fp8' has 1 bars for 2 groups");
  svg::LineChart l = three_points();
  l.x.min = 0.0;
  expect_error([&] { svg::render(l); }, "log axis 'batch'");
}

// ---- the roofline, percentiles, configuration names ---------------------------------------------

// A step reads the embedding rows of its tokens, not the resident table (Llama-3.1-8B: 1,002 MiB of
// BF16 table, 8 KiB a row), the whole table where lm_head is the table; older files (no
// "embedding") keep the whole table; an MoE model's experts routed to come on top.
TEST(BenchReport, DecodeWeightBytesCountTheEmbeddingRowsAStepReads) {
  const double table = 128256.0 * 4096 * 2, rows = 128256, w = 9.1e9;
  const EmbeddingTable untied{table, rows, false}, tied{table, rows, true};
  EXPECT_DOUBLE_EQ(fp8lm::decode_weight_bytes(1, w, std::nullopt, untied), w - table + 8192);
  EXPECT_DOUBLE_EQ(fp8lm::decode_weight_bytes(8, w, std::nullopt, untied), w - table + 8 * 8192);
  EXPECT_DOUBLE_EQ(fp8lm::decode_weight_bytes(1e6, w, std::nullopt, untied), w);  // every row, at most
  EXPECT_DOUBLE_EQ(fp8lm::decode_weight_bytes(8, w, std::nullopt, tied), w);
  EXPECT_DOUBLE_EQ(fp8lm::decode_weight_bytes(8, w, std::nullopt, std::nullopt), w);
  // 8 experts, top-2, 4 GB of them: at batch 1 a quarter of the experts and one row.
  const report::ConfigRun::Moe moe{8, 2, 4e9};
  EXPECT_DOUBLE_EQ(fp8lm::decode_weight_bytes(1, w, moe, untied), w - table + 8192 - 4e9 + 1e9);
}

TEST(BenchReport, RooflineIsWeightsPlusKvCacheAtTheBandwidth) {
  EXPECT_DOUBLE_EQ(report::decode_context_tokens(1024, 256), 1152);
  // Llama-3.1-8B in BF16 (16.06 GB) with a BF16 cache (128 KiB per token) at 4.29 TB/s.
  const double w = 16.06e9, kv = 131072, ctx = 1152, bw = 4.29e12;
  EXPECT_DOUBLE_EQ(report::decode_roofline_tok_s(1, w, kv, ctx, bw), bw / (w + ctx * kv));
  EXPECT_NEAR(report::decode_roofline_tok_s(1, w, kv, ctx, bw), 264.6, 0.1);
  EXPECT_NEAR(report::decode_roofline_tok_s(256, w, kv, ctx, bw), 256 * bw / (w + 256 * ctx * kv), 1e-6);
  // Without a KV cache it grows with the batch; with one it tends to bandwidth / (context × KV bytes).
  EXPECT_DOUBLE_EQ(report::decode_roofline_tok_s(8, w, 0, ctx, bw), 8 * bw / w);
  EXPECT_LT(report::decode_roofline_tok_s(1e9, w, kv, ctx, bw), bw / (ctx * kv));
  EXPECT_GT(report::decode_roofline_tok_s(1e9, w, kv, ctx, bw), 0.999 * bw / (ctx * kv));
}

TEST(BenchReport, PercentilesInterpolateAsNumpy) {
  EXPECT_DOUBLE_EQ(report::percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(report::percentile({1, 2, 3, 4}, 90), 3.7);
  EXPECT_DOUBLE_EQ(report::percentile({1, 2, 3, 4}, 99), 3.97);
  EXPECT_DOUBLE_EQ(report::percentile({7}, 99), 7);
}

TEST(BenchReport, ConfigurationsParseAndName) {
  const report::ConfigSpec a = report::parse_config("fp8:block+kv", "--configs");
  EXPECT_EQ(a.quantization, "fp8:block");
  EXPECT_EQ(a.kv_cache_dtype, "fp8");
  const report::ConfigSpec b = report::parse_config("bf16", "--configs");
  EXPECT_EQ(b.quantization, "");
  EXPECT_EQ(b.kv_cache_dtype, "");
  const report::ConfigSpec c = report::parse_config("fp8+kv=fp8_e5m2", "--configs");
  EXPECT_EQ(c.kv_cache_dtype, "fp8_e5m2");
  expect_error([] { report::parse_config("+kv", "--configs"); }, "--configs: '+kv' names no weights");
  expect_error([] { report::parse_config("fp8+cache", "--configs"); }, "'+cache'");
  expect_error([] { report::parse_config("fp8+kv=", "--configs"); }, "'+kv='");
  EXPECT_EQ(report::config_name("fp8", "fp8", "FP8 …"), "fp8+kv");
  EXPECT_EQ(report::config_name("fp8:block", "fp8_e4m3", "FP8 …"), "fp8:block+kv");
  EXPECT_EQ(report::config_name("", "", "BF16"), "bf16");
  EXPECT_EQ(report::config_name("", "", "bfloat16"), "bf16");  // what bench latency writes
  EXPECT_EQ(report::config_name("", "", "float16"), "fp16");
  EXPECT_EQ(report::config_name("", "auto", "BF16"), "bf16");
  EXPECT_EQ(report::config_name("", "fp8_e5m2", "BF16"), "bf16+kv=fp8_e5m2");
  EXPECT_EQ(report::config_name("", "", "FP8 fp8-e4m3 w:channel"), "fp8-checkpoint");
  // The names round-trip.
  for (const char* n : {"bf16", "fp8", "fp8+kv", "fp8:tensor+kv=fp8_e5m2"}) {
    const report::ConfigSpec s = report::parse_config(n, "--configs");
    EXPECT_EQ(report::config_name(s.quantization, s.kv_cache_dtype, s.quantization.empty() ? "BF16" : "FP8"), n);
  }
}

TEST(BenchReport, InputArgumentsTakeALabel) {
  const report::Input a = report::parse_input("fp8+kv=results/serve_c64.json");
  EXPECT_EQ(a.label, "fp8+kv");
  EXPECT_EQ(a.path, "results/serve_c64.json");
  EXPECT_EQ(report::parse_input("serve.json").label, "");
  const std::filesystem::path odd = std::filesystem::temp_directory_path() / "fp8lm_report_a=b.json";
  std::ofstream(odd) << "{}";
  EXPECT_EQ(report::parse_input(odd.string()).path, odd.string());  // an existing file is a path
  std::filesystem::remove(odd);
}

// ---- results read, merged and drawn -----------------------------------------------------------

Json sweep_json(std::vector<std::string> names, std::vector<int64_t> batches, std::optional<double> bandwidth) {
  Json runs = Json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    Json points = Json::array();
    for (int64_t b : batches)
      points.push_back({{"batch_size", b},
                        {"ttft_s", 0.01 * double(b)},
                        {"prefill_tok_s", 1000.0 * double(i + 1)},
                        {"tpot_median_s", 0.001 * (1 + 0.1 * double(b))},
                        {"decode_tok_s", double(b) / (0.001 * (1 + 0.1 * double(b))) * double(i + 1)}});
    runs.push_back({{"name", names[i]},
                    {"config", {{"weights", i == 0 ? "BF16" : "FP8"}, {"kv_cache_dtype", "bf16"}, {"backend", "cpu"}}},
                    {"weight_bytes", 1e8 / double(i + 1)},
                    {"kv_cache_bytes_per_token", 4096.0},
                    {"points", points}});
  }
  return {{"benchmark", "sweep"},
          {"schema", 1},
          {"config",
           {{"model", "m"}, {"device", "cpu"}, {"input_len", 64}, {"output_len", 32}, {"warmup", 1}, {"iters", 3},
            {"date", "2026-12-04T00:00:00Z"}, {"version", "0.1.0"}}},
          {"roofline",
           {{"bandwidth_bytes_per_s", bandwidth ? Json(*bandwidth) : Json(nullptr)}, {"bandwidth_source", "test"}}},
          {"runs", runs}};
}

const report::Chart* chart(const std::vector<report::Chart>& charts, const std::string& id) {
  for (const report::Chart& c : charts)
    if (c.id == id) return &c;
  return nullptr;
}

TEST(BenchReport, SweepChartsHoldEveryPointAndTheRoofline) {
  report::ReportData d;
  report::add_results(d, sweep_json({"bf16", "fp8"}, {1, 8, 64}, 20e9), "s.json");
  const std::vector<report::Chart> charts = report::render_charts(d);
  std::vector<std::string> ids;
  for (const report::Chart& c : charts) ids.push_back(c.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"decode-throughput", "prefill-throughput", "decode-vs-baseline",
                                           "prefill-vs-baseline"}));
  const report::Chart& decode = *chart(charts, "decode-throughput");
  EXPECT_EQ(xml_problem(decode.svg), "");
  EXPECT_EQ(elements(decode.svg, "circle", "pt").size(), 6u);
  EXPECT_EQ(elements(chart(charts, "prefill-throughput")->svg, "circle", "pt").size(), 6u);
  EXPECT_EQ(elements(chart(charts, "decode-vs-baseline")->svg, "rect", "bar").size(), 6u);

  // Each roofline's drawn points, read back through the axes' ticks, are the formula's values.
  const std::vector<Element> refs = elements(decode.svg, "path", "line ref");
  ASSERT_EQ(refs.size(), 2u);
  const AxisFit fx = fit_axis(decode.svg, "axis x", "x", true);
  // The y axis is logarithmic here (the roofline spans far more than 20×).
  const AxisFit fy = fit_axis(decode.svg, "axis y", "y", true);
  const double ctx = report::decode_context_tokens(64, 32);
  for (size_t r = 0; r < 2; ++r) {
    const double weights = 1e8 / double(r + 1);
    const std::string d_attr = refs[r].get("d");
    const std::regex pt(R"([ML](-?[0-9.]+) (-?[0-9.]+))");
    int n = 0;
    for (auto it = std::sregex_iterator(d_attr.begin(), d_attr.end(), pt); it != std::sregex_iterator(); ++it, ++n) {
      const double b = fx.value(std::stod((*it)[1])), y = fy.value(std::stod((*it)[2]));
      EXPECT_NEAR(y / report::decode_roofline_tok_s(b, weights, 4096, ctx, 20e9), 1.0, 2e-3) << r << " at " << b;
    }
    EXPECT_EQ(n, 49);
  }
  EXPECT_NE(decode.caption.find("20 GB/s"), std::string::npos) << decode.caption;
  // The ratio to bf16 is on fp8's bars: 2× by construction.
  EXPECT_NE(chart(charts, "decode-vs-baseline")->svg.find(">2.00\xC3\x97</text>"), std::string::npos);
}

TEST(BenchReport, NoBandwidthNoRoofline) {
  report::ReportData d;
  report::add_results(d, sweep_json({"fp8"}, {1, 2}, std::nullopt), "s.json");
  const std::vector<report::Chart> charts = report::render_charts(d);
  EXPECT_EQ(charts.size(), 2u);  // one configuration: nothing to compare
  EXPECT_EQ(elements(charts[0].svg, "path", "line ref").size(), 0u);
  EXPECT_NE(charts[0].caption.find("No roofline"), std::string::npos);
}

TEST(BenchReport, HtmlIsOnePageWithOneSvgPerChart) {
  report::ReportData d;
  report::add_results(d, sweep_json({"bf16", "fp8<&>"}, {1, 4}, 20e9), "s.json");
  const std::string html = report::render_html(d);
  const std::string body = html.substr(html.find("<html"));
  EXPECT_EQ(xml_problem(body), "");
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, report::render_charts(d).size());
  EXPECT_EQ(html.find("<script"), std::string::npos);
  size_t urls = 0;
  for (size_t p = html.find("http"); p != std::string::npos; p = html.find("http", p + 1)) {
    EXPECT_EQ(html.compare(p, 26, "http://www.w3.org/2000/svg"), 0) << html.substr(p, 40);
    ++urls;
  }
  EXPECT_EQ(urls, svgs);
  EXPECT_NE(html.find("fp8&lt;&amp;&gt;"), std::string::npos);
}

Json serve_json(const std::string& model, int64_t concurrency, double out_tok_s, bool per_request) {
  Json j = {{"benchmark", "serve"},
            {"config",
             {{"model", model}, {"max_concurrency", concurrency}, {"num_prompts", 8}, {"input_len", 128},
              {"output_len", 16}, {"request_rate", "inf"}}},
            {"results",
             {{"completed", 8}, {"failed", 0}, {"output_tok_s", out_tok_s}, {"requests_per_s", 1.0},
              {"ttft", {{"median_ms", 10.0}, {"p99_ms", 30.0}}}, {"tpot", {{"median_ms", 2.0}, {"p99_ms", 3.0}}}}}};
  if (per_request) {
    Json reqs = Json::array();
    for (int i = 1; i <= 10; ++i) reqs.push_back({{"success", true}, {"ttft_ms", 10.0 * i}, {"tpot_ms", 1.0 * i}});
    reqs.push_back({{"success", false}, {"ttft_ms", 1e6}, {"tpot_ms", nullptr}});  // failures do not count
    j["per_request"] = reqs;
  }
  return j;
}

TEST(BenchReport, ServeResultsGiveThroughputAndPercentileCharts) {
  report::ReportData d;
  report::add_results(d, serve_json("m", 1, 100, true), "a.json", "bf16");
  report::add_results(d, serve_json("m", 16, 800, true), "b.json", "bf16");
  report::add_results(d, serve_json("m", 1, 150, false), "c.json", "fp8");
  report::add_results(d, serve_json("m", 16, 1000, true), "d.json", "fp8");
  ASSERT_EQ(d.serve.size(), 4u);
  EXPECT_DOUBLE_EQ(*d.serve[0].ttft_ms.p50, 55);   // of 10 … 100 ms
  EXPECT_DOUBLE_EQ(*d.serve[0].ttft_ms.p90, 91);
  EXPECT_DOUBLE_EQ(*d.serve[0].ttft_ms.p99, 99.1);
  EXPECT_DOUBLE_EQ(*d.serve[2].ttft_ms.p50, 10);   // no per-request times: the summary's
  EXPECT_FALSE(d.serve[2].ttft_ms.p90);
  const std::vector<report::Chart> charts = report::render_charts(d);
  ASSERT_EQ(charts.size(), 3u);
  EXPECT_EQ(charts[0].id, "serve-throughput");
  EXPECT_NE(charts[0].svg.find(">1.50\xC3\x97</text>"), std::string::npos);
  EXPECT_NE(charts[0].svg.find(">1.25\xC3\x97</text>"), std::string::npos);
  EXPECT_EQ(elements(charts[1].svg, "rect", "bar").size(), 11u);  // 4 × 3 levels less c.json's p90
  EXPECT_NE(charts[1].caption.find("p50 and p99 only"), std::string::npos);
  EXPECT_EQ(xml_problem(charts[2].svg), "");
}

TEST(BenchReport, BadResultsAreRefusedByName) {
  auto add = [](const Json& j, const std::string& label = "") {
    report::ReportData d;
    report::add_results(d, j, "r.json", label);
  };
  expect_error([&] { add(Json::array()); }, "r.json: is not a JSON object");
  expect_error([&] { add(Json{{"x", 1}}); }, "r.json: has no \"benchmark\" field");
  expect_error([&] { add(Json{{"benchmark", "throughput"}}); }, "r.json: holds bench throughput results");
  Json s = sweep_json({"fp8"}, {1}, std::nullopt);
  s["schema"] = 2;
  expect_error([&] { add(s); }, "r.json: schema 2 is not one this fp8lm reads");
  s = sweep_json({"fp8"}, {1}, std::nullopt);
  s["runs"][0]["points"][0].erase("ttft_s");
  expect_error([&] { add(s); }, "r.json: runs[0].points[0].ttft_s is missing");
  s = sweep_json({"fp8"}, {1}, std::nullopt);
  s["runs"][0]["points"][0]["decode_tok_s"] = "fast";
  expect_error([&] { add(s); }, "runs[0].points[0].decode_tok_s is not a number");
  s = sweep_json({"fp8"}, {1}, std::nullopt);
  s["runs"][0]["points"][0]["prefill_tok_s"] = 0;
  expect_error([&] { add(s); }, "prefill_tok_s is 0, not above 0");
  s = sweep_json({"fp8"}, {1}, std::nullopt);
  s["runs"] = Json::array();
  expect_error([&] { add(s); }, "r.json: runs is empty");
  expect_error([&] { add(sweep_json({"fp8"}, {1}, std::nullopt), "x"); }, "'x=' names one configuration");

  // The same point twice, or other lengths, across files.
  report::ReportData d;
  report::add_results(d, sweep_json({"fp8"}, {1, 2}, std::nullopt), "a.json");
  expect_error([&] { report::add_results(d, sweep_json({"fp8"}, {2}, std::nullopt), "b.json"); },
               "b.json: configuration 'fp8' at batch size 2 is in a.json too");
  Json other = sweep_json({"bf16"}, {1}, std::nullopt);
  other["config"]["input_len"] = 128;
  expect_error([&] { report::add_results(d, other, "c.json"); }, "c.json: latency results of input 128, output 32");
  report::add_results(d, sweep_json({"fp8"}, {4}, std::nullopt), "e.json");  // more batch sizes: merged
  EXPECT_EQ(d.runs.size(), 1u);
  EXPECT_EQ(d.runs[0].points.size(), 3u);

  report::ReportData s2;
  report::add_results(s2, serve_json("m", 1, 1, false), "a.json");
  expect_error([&] { report::add_results(s2, serve_json("m", 1, 1, false), "b.json"); },
               "b.json: configuration 'm' at concurrency 1 is in a.json too (bench serve results name");
}

TEST(BenchReport, FilesThatCannotBeReadAreNamed) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fp8lm_test_bench_report";
  std::filesystem::create_directories(dir);
  const std::string bad = (dir / "bad.json").string(), good = (dir / "good.json").string();
  std::ofstream(bad) << "{\"benchmark\": \"sweep\", ";
  std::ofstream(good) << sweep_json({"bf16", "fp8"}, {1}, std::nullopt).dump();
  expect_error([&] { report::read_results({{"", bad}}); }, bad + ": is not valid JSON");
  expect_error([&] { report::read_results({{"", (dir / "none.json").string()}}); }, "none.json: cannot be read");
  expect_error([&] { report::read_results({}); }, "no results files given");
  expect_error([&] { report::read_results({{"", good}}, std::nullopt, "fp16"); },
               "--baseline: 'fp16' is not one of the configurations (bf16, fp8)");
  const report::ReportData d = report::read_results({{"", good}}, 1e12, "fp8");
  EXPECT_EQ(d.baseline, "fp8");
  EXPECT_EQ(*d.bandwidth, 1e12);
  EXPECT_EQ(d.sources, (std::vector<std::string>{"good.json"}));
  std::filesystem::remove_all(dir);
}

TEST(BenchReport, LatencyFilesOfEarlierVersionsAreRead) {
  // bench latency --json as written before kv_cache_bytes_per_token: the cache's bytes over its tokens.
  const Json j = {{"benchmark", "latency"},
                  {"config",
                   {{"model", "llama"}, {"batch_size", 8}, {"input_len", 1024}, {"output_len", 256},
                    {"quantization", "fp8"}, {"kv_cache_dtype_flag", "fp8"}, {"weights", "FP8 …"},
                    {"backend", "cuda:0 (NVIDIA H200)"}, {"warmup", 1}, {"iters", 1}}},
                  {"results", {{"ttft_s", 0.14}, {"prefill_tok_s", 57029.0}, {"tpot_median_s", 0.0059},
                               {"decode_tok_s", 1355.0}}},
                  {"memory", {{"weight_bytes", 9087238144.0}, {"kv_cache_bytes", 120394350592.0},
                              {"kv_cache_tokens", 1837072}}}};
  report::ReportData d;
  report::add_results(d, j, "bench_fp8_kv_b8.json");
  ASSERT_EQ(d.runs.size(), 1u);
  EXPECT_EQ(d.runs[0].name, "fp8+kv");
  EXPECT_DOUBLE_EQ(*d.runs[0].kv_bytes_per_token, 65536.0);
  EXPECT_TRUE(d.any_cuda);
}

}  // namespace
}  // namespace fp8lm::cli
