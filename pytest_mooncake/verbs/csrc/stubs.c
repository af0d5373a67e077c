/* Verbs rdma-core exports that the emulator does not model (address handles, SRQs, multicast,
 * import/export, ECE, dma-buf MRs, provider hooks). They exist so that a binary linked against
 * any libibverbs.so.1 loads; each fails the way a device without the feature does. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

#define FAIL_NULL(err) \
    do { errno = (err); return NULL; } while (0)

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr) {
    (void)pd, (void)attr;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah) {
    (void)ah;
    return EOPNOTSUPP;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                            struct ibv_grh *grh, uint8_t port_num) {
    (void)pd, (void)wc, (void)grh, (void)port_num;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
                               struct ibv_grh *grh, struct ibv_ah_attr *ah_attr) {
    (void)context, (void)port_num, (void)wc, (void)grh, (void)ah_attr;
    return EOPNOTSUPP;
}

EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                       uint8_t eth_mac[6], uint16_t *vid) {
    (void)context, (void)attr, (void)eth_mac, (void)vid;
    return EOPNOTSUPP;
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
    (void)qp, (void)gid, (void)lid;
    return EOPNOTSUPP;
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
    (void)qp, (void)gid, (void)lid;
    return EOPNOTSUPP;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr) {
    (void)pd, (void)attr;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask) {
    (void)srq, (void)attr, (void)mask;
    return EOPNOTSUPP;
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr) {
    (void)srq, (void)attr;
    return EOPNOTSUPP;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq) {
    (void)srq;
    return EOPNOTSUPP;
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                        size_t length, int access) {
    (void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
    return IBV_REREG_MR_ERR_INPUT;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                        uint64_t iova, int fd, int access) {
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp) {
    (void)qp;
    return NULL; /* no extended QPs: the application falls back to ibv_post_send */
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags) {
    (void)qp, (void)op, (void)flags;
    return 1; /* each WR's data is placed with one copy, in order */
}

EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) {
    (void)qp, (void)ece;
    return EOPNOTSUPP;
}

EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) {
    (void)qp, (void)ece;
    return EOPNOTSUPP;
}

EXPORT struct ibv_context *ibv_import_device(int cmd_fd) {
    (void)cmd_fd;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t handle) {
    (void)context, (void)handle;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }

EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle) {
    (void)pd, (void)handle;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }

EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t handle) {
    (void)context, (void)handle;
    FAIL_NULL(EOPNOTSUPP);
}

EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }

/* Provider-facing and legacy helpers (rdma-core declares them in driver headers). */

EXPORT void ibv_register_driver(const char *name, void *init) { (void)name, (void)init; }

EXPORT void ibv_copy_ah_attr_from_kern(void *dst, const void *src) { (void)dst, (void)src; }
EXPORT void ibv_copy_qp_attr_from_kern(void *dst, const void *src) { (void)dst, (void)src; }
EXPORT void ibv_copy_path_rec_from_kern(void *dst, const void *src) { (void)dst, (void)src; }
EXPORT void ibv_copy_path_rec_to_kern(void *dst, const void *src) { (void)dst, (void)src; }

EXPORT const char *ibv_get_sysfs_path(void) { return "/sys"; }

EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC); /* redirected into the run directory */
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size);
    close(fd);
    if (n < 0) return -1;
    if (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
    else if ((size_t)n < size) buf[n] = 0;
    return (int)n;
}
