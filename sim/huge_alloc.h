// An allocator for the simulator's large, randomly accessed arrays (ports,
// event-queue chunks): blocks of 1 MiB or more are 2 MiB aligned and marked
// for transparent huge pages (a hint, for kernels in `madvise` mode), so
// that touching them costs fewer TLB misses. Smaller blocks come from
// operator new. Stateless; any two instances are equal.
//
// Thread safety: as malloc.
#ifndef PRISM_SIM_HUGE_ALLOC_H_
#define PRISM_SIM_HUGE_ALLOC_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace prism::sim {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Returns a block of at least `bytes`, 2 MiB aligned and marked for huge
// pages when `bytes` >= 1 MiB (free with FreeHuge).
inline void* AllocHuge(size_t bytes) {
  const size_t rounded = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  void* mem = std::aligned_alloc(kHugePageBytes, rounded);
  if (mem == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(mem, rounded, MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
  return mem;
}
inline void FreeHuge(void* mem) { std::free(mem); }

template <typename T>
struct HugeAllocator {
  using value_type = T;
  HugeAllocator() = default;
  template <typename U>
  HugeAllocator(const HugeAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes / 2) return static_cast<T*>(AllocHuge(bytes));
    return static_cast<T*>(
        ::operator new (bytes, std::align_val_t{alignof(T)}));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes / 2) {
      FreeHuge(p);
    } else {
      ::operator delete (p, std::align_val_t{alignof(T)});
    }
  }
  template <typename U>
  bool operator==(const HugeAllocator<U>&) const {
    return true;
  }
};

}  // namespace prism::sim

#endif  // PRISM_SIM_HUGE_ALLOC_H_
