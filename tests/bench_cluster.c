/* Cluster benchmark (meson benchmark, not a timed test): lenet on a Fashion-MNIST subset, one
 * epoch on 1 worker x 1 core and on 2 workers x 1 core, through the private sshd of
 * tests/sshd.h (tests/cluster_util.h), and on 2 MPI ranks x 1 core under mpirun when this nnlab has
 * MPI mode. Reports images per second, the scaling efficiency (2-worker throughput over twice the
 * 1-worker throughput) and each worker's fraction of time spent communicating, for both transports.
 * NNLAB_BENCH_SAMPLES sets the subset's size (default 6000). On one machine the two workers
 * share its cores and memory bandwidth: the numbers say what the protocol costs, not what two
 * machines would give. */
#include <stdint.h>
#include <zlib.h>

#include "cluster_util.h"
#include "idx_writer.h"

#define FASHION "/usr/share/datasets/fashion-mnist"

/* nnlab ARGS after prefix (a launcher, or ""); its exit status, its stderr shown when not 0. */
static int run_with(const char *prefix, const char *args)
{
    const int st = cluster_run(prefix, args);
    if (st != 0)
        fprintf(stderr, "nnlab %s: %s\n", args, errtext);
    return st;
}

static int run(const char *args)
{
    return run_with("", args);
}

/* The first n images of Fashion-MNIST's training pair, uncompressed, in DIR/fashion. */
static int subset(uint32_t n)
{
    char images[600], labels[600];
    uint8_t *px, *lab;
    if (idx_read_first(FASHION "/train", n, &px, &lab) != 0)
        return -1;
    snprintf(images, sizeof images, "%s/fashion", sd.dir);
    mkdir(images, 0755);
    snprintf(images, sizeof images, "%s/fashion/train-images-idx3-ubyte", sd.dir);
    snprintf(labels, sizeof labels, "%s/fashion/train-labels-idx1-ubyte", sd.dir);
    const int rc = idx_write_raw(images, labels, px, lab, n, 28, 28);
    free(px);
    free(lab);
    return rc;
}

/* From the done line: total images per second over the run's training seconds, and each
 * worker's comm_fraction. */
static double done_field(const char *key, int nth)
{
    const char *p = strstr(out, "\"event\":\"done\"");
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    for (int i = 0; p && i <= nth; i++) {
        p = strstr(p, k);
        if (p && i < nth)
            p++;
    }
    return p ? strtod(p + strlen(k), NULL) : -1;
}

/* 2 MPI ranks x 1 core on the same data, against the 1-worker SSH run's one_ips. */
static void bench_mpi(int rounds, double one_ips)
{
    char probe[700], args[2048];
    snprintf(probe, sizeof probe, "'%s' train --help | grep -q -- --mpi", bin);
    if (system("command -v mpirun >/dev/null 2>&1") != 0 || system(probe) != 0) {
        printf("MPI transport: skipped (no mpirun, or nnlab built without MPI)\n");
        return;
    }
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    double ips = 0, comm = 0;
    const int n = rounds > 0 ? rounds : 1;
    for (int r = 0; r < n; r++) {
        snprintf(args, sizeof args,
                 "--json train --data fashion --model lenet --epochs 1 --batch 64 --threads 1 "
                 "--mpi");
        if (run_with("mpirun --oversubscribe --bind-to none -np 2", args) != 0)
            return;
        const char *e = strstr(out, "\"event\":\"epoch\"");
        const char *k = e ? strstr(e, "\"images_per_second\":") : NULL;
        ips += (k ? strtod(k + 20, NULL) : 0) / n;
        comm += (done_field("comm_fraction", 0) + done_field("comm_fraction", 1)) / 2 / n;
    }
    printf("2 MPI ranks x 1 core (mpirun, mean of %d): %8.0f images/s, comm_fraction %.3f, "
           "scaling efficiency against 1 x 1: %.2f\n",
           n, ips, comm, one_ips > 0 ? ips / (2.0 * one_ips) : 0.0);
}

int main(void)
{
    char args[2048];
    const char *why;
    long samples = getenv("NNLAB_BENCH_SAMPLES") ? atol(getenv("NNLAB_BENCH_SAMPLES")) : 6000;

    if (access(FASHION, R_OK) != 0 || samples < 100 || samples > 60000) {
        printf("bench_cluster: needs dataset-fashion-mnist\n");
        return 0;
    }
    why = cluster_start();
    if (why) {
        printf("bench_cluster: skipped: %s\n", why);
        return 0;
    }
    if (subset((uint32_t)samples) != 0) {
        printf("bench_cluster: cannot read Fashion-MNIST\n");
        sshd_stop(&sd);
        return 1;
    }
    snprintf(args, sizeof args, "import fashion '%s/fashion'", sd.dir);
    run(args);
    /* 1 worker, then 2 workers with sealed frames and with --insecure-plaintext, alternating
     * for NNLAB_BENCH_ROUNDS rounds (default 1) so that a noisy machine weighs on both alike. */
    const int rounds = getenv("NNLAB_BENCH_ROUNDS") ? atoi(getenv("NNLAB_BENCH_ROUNDS")) : 1;
    double ips[3] = {0}, comm[3][2] = {{0}}, mode_ips[2] = {0}, mode_comm[2] = {0};
    for (int n = 1; n <= 2; n++) {
        const int runs = n == 1 ? 1 : 2 * (rounds > 0 ? rounds : 1);
        for (int r = 0; r < runs; r++) {
            const int plain = n == 2 && r % 2 == 1;
            snprintf(args, sizeof args,
                     "--json train --data fashion --model lenet --epochs 1 --batch 64 --hosts %s "
                     "--ssh-config '%s/ssh_config'%s",
                     n == 1 ? "node1:1" : "node1:1,node2:1", sd.dir,
                     plain ? " --insecure-plaintext" : "");
            if (run(args) != 0)
                break;
            const char *e = strstr(out, "\"event\":\"epoch\"");
            const char *k = e ? strstr(e, "\"images_per_second\":") : NULL;
            const double v = k ? strtod(k + 20, NULL) : 0;
            if (n == 1) {
                ips[1] = v;
                comm[1][0] = done_field("comm_fraction", 0);
                continue;
            }
            printf("2 workers, %s, round %d: %8.0f images/s\n", plain ? "plaintext" : "sealed",
                   r / 2 + 1, v);
            mode_ips[plain] += v / (runs / 2);
            mode_comm[plain] +=
                (done_field("comm_fraction", 0) + done_field("comm_fraction", 1)) / 2 / (runs / 2);
            if (!plain) {
                ips[2] += v / (runs / 2);
                for (int w = 0; w < 2; w++)
                    comm[2][w] += done_field("comm_fraction", w) / (runs / 2);
            }
        }
    }
    printf("lenet, %ld Fashion-MNIST images, 1 epoch, batch 64, workers on 127.0.0.1 via sshd\n",
           samples);
    printf("1 worker  x 1 core: %8.0f images/s, comm_fraction %.3f\n", ips[1], comm[1][0]);
    printf("2 workers x 1 core: %8.0f images/s, comm_fraction %.3f %.3f (sealed)\n", ips[2],
           comm[2][0], comm[2][1]);
    printf("scaling efficiency (2 x 1 against 1 x 1): %.2f\n",
           ips[1] > 0 ? ips[2] / (2.0 * ips[1]) : 0.0);
    printf("sealed against --insecure-plaintext, 2 workers, mean of %d: %.0f against %.0f "
           "images/s (step time %+.1f%%), comm_fraction %.3f against %.3f\n",
           rounds > 0 ? rounds : 1, mode_ips[0], mode_ips[1],
           mode_ips[0] > 0 ? 100.0 * (mode_ips[1] / mode_ips[0] - 1.0) : 0.0, mode_comm[0],
           mode_comm[1]);
    bench_mpi(rounds, ips[1]);
    sshd_stop(&sd);
    return 0;
}
