/* One host reached over SSH. Private to net/. */
#ifndef NNLAB_NET_SSH_H
#define NNLAB_NET_SSH_H

#include <libssh/libssh.h>
#include <stddef.h>

#include "nnlab/driver.h"

struct nl_remote {
    char host[256]; /* as the user wrote it */
    char user[64];
    char addr[64]; /* numeric address the SSH connection reached */
    int port;
    char path[200]; /* how to run nnlab there, quoted for the remote shell */
    ssh_session s;
    ssh_channel ch; /* the worker's channel */
    int connected;
};

/* Resolve, connect, check the host key, authenticate. */
int nl_remote_open(struct nl_remote *r, const char *host, const struct nl_ssh_opts *so,
                   struct nl_error *err);
void nl_remote_close(struct nl_remote *r);
/* Runs cmd there and collects its output (cut to the buffers) and exit status. */
int nl_remote_exec(struct nl_remote *r, const char *cmd, char *out, size_t outn, char *errb,
                   size_t errn, int *status, struct nl_error *err);
/* Settles r->path: the remote nnlab when its version is ours, else this binary uploaded (when
 * may_upload; *would_upload says whether it had to be). */
int nl_remote_prepare(struct nl_remote *r, const struct nl_ssh_opts *so, int may_upload,
                      int *would_upload, char *remote_version, size_t rvn, struct nl_error *err);

#endif
