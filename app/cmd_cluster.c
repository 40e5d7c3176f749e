/* The cluster commands: `nnlab worker` (started by a driver over SSH, not for people) and
 * `nnlab hosts check`; and the options train shares with them for reaching hosts. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#include "nnlab/text.h"
#include "nnlab/worker.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif

int parse_port_range(const char *s, int *lo, int *hi)
{
    long a, b;
    char buf[32];
    const char *dash = strchr(s, '-');
    if (!dash || (size_t)(dash - s) >= sizeof buf)
        return 0;
    memcpy(buf, s, (size_t)(dash - s));
    buf[dash - s] = '\0';
    if (!parse_int(buf, 1, 65535, &a) || !parse_int(dash + 1, 1, 65535, &b) || a > b)
        return 0;
    *lo = (int)a;
    *hi = (int)b;
    return 1;
}

int cmd_worker(int argc, char **argv)
{
    static const struct option opts[] = {
        {"bind", required_argument, NULL, 'B'},
        {"port-range", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    struct nl_worker_opts wo = {0};
    struct nl_error err = {0};
    int c;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'B')
            wo.bind = optarg;
        else if (c != 'P')
            return option_error("worker");
        else if (!parse_port_range(optarg, &wo.port_lo, &wo.port_hi))
            return usage_error("worker", "--port-range %s: want A-B", optarg);
    }
    if (optind < argc)
        return usage_error("worker", "unexpected argument '%s'", argv[optind]);
    /* stdout carries frames to the driver: nothing else may be printed there. */
    if (nl_worker_run(STDIN_FILENO, STDOUT_FILENO, &wo, &err) < 0) {
        fprintf(stderr, "nnlab worker: %s\n", err.msg);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

#if NNLAB_HAVE_SSH
int cmd_hosts(int argc, char **argv)
{
    static const struct option opts[] = {
        {"hostfile", required_argument, NULL, 'H'},
        {"ssh-config", required_argument, NULL, 'C'},
        {"accept-new-host-keys", no_argument, NULL, 'A'},
        {"remote-nnlab", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0},
    };
    struct nl_ssh_opts so = {.version = "nnlab " NNLAB_VERSION, .timeout_ms = 30000};
    struct nl_error err = {0};
    struct nl_host *hosts = NULL;
    const char *hostfile = NULL;
    int n = 0, c, failed = 0;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'H')
            hostfile = optarg;
        else if (c == 'C')
            so.config = optarg;
        else if (c == 'A')
            so.accept_new = 1;
        else if (c == 'R')
            so.remote_nnlab = optarg;
        else
            return option_error("hosts");
    }
    if (optind >= argc || strcmp(argv[optind], "check") != 0)
        return usage_error("hosts", "the one subcommand is 'check'");
    optind++;
    if (hostfile && optind < argc)
        return usage_error("hosts", "give hosts as H1,H2,... or --hostfile FILE, not both");
    if (!hostfile && optind + 1 != argc)
        return usage_error("hosts", "needs H1[:CORES],H2,... or --hostfile FILE");
    if ((hostfile ? nl_hosts_load(hostfile, &hosts, &n, &err)
                  : nl_hosts_parse(argv[optind], &hosts, &n, &err)) < 0)
        return usage_error("hosts", "%s", err.msg);

    if (!g.json && !g.quiet)
        printf("%-20s %-8s %-22s %-14s %5s %9s  %s\n", "HOST", "USER", "ADDRESS", "NNLAB", "CORES",
               "MEMORY", "BINARY");
    for (int i = 0; i < n; i++) {
        struct nl_host_report r;
        int rc = nl_host_check(&hosts[i], &so, &r, &err);
        if (rc < 0) {
            failed = 1;
            if (g.json) {
                printf("{\"host\":");
                json_str(stdout, hosts[i].name);
                printf(",\"ok\":false,\"error\":");
                json_str(stdout, err.msg);
                printf("}\n");
            }
            fail(&err); /* control characters from the host escaped */
            continue;
        }
        if (g.json) {
            printf("{\"host\":");
            json_str(stdout, hosts[i].name);
            printf(",\"ok\":true,\"user\":");
            json_str(stdout, r.user);
            printf(",\"address\":");
            json_str(stdout, r.address);
            printf(",\"port\":%d,\"version\":", r.port);
            if (r.remote_version[0])
                json_str(stdout, r.remote_version);
            else
                printf("null");
            printf(",\"cores\":%d,\"memory_kb\":%lld,\"upload\":%s}\n", r.cores, r.mem_kb,
                   r.would_upload ? "true" : "false");
        } else {
            /* What the user wrote and what the host answered, escaped for the terminal. */
            char addr[80], mem[16], hb[256], ub[128], ab[256], vb[256];
            snprintf(addr, sizeof addr, "%s:%d", r.address, r.port);
            snprintf(mem, sizeof mem, "%.1f GiB", (double)r.mem_kb / (1024.0 * 1024.0));
            printf("%-20s %-8s %-22s %-14s %5d %9s  %s\n",
                   nl_term_str(hb, sizeof hb, hosts[i].name), nl_term_str(ub, sizeof ub, r.user),
                   nl_term_str(ab, sizeof ab, addr),
                   r.remote_version[0] ? nl_term_str(vb, sizeof vb, r.remote_version) : "none",
                   r.cores, mem, r.would_upload ? "would upload this nnlab" : "ready");
        }
        fflush(stdout);
    }
    nl_free(hosts);
    return failed ? EXIT_FAIL : EXIT_OK;
}
#endif
