#include "transport/nccl/log.h"

#include <atomic>

namespace prism::nccl {
namespace {
std::atomic<PrismNcclLogger> g_logger{nullptr};
}  // namespace

void SetLogger(PrismNcclLogger logger) {
  if (logger != nullptr) g_logger.store(logger, std::memory_order_release);
}
PrismNcclLogger GetLogger() { return g_logger.load(std::memory_order_acquire); }

}  // namespace prism::nccl
