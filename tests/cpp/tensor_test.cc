#include <gtest/gtest.h>
#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace onnxtrain {
namespace {

TEST(Float16, RoundTripsExactValuesAndRoundsToNearestEven) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(static_cast<float>(Float16(v)), v) << v;
  }
  EXPECT_EQ(static_cast<float>(Float16(1.0f + 1.0f / 4096)), 1.0f);  // halfway: ties to even
  EXPECT_TRUE(std::isinf(static_cast<float>(Float16(70000.0f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(std::nanf("")))));
}

TEST(BFloat16, KeepsTheTopSixteenBits) {
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(-3.0f)), -3.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
}

TEST(Float8, RoundsToNearestEvenAndSaturatesAsTheSpecSays) {
  // E4M3FN: 448 is the largest finite value, 464 the tie between 448 and 480 (NaN's pattern).
  EXPECT_EQ(Float8E4M3FN(448.0f).bits, 0x7e);
  EXPECT_EQ(Float8E4M3FN(464.0f).bits, 0x7e);                                // ties to even
  EXPECT_EQ(Float8E4M3FNFormat::encode(470.0f, /*saturate=*/false), 0x7fu);  // NaN
  EXPECT_EQ(Float8E4M3FNFormat::encode(-1e9f, true), 0xfeu);
  EXPECT_EQ(Float8E4M3FN(0.001953125f).bits, 0x01);   // 2^-9, the smallest subnormal
  EXPECT_EQ(Float8E4M3FN(0.0009765625f).bits, 0x00);  // half of it: ties to even (zero)
  // E5M2 keeps infinities when not saturating; the FNUZ formats have no -0 and one NaN.
  EXPECT_EQ(Float8E5M2Format::encode(std::numeric_limits<float>::infinity(), false), 0x7cu);
  EXPECT_EQ(Float8E5M2Format::encode(std::numeric_limits<float>::infinity(), true), 0x7bu);
  EXPECT_EQ(Float8E4M3FNUZ(-0.0f).bits, 0x00);
  EXPECT_TRUE(std::isnan(static_cast<float>(Float8E5M2FNUZ::from_bits(0x80))));
  for (uint32_t bits = 0; bits < 256; ++bits) {
    const float value = Float8E5M2Format::decode(bits);
    if (!std::isnan(value)) EXPECT_EQ(Float8E5M2Format::encode(value, false), bits) << bits;
  }
  // E2M1 (float4): 0, 0.5, 1, 1.5, 2, 3, 4, 6; saturates always.
  EXPECT_EQ(Float4E2M1Format::encode(5.0f), 0x6u);  // tie between 4 and 6: to even (4)
  EXPECT_EQ(Float4E2M1Format::encode(1e9f), 0x7u);
  // E8M0: powers of two, rounded by the mode.
  using Round = narrow_float::E8M0::Round;
  EXPECT_EQ(Float8E8M0Format::encode(1.25f, true, Round::kUp), 128u);
  EXPECT_EQ(Float8E8M0Format::encode(1.25f, true, Round::kDown), 127u);
  EXPECT_EQ(Float8E8M0Format::encode(1.5f, true, Round::kNearest), 128u);
  EXPECT_EQ(Float8E8M0Format::decode(127), 1.0f);
  EXPECT_TRUE(std::isnan(Float8E8M0Format::decode(255)));
}

TEST(Tensor, PackedFourBitTypesTakeHalfABytePerElement) {
  EXPECT_EQ(dtype_bits(DType::kInt4), 4u);
  EXPECT_EQ(dtype_size(DType::kInt4), 0u);  // no byte of its own
  EXPECT_TRUE(is_supported(DType::kUInt4) && is_packed(DType::kFloat4E2M1) && !is_packed(DType::kFloat8E4M3FN));
  EXPECT_EQ(Tensor::empty(DType::kInt4, {3}).nbytes(), 2u);
  EXPECT_EQ(tensor_bytes(DType::kUInt4, std::vector<int64_t>{5, 3}), 8u);
  EXPECT_EQ(Tensor::empty(DType::kFloat8E5M2, {3}).nbytes(), 3u);
  EXPECT_EQ(dtype_name(DType::kFloat8E8M0), "float8e8m0");
  Tensor t = Tensor::empty(DType::kInt4, {3});
  static_cast<uint8_t*>(t.raw_data())[0] = 0xe1;  // elements 1 and -2
  static_cast<uint8_t*>(t.raw_data())[1] = 0x07;
  EXPECT_EQ(t.to_int64_vector(), (std::vector<int64_t>{1, -2, 7}));
}

TEST(Tensor, ReshapeSharesStorageAndChecksSize) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.raw_data(), t.raw_data());
  EXPECT_THROW(t.reshaped({4}), Error);
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_THROW(t.dim(2), Error);
}

TEST(Tensor, SequencesShareHeapTensorsAndCopyArenaViews) {
  Tensor heap = Tensor::from_vector<float>({2}, {1, 2});
  auto arena_block = Storage::allocate(64);
  Tensor in_arena(DType::kFloat32, {2},
                  std::make_shared<Storage>(arena_block->data(), 64, StorageOrigin::kArena, [arena_block] {}));
  in_arena.copy_from(heap);
  Tensor s = Tensor::sequence(DType::kFloat32, {heap, in_arena});
  EXPECT_TRUE(s.is_sequence());
  EXPECT_EQ(s.dtype(), DType::kSequence);
  EXPECT_EQ(s.nbytes(), 0u);
  const TensorSequence& elements = s.sequence();
  ASSERT_EQ(elements.tensors.size(), 2u);
  EXPECT_EQ(elements.tensors[0].raw_data(), heap.raw_data());      // shared
  EXPECT_NE(elements.tensors[1].raw_data(), in_arena.raw_data());  // copied out of the arena
  EXPECT_EQ(elements.tensors[1].values<float>()[1], 2.f);
  Tensor copy = s.clone();
  EXPECT_NE(copy.sequence().tensors[0].raw_data(), heap.raw_data());
  EXPECT_THROW(Tensor::sequence(DType::kInt64, {heap}), Error);  // another element type
  EXPECT_THROW(heap.sequence(), Error);                          // not a sequence
  EXPECT_THROW(s.reshaped({1}), Error);
  EXPECT_TRUE(Tensor::none().is_none());
  EXPECT_TRUE(is_container(Tensor::none().dtype()));
  EXPECT_EQ(dtype_name(DType::kSequence), "sequence");
}

TEST(Storage, LargeBlocksAreReusedAfterTheirRelease) {
  constexpr size_t kLarge = size_t{3} << 20;
  const void* first = nullptr;
  {
    const auto block = Storage::allocate(kLarge);
    first = block->data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    EXPECT_NE(reinterpret_cast<uintptr_t>(first) % 4096, 0u);  // not on a page boundary (cache sets)
    std::fill_n(block->data(), kLarge, std::byte{7});
  }
  const auto again = Storage::allocate(kLarge);  // the released block, its pages already there
  EXPECT_EQ(again->data(), first);
  const auto other = Storage::allocate(kLarge);  // in use: a new block
  EXPECT_NE(other->data(), first);
  Storage::release_kept_blocks();
  const auto small = Storage::allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small->data()) % 64, 0u);
}

}  // namespace
}  // namespace onnxtrain
