// Logging through NCCL's logger function.
//
// NCCL hands the plugin a printf-style logger at init; every message from the
// plugin goes through it with the NET subsystem flag so NCCL_DEBUG=INFO and
// NCCL_DEBUG_SUBSYS=NET show it. Before init (or when NCCL passed NULL)
// warnings go to stderr and everything else is dropped.
//
// Thread safety: SetLogger/Log may be called from any thread.
#ifndef PRISM_TRANSPORT_NCCL_LOG_H_
#define PRISM_TRANSPORT_NCCL_LOG_H_

#include <cstdio>

#include "transport/nccl/net_abi.h"

namespace prism::nccl {

void SetLogger(PrismNcclLogger logger);
PrismNcclLogger GetLogger();

}  // namespace prism::nccl

#define PRISM_NCCL_LOG(level, flags, fmt, ...)                           \
  do {                                                                   \
    PrismNcclLogger prism_nccl_logger_ = ::prism::nccl::GetLogger();     \
    if (prism_nccl_logger_ != nullptr) {                                 \
      prism_nccl_logger_((level), (flags), __FILE__, __LINE__,           \
                         "NET/Prism : " fmt __VA_OPT__(, ) __VA_ARGS__); \
    } else if ((level) == kPrismNcclLogWarn) {                           \
      fprintf(stderr,                                                    \
              "NET/Prism WARN : " fmt "\n" __VA_OPT__(, ) __VA_ARGS__);  \
    }                                                                    \
  } while (0)

#define PRISM_NCCL_WARN(fmt, ...)                      \
  PRISM_NCCL_LOG(kPrismNcclLogWarn, kPrismNcclFlagNet, \
                 fmt __VA_OPT__(, ) __VA_ARGS__)
#define PRISM_NCCL_INFO(fmt, ...)                      \
  PRISM_NCCL_LOG(kPrismNcclLogInfo, kPrismNcclFlagNet, \
                 fmt __VA_OPT__(, ) __VA_ARGS__)
#define PRISM_NCCL_TRACE(fmt, ...)                      \
  PRISM_NCCL_LOG(kPrismNcclLogTrace, kPrismNcclFlagNet, \
                 fmt __VA_OPT__(, ) __VA_ARGS__)

#endif  // PRISM_TRANSPORT_NCCL_LOG_H_
