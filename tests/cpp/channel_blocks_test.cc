// ChannelBlocks (the plain <-> channel-blocked change convolutions make on every run)
// against oneDNN's own reorder, bit for bit, padding included.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ops/cpu/onednn.h"

namespace onnxtrain {
namespace {

using onednn::memory;

memory::format_tag blocked_tag(size_t rank, int64_t block) {
  using tag = memory::format_tag;
  if (rank == 3) return block == 8 ? tag::nCw8c : tag::nCw16c;
  if (rank == 4) return block == 8 ? tag::nChw8c : tag::nChw16c;
  return block == 8 ? tag::nCdhw8c : tag::nCdhw16c;
}

void check_both_ways(const memory::dims& dims, int64_t block) {
  SCOPED_TRACE("dims " + shape_string(dims) + ", block " + std::to_string(block));
  const memory::desc plain = onednn::plain_desc(dims, memory::data_type::f32);
  const memory::desc blocked(dims, memory::data_type::f32, blocked_tag(dims.size(), block));
  std::vector<float> x(plain.get_size() / sizeof(float));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);

  const onednn::ChannelBlocks to_blocked = onednn::ChannelBlocks::between(plain, blocked);
  ASSERT_EQ(to_blocked.block, block);
  EXPECT_FALSE(to_blocked.to_plain);
  std::vector<float> ours(blocked.get_size() / sizeof(float), -1.0f), theirs(ours.size(), -1.0f);
  to_blocked.run(x.data(), ours.data());
  onednn::reorder(plain, x.data(), blocked, theirs.data());
  EXPECT_EQ(ours, theirs);

  const onednn::ChannelBlocks to_plain = onednn::ChannelBlocks::between(blocked, plain);
  ASSERT_EQ(to_plain.block, block);
  EXPECT_TRUE(to_plain.to_plain);
  std::vector<float> back(x.size(), -1.0f);
  to_plain.run(theirs.data(), back.data());
  EXPECT_EQ(back, x);
}

TEST(ChannelBlocks, MatchesOneDnnReorder) {
  for (int64_t block : {8, 16}) {
    check_both_ways({2, 8, 32, 32}, block);    // whole blocks, 8-pixel tiles
    check_both_ways({1, 48, 4, 4}, block);     // several blocks
    check_both_ways({2, 3, 5, 7}, block);      // one partial block, 35 pixels (tiles and a rest)
    check_both_ways({3, 24, 9}, block);        // 1-D; 24 = 1.5 blocks of 16
    check_both_ways({1, 40, 2, 3, 5}, block);  // 3-D
  }
}

TEST(ChannelBlocks, OtherChangesAreNotChannelBlocks) {
  const memory::dims dims{1, 16, 4, 4};
  const memory::desc plain = onednn::plain_desc(dims, memory::data_type::f32);
  const memory::desc nhwc(dims, memory::data_type::f32, memory::format_tag::nhwc);
  const memory::desc bf16(dims, memory::data_type::bf16, memory::format_tag::nChw16c);
  EXPECT_EQ(onednn::ChannelBlocks::between(plain, nhwc).block, 0);
  EXPECT_EQ(onednn::ChannelBlocks::between(plain, bf16).block, 0);
  EXPECT_EQ(onednn::ChannelBlocks::between(plain, plain).block, 0);
}

}  // namespace
}  // namespace onnxtrain
