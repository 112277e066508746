// The small JSON value used by the journal and --json outputs: round trips and strict parsing.
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "core/json.hpp"

using cnnergy::DataError;
using cnnergy::Json;

TEST(Json, RoundTripsObjectsArraysAndNumbers) {
  const std::uint64_t seed = cnnergy::default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  cnnergy::Rng rng(seed);
  Json j = Json::object();
  const double x = rng.uniform(-1e6f, 1e6f);
  const auto big = static_cast<std::uint64_t>(rng.next_u32()) * 1000u;
  j["x"] = x;
  j["big"] = big;
  j["name"] = "GPU-\"quoted\"\n\ttab \\ é";
  j["flag"] = true;
  j["none"] = Json();
  Json arr = Json::array();
  for (int i = 0; i < 5; ++i) arr.push_back(i * 3);
  j["list"] = arr;
  for (int indent : {-1, 2}) {
    const Json back = Json::parse(j.dump(indent));
    EXPECT_DOUBLE_EQ(back.at("x").number(), x);
    EXPECT_EQ(back.at("big").number(), static_cast<double>(big));
    EXPECT_EQ(back.at("name").str(), "GPU-\"quoted\"\n\ttab \\ é");
    EXPECT_TRUE(back.at("flag").boolean());
    EXPECT_TRUE(back.at("none").is_null());
    ASSERT_EQ(back.at("list").items().size(), 5u);
    EXPECT_EQ(back.at("list").items()[4].number(), 12);
    EXPECT_EQ(back.members().front().first, "x");  // insertion order kept
  }
  EXPECT_EQ(Json::parse(R"("\u00e9\u0041")").str(), "éA");
}

TEST(Json, RejectsMalformedText) {
  for (const char* bad : {"", "{", "[1,]", R"({"a":})", "nul", R"("abc)", "{} x", R"({"a" 1})",
                          "01x", "-", R"({"a":[1,2}})", "\"tab\there\""}) {
    EXPECT_THROW(Json::parse(bad), DataError) << "accepted: " << bad;
  }
  std::string deep(200, '[');
  EXPECT_THROW(Json::parse(deep), DataError);
}

TEST(Json, TypedAccessNamesTheField) {
  const Json j = Json::parse(R"({"pid": "oops"})");
  try {
    (void)j.at("pid").number("journal field 'pid'");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("journal field 'pid'"), std::string::npos);
  }
  EXPECT_THROW(j.at("missing"), DataError);
  EXPECT_EQ(j.find("missing"), nullptr);
}
