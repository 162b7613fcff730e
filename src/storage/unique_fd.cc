#include "storage/unique_fd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace weir::storage {

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<OpenedFile> OpenReadOnly(const std::string& path, bool direct) {
  int flags = O_RDONLY | O_CLOEXEC;
  if (direct) flags |= O_DIRECT;
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int e = errno;
    if (direct && e == EINVAL) {
      return Status::Unsupported(
          StrFormat("%s: the file system does not support O_DIRECT (open: %s); use the 'pread' "
                    "or 'io_uring' device",
                    path.c_str(), std::strerror(e)));
    }
    if (e == ENOENT) return Status::NotFound(StrFormat("%s: no such file", path.c_str()));
    return Status::IoError(StrFormat("%s: cannot open: %s", path.c_str(), std::strerror(e)));
  }
  OpenedFile out;
  out.fd = UniqueFd(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return Status::IoError(StrFormat("%s: cannot stat: %s", path.c_str(), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(StrFormat("%s: not a regular file", path.c_str()));
  }
  out.size = static_cast<uint64_t>(st.st_size);
  return out;
}

size_t QueryDirectIoAlignment(const std::string& path) {
#ifdef STATX_DIOALIGN
  struct statx stx;
  std::memset(&stx, 0, sizeof(stx));
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_DIOALIGN, &stx) != 0) return 0;
  if (!(stx.stx_mask & STATX_DIOALIGN)) return 0;
  return std::max<size_t>(stx.stx_dio_mem_align, stx.stx_dio_offset_align);
#else
  (void)path;
  return 0;
#endif
}

}  // namespace weir::storage
