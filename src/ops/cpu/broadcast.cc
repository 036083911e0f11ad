#include "ops/cpu/broadcast.h"

#include <algorithm>

namespace onnxtrain {

Shape broadcast_shapes(std::span<const Shape* const> shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    const size_t pad = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t& o = out[pad + i];
      const int64_t d = (*s)[i];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::string list;
        for (const Shape* t : shapes) list += (list.empty() ? "" : " and ") + shape_string(*t);
        throw Error("shapes " + list + " do not broadcast (axis " + std::to_string(pad + i) + ": " +
                        std::to_string(o) + " vs " + std::to_string(d) + ")",
                    ErrorKind::kInvalidArgument);
      }
      o = d;
    }
  }
  return out;
}

Shape broadcast_shapes(std::span<const Shape> shapes) {
  std::vector<const Shape*> pointers;
  pointers.reserve(shapes.size());
  for (const Shape& s : shapes) pointers.push_back(&s);
  return broadcast_shapes(std::span<const Shape* const>(pointers));
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  if (a == b) return a;
  const std::array<const Shape*, 2> pair{&a, &b};
  return broadcast_shapes(std::span<const Shape* const>(pair));
}

std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const size_t pad = out.size() - shape.size();
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[pad + i] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

}  // namespace onnxtrain
