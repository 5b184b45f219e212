// Where a client finds gnmrd when no target is given.
//
// gnmrd listens by default on the first usable of: /run/gnmr/gnmrd.sock,
// $XDG_RUNTIME_DIR/gnmrd.sock, /tmp/gnmrd-<uid>.sock (daemon_config.h,
// DefaultListen). A client cannot know which the daemon chose, so it takes
// $GNMR_TARGET if set, else the first of those paths that exists as a
// socket, else kDefaultTarget (so the error names the standard place).
#pragma once

#include <string>

namespace gnmr {

std::string DefaultTarget();

}  // namespace gnmr
