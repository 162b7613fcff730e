// UniqueFd: owns a file descriptor and closes it once (RAII), and OpenReadOnly, which opens a
// regular file O_RDONLY (optionally O_DIRECT) with messages that name the path.
//
// Thread safety: UniqueFd is a value with one owner; the fd it holds may be used by many
// threads for pread/io_uring (positional I/O shares no file offset).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "base/status.h"

namespace weir::storage {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

struct OpenedFile {
  UniqueFd fd;
  uint64_t size = 0;
};

// Opens `path` read-only. With `direct`, adds O_DIRECT and returns Unsupported when the file
// system refuses it (tmpfs, some overlay set-ups). Refuses anything but a regular file.
Result<OpenedFile> OpenReadOnly(const std::string& path, bool direct);

// The direct-I/O alignment the kernel reports for the file (statx STATX_DIOALIGN: the larger of
// the memory and offset alignments), or 0 when it does not say.
size_t QueryDirectIoAlignment(const std::string& path);

}  // namespace weir::storage
