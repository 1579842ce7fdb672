#include "memory.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "errors.h"

namespace kvtier::python {
namespace {

std::string type_name(const py::handle& obj) {
  return py::str(py::type::handle_of(obj).attr("__name__"));
}

bool is_address_pair(const py::handle& obj) {
  if (!py::isinstance<py::tuple>(obj)) return false;
  auto t = py::reinterpret_borrow<py::tuple>(obj);
  return t.size() == 2 && py::isinstance<py::int_>(t[0]) && py::isinstance<py::int_>(t[1]);
}

bool is_tensor_like(const py::handle& obj) {
  return py::hasattr(obj, "data_ptr") && py::hasattr(obj, "element_size") &&
         py::hasattr(obj, "numel");
}

}  // namespace

void PieceSet::ViewRelease::operator()(Py_buffer* view) const {
  PyBuffer_Release(view);
  delete view;
}

void PieceSet::add_piece(const py::handle& obj, bool writable) {
  Piece piece;
  if (PyObject_CheckBuffer(obj.ptr())) {
    std::unique_ptr<Py_buffer, ViewRelease> view(new Py_buffer{});
    const int flags = writable ? PyBUF_CONTIG : PyBUF_CONTIG_RO;
    if (PyObject_GetBuffer(obj.ptr(), view.get(), flags) != 0) {
      std::string why = py::error_already_set().what();
      view.release();  // nothing to release: GetBuffer failed
      raise_invalid(fmt::format("{} is not usable as {}page memory: {}", type_name(obj),
                                writable ? "writable " : "", why));
    }
    piece = Piece{view->buf, static_cast<size_t>(view->len)};
    views_.push_back(std::move(view));
  } else if (is_address_pair(obj)) {
    auto t = py::reinterpret_borrow<py::tuple>(obj);
    const auto addr = t[0].cast<long long>();
    const auto size = t[1].cast<long long>();
    if (addr <= 0 || size < 0) {
      raise_invalid(fmt::format("bad (address, nbytes) pair ({}, {})", addr, size));
    }
    piece = Piece{reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), static_cast<size_t>(size)};
  } else if (is_tensor_like(obj)) {
    if (py::hasattr(obj, "is_contiguous") && !obj.attr("is_contiguous")().cast<bool>()) {
      raise_invalid(fmt::format("{} is not contiguous", type_name(obj)));
    }
    const auto addr = obj.attr("data_ptr")().cast<uintptr_t>();
    const auto size =
        obj.attr("numel")().cast<size_t>() * obj.attr("element_size")().cast<size_t>();
    piece = Piece{reinterpret_cast<void*>(addr), size};
  } else {
    raise_invalid(fmt::format(
        "{} is not page memory: pass a buffer (numpy array, bytearray), a tensor, or an "
        "(address, nbytes) tuple",
        type_name(obj)));
  }
  if (piece.size == 0) raise_invalid("page memory is empty (0 bytes)");
  pieces_.push_back(piece);
  owners_.push_back(py::reinterpret_borrow<py::object>(obj));
}

size_t PieceSet::add_page(const py::handle& obj, bool writable) {
  if ((py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) && !is_address_pair(obj)) {
    auto seq = py::reinterpret_borrow<py::sequence>(obj);
    if (seq.size() == 0) raise_invalid("a page needs at least one piece");
    for (const py::handle& piece : seq) add_piece(piece, writable);
    return seq.size();
  }
  add_piece(obj, writable);
  return 1;
}

py::list PieceSet::owners() const {
  py::list out;
  for (const py::object& o : owners_) out.append(o);
  return out;
}

HeldRegion hold_region(const py::handle& obj, const py::object& nbytes) {
  HeldRegion region;
  if (py::isinstance<py::int_>(obj)) {
    if (nbytes.is_none()) raise_invalid("an address needs nbytes");
    const auto addr = obj.cast<long long>();
    const auto size = nbytes.cast<long long>();
    if (addr <= 0 || size <= 0) {
      raise_invalid(fmt::format("bad region: address {}, nbytes {}", addr, size));
    }
    region.data = reinterpret_cast<void*>(static_cast<uintptr_t>(addr));
    region.size = static_cast<size_t>(size);
    return region;
  }
  if (!nbytes.is_none()) raise_invalid("nbytes goes with an integer address only");
  region.hold.add_piece(obj, /*writable=*/false);
  region.data = region.hold.pieces()[0].data;
  region.size = region.hold.pieces()[0].size;
  return region;
}

}  // namespace kvtier::python
