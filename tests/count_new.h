// Test-only: replaces the global operator new / delete of the binary that
// includes this header with versions that count every allocation
// (operator new[] goes through operator new), so a test can assert that a
// code path allocates nothing: compare NewCalls() before and after it.
// Include it from exactly one source file per test binary (it defines the
// replacements). malloc itself is not counted: Prism is C++ throughout.
#ifndef PRISM_TESTS_COUNT_NEW_H_
#define PRISM_TESTS_COUNT_NEW_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace prism::testing {
inline std::atomic<uint64_t> g_new_calls{0};
// Calls to the global operator new so far in this process.
inline uint64_t NewCalls() {
  return g_new_calls.load(std::memory_order_relaxed);
}
}  // namespace prism::testing

void* operator new(std::size_t n) {
  prism::testing::g_new_calls.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// (GCC sees operator new[]'s pointer reach these and free(); both are
// malloc underneath, as the replacement above allocates.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

#endif  // PRISM_TESTS_COUNT_NEW_H_
