// weir probe: measure this machine (STREAM memory bandwidth, O_DIRECT reads at several request
// sizes, matvec GFLOPS) and write a device profile for `weir sim` and `weir plan`.
#include "sim/probe.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/thread_pool.h"
#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "sim/tool_inputs.h"

namespace weir::tools {

int ProbeMain(int argc, char** argv) {
  CLI::App app(
      "Measure this machine's memory bandwidth, O_DIRECT read speed by request size and "
      "compute rate, and write a device profile.",
      "probe");
  std::string out, dir = "/tmp", size_text = "1GiB", sizes_text = "4K,16K,64K,256K,1M,4M";
  std::string stream_text = "256MiB", name = "this-machine";
  double seconds = 1.0;
  int queue_depth = 4, threads = 0;
  bool json = false, no_compute = false, serial_io = false;
  app.add_option("-o,--output", out,
                 "profile to write (default profiles/this-machine.json, or "
                 "profiles/NAME.json)");
  app.add_option("--name", name, "profile name (default this-machine)");
  app.add_option("--dir", dir,
                 "directory for the temporary test file; must allow O_DIRECT "
                 "(default /tmp)");
  app.add_option("--size", size_text, "test file size (default 1GiB); removed afterwards");
  app.add_option("--request-sizes", sizes_text,
                 "read sizes, comma separated, multiples of 4K "
                 "(default 4K,16K,64K,256K,1M,4M)");
  app.add_option("--seconds", seconds, "read time per request size (default 1)")
      ->check(CLI::Range(0.01, 60.0));
  app.add_option("--queue-depth", queue_depth, "concurrent readers (default 4)")
      ->check(CLI::Range(1, 256));
  app.add_option("--stream-size", stream_text, "bytes per STREAM array (default 256MiB)");
  app.add_option("-t,--threads", threads, "threads for STREAM and compute (default all cores)")
      ->check(CLI::Range(0, 1024));
  app.add_flag("--no-compute", no_compute, "skip the GFLOPS measurement");
  app.add_flag("--serial-io", serial_io,
               "mark the profile as not overlapping storage reads with "
               "compute (concurrent_io false)");
  app.add_flag("--json", json, "print the measurements as JSON (the profile is still written)");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  sim::ProbeOptions o;
  o.name = name;
  o.dir = dir;
  auto size = ParseBytes(size_text);
  if (!size.ok()) return Fail("probe", size.status().WithContext("--size"));
  o.file_bytes = *size;
  auto stream = ParseBytes(stream_text);
  if (!stream.ok()) return Fail("probe", stream.status().WithContext("--stream-size"));
  o.stream_array_bytes = *stream;
  o.request_sizes.clear();
  std::stringstream ss(sizes_text);
  for (std::string s; std::getline(ss, s, ',');) {
    auto b = ParseBytes(s);
    if (!b.ok()) return Fail("probe", b.status().WithContext("--request-sizes"));
    o.request_sizes.push_back(*b);
  }
  o.seconds_per_size = seconds;
  o.queue_depth = queue_depth;
  o.measure_compute = !no_compute;
  o.concurrent_io = !serial_io;
  if (out.empty()) out = DefaultProfilePath(name);

  int n_threads =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(n_threads);
  ProgressBar bar("probe", 100, !json && ::isatty(2));
  auto res = sim::ProbeMachine(o, &pool, [&](const std::string& stage, double frac) {
    bar.Update(static_cast<uint64_t>(frac * 100), stage);
  });
  bar.Finish();
  if (!res.ok()) return Fail("probe", res.status());
  std::string text = sim::DeviceProfileToJson(res->profile);
  {
    std::ofstream f(out);
    f << text;
    if (!f)
      return Fail("probe", Status::IoError(StrFormat("%s: cannot write the profile", out.c_str())));
  }
  if (json) {
    nlohmann::json reads = nlohmann::json::array();
    for (size_t i = 0; i < res->reads.size(); ++i) {
      reads.push_back({{"request_bytes", res->reads[i].request_bytes},
                       {"bytes_per_s", res->reads[i].bytes_per_s},
                       {"mean_latency_us", res->read_latency_us[i]}});
    }
    PrintJson({{"profile_path", out},
               {"stream_bytes_per_s",
                {{"read", res->stream.read},
                 {"copy", res->stream.copy},
                 {"triad", res->stream.triad}}},
               {"write_bytes_per_s", res->file_write_bytes_per_s},
               {"reads", reads},
               {"gflops", res->gflops},
               {"profile", nlohmann::json::parse(text)}});
    return kExitOk;
  }
  std::printf("STREAM (GB/s): read %.2f | copy %.2f | triad %.2f\n", res->stream.read / 1e9,
              res->stream.copy / 1e9, res->stream.triad / 1e9);
  std::printf("test file write: %.2f GB/s\n\n| request | GB/s | mean latency |\n|---|---|---|\n",
              res->file_write_bytes_per_s / 1e9);
  for (size_t i = 0; i < res->reads.size(); ++i) {
    std::printf("| %s | %.3f | %.0f us |\n",
                FormatBytes(static_cast<uint64_t>(res->reads[i].request_bytes)).c_str(),
                res->reads[i].bytes_per_s / 1e9, res->read_latency_us[i]);
  }
  if (o.measure_compute) std::printf("\ncompute: %.1f GFLOPS (f32 matvec in cache)\n", res->gflops);
  std::printf("\nwrote %s\n", out.c_str());
  return kExitOk;
}

}  // namespace weir::tools
