// Test-only hooks into prism::Endpoint (not part of the public API).
#ifndef PRISM_TRANSPORT_RUNTIME_ENDPOINT_TESTING_H_
#define PRISM_TRANSPORT_RUNTIME_ENDPOINT_TESTING_H_

#include <functional>

#include "absl/status/status.h"
#include "prism/endpoint.h"

namespace prism::runtime {

// Runs `fn` on `endpoint`'s event-loop thread, between two iterations (as
// a control call: step 1 of an iteration, before the WRITEs queued by
// PostWrite are handed to the engine), and returns when it has run. The
// endpoint's methods may be called from `fn` (control calls run inline
// there). So a test can order its own calls against the loop without
// sleeping: e.g. poll one completion and post a WRITE before the
// loop can refill the slot that poll freed. InvalidArgument for an
// Endpoint not made by Endpoint::Create.
absl::Status RunOnLoopThreadForTesting(Endpoint& endpoint,
                                       const std::function<void()>& fn);

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_ENDPOINT_TESTING_H_
