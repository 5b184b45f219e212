// _gnmr: the GNMR client library for Python (docs/architecture.md, "The client
// library"). The Python package gnmr re-exports it; gnmr.torch builds the
// PyTorch adapter on it.
//
// Errors: a bad argument raises ValueError, anything else gnmr.Error (a
// RuntimeError) whose message starts with the status code name; an
// unreachable daemon in export/import raises gnmr.UnavailableError. The
// background thread never raises: its problems show in counters().
// Blocking calls (observe, plan_for with a decision_wait, flush, export and
// import) release the GIL.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gnmr/client.h"
#include "gnmr/client_local.h"
#include "gnmr/config.h"
#include "gnmr/status.h"
#include "gnmr/tensor.h"
#include "gnmr/version.h"
#include "python/src/block_bindings.h"
#include "python/src/client_options_bindings.h"
#include "python/src/config_dict.h"
#include "python/src/plan_bindings.h"
#include "python/src/tensor_ref_bindings.h"

namespace py = pybind11;

namespace gnmr::python {
namespace {

class GnmrError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class UnavailableError : public GnmrError {
 public:
  using GnmrError::GnmrError;
};

[[noreturn]] void Raise(const Status& s) {
  const std::string msg = std::string(StatusCodeName(s.code())) + ": " + s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      throw py::value_error(s.message());
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      throw UnavailableError(msg);
    default:
      throw GnmrError(msg);
  }
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

class PyClient {
 public:
  PyClient(const PyOptions& o, const py::object& config) : opts_(o) {
    ClientOptions c = ToClientOptions(o);
    if (!config.is_none()) {
      if (!py::isinstance<py::dict>(config)) throw py::value_error("config must be a dict or None");
      c.config = ConfigFromDict(config.cast<py::dict>());
    }
    StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(c));
    if (!client.ok()) Raise(client.status());
    client_ = std::move(client).value();
  }

  UnitHandle AddUnit(const std::string& name, const std::vector<TensorRef>& tensors,
                     uint32_t shard_index, uint32_t shard_count) {
    StatusOr<UnitHandle> h = client_->AddUnit(name, tensors, shard_index, shard_count);
    if (!h.ok()) Raise(h.status());
    return *h;
  }

  void SetTensors(UnitHandle unit, const std::vector<TensorRef>& tensors) {
    Check(client_->SetTensors(unit, tensors));
  }

  void Start() { Check(client_->Start()); }

  // Forward tensors of `unit` for the forward channel: host tensors
  // computed now (the GIL released: a large activation takes a while),
  // device tensors enqueued on `stream` (see Observe).
  void ObserveForward(UnitHandle unit, const std::vector<TensorRef>& tensors,
                      const py::object& stream) {
    void* s_ptr = StreamPtr(stream);
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->ObserveForward(unit, tensors.data(), tensors.size(), s_ptr);
    }
    Check(s);
  }

  // One tensor without a TensorRef object: the forward hooks' common case
  // (one tensor per module call), the same as ObserveForward with it.
  void ObserveForwardTensor(UnitHandle unit, uint64_t data_ptr, uint64_t numel,
                            const std::string& dtype, float scale_inv, float saturation_magnitude,
                            int32_t device, const py::object& stream, uint64_t scale_inv_ptr) {
    const TensorRef t =
        MakeRef(data_ptr, numel, dtype, device, scale_inv, scale_inv_ptr, saturation_magnitude);
    void* s_ptr = StreamPtr(stream);
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->ObserveForward(unit, &t, 1, s_ptr);
    }
    Check(s);
  }

  // Block-scaled forward tensors (gnmr.blocks.describe's descriptors) in
  // host memory, read in place; the caller keeps them alive.
  void ObserveForwardBlocks(UnitHandle unit, const std::vector<BlockTensorRef>& tensors) {
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->ObserveForwardBlocks(unit, tensors.data(), tensors.size());
    }
    Check(s);
  }

  // The gradient as the unit's backward quantizer stored it, for the
  // backward channel: host tensors, or block-scaled descriptors.
  void ObserveBackward(UnitHandle unit, const std::vector<TensorRef>& tensors) {
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->ObserveBackward(unit, tensors.data(), tensors.size());
    }
    Check(s);
  }
  void ObserveBackwardBlocks(UnitHandle unit, const std::vector<BlockTensorRef>& tensors) {
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->ObserveBackwardBlocks(unit, tensors.data(), tensors.size());
    }
    Check(s);
  }

  void MarkInactive(UnitHandle unit) { Check(client_->MarkInactive(unit)); }

  // Overlap with backward: one host unit's statistics now (the GIL released:
  // a large gradient takes a while), used by the next Observe.
  void ObserveUnit(UnitHandle unit) {
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->ObserveUnit(unit);
    }
    Check(s);
  }

  // `stream`: a cudaStream_t as an integer (torch's Stream.cuda_stream) for
  // clients with device units; None is the legacy default stream.
  static void* StreamPtr(const py::object& stream) {
    if (stream.is_none()) return nullptr;
    if (!py::isinstance<py::int_>(stream)) {
      throw py::value_error(
          "stream must be an int (a cudaStream_t, e.g. "
          "torch.cuda.current_stream().cuda_stream) or None");
    }
    return reinterpret_cast<void*>(stream.cast<uintptr_t>());
  }

  void Observe(int64_t step, const py::object& stream) {
    void* s_ptr = StreamPtr(stream);
    Status s;
    {
      py::gil_scoped_release release;
      s = stream.is_none() ? client_->Observe(step) : client_->Observe(step, s_ptr);
    }
    Check(s);
  }

  Plan PlanFor(int64_t step) {
    py::gil_scoped_release release;
    return client_->PlanFor(step);
  }

  void Ack(const Plan& plan) { Check(client_->Ack(plan)); }

  // (ok, reason): reason is "" when connected, else why not (the status
  // text: code name and message).
  py::tuple WaitConnected(double timeout_ms) {
    const auto t = Ms(timeout_ms, "timeout_ms");
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->WaitConnected(t);
    }
    if (s.ok()) return py::make_tuple(true, "");
    return py::make_tuple(false, std::string(StatusCodeName(s.code())) + ": " + s.message());
  }

  py::list TakeProblems() {
    py::list out;
    for (const Problem& p : client_->TakeProblems()) {
      out.append(py::make_tuple(ProblemKindName(p.kind), p.message, p.count));
    }
    return out;
  }

  bool Flush(double timeout_ms) {
    const auto t = Ms(timeout_ms, "timeout_ms");
    py::gil_scoped_release release;
    return client_->Flush(t);
  }

  void Stop() {
    py::gil_scoped_release release;
    client_->Stop();
  }

  // Checkpoints through the client library (Client::ExportState /
  // ImportState, docs/checkpoint.md): the GIL is released while waiting.
  py::bytes ExportState(double timeout_ms) {
    const auto t = Ms(timeout_ms, "timeout_ms");
    StatusOr<std::string> s = [&] {
      py::gil_scoped_release release;
      return client_->ExportState(t);
    }();
    if (!s.ok()) Raise(s.status());
    return py::bytes(*s);
  }

  // Returns the generation the import started (docs/safety.md).
  uint64_t ImportState(const std::string& state, double timeout_ms) {
    const auto t = Ms(timeout_ms, "timeout_ms");
    StatusOr<uint64_t> g = [&] {
      py::gil_scoped_release release;
      return client_->ImportState(state, t);
    }();
    if (!g.ok()) Raise(g.status());
    return *g;
  }

  Client& client() { return *client_; }
  const PyOptions& options() const { return opts_; }

 private:
  PyOptions opts_;
  std::unique_ptr<Client> client_;
};

}  // namespace
}  // namespace gnmr::python

PYBIND11_MODULE(_gnmr, m) {
  // target="local": the controller in this process (docs/local_mode.md).
  gnmr::EnableLocalTarget();
  using namespace gnmr;
  using namespace gnmr::python;
  m.doc() = "GNMR client library (C++), see the gnmr package";
  m.attr("__version__") = GNMR_VERSION_STRING;

  // Translators run newest first: the subclass is registered after its base.
  auto& error = py::register_exception<GnmrError>(m, "Error", PyExc_RuntimeError);
  py::register_exception<UnavailableError>(m, "UnavailableError", error.ptr());

  py::enum_<Action>(m, "Action")
      .value("PROMOTE", Action::kPromote)
      .value("CLIP", Action::kClip)
      .value("SKIP", Action::kSkip)
      .value("RESET_STATE", Action::kResetState);
  py::enum_<MissReason>(m, "MissReason")
      .value("NONE", MissReason::kNone)
      .value("NO_DECISION_YET", MissReason::kNoDecisionYet)
      .value("TIMEOUT", MissReason::kTimeout)
      .value("DISCONNECTED", MissReason::kDisconnected)
      .value("NOT_RECEIVED", MissReason::kNotReceived);
  py::enum_<EntryTreatment>(m, "EntryTreatment")
      .value("NONE", EntryTreatment::kNone)
      .value("CLIP", EntryTreatment::kClip)
      .value("SKIP", EntryTreatment::kSkip);

  BindTensorRef(m);
  BindBlockStats(m);

  BindClientOptions(m);
  BindPlanTypes(m);

  py::class_<PyClient>(m, "Client")
      .def(py::init<const PyOptions&, const py::object&>(), py::arg("options"),
           py::arg("config") = py::none())
      .def("add_unit", &PyClient::AddUnit, py::arg("name"), py::arg("tensors"),
           py::arg("shard_index") = 0, py::arg("shard_count") = 1)
      .def("set_tensors", &PyClient::SetTensors, py::arg("unit"), py::arg("tensors"))
      .def("start", &PyClient::Start)
      .def("observe", &PyClient::Observe, py::arg("step"), py::arg("stream") = py::none())
      .def("mark_inactive", &PyClient::MarkInactive, py::arg("unit"))
      .def("observe_unit", &PyClient::ObserveUnit, py::arg("unit"))
      .def("observe_forward", &PyClient::ObserveForward, py::arg("unit"), py::arg("tensors"),
           py::arg("stream") = py::none())
      .def("observe_forward_tensor", &PyClient::ObserveForwardTensor, py::arg("unit"),
           py::arg("data_ptr"), py::arg("numel"), py::arg("dtype"), py::arg("scale_inv") = 1.0f,
           py::arg("saturation_magnitude") = 0.0f, py::arg("device") = kHostDevice,
           py::arg("stream") = py::none(), py::arg("scale_inv_ptr") = uint64_t{0})
      .def("observe_forward_blocks", &PyClient::ObserveForwardBlocks, py::arg("unit"),
           py::arg("tensors"))
      .def("observe_backward", &PyClient::ObserveBackward, py::arg("unit"), py::arg("tensors"))
      .def("observe_backward_blocks", &PyClient::ObserveBackwardBlocks, py::arg("unit"),
           py::arg("tensors"))
      .def("plan_for", &PyClient::PlanFor, py::arg("step"))
      .def(
          "ack",
          [](PyClient& c, Plan plan, const py::object& skip_step) {
            // The trainer may have agreed on another skip than this rank's own
            // (the guard's flag all-reduced over sharded units): ack what it did.
            if (!skip_step.is_none()) plan.skip_step = skip_step.cast<bool>();
            c.Ack(plan);
          },
          py::arg("plan"), py::arg("skip_step") = py::none())
      .def("flush", &PyClient::Flush, py::arg("timeout_ms") = 1000.0)
      .def("wait_connected", &PyClient::WaitConnected, py::arg("timeout_ms") = 5000.0,
           "(connected, reason): waits until registered, the first connection attempt "
           "failed, or the timeout")
      .def("take_problems", &PyClient::TakeProblems,
           "[(kind, message, count)] seen since the last call: client set-up problems "
           "and daemon refusals (see gnmr::ProblemKind)")
      .def("stop", &PyClient::Stop)
      .def("counters",
           [](const PyClient& c) { return const_cast<PyClient&>(c).client().Counters(); })
      .def(
          "unit_norms", [](PyClient& c, int64_t step) { return c.client().UnitNorms(step); },
          py::arg("step"),
          "[norm per unit] at `step` (Client::UnitNorms): NaN where not known (not the "
          "newest observed step; a GPU unit whose results are not read yet)")
      .def_property_readonly("num_units", [](PyClient& c) { return c.client().num_units(); })
      .def(
          "unit_name",
          [](PyClient& c, UnitHandle u) {
            if (u >= c.client().num_units()) throw py::index_error("no unit " + std::to_string(u));
            return c.client().unit_name(u);
          },
          py::arg("unit"))
      .def_property_readonly("options", &PyClient::options)
      .def("export_state", &PyClient::ExportState, py::arg("timeout_ms") = 5000.0)
      .def("import_state", &PyClient::ImportState, py::arg("state"),
           py::arg("timeout_ms") = 5000.0);

  m.def(
      "validate_config", [](const py::dict& d) { return ConfigToDict(ConfigFromDict(d)); },
      py::arg("config"),
      "The config with defaults filled in; ValueError naming the first bad key.");
  m.def("default_config", [] { return ConfigToDict(ControllerConfig{}); });
  m.def("clip_scale", &ClipScale, py::arg("ref_norm"), py::arg("norm"), py::arg("min_scale"));
}
