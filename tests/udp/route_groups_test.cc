// RouteFailureGroups: the fate-sharing hint a UDP endpoint derives from its
// source routes (transport/runtime/route_groups.h).
#include "transport/runtime/route_groups.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prism/types.h"

namespace prism::runtime {
namespace {

std::vector<udp::Route> Routes(const std::vector<std::string>& text) {
  std::vector<udp::Route> out;
  for (const std::string& t : text) {
    absl::StatusOr<udp::Route> r = udp::ParseRoute(t);
    EXPECT_TRUE(r.ok()) << t << ": " << r.status();
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

TEST(RouteFailureGroups, PathsWithTheSameRouteOnOnePlaneShareAGroup) {
  // Path p: plane p % 2, route p % 4 (routes r and r + 2 are on one plane).
  const auto groups = RouteFailureGroups(
      Routes({"usid:fcbb:bbbb:a1:a2:a4:2::", "usid:fcbb:bbbb:b1:b2:b4:2::",
              "usid:fcbb:bbbb:a1:a3:a4:2::", "usid:fcbb:bbbb:b1:b3:b4:2::"}),
      16, 2);
  ASSERT_EQ(groups.size(), 16u);
  for (uint16_t p = 0; p < 16; ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(groups[p], (p % 2) * 4 + p % 4);  // plane x distinct + route
    EXPECT_EQ(groups[p], groups[p % 4]);        // same route, same group
  }
  EXPECT_NE(groups[0], groups[2]);  // same plane, another route
}

TEST(RouteFailureGroups, EqualRoutesWrittenDifferentlyAreOneGroup) {
  const auto groups = RouteFailureGroups(
      Routes({"srh:fc00::a1,fc00::b1", "srh:fc00:0::a1,fc00::b1",
              "srh:fc00::a2,fc00::b1"}),
      6, 1);
  ASSERT_EQ(groups.size(), 6u);
  EXPECT_EQ(groups[0], 0);
  EXPECT_EQ(groups[1], 0);  // the same segments
  EXPECT_EQ(groups[2], 1);
  EXPECT_EQ(groups[3], 0);
}

TEST(RouteFailureGroups, EntropyRoutesShareFateWithNothing) {
  const auto groups = RouteFailureGroups(
      Routes({"entropy", "srh:fc00::a1", "srh:fc00::a2"}), 6, 1);
  ASSERT_EQ(groups.size(), 6u);
  EXPECT_EQ(groups[0], kNoFailureGroup);
  EXPECT_EQ(groups[3], kNoFailureGroup);
  EXPECT_EQ(groups[1], 0);
  EXPECT_EQ(groups[2], 1);
  EXPECT_EQ(groups[4], 0);
  EXPECT_EQ(groups[5], 1);
}

TEST(RouteFailureGroups, NoHintWithoutTwoGroups) {
  EXPECT_TRUE(RouteFailureGroups({}, 8, 2).empty());
  EXPECT_TRUE(RouteFailureGroups(Routes({"entropy"}), 8, 2).empty());
  // One source route on one plane: a single group.
  EXPECT_TRUE(RouteFailureGroups(Routes({"srh:fc00::a1"}), 8, 1).empty());
  // Its paths on plane 1 only (path p: route p % 2): still one.
  EXPECT_TRUE(
      RouteFailureGroups(Routes({"entropy", "srh:fc00::a1"}), 8, 2).empty());
  // The same route from two planes: two groups (other switches).
  EXPECT_EQ(RouteFailureGroups(Routes({"srh:fc00::a1"}), 4, 2),
            (std::vector<uint16_t>{0, 1, 0, 1}));
  EXPECT_TRUE(RouteFailureGroups(Routes({"srh:fc00::a1"}), 0, 2).empty());
  EXPECT_TRUE(RouteFailureGroups(Routes({"srh:fc00::a1"}), 4, 0).empty());
}

TEST(RouteFailureGroups, IdsThatDoNotFitShareNothing) {
  // 256 planes x 256 distinct routes: plane x 256 + route, the last one
  // (255 x 256 + 255 = 65535) is kNoFailureGroup's value, so no group.
  std::vector<std::string> text;
  for (int r = 0; r < 256; ++r) {
    char buf[64];
    snprintf(buf, sizeof(buf), "srh:fc00::%x", r + 1);
    text.push_back(buf);
  }
  const auto groups = RouteFailureGroups(Routes(text), 65535, 256);
  ASSERT_EQ(groups.size(), 65535u);
  EXPECT_EQ(groups[254], 254 * 256 + 254);
  EXPECT_EQ(groups[255], kNoFailureGroup);
  EXPECT_EQ(groups[256], groups[0]);  // plane 0, route 0 again
  EXPECT_EQ(groups[257], 1 * 256 + 1);
}

}  // namespace
}  // namespace prism::runtime
