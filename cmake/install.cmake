# `cmake --install` lays out a relocatable C++ package (component onnxtrain_cpp):
#   bin/onnxtrain              the CLI, run path $ORIGIN/../lib: it runs from wherever the prefix is
#   lib/libonnxtrain.so        the library
#   include/onnxtrain/         the public headers (C++20)
#   lib/cmake/onnxtrain/       find_package(onnxtrain): targets onnxtrain::onnxtrain and onnxtrain::cli
# Nothing in it names the prefix: the exported targets locate themselves from their own file.
#
# In a wheel build (scikit-build-core, SKBUILD) the wheel's own rules (src/bindings) are the
# default install; the package's headers, library and CMake files are still there, out of
# the wheel, for `cmake --install <build> --component onnxtrain_cpp --prefix <dir>` (the
# test command builds its C++ consumer against them). The CLI's run path there is the
# wheel's, so it stays out of that component.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_onnxtrain_component COMPONENT onnxtrain_cpp)
set(_onnxtrain_targets onnxtrain)
if(SKBUILD)
  list(APPEND _onnxtrain_component EXCLUDE_FROM_ALL)
else()
  file(RELATIVE_PATH _onnxtrain_lib_from_bin ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(onnxtrain_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${_onnxtrain_lib_from_bin}")
  list(APPEND _onnxtrain_targets onnxtrain_cli)
endif()
set_target_properties(onnxtrain_cli PROPERTIES EXPORT_NAME cli)

install(TARGETS ${_onnxtrain_targets} EXPORT onnxtrainTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} ${_onnxtrain_component}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ${_onnxtrain_component}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} ${_onnxtrain_component}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/onnxtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${_onnxtrain_component})

set(_onnxtrain_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/onnxtrain)
install(EXPORT onnxtrainTargets NAMESPACE onnxtrain:: DESTINATION ${_onnxtrain_cmake_dir} ${_onnxtrain_component})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/onnxtrainConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/onnxtrainConfig.cmake
                              INSTALL_DESTINATION ${_onnxtrain_cmake_dir})
# 0.x releases may change the API between minor versions.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/onnxtrainConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/onnxtrainConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/onnxtrainConfigVersion.cmake
        DESTINATION ${_onnxtrain_cmake_dir} ${_onnxtrain_component})
