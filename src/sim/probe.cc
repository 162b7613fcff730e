#include "sim/probe.h"

#include "base/memory_bandwidth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "base/aligned_buffer.h"

namespace weir::sim {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Removes the temporary file and closes its descriptor on every exit path.
struct TempFile {
  std::string path;
  int fd = -1;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

uint64_t XorShift(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

std::string CpuModel() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "unknown CPU";
  char line[512];
  std::string model = "unknown CPU";
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, "model name", 10) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon) {
        model = colon + 2;
        while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
      }
      break;
    }
  }
  std::fclose(f);
  return model;
}

Status WriteFile(TempFile* tf, uint64_t bytes, double* write_rate, const ProbeProgress& progress) {
  const size_t chunk = 4u << 20;
  AlignedBuffer buf(chunk, 4096);
  uint64_t seed = 0x243F6A8885A308D3ull;
  auto* words = buf.data<uint64_t>();
  for (size_t i = 0; i < chunk / 8; ++i) words[i] = XorShift(&seed);
  auto t0 = Clock::now();
  for (uint64_t done = 0; done < bytes;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, bytes - done));
    words[0] ^= done;  // every chunk differs
    ssize_t w = ::pwrite(tf->fd, buf.data(), n, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w != static_cast<ssize_t>(n)) {
      return Status::IoError(StrFormat("%s: write at offset %llu failed: %s", tf->path.c_str(),
                                       static_cast<unsigned long long>(done),
                                       w < 0 ? std::strerror(errno) : "short write"));
    }
    done += n;
    if (progress) progress("writing the test file", static_cast<double>(done) / bytes);
  }
  if (::fsync(tf->fd) != 0) {
    return Status::IoError(
        StrFormat("%s: fsync failed: %s", tf->path.c_str(), std::strerror(errno)));
  }
  *write_rate = static_cast<double>(bytes) / Seconds(t0, Clock::now());
  return Status::Ok();
}

}  // namespace

Result<StreamRates> MeasureStream(uint64_t array_bytes, int reps, ThreadPool* pool) {
  if (array_bytes < 64 * 1024 || reps < 1) {
    return Status::InvalidArgument(StrFormat("STREAM arrays of %llu bytes x %d reps are too small",
                                             static_cast<unsigned long long>(array_bytes), reps));
  }
  // One STREAM implementation for weir: the one `weir bench` takes its reading from.
  const MemoryBandwidth m = MeasureMemoryBandwidth(pool, static_cast<size_t>(array_bytes), reps);
  StreamRates r;
  r.read = m.read_gbs * 1e9;
  r.copy = m.copy_gbs * 1e9;
  r.triad = m.triad_gbs * 1e9;
  return r;
}

Result<ProbeResult> ProbeMachine(const ProbeOptions& o, ThreadPool* pool,
                                 const ProbeProgress& progress) {
  if (o.queue_depth < 1 || o.queue_depth > 256) {
    return Status::InvalidArgument(StrFormat("queue depth %d outside 1..256", o.queue_depth));
  }
  if (o.request_sizes.empty()) return Status::InvalidArgument("no request sizes to probe");
  for (size_t i = 0; i < o.request_sizes.size(); ++i) {
    uint64_t s = o.request_sizes[i];
    if (s < 4096 || s % 4096 != 0 || s > o.file_bytes || (i > 0 && s <= o.request_sizes[i - 1])) {
      return Status::InvalidArgument(StrFormat(
          "request size %llu must be a multiple of 4096, at most the file size %llu, and sizes "
          "must increase",
          static_cast<unsigned long long>(s), static_cast<unsigned long long>(o.file_bytes)));
    }
  }
  ProbeResult res;
  if (progress) progress("memory bandwidth (STREAM)", 0);
  WEIR_ASSIGN_OR_RETURN(res.stream, MeasureStream(o.stream_array_bytes, o.stream_reps, pool));

  // Storage.
  TempFile tf;
  std::string tmpl = o.dir + "/weir-probe-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  tf.fd = ::mkstemp(name.data());
  if (tf.fd < 0) {
    return Status::IoError(
        StrFormat("%s: cannot create a temporary file: %s", o.dir.c_str(), std::strerror(errno)));
  }
  tf.path = name.data();
  WEIR_RETURN_IF_ERROR(WriteFile(&tf, o.file_bytes, &res.file_write_bytes_per_s, progress));
  ::close(tf.fd);
  tf.fd = ::open(tf.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (tf.fd < 0) {
    return Status::Unsupported(
        StrFormat("%s: O_DIRECT open failed (%s); the file system may not "
                  "support direct I/O (tmpfs?): pick another --dir",
                  tf.path.c_str(), std::strerror(errno)));
  }
  for (size_t si = 0; si < o.request_sizes.size(); ++si) {
    const uint64_t size = o.request_sizes[si];
    const uint64_t blocks = o.file_bytes / size;
    std::atomic<uint64_t> bytes{0}, requests{0};
    std::atomic<double> latency_sum{0};
    std::atomic<bool> failed{false};
    std::atomic<int> err{0};
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o.seconds_per_size));
    std::vector<std::thread> readers;
    for (int q = 0; q < o.queue_depth; ++q) {
      readers.emplace_back([&, q] {
        AlignedBuffer buf(size, 4096);
        uint64_t seed = 0x9E3779B97F4A7C15ull * (q + 1) + size;
        double lat = 0;
        uint64_t n = 0;
        while (!failed.load(std::memory_order_relaxed) && Clock::now() < deadline) {
          uint64_t off = (XorShift(&seed) % blocks) * size;
          auto r0 = Clock::now();
          ssize_t got = ::pread(tf.fd, buf.data(), size, static_cast<off_t>(off));
          if (got < 0 && errno == EINTR) continue;
          if (got != static_cast<ssize_t>(size)) {
            err = got < 0 ? errno : EIO;
            failed = true;
            break;
          }
          lat += Seconds(r0, Clock::now());
          ++n;
          bytes += size;
        }
        requests += n;
        double cur = latency_sum.load();
        while (!latency_sum.compare_exchange_weak(cur, cur + lat)) {
        }
      });
    }
    for (auto& t : readers) t.join();
    if (failed) {
      return Status::IoError(StrFormat("%s: O_DIRECT read of %llu bytes failed: %s",
                                       tf.path.c_str(), static_cast<unsigned long long>(size),
                                       std::strerror(err.load())));
    }
    double secs = Seconds(t0, Clock::now());
    if (requests == 0 || secs <= 0) {
      return Status::IoError(
          StrFormat("no read of %llu bytes completed", static_cast<unsigned long long>(size)));
    }
    res.reads.push_back({static_cast<double>(size), static_cast<double>(bytes.load()) / secs});
    res.read_latency_us.push_back(1e6 * latency_sum.load() / static_cast<double>(requests.load()));
    if (progress) progress("O_DIRECT reads", static_cast<double>(si + 1) / o.request_sizes.size());
  }

  // Compute: y = W x over a 1024 x 512 f32 matrix that stays in cache.
  if (o.measure_compute) {
    const size_t rows = 1024, cols = 512;
    std::vector<float> w(rows * cols), x(cols), y(rows);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7919) % 17) * 0.01f;
    for (size_t j = 0; j < cols; ++j) x[j] = static_cast<float>(j % 13) * 0.1f;
    int reps = 0;
    auto t0 = Clock::now();
    double secs = 0;
    while (secs < 0.3) {
      for (int k = 0; k < 16; ++k, ++reps) {
        ParallelFor(
            pool, rows,
            [&](size_t r0, size_t r1, int) {
              for (size_t r = r0; r < r1; ++r) {
                const float* row = &w[r * cols];
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (size_t j = 0; j < cols; j += 8) {
                  for (int u = 0; u < 8; ++u) acc[u] += row[j + u] * x[j + u];
                }
                y[r] = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
              }
            },
            64);
      }
      secs = Seconds(t0, Clock::now());
    }
    volatile float sink = y[rows / 2];
    (void)sink;
    res.gflops = 2.0 * rows * cols * reps / secs / 1e9;
  }

  DeviceProfile& p = res.profile;
  p.name = o.name;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  unsigned threads = static_cast<unsigned>(pool ? pool->size() : 1);
  p.description = StrFormat("%s, %u threads; storage: the file system holding %s",
                            CpuModel().c_str(), threads, o.dir.c_str());
  p.source = StrFormat(
      "weir probe on %s: STREAM triad over 3 x %llu MiB arrays (best of %d; read "
      "%.1f, copy %.1f GB/s), O_DIRECT random reads of a %llu MiB file "
      "at queue depth %d for %.1f s per size (buffered write %.2f GB/s), f32 "
      "in-cache matvec for GFLOPS",
      date, static_cast<unsigned long long>(o.stream_array_bytes >> 20), o.stream_reps,
      res.stream.read / kGB, res.stream.copy / kGB,
      static_cast<unsigned long long>(o.file_bytes >> 20), o.queue_depth, o.seconds_per_size,
      res.file_write_bytes_per_s / kGB);
  p.memory_name = "DRAM";
  p.memory_capacity_bytes =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  p.memory_bandwidth = res.stream.triad;
  p.storage_name = StrFormat("file system at %s (O_DIRECT)", o.dir.c_str());
  p.storage_read.points = res.reads;
  p.flops_per_s = res.gflops * 1e9;
  p.concurrent_io = o.concurrent_io;
  WEIR_RETURN_IF_ERROR(ValidateDeviceProfile(p, "probe result"));
  return res;
}

}  // namespace weir::sim
