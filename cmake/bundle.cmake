# `cmake --build BUILD --target bundle`: BUILD/bundle, zerotrain with every non-system shared
# library it needs and the Open MPI runtime, relocatable (cmake/make_bundle.sh; docs/gpu.md
# "Relocatable bundle"). The CUDA toolkit libraries stay out unless ZEROTRAIN_BUNDLE_CUDA is ON.
option(ZEROTRAIN_BUNDLE_CUDA "bundle target: include the CUDA toolkit libraries (large)" OFF)
set(ZT_BUNDLE_FLAGS "")
if(ZEROTRAIN_BUNDLE_CUDA)
  set(ZT_BUNDLE_FLAGS --include-cuda)
endif()
add_custom_target(bundle
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/make_bundle.sh ${ZT_BUNDLE_FLAGS} $<TARGET_FILE:zerotrain>
          ${CMAKE_BINARY_DIR}/bundle
  COMMENT "Assembling the relocatable bundle ${CMAKE_BINARY_DIR}/bundle"
  VERBATIM USES_TERMINAL)
add_dependencies(bundle zerotrain)
