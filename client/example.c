/* example.c — the smallest kvd client: stream a completion to stdout.
 * cc example.c -lkvd-client -o example && ./example "Once upon a time" */
#include <kvd_client.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    struct kvd_client *c;
    int rc = kvd_connect(NULL, 2000, &c);          /* default runtime dir, 2 s */
    if (rc) {
        fprintf(stderr, "example: cannot connect to kvd: %s\n", kvd_strerror(rc));
        return 1;
    }
    struct kvd_params p = KVD_PARAMS_INIT;
    p.prompt = argc > 1 ? argv[1] : "Once upon a time";
    p.max_tokens = 64;
    p.temperature = 0;                             /* greedy */
    uint64_t id;
    struct kvd_event ev;
    rc = kvd_submit(c, &p, &id);
    while (rc == 0 && (rc = kvd_next_event(c, &ev, 10000)) == 0) {
        fwrite(ev.text, 1, ev.text_len, stdout);   /* TOKENS: new text; DONE: "" */
        if (ev.type == KVD_EVENT_DONE) {
            rc = ev.code;                          /* 0 for stop/length */
            break;
        }
    }
    printf("\n");
    if (rc)
        fprintf(stderr, "example: %s\n", kvd_strerror(rc));
    kvd_close(c);
    return rc ? 1 : 0;
}
