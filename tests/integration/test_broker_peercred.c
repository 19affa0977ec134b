/* test_broker_peercred.c — broker.fd hands the pool only to processes of its own uid
 * (SO_PEERCRED): a process switched to another uid reaches the socket (dir and socket
 * opened up by the test) and gets no descriptor; the broker keeps serving its own uid.
 * Needs root to switch uid; skips (exit 77) otherwise. */
#include "broker_harness.h"
#include "common/err.h"
#include "common/log.h"
#include "common/fdpass.h"
#include "common/pool_attach.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OTHER_UID 65534 /* nobody */

START_TEST(test_other_uid_refused)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    ck_assert_int_eq(chmod(h.dir, 0711), 0);     /* let the other uid reach the socket */
    ck_assert_int_eq(chmod(h.fd_path, 0666), 0); /* so only SO_PEERCRED stands between */
    pid_t c = fork();
    if (c == 0) {
        if (setgid(OTHER_UID) || setuid(OTHER_UID))
            _exit(3);
        /* raw client: pool_attach would itself refuse a broker of another uid */
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(h.fd_path) >= sizeof(sa.sun_path))
            _exit(4);
        memcpy(sa.sun_path, h.fd_path, strlen(h.fd_path) + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            _exit(2);
        char buf[256];
        int fds[FDPASS_FDS_MAX];
        size_t len, nfd;
        fdpass_set_timeout(fd, 5000);
        int rc = fdpass_recv(fd, buf, sizeof(buf), &len, fds, FDPASS_FDS_MAX, &nfd);
        _exit(rc == -EPIPE ? 0 : 1); /* 0: closed by the broker without a frame */
    }
    int st;
    ck_assert_int_eq(waitpid(c, &st, 0), c);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "other-uid attach: status %d", st);
    struct mem_pool mp;
    ck_assert_int_eq(pool_attach(h.fd_path, NULL, &mp), 0); /* our uid: served */
    mem_pool_release(&mp);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

int main(void)
{
    log_setup("test_broker_peercred", LOG_LEVEL_WARN);
    if (geteuid() != 0) {
        printf("test_broker_peercred: skipped: needs root to switch to another uid\n");
        return 77;
    }
    Suite *s = suite_create("broker_peercred");
    TCase *tc = tcase_create("peercred");
    tcase_add_test(tc, test_other_uid_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
