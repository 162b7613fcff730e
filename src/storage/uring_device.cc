#include "storage/uring_device.h"

#include <liburing.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <deque>

#include "storage/file_device.h"
#include "storage/io_plan.h"

namespace weir::storage {

namespace {
// How often one operation may come back with -EAGAIN/-EINTR before the read is failed.
constexpr int kMaxRetries = 1000;
}  // namespace

struct UringDevice::Ring {
  io_uring ring;
};

Result<std::unique_ptr<UringDevice>> UringDevice::Open(const std::string& path,
                                                       const Options& options) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return Status::InvalidArgument(StrFormat("%s: io_uring queue depth %u must be in 1..4096",
                                             path.c_str(), options.queue_depth));
  }
  if (options.max_rings < 1 || options.max_rings > 64) {
    return Status::InvalidArgument(
        StrFormat("%s: io_uring max_rings %u must be in 1..64", path.c_str(), options.max_rings));
  }
  std::unique_ptr<UringDevice> dev(new UringDevice());
  dev->queue_depth_ = options.queue_depth;
  dev->max_rings_ = options.max_rings;
  dev->direct_ = options.direct;
  if (options.direct) {
    WEIR_ASSIGN_OR_RETURN(dev->alignment_, ResolveDirectAlignment(path, options.alignment));
    if (options.bounce_bytes == 0) {
      return Status::InvalidArgument(StrFormat("%s: bounce_bytes must be > 0", path.c_str()));
    }
  }
  WEIR_ASSIGN_OR_RETURN(OpenedFile file, OpenReadOnly(path, options.direct));
  dev->fd_ = std::move(file.fd);
  dev->size_ = file.size;
  dev->name_ = (options.direct ? "io_uring+direct:" : "io_uring:") + path;
  dev->bounce_bytes_ = options.bounce_bytes;
  if (options.piece_bytes == 0) {
    return Status::InvalidArgument(StrFormat("%s: piece_bytes must be > 0", path.c_str()));
  }
  dev->piece_bytes_ = options.piece_bytes;
  dev->allow_unaligned_ = options.allow_unaligned;
  dev->completion_fault_ = options.completion_fault;
  // Create the first ring now so that a kernel without io_uring is reported at open time.
  WEIR_ASSIGN_OR_RETURN(Ring * ring, dev->AcquireRing());
  dev->ReleaseRing(ring, false);
  return dev;
}

UringDevice::~UringDevice() {
  for (auto& r : rings_) io_uring_queue_exit(&r->ring);
}

size_t UringDevice::required_alignment() const {
  return direct_ && !allow_unaligned_ ? alignment_ : 1;
}

Result<UringDevice::Ring*> UringDevice::AcquireRing() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!free_rings_.empty()) {
      Ring* r = free_rings_.back();
      free_rings_.pop_back();
      return r;
    }
    if (rings_.size() < max_rings_) {
      auto r = std::make_unique<Ring>();
      int rc = io_uring_queue_init(queue_depth_, &r->ring, 0);
      if (rc < 0) {
        if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES) {
          return Status::Unsupported(StrFormat("%s: io_uring is not available here: %s",
                                               name_.c_str(), std::strerror(-rc)));
        }
        return Status::IoError(StrFormat("%s: io_uring_queue_init(%u): %s", name_.c_str(),
                                         queue_depth_, std::strerror(-rc)));
      }
      rings_.push_back(std::move(r));
      return rings_.back().get();
    }
    ring_free_.wait(lock);
  }
}

void UringDevice::ReleaseRing(Ring* ring, bool broken) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken) {
    // A ring that failed may still hold kernel requests into the caller's memory or unsubmitted
    // entries: it is dropped from the pool and deliberately leaked (never exited or reused), so
    // a fresh ring can take its place. This only happens if the kernel misbehaves.
    for (auto& r : rings_) {
      if (r.get() == ring) (void)r.release();
    }
    rings_.erase(std::remove(rings_.begin(), rings_.end(), nullptr), rings_.end());
  } else {
    free_rings_.push_back(ring);
  }
  ring_free_.notify_one();
}

Status UringDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  ReadRequest r{offset, length, dst, Status::Ok()};
  return Read(std::span<ReadRequest>(&r, 1));
}

Status UringDevice::Read(std::span<ReadRequest> requests) {
  IoPlan plan(direct_ ? alignment_ : 1, bounce_bytes_, piece_bytes_);
  for (size_t i = 0; i < requests.size(); ++i) {
    ReadRequest& r = requests[i];
    r.status = CheckRead(r.offset, r.length, r.dst);
    if (r.status.ok()) r.status = plan.Add(i, r.offset, r.length, r.dst);
  }
  if (plan.ops().empty()) return FirstError(requests);
  WEIR_ASSIGN_OR_RETURN(Ring * ring, AcquireRing());
  bool broken = false;
  Status st = RunPlan(ring, plan, requests, &broken);
  ReleaseRing(ring, broken);
  return st;
}

Status UringDevice::RunPlan(Ring* ring_state, IoPlan& plan, std::span<ReadRequest> requests,
                            bool* broken) {
  io_uring* ring = &ring_state->ring;
  std::vector<IoOp>& ops = plan.ops();
  std::vector<int> retries(ops.size(), 0);
  std::deque<size_t> pending;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (requests[ops[i].request].status.ok()) pending.push_back(i);
  }
  size_t prepared = 0;   // in the submission queue, not yet accepted by the kernel
  size_t in_flight = 0;  // accepted by the kernel, completion not yet reaped
  Status fatal;          // the ring itself failed; stop submitting, drain, report
  int busy_spins = 0;    // consecutive refused submits with nothing in flight

  auto fail_request = [&](size_t request, Status st) {
    if (requests[request].status.ok()) requests[request].status = std::move(st);
  };

  while ((fatal.ok() && (!pending.empty() || prepared > 0)) || in_flight > 0) {
    // Fill the queue up to the depth.
    while (fatal.ok() && !pending.empty() && prepared + in_flight < queue_depth_) {
      const size_t idx = pending.front();
      IoOp& op = ops[idx];
      if (!requests[op.request].status.ok()) {  // a sibling op of this request failed
        pending.pop_front();
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) break;
      pending.pop_front();
      io_uring_prep_read(sqe, fd_.get(), op.buf + op.done,
                         static_cast<unsigned>(op.length - op.done), op.file_offset + op.done);
      io_uring_sqe_set_data64(sqe, idx);
      ++prepared;
    }
    if (fatal.ok() && prepared > 0) {
      int s = io_uring_submit(ring);
      if (s >= 0) {
        prepared -= static_cast<size_t>(std::min<int>(s, static_cast<int>(prepared)));
        in_flight += static_cast<size_t>(s);
        busy_spins = 0;
      } else if ((s == -EINTR || s == -EAGAIN || s == -EBUSY) &&
                 (in_flight > 0 || ++busy_spins <= kMaxRetries)) {
        if (in_flight == 0) sched_yield();  // nothing to reap: try again
      } else {
        fatal =
            Status::IoError(StrFormat("%s: io_uring_submit: %s", name_.c_str(), std::strerror(-s)));
        *broken = true;  // unsubmitted entries stay in the ring: never reuse it
      }
    }
    if (in_flight == 0) continue;
    io_uring_cqe* cqe = nullptr;
    int w = io_uring_wait_cqe(ring, &cqe);
    if (w == -EINTR || w == -EAGAIN) continue;
    if (w < 0) {
      // Cannot reap: the kernel may still write into the callers' buffers. Report and make
      // sure the ring is never touched again.
      fatal =
          Status::IoError(StrFormat("%s: io_uring_wait_cqe: %s", name_.c_str(), std::strerror(-w)));
      *broken = true;
      break;
    }
    unsigned head;
    unsigned reaped = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      ++reaped;
      const size_t idx = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      if (completion_fault_) {
        const int injected = completion_fault_(completions_.fetch_add(1), res);
        if (injected < 0 || injected <= res) res = injected;  // never more bytes than arrived
      }
      IoOp& op = ops[idx];
      if (res == -EAGAIN || res == -EINTR) {
        if (++retries[idx] > kMaxRetries) {
          fail_request(op.request,
                       Status::IoError(StrFormat("%s: read at offset %" PRIu64 " kept failing: %s",
                                                 name_.c_str(), op.file_offset + op.done,
                                                 std::strerror(-res))));
        } else {
          pending.push_back(idx);
        }
      } else if (res < 0) {
        fail_request(op.request,
                     Status::IoError(StrFormat("%s: read of %zu bytes at offset %" PRIu64 ": %s",
                                               name_.c_str(), op.length - op.done,
                                               op.file_offset + op.done, std::strerror(-res))));
      } else {
        Result<bool> complete = plan.Progress(op, static_cast<size_t>(res), name_);
        if (!complete.ok()) {
          fail_request(op.request, complete.status());
        } else if (*complete) {
          IoPlan::CopyOut(op);
        } else {
          pending.push_back(idx);  // short read: read the rest
        }
      }
    }
    io_uring_cq_advance(ring, reaped);
    in_flight -= reaped;
  }
  if (!fatal.ok()) {
    for (ReadRequest& r : requests) {
      if (r.status.ok()) r.status = fatal;
    }
  }
  return FirstError(requests);
}

}  // namespace weir::storage
