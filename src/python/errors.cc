#include "errors.h"

#include <string>

namespace kvtier::python {
namespace {

// Created once at import; owned by the module for the life of the interpreter.
PyObject* g_error = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_storage = nullptr;

PyObject* new_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("kvtier.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

}  // namespace

void register_errors(py::module_& m) {
  g_error = new_exception(m, "Error", PyExc_Exception,
                          "Base of kvtier's exceptions; `code` names the status code.");
  py::tuple invalid_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid = new_exception(m, "InvalidArgumentError", invalid_bases.ptr(),
                            "The caller's mistake: bad key, wrong sizes, unregistered memory.");
  py::tuple storage_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_OSError));
  g_storage = new_exception(m, "StorageError", storage_bases.ptr(),
                            "A store, registration or handle could not be made.");
}

void raise_status(const Status& status) {
  PyObject* cls = status.code() == StatusCode::kInvalidArgument ? g_invalid : g_storage;
  py::object exc = py::reinterpret_steal<py::object>(
      PyObject_CallFunction(cls, "s", std::string(status.message()).c_str()));
  if (!exc) throw py::error_already_set();
  exc.attr("code") = py::str(std::string(status_code_name(status.code())));
  PyErr_SetObject(cls, exc.ptr());
  throw py::error_already_set();
}

void raise_invalid(const std::string& message) {
  raise_status(invalid_argument_error(message));
}

void raise_if_caller_error(const Status& status) {
  if (status.code() == StatusCode::kInvalidArgument) raise_status(status);
}

}  // namespace kvtier::python
