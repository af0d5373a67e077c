/* A build-shaped fixture for the verbs-boundary scheduler (issue #25): the smallest transfer
 * engine with the CO RFC's stale-completion hazard.
 *
 * One slice is written to a peer QP on endpoint A; the worker then retires A (moves its QP to
 * ERR, as an engine replacing an endpoint does) and re-posts the slice on endpoint B. A poller
 * thread polls the one CQ both endpoints share and finishes the slice with the first completion
 * it credits to the slice's current attempt.
 *
 *   stale_wr_id DEVICE reuse    the defect: both attempts carry the same wr_id, so A's completion
 *                               arriving after the retry is credited to attempt 2
 *   stale_wr_id DEVICE tagged   the fix: wr_id = slice | attempt << 32; a completion of an older
 *                               attempt is stale and dropped
 *
 * It prints "ready" once set up and waits for a line on stdin (the controller turns the
 * scheduling points on in between), then "final qp=<qpn> wr_id=<wr_id> status=<status>" naming
 * the completion that finished the slice, then "done" once both threads ended; it waits for
 * another line (the controller reads the emulator's logs meanwhile) and tears down. Exit 0, or
 * 2 when something failed outright.
 */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLICE 5ull
#define LEN 64

static struct ibv_cq *cq;
static struct ibv_qp *ep_a, *ep_b, *peer_a, *peer_b;
static struct ibv_mr *src_mr, *dst_mr;
static char src[LEN], dst[LEN];
static int tagged;
static atomic_int final_state; /* 0: in flight, 1: done, 2: failed */
static atomic_ulong current_attempt = 1;

static void die(const char *what) {
    fprintf(stderr, "stale_wr_id: %s failed\n", what);
    exit(2);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd) {
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &a);
    if (!qp) die("ibv_create_qp");
    return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t remote, const union ibv_gid *gid) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS))
        die("INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.ah_attr.grh.dgid = *gid;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 16;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.dest_qp_num = remote;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
        die("RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("RTS");
}

static void post_attempt(struct ibv_qp *qp, uint64_t attempt) {
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = LEN, .lkey = src_mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = tagged ? SLICE | attempt << 32 : SLICE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)dst;
    wr.wr.rdma.rkey = dst_mr->rkey;
    if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
}

static void *worker(void *unused) {
    (void)unused;
    post_attempt(ep_a, 1);
    if (atomic_load(&final_state)) return NULL; /* attempt 1 already finished the slice */
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR}; /* endpoint A is retired */
    if (ibv_modify_qp(ep_a, &a, IBV_QP_STATE)) die("retire A");
    atomic_store(&current_attempt, 2);
    post_attempt(ep_b, 2);
    return NULL;
}

static void *poller(void *unused) {
    (void)unused;
    double deadline = now_s() + 60;
    struct ibv_wc wc[4];
    while (!atomic_load(&final_state)) {
        if (now_s() > deadline) die("waiting for the slice's completion");
        int n = ibv_poll_cq(cq, 4, wc);
        if (n < 0) die("ibv_poll_cq");
        for (int i = 0; i < n && !atomic_load(&final_state); i++) {
            uint64_t attempt = wc[i].wr_id >> 32;
            if ((wc[i].wr_id & 0xffffffffull) != SLICE) continue;
            if (tagged && attempt != atomic_load(&current_attempt)) {
                printf("stale qp=%u wr_id=%#llx status=%s dropped\n", wc[i].qp_num,
                       (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
                continue;
            }
            printf("final qp=%u wr_id=%#llx status=%s\n", wc[i].qp_num,
                   (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
            fflush(stdout);
            atomic_store(&final_state, wc[i].status == IBV_WC_SUCCESS ? 1 : 2);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "reuse") && strcmp(argv[2], "tagged"))) {
        fprintf(stderr, "usage: stale_wr_id DEVICE reuse|tagged\n");
        return 64;
    }
    tagged = strcmp(argv[2], "tagged") == 0;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;
    for (int i = 0; list && i < n; i++)
        if (!strcmp(ibv_get_device_name(list[i]), argv[1])) ctx = ibv_open_device(list[i]);
    if (!ctx) die("opening the device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    if (!pd || !(cq = ibv_create_cq(ctx, 64, NULL, NULL, 0))) die("PD/CQ");
    src_mr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
    dst_mr = ibv_reg_mr(pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!src_mr || !dst_mr) die("ibv_reg_mr");
    memset(src, 0x5a, LEN);
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 0, &gid)) die("ibv_query_gid");
    ep_a = make_qp(pd), peer_a = make_qp(pd), ep_b = make_qp(pd), peer_b = make_qp(pd);
    connect_qp(ep_a, peer_a->qp_num, &gid);
    connect_qp(peer_a, ep_a->qp_num, &gid);
    connect_qp(ep_b, peer_b->qp_num, &gid);
    connect_qp(peer_b, ep_b->qp_num, &gid);
    printf("ready a=%u b=%u\n", ep_a->qp_num, ep_b->qp_num);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) die("reading the go line");
    pthread_t w, p;
    pthread_create(&p, NULL, poller, NULL);
    pthread_create(&w, NULL, worker, NULL);
    pthread_join(w, NULL);
    pthread_join(p, NULL);
    printf("done\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) die("reading the exit line");
    if (atomic_load(&final_state) != 1) return 2;
    ibv_destroy_qp(ep_a);
    ibv_destroy_qp(ep_b);
    ibv_destroy_qp(peer_a);
    ibv_destroy_qp(peer_b);
    ibv_dereg_mr(src_mr);
    ibv_dereg_mr(dst_mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return 0;
}
