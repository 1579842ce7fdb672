// Caller memory from Python objects, for the kvtier module.
//
// Accepted forms of one piece of memory:
//   - any object with the buffer protocol (numpy arrays, bytearray, memoryview, bytes when
//     only read), C-contiguous;
//   - a tuple (address, nbytes) of ints: memory the caller owns and keeps alive (a torch
//     tensor's data_ptr(), a pinned pool);
//   - a tensor-like object with data_ptr(), numel() and element_size() (torch tensors, which
//     have no buffer protocol), contiguous.
// A page is one piece or a list/tuple of pieces (a tuple of exactly two ints is a piece).
//
// Every function here needs the GIL. PieceSet releases its buffer views in its destructor, so
// it must be destroyed with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace kvtier::python {

namespace py = pybind11;

// Pieces of caller memory, and the buffer views that keep them valid.
class PieceSet {
 public:
  struct Piece {
    void* data = nullptr;
    size_t size = 0;
  };

  PieceSet() = default;
  PieceSet(PieceSet&&) noexcept = default;
  PieceSet& operator=(PieceSet&&) noexcept = default;
  ~PieceSet() = default;

  // Appends one piece; throws InvalidArgumentError (a ValueError) for objects that are not
  // memory, read-only memory when `writable`, non-contiguous memory, and empty memory.
  void add_piece(const py::handle& obj, bool writable);
  // Appends one page: a piece, or a list/tuple of pieces. Returns the number of pieces added.
  size_t add_page(const py::handle& obj, bool writable);

  const std::vector<Piece>& pieces() const { return pieces_; }
  // The Python objects whose memory is used, to keep alive beyond this set (async batches).
  py::list owners() const;

 private:
  struct ViewRelease {
    void operator()(Py_buffer* view) const;
  };
  std::vector<Piece> pieces_;
  std::vector<std::unique_ptr<Py_buffer, ViewRelease>> views_;
  std::vector<py::object> owners_;
};

// One region for registration: the memory of `obj` (buffer, tensor-like or an int address
// with `nbytes`), and the view that pins it while registered. Throws InvalidArgumentError.
struct HeldRegion {
  void* data = nullptr;
  size_t size = 0;
  PieceSet hold;
};
HeldRegion hold_region(const py::handle& obj, const py::object& nbytes);

}  // namespace kvtier::python
