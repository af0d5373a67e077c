/* A stub libmlx5.so.1 for emulated devices: mlx5 direct verbs (DevX, mlx5dv_*) answer as
 * rdma-core's libmlx5 answers for a device its provider does not drive, "not supported".
 *
 * Releases from 0.3.14 on link libmlx5 for their GPU-direct (IBGDA) device transport; the
 * machine's libmlx5 needs private symbols of the real libibverbs the emulated one does not
 * have, so loading it fails before any transport starts. With this library beside the emulated
 * libibverbs (same directory on LD_LIBRARY_PATH) the release loads, its DevX calls fail at
 * once, and its RDMA transport runs on plain verbs. Every function a supported release imports
 * or looks up by version at run time (dlvsym) is here, with the version rdma-core gives it
 * (libmlx5.map); the prototypes come from rdma-core's <infiniband/mlx5dv.h>, so a signature that
 * drifts fails to compile, except for the two newer than the Debian headers (MLX5_1.25).
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include <infiniband/mlx5dv.h>

#define EXPORT __attribute__((visibility("default")))
#define UNSUPPORTED_NULL() \
    do { errno = EOPNOTSUPP; return NULL; } while (0)

/* ------------------------------------------------------------------ device and object queries */

EXPORT bool mlx5dv_is_supported(struct ibv_device *device) {
    (void)device;
    return false;
}

EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
                                              struct mlx5dv_context_attr *attr) {
    (void)device, (void)attr;
    UNSUPPORTED_NULL();
}

EXPORT int mlx5dv_query_device(struct ibv_context *ctx, struct mlx5dv_context *attrs) {
    (void)ctx, (void)attrs;
    return EOPNOTSUPP;
}

EXPORT int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type) {
    (void)obj, (void)obj_type;
    return EOPNOTSUPP;
}

/* ------------------------------------------------------------------ DevX */

EXPORT struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *context,
                                                      const void *in, size_t inlen, void *out,
                                                      size_t outlen) {
    (void)context, (void)in, (void)inlen, (void)out, (void)outlen;
    UNSUPPORTED_NULL();
}

EXPORT int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj *obj, const void *in, size_t inlen,
                                 void *out, size_t outlen) {
    (void)obj, (void)in, (void)inlen, (void)out, (void)outlen;
    return EOPNOTSUPP;
}

EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj *obj, const void *in, size_t inlen,
                                  void *out, size_t outlen) {
    (void)obj, (void)in, (void)inlen, (void)out, (void)outlen;
    return EOPNOTSUPP;
}

EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *obj) {
    (void)obj;
    return EOPNOTSUPP;
}

EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
                                   void *out, size_t outlen) {
    (void)context, (void)in, (void)inlen, (void)out, (void)outlen;
    return EOPNOTSUPP;
}

EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(struct ibv_context *ctx, void *addr,
                                                     size_t size, uint32_t access) {
    (void)ctx, (void)addr, (void)size, (void)access;
    UNSUPPORTED_NULL();
}

EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(struct ibv_context *ctx,
                                                        struct mlx5dv_devx_umem_in *umem_in) {
    (void)ctx, (void)umem_in;
    UNSUPPORTED_NULL();
}

EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *umem) {
    (void)umem;
    return EOPNOTSUPP;
}

EXPORT struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *context,
                                                     uint32_t flags) {
    (void)context, (void)flags;
    UNSUPPORTED_NULL();
}

EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *devx_uar) {
    (void)devx_uar; /* none was ever allocated */
}

EXPORT int mlx5dv_devx_query_eqn(struct ibv_context *context, uint32_t vector, uint32_t *eqn) {
    (void)context, (void)vector, (void)eqn;
    return EOPNOTSUPP;
}

/* ------------------------------------------------------------------ QP tuning (LAG, RoCE sport) */

EXPORT int mlx5dv_query_qp_lag_port(struct ibv_qp *qp, uint8_t *port_num,
                                    uint8_t *active_port_num) {
    (void)qp, (void)port_num, (void)active_port_num;
    return EOPNOTSUPP;
}

EXPORT int mlx5dv_modify_qp_lag_port(struct ibv_qp *qp, uint8_t port_num) {
    (void)qp, (void)port_num;
    return EOPNOTSUPP;
}

EXPORT int mlx5dv_modify_qp_udp_sport(struct ibv_qp *qp, uint16_t udp_sport) {
    (void)qp, (void)udp_sport;
    return EOPNOTSUPP;
}

/* ------------------------------------------------------------------ data direct (MLX5_1.25)
 * 0.3.14 looks these up with dlvsym when MC_RDMA_DATA_DIRECT is set; rdma-core 44's header
 * predates them, so the prototypes are rdma-core's own, written out here. */

EXPORT int mlx5dv_get_data_direct_sysfs_path(struct ibv_context *context, char *buf,
                                             size_t buf_len);
int mlx5dv_get_data_direct_sysfs_path(struct ibv_context *context, char *buf, size_t buf_len) {
    (void)context, (void)buf, (void)buf_len;
    return EOPNOTSUPP;
}

EXPORT struct ibv_mr *mlx5dv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                           uint64_t iova, int fd, int access, int mlx5_access);
struct ibv_mr *mlx5dv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access, int mlx5_access) {
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access, (void)mlx5_access;
    UNSUPPORTED_NULL();
}
