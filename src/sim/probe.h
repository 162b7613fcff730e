// Measures this machine for a device profile (`weir probe`):
//   memory   STREAM-style copy / scale / add / triad over three arrays much larger than the
//            caches, in parallel over the thread pool; the profile takes the best triad rate
//            (bytes counted as STREAM does: 3 arrays moved per triad element)
//   storage  O_DIRECT reads of a temporary file (created in `dir`, removed afterwards) at
//            several request sizes, at random request-aligned offsets, with `queue_depth`
//            threads issuing pread back to back; throughput = bytes / wall time per size
//   compute  an f32 matrix-vector product on an in-cache matrix over the pool, as a stand-in
//            for the engine's kernels (GFLOPS = 2 * rows * cols * reps / time)
// Library code: progress goes to a callback, nothing is printed.
//
// Thread safety: one probe at a time (it owns the temp file and uses the pool).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "sim/device_profile.h"

namespace weir::sim {

struct ProbeOptions {
  std::string dir = "/tmp";          // where the temporary file goes (not tmpfs: O_DIRECT)
  uint64_t file_bytes = 1ull << 30;  // size of the temporary file
  std::vector<uint64_t> request_sizes = {4096, 16384, 65536, 262144, 1048576, 4194304};
  double seconds_per_size = 1.0;               // read time budget per request size
  int queue_depth = 4;                         // concurrent readers
  uint64_t stream_array_bytes = 128ull << 20;  // per STREAM array (three arrays)
  int stream_reps = 5;
  bool measure_compute = true;
  bool concurrent_io = true;  // written into the profile
  std::string name = "this-machine";
};

// base/memory_bandwidth.h's STREAM reading (read, copy, triad), in bytes/s: best of the
// repetitions; the profile's memory bandwidth is the triad.
struct StreamRates {
  double read = 0, copy = 0, triad = 0;
};

struct ProbeResult {
  DeviceProfile profile;
  StreamRates stream;
  double file_write_bytes_per_s = 0;
  std::vector<BandwidthPoint> reads;    // the O_DIRECT curve (also in profile.storage_read)
  std::vector<double> read_latency_us;  // mean per request, per size
  double gflops = 0;
};

// progress(stage description, fraction 0..1), may be empty.
using ProbeProgress = std::function<void(const std::string&, double)>;

Result<StreamRates> MeasureStream(uint64_t array_bytes, int reps, ThreadPool* pool);
Result<ProbeResult> ProbeMachine(const ProbeOptions& options, ThreadPool* pool,
                                 const ProbeProgress& progress);

}  // namespace weir::sim
