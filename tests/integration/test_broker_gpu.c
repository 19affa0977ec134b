/* test_broker_gpu.c — the cuda backends end to end (label gpu): a kvd-broker process
 * creates a device pool (cuda-vmm: cuMemCreate chunks handed over as POSIX fds; cuda-ipc:
 * cudaMalloc arenas handed over as IPC handles), this process and a spawned reader
 * process attach it through broker.fd and see each other's device writes, and
 * --backend auto picks cuda. Skips (exit 77) with the reason when no GPU is usable.
 * Runs in Check's no-fork mode: CUDA must not be used across fork(). */
#include "broker_harness.h"
#include "common/err.h"
#include "common/log.h"
#include "common/pool_attach.h"

#include <check.h>
#include <nanomsg/nn.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define GPU_POOL_BYTES "2560M" /* 3 chunks of <= 1 GiB: multi-chunk mapping */
#define PAT_PARENT 0x3c /* written by this process into page 7 */
#define PAT_READER 0xc3 /* written by the reader into page 8 */

static int page_has(const struct mem_pool *mp, uint32_t page, uint8_t pat)
{
    size_t n = mp->desc.geom.page_bytes;
    uint8_t *buf = malloc(n);
    int ok = buf && mem_cuda_copy(buf, mem_pool_page_ptr(mp, page), n) == 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = buf[i] == pat;
    free(buf);
    return ok;
}

static int page_fill(const struct mem_pool *mp, uint32_t page, uint8_t pat)
{
    size_t n = mp->desc.geom.page_bytes;
    uint8_t *buf = malloc(n);
    if (!buf)
        return -1;
    memset(buf, pat, n);
    int rc = mem_cuda_copy(mem_pool_page_ptr(mp, page), buf, n);
    free(buf);
    return rc;
}

/* Reader process: attach, check the parent's page, write its own. */
static int reader_main(const char *fd_path, uint32_t backend)
{
    struct mem_pool mp;
    struct pool_desc e;
    memset(&e, 0, sizeof(e));
    e.backend = backend;
    if (pool_attach(fd_path, &e, &mp))
        return 10;
    if (!mp.device || !page_has(&mp, 7, PAT_PARENT) ||
        !page_has(&mp, mp.desc.num_pages - 1, PAT_PARENT)) /* the last chunk */
        return 11;
    if (page_fill(&mp, 8, PAT_READER))
        return 12;
    mem_pool_release(&mp);
    return 0;
}

static void run_backend(const char *name, uint32_t backend)
{
    struct bh h;
    int st = 0;
    const char *extra[] = {"--backend", name, "--pool-bytes", GPU_POOL_BYTES, NULL};
    ck_assert_msg(bh_start(&h, extra, &st) == 0, "broker with backend %s exited %d", name, st);
    struct mem_pool mp;
    struct pool_desc e;
    memset(&e, 0, sizeof(e));
    e.backend = backend;
    ck_assert_int_eq(pool_attach(h.fd_path, &e, &mp), 0);
    ck_assert(mp.device);
    ck_assert_uint_eq(mp.desc.pool_bytes % (2u << 20), 0);
    ck_assert_uint_eq(mp.desc.n_chunks, 3);
    ck_assert_int_eq(page_fill(&mp, 7, PAT_PARENT), 0);
    ck_assert_int_eq(page_fill(&mp, mp.desc.num_pages - 1, PAT_PARENT), 0);
    ck_assert(page_has(&mp, 9, 0)); /* the broker zeroed the pool */
    char self[64], bstr[16];
    snprintf(self, sizeof(self), "/proc/%d/exe", (int)getpid());
    snprintf(bstr, sizeof(bstr), "%u", backend);
    char *argv[] = {self, "reader", h.fd_path, bstr, NULL};
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, self, NULL, NULL, argv, environ), 0);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader status %d", st);
    ck_assert(page_has(&mp, 8, PAT_READER));
    int s = bh_connect(&h);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_str_eq(bs.backend, mem_backend_name(backend));
    nn_close(s);
    mem_pool_release(&mp);
    ck_assert_int_eq(bh_stop(&h), 0);
}

START_TEST(test_cuda_vmm) { run_backend("cuda-vmm", MEM_BACKEND_CUDA_VMM); }
END_TEST

START_TEST(test_cuda_ipc) { run_backend("cuda-ipc", MEM_BACKEND_CUDA_IPC); }
END_TEST

START_TEST(test_auto_picks_cuda)
{
    struct bh h;
    const char *extra[] = {"--backend", "auto", "--pool-bytes", "64M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    int s = bh_connect(&h);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_msg(strncmp(bs.backend, "cuda", 4) == 0, "auto chose '%s'", bs.backend);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

int main(int argc, char **argv)
{
    log_setup("test_broker_gpu", LOG_LEVEL_WARN);
    if (argc == 4 && strcmp(argv[1], "reader") == 0)
        return reader_main(argv[2], (uint32_t)atoi(argv[3]));
    char why[160];
    if (!mem_cuda_available(why, sizeof(why))) {
        printf("test_broker_gpu: skipped: %s\n", why);
        return 77;
    }
    Suite *s = suite_create("broker_gpu");
    TCase *tc = tcase_create("gpu");
    tcase_add_test(tc, test_cuda_vmm);
    tcase_add_test(tc, test_cuda_ipc);
    tcase_add_test(tc, test_auto_picks_cuda);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
