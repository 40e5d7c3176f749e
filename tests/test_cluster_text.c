/* A text dataset on an SSH cluster, end to end, through the real binary and a private sshd on
 * 127.0.0.1 (tests/sshd.h): a synthetic review corpus (three classes of documents that mix class
 * words, some Greek and Cyrillic, into common ones) imports from CSV with --text; embedbag trains
 * on it locally, on 1 worker and on 2 workers. The token ids travel in the partitions and the
 * embedding's gradient is exchanged like any other: 2 workers follow 1 worker's loss curve within
 * 1e-4 (the same data order, the same mathematics), and the cluster's test accuracy is the local
 * run's within 0.03 (a local run shuffles its data in another order). A table with a column of
 * 21 levels imported with --embed-levels trains a model that starts with embed-columns on 1 and
 * on 2 workers, which take the table's columns and rows from SETUP: the table's gradient travels
 * in the flat vector, and the curves agree within 1e-4. No worker is left. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"
#include "reviews.h"
#include "tap.h"

enum { NCLASS = REVIEW_CLASSES, NDOCS = 300, EPOCHS = 3 }; /* NDOCS per class */

/* DIR/reviews.csv (id,review,sentiment): NDOCS documents of each class, 10 to 50 words, about
 * one word in five a class word, commas inside the quoted text. */
static void write_corpus(void)
{
    struct nl_rng r;
    char path[512];
    nl_rng_seed(&r, 5);
    snprintf(path, sizeof path, "%s/reviews.csv", sd.dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fputs("id,review,sentiment\n", f);
    for (int i = 0; i < NDOCS * NCLASS; i++) {
        const int k = i % NCLASS, nwords = 10 + (int)(nl_rng_next(&r) % 41);
        fprintf(f, "%d,\"", i);
        review_write(f, k, &r, nwords, 1);
        fprintf(f, "\",%s\n", review_classes[k]);
    }
    fclose(f);
}

int main(void)
{
    static const char *const where[3] = {"locally", "on 1 worker", "on 2 workers"};
    double curve[3][EPOCHS] = {{0}}, acc[3] = {0};

    const char *why = cluster_start();
    if (why)
        skip_all("%s", why);
    write_corpus();
    is_int(nnlab("import --text review --label sentiment --vocab 300 --max-len 48 --val 0.1 "
                 "--test 0.2 reviews '%s/reviews.csv'",
                 sd.dir),
           0, "the review corpus imports from CSV: %s", errtext);
    like(out, "3 classes", "with its three classes");

    for (int n = 0; n < 3; n++) {
        char hosts[700] = "";
        if (n)
            snprintf(hosts, sizeof hosts, "--ssh-config '%s/ssh_config' --hosts %s", sd.dir,
                     n == 1 ? "node1" : "node1:1,node2:1");
        is_int(nnlab("--json train --data reviews --model embedbag --epochs %d --batch 32 "
                     "--lr 0.1 --seed 7 %s",
                     EPOCHS, hosts),
               0, "embedbag trains %s: %s", where[n], errtext);
        is_int(losses(curve[n], EPOCHS), EPOCHS, "%s: one epoch line per epoch", where[n]);
        acc[n] = done_value("test_accuracy");
        diag("%-13s train loss %.6f %.6f %.6f, test accuracy %.4f", where[n], curve[n][0],
             curve[n][1], curve[n][2], acc[n]);
        if (n)
            ok(sshd_no_workers_left(&sd, 5), "no worker is left after the run %s", where[n]);
    }
    like(out, "\"workers\":[{\"host\":\"node1\"", "the 2-worker run's epochs carry its workers");
    ok(curve[0][EPOCHS - 1] < 0.9 * curve[0][0], "the loss falls locally: %.4f -> %.4f",
       curve[0][0], curve[0][EPOCHS - 1]);
    double worst = 0;
    for (int e = 0; e < EPOCHS; e++)
        worst = fmax(worst, fabs(curve[2][e] - curve[1][e]));
    ok(curve[1][0] > 0 && worst < 1e-4,
       "2 workers follow 1 worker's loss curve within 1e-4 (largest difference %.3g)", worst);
    ok(acc[0] >= 0.9, "the local run reaches %.4f test accuracy (>= 0.9)", acc[0]);
    ok(fabs(acc[1] - acc[0]) <= 0.03 && fabs(acc[2] - acc[0]) <= 0.03,
       "the cluster's test accuracy is the local run's within 0.03 (%.4f, %.4f; local %.4f)",
       acc[1], acc[2], acc[0]);

    /* A table with an embedded column of 21 levels: y = the level's effect + x. */
    {
        static char csv[1 << 16];
        size_t len = (size_t)snprintf(csv, sizeof csv, "x,shop,y\n");
        for (int i = 0; i < 1500; i++) {
            const int shop = (i * 37 + i / 7) % 60;
            const double x = ((i * 53) % 97) / 48.0 - 1.0;
            len += (size_t)snprintf(csv + len, sizeof csv - len, "%.4f,s%02d,%.4f\n", x, shop,
                                    ((shop * 13) % 17) / 4.0 - 2.0 + x);
        }
        sshd_write(sd.dir, "shops.csv", csv);
        sshd_write(sd.dir, "emb.spec", "emb: embed-columns 4\nfc1: dense 16\nrelu\nfc2: dense N\n");
        is_int(nnlab("import shops '%s/shops.csv' --task regression --embed-levels 16 --val 0.1 "
                     "--test 0.2",
                     sd.dir),
               0, "a table with a column of 21 levels, embedded: %s", errtext);
        double tc[2][EPOCHS] = {{0}}, r2[2] = {0};
        for (int n = 1; n <= 2; n++) {
            is_int(nnlab("--json train --data shops --model '%s/emb.spec' --epochs %d --batch 32 "
                         "--optim adam --lr 0.01 --seed 3 --ssh-config '%s/ssh_config' --hosts %s",
                         sd.dir, EPOCHS, sd.dir, n == 1 ? "node1" : "node1:1,node2:1"),
                   0, "embed-columns trains on %d worker%s: %s", n, n == 1 ? "" : "s", errtext);
            losses(tc[n - 1], EPOCHS);
            r2[n - 1] = done_value("test_r2");
        }
        diag("embed-columns: 1 worker %.6f .. %.6f (test R2 %.4f), 2 workers %.6f .. %.6f "
             "(test R2 %.4f)",
             tc[0][0], tc[0][EPOCHS - 1], r2[0], tc[1][0], tc[1][EPOCHS - 1], r2[1]);
        worst = 0;
        for (int e = 0; e < EPOCHS; e++)
            worst = fmax(worst, fabs(tc[1][e] - tc[0][e]));
        ok(tc[0][0] > 0 && worst < 1e-4,
           "embed-columns: 2 workers follow 1 worker's loss curve within 1e-4 (%.3g)", worst);
        ok(r2[1] > 0.5, "and learn the levels' effects (test R2 %.4f)", r2[1]);
        ok(sshd_no_workers_left(&sd, 5), "no worker is left after the table runs");
    }

    sshd_stop(&sd);
    return done_testing();
}
