// kvtier.Agent, kvtier.Target and kvtier.Transfer: the transfer layer under the store.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "kvtier/backends/builtin.h"
#include "kvtier/transfer/agent.h"
#include "types.h"

namespace kvtier::python {
namespace {

using namespace pybind11::literals;

class PyTarget {
 public:
  explicit PyTarget(Target target) : target_(std::move(target)) {}
  Target& get() {
    if (!target_.valid()) raise_invalid("the target is closed");
    return target_;
  }
  void release() { target_.reset(); }
  bool valid() const { return target_.valid(); }

 private:
  Target target_;
};

// A transfer request and the Python objects (memory, targets) it uses.
class PyTransfer {
 public:
  PyTransfer(Transfer transfer, PieceSet memory, py::list targets)
      : transfer_(std::move(transfer)), memory_(std::move(memory)), targets_(std::move(targets)) {}
  ~PyTransfer() {
    py::gil_scoped_release unlocked;
    transfer_ = Transfer();  // cancels and waits when in flight
  }

  Status post() {
    Status st = transfer_.post();
    raise_if_caller_error(st);
    return st;
  }

  bool wait(std::optional<double> timeout_s) {
    py::gil_scoped_release unlocked;
    if (!timeout_s) {
      transfer_.wait();
      return true;
    }
    return transfer_.wait(std::chrono::nanoseconds(static_cast<int64_t>(*timeout_s * 1e9))).ok();
  }

  std::string state() const {
    switch (transfer_.state()) {
      case TransferState::kPrepared:
        return "prepared";
      case TransferState::kInFlight:
        return "in_flight";
      case TransferState::kDone:
        return "done";
    }
    return "unknown";
  }

  void cancel() { transfer_.cancel(); }

  std::vector<Status> results() const {
    if (!transfer_.done()) raise_invalid("results() of a transfer that is not done");
    auto r = transfer_.results();
    return {r.begin(), r.end()};
  }

  Status first_error() const {
    if (!transfer_.done()) raise_invalid("first_error() of a transfer that is not done");
    return transfer_.first_error();
  }

  size_t size() const { return transfer_.size(); }

 private:
  Transfer transfer_;
  PieceSet memory_;
  py::list targets_;
};

Result<TransferOp> parse_op(const std::string& op) {
  if (op == "read") return TransferOp::kRead;
  if (op == "write") return TransferOp::kWrite;
  return invalid_argument_error(fmt::format("transfer op '{}': expected 'read' or 'write'", op));
}

Result<StorageClass> parse_storage_class(const std::string& name) {
  if (name == "file") return StorageClass::kFile;
  if (name == "memory") return StorageClass::kMemory;
  if (name == "object") return StorageClass::kObject;
  return invalid_argument_error(
      fmt::format("storage class '{}': expected 'file', 'memory' or 'object'", name));
}

std::shared_ptr<Agent> make_agent(const std::string& backend, const std::string& storage,
                                  const std::map<std::string, std::string>& params) {
  Result<StorageClass> cls = parse_storage_class(storage);
  if (!cls.ok()) raise_status(cls.status());
  AgentConfig cfg;
  cfg.backend = backend;
  cfg.storage_class = *cls;
  cfg.params = BackendParams(params.begin(), params.end());
  cfg.registry = &builtin_backends();
  Result<Agent> agent = [&] {
    py::gil_scoped_release unlocked;
    return Agent::create(cfg);
  }();
  if (!agent.ok()) raise_status(agent.status());
  return std::make_shared<Agent>(std::move(agent).value());
}

}  // namespace

void bind_agent(py::module_& m) {
  py::class_<PyTarget>(m, "Target", "An opened storage object (owns its descriptor).")
      .def_property_readonly("path", [](PyTarget& t) { return t.get().path(); })
      .def_property_readonly("size", [](PyTarget& t) { return t.get().size(); })
      .def_property_readonly("valid", &PyTarget::valid)
      .def(
          "publish",
          [](PyTarget& t, bool durable) {
            Target& target = t.get();
            Status st = [&] {
              py::gil_scoped_release unlocked;
              return target.publish(PublishOptions{.durable = durable});
            }();
            raise_if_caller_error(st);
            return st;
          },
          "durable"_a = false, "Makes a written 'create' target visible at its path.")
      .def("close", &PyTarget::release,
           "Releases the target now (an unpublished 'create' target leaves nothing).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyTarget& t, const py::args&) { t.release(); });

  py::class_<PyTransfer>(m, "Transfer", "An asynchronous transfer request (Agent.make_request).")
      .def("post", &PyTransfer::post, "Starts the transfer.")
      .def("wait", &PyTransfer::wait, "timeout"_a = py::none(),
           "Blocks (without the GIL) until done or `timeout` seconds pass; True when done.")
      .def_property_readonly("state", &PyTransfer::state)
      .def("done", [](const PyTransfer& t) { return t.state() == "done"; })
      .def("cancel", &PyTransfer::cancel)
      .def_property_readonly("results", &PyTransfer::results, "one Status per descriptor")
      .def_property_readonly("first_error", &PyTransfer::first_error)
      .def("__len__", &PyTransfer::size);

  py::class_<Agent, std::shared_ptr<Agent>>(
      m, "Agent",
      "The transfer layer: register memory once, open targets, run descriptor-list transfers.\n"
      "Agent(backend='auto', storage='file', params={})")
      .def(py::init(&make_agent), "backend"_a = "auto", "storage"_a = "file",
           "params"_a = std::map<std::string, std::string>{})
      .def_property_readonly("backend",
                             [](const Agent& a) { return std::string(a.backend_name()); })
      .def_property_readonly("description", &Agent::backend_description)
      .def_property_readonly("selection", [](const Agent& a) { return a.selection().summary(); })
      .def(
          "register_memory",
          [](Agent& a, const py::object& obj, const py::object& nbytes) {
            HeldRegion region = hold_region(obj, nbytes);
            Result<Registration> reg = [&] {
              py::gil_scoped_release unlocked;
              return a.register_memory(region.data, region.size);
            }();
            if (!reg.ok()) raise_status(reg.status());
            return std::make_unique<PyRegistration>(std::move(reg).value(), std::move(region));
          },
          "memory"_a, "nbytes"_a = py::none())
      .def(
          "open_target",
          [](Agent& a, const std::string& path, const std::string& mode, uint64_t size_hint,
             bool direct, const std::string& temp_dir) {
            TargetSpec spec;
            spec.path = path;
            if (mode == "read") {
              spec.mode = TargetMode::kRead;
            } else if (mode == "create") {
              spec.mode = TargetMode::kCreate;
            } else {
              raise_invalid(fmt::format("target mode '{}': expected 'read' or 'create'", mode));
            }
            spec.size_hint = size_hint;
            spec.direct = direct;
            spec.temp_dir = temp_dir;
            Result<Target> t = [&] {
              py::gil_scoped_release unlocked;
              return a.open_target(spec);
            }();
            if (!t.ok()) raise_status(t.status());
            return std::make_unique<PyTarget>(std::move(t).value());
          },
          "path"_a, "mode"_a = "read", "size_hint"_a = 0, "direct"_a = false, "temp_dir"_a = "",
          "Opens an object: mode 'read' (existing) or 'create' (invisible until published). "
          "Raises StorageError when it cannot be opened.")
      .def(
          "make_request",
          [](Agent& a, const std::string& op, const py::sequence& memory,
             const py::sequence& storage) {
            Result<TransferOp> top = parse_op(op);
            if (!top.ok()) raise_status(top.status());
            PieceSet pieces;
            for (const py::handle& piece : memory) {
              pieces.add_piece(piece, *top == TransferOp::kRead);
            }
            std::vector<MemDesc> mem;
            for (const auto& p : pieces.pieces()) mem.push_back(MemDesc{p.data, p.size});
            std::vector<StorageDesc> sto;
            py::list targets;
            for (const py::handle& item : storage) {
              auto t = item.cast<py::tuple>();
              if (t.size() != 3) raise_invalid("a storage descriptor is (target, offset, length)");
              PyTarget& target = t[0].cast<PyTarget&>();
              sto.push_back(
                  StorageDesc{&target.get(), t[1].cast<uint64_t>(), t[2].cast<uint64_t>()});
              targets.append(t[0]);
            }
            Result<Transfer> x = a.make_request(*top, mem, sto);
            if (!x.ok()) raise_status(x.status());
            return std::make_unique<PyTransfer>(std::move(x).value(), std::move(pieces),
                                                std::move(targets));
          },
          "op"_a, "memory"_a, "storage"_a,
          "A transfer ('read' or 'write') of memory pieces to/from (target, offset, length) "
          "descriptors, pairwise. Memory must lie inside a registration.")
      .def(
          "remove",
          [](Agent& a, const std::string& path) {
            Status st = [&] {
              py::gil_scoped_release unlocked;
              return a.remove(path);
            }();
            raise_if_caller_error(st);
            return st;
          },
          "path"_a);
}

}  // namespace kvtier::python
