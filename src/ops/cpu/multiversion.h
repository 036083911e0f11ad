// Hot loops compiled for several x86 levels, the best one chosen when the library loads.
//
// The library is compiled for a baseline (x86-64-v2 by default, CMake's
// ONNXTRAIN_X86_BASELINE), so that one binary runs on any x86-64 CPU. A function marked
// ONNXTRAIN_MULTIVERSION is compiled three times: for the baseline, for x86-64-v3 (AVX2,
// FMA) and for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL). GCC emits an ifunc resolver that the
// dynamic loader runs once, picking the version from the CPU's features (and the OS's
// support for their registers), so a call costs what a call through the PLT costs.
//
// Mark the function that holds the loop, not the lambda it runs: the versions apply to
// what is compiled inside the marked function, so everything the loop calls must be inlined
// into it ([[gnu::flatten]] or vector_math's always_inline functions). Work per call should
// be a range of elements or a row, not one element, so that the call through the resolver
// costs nothing next to it.
//
// The versions may round differently in the last bit: GCC fuses a * b + c into one FMA
// where the target has it (v3, v4; optimizer_kernels.cc alone is compiled without, to match
// onnxruntime-training bit for bit). A reduction keeps a fixed number of partial results
// whatever the vector width (onednn.h's lane_sum and LaneVector), never a sum by
// `omp simd reduction`, whose order would follow the width.
//
// Off (one version) when the library is built with -march=native (ONNXTRAIN_NATIVE sets
// ONNXTRAIN_MULTIVERSION=0) and on compilers or targets without GCC's x86 target_clones.
#pragma once

#ifndef ONNXTRAIN_MULTIVERSION
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define ONNXTRAIN_MULTIVERSION 1
#else
#define ONNXTRAIN_MULTIVERSION 0
#endif
#endif

#if ONNXTRAIN_MULTIVERSION
#define ONNXTRAIN_MULTIVERSIONED __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define ONNXTRAIN_MULTIVERSIONED
#endif
