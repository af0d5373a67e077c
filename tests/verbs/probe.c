/* A thin verbs client for the emulator's tests, loaded with ctypes by peer.py.
 *
 * It calls libibverbs the way an application compiled against rdma-core does (including the
 * inline ibv_post_send / ibv_poll_cq / ibv_req_notify_cq that go through the context's ops
 * table), and hands plain integers back to Python. Objects are named by small handles.
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define N 256
static struct ibv_context *ctxs[N];
static struct ibv_pd *pds[N];
static struct ibv_comp_channel *chans[N];
static struct ibv_cq *cqs[N];
static struct ibv_qp *qps[N];
static struct ibv_mr *mrs[N];

static int slot(void **arr) {
    for (int i = 0; i < N; i++)
        if (!arr[i]) return i;
    return -ENOMEM;
}

int p_devices(char *out, int len) {
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return -errno;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i) strncat(out, ",", len - strlen(out) - 1);
        strncat(out, ibv_get_device_name(list[i]), len - strlen(out) - 1);
    }
    ibv_free_device_list(list);
    return n;
}

int p_open(const char *name) {
    int n = 0, h = slot((void **)ctxs);
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return -errno;
    if (h < 0) return h;
    for (int i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctxs[h] = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!ctxs[h]) return -ENODEV;
    pds[h] = ibv_alloc_pd(ctxs[h]);
    return pds[h] ? h : -errno;
}

int p_close(int c) {
    ibv_dealloc_pd(pds[c]);
    int rc = ibv_close_device(ctxs[c]);
    ctxs[c] = NULL;
    return rc;
}

int p_query_port(int c, int port, int *state, int *gid_tbl_len, int *link_layer) {
    struct ibv_port_attr a;
    int rc = ibv_query_port(ctxs[c], port, &a);
    *state = a.state;
    *gid_tbl_len = a.gid_tbl_len;
    *link_layer = a.link_layer;
    return rc;
}

int p_query_device(int c, int *phys_port_cnt, int *max_qp_wr) {
    struct ibv_device_attr a;
    int rc = ibv_query_device(ctxs[c], &a);
    *phys_port_cnt = a.phys_port_cnt;
    *max_qp_wr = a.max_qp_wr;
    return rc;
}

int p_query_gid_ex(int c, int port, int index, uint8_t *gid, int *type) {
    struct ibv_gid_entry e;
    int rc = ibv_query_gid_ex(ctxs[c], port, index, &e, 0);
    if (rc == 0) {
        memcpy(gid, e.gid.raw, 16);
        *type = e.gid_type;
    }
    return rc;
}

int p_query_gid(int c, int port, int index, uint8_t *gid) {
    union ibv_gid g;
    int rc = ibv_query_gid(ctxs[c], port, index, &g);
    memcpy(gid, g.raw, 16);
    return rc;
}

int p_cq(int c, int cqe, int with_channel) {
    int h = slot((void **)cqs);
    if (h < 0) return h;
    chans[h] = with_channel ? ibv_create_comp_channel(ctxs[c]) : NULL;
    cqs[h] = ibv_create_cq(ctxs[c], cqe, NULL, chans[h], 0);
    return cqs[h] ? h : -errno;
}

int p_destroy_cq(int q) {
    int rc = ibv_destroy_cq(cqs[q]);
    if (rc) return rc;
    if (chans[q]) ibv_destroy_comp_channel(chans[q]);
    cqs[q] = NULL;
    chans[q] = NULL;
    return 0;
}

int p_qp(int c, int cq, int max_send_wr, int max_sge) {
    int h = slot((void **)qps);
    if (h < 0) return h;
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = a.recv_cq = cqs[cq];
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = max_send_wr;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = max_sge;
    a.cap.max_recv_sge = 1;
    qps[h] = ibv_create_qp(pds[c], &a);
    return qps[h] ? h : -errno;
}

uint32_t p_qpn(int q) { return qps[q]->qp_num; }

int p_qp_state(int q) {
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr i;
    int rc = ibv_query_qp(qps[q], &a, IBV_QP_STATE, &i);
    return rc ? -rc : (int)a.qp_state;
}

/* RESET -> INIT -> RTR -> RTS, as Mooncake's endpoint does it. */
int p_connect(int q, uint32_t remote_qpn, const uint8_t *dgid, int access) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RESET;
    int rc = ibv_modify_qp(qps[q], &a, IBV_QP_STATE);
    if (rc) return -rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    rc = ibv_modify_qp(qps[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_ACCESS_FLAGS);
    if (rc) return -100 - rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
    a.ah_attr.grh.sgid_index = 3;
    a.ah_attr.grh.hop_limit = 16;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.dest_qp_num = remote_qpn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    rc = ibv_modify_qp(qps[q], &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER |
                                       IBV_QP_AV | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN |
                                       IBV_QP_RQ_PSN);
    if (rc) return -200 - rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    rc = ibv_modify_qp(qps[q], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    return rc ? -300 - rc : 0;
}

/* One state change with exactly `mask` (for the state-machine tests). */
int p_modify(int q, int state, int mask) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = state;
    a.port_num = 1;
    a.path_mtu = IBV_MTU_1024;
    a.ah_attr.port_num = 1;
    return ibv_modify_qp(qps[q], &a, mask);
}

int p_destroy_qp(int q) {
    int rc = ibv_destroy_qp(qps[q]);
    if (!rc) qps[q] = NULL;
    return rc;
}

int p_reg(int c, uint64_t addr, uint64_t len, int access, uint32_t *key) {
    int h = slot((void **)mrs);
    if (h < 0) return h;
    mrs[h] = ibv_reg_mr(pds[c], (void *)(uintptr_t)addr, len, access);
    if (!mrs[h]) return -errno;
    *key = mrs[h]->rkey;
    return h;
}

int p_dereg(int m) {
    int rc = ibv_dereg_mr(mrs[m]);
    mrs[m] = NULL;
    return rc;
}

/* Posts `count` WRs in one list: wr_id, wr_id+1, ...; each moves `len` bytes at successive
 * offsets (stride = len). Returns ibv_post_send's result; *bad is bad_wr's wr_id. */
int p_post(int q, int opcode, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey,
           uint64_t raddr, uint32_t rkey, int signaled, int count, uint64_t *bad) {
    struct ibv_send_wr *wrs = calloc(count, sizeof *wrs);
    struct ibv_sge *sges = calloc(count, sizeof *sges);
    for (int i = 0; i < count; i++) {
        sges[i].addr = laddr + (uint64_t)i * len;
        sges[i].length = len;
        sges[i].lkey = lkey;
        wrs[i].wr_id = wr_id + i;
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
        wrs[i].opcode = opcode ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
        wrs[i].send_flags = signaled ? IBV_SEND_SIGNALED : 0;
        wrs[i].wr.rdma.remote_addr = raddr + (uint64_t)i * len;
        wrs[i].wr.rdma.rkey = rkey;
        wrs[i].next = i + 1 < count ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr *bad_wr = NULL;
    int rc = ibv_post_send(qps[q], wrs, &bad_wr);
    *bad = bad_wr ? bad_wr->wr_id : UINT64_MAX;
    free(wrs);
    free(sges);
    return rc;
}

/* A WR gathering from `nsge` local pieces of `len` bytes each (laddr, laddr + 2*len, ...: every
 * other piece) into one contiguous remote range. */
int p_post_gather(int q, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey, int nsge,
                  uint64_t raddr, uint32_t rkey) {
    struct ibv_sge sges[16];
    for (int i = 0; i < nsge; i++) {
        sges[i].addr = laddr + (uint64_t)i * 2 * len;
        sges[i].length = len;
        sges[i].lkey = lkey;
    }
    struct ibv_send_wr wr, *bad_wr = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.sg_list = sges;
    wr.num_sge = nsge;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qps[q], &wr, &bad_wr);
}

int p_poll(int q, int max, uint64_t *wr_id, int *status, int *opcode, uint32_t *qpn,
           uint32_t *len) {
    struct ibv_wc wc[64];
    int n = ibv_poll_cq(cqs[q], max < 64 ? max : 64, wc);
    for (int i = 0; i < n; i++) {
        wr_id[i] = wc[i].wr_id;
        status[i] = wc[i].status;
        opcode[i] = wc[i].opcode;
        qpn[i] = wc[i].qp_num;
        len[i] = wc[i].byte_len;
    }
    return n;
}

int p_notify(int q) { return ibv_req_notify_cq(cqs[q], 0); }

/* Polls CQ q n times in this thread; returns the completions found, and in *blocked how many
 * times the thread blocked meanwhile (voluntary context switches: a yield is not one). */
int p_empty_polls(int q, int n, long *blocked) {
    struct ibv_wc wc[16];
    struct rusage before, after;
    int got = 0;
    getrusage(RUSAGE_THREAD, &before);
    for (int i = 0; i < n; i++) got += ibv_poll_cq(cqs[q], 16, wc);
    getrusage(RUSAGE_THREAD, &after);
    *blocked = after.ru_nvcsw - before.ru_nvcsw;
    return got;
}

/* Waits up to timeout_ms for a completion event on CQ q's channel; 1 if one came (acked). */
int p_cq_event(int q, int timeout_ms) {
    struct pollfd p = {.fd = chans[q]->fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0) return 0;
    struct ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(chans[q], &cq, &ctx)) return -errno;
    ibv_ack_cq_events(cq, 1);
    return cq == cqs[q] ? 1 : -EINVAL;
}

/* Waits up to timeout_ms for an async event on context c; 1 with its type and element. */
int p_async(int c, int timeout_ms, int *type, uint32_t *qpn, int *port) {
    struct pollfd p = {.fd = ctxs[c]->async_fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0) return 0;
    struct ibv_async_event e;
    if (ibv_get_async_event(ctxs[c], &e)) return -errno;
    *type = e.event_type;
    *qpn = 0;
    *port = 0;
    if (e.event_type == IBV_EVENT_QP_FATAL || e.event_type == IBV_EVENT_QP_REQ_ERR ||
        e.event_type == IBV_EVENT_QP_ACCESS_ERR)
        *qpn = e.element.qp->qp_num;
    else if (e.event_type != IBV_EVENT_CQ_ERR && e.event_type != IBV_EVENT_DEVICE_FATAL)
        *port = e.element.port_num;
    ibv_ack_async_event(&e);
    return 1;
}

int p_fork_init(void) { return ibv_fork_init(); }
