/* tests/bench/delay_link really delays: two network namespaces whose eth0 are TAP ports of
 * delay_link, pinged through it with --delay-us 2000 (a round trip crosses it twice: >= 4 ms)
 * and then, after "delay 0" on its stdin, without delay (well below). Its "stats" line reports
 * the delay it applied. After "rate 20", one TCP stream through it (Python sockets at each end)
 * reaches at most 20 Mbit/s. Skipped where it cannot run (no root, no /dev/net/tun, no ip, ping
 * or /usr/bin/python3). The namespaces (netdelay<pid>a/b) and the delay_link process (by pid)
 * are removed at the end. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sh.h"
#include "tap.h"

static char tag[32];
static pid_t link_pid;
static FILE *link_in, *link_out;
static int made;

static void teardown(void)
{
    if (link_pid > 0) {
        kill(link_pid, SIGTERM);
        waitpid(link_pid, NULL, 0);
        link_pid = 0;
    }
    if (made)
        sh("ip netns del %sa 2>/dev/null; ip netns del %sb 2>/dev/null", tag, tag);
}

/* Starts delay_link with TAPs TAGa and TAGb; 0 once it has said "ready". */
static int start_link(const char *bin, const char *delay_us)
{
    int in[2], out[2];
    char line[64];
    if (pipe(in) != 0 || pipe(out) != 0)
        return -1;
    link_pid = fork();
    if (link_pid < 0)
        return -1;
    if (link_pid == 0) {
        char a[40], b[40];
        snprintf(a, sizeof a, "%sa", tag);
        snprintf(b, sizeof b, "%sb", tag);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl(bin, bin, "--delay-us", delay_us, a, b, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    link_in = fdopen(in[1], "w");
    link_out = fdopen(out[0], "r");
    if (!link_in || !link_out || !fgets(line, sizeof line, link_out))
        return -1;
    return strcmp(line, "ready\n") == 0 ? 0 : -1;
}

static void say(const char *cmd)
{
    fprintf(link_in, "%s\n", cmd);
    fflush(link_in);
}

/* ping's round trips from a to b (10 pings): min and avg in ms; -1 when ping failed. */
static int ping(double *min, double *avg)
{
    char cmd[256], line[512];
    int found = 0;
    snprintf(cmd, sizeof cmd, "ip netns exec %sa ping -q -c 10 -i 0.02 -W 2 10.216.0.2 2>&1", tag);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    while (fgets(line, sizeof line, p)) {
        char *eq = strstr(line, "rtt min/avg/max");
        if (eq && sscanf(strchr(eq, '=') + 1, " %lf/%lf", min, avg) == 2)
            found = 1;
    }
    return pclose(p) == 0 && found ? 0 : -1;
}

/* Mbit/s of TCP payload that host b received of 2.5 MB sent by host a (/usr/bin/python3 at each
 * end), from its first byte to the last; -1 when the transfer failed. */
static double stream_mbit(void)
{
    char out[] = "/tmp/netdelay-rateXXXXXX";
    double mbit = -1;
    int fd = mkstemp(out);
    if (fd < 0)
        return -1;
    close(fd);
    int rc = sh("ip netns exec %sb /usr/bin/python3 -c \""
                "import socket,time\n"
                "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
                "s.bind(('10.216.0.2',5201));s.listen(1);c,_=s.accept();n=0;t0=None\n"
                "while True:\n b=c.recv(1<<16)\n t0=t0 or time.time()\n if not b: break\n"
                " n+=len(b);t1=time.time()\n"
                "print(n*8/(t1-t0)/1e6)\" > %s & sleep 0.5; "
                "ip netns exec %sa /usr/bin/python3 -c \""
                "import socket\n"
                "c=socket.create_connection(('10.216.0.2',5201));c.sendall(bytes(2500000))\n"
                "c.close()\"; wait",
                tag, out, tag);
    FILE *f = fopen(out, "r");
    if (rc != 0 || !f || fscanf(f, "%lf", &mbit) != 1)
        mbit = -1;
    if (f)
        fclose(f);
    unlink(out);
    return mbit;
}

/* The number after "KEY": in a JSON line; -1 when absent. */
static long json_num(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(line, pat);
    return at ? strtol(at + strlen(pat), NULL, 10) : -1;
}

int main(void)
{
    const char *bin = getenv("NNLAB_DELAY_LINK");
    double min = 0, avg = 0;
    char line[1024];

    if (!bin || access(bin, X_OK) != 0)
        skip_all("NNLAB_DELAY_LINK does not name the delay_link binary");
    if (geteuid() != 0 || access("/dev/net/tun", R_OK | W_OK) != 0)
        skip_all("needs root and /dev/net/tun for TAP devices");
    if (sh("command -v ip >/dev/null && command -v ping >/dev/null") != 0 ||
        access("/usr/bin/python3", X_OK) != 0)
        skip_all("needs ip (iproute2), ping (iputils-ping) and /usr/bin/python3");
    snprintf(tag, sizeof tag, "netdelay%05d", (int)(getpid() % 100000));
    signal(SIGPIPE, SIG_IGN);

    if (start_link(bin, "2000") != 0) {
        teardown();
        skip_all("delay_link could not make its TAP devices here");
    }
    made = 1;
    int setup = 0;
    for (int k = 0; k < 2 && setup == 0; k++)
        setup = sh("ip netns add %s%c && ip netns exec %s%c ip link set lo up && "
                   "ip link set %s%c netns %s%c && "
                   "ip netns exec %s%c ip addr add 10.216.0.%d/24 dev %s%c && "
                   "ip netns exec %s%c ip link set %s%c up",
                   tag, 'a' + k, tag, 'a' + k, tag, 'a' + k, tag, 'a' + k, tag, 'a' + k, k + 1, tag,
                   'a' + k, tag, 'a' + k, tag, 'a' + k);
    if (setup != 0) {
        teardown();
        skip_all("network namespaces cannot be made here");
    }

    say("stats"); /* a new interval: the pings alone */
    ok(fgets(line, sizeof line, link_out) != NULL, "delay_link answers \"stats\"");
    ok(ping(&min, &avg) == 0, "ping crosses delay_link with --delay-us 2000");
    diag("RTT with 2000 us each way: min %.3f ms, avg %.3f ms", min, avg);
    ok(min >= 4.0, "the round trip is at least twice the delay (%.3f ms >= 4 ms)", min);
    say("stats");
    ok(fgets(line, sizeof line, link_out) != NULL, "its stats line comes");
    diag("%s", strtok(line, "\n"));
    ok(json_num(line, "frames") >= 20, "it carried the 20 pings and replies (%ld frames)",
       json_num(line, "frames"));
    ok(json_num(line, "min") >= 2000, "every frame was held at least 2000 us (min %ld us)",
       json_num(line, "min"));

    say("delay 0");
    double min0 = 0, avg0 = 0;
    ok(ping(&min0, &avg0) == 0, "ping crosses delay_link after \"delay 0\"");
    diag("RTT without delay: min %.3f ms, avg %.3f ms", min0, avg0);
    ok(min0 < 2.0 && min0 < min / 2, "without delay the round trip is well below (%.3f ms)", min0);

    say("rate 20");
    double mbit = stream_mbit();
    diag("one TCP stream through a 20 Mbit/s link: %.1f Mbit/s", mbit);
    /* Payload is 1448 of every 1514 bytes on the wire (19.1 of 20 Mbit/s); the two buckets'
     * first 64 KiB each come at once, which may lift the figure by a few percent. */
    ok(mbit > 10 && mbit <= 21, "\"rate 20\" holds a TCP stream to 20 Mbit/s (%.1f)", mbit);

    fclose(link_in);
    kill(link_pid, SIGTERM);
    int status = 0;
    ok(fgets(line, sizeof line, link_out) != NULL && strstr(line, "\"what\":\"total\""),
       "on SIGTERM it prints its totals");
    waitpid(link_pid, &status, 0);
    link_pid = 0;
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "and exits 0");
    fclose(link_out);
    teardown();
    ok(sh("ip link show %sa >/dev/null 2>&1", tag) != 0, "its TAP devices are gone");
    return done_testing();
}
