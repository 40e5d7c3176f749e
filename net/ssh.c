/* Reaching a host over SSH with libssh: resolution through the OpenSSH config, the host-key
 * check against known_hosts, authentication by agent or key, remote commands, and getting this
 * nnlab onto the host (version check, SFTP upload to ~/.cache/nnlab/bin/HASH/nnlab). Every
 * error names the host and the step: resolve, connect, host key, auth, launch. */
#include "ssh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libssh/sftp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "net/crypto.h"
#include "nnlab/alloc.h"

#define UPLOAD_CHUNK (32 * 1024)

void nl_remote_close(struct nl_remote *r)
{
    if (!r)
        return;
    if (r->ch) {
        if (ssh_channel_is_open(r->ch)) {
            ssh_channel_send_eof(r->ch);
            ssh_channel_close(r->ch);
        }
        ssh_channel_free(r->ch);
        r->ch = NULL;
    }
    if (r->s) {
        ssh_disconnect(r->s);
        ssh_free(r->s);
        r->s = NULL;
    }
}

static const char *step_of_connect_error(const char *msg)
{
    return strstr(msg, "resolve") || strstr(msg, "getaddrinfo") ? "resolve" : "connect";
}

static int fingerprint(ssh_session s, char *out, size_t n)
{
    ssh_key key = NULL;
    unsigned char *hash = NULL;
    size_t hlen = 0;

    snprintf(out, n, "?");
    if (ssh_get_server_publickey(s, &key) != SSH_OK)
        return -1;
    if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) == 0) {
        char *fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
        if (fp) {
            snprintf(out, n, "%s", fp);
            ssh_string_free_char(fp);
        }
        ssh_clean_pubkey_hash(&hash);
    }
    ssh_key_free(key);
    return 0;
}

int nl_remote_open(struct nl_remote *r, const char *host, const struct nl_ssh_opts *so,
                   struct nl_error *err)
{
    char fp[128];
    long timeout = so->timeout_ms > 0 ? (so->timeout_ms + 999) / 1000 : 30;
    int verbosity = SSH_LOG_NOLOG;

    memset(r, 0, sizeof *r);
    snprintf(r->host, sizeof r->host, "%s", host);
    r->s = ssh_new();
    if (!r->s)
        return nl_error_set(err, NL_ENOMEM, "%s: resolve: out of memory for an SSH session", host);
    ssh_options_set(r->s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
    if (ssh_options_set(r->s, SSH_OPTIONS_HOST, host) < 0)
        return nl_error_set(err, NL_EINVAL, "%s: resolve: not a host name", host);
    if (so->config) {
        if (access(so->config, R_OK) != 0)
            return nl_error_set(err, NL_ENOENT, "%s: resolve: cannot read SSH config %s: %s", host,
                                so->config, strerror(errno));
        if (ssh_options_parse_config(r->s, so->config) < 0)
            return nl_error_set(err, NL_EINVAL, "%s: resolve: SSH config %s: %s", host, so->config,
                                ssh_get_error(r->s));
    } else if (ssh_options_parse_config(r->s, NULL) < 0) {
        return nl_error_set(err, NL_EINVAL, "%s: resolve: ~/.ssh/config: %s", host,
                            ssh_get_error(r->s));
    }
    ssh_options_set(r->s, SSH_OPTIONS_TIMEOUT, &timeout);
    if (ssh_connect(r->s) != SSH_OK) {
        const char *msg = ssh_get_error(r->s);
        return nl_error_set(err, NL_ENET, "%s: %s: %s", host, step_of_connect_error(msg), msg);
    }
    r->connected = 1;

    /* Where we reached it: the default address its worker reports. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(ssh_get_fd(r->s), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, r->addr, sizeof r->addr);
            r->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, r->addr, sizeof r->addr);
            r->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    char *user = NULL;
    if (ssh_options_get(r->s, SSH_OPTIONS_USER, &user) == SSH_OK && user) {
        snprintf(r->user, sizeof r->user, "%s", user);
        ssh_string_free_char(user);
    }

    fingerprint(r->s, fp, sizeof fp);
    switch (ssh_session_is_known_server(r->s)) {
    case SSH_KNOWN_HOSTS_OK:
        break;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
        return nl_error_set(err, NL_EAUTH,
                            "%s: host key: the key of %s port %d (%s) differs from the one in "
                            "known_hosts; refusing to connect (if the host was reinstalled, "
                            "remove its old line with ssh-keygen -R)",
                            host, r->addr, r->port, fp);
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN:
        if (!so->accept_new)
            return nl_error_set(err, NL_EAUTH,
                                "%s: host key: %s port %d is not in known_hosts (its key is %s); "
                                "connect once with ssh, or pass --accept-new-host-keys",
                                host, r->addr, r->port, fp);
        if (ssh_session_update_known_hosts(r->s) != SSH_OK)
            return nl_error_set(err, NL_EIO, "%s: host key: cannot add it to known_hosts: %s", host,
                                ssh_get_error(r->s));
        break;
    default:
        return nl_error_set(err, NL_EAUTH, "%s: host key: %s", host, ssh_get_error(r->s));
    }

    int rc = ssh_userauth_none(r->s, NULL);
    if (rc != SSH_AUTH_SUCCESS)
        rc = ssh_userauth_publickey_auto(r->s, NULL, NULL);
    if (rc != SSH_AUTH_SUCCESS)
        return nl_error_set(err, NL_EAUTH,
                            "%s: auth: the host accepted no key for user %s (tried the SSH agent "
                            "and the IdentityFile keys)",
                            host, r->user[0] ? r->user : "?");
    return 0;
}

int nl_remote_exec(struct nl_remote *r, const char *cmd, char *out, size_t outn, char *errb,
                   size_t errn, int *status, struct nl_error *err)
{
    ssh_channel ch = ssh_channel_new(r->s);
    size_t of = 0, ef = 0;

    if (!ch || ssh_channel_open_session(ch) != SSH_OK ||
        ssh_channel_request_exec(ch, cmd) != SSH_OK) {
        if (ch)
            ssh_channel_free(ch);
        return nl_error_set(err, NL_ENET, "%s: launch: cannot run a command: %s", r->host,
                            ssh_get_error(r->s));
    }
    /* Up to a minute of output; stdout and stderr are read in turn until both end. */
    const time_t deadline = time(NULL) + 60;
    int out_open = 1, err_open = 1;
    while ((out_open || err_open) && time(NULL) < deadline) {
        char buf[4096];
        int n = 0, m = 0;
        if (out_open) {
            n = ssh_channel_read_timeout(ch, buf, sizeof buf, 0, 100);
            if (n > 0) {
                size_t take = (size_t)n < outn - 1 - of ? (size_t)n : outn - 1 - of;
                memcpy(out + of, buf, take);
                of += take;
            } else if (n < 0 && n != SSH_AGAIN) {
                out_open = 0;
            }
        }
        if (err_open) {
            m = ssh_channel_read_nonblocking(ch, buf, sizeof buf, 1);
            if (m > 0) {
                size_t take = (size_t)m < errn - 1 - ef ? (size_t)m : errn - 1 - ef;
                memcpy(errb + ef, buf, take);
                ef += take;
            } else if (m < 0 && m != SSH_AGAIN) {
                err_open = 0;
            }
        }
        if (n <= 0 && m <= 0 && ssh_channel_is_eof(ch)) {
            /* Drain what stderr still holds, then stop. */
            while (err_open && (m = ssh_channel_read_nonblocking(ch, buf, sizeof buf, 1)) > 0) {
                size_t take = (size_t)m < errn - 1 - ef ? (size_t)m : errn - 1 - ef;
                memcpy(errb + ef, buf, take);
                ef += take;
            }
            break;
        }
    }
    out[of] = '\0';
    errb[ef] = '\0';
    ssh_channel_send_eof(ch);
    ssh_channel_close(ch);
    *status = ssh_channel_get_exit_status(ch);
    ssh_channel_free(ch);
    return 0;
}

/* Shared libraries nnlab needs and the Debian packages that hold them. */
static const struct {
    const char *lib, *package;
} lib_packages[] = {
    {"libopenblas", "libopenblas0"}, {"libsqlite3", "libsqlite3-0"}, {"libpng16", "libpng16-16"},
    {"libz.so", "zlib1g"},           {"libssh", "libssh-4"},         {"libgtk-4", "libgtk-4-1"},
    {"libgfortran", "libgfortran5"}, {"libcrypto", "libssl3"},
};

/* Explains why a binary would not start, from its stderr and exit status. */
static int launch_error(struct nl_remote *r, const char *path, const char *errb, int status,
                        struct nl_error *err)
{
    const char *so = strstr(errb, "error while loading shared libraries: ");
    if (so) {
        char lib[128];
        so += strlen("error while loading shared libraries: ");
        size_t n = strcspn(so, ":\n");
        snprintf(lib, sizeof lib, "%.*s", (int)(n < sizeof lib ? n : sizeof lib - 1), so);
        for (size_t i = 0; i < sizeof lib_packages / sizeof lib_packages[0]; i++)
            if (strstr(lib, lib_packages[i].lib))
                return nl_error_set(err, NL_ENOENT,
                                    "%s: launch: %s cannot start: the shared library %s is "
                                    "missing there (Debian package %s: apt-get install %s)",
                                    r->host, path, lib, lib_packages[i].package,
                                    lib_packages[i].package);
        return nl_error_set(err, NL_ENOENT,
                            "%s: launch: %s cannot start: the shared library %s is missing there",
                            r->host, path, lib);
    }
    if (strstr(errb, "Exec format error") || strstr(errb, "cannot execute binary file"))
        return nl_error_set(err, NL_EINVAL,
                            "%s: launch: %s cannot start: the host has another architecture "
                            "than this one; install nnlab there (or build it) and pass "
                            "--remote-nnlab PATH",
                            r->host, path);
    return nl_error_set(err, NL_ENOENT, "%s: launch: %s --version failed (status %d): %.200s",
                        r->host, path, status, errb[0] ? errb : "no message");
}

static int self_binary(unsigned char **buf, size_t *len, char hash[65], struct nl_error *err)
{
    FILE *f = fopen("/proc/self/exe", "rb");
    struct stat st;

    *buf = NULL;
    if (!f || fstat(fileno(f), &st) != 0) {
        if (f)
            fclose(f);
        return nl_error_set(err, NL_EIO, "cannot read this program (/proc/self/exe): %s",
                            strerror(errno));
    }
    *len = (size_t)st.st_size;
    *buf = nl_malloc(*len + 1);
    if (!*buf || fread(*buf, 1, *len, f) != *len) {
        fclose(f);
        nl_free(*buf);
        *buf = NULL;
        return nl_error_set(err, NL_EIO, "cannot read this program (/proc/self/exe)");
    }
    fclose(f);
    nl_sha256_hex(hash, *buf, *len);
    return 0;
}

static int sftp_fail(struct nl_remote *r, sftp_session sf, const char *what, const char *path,
                     struct nl_error *err)
{
    return nl_error_set(err, NL_EIO, "%s: launch: uploading nnlab: %s %s: %s (sftp error %d)",
                        r->host, what, path, ssh_get_error(r->s), sf ? sftp_get_error(sf) : -1);
}

/* Uploads buf as .cache/nnlab/bin/HASH/nnlab under the SFTP session's home: to a temporary
 * name in chunks of at most 32 KiB, then renamed into place. */
static int upload(struct nl_remote *r, sftp_session sf, const unsigned char *buf, size_t len,
                  const char *hash, struct nl_error *err)
{
    char dir[256], tmp[300], final[300];
    int rc = 0;

    const char *parts[] = {".cache", ".cache/nnlab", ".cache/nnlab/bin", NULL};
    for (int i = 0; parts[i]; i++)
        sftp_mkdir(sf, parts[i], 0700);
    snprintf(dir, sizeof dir, ".cache/nnlab/bin/%.16s", hash);
    sftp_mkdir(sf, dir, 0700);
    snprintf(final, sizeof final, "%s/nnlab", dir);
    snprintf(tmp, sizeof tmp, "%s/.nnlab.tmp.%ld", dir, (long)getpid());
    sftp_file f = sftp_open(sf, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0700);
    if (!f)
        return sftp_fail(r, sf, "creating", tmp, err);
    for (size_t off = 0; off < len && rc == 0;) {
        size_t n = len - off < UPLOAD_CHUNK ? len - off : UPLOAD_CHUNK;
        ssize_t w = sftp_write(f, buf + off, n);
        if (w <= 0)
            rc = sftp_fail(r, sf, "writing", tmp, err);
        else
            off += (size_t)w;
    }
    if (sftp_close(f) != SSH_OK && rc == 0)
        rc = sftp_fail(r, sf, "closing", tmp, err);
    if (rc == 0) {
        sftp_unlink(sf, final); /* SFTP v3 renames do not replace */
        if (sftp_rename(sf, tmp, final) != SSH_OK)
            rc = sftp_fail(r, sf, "renaming into place", final, err);
    }
    if (rc < 0)
        sftp_unlink(sf, tmp);
    return rc;
}

int nl_remote_prepare(struct nl_remote *r, const struct nl_ssh_opts *so, int may_upload,
                      int *would_upload, char *remote_version, size_t rvn, struct nl_error *err)
{
    char out[256], errb[2048], cmd[600];
    int status = -1, rc;

    *would_upload = 0;
    remote_version[0] = '\0';
    if (so->remote_nnlab) {
        snprintf(r->path, sizeof r->path, "'%s'", so->remote_nnlab);
        snprintf(cmd, sizeof cmd, "%s --version", r->path);
        rc = nl_remote_exec(r, cmd, out, sizeof out, errb, sizeof errb, &status, err);
        if (rc < 0)
            return rc;
        if (status != 0)
            return launch_error(r, so->remote_nnlab, errb, status, err);
        out[strcspn(out, "\n")] = '\0';
        snprintf(remote_version, rvn, "%s", out);
        return 0;
    }
    rc = nl_remote_exec(r, "nnlab --version", out, sizeof out, errb, sizeof errb, &status, err);
    if (rc < 0)
        return rc;
    out[strcspn(out, "\n")] = '\0';
    if (status == 0)
        snprintf(remote_version, rvn, "%s", out);
    if (status == 0 && strcmp(out, so->version) == 0) {
        snprintf(r->path, sizeof r->path, "nnlab");
        return 0;
    }

    unsigned char *bin = NULL;
    size_t len = 0;
    char hash[65];
    rc = self_binary(&bin, &len, hash, err);
    if (rc < 0)
        return rc;
    /* The cache lives under the SFTP home, named as an absolute path for the shell. */
    sftp_session sf = sftp_new(r->s);
    if (!sf || sftp_init(sf) != SSH_OK) {
        rc = sftp_fail(r, sf, "starting", "SFTP (is the sftp subsystem enabled?)", err);
        goto out;
    }
    char *home = sftp_canonicalize_path(sf, ".");
    if (!home || strchr(home, '\'')) {
        rc = sftp_fail(r, sf, "finding", "the home folder", err);
        ssh_string_free_char(home);
        goto out;
    }
    snprintf(r->path, sizeof r->path, "'%.100s/.cache/nnlab/bin/%.16s/nnlab'", home, hash);
    ssh_string_free_char(home);
    snprintf(cmd, sizeof cmd, "%s --version", r->path);
    rc = nl_remote_exec(r, cmd, out, sizeof out, errb, sizeof errb, &status, err);
    out[strcspn(out, "\n")] = '\0';
    if (rc == 0 && status == 0 && strcmp(out, so->version) == 0)
        goto out; /* uploaded by an earlier run */
    *would_upload = 1;
    rc = 0;
    if (!may_upload)
        goto out;
    rc = upload(r, sf, bin, len, hash, err);
    if (rc == 0)
        rc = nl_remote_exec(r, cmd, out, sizeof out, errb, sizeof errb, &status, err);
    if (rc == 0 && status != 0)
        rc = launch_error(r, r->path, errb, status, err);
out:
    if (sf)
        sftp_free(sf);
    nl_free(bin);
    return rc;
}
