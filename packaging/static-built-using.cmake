# CPack post-build script: devplugd links Debian's static gRPC, Abseil,
# Protocol Buffers, c-ares and re2 (DEVPLUG_STATIC_GRPC). The daemon's DEB
# names their source packages and versions in Static-Built-Using (Debian
# policy 7.8), so that a security update of any of them can be traced to
# devplug; CPack cannot write that field, so it is added here.
if(NOT CPACK_DEVPLUG_STATIC_BUILT_USING)
  return()
endif()
foreach(file IN LISTS CPACK_PACKAGE_FILES)
  get_filename_component(name "${file}" NAME)
  if(NOT name MATCHES "^devplug_.*\\.deb$")
    continue()
  endif()
  set(tree "${file}.tree")
  file(REMOVE_RECURSE "${tree}")
  execute_process(COMMAND dpkg-deb -R "${file}" "${tree}" COMMAND_ERROR_IS_FATAL ANY)
  file(READ "${tree}/DEBIAN/control" control)
  string(STRIP "${control}" control)
  file(WRITE "${tree}/DEBIAN/control"
       "${control}\nStatic-Built-Using: ${CPACK_DEVPLUG_STATIC_BUILT_USING}\n")
  execute_process(COMMAND dpkg-deb --root-owner-group -Zxz -b "${tree}" "${file}"
                  OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
  file(REMOVE_RECURSE "${tree}")
endforeach()
