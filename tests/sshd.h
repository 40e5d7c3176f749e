/* A private sshd for cluster tests: generated host and user keys, key-only authentication on
 * 127.0.0.1 at a free port, an sftp subsystem, and an ssh config naming node1..node3 for it.
 * sshd runs as `/usr/sbin/sshd -D -e -f CONFIG`, a child of the test, killed by pid at the end.
 * Sessions get HOME=DIR/home and SFTP starts there, so caches and uploads stay in DIR. */
#ifndef NNLAB_TESTS_SSHD_H
#define NNLAB_TESTS_SSHD_H

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "nnlab/rng.h"

#define SSHD_BIN "/usr/sbin/sshd"
#define SFTP_BIN "/usr/lib/openssh/sftp-server"
#define KEYGEN   "/usr/bin/ssh-keygen"

struct sshd {
    char dir[256];
    int port;
    pid_t pid;
    char user[64];
};

static inline int sshd_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

static inline int sshd_write(const char *folder, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static inline char *sshd_read(const char *path)
{
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t n = 0;
    if (!f)
        return NULL;
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Writes an ssh config for node1..node3 with the given identity and known_hosts files. */
static inline void sshd_ssh_config(const struct sshd *s, const char *name, const char *identity,
                                   const char *known_hosts)
{
    char text[2048];
    snprintf(text, sizeof text,
             "Host node1 node2 node3\n"
             "    HostName 127.0.0.1\n"
             "    Port %d\n"
             "    User %s\n"
             "    IdentityFile %s/%s\n"
             "    UserKnownHostsFile %s/%s\n",
             s->port, s->user, s->dir, identity, s->dir, known_hosts);
    sshd_write(s->dir, name, text);
}

/* Sets everything up and starts sshd; returns NULL (with why) when this machine cannot. */
static inline const char *sshd_start(struct sshd *s)
{
    char cmd[1024], text[2048];
    struct passwd *pw = getpwuid(getuid());

    memset(s, 0, sizeof *s);
    if (access(SSHD_BIN, X_OK) != 0 || access(KEYGEN, X_OK) != 0 || access(SFTP_BIN, X_OK) != 0)
        return "no sshd, ssh-keygen or sftp-server (apt-get install openssh-server)";
    if (!pw)
        return "no passwd entry for this user";
    snprintf(s->user, sizeof s->user, "%s", pw->pw_name);
    /* Run as root, sshd insists on its privilege-separation folder. */
    if (geteuid() == 0 && access("/run/sshd", F_OK) != 0 && mkdir("/run/sshd", 0755) != 0)
        return "no /run/sshd, and it cannot be created";
    snprintf(s->dir, sizeof s->dir, "/tmp/nnlab-sshd-XXXXXX");
    if (!mkdtemp(s->dir))
        return "cannot make a temporary folder";
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir home && " KEYGEN " -q -t ed25519 -N '' -f host_key && " KEYGEN
             " -q -t ed25519 -N '' -f other_host_key && " KEYGEN
             " -q -t ed25519 -N '' -f user_key && " KEYGEN
             " -q -t ed25519 -N '' -f other_key && cp user_key.pub authorized_keys",
             s->dir);
    if (system(cmd) != 0)
        return "ssh-keygen failed";
    s->port = sshd_free_port();
    snprintf(text, sizeof text,
             "Port %d\nListenAddress 127.0.0.1\nHostKey %s/host_key\nPidFile none\n"
             "AuthorizedKeysFile %s/authorized_keys\nPasswordAuthentication no\n"
             "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
             "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
             "SetEnv HOME=%s/home\nSubsystem sftp " SFTP_BIN " -d %s/home\nLogLevel ERROR\n",
             s->port, s->dir, s->dir, s->dir, s->dir);
    sshd_write(s->dir, "sshd_config", text);
    /* known_hosts with the right key, with another key, and empty. */
    snprintf(cmd, sizeof cmd,
             "cd %s && printf '[127.0.0.1]:%d %%s\\n' \"$(cat host_key.pub)\" > known_hosts && "
             "printf '[127.0.0.1]:%d %%s\\n' \"$(cat other_host_key.pub)\" > bad_known_hosts && "
             ": > empty_known_hosts",
             s->dir, s->port, s->port);
    if (system(cmd) != 0)
        return "cannot write known_hosts";
    sshd_ssh_config(s, "ssh_config", "user_key", "known_hosts");
    sshd_ssh_config(s, "ssh_config_badkey", "user_key", "bad_known_hosts");
    sshd_ssh_config(s, "ssh_config_unknown", "user_key", "empty_known_hosts");
    sshd_ssh_config(s, "ssh_config_badauth", "other_key", "known_hosts");

    char conf[512], log[512];
    snprintf(conf, sizeof conf, "%s/sshd_config", s->dir);
    snprintf(log, sizeof log, "%s/sshd.log", s->dir);
    s->pid = fork();
    if (s->pid == 0) {
        freopen(log, "w", stderr);
        freopen("/dev/null", "w", stdout);
        execl(SSHD_BIN, SSHD_BIN, "-D", "-e", "-f", conf, (char *)NULL);
        _exit(127);
    }
    /* Wait until it accepts connections. */
    for (int i = 0; i < 100; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)s->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int up = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (up)
            return NULL;
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return "sshd did not start (see its log)";
        }
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    return "sshd did not listen within 5 s";
}

static inline void sshd_stop(struct sshd *s)
{
    char cmd[600];
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->dir[0] && !getenv("NNLAB_KEEP_SSHD")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", s->dir);
    }
}

/* The parent of pid, or -1 when it is gone or a zombie. */
static inline long sshd_parent_of(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    long ppid = -1;
    char state;
    if (!p || sscanf(p + 1, " %c %ld", &state, &ppid) != 2 || state == 'Z')
        return -1;
    return ppid;
}

/* The `nnlab worker` processes descended from this fixture's sshd (found by its pid, never by
 * name): their count, and up to max of their pids into pids (which may be NULL). */
static inline int sshd_worker_pids(const struct sshd *s, long *pids, int max)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (s->pid > 0 && d && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[300], cmd[1024];
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        cmd[len] = '\0';
        /* argv[0] NUL argv[1]... */
        if (!(strlen(cmd) + 1 < len && strcmp(cmd + strlen(cmd) + 1, "worker") == 0))
            continue;
        long a = pid;
        for (int depth = 0; depth < 16 && a > 1 && a != (long)s->pid; depth++)
            a = sshd_parent_of(a);
        if (a != (long)s->pid)
            continue;
        if (pids && n < max)
            pids[n] = pid;
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

static inline int sshd_workers_alive(const struct sshd *s)
{
    return sshd_worker_pids(s, NULL, 0);
}

/* 1 once no worker of this fixture is left, waiting up to seconds. */
static inline int sshd_no_workers_left(const struct sshd *s, double seconds)
{
    for (double waited = 0.0;; waited += 0.1) {
        if (sshd_workers_alive(s) == 0)
            return 1;
        if (waited >= seconds)
            return 0;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
}

/* An uncompressed IDX pair in DIR/data (train-images-idx3-ubyte, train-labels-idx1-ubyte): n
 * side x side images in 4 classes, a bright 4x4 square in one quadrant over dim noise. */
static inline void sshd_write_quadrants(const struct sshd *s, unsigned n, unsigned side)
{
    char path[600];
    struct nl_rng r;
    nl_rng_seed(&r, 1);
    snprintf(path, sizeof path, "%s/data", s->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/data/train-images-idx3-ubyte", s->dir);
    FILE *fi = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/data/train-labels-idx1-ubyte", s->dir);
    FILE *fl = fopen(path, "wb");
    if (!fi || !fl) {
        if (fi)
            fclose(fi);
        if (fl)
            fclose(fl);
        return;
    }
    const unsigned ih[4] = {0x803, n, side, side}, lh[2] = {0x801, n};
    for (int i = 0; i < 4; i++)
        for (int b = 3; b >= 0; b--)
            fputc((int)(ih[i] >> (8 * b)) & 255, fi);
    for (int i = 0; i < 2; i++)
        for (int b = 3; b >= 0; b--)
            fputc((int)(lh[i] >> (8 * b)) & 255, fl);
    const unsigned half = side / 2;
    unsigned char *img = malloc((size_t)side * side);
    for (unsigned i = 0; img && i < n; i++) {
        int k = (int)nl_rng_below(&r, 4);
        unsigned oy = (unsigned)(k / 2) * half + 1 + (unsigned)nl_rng_below(&r, 2);
        unsigned ox = (unsigned)(k % 2) * half + 1 + (unsigned)nl_rng_below(&r, 2);
        for (unsigned p = 0; p < side * side; p++)
            img[p] = (unsigned char)nl_rng_below(&r, 80);
        for (unsigned y = 0; y < 4; y++)
            for (unsigned x = 0; x < 4; x++)
                img[(oy + y) * side + ox + x] = (unsigned char)(150 + nl_rng_below(&r, 106));
        fwrite(img, 1, (size_t)side * side, fi);
        fputc(k, fl);
    }
    free(img);
    fclose(fi);
    fclose(fl);
}

/* An integer that the SQL (printf-style) selects from the fixture's database, DIR/db; -1 when
 * it cannot be read. */
static inline long long sshd_db_int(const struct sshd *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline long long sshd_db_int(const struct sshd *s, const char *fmt, ...)
{
    char path[600], sql[1024];
    sqlite3 *conn;
    sqlite3_stmt *st;
    long long v = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/db", s->dir);
    if (sqlite3_open_v2(path, &conn, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_prepare_v2(conn, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(conn);
    return v;
}

#endif
