// Conversion between the controller and its protobuf form.
//
// Restore treats its input as untrusted (a snapshot file, or `gnmrctl
// import` from a user): every field is range-checked and a bad state is
// rejected with DataLoss/InvalidArgument rather than producing a controller
// that could violate its invariants.
#pragma once

#include <string>

#include "controller/controller.h"
#include "controller/types/config_codec.h"
#include "gnmr/status.h"
#include "gnmr/v1/controller.pb.h"

namespace gnmr {

class ControllerStateCodec {
 public:
  static constexpr uint32_t kFormatVersion = 1;

  static void Save(const Controller& c, v1::ControllerState* out);
  static StatusOr<Controller> Restore(const v1::ControllerState& in);

  // Byte-string helpers for snapshots and export files.
  static std::string SaveToString(const Controller& c);
  static StatusOr<Controller> RestoreFromString(const std::string& bytes);

 private:
  // Restore's steps, in its order: each after those before it.
  static Status RestoreUnits(const v1::ControllerState& in, Controller* c);
  static Status RestoreRecovery(const v1::ControllerState& in, Controller* c);
  static Status RestoreReleased(const v1::ControllerState& in, Controller* c);
  static Status RestoreLastSteps(const v1::ControllerState& in, Controller* c);
  // After the units, recovery and last_apply are restored.
  static Status RestoreDeniedClips(const v1::ControllerState& in, Controller* c);
  static Status RestoreSequenceAndLag(const v1::ControllerState& in, Controller* c);
};

}  // namespace gnmr
