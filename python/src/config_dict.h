// Controller configs as Python dicts for the _gnmr module: the config keys
// (docs/controller.md, "Config keys"; controller/types/include/gnmr/config.h; the scalar
// keys and their types come from controller/types/config_schema.h) with clear ValueErrors
// naming the bad key.
#pragma once

#include <pybind11/pybind11.h>

#include "gnmr/config.h"

namespace gnmr::python {

// A dict of config keys (missing keys keep their defaults) -> a validated
// config; py::value_error naming the key for an unknown key, a wrong type or
// a config that does not validate.
ControllerConfig ConfigFromDict(const pybind11::dict& d);

// Every key, defaults included (actions as a list of dicts).
pybind11::dict ConfigToDict(const ControllerConfig& c);

}  // namespace gnmr::python
