/* Tables: CSV datasets with a regression target, categorical columns and missing values, through
 * the library (the regression losses against finite differences, the metrics) and the real
 * nnlab binary (import, show, train, eval, predict). The regression data are a known linear
 * function of the features plus noise, with a categorical column and missing values; a linear
 * model trained by nnlab must come within 0.02 of the R^2 that ordinary least squares, solved
 * here by the normal equations on the same inputs, reaches on the test split. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/dataset.h"
#include "nnlab/layer.h"
#include "nnlab/metrics.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/spec.h"
#include "nnlab/store.h"
#include "nnlab/trainer.h"
#include "nnlab_cli.h"
#include "tap.h"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        diag("cannot write %s", path);
}

static const char *at(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Counts the occurrences of needle in text. */
static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The number after "key": in out; NAN when absent. */
static double json_value(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* ---- The losses and the metrics ---- */

static void test_losses(void)
{
    static const enum nl_loss kinds[3] = {NL_LOSS_MSE, NL_LOSS_MAE, NL_LOSS_HUBER};
    /* Errors away from the kinks at 0 (mae) and +-1 (huber). */
    const float yhat[6] = {0.3f, -1.7f, 2.4f, 0.05f, -0.6f, 1.2f};
    const float t[6] = {-0.2f, -0.4f, 0.1f, 0.7f, -0.35f, 2.9f};
    const float scale = 1.0f / 6.0f;

    for (int k = 0; k < 3; k++) {
        float d[6], o[6];
        double worst = 0.0;
        nl_regression_loss(d, yhat, t, 6, kinds[k], scale);
        for (int i = 0; i < 6; i++) {
            const float h = 1e-3f;
            memcpy(o, yhat, sizeof o);
            o[i] = yhat[i] + h;
            double up = nl_regression_loss(NULL, o, t, 6, kinds[k], 1.0f);
            o[i] = yhat[i] - h;
            double down = nl_regression_loss(NULL, o, t, 6, kinds[k], 1.0f);
            double fd = (up - down) / (2.0 * h) * scale;
            worst = fmax(worst, fabs(fd - d[i]));
        }
        ok(worst < 1e-4, "%s: the gradient matches central differences (worst %.2g)",
           nl_loss_names[kinds[k]], worst);
    }
    const float one[1] = {3.0f}, zero[1] = {0.0f};
    float g[1];
    is_float(nl_regression_loss(g, one, zero, 1, NL_LOSS_MSE, 1.0f), 9.0, 1e-9, "mse of 3 is 9");
    is_float(g[0], 6.0, 1e-6, "its gradient 6");
    is_float(nl_regression_loss(g, one, zero, 1, NL_LOSS_MAE, 0.5f), 3.0, 1e-9, "mae of 3 is 3");
    is_float(g[0], 0.5, 1e-6, "its gradient the scale");
    is_float(nl_regression_loss(g, one, zero, 1, NL_LOSS_HUBER, 1.0f), 2.5, 1e-9,
             "huber of 3 is 3 - 1/2");
    is_float(g[0], 1.0, 1e-6, "its gradient clipped at 1");
    const float half[1] = {0.5f};
    is_float(nl_regression_loss(g, half, zero, 1, NL_LOSS_HUBER, 1.0f), 0.125, 1e-9,
             "huber of 0.5 is 0.5^2 / 2");
    is_int(nl_loss_parse("huber"), NL_LOSS_HUBER, "huber parses");
    is_int(nl_loss_parse("l2"), -1, "an unknown loss does not");

    struct nl_reg_sums s = {0};
    const float p[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 4}, mean[4] = {2.5f, 2.5f, 2.5f, 2.5f};
    double mae, rmse, r2;
    nl_reg_add(&s, p, y, 4);
    nl_reg_finish(&s, 2.0, &mae, &rmse, &r2);
    ok(mae == 0 && rmse == 0 && r2 == 1.0, "perfect predictions: MAE 0, RMSE 0, R2 1");
    memset(&s, 0, sizeof s);
    nl_reg_add(&s, mean, y, 4);
    nl_reg_finish(&s, 2.0, &mae, &rmse, &r2);
    is_float(r2, 0.0, 1e-12, "predicting the mean: R2 0");
    is_float(mae, 2.0 * 1.0, 1e-12, "MAE in the target's units (std 2)");
    is_float(rmse, 2.0 * sqrt(1.25), 1e-12, "RMSE likewise");
}

/* ---- Regression against ordinary least squares ---- */

static double gauss(void)
{
    double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* y = 2 + 3 x1 - 2 x2 + 0.5 x3 + colour effect + noise; x1, x3 and the colour are sometimes
 * missing. */
static void write_regression(const char *path, int rows, unsigned seed)
{
    static const char *const colours[4] = {"red", "green", "blue", "black"};
    static const double effect[4] = {1.5, -1.0, 0.5, 0.0};
    FILE *f = fopen(path, "w");

    srand(seed);
    fprintf(f, "x1,x2,colour,x3,y\n");
    for (int i = 0; i < rows; i++) {
        double x1 = gauss(), x2 = gauss(), x3 = 2.0 * gauss();
        int c = rand() % 4;
        double y = 2.0 + 3.0 * x1 - 2.0 * x2 + 0.5 * x3 + effect[c] + 0.8 * gauss();
        char a[32] = "", b[32] = "";
        if (rand() % 25)
            snprintf(a, sizeof a, "%.5f", x1);
        if (rand() % 25)
            snprintf(b, sizeof b, "%.5f", x3);
        fprintf(f, "%s,%.5f,%s,%s,%.5f\n", a, x2, rand() % 30 ? colours[c] : "", b, y);
    }
    fclose(f);
}

/* Solves a (n, n) x = b in place by Gaussian elimination with partial pivoting. */
static int solve(double *a, double *b, int n)
{
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int r = col + 1; r < n; r++)
            if (fabs(a[r * n + col]) > fabs(a[piv * n + col]))
                piv = r;
        if (fabs(a[piv * n + col]) < 1e-12)
            return -1;
        for (int k = 0; k < n; k++) {
            double tmp = a[col * n + k];
            a[col * n + k] = a[piv * n + k];
            a[piv * n + k] = tmp;
        }
        double tb = b[col];
        b[col] = b[piv];
        b[piv] = tb;
        for (int r = col + 1; r < n; r++) {
            double f = a[r * n + col] / a[col * n + col];
            for (int k = col; k < n; k++)
                a[r * n + k] -= f * a[col * n + k];
            b[r] -= f * b[col];
        }
    }
    for (int r = n - 1; r >= 0; r--) {
        for (int k = r + 1; k < n; k++)
            b[r] -= a[r * n + k] * b[k];
        b[r] /= a[r * n + r];
    }
    return 0;
}

/* The test-split R^2 of least squares fitted on the train split of dataset name, on the inputs
 * nnlab stores (one-hot columns, filled values), with an intercept; a tiny ridge takes care of
 * the one-hot blocks' dependence on the intercept. NAN when it cannot. */
static double ols_r2(const char *name)
{
    struct nl_error err = {0};
    struct nl_store *s;
    struct nl_dataset *d;
    double r2 = NAN;

    if (nl_store_open_read(&s, db, &err) < 0)
        return NAN;
    int rc = nl_dataset_load(s, name, &d, &err);
    nl_store_close(s);
    if (rc < 0)
        return NAN;
    const int f = d->shape.c, n = f + 1;
    double *a = calloc((size_t)n * n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    double row[256];
    for (uint32_t i = 0; f < 255 && i < d->split[NL_TRAIN].n; i++) {
        const float *x = (const float *)d->split[NL_TRAIN].x + (size_t)i * f;
        double y = d->split[NL_TRAIN].t[i] * d->target_std + d->target_mean;
        row[0] = 1.0;
        for (int k = 0; k < f; k++)
            row[k + 1] = x[k];
        for (int r = 0; r < n; r++) {
            for (int c = 0; c < n; c++)
                a[r * n + c] += row[r] * row[c];
            b[r] += row[r] * y;
        }
    }
    for (int r = 1; r < n; r++)
        a[r * n + r] += 1e-6 * d->split[NL_TRAIN].n;
    if (f < 255 && solve(a, b, n) == 0) {
        double sse = 0.0, sum = 0.0, sumsq = 0.0;
        const uint32_t m = d->split[NL_TEST].n;
        for (uint32_t i = 0; i < m; i++) {
            const float *x = (const float *)d->split[NL_TEST].x + (size_t)i * f;
            double y = d->split[NL_TEST].t[i] * d->target_std + d->target_mean, p = b[0];
            for (int k = 0; k < f; k++)
                p += b[k + 1] * x[k];
            sse += (p - y) * (p - y);
            sum += y;
            sumsq += y * y;
        }
        r2 = 1.0 - sse / (sumsq - sum * sum / m);
    }
    free(a);
    free(b);
    nl_dataset_free(d);
    return r2;
}

static void test_regression(void)
{
    static const char *const modes[3] = {"mean", "median", "drop"};
    static const char *const losses[3] = {"mse", "huber", "mae"};

    write_regression(at("reg.csv"), 2000, 7);
    write_text(at("linear"), "# one dense layer: a linear model\nfc: dense N\n");
    is_int(nnlab("import reg '%s' --task regression", at("reg.csv")), 1,
           "a regression CSV with empty fields is refused by default");
    like(errtext, "reg.csv:", "naming the file");
    like(errtext, "is empty", "and saying why");
    diag("%-8s %-6s %10s %10s %8s", "MISSING", "LOSS", "NNLAB R2", "OLS R2", "DIFF");
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "reg-%s", modes[i]);
        is_int(nnlab("import %s '%s' --task regression --missing %s --val 0.1 --test 0.2", name,
                     at("reg.csv"), modes[i]),
               0, "import --task regression --missing %s", modes[i]);
        const double ols = ols_r2(name);
        ok(ols > 0.8 && ols < 1.0, "least squares explains most of it (R2 %.4f)", ols);
        for (int k = 0; k < (i == 0 ? 3 : 1); k++) {
            char run[48];
            snprintf(run, sizeof run, "%s-%s", name, losses[k]);
            is_int(nnlab("train --data %s --model '%s' --epochs 30 --batch 32 --optim adam "
                         "--lr 0.01 --loss %s --name %s --quiet",
                         name, at("linear"), losses[k], run),
                   0, "a linear model trains on it with --loss %s", losses[k]);
            is_int(nnlab("--json eval %s", run), 0, "eval --json");
            const double r2 = json_value(out, "r2");
            diag("%-8s %-6s %10.4f %10.4f %8.4f", modes[i], losses[k], r2, ols, r2 - ols);
            if (k == 0)
                ok(fabs(r2 - ols) <= 0.02, "%s: R2 %.4f within 0.02 of least squares' %.4f",
                   modes[i], r2, ols);
            else
                ok(r2 >= ols - 0.05, "%s with %s: R2 %.4f near least squares' %.4f", modes[i],
                   losses[k], r2, ols);
            ok(json_value(out, "mae") > 0.5 && json_value(out, "rmse") > 0.7 &&
                   json_value(out, "rmse") < 1.5,
               "MAE and RMSE in the target's units, near the noise's 0.8 and the filled "
               "values' error (%.3f, %.3f)",
               json_value(out, "mae"), json_value(out, "rmse"));
        }
    }
    /* The model's predictions on the test split, for the window's plots, give eval's R2. */
    {
        struct nl_error err = {0};
        struct nl_store *s = NULL;
        struct nl_dataset *d = NULL;
        struct nl_model *m = NULL;
        struct nl_run_info info;
        double r2 = NAN;
        is_int(nnlab("--json eval reg-mean-mse"), 0, "eval --json");
        const double want = json_value(out, "r2");
        if (nl_store_open_read(&s, db, &err) == 0 &&
            nl_dataset_load(s, "reg-mean", &d, &err) == 0 &&
            nl_run_model(s, "reg-mean-mse", 1, NULL, NULL, &info, &m, &err) == 0) {
            const uint32_t n = d->split[NL_TEST].n;
            float *pred = calloc(n, sizeof *pred), *actual = calloc(n, sizeof *actual);
            if (nl_evaluate_values(m, d, NL_TEST, 2, pred, actual, &err) == 0) {
                double sse = 0, sum = 0, sumsq = 0;
                for (uint32_t i = 0; i < n; i++) {
                    sse += ((double)pred[i] - actual[i]) * ((double)pred[i] - actual[i]);
                    sum += actual[i];
                    sumsq += (double)actual[i] * actual[i];
                }
                r2 = 1.0 - sse / (sumsq - sum * sum / n);
            }
            free(pred);
            free(actual);
        }
        is_float(r2, want, 1e-4, "nl_evaluate_values: predicted and actual values give eval's R2");
        nl_model_free(m);
        nl_dataset_free(d);
        nl_store_close(s);
    }

    /* The run's record, listing and events. */
    is_int(nnlab("--json runs reg-mean-mse"), 0, "runs RUN --json");
    like(out, "\"task\":\"regression\"", "a regression run");
    ok(isfinite(json_value(out, "test_r2")) && isfinite(json_value(out, "val_mae")),
       "with its R2, MAE and RMSE");
    is_int(nnlab("runs"), 0, "runs");
    like(out, "R2 0.", "lists R2 for it");
    is_int(nnlab("--json train --data reg-mean --model '%s' --epochs 2 --name reg-events",
                 at("linear")),
           0, "train --json");
    like(out, "\"val_r2\":", "epoch events carry R2");
    like(out, "\"train_mae\":", "and MAE");
    like(out, "\"test_rmse\":", "the end, RMSE");
    is_int(nnlab("train --data reg-mean --model '%s' --epochs 1 --loss xent", at("linear")), 1,
           "cross-entropy on a regression dataset is refused");
    like(errtext, "regression dataset", "saying why");
}

/* ---- Missing values ---- */

/* The stored (unstandardised) input k of train sample i of dataset name; NAN when none. */
static double stored(const char *name, uint32_t i, int k, int *features)
{
    struct nl_error err = {0};
    struct nl_store *s;
    struct nl_dataset *d;
    double v = NAN;

    if (nl_store_open_read(&s, db, &err) < 0)
        return NAN;
    if (nl_dataset_load(s, name, &d, &err) == 0) {
        if (i < d->split[NL_TRAIN].n && k < d->shape.c)
            v = ((const float *)d->split[NL_TRAIN].x)[(size_t)i * d->shape.c + k];
        *features = d->shape.c;
        nl_dataset_free(d);
    }
    nl_store_close(s);
    return v;
}

static void test_missing(void)
{
    int f = 0;
    /* a: 1 3 3 9 and an empty one: mean 4, median 3, mode 3; colour: x twice, y once. */
    write_text(at("miss.csv"), "a,colour,b,label\n"
                               "1,x,10,p\n"
                               ",y,20,q\n"
                               "3,,30,p\n"
                               "3,x,40,q\n"
                               "9,x,50,p\n");
    is_int(nnlab("import m-err '%s'", at("miss.csv")), 1, "--missing error (the default)");
    like(errtext, "miss.csv:3: field 1 is empty (column 'a')", "names FILE:LINE and the column");
    is_int(nnlab("import m-drop '%s' --missing drop", at("miss.csv")), 0, "--missing drop");
    like(out, "3 train", "drops the two rows with an empty field");
    is_int(nnlab("--json show m-drop"), 0, "show --json");
    like(out, "\"dropped\":2,\"dropped_lines\":[3,4]", "records the dropped lines");
    static const char *const modes[3] = {"mean", "median", "mode"};
    static const double want[3] = {4.0, 3.0, 3.0};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "m-%s", modes[i]);
        is_int(nnlab("import %s '%s' --missing %s", name, at("miss.csv"), modes[i]), 0,
               "--missing %s", modes[i]);
        is_float(stored(name, 1, 0, &f), want[i], 1e-6, "%s fills a with %g", modes[i], want[i]);
        /* colour: slot 0 is x, the most frequent level, which fills the empty field. */
        is_float(stored(name, 2, 1, &f), 1.0, 0, "and the empty colour with its mode x");
        is_float(stored(name, 2, 2, &f), 0.0, 0, "(not y)");
    }
    is_int(f, 5, "a, colour (x, y, other) and b: 5 inputs");
    is_int(nnlab("show m-median"), 0, "show");
    like(out, "categorical  2 levels: x, y", "lists the categorical column and its levels");
    like(out, "1 missing (filled with 3)", "and what filled the empty field");
    write_text(at("notarget.csv"), "a,y\n1,2\n2,\n3,4\n");
    is_int(nnlab("import nt '%s' --task regression --missing mean", at("notarget.csv")), 1,
           "an empty target is refused unless rows are dropped");
    like(errtext, "notarget.csv:3: the target (field 2) is empty", "naming FILE:LINE");
    is_int(nnlab("import nt '%s' --task regression --missing drop", at("notarget.csv")), 0,
           "dropped with --missing drop");
    is_int(nnlab("import nt2 '%s' --missing guess", at("notarget.csv")), 2,
           "--missing guess is a usage error");
}

/* ---- Categorical columns, bad input, predict ---- */

static void test_categorical_predict(void)
{
    char text[1 << 16];
    size_t len = 0;

    /* zone looks numeric but is named categorical; city has 40 levels, which --embed-levels 0
     * (never embed) caps to 16 + other. */
    len += (size_t)snprintf(text + len, sizeof text - len, "zone,city,x,y\n");
    for (int i = 0; i < 400; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%d,c%02d,%d.5,%d\n", i % 3 + 1,
                                i % 40, i % 7, (i % 3) * 10 + i % 7);
    write_text(at("cat.csv"), text);
    is_int(nnlab("import cat '%s' --task regression --categorical zone --embed-levels 0",
                 at("cat.csv")),
           0, "--categorical names a numeric-looking column");
    like(out, "22x1x1", "inputs: zone 3 + 1, city 16 + 1, x 1");
    is_int(nnlab("show cat"), 0, "show");
    like(out, "zone                 categorical  3 levels", "zone is categorical");
    like(out, "city                 categorical  40 levels", "city is detected as categorical");
    like(out, "(17 inputs)", "capped at 16 levels and an other slot");
    like(out, "y                    target", "y is the target");
    is_int(nnlab("train --data cat --model mlp --epochs 3 --name cat-run --quiet"), 0,
           "an mlp trains on it");
    write_text(at("rows.csv"), "zone,city,x\n1,c01,2.5\n9,nowhere,1.5\n9,elsewhere,1.5\n");
    is_int(nnlab("predict cat-run --csv '%s'", at("rows.csv")), 0, "predict --csv without target");
    is_int(count(out, "\n"), 3, "one line per row");
    like(out, "rows.csv:2: y ", "naming FILE:LINE and the target");
    is_int(count(errtext, "warning"), 2, "unseen levels are said once per column");
    like(errtext, "'9'", "naming the level");
    is_int(nnlab("--json predict cat-run --row '2,c03,4.5,24' --row '3;c04;1.5;21'"), 0,
           "predict --row, with the target, --json");
    is_int(count(out, "\"value\":"), 2, "two values");
    is_float(json_value(out, "actual"), 24.0, 0, "with the row's target");
    is_int(nnlab("predict cat-run --row '1,c01'"), 1, "a row with too few fields fails");
    like(errtext, "--row: 2 fields; dataset 'cat' takes 3", "saying what it takes");
    is_int(nnlab("predict cat-run '%s'", at("rows.csv")), 1, "images are refused for a table run");

    /* Classification CSVs predict too. */
    write_text(at("cls.csv"), "u,v,kind\n0,0,a\n0,1,b\n1,0,b\n1,1,a\n0.1,0,a\n0,0.9,b\n");
    is_int(nnlab("import cls '%s'", at("cls.csv")), 0, "a classification CSV");
    is_int(nnlab("train --data cls --model mlp --epochs 2 --name cls-run --quiet"), 0, "trains");
    is_int(nnlab("predict cls-run --csv '%s' --top 2", at("cls.csv")), 0, "predict --csv");
    like(out, "cls.csv:2: ", "per row");
    like(out, "(actual a)", "with the row's label");
    is_int(nnlab("--json predict cls-run --row 0.5,0.5"), 0, "predict --row --json");
    like(out, "\"probability\":", "with probabilities");
    is_int(nnlab("train --data cls --model mlp --epochs 1 --loss mse"), 1,
           "a regression loss on a classification dataset is refused");

    /* Bad input names FILE:LINE. */
    write_text(at("bad.csv"), "a,b,y\n1,2,3\n4,five,6\n");
    is_int(nnlab("import bad '%s' --task regression", at("bad.csv")), 1,
           "a word in a numeric column");
    like(errtext, "bad.csv:3: field 2 ('five') is not a number", "names FILE:LINE");
    like(errtext, "--categorical b", "and how to say it is categorical");
    write_text(at("badt.csv"), "a,y\n1,2\n2,lots\n");
    is_int(nnlab("import badt '%s' --task regression", at("badt.csv")), 1, "a word as target");
    like(errtext, "badt.csv:3: the target (field 2, 'lots') is not a number", "names FILE:LINE");
    is_int(nnlab("import badc '%s' --categorical nope", at("bad.csv")), 1,
           "--categorical naming no column");
    like(errtext, "nope", "names it");
    is_int(nnlab("import badk '%s' --task guess", at("bad.csv")), 2, "--task guess");
    write_text(at("badrow.csv"), "zone,city,x\n1,c01\n");
    is_int(nnlab("predict cat-run --csv '%s'", at("badrow.csv")), 1, "a short predict row");
    like(errtext, "badrow.csv:2:", "names FILE:LINE");
}

/* ---- embed-columns: the layer against finite differences ---- */

/* sum(y * r) of the layer on in with weights w. */
static double embed_loss(const struct nl_layer *l, const float *in, const float *w, const float *r,
                         int n, float *y)
{
    struct nl_fwd f = {.n = n, .in = {in}, .out = y, .w = w};
    l->ops->forward(l, &f);
    double sum = 0;
    for (size_t i = 0; i < (size_t)n * nl_shape_size(l->out); i++)
        sum += (double)y[i] * r[i];
    return sum;
}

static void test_embed_columns_layer(void)
{
    enum { N = 5, F = 6, K = 2, DIM = 3, ROWS = 7 };
    struct nl_layer l = {.ninputs = 1, .units = DIM, .columns = K, .vocab = ROWS};
    struct nl_error err = {0};
    float in[N * F], w[ROWS * DIM], dw[ROWS * DIM] = {0}, din[N * F] = {0};
    float y[N * (F - K + K * DIM)], r[N * (F - K + K * DIM)];
    unsigned char rows[ROWS] = {0};

    snprintf(l.name, sizeof l.name, "emb");
    l.ops = nl_layer_kind("embed-columns");
    l.in[0] = (struct nl_shape){F, 1, 1};
    ok(l.ops && l.ops->setup(&l, &err) == 0, "embed-columns sets up: %s", err.msg);
    if (!l.ops || err.code)
        return;
    is_int(l.out.c, F - K + K * DIM, "out: the features, then DIM floats per column");
    is_int(l.params[0].dims[0] * 100 + l.params[0].dims[1], ROWS * 100 + DIM,
           "weight [rows, DIM], as nn.Embedding");
    /* Features, then row ids: each column's block (column 0: rows 0-3, column 1: rows 4-6), with
     * an unknown row (0), an id past the table and one that is not an integer (both read 0). */
    static const float ids[N][K] = {{1, 4}, {3, 6}, {0, 5}, {9, 4}, {2.5f, 6}};
    for (int s = 0; s < N; s++) {
        for (int i = 0; i < F - K; i++)
            in[s * F + i] = (float)((s * 7 + i * 3) % 11 - 5) / 4.0f;
        in[s * F + F - 2] = ids[s][0];
        in[s * F + F - 1] = ids[s][1];
    }
    for (int i = 0; i < ROWS * DIM; i++)
        w[i] = (float)((i * 5) % 13 - 6) / 6.0f;
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        r[i] = (float)((int)(i * 7 % 11) - 5) / 5.0f;
    embed_loss(&l, in, w, r, N, y);
    const int width = F - K + K * DIM;
    ok(memcmp(y + width + F - K + DIM, w + 6 * DIM, DIM * sizeof *w) == 0 &&
           memcmp(y + 3 * width + F - K, w, DIM * sizeof *w) == 0,
       "an id reads its row; an id past the table reads row 0");
    struct nl_bwd b = {
        .n = N, .in = {in}, .out = y, .dout = r, .din = {din}, .w = w, .dw = dw, .rows = rows};
    l.ops->backward(&l, &b);
    double worst = 0;
    const double h = 1e-2;
    float tmp[sizeof y / sizeof y[0]];
    for (int i = 0; i < ROWS * DIM; i++) {
        const float saved = w[i];
        w[i] = saved + (float)h;
        double lp = embed_loss(&l, in, w, r, N, tmp);
        w[i] = saved - (float)h;
        double lm = embed_loss(&l, in, w, r, N, tmp);
        w[i] = saved;
        double fd = (lp - lm) / (2 * h);
        worst = fmax(worst, fabs(fd - dw[i]) / fmax(fmax(fabs(fd), fabs(dw[i])), 1e-2));
    }
    ok(worst < 1e-3, "the weight's gradient against central differences (worst %.3g)", worst);
    worst = 0;
    for (int s = 0; s < N; s++)
        for (int i = 0; i < F - K; i++) {
            float *x = &in[s * F + i];
            const float saved = *x;
            *x = saved + (float)h;
            double lp = embed_loss(&l, in, w, r, N, tmp);
            *x = saved - (float)h;
            double lm = embed_loss(&l, in, w, r, N, tmp);
            *x = saved;
            double fd = (lp - lm) / (2 * h), g = din[s * F + i];
            worst = fmax(worst, fabs(fd - g) / fmax(fmax(fabs(fd), fabs(g)), 1e-2));
        }
    ok(worst < 1e-3, "the features' gradient against central differences (worst %.3g)", worst);
    int zero = 1;
    for (int s = 0; s < N; s++)
        zero &= din[s * F + F - 2] == 0.0f && din[s * F + F - 1] == 0.0f;
    ok(zero, "the ids get no gradient");
    ok(rows[0] && rows[1] && rows[3] && rows[4] && rows[5] && rows[6] && !rows[2],
       "backward marks the rows it added to");
    struct nl_layer bad = l;
    bad.columns = 0;
    ok(l.ops->setup(&bad, &err) != 0 && strstr(err.msg, "columns=K"),
       "without columns= the layer says what it needs: %s", err.msg);
}

/* ---- embed-columns at build: K and R from the dataset, and the checks ---- */

/* Builds text for input (5, 1, 1) of a dataset named data (NULL: none) with k embedded columns
 * of rows rows; the model, or NULL with err filled. */
static struct nl_model *build_for(const char *text, const char *data, int k, int rows,
                                  struct nl_error *err)
{
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    *err = (struct nl_error){0};
    if (nl_spec_parse(&spec, text, "spec", NULL, NULL, err) < 0)
        return NULL;
    spec->data = data;
    spec->embed_columns = k;
    spec->embed_rows = rows;
    if (nl_model_build(&m, spec, (struct nl_shape){5, 1, 1}, 1, err) < 0)
        m = NULL;
    nl_spec_free(spec);
    return m;
}

static void test_embed_columns_build(void)
{
    struct nl_error err;
    struct nl_model *m = build_for("emb: embed-columns 3\nfc: dense N\n", "shops", 2, 40, &err);
    ok(m != NULL, "embed-columns DIM builds without columns= or vocab=: %s", err.msg);
    if (m) {
        is_int(m->layers[0].columns, 2, "it takes K, the embedded columns, from the dataset");
        is_int(m->layers[0].vocab, 40, "and R, their rows");
        is_int(m->layers[0].params[0].dims[0], 40, "its table has R rows");
        is_int(m->layers[0].out.c, 3 + 2 * 3, "the 3 other inputs, then 3 floats per column");
        is_int(m->embed_columns * 1000 + m->embed_rows, 2040, "the model keeps K and R");
    }
    nl_model_free(m);
    m = build_for("emb: embed-columns 3 columns=2 vocab=40\nfc: dense N\n", "shops", 2, 40, &err);
    ok(m != NULL, "columns= and vocab= that agree with the dataset are taken: %s", err.msg);
    nl_model_free(m);
    m = build_for("fc1: dense 8\nemb: embed-columns 3 columns=3\nfc: dense N\n", "shops", 2, 40,
                  &err);
    ok(!m && strstr(err.msg, "layer 'emb' (line 2)") && strstr(err.msg, "columns=3") &&
           strstr(err.msg, "'shops' has 2 embedded columns"),
       "columns= that disagrees is refused with the layer's line: %s", err.msg);
    nl_model_free(m);
    m = build_for("\nemb: embed-columns 3 vocab=41\nfc: dense N\n", "shops", 2, 40, &err);
    ok(!m && strstr(err.msg, "layer 'emb' (line 2)") && strstr(err.msg, "vocab=41") &&
           strstr(err.msg, "40 rows"),
       "and vocab= likewise: %s", err.msg);
    nl_model_free(m);
    m = build_for("fc1: dense 8\nrelu\nfc: dense N\n", "shops", 2, 40, &err);
    ok(!m && strstr(err.msg, "dataset 'shops' has 2 embedded columns") &&
           strstr(err.msg, "layer 'fc1' (line 1)") && strstr(err.msg, "embed-columns"),
       "a model that would read the row ids as numbers is refused, naming the dataset and the "
       "layer to add: %s",
       err.msg);
    nl_model_free(m);
    m = build_for("emb: embed-columns 3\nfc1: dense 8 in=input\nadd: concat in=emb,fc1\n"
                  "fc: dense N\n",
                  "shops", 2, 40, &err);
    ok(!m && strstr(err.msg, "layer 'fc1' (line 2)"),
       "so is one whose second branch reads them: %s", err.msg);
    nl_model_free(m);
    m = build_for("fc0: dense 4\nemb: embed-columns 3\nfc: dense N\n", "plain", 0, 0, &err);
    ok(!m && strstr(err.msg, "layer 'emb' (line 2)") &&
           strstr(err.msg, "dataset 'plain' has no embedded columns"),
       "embed-columns on a dataset without embedded columns is refused with its line: %s", err.msg);
    nl_model_free(m);
    m = build_for("emb: embed-columns 3 columns=1 vocab=9\nfc: dense N\n", NULL, 0, 0, &err);
    ok(m && m->layers[0].columns == 1 && m->layers[0].vocab == 9,
       "without a dataset (a summary for a shape) the keys stand: %s", err.msg);
    nl_model_free(m);
    m = build_for("emb: embed-columns 3\nfc: dense N\n", NULL, 1, 9, &err);
    ok(m && m->layers[0].columns == 1 && m->layers[0].vocab == 9,
       "and a run's recorded K and R build its model without the dataset: %s", err.msg);
    nl_model_free(m);
}

/* ---- A column of 200 levels: embedded against one-hot with "other" ---- */

/* y = the city's effect (200 cities, effects of standard deviation 2) + 0.5 x + noise 0.3. */
static void write_cities(const char *path, int rows)
{
    double effect[200];
    FILE *f = fopen(path, "w");
    srand(5);
    for (int c = 0; c < 200; c++)
        effect[c] = 2.0 * gauss();
    fprintf(f, "x,city,y\n");
    for (int i = 0; i < rows; i++) {
        const int c = rand() % 200;
        const double x = gauss();
        fprintf(f, "%.4f,c%03d,%.4f\n", x, c, effect[c] + 0.5 * x + 0.3 * gauss());
    }
    fclose(f);
}

static void test_embedded(void)
{
    write_cities(at("cities.csv"), 6000);
    is_int(nnlab("import cities-onehot '%s' --task regression --val 0.1 --test 0.2 "
                 "--embed-levels 0",
                 at("cities.csv")),
           0, "--embed-levels 0: 200 levels, one-hot: the 16 most frequent and other");
    like(out, "18x1x1", "x and 17 one-hot inputs");
    is_int(nnlab("show cities-onehot"), 0, "show");
    like(out, "200 levels: ", "the column's levels");
    like(out, ", ... (17 inputs)", "one-hot inputs, the levels past 16 in 'other'");
    is_int(nnlab("import cities '%s' --task regression --val 0.1 --test 0.2", at("cities.csv")), 0,
           "by default, the column of 200 levels (more than the 16 one-hot slots) is embedded");
    like(out, "2x1x1", "x and one row id");
    is_int(nnlab("show cities"), 0, "show");
    like(out, "200 levels", "the column's levels");
    like(out, ", embedded (201 rows)", "the column is embedded, its rows said");
    like(out, "201 rows in one table", "so is the table");
    like(out, "a model starts with 'embed-columns DIM'", "and the layer that reads it, no numbers");
    ok(count(out, "columns=") == 0 && count(out, "vocab=") == 0, "none to copy");
    like(out, "feature 1: mean 0.0000, std 1.0000", "row ids are not standardised");
    is_int(nnlab("--json show cities"), 0, "show --json");
    like(out, "\"embed_levels\":16,\"embedded\":{\"first\":1,\"columns\":1,\"rows\":201}",
         "the record says so, and the threshold");
    is_int(nnlab("import cities-20 '%s' --task regression --embed-levels 250 --quiet",
                 at("cities.csv")),
           0, "--embed-levels 250 chooses another threshold");
    is_int(nnlab("show cities-20"), 0, "show");
    like(out, "(17 inputs)", "200 levels, not more than 250: one-hot");

    write_text(at("mlp32"), "fc1: dense 32\nrelu\nfc2: dense N\n");
    write_text(at("emb32"), "emb: embed-columns 8\nfc1: dense 32\nrelu\nfc2: dense N\n");
    write_text(at("emb-k2"), "emb: embed-columns 8 columns=2\nfc1: dense 32\nrelu\nfc2: dense N\n");
    const char *train = "train --data %s --model '%s' --epochs 15 --batch 64 --optim adam "
                        "--lr 0.01 --seed 2 --name %s --quiet";
    is_int(nnlab(train, "cities", at("mlp32"), "cities-ids"), 1,
           "an MLP on the embedded column's row ids is refused");
    like(errtext, "dataset 'cities' has 1 embedded column", "naming the dataset");
    like(errtext, "layer 'fc1' (line 1) reads them", "and the layer that would read the ids");
    like(errtext, "start the model with an embed-columns layer", "saying which layer to add");
    is_int(nnlab("runs cities-ids"), 1, "no run is left behind");
    is_int(nnlab("summary '%s' --data cities", at("mlp32")), 1, "summary refuses it too");
    is_int(nnlab(train, "cities", at("emb-k2"), "cities-k2"), 1,
           "columns= that disagrees with the dataset is refused");
    like(errtext, "layer 'emb' (line 1): columns=2, but dataset 'cities' has 1 embedded column",
         "naming the layer's line");
    is_int(nnlab(train, "cities-onehot", at("emb32"), "cities-no"), 1,
           "embed-columns on a dataset without embedded columns is refused");
    like(errtext, "layer 'emb' (line 1): dataset 'cities-onehot' has no embedded columns",
         "naming the layer's line");
    is_int(nnlab("summary '%s' --data cities", at("emb32")), 0, "summary of embed-columns 8");
    like(out, "1608", "its table: 201 rows of 8");

    is_int(nnlab(train, "cities-onehot", at("mlp32"), "cities-oh"), 0, "an MLP on one-hot");
    is_int(nnlab("--json eval cities-oh"), 0, "eval");
    const double r2_onehot = json_value(out, "r2");
    is_int(nnlab(train, "cities", at("emb32"), "cities-emb"), 0,
           "the MLP after embed-columns 8 on the default import");
    is_int(nnlab("--json eval cities-emb"), 0, "eval");
    const double r2_embed = json_value(out, "r2");
    diag("test R2: one-hot with other %.4f, embedded %.4f", r2_onehot, r2_embed);
    ok(r2_embed > 0.9, "the embedding learns every city's effect: R2 %.4f > 0.9", r2_embed);
    ok(r2_embed > r2_onehot + 0.3, "and beats one-hot with other (R2 %.4f) by more than 0.3",
       r2_onehot);
    is_int(nnlab("train --resume cities-emb --epochs 16 --quiet"), 0,
           "it resumes for one more epoch from its record");

    is_int(nnlab("predict cities-emb --row '0.5,c010' --row '0.5,nowhere' --row '1,elsewhere'"), 0,
           "predict rows, two with levels the import never saw");
    is_int(count(out, "\n"), 3, "one value per row");
    is_int(count(errtext, "warning"), 1, "unseen levels are said once");
    like(errtext, "count as the column's unknown level", "they read the unknown row");
    is_int(nnlab("export cities-emb '%s'", at("cities.safetensors")), 0, "safetensors export");
    FILE *f = fopen(at("cities.safetensors"), "rb");
    char head[512] = {0};
    if (f) {
        if (fread(head, 1, sizeof head - 1, f) == 0)
            head[0] = '\0';
        fclose(f);
    }
    ok(strstr(head + 8, "\"emb.weight\"") != NULL, "the table is the tensor emb.weight");
    ok(strstr(head + 8, "\"shape\":[201,8]") != NULL, "of 201 rows of 8");
    is_int(nnlab("export cities-emb '%s'", at("cities.onnx")), 1, "ONNX export is refused");
    like(errtext, "kind 'embed-columns' has no ONNX form", "naming the kind");
    is_int(nnlab("rm cities"), 0, "the dataset removed");
    is_int(nnlab("export cities-emb '%s'", at("cities2.safetensors")), 0,
           "the run's record alone builds its model for export");
}

/* ---- A regression dataset in the listing, and its ONNX export ---- */

static void test_listing_and_onnx(void)
{
    is_int(nnlab("datasets"), 0, "datasets");
    like(out, "regress y", "a regression dataset shows its task and target, not a class count");
    ok(count(out, "1 class") == 0, "no regression dataset is '1 class'");
    like(out, "2 classes", "a classification dataset shows its classes");
    is_int(nnlab("--json datasets"), 0, "datasets --json");
    like(out, "\"name\":\"reg-mean\",\"kind\":\"csv\",\"shape\":[8,1,1],\"train\":",
         "--json: a regression dataset has no class count");
    like(out, "\"task\":\"regression\",\"target\":\"y\",\"source\":", "but its task and target");
    like(out, "\"classes\":2,\"train\":", "a classification dataset has its classes");
    like(out, "\"task\":\"classification\",\"source\":", "and its task");
    is_int(nnlab("show reg-mean"), 0, "show");
    like(out, "regression of 'y'", "show names the task and the target");
    is_int(nnlab("summary mlp --data reg-mean"), 0, "summary of a regression dataset");
    like(out, "mlp for 8x1x1 inputs, regression of 'y'", "summary names the target");
    ok(count(out, "classes") == 0, "summary gives a regression dataset no class count");
    is_int(nnlab("--json summary mlp --data reg-mean"), 0, "summary --json");
    like(out, "\"input\":[8,1,1],\"target\":\"y\",\"layers\":", "--json: the target, not classes");

    /* Numeric features only, so that the raw rows are the ONNX graph's input as they are. */
    FILE *f = fopen(at("lin.csv"), "w"), *r = fopen(at("lrows.csv"), "w");
    srand(11);
    fprintf(f, "a,b,c,price\n");
    fprintf(r, "a,b,c,price\n");
    for (int i = 0; i < 600; i++) {
        double a = 10.0 + 3.0 * gauss(), b = gauss(), c = 100.0 * gauss();
        double y = 500.0 + 40.0 * a - 25.0 * b * b + 0.3 * c + 5.0 * gauss();
        fprintf(i < 40 ? r : f, "%.4f,%.4f,%.4f,%.4f\n", a, b, c, y);
    }
    fclose(f);
    fclose(r);
    write_text(at("mlp"), "fc1: dense 16\nact: tanh\nfc2: dense N\n");
    is_int(nnlab("import lin '%s' --task regression --val 0.1 --test 0.1", at("lin.csv")), 0,
           "import a numeric regression CSV");
    is_int(nnlab("train --data lin --model '%s' --epochs 10 --batch 32 --optim adam --lr 0.01 "
                 "--name lin-mlp --quiet",
                 at("mlp")),
           0, "an MLP trains on it");
    is_int(nnlab("--json predict lin-mlp --csv '%s'", at("lrows.csv")), 0, "predict --csv --json");
    const double first = json_value(out, "value");
    ok(first > 300.0 && first < 1200.0, "values in the target's units (%.1f)", first);
    write_text(at("predict.json"), out);
    is_int(nnlab("export lin-mlp '%s'", at("lin.onnx")), 0, "export a regression run to ONNX");
    if (system("/usr/bin/python3 -c 'import onnx, cv2, numpy' >/dev/null 2>&1") != 0) {
        diag("/usr/bin/python3 lacks onnx, cv2 or numpy: the ONNX output is not checked");
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/onnx_check.py' table '%s' '%s' '%s'",
             getenv("NNLAB_SOURCE_ROOT") ? getenv("NNLAB_SOURCE_ROOT") : ".", at("lin.onnx"),
             at("lrows.csv"), at("predict.json"));
    fflush(stdout);
    ok(system(cmd) == 0,
       "the ONNX graph's de-standardised prediction equals nnlab predict --csv (onnx checker, "
       "cv2.dnn)");
}

int main(void)
{
    bin = getenv("NNLAB_BIN");
    test_losses();
    test_embed_columns_layer();
    test_embed_columns_build();
    if (!bin || access(bin, X_OK) != 0) {
        diag("NNLAB_BIN does not name the nnlab binary: the command-line checks are skipped");
        return done_testing();
    }
    snprintf(dir, sizeof dir, "/tmp/nnlab-tables-XXXXXX");
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory");
    snprintf(db, sizeof db, "%s/store/nnlab.db", dir);
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);

    test_regression();
    test_missing();
    test_categorical_predict();
    test_listing_and_onnx();
    test_embedded();

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
