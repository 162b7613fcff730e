// MappedFile: a read-only memory mapping of a whole file (RAII). Model readers view weights
// straight out of the mapping; nothing the user owns is ever written (PROT_READ, MAP_PRIVATE).
//
// Thread safety: immutable after Open; safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "format/model_file.h"

namespace weir::format {

class MappedFile : public Backing {
 public:
  static Result<std::shared_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the mapped pages wholly inside the range from this process (MADV_DONTNEED); they stay
  // in the page cache and a later read maps them again.
  void DoneReading(const void* p, uint64_t n) override;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Asks the kernel to drop the file's cached pages that no process maps (posix_fadvise
// POSIX_FADV_DONTNEED): a file read once through the page cache (a pack's metadata, parsed)
// then stops counting against a memory limit that counts the page cache. A hint: failures are
// ignored, and the file is not changed.
void DropCachedPages(const std::string& path);

// Reads a whole (small) file such as config.json or tokenizer.json; refuses files over
// max_bytes so a hostile path cannot make weir allocate without bound.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes = 256ull << 20);

}  // namespace weir::format
