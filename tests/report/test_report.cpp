// Terminal tables, number formatting, the progress bar, CSV/JSON exports (parsed back) and the HTML
// report's structure and escaping.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/errors.hpp"
#include "report/export.hpp"
#include "report/html_report.hpp"
#include "report/progress.hpp"
#include "report/stability_view.hpp"
#include "report/report_fixture.hpp"
#include "report/svg.hpp"
#include "report/table.hpp"
#include "core/json.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::report;
using namespace cnnergy::tune;
using cnnergy::report::testing::kEvil;
using cnnergy::tune::testing::TempDir;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// RFC 4180 parser (quoted fields, doubled quotes, CRLF rows) to read our CSV back.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false, in_quotes = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        field += c;
      }
    } else if (c == '"' && field.empty() && !quoted) {
      in_quotes = quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
      quoted = false;
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      rows.back().push_back(field);
      field.clear();
      quoted = false;
      rows.emplace_back();
      ++i;
    } else {
      field += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace

TEST(Report, TextTableAlignsUtf8Columns) {
  TextTable t;
  t.add_column("name", TextTable::Align::kLeft);
  t.add_column("value");
  t.add_row({"µs-timer", "1"});
  t.add_row({"x", "12345"});
  EXPECT_THROW(t.add_row({"only one"}), InvalidArgument);
  const std::string out = t.render();
  std::istringstream in(out);
  std::string line;
  std::vector<std::size_t> widths;
  while (std::getline(in, line)) widths.push_back(display_width(line));
  ASSERT_EQ(widths.size(), 4u);
  EXPECT_EQ(widths[0], widths[1]);  // header as wide as the rule
  EXPECT_EQ(widths[2], widths[3]);  // right-aligned last column: equal line widths
  EXPECT_EQ(display_width("µs"), 2u);
}

TEST(Report, QuantitiesCarryUnits) {
  EXPECT_EQ(format_quantity(1234.5, "J"), "1.234 kJ");
  EXPECT_EQ(format_quantity(0.0123, "J"), "12.30 mJ");
  EXPECT_EQ(format_quantity(250, "ms"), "250.0 ms");
  EXPECT_EQ(format_quantity(2500, "ms"), "2.500 s");
  EXPECT_EQ(format_quantity(700, "W"), "700.0 W");
  EXPECT_EQ(format_percent(-25.66), "-25.7 %");
  EXPECT_EQ(format_percent(4.5), "+4.5 %");
  EXPECT_EQ(format_percent(std::nullopt), "-");
  EXPECT_EQ(format_quantity(NAN, "W"), "-");
}

TEST(Report, ProgressBarShowsTheRunningTrialElapsedAndEta) {
  ProgressBar bar(10, nullptr, false);
  EXPECT_FALSE(bar.enabled());
  EXPECT_EQ(bar.mode(), ProgressBar::Mode::kOff);
  const std::string line = bar.render(4, "power_limit_w=300", std::chrono::seconds(40));
  EXPECT_NE(line.find("[############..................]"), std::string::npos) << line;
  EXPECT_NE(line.find("4/10"), std::string::npos);
  EXPECT_NE(line.find("elapsed 40s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 1m00s"), std::string::npos) << line;  // 10 s per trial, 6 left
  EXPECT_NE(line.find("now: power_limit_w=300"), std::string::npos) << line;  // the trial running now
  // 4 trials took 40 s; the running one has run 4 s of its 10: 6 left, minus those 4 s.
  const std::string running = bar.render(4, "power_limit_w=350", std::chrono::seconds(44), std::chrono::seconds(4));
  EXPECT_NE(running.find("ETA 56s"), std::string::npos) << running;
  EXPECT_NE(running.find("(4s)"), std::string::npos) << running;
  EXPECT_NE(bar.render(10, "", std::chrono::seconds(3725)).find("done in 1h02m"), std::string::npos);
  EXPECT_NE(bar.render(0, "power_limit_w=200", std::chrono::seconds(1)).find("ETA ?"), std::string::npos);
  EXPECT_NE(bar.render(0, "power_limit_w=200", std::chrono::seconds(1)).find("now: power_limit_w=200"), std::string::npos);
}

TEST(Report, ProgressIsOnePlainLinePerTrialWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar lines(3, f, false);  // a file is not a terminal: plain lines, no escape codes
    EXPECT_EQ(lines.mode(), ProgressBar::Mode::kLines);
    lines.start("a");
    lines.update(1, "a: ok");
    lines.start("b");
    lines.update(2, "b: failed (exit 3)");
  }
  std::rewind(f);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_NE(text.find("[1/3] a: ok  elapsed"), std::string::npos) << text;
  EXPECT_NE(text.find("[2/3] b: failed (exit 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA"), std::string::npos) << text;

  std::FILE* g = std::tmpfile();
  ASSERT_NE(g, nullptr);
  {
    ProgressBar forced(3, g, true);  // a bar drawn in place
    forced.start("c");
    forced.update(2, "c: ok");
  }
  EXPECT_GT(std::ftell(g), 0);
  std::fclose(g);
}

TEST(Report, CsvFieldsAreQuotedAndFormulasDefused) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("=SUM(A1)"), "'=SUM(A1)");
  EXPECT_EQ(csv_field("-25.7"), "-25.7");  // numbers stay numbers
  EXPECT_EQ(csv_field("-x"), "'-x");
}

TEST(Report, ExportsReadBackExactly) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  ResultStore store(dir.file("r.db"));
  report::testing::fill_store(store, rng);

  export_csv(store, dir.file("r.csv"));
  const auto rows = parse_csv(read_file(dir.file("r.csv")));
  std::size_t trials = 0;
  for (const auto& s : store.sweeps()) trials += store.trials(s.id).size();
  ASSERT_EQ(rows.size(), trials + 1);
  for (const auto& r : rows) ASSERT_EQ(r.size(), rows[0].size());
  const auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  ASSERT_LT(col("error_message"), rows[0].size());
  bool found_error = false, found_eds = false;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i][col("status")] == "failed") {
      EXPECT_EQ(rows[i][col("error_message")], "external command exited with code 3: " + kEvil + ",\"quoted\"\nsecond line");
      found_error = true;
    }
    if (rows[i][col("is_reference")] == "1" && rows[i][col("sweep_id")] == "1") {
      EXPECT_NEAR(std::stod(rows[i][col("eds_k2")]), 1.0, 1e-12);
      found_eds = true;
    }
  }
  EXPECT_TRUE(found_error);
  EXPECT_TRUE(found_eds);
  // Every metric's 95 % t-interval is exported beside its median.
  ASSERT_LT(col("time_per_iteration_ms_ci95_high"), rows[0].size());
  std::size_t intervals = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const std::string lo = rows[i][col("time_per_iteration_ms_ci95_low")], hi = rows[i][col("time_per_iteration_ms_ci95_high")];
    if (lo.empty()) continue;
    ++intervals;
    EXPECT_LE(std::stod(lo), std::stod(hi));
  }
  EXPECT_GT(intervals, 0u);

  export_json(store, dir.file("r.json"));
  const Json doc = Json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(doc["format"].as_string(), "cnnergy-results");
  const auto& sweeps = doc["sweeps"].as_array();
  ASSERT_EQ(sweeps.size(), 3u);
  EXPECT_EQ(sweeps[0]["command_line"].as_string(), store.sweeps()[0].command_line);
  EXPECT_EQ(sweeps[0]["environment"]["extra"]["note"].as_string(), kEvil);
  const auto& t0 = sweeps[0]["trials"].as_array()[0];
  const auto rec = store.read_trial(store.trials(1)[0].id);
  EXPECT_EQ(t0["repetitions"].as_array().size(), rec.measurement.repetitions.size());
  EXPECT_EQ(t0["repetitions"].as_array()[1]["energy_mj"].as_array()[0].as_number(), rec.measurement.repetitions[1].energy_mj[0]);
  EXPECT_EQ(t0["layers"].as_array().size(), 9u);
  EXPECT_FALSE(sweeps[0]["optima"].as_array().empty());
  for (const auto& o : sweeps[0]["optima"].as_array()) {  // each optimum says whether it is told apart
    const std::string v = o["verdict"].as_string();
    EXPECT_TRUE(v == "distinct" || v == "not_distinguishable_from_default" || v == "not_distinguishable_from_runner_up" ||
                v == "no_interval") << v;
    EXPECT_EQ(o["ci95_low"].is_null(), v == "no_interval");
  }
  EXPECT_FALSE(sweeps[0]["pareto_front"].as_array().empty());
  EXPECT_THROW(export_csv(store, dir.file("no/such/dir/x.csv")), DataError);
}

TEST(Report, NiceTicksCoverTheRange) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  for (int i = 0; i < 200; ++i) {
    const double lo = rng.uniform(-1000.f, 1000.f) * std::pow(10.0, rng.uniform(-4.f, 4.f));
    const double hi = lo + std::fabs(lo) * rng.uniform(0.001f, 3.f) + 1e-9;
    const auto t = nice_ticks(lo, hi);
    ASSERT_GE(t.size(), 2u) << lo << " " << hi;
    ASSERT_LE(t.size(), 13u);
    EXPECT_GE(t.front(), lo - (t[1] - t[0]) * 1e-6);
    EXPECT_LE(t.back(), hi + (t[1] - t[0]) * 1e-6);
    EXPECT_LE(t.front() - lo, t[1] - t[0]);
  }
  EXPECT_EQ(format_tick(2.5, 0.5), "2.5");
  EXPECT_EQ(format_tick(300, 100), "300");
  EXPECT_EQ(format_tick(0.25, 0.25), "0.25");
}

TEST(Report, HtmlIsSelfContainedAndEscapesEverything) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  ResultStore store(dir.file("r.db"));
  report::testing::fill_store(store, rng);
  const std::string html = render_html_report(store);
  EXPECT_EQ(count(html, "<script"), 1u);  // ours only
  EXPECT_EQ(html.find(kEvil), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  for (const char* external : {"http://", "https://", "src=\"", "href=\"http", "@import", "url(http", "url(//"}) {
    // the only URL is the SVG namespace, which is a name, not a fetch
    std::string h = html;
    for (std::size_t p; (p = h.find("http://www.w3.org/2000/svg")) != std::string::npos;) h.erase(p, 26);
    EXPECT_EQ(h.find(external), std::string::npos) << external;
  }
  // sweep 1 (power caps): normalised chart, 8 metric charts (no accuracy? it has accuracy), phases, layers
  EXPECT_NE(html.find("id=\"s1-norm\""), std::string::npos);
  EXPECT_NE(html.find("id=\"s1-phase-energy\""), std::string::npos);
  EXPECT_NE(html.find("id=\"s1-layer-time\""), std::string::npos);
  EXPECT_NE(html.find("id=\"s1-knob-power_limit_w-0\""), std::string::npos);
  // sweep 2: a chart per metric per varying knob (batch, precision, power limit)
  for (const char* k : {"batch", "precision", "power_limit_w"}) EXPECT_NE(html.find(std::string("id=\"s2-knob-") + k + "-0\""), std::string::npos) << k;
  EXPECT_NE(html.find("EDS(k=1.5) = default"), std::string::npos);
  EXPECT_NE(html.find("Pareto front"), std::string::npos);
  // every <svg> closes, every <table> closes
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>"));
  EXPECT_EQ(count(html, "<table"), count(html, "</table>"));

  HtmlReportOptions only2;
  only2.sweep_id = 2;
  EXPECT_EQ(render_html_report(store, only2).find("id=\"s1-norm\""), std::string::npos);
  only2.sweep_id = 99;
  EXPECT_THROW(render_html_report(store, only2), DataError);
  ResultStore empty(dir.file("empty.db"));
  EXPECT_THROW(render_html_report(empty), DataError);
}

TEST(Report, TerminalTablesShowOptimaAgainstTheDefault) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  ResultStore store(dir.file("r.db"));
  const auto id = report::testing::fill_store(store, rng);
  const SweepData d = load_sweep(store, id);
  std::ostringstream os;
  print_optimum_table(os, d);
  const std::string t = os.str();
  for (const char* row : {"default (reference)", "min energy per sample", "min EDP", "min EDS(k=2)", "min EDS(k=1.5)", "max GFLOPS/W",
                          "Pareto front"})
    EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
  // the energy optimum saves energy and costs time against the default 700 W
  std::smatch m;
  ASSERT_TRUE(std::regex_search(t, m, std::regex("min energy per sample.*?(-[0-9.]+) %.*?(\\+[0-9.]+) %")));
  EXPECT_LT(std::stod(m[1]), -5);
  EXPECT_GT(std::stod(m[2]), 0);
  std::ostringstream trials;
  print_trials_table(trials, load_sweep(store, 2));
  EXPECT_NE(trials.str().find("does_not_fit"), std::string::npos);
  EXPECT_NE(trials.str().find("second line"), std::string::npos);  // one line per row
  EXPECT_EQ(trials.str().find("code 3: <script>alert('x')</script>,\"quoted\"\n"), std::string::npos);
}

// Reruns of one sweep (`sweep --new` stores the same key again): the report says whether every run
// named the same optimum, and when two runs named different distinct optima.
TEST(Report, RerunsOfOneSweepAreComparedPerObjective) {
  TempDir dir;
  ResultStore store(dir.file("runs.db"));
  KnobSpace space;
  space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "300,500", {}));
  const auto trials = space.trials(space.default_reference({}));
  auto run = [&](double e300, double e500) {
    const auto id = store.add_sweep(SweepRecord{0, "sw-rerun", "", "cnnergy sweep", "x", host_environment(), ""});
    for (const auto& t : trials) {
      TrialRecord rec{t, TrialStatus::kOk, "", {}, "2026-12-01T10:00:00Z", "2026-12-01T10:01:00Z"};
      const double e = t.find(Knob::kPowerLimit)->number == 300 ? e300 : e500;
      for (double f : {0.99, 1.0, 1.01}) rec.measurement.repetitions.push_back({1000, 10, {e * f * 1e3}, {}, {}, "", {}, {}});
      store.write_trial(id, rec);
    }
  };
  run(80, 100);
  run(81, 100);
  std::ostringstream same;
  print_rerun_agreement(same, store, {parse_objective("energy")});
  EXPECT_NE(same.str().find("reruns of sweep sw-rerun (2 runs)"), std::string::npos) << same.str();
  EXPECT_NE(same.str().find("min energy per iteration: the same optimum in 2 of 2 runs"), std::string::npos) << same.str();
  run(100, 80);  // a third run names the other setting, distinctly
  std::ostringstream differ;
  print_rerun_agreement(differ, store, {parse_objective("energy")});
  EXPECT_NE(differ.str().find("runs disagree"), std::string::npos) << differ.str();
  std::ostringstream none;  // one run of a key: nothing to compare
  ResultStore single(dir.file("one.db"));
  single.add_sweep(SweepRecord{0, "sw-once", "", "x", "x", host_environment(), ""});
  print_rerun_agreement(none, single, {parse_objective("energy")});
  EXPECT_TRUE(none.str().empty()) << none.str();
}
