/* Cluster mode across separate network stacks: two "hosts", each a network namespace with its
 * own sshd on 10.213.0.1X:22, joined to the driver by veth pairs on a bridge in a third
 * namespace (no forwarding, no routes outside). Workers listen where the driver reached them
 * and mesh over the bridge. Skipped where `ip netns` cannot be used (no root, no bridge). Every
 * namespace, link and process made here is removed at the end. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>

#include "sh.h"
#include "sshd.h"
#include "tap.h"

static char tag[16], dir[256];
static pid_t sshd_pid[2];
static int made;

static void teardown(void)
{
    for (int k = 0; k < 2; k++)
        if (sshd_pid[k] > 0) {
            kill(sshd_pid[k], SIGTERM);
            waitpid(sshd_pid[k], NULL, 0);
        }
    if (made) {
        /* Deleting a namespace deletes the links inside it and their veth peers. */
        sh("ip netns del %ssw 2>/dev/null; ip netns del %sh1 2>/dev/null; "
           "ip netns del %sh2 2>/dev/null; ip link del %sd 2>/dev/null",
           tag, tag, tag, tag);
    }
    if (dir[0] && !getenv("NNLAB_KEEP_SSHD"))
        sh("rm -rf '%s'", dir);
}

/* sw: the switch namespace with bridge br0; hK: host K with 10.213.0.1K; the driver's side (this
 * namespace) gets 10.213.0.1 on link TAGd. */
static int setup(void)
{
    made = 1;
    if (sh("ip netns add %ssw && ip netns exec %ssw ip link add br0 type bridge && "
           "ip netns exec %ssw ip link set br0 up && ip netns exec %ssw ip link set lo up",
           tag, tag, tag, tag) != 0)
        return -1;
    if (sh("ip link add %sd type veth peer name %sD && ip link set %sD netns %ssw && "
           "ip netns exec %ssw ip link set %sD master br0 up && "
           "ip addr add 10.213.0.1/24 dev %sd && ip link set %sd up",
           tag, tag, tag, tag, tag, tag, tag, tag) != 0)
        return -1;
    for (int k = 1; k <= 2; k++)
        if (sh("ip netns add %sh%d && ip netns exec %sh%d ip link set lo up && "
               "ip link add %s%d type veth peer name %sH%d && "
               "ip link set %s%d netns %sh%d && ip link set %sH%d netns %ssw && "
               "ip netns exec %ssw ip link set %sH%d master br0 up && "
               "ip netns exec %sh%d ip addr add 10.213.0.1%d/24 dev %s%d && "
               "ip netns exec %sh%d ip link set %s%d up",
               tag, k, tag, k, tag, k, tag, k, tag, k, tag, k, tag, k, tag, tag, tag, k, tag, k, k,
               tag, k, tag, k, tag, k) != 0)
            return -1;
    return 0;
}

int main(void)
{
    const char *bin = getenv("NNLAB_BIN");
    char text[4096], cmd[2048];

    if (!bin || access(bin, X_OK) != 0)
        skip_all("NNLAB_BIN does not name the nnlab binary");
    snprintf(cmd, sizeof cmd, "'%s' hosts --help >/dev/null 2>&1", bin);
    if (system(cmd) != 0)
        skip_all("this nnlab was built without cluster mode (libssh)");
    if (geteuid() != 0 || access("/usr/sbin/ip", X_OK) != 0 || access(SSHD_BIN, X_OK) != 0 ||
        access(KEYGEN, X_OK) != 0)
        skip_all("needs root, ip and sshd for network namespaces");
    if (access("/run/sshd", F_OK) != 0 && mkdir("/run/sshd", 0755) != 0)
        skip_all("no /run/sshd");
    snprintf(tag, sizeof tag, "nl%05d", (int)(getpid() % 100000));
    if (setup() != 0) {
        teardown();
        skip_all("ip netns, veth or bridges are not available here");
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(dir, sizeof dir, "/tmp/nnlab-netns-XXXXXX");
    if (!mkdtemp(dir)) {
        teardown();
        skip_all("no temporary folder");
    }
    sh("cd %s && mkdir home && " KEYGEN " -q -t ed25519 -N '' -f host_key && " KEYGEN
       " -q -t ed25519 -N '' -f user_key && cp user_key.pub authorized_keys && : > known_hosts",
       dir);
    for (int k = 1; k <= 2; k++) {
        char name[32], conf[512];
        snprintf(text, sizeof text,
                 "Port 22\nListenAddress 10.213.0.1%d\nHostKey %s/host_key\nPidFile none\n"
                 "AuthorizedKeysFile %s/authorized_keys\nPasswordAuthentication no\n"
                 "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
                 "StrictModes no\nUsePAM no\nSetEnv HOME=%s/home\n"
                 "Subsystem sftp " SFTP_BIN " -d %s/home\nLogLevel ERROR\n",
                 k, dir, dir, dir, dir);
        snprintf(name, sizeof name, "sshd_config%d", k);
        sshd_write(dir, name, text);
        snprintf(conf, sizeof conf, "%s/%s", dir, name);
        char ns[32];
        snprintf(ns, sizeof ns, "%sh%d", tag, k);
        sshd_pid[k - 1] = fork();
        if (sshd_pid[k - 1] == 0) {
            char log[600];
            snprintf(log, sizeof log, "%s/sshd%d.log", dir, k);
            freopen("/dev/null", "w", stdout);
            freopen(log, "w", stderr);
            execlp("ip", "ip", "netns", "exec", ns, SSHD_BIN, "-D", "-e", "-f", conf, (char *)NULL);
            _exit(127);
        }
    }
    sh("cd %s && for k in 1 2; do printf '10.213.0.1%%s %%s\\n' $k \"$(cat host_key.pub)\" "
       ">> known_hosts; done",
       dir);
    /* One block per host: libssh matches later Host lines against the HostName already set. */
    snprintf(text, sizeof text,
             "Host lab1\n    HostName 10.213.0.11\n    User root\n    IdentityFile %s/user_key\n"
             "    UserKnownHostsFile %s/known_hosts\n"
             "Host lab2\n    HostName 10.213.0.12\n    User root\n    IdentityFile %s/user_key\n"
             "    UserKnownHostsFile %s/known_hosts\n",
             dir, dir, dir, dir);
    sshd_write(dir, "ssh_config", text);
    sshd_write(dir, "spec", "fc1: dense 16\nrelu\nfc2: dense N\n");

    /* A small dataset: the synthetic quadrants of test_cluster, 200 images. */
    {
        char path[600];
        snprintf(path, sizeof path, "%s/data", dir);
        mkdir(path, 0755);
        sh("python3 - '%s/data' <<'EOF'\n"
           "import struct, random, sys\n"
           "d = sys.argv[1]; r = random.Random(1); n = 200\n"
           "im = bytearray(); lb = bytearray()\n"
           "for i in range(n):\n"
           "    k = r.randrange(4); oy = (k // 2) * 6 + 1; ox = (k %% 2) * 6 + 1\n"
           "    img = [r.randrange(80) for _ in range(144)]\n"
           "    for y in range(4):\n"
           "        for x in range(4): img[(oy + y) * 12 + ox + x] = 200\n"
           "    im += bytes(img); lb.append(k)\n"
           "open(d + '/train-images-idx3-ubyte', 'wb').write(struct.pack('>IIII', 0x803, n, 12, "
           "12) + im)\n"
           "open(d + '/train-labels-idx1-ubyte', 'wb').write(struct.pack('>II', 0x801, n) + lb)\n"
           "EOF",
           dir);
    }
    int up = 0;
    for (int i = 0; i < 100 && !up; i++) {
        usleep(50000);
        up = sh("timeout 1 bash -c 'echo > /dev/tcp/10.213.0.11/22 && echo > "
                "/dev/tcp/10.213.0.12/22' 2>/dev/null") == 0;
    }
    ok(up, "both namespaced sshd listen");
    is_int(sh("'%s' --db '%s/db' import syn '%s/data' >/dev/null", bin, dir, dir), 0, "import");
    is_int(sh("env -u SSH_AUTH_SOCK '%s' --db '%s/db' hosts check lab1,lab2 --ssh-config "
              "'%s/ssh_config' > '%s/out' 2>&1",
              bin, dir, dir, dir),
           0, "hosts check reaches both namespaces");
    for (int n = 1; n <= 2; n++)
        is_int(sh("env -u SSH_AUTH_SOCK '%s' --db '%s/db' --json train --data syn --model "
                  "'%s/spec' --epochs 2 --batch 16 --hosts %s --ssh-config '%s/ssh_config' "
                  "> '%s/out%d' 2>'%s/err%d'",
                  bin, dir, dir, n == 1 ? "lab1" : "lab1,lab2", dir, dir, n, dir, n),
               0, "%d worker%s across namespaces train%s", n, n > 1 ? "s" : "", n > 1 ? "" : "s");
    char path[600];
    double loss[3] = {0};
    for (int n = 1; n <= 2; n++) {
        snprintf(path, sizeof path, "%s/out%d", dir, n);
        char *t = sshd_read(path);
        const char *p = t ? strstr(t, "\"epoch\":2,\"train_loss\":") : NULL;
        loss[n] = p ? strtod(p + 23, NULL) : NAN;
    }
    ok(isfinite(loss[1]) && fabs(loss[1] - loss[2]) < 1e-4,
       "the 2-namespace run matches the 1-worker loss (%.6f, %.6f)", loss[1], loss[2]);
    snprintf(path, sizeof path, "%s/out2", dir);
    char *t = sshd_read(path);
    like(t, "\"host\":\"lab2\"", "the second worker reports as lab2");
    /* Workers run the binary uploaded under dir; none may outlive the run. */
    int left = 1;
    for (int i = 0; i < 50 && left; i++) {
        char probe[400];
        snprintf(probe, sizeof probe, "pgrep -f '^%s/home/.cache/nnlab/bin/.* worker' >/dev/null",
                 dir);
        left = sh("%s", probe) == 0;
        if (left)
            usleep(100000);
    }
    ok(!left, "no worker is left in either namespace");
    teardown();
    return done_testing();
}
