// The machine probe (at toy sizes), result rendering and the SVG plot.
#include <dirent.h>
#include <gtest/gtest.h>

#include <string>

#include "sim/probe.h"
#include "sim/sim_report.h"
#include "sim/svg_plot.h"
#include "sim/synthetic_masks.h"
#include "testing/testing.h"

namespace weir::sim {
namespace {

int CountEntries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  }
  ::closedir(d);
  return n;
}

TEST(ProbeTest, MeasuresAndRemovesItsFile) {
  ThreadPool pool(2);
  ProbeOptions o;
  o.dir = testing::TempDir();
  o.file_bytes = 8 << 20;
  o.request_sizes = {4096, 65536, 1 << 20};
  o.seconds_per_size = 0.05;
  o.queue_depth = 2;
  o.stream_array_bytes = 4 << 20;
  o.stream_reps = 1;
  auto r = ProbeMachine(o, &pool, nullptr);
  if (!r.ok() && r.status().code() == Status::Code::kUnsupported) {
    GTEST_SKIP() << r.status().ToString();
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(CountEntries(o.dir), 0) << "the temporary file must be removed";
  EXPECT_GT(r->stream.triad, 0);
  EXPECT_GT(r->stream.copy, 0);
  ASSERT_EQ(r->reads.size(), 3u);
  for (const BandwidthPoint& p : r->reads) EXPECT_GT(p.bytes_per_s, 0);
  EXPECT_GT(r->gflops, 0);
  // The profile is valid and survives a JSON round trip.
  auto again = ParseDeviceProfile(DeviceProfileToJson(r->profile), "probe.json");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->name, "this-machine");
  EXPECT_EQ(again->storage_read.points.size(), 3u);
  EXPECT_NEAR(again->memory_bandwidth, r->stream.triad, 1e-6 * r->stream.triad);

  // Bad options are refused before any file is made.
  o.request_sizes = {5000};
  EXPECT_FALSE(ProbeMachine(o, &pool, nullptr).ok());
  o.request_sizes = {4096};
  o.dir = "/nonexistent-weir-dir";
  EXPECT_FALSE(ProbeMachine(o, &pool, nullptr).ok());
}

TEST(ReportTest, JsonAndMarkdownCarryTheResult) {
  ModelShape s = UniformShape("tiny", 64, 2, 4, 2, 16, 128, 100);
  auto layout = MakeMaskLayout(s, StreamSet::kMlp);
  DeviceProfile d;
  d.name = "dev";
  d.memory_bandwidth = 1e9;
  d.storage_read = BandwidthCurve::Flat(1e8);
  SimConfig c;
  c.memory_bytes = 1e6;
  auto src = MakeSyntheticSource(*layout, *ParseSyntheticSpec("uniform:0.5"), 10);
  auto r = Simulate(s, d, c, src->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  nlohmann::json j = SimResultToJson(*r);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_DOUBLE_EQ(j["tokens_per_second"].get<double>(), r->tokens_per_second);
  EXPECT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["hits"].get<uint64_t>() + j["misses"].get<uint64_t>(),
            r->layers[0].active + r->layers[1].active);
  EXPECT_DOUBLE_EQ(j["memory_plan"]["static_bytes"].get<double>(), r->plan.static_bytes);
  std::string md = SimResultMarkdown(*r, true);
  EXPECT_NE(md.find("| tok/s |"), std::string::npos);
  EXPECT_NE(md.find("| 1 |"), std::string::npos);  // layer rows
  EXPECT_EQ(FormatDecimalBytes(2.5e9), "2.500 GB");
  EXPECT_EQ(FormatDecimalBytes(1234), "1.2 kB");
}

TEST(SvgPlotTest, DrawsSeriesAndEscapesText) {
  PlotSpec p;
  p.title = "tok/s vs DRAM <a&b>";
  p.x_label = "DRAM (GB)";
  p.y_label = "tok/s";
  p.series.push_back({"lru", {1, 2, 3}, {0.1, 0.2, 0.4}});
  p.series.push_back({"belady", {1, 2, 3}, {0.2, 0.3, 0.5}});
  std::string svg = LinePlotSvg(p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;a&amp;b&gt;"), std::string::npos);
  size_t lines = 0;
  for (size_t pos = 0; (pos = svg.find("<polyline", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, 2u);
  PlotSpec empty;
  EXPECT_NE(LinePlotSvg(empty).find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace weir::sim
