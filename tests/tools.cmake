# tests/tools.cmake — owned by the TOOLS/SDK area: protocol (client_msg, admin_msg),
# libkvd-client, kvctl, kvd-bench, systemd units.
kvd_unit_test(test_client_msg SOURCES unit/test_client_msg.c LIBS kvdproto TIMEOUT 60)
kvd_unit_test(test_admin_msg SOURCES unit/test_admin_msg.c LIBS kvdproto TIMEOUT 60)
kvd_unit_test(test_bench_workload SOURCES unit/test_bench_workload.c LIBS kvdtoolutil TIMEOUT 120)
