/* `nnlab bench` end to end through the real binary: usage errors, and with the Fashion-MNIST
 * package installed, a short JSON run on a temporary store that leaves nothing behind. The
 * measuring itself (FLOP counts, timed steps without allocation) is tested in test_train. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nnlab_cli.h"
#include "tap.h"

#define FASHION "/usr/share/datasets/fashion-mnist"

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Entries of dir other than . and the test's own output files. */
static int leftovers(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "out") != 0 && strcmp(e->d_name, "err") != 0)
            n++;
    closedir(d);
    return n;
}

/* The numbers of the JSON array that follows key in text, at most max; returns their count. */
static int numbers_after(const char *text, const char *key, double *v, int max)
{
    const char *p = strstr(text, key);
    int n = 0;

    if (!p)
        return 0;
    p += strlen(key);
    while (n < max && *p != ']') {
        char *end;
        v[n++] = strtod(p, &end);
        if (end == p)
            return 0;
        p = end + (*end == ',');
    }
    return n;
}

/* In a --repeat 3 JSON bench of resnet18-16 at batch 4 on 1 and 2 threads: the two-thread row's
 * speedup of each round is its images/s over the one-thread row's in that round, and the speedup
 * is their median. */
static void check_speedups(const char *json, const char *mode)
{
    char head[160];
    double one[3], two[3], rounds[3], x = 0.0;

    snprintf(head, sizeof head,
             "{\"model\":\"resnet18-16\",\"batch\":4,\"threads\":1,\"steps\":2,\"mode\":\"%s\"",
             mode);
    const char *a = strstr(json, head);
    snprintf(head, sizeof head,
             "{\"model\":\"resnet18-16\",\"batch\":4,\"threads\":2,\"steps\":2,\"mode\":\"%s\"",
             mode);
    const char *b = strstr(json, head);
    if (!ok(a && b, "%s: both rows", mode))
        return;
    const int n1 = numbers_after(a, "\"images_per_second_rounds\":[", one, 3);
    const int n2 = numbers_after(b, "\"images_per_second_rounds\":[", two, 3);
    const int nr = numbers_after(b, "\"speedup_rounds\":[", rounds, 3);
    const char *s = strstr(b, "\"speedup_over_1_thread\":");
    if (s)
        x = strtod(s + strlen("\"speedup_over_1_thread\":"), NULL);
    if (!ok(n1 == 3 && n2 == 3 && nr == 3 && s, "%s: three rounds of each and their speedups",
            mode))
        return;
    /* The JSON prints 6 significant digits (%.6g), each number within 5e-6 of itself relatively:
     * the ratio of two printed rates and the printed speedup can differ by 1.5e-5 between them. */
    int right = 1;
    for (int k = 0; k < 3; k++)
        right &= fabs(rounds[k] - two[k] / one[k]) <= 2e-5 * rounds[k];
    ok(right, "%s: each round's speedup is its two-thread images/s over its one-thread images/s",
       mode);
    const double lo = fmin(rounds[0], fmin(rounds[1], rounds[2]));
    const double hi = fmax(rounds[0], fmax(rounds[1], rounds[2]));
    const double mid = rounds[0] + rounds[1] + rounds[2] - lo - hi;
    is_float(x, mid, 1e-9, "%s: the speedup is the median round's", mode);
}

int main(void)
{
    struct stat st;

    bin = getenv("NNLAB_BIN");
    if (!bin) {
        printf("1..0 # SKIP NNLAB_BIN is not set (run through meson test)\n");
        return 0;
    }
    snprintf(dir, sizeof dir, "/tmp/nnlab-test-bench-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("1..0 # SKIP cannot create a temporary folder\n");
        return 0;
    }
    snprintf(db, sizeof db, "%s/none.db", dir);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    snprintf(err_path, sizeof err_path, "%s/err", dir);
    setenv("TMPDIR", dir, 1); /* where bench makes its temporary store */

    is_int(nnlab("bench --steps 0"), 2, "--steps 0 is a usage error");
    like(errtext, "--steps 0", "naming the option");
    is_int(nnlab("bench --model nope.spec"), 1, "an unknown model fails");
    like(errtext, "nope.spec", "naming it");
    is_int(nnlab("bench --mode fast"), 2, "--mode fast is a usage error");
    like(errtext, "--mode fast: want train, infer or both", "naming the modes");

    /* ResNet-18 on synthetic 16x16 images needs no dataset: training and inference rows. */
    is_int(nnlab("--json bench --steps 2 --warmup 1 --model resnet18-16 --batch 4 --threads 2 "
                 "--mode both --repeat 3"),
           0, "resnet18 on synthetic images runs in both modes");
    like(out,
         "{\"model\":\"resnet18-16\",\"batch\":4,\"threads\":2,\"steps\":2,\"mode\":\"train\",",
         "a training row");
    like(out,
         "{\"model\":\"resnet18-16\",\"batch\":4,\"threads\":1,\"steps\":2,\"mode\":\"infer\",",
         "an inference row");
    like(out, "\"data\":\"synthetic\"", "on the synthetic data");
    is_int(count(out, "\"allocations_per_step\":0,"), 4,
           "timed steps of both modes allocate nothing");
    check_speedups(out, "train");
    check_speedups(out, "infer");
    is_int(count(out, "\"speedup_over_1_thread\":"), 2, "a speedup on each two-thread row alone");

    is_int(nnlab("bench --steps 1 --warmup 0 --model resnet18-16 --batch 4 --threads 2"), 0,
           "the table runs");
    like(out, "SPEEDUP: images/s on 2 threads over 1 thread, from the two runs",
         "it ends with the speedup of two threads over one");
    like(out, "resnet18-16    train      4 ", "for the row");

    /* --layers: one more run per mode, each layer's share of thread 0's step. */
    is_int(nnlab("--json bench --steps 3 --warmup 1 --model resnet18-16 --batch 4 --threads 2 "
                 "--mode both --layers"),
           0, "bench --layers runs in both modes");
    is_int(count(out, "{\"event\":\"bench_layers\",\"model\":\"resnet18-16\""), 2,
           "a layer table for training and one for inference");
    like(out,
         "{\"layer\":\"relu\",\"kind\":\"relu\",\"in\":\"64x8x8\",\"out\":\"64x8x8\","
         "\"forward_ms\":0,\"backward_ms\":0,"
         "\"runs_in\":\"bn1\",\"how\":\"runs inside bn1\"}",
         "in training the stem's ReLU runs inside its batchnorm, and takes no time of its own");
    like(out,
         "{\"layer\":\"bn1\",\"kind\":\"batchnorm\",\"in\":\"64x8x8\",\"out\":\"64x8x8\","
         "\"forward_ms\":0,\"backward_ms\":0,"
         "\"runs_in\":\"conv1\",\"how\":\"runs inside conv1\"}",
         "in inference the batchnorm is folded into the convolution");
    like(out, "\"how\":\"Winograd F(2x2, 3x3)\"", "a convolution names its lowering");
    like(out, "\"how\":\"Winograd F(2x2, 3x3), products turned\"",
         "and in inference, where its prepared filters multiply few tiles, that its products run "
         "turned");
    like(out,
         "{\"layer\":\"conv1\",\"kind\":\"conv\",\"in\":\"3x16x16\",\"out\":\"64x8x8\","
         "\"window\":\"7x7\",",
         "and its input, output and window");
    for (const char *p = out; (p = strstr(p, "\"step_ms\":")) != NULL;) {
        const double step = strtod(p + 10, NULL);
        const char *end = strstr(p, "]}");
        double sum = 0.0;
        int zero_backward = 1;
        for (const char *q = p; end && (q = strstr(q, "\"forward_ms\":")) != NULL && q < end;) {
            char *after;
            sum += strtod(q + 13, &after);
            const char *b = strstr(after, "\"backward_ms\":");
            const double back = b ? strtod(b + 14, NULL) : 0.0;
            zero_backward &= back == 0.0;
            sum += back;
            q = after;
        }
        const int infer = strstr(p - 120 > out ? p - 120 : out, "\"mode\":\"infer\"") &&
                          strstr(p - 120 > out ? p - 120 : out, "\"mode\":\"infer\"") < p;
        ok(step > 0 && sum > 0.3 * step && sum < 1.05 * step,
           "%s: the layers' times (%.3f ms) make up most of the step (%.3f ms)",
           infer ? "inference" : "training", sum, step);
        ok(zero_backward == infer, "%s: %s", infer ? "inference" : "training",
           infer ? "no backward times" : "backward times");
        p = end ? end : p + 10;
    }
    is_int(nnlab("bench --steps 1 --warmup 0 --model resnet18-16 --batch 4 --threads 1 --layers"),
           0, "the layer table runs");
    like(out, "LAYERS of resnet18-16, training, batch 4, 1 thread (", "it names the run");
    like(out, "all layers", "and ends with the sums");
    ok(!strstr(out, "from one thread to another"), "one thread: no round trip between threads");

    if (stat(FASHION, &st) != 0) {
        diag("Fashion-MNIST is not installed in " FASHION ": no run of the benchmark itself");
    } else {
        is_int(nnlab("--json bench --steps 2 --warmup 1 --model mlp --batch 32 --threads 2 "
                     "--layers"),
               0, "a short bench runs");
        like(out,
             "{\"layer\":\"relu1\",\"kind\":\"relu\",\"in\":\"512x1x1\",\"out\":\"512x1x1\","
             "\"forward_ms\":0,",
             "mlp's layers train as a team, its ReLU's forward inside fc1's");
        like(out, "\"runs_in\":\"fc1\",\"how\":\"runs inside fc1\"}", "as its row says");
        like(out, "\"data\":\"Fashion-MNIST from " FASHION ", imported into a temporary store\"",
             "with no store, it imports Fashion-MNIST into a temporary one and says so");
        like(out, "\"gflops_1_thread\":", "the sgemm rate is reported");
        const char *trip = strstr(out, "\"round_trip_ns\":");
        double ns = trip ? strtod(trip + strlen("\"round_trip_ns\":"), NULL) : 0.0;
        ok(ns > 10.0 && ns < 1e9, "a cache line's round trip between the two threads: %.0f ns", ns);
        like(out, "{\"model\":\"mlp\",\"batch\":32,\"threads\":1,\"steps\":2,",
             "a row on one thread");
        like(out, "{\"model\":\"mlp\",\"batch\":32,\"threads\":2,\"steps\":2,",
             "and one on two threads");
        is_int(count(out, "\"allocations_per_step\":0,"), 2, "timed steps allocate nothing");
        is_int(leftovers(), 0, "no store created at --db, no temporary store left behind");

        /* A model named by a file whose name holds control characters: its row shows them
         * escaped, as everything that came from a file or a person. */
        char spec[160];
        snprintf(spec, sizeof spec, "%s/e\033[2J.spec", dir);
        FILE *f = fopen(spec, "w");
        if (f) {
            fputs("fc1: dense 16\nrelu\nfc2: dense N\n", f);
            fclose(f);
        }
        is_int(nnlab("bench --steps 1 --warmup 0 --model '%s' --batch 8 --threads 1", spec), 0,
               "a bench of a spec file runs: %s", errtext);
        ok(!strchr(out, '\033') && strstr(out, "e\\e[2J.spec"), "its name escaped: %s", out);
    }

    nnlab_cli_cleanup();
    return done_testing();
}
