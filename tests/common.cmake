# common/ and proto/wire: error names, the msgpack envelope and its pre-check.
kvd_unit_test(test_wire SOURCES unit/test_wire.c LIBS kvdproto)
