/* A build-shaped fixture for the wedged-destroy detection of the verbs-boundary scheduler: the
 * destroy-vs-event shape Mooncake 0.3.13/0.3.14 show (docs/rdma-exploration.md, "Findings").
 *
 * A monitor thread reads the QP's async event; the main thread, holding the "endpoint store"
 * lock, destroys that QP once the event was read. ibv_destroy_qp returns only after the event is
 * acknowledged (rdma-core, and the emulator, wait for it).
 *
 *   destroy_vs_event DEVICE locked    the defect: the monitor takes the store lock before it
 *                                     acknowledges, so the destroy and the monitor wait for
 *                                     each other for ever
 *   destroy_vs_event DEVICE unlocked  the fix: the monitor acknowledges first
 *
 * Prints "ready qp=<qpn>" once set up and waits for a line on stdin (the controller turns the
 * scheduling points on and raises the QP's fatal event meanwhile), then "destroyed" and exits 0.
 */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t store = PTHREAD_MUTEX_INITIALIZER;
static atomic_int event_read;
static int locked;
static struct ibv_context *ctx;

static void die(const char *what) {
    fprintf(stderr, "destroy_vs_event: %s failed\n", what);
    exit(2);
}

static void *monitor(void *unused) {
    (void)unused;
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) die("ibv_get_async_event");
    atomic_store(&event_read, 1);
    if (locked) pthread_mutex_lock(&store); /* the defect: the lock before the ack */
    ibv_ack_async_event(&ev);
    if (!locked) pthread_mutex_lock(&store);
    pthread_mutex_unlock(&store);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "locked") && strcmp(argv[2], "unlocked"))) {
        fprintf(stderr, "usage: destroy_vs_event DEVICE locked|unlocked\n");
        return 2;
    }
    locked = !strcmp(argv[2], "locked");
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; i < n && !ctx; i++)
        if (!strcmp(ibv_get_device_name(list[i]), argv[1])) ctx = ibv_open_device(list[i]);
    if (!ctx) die("ibv_open_device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !cq) die("ibv_alloc_pd/ibv_create_cq");
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &a);
    if (!qp) die("ibv_create_qp");
    pthread_t t;
    if (pthread_create(&t, NULL, monitor, NULL)) die("pthread_create");
    printf("ready qp=%u\n", qp->qp_num);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 2;
    pthread_mutex_lock(&store);
    while (!atomic_load(&event_read)) sched_yield();
    if (ibv_destroy_qp(qp)) die("ibv_destroy_qp");
    pthread_mutex_unlock(&store);
    printf("destroyed\n");
    fflush(stdout);
    pthread_join(t, NULL);
    return 0;
}
