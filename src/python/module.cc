// The `kvtier._kvtier` extension module: Status, BatchResult, Registration, Store, Agent.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "errors.h"
#include "types.h"

namespace kvtier::python {

PyBatchResult to_python(BatchResult result, size_t pages) {
  if (!result.status.ok()) {
    raise_if_caller_error(result.status);
    return PyBatchResult{std::vector<Status>(pages, result.status)};
  }
  return PyBatchResult{std::move(result.pages)};
}

PyRegistration::~PyRegistration() {
  if (registration_.valid()) {
    py::gil_scoped_release unlocked;
    registration_.reset();
  }
}

void PyRegistration::release() {
  {
    py::gil_scoped_release unlocked;
    registration_.reset();
  }
  region_ = HeldRegion{};
}

void bind_common(py::module_& m) {
  py::class_<Status>(m, "Status",
                     "Outcome of one operation or page: truthy when OK. `code` is the status "
                     "code name: OK, NOT_FOUND and CORRUPT (misses), INVALID_ARGUMENT (caller "
                     "error), or a storage fault (UNAVAILABLE, RESOURCE_EXHAUSTED, ...).")
      .def_property_readonly("ok", &Status::ok)
      .def_property_readonly(
          "code", [](const Status& s) { return std::string(status_code_name(s.code())); })
      .def_property_readonly("message", [](const Status& s) { return std::string(s.message()); })
      .def_property_readonly("retryable", &Status::retryable)
      .def_property_readonly("is_miss",
                             [](const Status& s) {
                               return s.code() == StatusCode::kNotFound ||
                                      s.code() == StatusCode::kCorrupt;
                             })
      .def("__bool__", &Status::ok)
      .def("__repr__",
           [](const Status& s) { return fmt::format("<kvtier.Status {}>", s.to_string()); })
      .def("__str__", &Status::to_string);

  py::class_<PyBatchResult>(m, "BatchResult", "Per-page outcome of a batch.")
      .def_readonly("pages", &PyBatchResult::pages, "one Status per page, in order")
      .def_property_readonly(
          "ok",
          [](const PyBatchResult& r) {
            py::list out;
            for (const Status& s : r.pages) out.append(py::bool_(s.ok()));
            return out;
          },
          "one bool per page")
      .def_property_readonly("ok_count",
                             [](const PyBatchResult& r) {
                               size_t n = 0;
                               for (const Status& s : r.pages) n += s.ok() ? 1 : 0;
                               return n;
                             })
      .def_property_readonly(
          "ok_prefix",
          [](const PyBatchResult& r) {
            size_t n = 0;
            while (n < r.pages.size() && r.pages[n].ok()) ++n;
            return n;
          },
          "pages OK before the first failure")
      .def_property_readonly("all_ok",
                             [](const PyBatchResult& r) {
                               for (const Status& s : r.pages) {
                                 if (!s.ok()) return false;
                               }
                               return true;
                             })
      .def("__len__", [](const PyBatchResult& r) { return r.pages.size(); })
      .def("__repr__", [](const PyBatchResult& r) {
        size_t ok = 0;
        for (const Status& s : r.pages) ok += s.ok() ? 1 : 0;
        return fmt::format("<kvtier.BatchResult {} of {} pages ok>", ok, r.pages.size());
      });

  py::class_<PyRegistration>(m, "Registration",
                             "Registered memory. Pinned (kept alive) while registered; release() "
                             "or leaving a `with` block deregisters it, waiting for transfers "
                             "that use it.")
      .def_property_readonly("valid", &PyRegistration::valid)
      .def_property_readonly("nbytes", &PyRegistration::nbytes)
      .def_property_readonly("address", &PyRegistration::address)
      .def("release", &PyRegistration::release)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyRegistration& r, const py::args&) { r.release(); });
}

}  // namespace kvtier::python

PYBIND11_MODULE(_kvtier, m) {
  m.doc() = "kvtier: a storage tier for LLM KV-cache pages (native module)";
  m.attr("__version__") = KVTIER_VERSION;
  kvtier::python::register_errors(m);
  kvtier::python::bind_common(m);
  kvtier::python::bind_store(m);
  kvtier::python::bind_agent(m);
}
