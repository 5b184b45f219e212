// EnableLocalTarget: registers LocalTransport as the client's transport for
// target "local" (client/src/transport.h). The registration also runs
// before main, from this file's static initializer; the CMake target keeps
// this file in the link (--undefined=gnmr_enable_local_target), so linking
// gnmr::gnmr_client_local is enough.
#include "client/local/local_transport.h"
#include "gnmr/client_local.h"

namespace gnmr {

void EnableLocalTarget() { SetLocalTransportFactory(&LocalTransport::Create); }

namespace {
const bool kRegisteredAtStartup = (EnableLocalTarget(), true);
}  // namespace

}  // namespace gnmr

extern "C" void gnmr_enable_local_target(void) { gnmr::EnableLocalTarget(); }
