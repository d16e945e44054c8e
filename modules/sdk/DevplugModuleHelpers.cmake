# devplug_add_module(<name> <source>...)
#
# Builds a devplug hardware module: a MODULE library named <name>.so (no
# "lib" prefix, as module = "<name>" expects), compiled against the
# devplug::module headers with hidden visibility so that the ABI entry point
# (DEVPLUG_MODULE_EXPORT) is its only exported symbol (a linker version
# script also hides the C++ template instances that default visibility
# would leak from libstdc++ headers), linked with
# --no-undefined so a missing symbol fails the build instead of the load,
# and installed into DEVPLUG_MODULE_DIR.
function(devplug_add_module name)
  if(NOT ARGN)
    message(FATAL_ERROR "devplug_add_module(${name}): no sources given")
  endif()
  add_library(${name} MODULE ${ARGN})
  target_link_libraries(${name} PRIVATE devplug::module)
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  set(map "${CMAKE_CURRENT_BINARY_DIR}/${name}.exports.map")
  file(WRITE "${map}" "{\n  global: devplug_module_entry_v1;\n  local: *;\n};\n")
  target_link_options(${name} PRIVATE "-Wl,--version-script=${map}")
  # clang links a sanitizer's runtime into the executable alone, which
  # exports it: a module built with -fsanitize finds those symbols when it
  # is loaded, not when it is linked (devplug's own sanitizer builds).
  if(NOT (DEVPLUG_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang"))
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${map}")
  if(DEFINED DEVPLUG_MODULE_DIR)
    # DEVPLUG_MODULE_COMPONENT (optional): the install component to use.
    set(component)
    if(DEFINED DEVPLUG_MODULE_COMPONENT)
      set(component COMPONENT ${DEVPLUG_MODULE_COMPONENT})
    endif()
    install(TARGETS ${name} LIBRARY DESTINATION "${DEVPLUG_MODULE_DIR}" ${component})
  endif()
endfunction()
