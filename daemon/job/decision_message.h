// The wire forms of a decision live in controller_io/decision_message.h,
// shared with the client's local mode.
#pragma once

#include "controller_io/decision_message.h"
