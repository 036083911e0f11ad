// What MatMul shares with the integer products (qlinear.cc): numpy's batched matrix product
// resolved into one problem.
#pragma once

#include <onnxtrain/tensor.h>

#include "ops/cpu/onednn.h"
#include "ops/kernel.h"

namespace onnxtrain {

// The problem one MatMul call solves, after numpy's promotion of 1-D operands and with
// the batch dimensions broadcast and collapsed: a [..., m, k] x b [..., k, n].
struct MatmulProblem {
  Shape out;                     // the ONNX output shape
  onednn::memory::dims a, b, c;  // oneDNN dims (rank 2 or more), equal ranks
  onednn::MatmulBatch batch;     // the same problem as offsets, for the plain loop
};

// The problem of A (a_shape) times B (b_shape); an Error names the node when they do not
// multiply.
MatmulProblem matmul_problem(KernelContext& ctx, const Shape& a_shape, const Shape& b_shape);

// A prepared oneDNN matmul: the primitive, and the constant B already reordered into the
// layout the primitive prefers.
struct PreparedMatmul {
  onednn::Primitive primitive;
  Tensor packed_b;  // undefined unless B is constant
};

// Creates the primitive for `type` weights, on as many of `threads` as its size is worth;
// with a constant B, lets oneDNN choose B's layout and packs B once, so runs skip the
// per-call copy of the weights. A defined `bias_md` adds a bias argument.
PreparedMatmul prepare_matmul(onednn::memory::data_type type, const onednn::memory::desc& a_md,
                              const onednn::memory::desc& b_md, const onednn::memory::desc& c_md,
                              const onednn::memory::desc& bias_md, const dnnl::primitive_attr& attr,
                              const void* constant_b, onednn::PackedConstant& packed, int threads);

// Runs it: c = a b (+ bias); `b` is not read when the primitive holds a packed constant B.
void run_matmul(KernelContext& ctx, PreparedMatmul& p, const void* a, const void* b, void* c,
                const void* bias = nullptr);

}  // namespace onnxtrain
