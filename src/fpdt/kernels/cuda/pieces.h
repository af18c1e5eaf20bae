// Splitting a byte range of memory that is laid out in equal pieces (the CUDA backend's pinned offload
// store, allocated piece by piece; its pinned upload staging slots) into the parts that fall in each
// piece. Free of CUDA types, so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cstddef>

namespace fpdt::kernels::cuda {

// Calls part(piece, offset_in_piece, done, bytes) for each part of [offset, offset + bytes) in order,
// where piece = ⌊position / piece_bytes⌋ and `done` counts the range's bytes before this part. Nothing
// for zero bytes. piece_bytes > 0.
template <typename Part>
void for_each_piece(size_t offset, size_t bytes, size_t piece_bytes, Part&& part) {
  size_t done = 0;
  while (done < bytes) {
    const size_t position = offset + done;
    const size_t in_piece = position % piece_bytes;
    const size_t length = std::min(bytes - done, piece_bytes - in_piece);
    part(position / piece_bytes, in_piece, done, length);
    done += length;
  }
}

// How many pieces of piece_bytes hold `bytes` (the last may be shorter).
constexpr size_t pieces_for(size_t bytes, size_t piece_bytes) { return (bytes + piece_bytes - 1) / piece_bytes; }

}  // namespace fpdt::kernels::cuda
