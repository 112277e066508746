// The ArgParser facade over CLI11: values, short options, "did you mean", deprecated spellings (they
// still work, with a note), grouped help, and bad values refused with the valid choices (exit code 2).
#include <gtest/gtest.h>

#include "cli/args.hpp"
#include "core/errors.hpp"

using cnnergy::InvalidArgument;
using cnnergy::cli::ArgParser;

namespace {

void declare(ArgParser& p) {
  p.option("epochs", "epochs", "1");
  p.option("format", "stdout format", "table", {"table", "json", "csv"});
  p.group("Output");
  p.option("out", "main output file");
  p.short_alias("out", 'o');
  p.alias("out", "output-file");
  p.option("json", "JSON to this file ('-' = stdout)");
  p.implicit_value("json", "-", "use --format json");
  p.group("Measurement");
  p.option("windows", "measurement windows", "3");
  p.short_alias("windows", 'r');
  p.deprecated_alias("reps", "windows");
  p.flag("resume", "continue");
}

std::string message_of(ArgParser& p, const std::vector<std::string>& args) {
  try {
    p.parse(args);
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ArgParser, ValuesDefaultsShortAndEqualsForms) {
  ArgParser p("demo", "a demo");
  declare(p);
  ASSERT_TRUE(p.parse({"--epochs=4", "-o", "x.json", "-r", "5", "--resume", "--format", "csv"}));
  EXPECT_EQ(p.get_int("epochs", 1, 10), 4);
  EXPECT_EQ(p.get("out"), "x.json");
  EXPECT_EQ(p.get_int("windows", 1, 100), 5);
  EXPECT_TRUE(p.get_flag("resume"));
  EXPECT_EQ(p.get("format"), "csv");
  EXPECT_FALSE(p.given("json"));
  EXPECT_FALSE(p.has("json"));
  ArgParser q("demo", "a demo");
  declare(q);
  ASSERT_TRUE(q.parse({"--output-file", "y", "--epochs", "-3"}));  // a negative number is a value
  EXPECT_EQ(q.get("out"), "y");
  EXPECT_EQ(q.get("epochs"), "-3");
  EXPECT_TRUE(q.has("windows"));
  EXPECT_FALSE(q.given("windows"));
  EXPECT_EQ(q.get("windows"), "3");
}

TEST(ArgParser, UnknownFlagSuggestsTheNearestName) {
  ArgParser p("demo", "a demo");
  declare(p);
  const std::string m = message_of(p, {"--epoch", "3"});
  EXPECT_NE(m.find("unknown option --epoch"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean --epochs?"), std::string::npos) << m;
  ArgParser q("demo", "a demo");
  declare(q);
  const std::string typo = message_of(q, {"--fromat=json"});
  EXPECT_NE(typo.find("did you mean --format?"), std::string::npos) << typo;
  ArgParser r("demo", "a demo");
  declare(r);
  const std::string far = message_of(r, {"--zzzzzzzzzz"});
  EXPECT_NE(far.find("unknown option --zzzzzzzzzz"), std::string::npos) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;  // nothing close: no guess
}

TEST(ArgParser, DeprecatedSpellingStillWorksWithANote) {
  ArgParser p("demo", "a demo");
  declare(p);
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(p.parse({"--reps", "7", "--json"}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(p.get_int("windows", 1, 100), 7);
  EXPECT_EQ(p.get("reps"), "7");  // old name reads the new option
  EXPECT_EQ(p.get("json"), "-");  // bare --json: the implicit value
  EXPECT_NE(err.find("--reps is deprecated"), std::string::npos) << err;
  EXPECT_NE(err.find("use --windows"), std::string::npos) << err;
  EXPECT_NE(err.find("--json without a value is deprecated"), std::string::npos) << err;
  ASSERT_EQ(p.warnings().size(), 2u);
  ArgParser q("demo", "a demo");
  declare(q);
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(q.parse({"--reps", "7", "--windows", "2", "--json", "f.json"}));
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(q.get("windows"), "2");  // the new spelling wins
  EXPECT_EQ(q.get("json"), "f.json");
  EXPECT_EQ(q.warnings().size(), 1u);
}

TEST(ArgParser, BadValuesExitTwoWithTheChoices) {
  ArgParser p("demo", "a demo");
  declare(p);
  const std::string m = message_of(p, {"--format", "xml"});
  EXPECT_NE(m.find("xml"), std::string::npos) << m;
  EXPECT_NE(m.find("table, json, csv"), std::string::npos) << m;
  ArgParser q("demo", "a demo");
  declare(q);
  ASSERT_TRUE(q.parse({"--epochs", "ten"}));
  try {
    q.get_int("epochs", 1, 10);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("--epochs must be an integer"), std::string::npos);
  }
  ArgParser r("demo", "a demo");
  declare(r);
  EXPECT_NE(message_of(r, {"--epochs"}).find("epochs"), std::string::npos);  // a value is missing
  ArgParser s("demo", "a demo");
  declare(s);
  EXPECT_NE(message_of(s, {"stray"}).find("unexpected argument 'stray'"), std::string::npos);
}

TEST(ArgParser, HelpIsGroupedAndListsShortAliasesChoicesAndDeprecatedSpellings) {
  ArgParser p("demo", "a demo");
  declare(p);
  p.allow_passthrough("the command");
  const std::string h = p.help();
  const auto out = h.find("Output:"), meas = h.find("Measurement:"), dep = h.find("Deprecated spellings");
  ASSERT_NE(out, std::string::npos) << h;
  ASSERT_NE(meas, std::string::npos) << h;
  ASSERT_NE(dep, std::string::npos) << h;
  EXPECT_LT(out, meas);
  EXPECT_LT(meas, dep);
  EXPECT_NE(h.find("-o,--out"), std::string::npos) << h;
  EXPECT_NE(h.find("-r,--windows"), std::string::npos) << h;
  EXPECT_NE(h.find("{table,json,csv}"), std::string::npos) << h;
  EXPECT_NE(h.find("--reps"), std::string::npos) << h;
  EXPECT_NE(h.find("[-- CMD ARGS...]"), std::string::npos) << h;
}

TEST(ArgParser, PassthroughPositionalsAndHelp) {
  ArgParser p("demo", "a demo");
  p.positional("DB", "database");
  p.option("x", "x");
  p.allow_passthrough("cmd");
  ASSERT_TRUE(p.parse({"a.db", "--x", "1", "--", "prog", "--help", "--x"}));
  EXPECT_EQ(p.get("DB"), "a.db");
  EXPECT_EQ(p.passthrough(), (std::vector<std::string>{"prog", "--help", "--x"}));
  ArgParser q("demo", "a demo");
  q.positional("DB", "database");
  EXPECT_NE(message_of(q, {}).find("needs DB"), std::string::npos);
  ArgParser r("demo", "a demo");
  r.positional("DB", "database");
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(r.parse({"--help"}));
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("DB"), std::string::npos);
  ArgParser s("demo", "a demo");
  EXPECT_NE(message_of(s, {"--", "x"}).find("takes no command"), std::string::npos);
}
