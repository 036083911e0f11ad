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
// dims: its parameters load as zero scalars of that type, which a Module reshapes to the
// training model's inputs (values come in by copy_buffer_to_parameters).
//
// External data (has_external_data): each tensor's bytes lie in "<checkpoint>.data" at the
// tensor's external_data_offset, with no raw_data. ORT 1.19.2 writes so when the tensors
// total 1800 MiB or more (its limit for one flatbuffer is 2 GB), and whenever it saves a
// state it loaded from such a file; each tensor then starts at a multiple of 8 bytes
// (int64 and double) or 4 (the others), zeros padding the gaps. onnxtrain reads any offsets
// that lie inside the data file and writes as ORT does, under the same two conditions
// (CheckpointState::has_external_data).
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

// The size from which ORT 1.19.2 puts a checkpoint's tensors in an external data file.
inline constexpr uint64_t kOrtExternalDataThreshold = uint64_t{1800} << 20;

// "<checkpoint>.data": where an ODTC checkpoint's external data lies.
std::filesystem::path ort_external_data_path(const std::filesystem::path& checkpoint);

// Reads an ODTC checkpoint. Every position, count and size is checked against the file
// (and its external data file): a truncated or corrupt file throws an Error naming the file
// and what is wrong. From bytes, a checkpoint with external data is refused (there is no
// path to find the data beside), as ORT refuses it.
CheckpointState read_ort_checkpoint(const std::filesystem::path& path);
CheckpointState read_ort_checkpoint(std::span<const std::byte> bytes, const std::string& what);

// Writes the state as onnxruntime-training 1.19.2 writes it, atomically (the external data
// file, when there is one, first).
void write_ort_checkpoint(const CheckpointState& state, const std::filesystem::path& path,
                          bool include_optimizer_state);

}  // namespace onnxtrain::training
