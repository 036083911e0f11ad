// onnxruntime-training's checkpoint: a FlatBuffer with file identifier "ODTC", whose schema
// (onnxruntime/core/flatbuffers/schema/ort_training_checkpoint.fbs, Tensor from ort.fbs) is,
// field by field in index order:
//
//   Checkpoint          version:int32, module_state:ModuleState,
//                       optimizer_groups:[OptimizerGroup], property_bag:PropertyBag
//   ModuleState         requires_grad_params:[Tensor], frozen_params:[Tensor],
//                       is_nominal_state:bool, has_external_data:bool
//   OptimizerGroup      group_name:string, step:int64, initial_learning_rate:float,
//                       optimizer_states:[ParameterOptimizerState]
//   ParameterOptimizerState  param_name:string, momentums:[Tensor]
//   PropertyBag         ints:[IntProperty], floats:[FloatProperty], strings:[StringProperty]
//   Int/Float/StringProperty  name:string, value:int64 | float | string
//   Tensor              name:string, doc_string:string, dims:[int64], data_type:int32 (ONNX
//                       codes), raw_data:[uint8], string_data:[string],
//                       external_data_offset:int64 = -1
//
// How it maps onto a CheckpointState: both parameter lists become parameters (requires_grad
// true and false), in file order (ORT sorts them by name); the one optimizer group "group0"
// gives step and learning rate (its initial_learning_rate: ORT keeps no other); moments
// keep ORT's names ("momentum0", "momentum1": AdamW's first and second moments; ORT's SGD
// keeps an unused "momentum0"). Writing, onnxtrain's "exp_avg", "exp_avg_sq" and
// "momentum_buffer" become "momentum0", "momentum1" and "momentum0", and a parameter with
// no moment gets a zero "momentum0", which ORT's optimizers expect. Property floats are
// float32 in the file. ORT's nominal checkpoint states names and element types but no
// dims: its parameters load as zero scalars of that type.
#pragma once

#include <onnxtrain/checkpoint.h>

#include <cstddef>
#include <filesystem>
#include <span>

namespace onnxtrain::training {

// The checkpoint version onnxruntime-training 1.19.2 writes and reads.
inline constexpr int32_t kOrtCheckpointVersion = 2;

// True when `head` (the first bytes of a file) carries the ODTC identifier.
bool is_ort_checkpoint(std::span<const std::byte> head);

// Reads an ODTC checkpoint. Every position, count and size is checked against the file:
// a truncated or corrupt file throws an Error naming the file and what is wrong.
CheckpointState read_ort_checkpoint(const std::filesystem::path& path);
CheckpointState read_ort_checkpoint(std::span<const std::byte> bytes, const std::string& what);

// Writes the state as onnxruntime-training 1.19.2 writes it, atomically.
void write_ort_checkpoint(const CheckpointState& state, const std::filesystem::path& path,
                          bool include_optimizer_state);

}  // namespace onnxtrain::training
