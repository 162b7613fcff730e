#include "storage/file_device.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "storage/io_plan.h"

namespace weir::storage {

Result<size_t> ResolveDirectAlignment(const std::string& path, size_t requested) {
  size_t a = requested;
  if (a == 0) {
    a = QueryDirectIoAlignment(path);
    if (a < 512) a = 4096;
  }
  if (a < 512 || a > (size_t{1} << 20) || (a & (a - 1)) != 0) {
    return Status::InvalidArgument(
        StrFormat("%s: O_DIRECT alignment %zu must be a power of two between 512 and 1048576",
                  path.c_str(), a));
  }
  return a;
}

Result<std::unique_ptr<FileDevice>> FileDevice::Open(const std::string& path,
                                                     const Options& options) {
  std::unique_ptr<FileDevice> dev(new FileDevice());
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
  dev->name_ = (options.direct ? "direct:" : "pread:") + path;
  dev->bounce_bytes_ = options.bounce_bytes;
  dev->allow_unaligned_ = options.allow_unaligned;
  return dev;
}

size_t FileDevice::required_alignment() const {
  return direct_ && !allow_unaligned_ ? alignment_ : 1;
}

Status FileDevice::ReadAt(uint64_t offset, size_t length, void* dst) {
  ReadRequest r{offset, length, dst, Status::Ok()};
  return Read(std::span<ReadRequest>(&r, 1));
}

Status FileDevice::Read(std::span<ReadRequest> requests) {
  IoPlan plan(direct_ ? alignment_ : 1, bounce_bytes_);
  for (size_t i = 0; i < requests.size(); ++i) {
    ReadRequest& r = requests[i];
    r.status = CheckRead(r.offset, r.length, r.dst);
    if (r.status.ok()) r.status = plan.Add(i, r.offset, r.length, r.dst);
  }
  return RunPlan(plan, requests);
}

Status FileDevice::RunPlan(IoPlan& plan, std::span<ReadRequest> requests) {
  for (IoOp& op : plan.ops()) {
    ReadRequest& r = requests[op.request];
    if (!r.status.ok()) continue;  // an earlier op of this request failed
    for (;;) {
      ssize_t n = ::pread(fd_.get(), op.buf + op.done, op.length - op.done,
                          static_cast<off_t>(op.file_offset + op.done));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        r.status = Status::IoError(StrFormat("%s: pread of %zu bytes at offset %" PRIu64 ": %s",
                                             name_.c_str(), op.length - op.done,
                                             op.file_offset + op.done, std::strerror(errno)));
        break;
      }
      Result<bool> complete = plan.Progress(op, static_cast<size_t>(n), name_);
      if (!complete.ok()) {
        r.status = complete.status();
        break;
      }
      if (*complete) {
        IoPlan::CopyOut(op);
        break;
      }
    }
  }
  return FirstError(requests);
}

}  // namespace weir::storage
