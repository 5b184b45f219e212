// Target "local" for gnmr::Client: the GNMR controller runs inside the
// client, one per rank, instead of in gnmrd (docs/local_mode.md). Installed
// as <gnmr/client_local.h>; library gnmr_client_local (CMake target
// gnmr::gnmr_client_local), which links the controller; gnmr_client alone
// does not.
//
//   gnmr::ClientOptions o;
//   o.target = "local";
//   o.job_id = "notebook";
//   o.local_events_path = "gnmr-events.jsonl";   // optional
//   auto client = gnmr::Client::Create(o).value();
//   ...  // AddUnit, Start, then Observe / PlanFor / Ack as with gnmrd
//
// The plans are those gnmrd would send for the same statistics (the same
// controller code, the same digests); ExportState/ImportState work on the
// in-process controller. Sharded units are refused: use gnmrd.
#pragma once

#include "gnmr/export.h"

namespace gnmr {

// Makes ClientOptions::target "local" available in this process. Linking
// gnmr::gnmr_client_local with CMake does this before main (the target
// carries a link option that keeps the registration); call it yourself if
// you link the archive by other means. Idempotent and thread-safe.
GNMR_EXPORT void EnableLocalTarget();

}  // namespace gnmr

extern "C" {
// The same, for C programs (<gnmr/gnmr_c.h> and target "local").
GNMR_EXPORT void gnmr_enable_local_target(void);
}
