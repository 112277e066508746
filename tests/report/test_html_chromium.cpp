// The HTML report rendered by headless Chromium: the screenshot must exist and show real content,
// the browser console must stay silent (no JavaScript error, no console message), and the DOM the
// browser built must hold every chart, our tooltip element (proof the script ran) and no element
// injected from the data. A deliberately broken page checks that the console check can fail.
// Skipped only when Chromium is not installed. The screenshot and the HTML are kept under
// $CNNERGY_BUILD_DIR/test-artifacts/ for people to look at.
#include <gtest/gtest.h>
#include <png.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "report/html_report.hpp"
#include "report/report_fixture.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::report;
using cnnergy::tune::testing::TempDir;

namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    const std::string cmd = std::string("command -v ") + name + " 2>/dev/null";
    std::FILE* p = popen(cmd.c_str(), "r");
    if (!p) continue;
    char buf[512] = {0};
    const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
    pclose(p);
    if (got) {
      std::string path = buf;
      while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
      if (!path.empty()) return path;
    }
  }
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct BrowserRun {
  int exit_code = -1;
  std::string log;  // stderr, where --enable-logging=stderr sends console messages
};

// One headless run; `mode` is "--screenshot=PATH" or "--dump-dom" (stdout to `dom_out`).
BrowserRun run_chromium(const std::string& browser, const TempDir& dir, const std::string& html, const std::string& mode,
                        const std::string& tag, const std::string& dom_out = "") {
  const std::string log = dir.file(tag + ".log");
  const std::string cmd = "timeout 120 " + browser +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
                          " --disable-component-update --disable-sync --user-data-dir=" + dir.file("profile-" + tag) +
                          " --enable-logging=stderr --v=0 --window-size=1280,2000 " + mode + " file://" + html + " > " +
                          (dom_out.empty() ? std::string("/dev/null") : dom_out) + " 2> " + log;
  BrowserRun r;
  r.exit_code = std::system(cmd.c_str());
  r.log = read_file(log);
  return r;
}

// Console lines Chromium logged for the page ("...:INFO:CONSOLE:12] "Uncaught ..."", source: ...).
std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < log.size()) {
    std::size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos) out.push_back(line);
    start = end + 1;
  }
  return out;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace

TEST(ReportBrowser, RendersInHeadlessChromiumWithoutConsoleErrors) {
  const std::string browser = find_chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));

  // The check must be able to fail: a page with a script error and a console message.
  const std::string broken = dir.file("broken.html");
  std::ofstream(broken) << "<!DOCTYPE html><html><body><p>x</p><script>console.error('boom'); notDefined();</script></body></html>";
  const auto neg = run_chromium(browser, dir, broken, "--screenshot=" + dir.file("broken.png"), "broken");
  ASSERT_GE(console_lines(neg.log).size(), 2u) << "Chromium did not report the broken page's console errors:\n" << neg.log;

  tune::ResultStore store(dir.file("r.db"));
  report::testing::fill_store(store, rng);
  const std::string html = dir.file("report.html");
  write_html_report(store, html);
  const std::string source = read_file(html);

  const std::string png = dir.file("report.png");
  const auto shot = run_chromium(browser, dir, html, "--screenshot=" + png, "shot");
  EXPECT_EQ(shot.exit_code, 0) << shot.log;
  const auto errors = console_lines(shot.log);
  EXPECT_TRUE(errors.empty()) << "console output while rendering the report:\n" << errors.front();

  // The screenshot: a 1280x2000 PNG with real content (charts are colourful; a blank page is not).
  ASSERT_TRUE(std::filesystem::exists(png)) << shot.log;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&image, png.c_str())) << image.message;
  image.format = PNG_FORMAT_RGB;
  std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
  ASSERT_TRUE(png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) << image.message;
  EXPECT_EQ(image.width, 1280u);
  EXPECT_EQ(image.height, 2000u);
  std::size_t non_white = 0;
  std::set<int> colours;
  for (std::size_t i = 0; i + 2 < pixels.size(); i += 3) {
    if (pixels[i] < 245 || pixels[i + 1] < 245 || pixels[i + 2] < 245) ++non_white;
    colours.insert((pixels[i] >> 4) << 8 | (pixels[i + 1] >> 4) << 4 | (pixels[i + 2] >> 4));
  }
  const double ink = static_cast<double>(non_white) / (static_cast<double>(pixels.size()) / 3);
  EXPECT_GT(ink, 0.03) << "the screenshot is nearly blank";
  EXPECT_GT(colours.size(), 40u) << "the screenshot has almost no colours: no charts drawn?";

  // The DOM as the browser built it.
  const std::string dom_file = dir.file("dom.html");
  const auto dump = run_chromium(browser, dir, html, "--dump-dom", "dom", dom_file);
  const std::string dom = read_file(dom_file);
  EXPECT_TRUE(console_lines(dump.log).empty()) << dump.log;
  ASSERT_FALSE(dom.empty()) << dump.log;
  EXPECT_EQ(count(dom, "<svg"), count(source, "<svg"));
  EXPECT_GE(count(dom, "<svg"), 20u);
  EXPECT_NE(dom.find("id=\"tip\""), std::string::npos) << "the tooltip script did not run";
  EXPECT_EQ(count(dom, "<script"), 1u) << "an element was injected from the data";
  EXPECT_EQ(dom.find("<img"), std::string::npos);
  EXPECT_NE(dom.find("&lt;script&gt;alert('x')&lt;/script&gt;"), std::string::npos);  // shown as text

  if (const char* build = std::getenv("CNNERGY_BUILD_DIR"); build && *build) {
    const auto out = std::filesystem::path(build) / "test-artifacts";
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    std::filesystem::copy_file(png, out / "report_screenshot.png", std::filesystem::copy_options::overwrite_existing, ec);
    std::filesystem::copy_file(html, out / "report.html", std::filesystem::copy_options::overwrite_existing, ec);
  }
}
