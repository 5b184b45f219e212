// The value types the Python client hands out, bound to _gnmr: Plan,
// PlanEntry (read-only, with a readable repr) and Counters (with as_dict).
// module.cc binds the Client that returns them.
#pragma once

#include <pybind11/pybind11.h>

namespace gnmr::python {

void BindPlanTypes(pybind11::module_& m);

}  // namespace gnmr::python
