#include <gtest/gtest.h>
#include <onnxtrain/tensor.h>

#include <cmath>

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

}  // namespace
}  // namespace onnxtrain
