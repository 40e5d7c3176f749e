/* delay_link: a userspace Ethernet switch between TAP devices that delays and rate-limits every
 * frame, for cluster benchmarks between network namespaces on kernels without sch_netem.
 *
 *   delay_link [--delay-us D] [--rate-mbit R] [--queue-kb Q] [--no-offload] TAP...
 *
 * It creates one TAP device per name (IFF_TAP | IFF_NO_PI, non-persistent: they vanish when it
 * exits), prints "ready" on stdout, and from then on is the switch between them. The caller moves
 * each TAP into its host's namespace (`ip link set TAP netns NS`; the descriptor stays valid) and
 * gives it its address.
 *
 * The link, per host port:
 *   - uplink (host -> switch): a token bucket at R. A port whose bucket is empty is not read, so
 *     its frames wait in the TAP's own queue (which drops when full, as a NIC ring does).
 *   - switching: source MACs are learnt; a frame to a known unicast MAC goes to that port, a
 *     broadcast, multicast or unknown one to every other port.
 *   - downlink (switch -> host): a FIFO of frames in a byte ring of Q KiB (drop-tail when full),
 *     each released no earlier than D microseconds after it was read, and no faster than a second
 *     token bucket at R. The wait is epoll_pwait2 with a 1 ns timer slack up to ~20 us before
 *     the release, then a spin.
 * So a frame between two hosts is delayed by D once and crosses two shapers at R, like a frame
 * through a store-and-forward switch whose ports run at R. Buckets hold max(64 KiB, 50 us at R).
 * Bytes are counted as Ethernet frames (headers and payload, no preamble, gap or FCS); a GSO
 * frame counts the headers of each of its segments.
 *
 * Offload (the default): the TAPs carry a virtio-net header (IFF_VNET_HDR) and accept TSO and
 * checksum offload, so the hosts' stacks hand over TCP segments of up to 64 KiB, passed through
 * unchanged to the destination TAP, as a hypervisor's switch does; --no-offload carries frames
 * of the MTU.
 *
 * Control, one line each on stdin: "stats" prints a JSON line of what was carried since the
 * last "stats" and starts a new interval; "rate MBIT" and "delay US" change the link (frames
 * already queued keep their release time). SIGTERM or SIGINT prints the totals as a JSON line
 * and exits 0. A JSON line: {"what":"stats"|"total", "seconds", "frames", "bytes", "dropped",
 * "delay_us":{"min","p50","p99","max"}, "late_us":{...}} where delay is release - arrival of
 * every frame written (queueing behind the rate included) and late is release - due, due being
 * arrival + D or the later time the downlink's bucket allowed (how late this program was), in
 * microseconds (1 us bins). Everything else goes to
 * stderr; exit 1 on a bad argument or a TAP that cannot be made. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

enum {
    MAX_PORTS = 32,
    MAX_MACS = 256,
    FRAME_MAX = 65536 + 64, /* a GSO frame and its virtio-net header */
    READ_BATCH = 64,        /* frames read from one port per turn */
    SPIN_NS = 20000,        /* the last stretch before a release is a spin */
    HIST_US = 1 << 18,      /* delay histogram: 1 us bins, the last one is "at least" */
    REC_HEAD = 16           /* a queued frame: u64 arrival ns, u32 length, u32 cost */
};

struct bucket {
    double tokens;   /* bytes; may go negative (debt) */
    int64_t last_ns; /* when tokens were last refilled */
};

struct port {
    char name[IFNAMSIZ];
    int fd;
    int readable;                       /* epoll said so and no EAGAIN since */
    struct bucket up;                   /* host -> switch */
    struct bucket down;                 /* switch -> host */
    uint8_t *ring;                      /* downlink FIFO: records of REC_HEAD + frame, 8-aligned */
    size_t ring_size, head, tail, used; /* used counts bytes, wrap padding included */
    size_t queued;                      /* records in the ring */
};

struct hist {
    uint32_t *bins; /* release - arrival, 1 us bins */
    uint32_t *late; /* release - due (due: arrival + D, or later when the rate held it) */
    uint64_t frames, bytes, dropped;
    int64_t since_ns;
};

static struct port ports[MAX_PORTS];
static int nports;
static struct {
    uint8_t mac[6];
    int port;
} macs[MAX_MACS];
static int nmacs, mac_next;
static double rate_bpns; /* bytes per ns; 0: unlimited */
static double burst;     /* bytes */
static int64_t delay_ns;
static size_t vnet_len;
static struct hist total, interval;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void set_rate(double mbit)
{
    rate_bpns = mbit * 1e6 / 8 / 1e9;
    burst = rate_bpns * 50000.0;
    if (burst < 65536)
        burst = 65536;
}

static void refill(struct bucket *b, int64_t now)
{
    if (rate_bpns <= 0) {
        b->tokens = burst;
    } else {
        b->tokens += (double)(now - b->last_ns) * rate_bpns;
        if (b->tokens > burst)
            b->tokens = burst;
    }
    b->last_ns = now;
}

/* When a bucket that is in debt is back at zero. */
static int64_t bucket_ready(const struct bucket *b)
{
    if (b->tokens >= 0 || rate_bpns <= 0)
        return b->last_ns;
    return b->last_ns + (int64_t)(-b->tokens / rate_bpns) + 1;
}

static int tap_open(const char *name, int offload, char *err, size_t errlen)
{
    struct ifreq ifr;
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "/dev/net/tun: %s", strerror(errno));
        return -1;
    }
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0);
    memcpy(ifr.ifr_name, name, strnlen(name, IFNAMSIZ - 1));
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        snprintf(err, errlen, "TAP %.15s: %s", name, strerror(errno));
        close(fd);
        return -1;
    }
    if (offload) {
        int hdr = (int)sizeof(struct virtio_net_hdr);
        unsigned off = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
        if (ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0 || ioctl(fd, TUNSETOFFLOAD, off) < 0) {
            snprintf(err, errlen, "TAP %.15s: offload: %s", name, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

static int mac_lookup(const uint8_t *mac)
{
    for (int i = 0; i < nmacs; i++)
        if (memcmp(macs[i].mac, mac, 6) == 0)
            return macs[i].port;
    return -1;
}

static void mac_learn(const uint8_t *mac, int port)
{
    if (mac[0] & 1)
        return;
    for (int i = 0; i < nmacs; i++)
        if (memcmp(macs[i].mac, mac, 6) == 0) {
            macs[i].port = port;
            return;
        }
    int slot = nmacs < MAX_MACS ? nmacs++ : mac_next++ % MAX_MACS;
    memcpy(macs[slot].mac, mac, 6);
    macs[slot].port = port;
}

/* The bytes a frame puts on the wire: a GSO frame is several, each with the headers. */
static uint32_t wire_cost(const uint8_t *frame, size_t len)
{
    size_t eth = len - vnet_len;
    if (vnet_len) {
        const struct virtio_net_hdr *h = (const void *)frame;
        if (h->gso_type != VIRTIO_NET_HDR_GSO_NONE && h->gso_size > 0 && h->hdr_len > 0 &&
            h->hdr_len < eth) {
            size_t segs = (eth - h->hdr_len + h->gso_size - 1) / h->gso_size;
            eth += (segs - 1) * h->hdr_len;
        }
    }
    return (uint32_t)eth;
}

static size_t rec_size(size_t len)
{
    return (REC_HEAD + len + 7) & ~(size_t)7;
}

/* Appends a frame to port p's downlink FIFO; 0, or -1 when it does not fit (dropped). */
static int enqueue(struct port *p, const uint8_t *frame, size_t len, uint32_t cost, int64_t at)
{
    size_t need = rec_size(len), pad = 0;
    if (p->tail + need > p->ring_size)
        pad = p->ring_size - p->tail; /* the record starts again at 0 */
    if (p->used + pad + need > p->ring_size)
        return -1;
    if (pad) {
        if (pad >= 12) {
            uint32_t zero = 0;
            memcpy(p->ring + p->tail + 8, &zero, 4); /* length 0: wrap marker */
        }
        p->used += pad;
        p->tail = 0;
    }
    uint8_t *r = p->ring + p->tail;
    uint32_t l = (uint32_t)len;
    memcpy(r, &at, 8);
    memcpy(r + 8, &l, 4);
    memcpy(r + 12, &cost, 4);
    memcpy(r + REC_HEAD, frame, len);
    p->tail += need;
    p->used += need;
    p->queued++;
    return 0;
}

/* Skips a wrap marker (or a tail too short for one) at the head. */
static void head_fix(struct port *p)
{
    if (!p->queued)
        return;
    size_t left = p->ring_size - p->head;
    uint32_t l = 0;
    if (left >= 12)
        memcpy(&l, p->ring + p->head + 8, 4);
    if (left < REC_HEAD || l == 0) {
        p->used -= left;
        p->head = 0;
    }
}

static long bin_of(int64_t ns)
{
    int64_t us = ns / 1000;
    return us < 0 ? 0 : us >= HIST_US ? HIST_US - 1 : (long)us;
}

static void hist_add(struct hist *h, int64_t delay, int64_t late, size_t bytes)
{
    h->bins[bin_of(delay)]++;
    h->late[bin_of(late)]++;
    h->frames++;
    h->bytes += bytes;
}

/* q: min, p50, p99, max of a histogram of frames entries (-1 when empty). */
static void quantiles(const uint32_t *bins, uint64_t frames, long q[4])
{
    uint64_t seen = 0;
    q[0] = q[1] = q[2] = q[3] = -1;
    for (long i = 0; i < HIST_US; i++) {
        if (!bins[i])
            continue;
        if (q[0] < 0)
            q[0] = i;
        seen += bins[i];
        if (q[1] < 0 && seen * 2 >= frames)
            q[1] = i;
        if (q[2] < 0 && seen * 100 >= frames * 99)
            q[2] = i;
        q[3] = i;
    }
}

static void hist_print(struct hist *h, const char *what, int64_t now)
{
    long d[4], l[4];
    quantiles(h->bins, h->frames, d);
    quantiles(h->late, h->frames, l);
    printf("{\"what\":\"%s\",\"seconds\":%.3f,\"frames\":%llu,\"bytes\":%llu,\"dropped\":%llu,"
           "\"delay_us\":{\"min\":%ld,\"p50\":%ld,\"p99\":%ld,\"max\":%ld},"
           "\"late_us\":{\"min\":%ld,\"p50\":%ld,\"p99\":%ld,\"max\":%ld}}\n",
           what, (double)(now - h->since_ns) / 1e9, (unsigned long long)h->frames,
           (unsigned long long)h->bytes, (unsigned long long)h->dropped, d[0], d[1], d[2], d[3],
           l[0], l[1], l[2], l[3]);
    fflush(stdout);
}

static void hist_reset(struct hist *h, int64_t now)
{
    memset(h->bins, 0, HIST_US * sizeof *h->bins);
    memset(h->late, 0, HIST_US * sizeof *h->late);
    h->frames = h->bytes = h->dropped = 0;
    h->since_ns = now;
}

/* Writes every frame of p that is due and that the downlink bucket allows; returns the time
 * of its next release, or INT64_MAX when its FIFO is empty. */
static int64_t release(struct port *p, int64_t now)
{
    while (p->queued) {
        head_fix(p);
        uint8_t *r = p->ring + p->head;
        int64_t at;
        uint32_t len, cost;
        memcpy(&at, r, 8);
        memcpy(&len, r + 8, 4);
        memcpy(&cost, r + 12, 4);
        refill(&p->down, now);
        int64_t due = at + delay_ns, ready = bucket_ready(&p->down);
        if (ready > due)
            due = ready;
        if (due > now)
            return due;
        int64_t t = now_ns(); /* the release: the frame is handed to the host's stack */
        ssize_t w = write(p->fd, r + REC_HEAD, len);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            return now + 10000; /* its queue is full: try again shortly */
        if (w < 0) {
            total.dropped++;
            interval.dropped++;
        } else {
            p->down.tokens -= cost;
            hist_add(&total, t - at, t - due, cost);
            hist_add(&interval, t - at, t - due, cost);
        }
        size_t need = rec_size(len);
        p->head += need;
        p->used -= need;
        p->queued--;
        if (p->head == p->ring_size)
            p->head = 0;
        now = now_ns();
    }
    p->head = p->tail = p->used = 0;
    return INT64_MAX;
}

/* Reads up to READ_BATCH frames from port i while its uplink bucket allows; returns the time
 * it may be read again (INT64_MAX: when epoll says it is readable). */
static int64_t take(int i, uint8_t *buf, int64_t now)
{
    struct port *p = &ports[i];
    for (int n = 0; n < READ_BATCH && p->readable; n++) {
        refill(&p->up, now);
        if (p->up.tokens < 0)
            return bucket_ready(&p->up);
        ssize_t len = read(p->fd, buf, FRAME_MAX);
        if (len < 0) {
            if (errno == EAGAIN)
                p->readable = 0;
            else if (errno != EINTR)
                fprintf(stderr, "delay_link: %s: read: %s\n", p->name, strerror(errno));
            break;
        }
        now = now_ns();
        if ((size_t)len < vnet_len + 14)
            continue;
        const uint8_t *eth = buf + vnet_len;
        uint32_t cost = wire_cost(buf, (size_t)len);
        p->up.tokens -= cost;
        mac_learn(eth + 6, i);
        int to = (eth[0] & 1) ? -1 : mac_lookup(eth);
        for (int j = 0; j < nports; j++) {
            if (j == i || (to >= 0 && j != to))
                continue;
            if (enqueue(&ports[j], buf, (size_t)len, cost, now) != 0) {
                total.dropped++;
                interval.dropped++;
            }
        }
    }
    return p->readable ? now : INT64_MAX;
}

/* One command line from stdin. */
static void command(char *line, int64_t now)
{
    char word[16];
    double v;
    int n = sscanf(line, "%15s %lf", word, &v);
    if (n >= 1 && strcmp(word, "stats") == 0) {
        hist_print(&interval, "stats", now);
        hist_reset(&interval, now);
    } else if (n == 2 && strcmp(word, "rate") == 0 && v >= 0) {
        set_rate(v);
    } else if (n == 2 && strcmp(word, "delay") == 0 && v >= 0) {
        delay_ns = (int64_t)(v * 1000);
    } else if (n >= 1) {
        fprintf(stderr, "delay_link: unknown command \"%s\" (stats, rate MBIT, delay US)\n", word);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: delay_link [--delay-us D] [--rate-mbit R] [--queue-kb Q] [--no-offload] "
               "TAP...\n"
               "  a switch between the TAP devices it makes: each frame delayed by D us (0) and\n"
               "  each port shaped to R Mbit/s each way (0: unlimited); Q KiB of queue per port\n"
               "  (4096); stdin: stats | rate MBIT | delay US\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"delay-us", required_argument, NULL, 'd'}, {"rate-mbit", required_argument, NULL, 'r'},
        {"queue-kb", required_argument, NULL, 'q'}, {"no-offload", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    double delay_us = 0, rate = 0, queue_kb = 4096;
    int offload = 1, c;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        double *dst = c == 'd' ? &delay_us : c == 'r' ? &rate : c == 'q' ? &queue_kb : NULL;
        if (dst) {
            *dst = strtod(optarg, &end);
            if (end == optarg || *end || *dst < 0) {
                fprintf(stderr, "delay_link: --%s: \"%s\" is not a number >= 0\n",
                        opts[c == 'd'   ? 0
                             : c == 'r' ? 1
                                        : 2]
                            .name,
                        optarg);
                return 1;
            }
        } else if (c == 'n') {
            offload = 0;
        } else if (c == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 1;
        }
    }
    nports = argc - optind;
    if (nports < 2 || nports > MAX_PORTS || queue_kb < 128) {
        fprintf(stderr, "delay_link: needs 2 to %d TAP names and --queue-kb >= 128\n", MAX_PORTS);
        return 1;
    }
    delay_ns = (int64_t)(delay_us * 1000);
    set_rate(rate);
    vnet_len = offload ? sizeof(struct virtio_net_hdr) : 0;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    uint8_t *buf = malloc(FRAME_MAX);
    char err[256];
    total.bins = calloc(HIST_US, sizeof *total.bins);
    interval.bins = calloc(HIST_US, sizeof *interval.bins);
    total.late = calloc(HIST_US, sizeof *total.late);
    interval.late = calloc(HIST_US, sizeof *interval.late);
    if (sfd < 0 || ep < 0 || !buf || !total.bins || !interval.bins || !total.late ||
        !interval.late) {
        fprintf(stderr, "delay_link: out of resources: %s\n", strerror(errno));
        return 1;
    }
    int64_t now = now_ns();
    for (int i = 0; i < nports; i++) {
        struct port *p = &ports[i];
        if (strlen(argv[optind + i]) >= IFNAMSIZ) {
            fprintf(stderr, "delay_link: TAP name \"%s\" is longer than %d characters\n",
                    argv[optind + i], IFNAMSIZ - 1);
            return 1;
        }
        memcpy(p->name, argv[optind + i], strlen(argv[optind + i]));
        p->fd = tap_open(p->name, offload, err, sizeof err);
        p->ring_size = (size_t)(queue_kb * 1024) & ~(size_t)7;
        p->ring = malloc(p->ring_size);
        if (p->fd < 0 || !p->ring) {
            fprintf(stderr, "delay_link: %s\n", p->fd < 0 ? err : "out of memory");
            return 1;
        }
        p->up.tokens = p->down.tokens = burst;
        p->up.last_ns = p->down.last_ns = now;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev);
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 1000};
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
    ev.data.u32 = 1001;
    int in_open = epoll_ctl(ep, EPOLL_CTL_ADD, STDIN_FILENO, &ev) == 0;
    hist_reset(&total, now);
    hist_reset(&interval, now);
    printf("ready\n");
    fflush(stdout);

    char line[256];
    size_t line_len = 0;
    int64_t wake = INT64_MAX;
    for (;;) {
        struct epoll_event evs[MAX_PORTS + 2];
        struct timespec ts, *tp = NULL;
        now = now_ns();
        if (wake != INT64_MAX) {
            int64_t wait = wake - now - SPIN_NS;
            if (wait < 0)
                wait = 0;
            ts.tv_sec = wait / 1000000000;
            ts.tv_nsec = wait % 1000000000;
            tp = &ts;
        }
        int n = epoll_pwait2(ep, evs, MAX_PORTS + 2, tp, NULL);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "delay_link: epoll: %s\n", strerror(errno));
            return 1;
        }
        for (int k = 0; k < n; k++) {
            uint32_t id = evs[k].data.u32;
            if (id < (uint32_t)nports) {
                ports[id].readable = 1;
            } else if (id == 1000) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == sizeof si)
                    ;
                hist_print(&total, "total", now_ns());
                goto done;
            } else if (in_open) {
                ssize_t r = read(STDIN_FILENO, line + line_len, sizeof line - 1 - line_len);
                if (r <= 0) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, STDIN_FILENO, NULL);
                    in_open = 0;
                    continue;
                }
                line_len += (size_t)r;
                line[line_len] = 0;
                char *nl;
                while ((nl = strchr(line, '\n'))) {
                    *nl = 0;
                    command(line, now_ns());
                    line_len -= (size_t)(nl + 1 - line);
                    memmove(line, nl + 1, line_len + 1);
                }
                if (line_len == sizeof line - 1)
                    line_len = 0; /* an overlong line: dropped */
            }
        }
        /* Spin through the last stretch before the next release. */
        if (n == 0 && wake != INT64_MAX)
            while (now_ns() < wake)
                ;
        now = now_ns();
        wake = INT64_MAX;
        for (int i = 0; i < nports; i++) {
            int64_t t = take(i, buf, now);
            if (t < wake)
                wake = t;
        }
        now = now_ns();
        for (int i = 0; i < nports; i++) {
            int64_t t = release(&ports[i], now);
            if (t < wake)
                wake = t;
        }
    }
done:
    for (int i = 0; i < nports; i++) {
        close(ports[i].fd);
        free(ports[i].ring);
    }
    free(buf);
    free(total.bins);
    free(interval.bins);
    free(total.late);
    free(interval.late);
    close(ep);
    close(sfd);
    return 0;
}
