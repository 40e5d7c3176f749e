/* The driver of a cluster run: reaching hosts over SSH (libssh), making sure each runs this
 * nnlab (uploading it when not), starting `nnlab worker` there, shipping partitions, and
 * following the run. Only built with libssh (NNLAB_HAVE_SSH). */
#ifndef NNLAB_DRIVER_H
#define NNLAB_DRIVER_H

#include <signal.h>

#include "nnlab/dataset.h"
#include "nnlab/error.h"
#include "nnlab/model.h"
#include "nnlab/trainer.h"

struct nl_host {
    char name[256]; /* as the user wrote it; resolved through the SSH config */
    int cores;      /* threads for its worker; 0: all its cores */
};

/* "H1[:CORES],H2,..." into a new array (*hosts freed with nl_free). */
int nl_hosts_parse(const char *list, struct nl_host **hosts, int *n, struct nl_error *err);
/* One HOST[:CORES] a line, # comments, blank lines ignored. */
int nl_hosts_load(const char *path, struct nl_host **hosts, int *n, struct nl_error *err);

struct nl_ssh_opts {
    const char *config;       /* NULL: ~/.ssh/config */
    int accept_new;           /* add unknown host keys to known_hosts instead of refusing */
    const char *remote_nnlab; /* NULL: `nnlab` on the remote PATH, or an upload */
    const char *version;      /* this nnlab's `--version` line, e.g. "nnlab 0.2.0" */
    int timeout_ms;           /* connecting, and every wait for a worker */
};

/* What `nnlab hosts check` reports. */
struct nl_host_report {
    char user[64], address[64];
    int port;
    char remote_version[64]; /* "" when no nnlab is on the remote PATH */
    int cores;
    long long mem_kb;
    int would_upload; /* 1 when a run would upload this binary */
    char uploaded_path[160];
};

int nl_host_check(const struct nl_host *h, const struct nl_ssh_opts *so, struct nl_host_report *r,
                  struct nl_error *err);

struct nl_cluster_opts {
    struct nl_ssh_opts ssh;
    const char *bind;     /* address the workers listen on; NULL: where the driver reached them */
    int port_lo, port_hi; /* 0, 0: any port */
    int bf16;
    /* Workers exchange checksummed frames rather than sealed ones (for a trusted network). */
    int insecure_plaintext;
    /* Set (by a signal handler) to stop the run at the next chance; may be NULL. */
    const volatile sig_atomic_t *stop;
    /* Faults: a worker is lost when its channel ends or fails, or when nothing (not even a
     * heartbeat) came from it for heartbeat_ms (0: 10 s); workers exit when the driver is silent
     * that long. A lost worker is restarted on its host, up to max_restarts times per run, or
     * dropped, and the run goes on from its last completed step (net/worker.c). */
    int heartbeat_ms;
    int max_restarts;
    /* Each line a worker writes to stderr; may be NULL. */
    void (*log)(void *ud, const char *host, const char *line);
    void *log_ud;
};

/* Trains m on d's train split on the hosts (one worker each, in order; ranks follow the list),
 * with o's options (o->threads is ignored: each host's cores count). With o->resume, m holds
 * the checkpoint's parameters and the members start after its step with its optimizer state
 * (zeros when it has none). Checkpoints carry the optimizer state, gathered from the members. m's
 * parameters as initialised from o->seed are what the workers start from. Events and checkpoints go
 * through hooks as for nl_train; validation and test run here on the driver. stats (n) gets each
 * worker's totals. */
int nl_cluster_train(const struct nl_host *hosts, int n, const struct nl_cluster_opts *co,
                     struct nl_model *m, const struct nl_dataset *d, const struct nl_train_opts *o,
                     const struct nl_train_hooks *hooks, struct nl_train_result *res,
                     struct nl_worker_metrics *stats, struct nl_error *err);

#endif
