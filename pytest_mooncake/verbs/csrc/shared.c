/* Start-up, the shared state file (verbs.shm) and who is alive.
 *
 * The first process of a run directory creates verbs.shm under an flock, reads the device tree
 * ($MC_VERBS_RUN_DIR/sys/class/infiniband) into it, and every later process maps the same file.
 * Slots of QPs and MRs name their owner by pid and start time; a slot whose owner died is free
 * again, so a SIGKILLed process leaves nothing another process trips over.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"
#include "points.h"
#include "trace.h"

struct emu_global g = {.objects = PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_state; /* 0 not tried, 1 ready, -1 no emulated devices */

const char *emu_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void emu_log(const char *fmt, ...) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "mc-verbs[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    (void)!write(2, buf, n);
}

uint64_t emu_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t process_start(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces */
    if (!p) return 0;
    /* after ") " come fields 3..; the start time is field 22 */
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ') field++;
    return strtoull(p, NULL, 10);
}

/* ------------------------------------------------------------------------------- liveness */

struct pid_entry {
    int32_t pid;
    uint64_t start;
    int fd; /* pidfd: readable once the process has exited */
    int dead;
};
static struct pid_entry pids[64];
static int pid_next;
static pthread_mutex_t pid_lock = PTHREAD_MUTEX_INITIALIZER;

int emu_owner_alive(const struct emu_owner *o) {
    if (o->pid == g.self.pid && o->start == g.self.start) return 1;
    pthread_mutex_lock(&pid_lock);
    struct pid_entry *e = NULL;
    for (size_t i = 0; i < sizeof pids / sizeof pids[0]; i++)
        if (pids[i].pid == o->pid && pids[i].start == o->start) e = &pids[i];
    if (!e) {
        e = &pids[pid_next++ % (sizeof pids / sizeof pids[0])];
        if (e->pid && e->fd >= 0) close(e->fd);
        e->pid = o->pid;
        e->start = o->start;
        e->fd = (int)syscall(SYS_pidfd_open, o->pid, 0);
        /* the pidfd pins the process; the start time says it is the one that owns the slot */
        e->dead = e->fd < 0 || process_start(o->pid) != o->start;
    }
    if (!e->dead) {
        struct pollfd p = {.fd = e->fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) e->dead = 1;
    }
    int alive = !e->dead;
    pthread_mutex_unlock(&pid_lock);
    return alive;
}

/* ------------------------------------------------------------------------- shared state */

void shm_lock(void) {
    int rc = pthread_mutex_lock(&g.shm->lock);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&g.shm->lock); /* its holder died: go on */
}

void shm_unlock(void) { pthread_mutex_unlock(&g.shm->lock); }

static int read_small(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = 0;
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads one port of the tree (the same files a kernel driver's sysfs has). */
static int load_port(const char *devdir, int p, struct emu_shm_port *port) {
    char path[PATH_MAX], buf[256];
    snprintf(path, sizeof path, "%s/ports/%d/state", devdir, p);
    if (read_small(path, buf, sizeof buf)) return -1;
    port->state = atoi(buf);
    snprintf(path, sizeof path, "%s/ports/%d/link_layer", devdir, p);
    port->link_layer = read_small(path, buf, sizeof buf) == 0 && strcmp(buf, "InfiniBand") == 0
                           ? IBV_LINK_LAYER_INFINIBAND
                           : IBV_LINK_LAYER_ETHERNET;
    snprintf(path, sizeof path, "%s/ports/%d/lid", devdir, p);
    port->lid = read_small(path, buf, sizeof buf) == 0 ? (uint16_t)strtoul(buf, NULL, 16) : 0;
    for (int i = 0; i < EMU_MAX_GIDS; i++) {
        snprintf(path, sizeof path, "%s/ports/%d/gids/%d", devdir, p, i);
        if (read_small(path, buf, sizeof buf)) break;
        if (inet_pton(AF_INET6, buf, port->gid[i].raw) != 1) {
            emu_log("%s: not an IPv6-form GID: %s", path, buf);
            return -1;
        }
        snprintf(path, sizeof path, "%s/ports/%d/gid_attrs/types/%d", devdir, p, i);
        if (read_small(path, buf, sizeof buf)) buf[0] = 0;
        if (strcmp(buf, "RoCE v2") == 0)
            port->gid_type[i] = IBV_GID_TYPE_ROCE_V2;
        else
            port->gid_type[i] = port->link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_GID_TYPE_ROCE_V1
                                                                          : IBV_GID_TYPE_IB;
        port->ngids = i + 1;
    }
    return 0;
}

static int load_devices(struct emu_shm *shm) {
    char dir[PATH_MAX / 2], devdir[PATH_MAX / 2 + 256], path[PATH_MAX], buf[256];
    snprintf(dir, sizeof dir, "%s/sys/class/infiniband", g.run_dir);
    DIR *d = opendir(dir);
    if (!d) {
        emu_log("cannot read the device tree %s: %s (make the run directory with "
                "`python -m pytest_mooncake.verbs env`)", dir, strerror(errno));
        return -1;
    }
    char *names[EMU_MAX_DEVS];
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) && n < EMU_MAX_DEVS)
        if (ent->d_name[0] != '.') names[n++] = strdup(ent->d_name);
    closedir(d);
    qsort(names, n, sizeof names[0], name_cmp);
    for (int i = 0; i < n; i++) {
        struct emu_shm_dev *dev = &shm->dev[i];
        snprintf(dev->name, sizeof dev->name, "%s", names[i]);
        snprintf(devdir, sizeof devdir, "%s/%s", dir, names[i]);
        free(names[i]);
        unsigned short w[4] = {0};
        snprintf(path, sizeof path, "%s/node_guid", devdir);
        if (read_small(path, buf, sizeof buf) == 0)
            sscanf(buf, "%hx:%hx:%hx:%hx", &w[0], &w[1], &w[2], &w[3]);
        dev->guid = htobe64((uint64_t)w[0] << 48 | (uint64_t)w[1] << 32 | (uint64_t)w[2] << 16 | w[3]);
        for (int p = 1; p <= EMU_MAX_PORTS; p++) {
            if (load_port(devdir, p, &dev->port[p - 1])) break;
            dev->nports = p;
        }
        if (dev->nports == 0) {
            emu_log("device %s in %s has no ports/1/state", dev->name, dir);
            return -1;
        }
    }
    shm->ndevs = n;
    return 0;
}

static int map_shared_state(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/verbs.shm", g.run_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        emu_log("cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    flock(fd, LOCK_EX);
    struct stat st;
    fstat(fd, &st);
    int fresh = st.st_size == 0;
    if (fresh && ftruncate(fd, sizeof(struct emu_shm))) {
        emu_log("cannot size %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!fresh && st.st_size != (off_t)sizeof(struct emu_shm)) {
        emu_log("%s was made by another version of this library (%lld bytes, expected %zu): "
                "use a fresh run directory", path, (long long)st.st_size, sizeof(struct emu_shm));
        goto fail;
    }
    struct emu_shm *shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) {
        emu_log("cannot map %s: %s", path, strerror(errno));
        goto fail;
    }
    if (fresh) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&shm->lock, &a);
        if (load_devices(shm)) {
            munmap(shm, sizeof *shm);
            if (ftruncate(fd, 0)) { /* leave it for the next try */ }
            goto fail;
        }
        shm->next_pd = 1;
        shm->version = EMU_SHM_VERSION;
        shm->size = sizeof *shm;
        shm->magic = EMU_SHM_MAGIC;
    } else if (shm->magic != EMU_SHM_MAGIC || shm->version != EMU_SHM_VERSION) {
        emu_log("%s is not a verbs state file of this version: use a fresh run directory", path);
        munmap(shm, sizeof *shm);
        goto fail;
    }
    flock(fd, LOCK_UN);
    close(fd);
    g.shm = shm;
    return 0;
fail:
    flock(fd, LOCK_UN);
    close(fd);
    return -1;
}

/* fork() with the process-private locks taken in their order (control, objects, hold, pids), so
 * the child starts with none of them held by a thread it does not have. */
static void fork_prepare(void) {
    emu_control_fork_lock(0);
    pthread_mutex_lock(&g.objects);
    emu_control_fork_lock(1);
    pthread_mutex_lock(&pid_lock);
}

static void fork_parent(void) {
    pthread_mutex_unlock(&pid_lock);
    emu_control_fork_unlock();
    pthread_mutex_unlock(&g.objects);
}

static void fork_child(void) {
    pthread_mutex_unlock(&pid_lock);
    emu_control_fork_unlock();
    pthread_mutex_unlock(&g.objects);
    emu_after_fork_child();
}

void emu_after_fork_child(void) {
    /* The child is a new owner: what the parent registered stays the parent's (its MRs cannot be
     * used from here, as on hardware), and the child gets its own control socket if it opens a
     * device. */
    g.self.pid = getpid();
    g.self.start = process_start(g.self.pid);
    for (size_t i = 0; i < sizeof pids / sizeof pids[0]; i++) {
        if (pids[i].pid && pids[i].fd >= 0) close(pids[i].fd);
        pids[i].pid = 0;
    }
    emu_control_after_fork_child();
    emu_trace_after_fork_child();
    sched_after_fork_child();
}

static int do_init(void) {
    const char *dir = emu_env("MC_VERBS_RUN_DIR");
    if (!dir) {
        emu_log("MC_VERBS_RUN_DIR is not set: no emulated RDMA devices (print the environment "
                "with `python -m pytest_mooncake.verbs env --devices mlx5_0`)");
        return -1;
    }
    if (strlen(dir) >= sizeof g.run_dir - 64) {
        emu_log("MC_VERBS_RUN_DIR is too long (%zu bytes)", strlen(dir));
        return -1;
    }
    snprintf(g.run_dir, sizeof g.run_dir, "%s", dir);
    g.self.pid = getpid();
    g.self.start = process_start(g.self.pid);
    if (map_shared_state()) return -1;
    g.ndevs = g.shm->ndevs;
    for (int i = 0; i < g.ndevs; i++) {
        struct emu_device *d = &g.devs[i];
        d->index = i;
        d->dev.node_type = IBV_NODE_CA;
        d->dev.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->dev.name, sizeof d->dev.name, "%s", g.shm->dev[i].name);
        snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", i);
        snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d", i);
        snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s",
                 g.shm->dev[i].name);
    }
    /* RDMA between processes is process_vm_writev/readv; allow peers under Yama's ptrace rules */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    g.enabled = 1;
    return 0;
}

int emu_init(void) {
    int state = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&init_lock);
        if (init_state == 0) __atomic_store_n(&init_state, do_init() ? -1 : 1, __ATOMIC_RELEASE);
        state = init_state;
        pthread_mutex_unlock(&init_lock);
    }
    if (state > 0) emu_control_start();
    return state > 0 ? 0 : -1;
}

/* ------------------------------------------------------------------------------------ slots */

static int slot_free(uint32_t used, const struct emu_owner *o) {
    return !used || !emu_owner_alive(o);
}

/* A slot from `cursor` on that is unused or whose owner died (shm lock held), or -1. Slots go
 * round robin, so a QPN or MR key is reused as late as possible. */
static int free_slot(uint32_t cursor, int n, const uint32_t *used, const struct emu_owner *owner,
                     size_t stride) {
    for (int i = 0; i < n; i++) {
        int s = (int)((cursor + i) % n);
        const uint32_t *u = (const uint32_t *)((const char *)used + s * stride);
        const struct emu_owner *o = (const struct emu_owner *)((const char *)owner + s * stride);
        if (slot_free(*u, o)) return s;
    }
    return -1;
}

int shm_alloc_qp(int dev, uint8_t port, uint32_t pd) {
    shm_lock();
    int slot = free_slot(g.shm->qp_cursor, EMU_MAX_QPS, &g.shm->qp[0].used, &g.shm->qp[0].owner,
                         sizeof g.shm->qp[0]);
    if (slot >= 0) {
        struct emu_shm_qp *q = &g.shm->qp[slot];
        memset(q, 0, sizeof *q);
        q->qpn = EMU_QPN_BASE + slot;
        q->owner = g.self;
        q->dev = dev;
        q->port = port;
        q->pd = pd;
        q->state = IBV_QPS_RESET;
        q->used = 1;
        g.shm->qp_cursor = slot + 1;
    }
    shm_unlock();
    return slot;
}

void shm_free_qp(int slot) {
    shm_lock();
    struct emu_shm_qp *q = &g.shm->qp[slot];
    if (q->owner.pid == g.self.pid && q->owner.start == g.self.start) q->used = 0;
    shm_unlock();
}

int shm_alloc_mr(int dev, uint32_t pd, uint64_t addr, uint64_t iova, uint64_t len, uint32_t access,
                 uint32_t *key) {
    shm_lock();
    int slot = free_slot(g.shm->mr_cursor, EMU_MAX_MRS, &g.shm->mr[0].used, &g.shm->mr[0].owner,
                         sizeof g.shm->mr[0]);
    if (slot >= 0) {
        struct emu_shm_mr *m = &g.shm->mr[slot];
        uint8_t gen = ++g.shm->mr_gen[slot]; /* a stale key of the slot's last MR no longer fits */
        m->key = ((uint32_t)(slot + 1) << 8) | gen;
        m->owner = g.self;
        m->dev = dev;
        m->pd = pd;
        m->addr = addr;
        m->iova = iova;
        m->length = len;
        m->access = access;
        m->used = 1;
        g.shm->mr_cursor = slot + 1;
        *key = m->key;
    }
    shm_unlock();
    return slot;
}

void shm_free_mr(int slot) {
    shm_lock();
    struct emu_shm_mr *m = &g.shm->mr[slot];
    if (m->owner.pid == g.self.pid && m->owner.start == g.self.start) m->used = 0;
    shm_unlock();
}

int emu_gid_on_device(int dev, const union ibv_gid *gid) {
    const struct emu_shm_dev *d = &g.shm->dev[dev];
    for (int p = 0; p < d->nports; p++)
        for (int i = 0; i < d->port[p].ngids; i++)
            if (memcmp(d->port[p].gid[i].raw, gid->raw, 16) == 0) return 1;
    return 0;
}
