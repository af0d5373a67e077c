/* Emulated libibverbs: internal types shared by the C files of this library.
 *
 * One process under test sees the devices described by a sysfs-like tree in the run directory
 * ($MC_VERBS_RUN_DIR/sys/class/infiniband/<dev>/...). What several processes must agree on
 * (port state, GIDs, every QP and MR on the host) lives in one shared file, verbs.shm, in that
 * directory; everything else (CQs, send queues, held completions) is private to the process.
 * RDMA WRITE and READ copy bytes straight between the processes' registered memory with
 * process_vm_writev/readv, after checking the target MR's key, bounds and access flags.
 */
#ifndef MC_VERBS_EMU_H
#define MC_VERBS_EMU_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

#define EMU_MAX_DEVS 16
#define EMU_MAX_PORTS 2
#define EMU_MAX_GIDS 16
#define EMU_MAX_QPS 16384
#define EMU_MAX_MRS 16384
#define EMU_QPN_BASE 0x100
#define EMU_SHM_MAGIC 0x6d632d7665726273ull /* "mc-verbs" */
#define EMU_SHM_VERSION 1

/* ------------------------------------------------------------------ shared state (verbs.shm) */

struct emu_owner {
    int32_t pid;
    uint64_t start; /* process start time (clock ticks since boot): a reused pid is not the owner */
};

struct emu_shm_port {
    int32_t state;      /* enum ibv_port_state */
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint16_t lid;
    int32_t ngids;
    union ibv_gid gid[EMU_MAX_GIDS];
    uint8_t gid_type[EMU_MAX_GIDS]; /* enum ibv_gid_type */
    uint32_t gen;                   /* bumped on every state or GID change */
    int32_t last_event;             /* the event that change stands for (enum ibv_event_type) */
};

struct emu_shm_dev {
    char name[IBV_SYSFS_NAME_MAX];
    uint64_t guid; /* network byte order, as ibv_get_device_guid returns it */
    int32_t nports;
    struct emu_shm_port port[EMU_MAX_PORTS];
};

struct emu_shm_qp {
    uint32_t used;
    uint32_t qpn;
    struct emu_owner owner;
    int16_t dev;
    uint8_t port;
    int32_t state; /* enum ibv_qp_state */
    uint32_t pd;
    uint32_t access; /* qp_access_flags */
    uint32_t dest_qpn;
    union ibv_gid dgid;
};

struct emu_shm_mr {
    uint32_t used;
    uint32_t key; /* lkey == rkey: (slot + 1) << 8 | generation byte */
    struct emu_owner owner;
    int16_t dev;
    uint32_t pd;
    uint64_t addr; /* virtual address in the owner */
    uint64_t iova; /* address remote peers use */
    uint64_t length;
    uint32_t access;
};

struct emu_shm {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    pthread_mutex_t lock; /* process-shared and robust: a holder that dies does not wedge the host */
    uint32_t ndevs;
    struct emu_shm_dev dev[EMU_MAX_DEVS];
    uint32_t next_pd;
    uint32_t qp_cursor; /* slots are handed out round robin, so a QPN is reused late */
    uint32_t mr_cursor;
    uint8_t mr_gen[EMU_MAX_MRS];
    struct emu_shm_qp qp[EMU_MAX_QPS];
    struct emu_shm_mr mr[EMU_MAX_MRS];
};

/* ----------------------------------------------------------------------- process-local objects */

struct emu_device {
    struct ibv_device dev; /* first: the application holds &dev */
    int index;
};

struct emu_context {
    struct ibv_context ctx; /* first */
    int dev;
    int async_wr; /* write end of ctx.async_fd's pipe */
    atomic_int fatal;
    uint32_t seen_gen[EMU_MAX_PORTS];
    _Atomic int32_t event_reader; /* the thread that last called ibv_get_async_event on it */
    struct emu_context *next;
};

struct emu_pd {
    struct ibv_pd pd;
    uint32_t id;
};

struct emu_mr {
    struct ibv_mr mr;
    int slot;
};

struct emu_channel {
    struct ibv_comp_channel ch;
    int wr_fd;
};

/* A completion as the emulator keeps it: the work completion plus where it came from, so polling
 * it can retire the send-queue slots it covers. */
struct emu_cqe {
    struct ibv_wc wc;
    int qp_slot;
    uint32_t qp_gen;
    uint64_t seq;
    int opcode;     /* enum ibv_wr_opcode of the WR */
    uint64_t laddr; /* its first local address (hold rules may match on it) */
};

struct emu_cq {
    struct ibv_cq cq; /* first */
    pthread_mutex_t lock;
    struct emu_cqe *ring;
    int cap, head, count;
    int armed;
    int dev;
    uint32_t id;
    int nqps;
    int overrun;
    uint64_t pushed, polled, overruns;
    uint32_t comp_reported, async_reported; /* events handed out, awaiting ack */
    struct emu_cq *next;
};

enum emu_wqe_hold { WQE_FREE_RUN = 0, WQE_STALLED, WQE_RELEASED };

struct emu_wqe {
    uint64_t seq;
    uint64_t wr_id;
    int opcode;
    unsigned send_flags;
    int num_sge;
    uint64_t remote_addr;
    uint32_t rkey;
    uint64_t due_ns;  /* chaos delay: not executed before this */
    int hold;         /* enum emu_wqe_hold */
    int forced;       /* release chose a status */
    enum ibv_wc_status forced_status;
    struct ibv_sge *sge; /* max_send_sge entries */
    uint8_t *inline_data; /* max_inline bytes: IBV_SEND_INLINE copies the payload at post time */
    uint32_t inline_len;
};

struct emu_qp {
    struct ibv_qp qp; /* first */
    pthread_mutex_t lock;
    int slot;
    uint32_t gen;
    int dev;
    uint8_t port;
    struct emu_cq *scq, *rcq;
    uint32_t pd;
    uint32_t cap, max_sge, max_recv_wr, max_recv_sge, max_inline;
    int sq_sig_all;
    struct emu_wqe *ring;
    uint64_t exec, tail; /* ring positions; the retired head lives in emu_global.sq_head */
    enum ibv_qp_state state;
    uint32_t access, dest_qpn;
    union ibv_gid dgid;
    struct ibv_qp_attr attr; /* what modify_qp was given, for query_qp */
    uint64_t *recv_ring; /* wr_ids of posted receives: only flushed, no SEND is emulated */
    uint64_t recv_head, recv_tail;
    int pending; /* counted in g.pending: WRs wait for a delay or a stalled hold */
    uint64_t posted, executed, flushed, errors, bytes, cqes;
    uint64_t posted_in_err; /* WRs posted while the QP was in ERR (they flush at once) */
    uint64_t posted_after_retire; /* of those, after the application moved it to ERR itself */
    uint64_t err_ns;        /* when it entered ERR (0: never) */
    int app_err;            /* the application moved it to ERR itself (ibv_modify_qp) */
    uint32_t async_reported;
    _Atomic int32_t event_reader; /* the thread that read its last async event (0: none yet) */
    struct emu_qp *next;
};

/* ------------------------------------------------------------------------------ process state */

struct emu_global {
    char run_dir[512];
    int enabled;          /* MC_VERBS_RUN_DIR set and the tree readable */
    struct emu_shm *shm;
    struct emu_owner self;
    int ndevs;
    struct emu_device devs[EMU_MAX_DEVS];
    pthread_mutex_t objects; /* lifetime of contexts, CQs and QPs (outermost lock) */
    struct emu_context *contexts;
    struct emu_cq *cqs;
    struct emu_qp *qps;
    struct emu_qp *qp_by_slot[EMU_MAX_QPS];
    _Atomic uint64_t sq_head[EMU_MAX_QPS]; /* retired send-queue position per QP slot */
    _Atomic uint32_t slot_gen[EMU_MAX_QPS];
    atomic_int pending; /* QPs with WRs waiting for a chaos delay or a stalled hold */
    uint32_t next_cq_id;
    int fork_init;
};

extern struct emu_global g;

/* Lock order: g.objects -> qp->lock -> hold_lock (hold.c) -> cq->lock; the shared state lock
 * (shm_lock) is taken last and alone. */

/* shared.c */
int emu_init(void); /* idempotent; 0 when emulated devices are available */
void emu_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void shm_lock(void);
void shm_unlock(void);
int shm_alloc_qp(int dev, uint8_t port, uint32_t pd);
void shm_free_qp(int slot);
int shm_alloc_mr(int dev, uint32_t pd, uint64_t addr, uint64_t iova, uint64_t len, uint32_t access,
                 uint32_t *key);
void shm_free_mr(int slot);
int emu_owner_alive(const struct emu_owner *o);
int emu_gid_on_device(int dev, const union ibv_gid *gid);
uint64_t emu_now_ns(void);
void emu_after_fork_child(void);
const char *emu_env(const char *name);
int emu_rewrite_path(const char *path, char *out, size_t outlen); /* sysfs.c */

/* device.c */
void emu_channel_notify(struct emu_cq *cq); /* cq->lock held */
void emu_post_async(struct emu_context *c, enum ibv_event_type type, void *element, int port);
void emu_device_events(void); /* shared port/GID changes -> async events of this process */
void emu_set_port_state(int dev, int port, enum ibv_port_state state);
int emu_set_gid(int dev, int port, int index, const union ibv_gid *gid);
int emu_device_index(const char *name);

/* queue.c */
void emu_qp_progress(struct emu_qp *qp); /* call with qp->lock held */
void emu_progress_all(void);
void emu_qp_to_error(struct emu_qp *qp); /* call with qp->lock held: flushes the rest */
void emu_cq_push(struct emu_cq *cq, const struct emu_cqe *e);
extern _Atomic uint64_t emu_async_posted, emu_async_acked; /* device.c: async events */

/* hold.c: hold rules, held WRs, chaos draws */
int emu_hold_completion(struct emu_qp *qp, const struct emu_cqe *e); /* 1: taken, do not push */
int emu_hold_execution(struct emu_qp *qp, struct emu_wqe *w);        /* 1: stalled */
int emu_refuse_post(struct emu_qp *qp, const struct ibv_send_wr *wr); /* errno to refuse, or 0 */
int32_t emu_peer_pid(const struct emu_qp *qp); /* the process owning its remote QP, 0: none */
void emu_hold_forget_wqes(struct emu_qp *qp);           /* qp flushed or reset: stalls gone */
void emu_hold_forget_cq(struct emu_cq *cq);             /* cq destroyed */
uint64_t emu_chaos_delay_ns(void);                      /* 0 when chaos is off */
int emu_chaos_fail(enum ibv_wc_status *status);         /* 1: fail this WR */

/* control.c: the control socket and its thread */
void emu_control_start(void);
void emu_control_kick(void);
void emu_control_after_fork_child(void);
void emu_control_fork_lock(int which); /* 0: control lock, 1: hold lock */
void emu_control_fork_unlock(void);

/* strings.c */
const char *emu_opcode_name(int opcode);
int emu_opcode_from_name(const char *name);
int emu_status_from_name(const char *name);
const char *emu_status_name(int status);
int emu_event_from_name(const char *name);
const char *emu_event_name(int event);

#endif
