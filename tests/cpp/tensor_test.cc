#include <gtest/gtest.h>
#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

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

TEST(Tensor, ReshapeSharesStorageAndChecksSize) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.raw_data(), t.raw_data());
  EXPECT_THROW(t.reshaped({4}), Error);
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_THROW(t.dim(2), Error);
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
