/* The *_str helpers, rate conversions, and the names the control socket uses for statuses,
 * events and opcodes (the enum names in lower case, without the IBV_WC_/IBV_EVENT_ prefix). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "emu.h"

static const char *const status_names[] = {
    "success", "loc_len_err", "loc_qp_op_err", "loc_eec_op_err", "loc_prot_err", "wr_flush_err",
    "mw_bind_err", "bad_resp_err", "loc_access_err", "rem_inv_req_err", "rem_access_err",
    "rem_op_err", "retry_exc_err", "rnr_retry_exc_err", "loc_rdd_viol_err", "rem_inv_rd_req_err",
    "rem_abort_err", "inv_eecn_err", "inv_eec_state_err", "fatal_err", "resp_timeout_err",
    "general_err", "tm_err", "tm_rndv_incomplete",
};
#define NSTATUS (int)(sizeof status_names / sizeof status_names[0])

static const char *const status_text[] = {
    "success", "local length error", "local QP operation error", "local EE context operation error",
    "local protection error", "Work Request Flushed Error", "memory management operation error",
    "bad response error", "local access error", "remote invalid request error",
    "remote access error", "remote operation error", "transport retry counter exceeded",
    "RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
    "aborted error", "invalid EE context number", "invalid EE context state",
    "fatal error", "response timeout error", "general error", "TM error",
    "TM software rendezvous",
};

static const char *const event_names[] = {
    "cq_err", "qp_fatal", "qp_req_err", "qp_access_err", "comm_est", "sq_drained", "path_mig",
    "path_mig_err", "device_fatal", "port_active", "port_err", "lid_change", "pkey_change",
    "sm_change", "srq_err", "srq_limit_reached", "qp_last_wqe_reached", "client_reregister",
    "gid_change", "wq_fatal",
};
#define NEVENT (int)(sizeof event_names / sizeof event_names[0])

static const char *const event_text[] = {
    "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
    "local access violation work queue error", "communication established", "send queue drained",
    "path migrated", "path migration request error", "local catastrophic error", "port active",
    "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
    "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
    "WQ fatal",
};

static int lookup(const char *const *names, int n, const char *name) {
    if (!name || !*name) return -1;
    char *end;
    long v = strtol(name, &end, 0);
    if (*end == 0) return v >= 0 && v < n ? (int)v : -1;
    if (strncasecmp(name, "ibv_wc_", 7) == 0) name += 7;
    else if (strncasecmp(name, "ibv_event_", 10) == 0) name += 10;
    for (int i = 0; i < n; i++)
        if (strcasecmp(names[i], name) == 0) return i;
    if (names == status_names && strcasecmp(name, "flush") == 0) return IBV_WC_WR_FLUSH_ERR;
    return -1;
}

int emu_status_from_name(const char *name) { return lookup(status_names, NSTATUS, name); }
const char *emu_status_name(int s) { return s >= 0 && s < NSTATUS ? status_names[s] : "unknown"; }
int emu_event_from_name(const char *name) { return lookup(event_names, NEVENT, name); }
const char *emu_event_name(int e) { return e >= 0 && e < NEVENT ? event_names[e] : "unknown"; }

const char *emu_opcode_name(int opcode) {
    return opcode == IBV_WR_RDMA_WRITE ? "write" : opcode == IBV_WR_RDMA_READ ? "read" : "other";
}

int emu_opcode_from_name(const char *name) {
    if (strcasecmp(name, "write") == 0 || strcasecmp(name, "rdma_write") == 0)
        return IBV_WR_RDMA_WRITE;
    if (strcasecmp(name, "read") == 0 || strcasecmp(name, "rdma_read") == 0)
        return IBV_WR_RDMA_READ;
    return -1;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
    return (int)status >= 0 && (int)status < NSTATUS ? status_text[status] : "unknown";
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type event) {
    return (int)event >= 0 && (int)event < NEVENT ? event_text[event] : "unknown";
}

EXPORT const char *ibv_port_state_str(enum ibv_port_state state) {
    static const char *const s[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
                                    "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
    return (int)state >= 0 && (int)state < 6 ? s[state] : "unknown";
}

EXPORT const char *ibv_node_type_str(enum ibv_node_type type) {
    static const char *const s[] = {"InfiniBand channel adapter", "InfiniBand switch",
                                    "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP",
                                    "unspecified"};
    return (int)type >= 1 && (int)type <= 7 ? s[type - 1] : "unknown";
}

/* enum ibv_rate -> Gb/s times 10 (2.5 Gb/s is 25); the enum values are not ordered by speed */
static const struct { int rate, tenths; } rates[] = {
    {IBV_RATE_2_5_GBPS, 25},   {IBV_RATE_5_GBPS, 50},     {IBV_RATE_10_GBPS, 100},
    {IBV_RATE_20_GBPS, 200},   {IBV_RATE_30_GBPS, 300},   {IBV_RATE_40_GBPS, 400},
    {IBV_RATE_60_GBPS, 600},   {IBV_RATE_80_GBPS, 800},   {IBV_RATE_120_GBPS, 1200},
    {IBV_RATE_14_GBPS, 140},   {IBV_RATE_56_GBPS, 560},   {IBV_RATE_112_GBPS, 1120},
    {IBV_RATE_168_GBPS, 1680}, {IBV_RATE_25_GBPS, 250},   {IBV_RATE_100_GBPS, 1000},
    {IBV_RATE_200_GBPS, 2000}, {IBV_RATE_300_GBPS, 3000}, {IBV_RATE_28_GBPS, 280},
    {IBV_RATE_50_GBPS, 500},   {IBV_RATE_400_GBPS, 4000}, {IBV_RATE_600_GBPS, 6000},
    {IBV_RATE_800_GBPS, 8000}, {IBV_RATE_1200_GBPS, 12000},
};
#define NRATES (int)(sizeof rates / sizeof rates[0])

static int rate_tenths(enum ibv_rate rate) {
    for (int i = 0; i < NRATES; i++)
        if (rates[i].rate == (int)rate) return rates[i].tenths;
    return -1;
}

static enum ibv_rate rate_of_tenths(int tenths) {
    for (int i = 0; i < NRATES; i++)
        if (rates[i].tenths == tenths) return rates[i].rate;
    return IBV_RATE_MAX;
}

EXPORT int ibv_rate_to_mult(enum ibv_rate rate) {
    int t = rate_tenths(rate);
    return t < 0 || t % 25 ? -1 : t / 25;
}

EXPORT enum ibv_rate mult_to_ibv_rate(int mult) { return rate_of_tenths(mult * 25); }

EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) {
    int t = rate_tenths(rate);
    return t < 0 ? -1 : t * 100;
}

EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) {
    return mbps % 100 ? IBV_RATE_MAX : rate_of_tenths(mbps / 100);
}
