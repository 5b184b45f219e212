#include "common/unit_name.h"

#include <string>

#include "common/text.h"

namespace gnmr {

Status CheckUnitName(std::string_view name, size_t max_bytes) {
  if (name.empty()) return InvalidArgument("unit name is empty");
  if (name.size() > max_bytes) {
    return InvalidArgument("unit name '" + EscapeForLog(name, 64) + "' is longer than " +
                           std::to_string(max_bytes) + " bytes");
  }
  for (char c : name) {
    if (c < 0x21 || c > 0x7e) {
      return InvalidArgument("unit name '" + EscapeForLog(name, 64) +
                             "' has a character outside printable ASCII");
    }
  }
  return Status::Ok();
}

}  // namespace gnmr
