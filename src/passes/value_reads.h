// How many times each value of a graph is read, for passes that rewrite a value only
// when nothing but the pattern they replace reads it; and the removal of fused nodes.
#pragma once

#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Reads per value name: node inputs, graph outputs, and anything a subgraph (If, Loop,
// Scan bodies) reads, which counts as read by the node holding the subgraph (names a
// subgraph defines itself count too, which only makes passes more careful). Each name in
// `keep` counts as one more read (values the caller needs to stay).
std::unordered_map<std::string, size_t> count_reads(const ir::Graph& graph, std::span<const std::string> keep = {});

// Drops the nodes whose `removed` flag is set, keeping the others in order.
void erase_nodes(ir::Graph& graph, const std::vector<bool>& removed);

}  // namespace onnxtrain::passes
