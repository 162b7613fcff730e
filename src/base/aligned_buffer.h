// AlignedBuffer: an owning, move-only, zero-initialised byte buffer with a chosen alignment
// (64 for SIMD rows, 4096 for O_DIRECT). Typed access via data<T>().
//
// Thread safety: none; one owner.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace weir {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, size_t alignment = 64) { Reset(bytes, alignment); }
  ~AlignedBuffer() { std::free(ptr_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Reallocates (contents are zeroed). Returns false if the allocation failed.
  bool Reset(size_t bytes, size_t alignment = 64) {
    std::free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (bytes == 0) return true;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    ptr_ = std::aligned_alloc(alignment, rounded);
    if (!ptr_) return false;
    std::memset(ptr_, 0, rounded);
    size_ = bytes;
    return true;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  template <typename T = std::byte>
  T* data() { return static_cast<T*>(ptr_); }
  template <typename T = std::byte>
  const T* data() const { return static_cast<const T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace weir
