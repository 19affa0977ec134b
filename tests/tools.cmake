# tests/tools.cmake — owned by the TOOLS/SDK area: protocol (client_msg, admin_msg),
# libkvd-client, kvctl, kvd-bench, systemd units.
kvd_unit_test(test_client_msg SOURCES unit/test_client_msg.c LIBS kvdproto TIMEOUT 60)
kvd_unit_test(test_admin_msg SOURCES unit/test_admin_msg.c LIBS kvdproto TIMEOUT 60)
kvd_unit_test(test_bench_workload SOURCES unit/test_bench_workload.c LIBS kvdtoolutil TIMEOUT 120)
kvd_unit_test(test_kvctl_json SOURCES unit/test_kvctl_json.c LIBS kvdtoolutil TIMEOUT 60)
# Real kvd (+ broker + worker) on real sockets; skips (77) when kvd is not built.
kvd_unit_test(test_kvctl SOURCES integration/test_kvctl.c LIBS kvdclient TIMEOUT 600
  LABELS integration)
# systemd-analyze verify on the units (skips with 77 when systemd-analyze is missing).
add_test(NAME test_systemd_units COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_systemd_units.sh
  ${CMAKE_BINARY_DIR}/systemd-test)
set_tests_properties(test_systemd_units PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
# The SDK as installed: example.c against the build tree and an installed prefix.
set(KVD_EXAMPLE_FLAGS "")
if(KVD_SANITIZE)
  set(KVD_EXAMPLE_FLAGS "-fsanitize=address,undefined")
endif()
add_test(NAME test_sdk_install COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_sdk_install.sh
  ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} "${KVD_EXAMPLE_FLAGS}")
set_tests_properties(test_sdk_install PROPERTIES TIMEOUT 120 ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
