# tests/tools.cmake — owned by the TOOLS/SDK area: protocol (client_msg, admin_msg),
# libkvd-client, kvctl, kvd-bench, systemd units.
kvd_unit_test(test_client_msg SOURCES unit/test_client_msg.c LIBS kvdproto TIMEOUT 60)
kvd_unit_test(test_admin_msg SOURCES unit/test_admin_msg.c LIBS kvdproto TIMEOUT 60)
kvd_unit_test(test_bench_workload SOURCES unit/test_bench_workload.c LIBS kvdtoolutil TIMEOUT 120)
# Real kvd (+ broker + worker) on real sockets; skips (77) when kvd is not built.
kvd_unit_test(test_kvctl SOURCES integration/test_kvctl.c LIBS kvdclient TIMEOUT 600
  LABELS integration)
