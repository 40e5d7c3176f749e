/* The desktop window end to end, under Xvfb: imports a generated IDX dataset, builds and edits a
 * model, trains one epoch, fine-tunes, stops a run and resumes it from the runs page, opens the
 * runs page with a confusion matrix, classifies a PNG, starts training from an exported
 * .safetensors file, and — with a private sshd on 127.0.0.1 (tests/sshd.h) — checks hosts and
 * trains on node1 and node2 with the nnlab under test as the workers' binary, all through the
 * window's named actions. Checks that the charts received points (per worker for the cluster
 * run), that the main loop never stalled for more than 500 ms (1.5 s under the sanitizers) while
 * training or connecting, that every page fits 1024x700, and saves screenshots in
 * BUILD/ui-screenshots/. main() runs the checks in that order, each a function named for what it
 * checks (check_datasets … check_delete); later ones use the runs earlier ones left in the store.
 *
 * Run by meson directly, it re-executes itself under dbus-run-session and xvfb-run with
 * GSK_RENDERER=cairo, GSETTINGS_BACKEND=memory and private XDG folders (tests/gui_util.h); it
 * skips when those programs are missing or the build has no GTK. */
#include "nnlab-config.h"
#include "tap.h"

#if !NNLAB_HAVE_GTK
int main(void)
{
    skip_all("built without GTK 4");
}
#else

#include <png.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gui_util.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "png_writer.h"
#include "sshd.h"

#define W   28
#define NCL 6

/* The test's files: the dataset's folder, the store, a PNG to classify, the exported weights;
 * the nnlab binary under test (NULL: not given). */
static char data_dir[600], db_path[700], png_path[700], st_path[760];
static const char *bin;

/* ---- A generated dataset: six classes of shapes, jittered, with noise ---- */

static uint32_t rnd_state = 12345;
static int rnd(int n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (int)((rnd_state >> 16) % (uint32_t)n);
}

static void draw_shape(uint8_t *px, int k)
{
    const int dx = rnd(7) - 3, dy = rnd(7) - 3, t = 2 + rnd(2);
    for (int y = 0; y < W; y++)
        for (int x = 0; x < W; x++) {
            int u = x - 14 - dx, v = y - 14 - dy, on = 0, r2 = u * u + v * v;
            switch (k) {
            case 0:
                on = abs(v) < t && abs(u) < 10;
                break; /* bar */
            case 1:
                on = abs(u) < t && abs(v) < 10;
                break; /* pillar */
            case 2:
                on = abs(u - v) < t + 1 && abs(u) < 9;
                break; /* slash */
            case 3:
                on = r2 < 100 && r2 > 100 - 16 * t;
                break; /* ring */
            case 4:
                on = (abs(u) < t || abs(v) < t) && abs(u) < 9 && abs(v) < 9;
                break; /* plus */
            default:
                on = abs(u) < 7 && abs(v) < 7;
                break; /* block */
            }
            int val = on ? 200 + rnd(55) : rnd(60);
            px[y * W + x] = (uint8_t)val;
        }
}

static void write_idx(const char *dir, const char *prefix, uint32_t n)
{
    char a[700], b[700];
    uint8_t *px = malloc((size_t)n * W * W), *lab = malloc(n);
    for (uint32_t i = 0; i < n; i++) {
        lab[i] = (uint8_t)rnd(NCL);
        draw_shape(px + (size_t)i * W * W, lab[i]);
    }
    snprintf(a, sizeof a, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(b, sizeof b, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    idx_write(a, b, px, lab, n, W, W);
    free(px);
    free(lab);
}

static int write_png(const char *path, int k)
{
    uint8_t px[W * W];
    draw_shape(px, k);
    return write_png_8bit(path, px, W, W, 1);
}

static int have_dataset(void)
{
    return nw()->data != NULL;
}

/* Whether gui-finetune's conv1 equals gui-lenet's and its fc1 differs. */
static int frozen_kept(const char *db)
{
    struct nl_store *s;
    struct nl_error err = {0};
    struct nl_model *a = NULL, *b = NULL;
    struct nl_dataset *da = NULL, *db_ = NULL;
    int same_conv = 0, changed_fc = 0;
    if (nl_store_open(&s, db, &err) < 0)
        return 0;
    if (nl_ui_load_run(s, "gui-lenet", &a, &da, &err) == 0 &&
        nl_ui_load_run(s, "gui-finetune", &b, &db_, &err) == 0) {
        const struct nl_layer *ca = &a->layers[nl_model_find_layer(a, "conv1")];
        const struct nl_layer *cb = &b->layers[nl_model_find_layer(b, "conv1")];
        const struct nl_layer *fa = &a->layers[nl_model_find_layer(a, "fc1")];
        const struct nl_layer *fb = &b->layers[nl_model_find_layer(b, "fc1")];
        same_conv = memcmp(a->params + ca->param_offset, b->params + cb->param_offset,
                           ca->param_count * sizeof(float)) == 0;
        changed_fc = memcmp(a->params + fa->param_offset, b->params + fb->param_offset,
                            fa->param_count * sizeof(float)) != 0;
    } else {
        diag("%s", err.msg);
    }
    nl_model_free(a);
    nl_model_free(b);
    nl_dataset_free(da);
    nl_dataset_free(db_);
    nl_store_close(s);
    return same_conv && changed_fc;
}

/* Runs finished since the window opened, at least n. */
static int finished_at_least(int n)
{
    long points;
    int finished;
    train_page_stats(nw()->train, &points, &finished);
    return finished >= n;
}

/* For wait_for: runs finished reach `want`. */
static int want_finished;
static int enough_finished(void)
{
    return finished_at_least(want_finished);
}

/* For wait_for: whether the run named epoch_run has a checkpointed epoch. */
static const char *epoch_run;
static int has_epoch(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int n = 0;
    if (nl_store_open(&s, db_path, &err) < 0)
        return 0;
    if (nl_run_get(s, epoch_run, &info, NULL, NULL, &err) == 0)
        n = info.epochs_done;
    nl_store_close(s);
    return n >= 1;
}

static int file_read(void)
{
    return model_page_init_loaded(nw()->model) >= 0;
}

/* Whether run's conv1 and conv2 are the file's, bit for bit, and its fc1 differs from it. */
static int weights_from_file(const char *db, const char *file, const char *run)
{
    struct nl_store *s;
    struct nl_error err = {0};
    struct nl_model *m = NULL, *f = NULL;
    struct nl_dataset *d = NULL;
    struct nl_spec *spec = NULL;
    int same = 0, changed = 0;
    if (nl_store_open(&s, db, &err) < 0)
        return 0;
    if (nl_ui_load_run(s, run, &m, &d, &err) == 0 &&
        nl_spec_load(&spec, "lenet", NULL, NULL, &err) == 0 &&
        nl_model_build(&f, spec, d->shape, d->nclasses, &err) == 0 &&
        nl_safetensors_load(f, file, 0, NULL, NULL, NULL, &err) == 0) {
        same = 1;
        static const char *const frozen[] = {"conv1", "conv2"};
        for (int k = 0; k < 2; k++) {
            const struct nl_layer *a = &m->layers[nl_model_find_layer(m, frozen[k])];
            const struct nl_layer *b = &f->layers[nl_model_find_layer(f, frozen[k])];
            same &= a->param_count == b->param_count &&
                    memcmp(m->params + a->param_offset, f->params + b->param_offset,
                           a->param_count * sizeof(float)) == 0;
        }
        const struct nl_layer *a = &m->layers[nl_model_find_layer(m, "fc1")];
        const struct nl_layer *b = &f->layers[nl_model_find_layer(f, "fc1")];
        changed = memcmp(m->params + a->param_offset, f->params + b->param_offset,
                         a->param_count * sizeof(float)) != 0;
    } else {
        diag("%s", err.msg);
    }
    nl_model_free(m);
    nl_model_free(f);
    nl_spec_free(spec);
    nl_dataset_free(d);
    nl_store_close(s);
    return same && changed;
}

#define CLUSTER_TESTS 35

#if NNLAB_HAVE_SSH
static int hosts_checked(void)
{
    int done;
    const char *text;
    train_page_hosts_report(nw()->train, &done, &text);
    return done > 0;
}
#endif

#if NNLAB_HAVE_SSH

static int recovered(void)
{
    int count, markers;
    const char *last;
    train_page_recoveries(nw()->train, &count, &markers, &last);
    return count > 0;
}

static int cluster_points(void)
{
    long points;
    int finished;
    train_page_stats(nw()->train, &points, &finished);
    return points >= 15;
}

/* A lost worker: a run on node1 and node2 whose second worker is killed (SIGKILL) after a few
 * steps goes on with a restarted one and finishes; the train page shows the recovery as a
 * notice, a line under the hosts and a marker on the loss chart, the runs page lists it; what
 * --overlap auto chose, as the run records it, shows as a line and a marker too. Then a run
 * stopped after its first epoch is resumed from the runs page on the hosts it recorded. */
static void cluster_faults(const struct sshd *sd)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    char *settings = NULL;
    long pids[8];
    int count = 0, markers = 0;
    const char *last = NULL;

    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "heartbeat-timeout", "4");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "max-restarts", "2");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "2");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-recovered");
    long points;
    int finished;
    train_page_stats(nw()->train, &points, &finished);
    want_finished = finished + 1;
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    int n = wait_for(cluster_points, 120000) ? sshd_worker_pids(sd, pids, 8) : 0;
    ok(n == 2 && kill((pid_t)pids[1], SIGKILL) == 0,
       "one of the run's two workers is killed after %ld steps (%d workers found)",
       (train_page_stats(nw()->train, &points, &finished), points), n);
    ok(wait_for(recovered, 120000), "the window hears of the recovery");
    const char *toast = gtk_label_get_text(GTK_LABEL(nw()->toast_label));
    ok(strstr(toast, "restarted (1 of 2), continuing from step") != NULL, "a notice says so: %s",
       toast);
    ok(wait_for(enough_finished, 300000), "the run finishes");
    measuring = FALSE;
    ok(max_gap < STALL_US, "no main-loop stall over " STALL_MS " ms through the recovery (%.0f ms)",
       max_gap / 1000.0);
    train_page_recoveries(nw()->train, &count, &markers, &last);
    ok(count == 1 && markers == 1, "one recovery, one marker on the loss chart (%d, %d)", count,
       markers);
    int done;
    const char *report;
    train_page_hosts_report(nw()->train, &done, &report);
    ok(last && strstr(last, ": worker died") && strstr(report, last),
       "its line stays under the hosts: %s", last ? last : "(none)");
    int rc = nl_store_open(&s, db_path, &err);
    struct nl_run_recovery *rec = NULL;
    struct nl_run_overlap ov = {0};
    char *ov_settings = NULL;
    int nrec = 0;
    if (rc == 0)
        rc = nl_run_get(s, "gui-recovered", &info, NULL, &ov_settings, &err);
    if (rc == 0)
        rc = nl_run_recoveries(s, info.id, &rec, &nrec, &err);
    if (rc == 0)
        rc = nl_run_overlap_parse(ov_settings, &ov, &err);
    nl_free(ov_settings);
    ok(rc == 0 && strcmp(info.status, "done") == 0 && info.epochs_done == 2,
       "the run is done with its 2 epochs (%s)", rc == 0 ? info.status : err.msg);
    ok(rc == 0 && nrec == 1 && strcmp(rec[0].action, "restarted") == 0 && rec[0].workers == 2,
       "its recovery is stored (%d)", nrec);
    /* What --overlap auto chose (the workers measure again after the recovery), as recorded. */
    char ov_want[96];
    snprintf(ov_want, sizeof ov_want, ": %s from step %ld",
             ov.overlapped ? "overlapping" : "synchronous", ov.step + 1);
    int ov_marker = 0;
    const char *ov_line = train_page_overlap(nw()->train, &ov_marker);
    ok(rc == 0 && ov.measured && ov_line && strstr(ov_line, ov_want) && ov_marker &&
           strstr(report, ov_line),
       "auto's recorded choice (%s) shows as a line under the hosts and a marker: %s",
       ov.measured ? ov_want : "none recorded", ov_line ? ov_line : "(none)");
    nl_free(rec);
    nl_store_close(s);
    spin(300);
    ok(screenshot("3-train-recovered"), "screenshot of the train page after a recovery");
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-recovered");
    spin(200);
    const char *details = runs_page_details(nw()->runs);
    ok(strstr(details, "Recoveries:") && strstr(details, "worker died") &&
           strstr(details, "restarted (restart 1), on 2 workers"),
       "the runs page lists it in the run's details");
    screenshot("4-runs-recovered");
    show("train");

    /* Stop a cluster run after its first epoch, then Resume it from the runs page. */
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "3");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-cluster-stop");
    train_page_stats(nw()->train, &points, &finished);
    want_finished = finished + 1;
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    epoch_run = "gui-cluster-stop";
    ok(wait_for(has_epoch, 300000), "a 3-epoch cluster run checkpoints an epoch");
    gtk_widget_activate_action(train_widget(), "train.stop", NULL);
    ok(wait_for(enough_finished, 120000), "and stops");
    rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_get(s, "gui-cluster-stop", &info, NULL, NULL, &err);
    ok(rc == 0 && strcmp(info.status, "stopped") == 0 && info.epochs_done >= 1 &&
           info.epochs_done < 3,
       "recorded as stopped (%s after %d epochs)", rc == 0 ? info.status : err.msg,
       rc == 0 ? info.epochs_done : -1);
    nl_store_close(s);
    /* The form now holds other settings: the resumed run must take its own. */
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "hosts", "");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "other");
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.refresh", NULL);
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-cluster-stop");
    ok(runs_page_action_enabled(nw()->runs, "runs.resume"),
       "Resume is offered for the stopped cluster run");
    train_page_stats(nw()->train, &points, &finished);
    want_finished = finished + 1;
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.resume", NULL);
    int epochs;
    const char *hosts, *name;
    train_page_form(nw()->train, &epochs, &hosts, &name);
    ok(train_page_running(nw()->train) && epochs == 3 && strcmp(hosts, "node1:1,node2:1") == 0 &&
           strcmp(name, "gui-cluster-stop") == 0,
       "it resumes, the form showing its settings (%d epochs on %s, %s)", epochs, hosts, name);
    ok(wait_for(enough_finished, 300000), "the resumed cluster run finishes");
    measuring = FALSE;
    ok(max_gap < STALL_US, "no main-loop stall over " STALL_MS " ms while it resumes (%.0f ms)",
       max_gap / 1000.0);
    spin(300);
    screenshot("3-train-cluster-resumed");
    rc = nl_store_open(&s, db_path, &err);
    struct nl_run_epoch *rep = NULL;
    int nrep = 0, in_order = 1;
    if (rc == 0)
        rc = nl_run_get(s, "gui-cluster-stop", &info, NULL, &settings, &err);
    if (rc == 0)
        rc = nl_run_epochs(s, info.id, &rep, &nrep, &err);
    for (int i = 0; rc == 0 && i < nrep; i++)
        in_order &= rep[i].epoch == i + 1;
    ok(rc == 0 && strcmp(info.status, "done") == 0 && info.epochs_done == 3 && nrep == 3 &&
           in_order && isfinite(info.test_accuracy),
       "it ends done with its 3 epochs, each recorded once (%s, %d epochs, %d records)",
       rc == 0 ? info.status : err.msg, rc == 0 ? info.epochs_done : -1, nrep);
    ok(settings && strstr(settings, "\"hosts\":\"node1:1,node2:1\"") &&
           strstr(settings, "\"cluster\":true"),
       "its settings still name its hosts: %s", settings ? settings : err.msg);
    nl_free(settings);
    nl_free(rep);
    nl_store_close(s);
    train_page_form(nw()->train, &epochs, &hosts, &name);
    ok(name[0] == '\0', "the run name is cleared for the next run (%s)", name);
}
#endif

/* Check Hosts against node1 and node2 of a private sshd, then one epoch on both from the
 * window; the workers run the nnlab binary under test (the remote nnlab option). */
static void cluster_checks(void)
{
#if NNLAB_HAVE_SSH
    struct sshd sd;
    const char *why =
        !bin || access(bin, X_OK) != 0 ? "NNLAB_BIN does not name the nnlab binary" : NULL;
    if (!why) {
        why = sshd_start(&sd);
        if (why)
            sshd_stop(&sd);
    }
    if (why) {
        for (int i = 0; i < CLUSTER_TESTS; i++)
            ok(1, "cluster # SKIP %s", why);
        return;
    }
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/ssh_config", sd.dir);
    show("train");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "hosts", "node1:1, node2:1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "ssh-config", cfg);
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "remote-nnlab", bin);
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    ok(gtk_widget_activate_action(train_widget(), "train.check-hosts", NULL),
       "train.check-hosts runs");
    ok(wait_for(hosts_checked, 120000), "the hosts are checked");
    measuring = FALSE;
    ok(max_gap < STALL_US, "the window kept drawing while connecting (longest stall %.0f ms)",
       max_gap / 1000.0);
    int done;
    const char *report;
    train_page_hosts_report(nw()->train, &done, &report);
    char **lines = g_strsplit(report, "\n", -1);
    for (int i = 0; lines[i]; i++)
        if (lines[i][0])
            diag("hosts report: %s", lines[i]);
    g_strfreev(lines);
    char want[64];
    snprintf(want, sizeof want, "nnlab %s", NNLAB_VERSION);
    char cores[32];
    snprintf(cores, sizeof cores, "%ld cores", sysconf(_SC_NPROCESSORS_ONLN));
    const char *n1 = strstr(report, "✓ node1"), *n2 = strstr(report, "✓ node2");
    ok(n1 && n2 && !strstr(report, "✗"), "both hosts answer");
    ok(n1 && strstr(n1, want) && n2 && strstr(n2, want),
       "the report gives each host's nnlab version (%s)", want);
    ok(n1 && strstr(n1, cores) && n2 && strstr(n2, cores), "and its cores (%s)", cores);
    spin(200);
    screenshot("3-train-hosts-checked");

    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "lenet");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "batch", "32");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-cluster");
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    want_finished = 8;
    ok(wait_for(enough_finished, 500000), "one epoch on node1 and node2 finishes");
    measuring = FALSE;
    ok(max_gap < STALL_US,
       "no main-loop stall over " STALL_MS " ms while training on the hosts (%.0f ms)",
       max_gap / 1000.0);
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    char *settings = NULL;
    int rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_get(s, "gui-cluster", &info, NULL, &settings, &err);
    ok(rc == 0 && strcmp(info.status, "done") == 0 && info.epochs_done == 1 && settings &&
           strstr(settings, "\"cluster\":true"),
       "the run is recorded as a cluster run, done (%s)", rc == 0 ? info.status : err.msg);
    nl_free(settings);
    nl_store_close(s);
    int w0 = train_page_worker_points(nw()->train, 0),
        w1 = train_page_worker_points(nw()->train, 1);
    long points;
    int finished;
    train_page_stats(nw()->train, &points, &finished);
    ok(w0 >= 30 && w1 >= 30 && w0 <= points && w1 <= points,
       "the per-worker images/s series got points for both workers (%d, %d of %ld steps)", w0, w1,
       points);
    train_page_hosts_report(nw()->train, &done, &report);
    n1 = strstr(report, "node1: ");
    n2 = strstr(report, "node2: ");
    ok(n1 && strstr(n1, "images/s") && n2 && strstr(n2, "communicating"),
       "each worker's totals are listed under the hosts");
    spin(300);
    ok(screenshot("3-train-cluster"), "screenshot of the train page with hosts and workers");
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-cluster");
    spin(200);
    screenshot("4-runs-cluster");
    show("train");
    cluster_faults(&sd);
    long left[8];
    int nleft = sshd_worker_pids(&sd, left, 8);
    for (int i = 0; i < 300 && nleft > 0; i++) {
        spin(100);
        nleft = sshd_worker_pids(&sd, left, 8);
    }
    ok(nleft == 0, "no worker is left on the hosts (%d)", nleft);
    sshd_stop(&sd);
#else
    (void)bin;
    for (int i = 0; i < CLUSTER_TESTS; i++)
        ok(1, "cluster # SKIP built without libssh");
#endif
}

static int some_points(void)
{
    long points;
    int finished;
    train_page_stats(nw()->train, &points, &finished);
    return points > 20;
}

/* The charts' timer is off. */
static int charts_still(void)
{
    return !train_page_ticking(nw()->train);
}

static int predicted(void)
{
    return predict_page_top(nw()->predict) != NULL;
}

static int confusion_ready(void)
{
    return runs_page_confusion_ready(nw()->runs);
}

/* The question dialog on screen, or NULL. */
static GtkWidget *find_question(void)
{
    return find_toplevel(GTK_TYPE_MESSAGE_DIALOG);
}

/* The page action a shortcut of the window with that trigger activates, or NULL. */
static const char *window_shortcut(const char *trigger)
{
    GListModel *controllers = gtk_widget_observe_controllers(win);
    const char *found = NULL;
    for (guint i = 0; !found && i < g_list_model_get_n_items(controllers); i++) {
        GObject *c = g_list_model_get_item(controllers, i);
        for (guint k = 0; GTK_IS_SHORTCUT_CONTROLLER(c) && !found &&
                          k < g_list_model_get_n_items(G_LIST_MODEL(c));
             k++) {
            GtkShortcut *sc = g_list_model_get_item(G_LIST_MODEL(c), k);
            char *t = gtk_shortcut_trigger_to_string(gtk_shortcut_get_trigger(sc));
            GVariant *args = gtk_shortcut_get_arguments(sc);
            /* The arguments belong to the shortcut, which the controller keeps. */
            if (strcmp(t, trigger) == 0 && args &&
                g_variant_is_of_type(args, G_VARIANT_TYPE_STRING))
                found = g_variant_get_string(args, NULL);
            g_free(t);
            g_object_unref(sc);
        }
        g_object_unref(c);
    }
    g_object_unref(controllers);
    return found;
}

/* The binary: usage without a display, the window with one. */
static void check_binary(void)
{
    if (bin) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "env -u DISPLAY -u WAYLAND_DISPLAY '%s' --db '%s' | grep -q '^usage: nnlab'", bin,
                 db_path);
        ok(system(cmd) == 0, "nnlab with no command and no display prints the usage");
        char *args[] = {(char *)bin, "--db", db_path, NULL};
        GPid pid;
        GError *e = NULL;
        gboolean spawned =
            g_spawn_async(NULL, args, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid, &e);
        int status = 0, alive = 0;
        if (spawned) {
            g_usleep(2500000);
            alive = waitpid(pid, &status, WNOHANG) == 0;
            if (alive) {
                kill(pid, SIGTERM);
                waitpid(pid, &status, 0);
            }
            g_spawn_close_pid(pid);
        } else {
            g_error_free(e);
        }
        ok(alive, "nnlab with no command and a display keeps a window open");
    } else {
        ok(1, "the binary's entry point # SKIP NNLAB_BIN is not set");
        ok(1, "the binary's window # SKIP NNLAB_BIN is not set");
    }
}

/* Datasets: an import on a worker thread selects the dataset; the augmented preview; the
 * folder chooser. */
static void check_datasets(void)
{
    ok(gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.import-source", "(ss)",
                                  "shapes", data_dir),
       "datasets.import-source runs");
    ok(wait_for(have_dataset, 60000), "the import finishes and selects the dataset");
    ok(have_dataset() && strcmp(nw()->data->name, "shapes") == 0 &&
           nw()->data->split[NL_TRAIN].n + nw()->data->split[NL_VAL].n == 2400 &&
           nw()->data->split[NL_VAL].n >= 200 && nw()->data->split[NL_TEST].n == 600,
       "about 2160 train, 240 validation and 600 test samples");
    show("datasets");
    ok(screenshot("1-datasets"), "screenshot of the datasets page");
    ok(gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.augment-preview", NULL),
       "datasets.augment-preview draws augmented training samples");
    spin(300);
    ok(screenshot("1-datasets-augmented"), "screenshot of the augmented preview");
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.import", NULL);
    spin(500);
    GtkWidget *chooser = find_toplevel(GTK_TYPE_FILE_CHOOSER_DIALOG);
    ok(chooser != NULL, "datasets.import opens a folder chooser");
    if (chooser)
        gtk_dialog_response(GTK_DIALOG(chooser), GTK_RESPONSE_CANCEL);
    spin(200);
}

/* Model: a spec with an error is refused, then lenet with one more layer. */
static void check_model(void)
{
    show("model");
    gtk_widget_activate_action(
        GTK_WIDGET(nw()->model), "model.spec", "s",
        "conv1: conv 8 3x3\nrelu\nfc1: dense 32\npool1: maxpool 2\nfc2: dense N\n");
    ok(!model_page_valid(nw()->model), "a broken spec is not valid");
    spin(300);
    screenshot("2-model-error");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "lenet");
    ok(model_page_valid(nw()->model), "lenet builds for the dataset");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.add-layer", "s", "dropout 0.25");
    ok(model_page_valid(nw()->model) && strstr(model_page_spec(nw()->model), "dropout 0.25"),
       "a layer added through model.add-layer");
    spin(300);
    ok(screenshot("2-model"), "screenshot of the model page");
}

/* Train one epoch; the window keeps drawing. */
static void check_train(void)
{
    show("train");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "batch", "16");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "threads", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-lenet");
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    ok(gtk_widget_activate_action(train_widget(), "train.start", NULL), "train.start runs");
    ok(train_page_running(nw()->train), "training is running");
    want_finished = 1;
    ok(wait_for(enough_finished, 500000), "training finishes");
    measuring = FALSE;
    long points;
    int finished;
    train_page_stats(nw()->train, &points, &finished);
    ok(points >= 100, "the charts received every step (%ld points)", points);
    ok(max_gap < STALL_US,
       "no main-loop stall over " STALL_MS " ms while training (longest %.0f ms)",
       max_gap / 1000.0);
    spin(300);
    ok(screenshot("3-train"), "screenshot of the train page");

    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_get(s, "gui-lenet", &info, NULL, NULL, &err);
    ok(rc == 0 && strcmp(info.status, "done") == 0 && info.epochs_done == 1 &&
           isfinite(info.test_accuracy),
       "the run is recorded as nnlab train records it (%s)", rc == 0 ? info.status : err.msg);
    nl_store_close(s);
}

/* A second run to compare with: the MLP for three epochs. */
static void check_second_run(void)
{
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "mlp");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "3");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "batch", "32");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-mlp");
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    want_finished = 2;
    ok(wait_for(enough_finished, 500000), "a second run, mlp for three epochs, finishes");
}

/* Fine-tuning: lenet from the first run's weights, its convolutions frozen; closing the
 * window meanwhile asks first. */
static void check_finetune(void)
{
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "lenet");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.init", "s", "gui-lenet");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv1", TRUE);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv2", TRUE);
    ok(model_page_valid(nw()->model) && model_page_init_run(nw()->model) &&
           g_strv_length((char **)model_page_frozen(nw()->model)) == 2,
       "lenet starts from gui-lenet with two frozen layers");
    show("model");
    spin(200);
    screenshot("2-model-finetune");
    show("train");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "batch", "16");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-finetune");
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    gtk_window_close(GTK_WINDOW(win));
    spin(200);
    GtkWidget *question = find_question();
    ok(question && gtk_widget_get_visible(win),
       "closing the window during training asks first and keeps it open");
    if (question)
        gtk_dialog_response(GTK_DIALOG(question), GTK_RESPONSE_CANCEL);
    want_finished = 3;
    ok(wait_for(enough_finished, 500000), "the fine-tuning run finishes");
    ok(frozen_kept(db_path), "frozen layers kept the first run's weights, the others trained");
}

/* Stop, then resume: a slower model, stopped once an epoch is checkpointed, is recorded as
 * stopped; Resume on the runs page continues it to its last epoch in the same record. */
static void check_stop_resume(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc;
    int finished;
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.init", "s", "");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv1", FALSE);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv2", FALSE);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.spec", "s",
                               "conv1: conv 16 3x3 pad=1\nrelu\nconv2: conv 32 3x3 pad=1\n"
                               "pool1: maxpool 2\nrelu\nfc1: dense N\n");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "8");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "lr", "0.01");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-stopped");
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    epoch_run = "gui-stopped";
    ok(wait_for(some_points, 60000) && wait_for(has_epoch, 300000),
       "the long run makes progress and checkpoints its first epoch");
    ok(train_page_ticking(nw()->train), "the charts' timer runs while they are shown");
    show("datasets");
    long before, after;
    train_page_stats(nw()->train, &before, &finished);
    /* Hidden, only epoch ends (through g_idle_add) still drain the ring. The stack's crossfade
     * keeps the page mapped until it ends, which a loaded machine draws late. */
    ok(wait_for(charts_still, 5000), "and stops while they are hidden");
    spin(300);
    show("train");
    train_page_stats(nw()->train, &after, &finished);
    ok(train_page_ticking(nw()->train) && after > before,
       "back on screen, they catch up at once (%ld then %ld points)", before, after);
    gtk_widget_activate_action(train_widget(), "train.stop", NULL);
    want_finished = 4;
    ok(wait_for(enough_finished, 120000), "train.stop stops it");
    rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_get(s, "gui-stopped", &info, NULL, NULL, &err);
    ok(rc == 0 && strcmp(info.status, "stopped") == 0 && info.epochs_done >= 1 &&
           info.epochs_done < 8,
       "the run is recorded as stopped (%s after %d epochs)", rc == 0 ? info.status : err.msg,
       rc == 0 ? info.epochs_done : -1);
    nl_store_close(s);

    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.refresh", NULL);
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-stopped");
    ok(runs_page_action_enabled(nw()->runs, "runs.resume"),
       "Resume is offered for the stopped run");
    spin(200);
    screenshot("4-runs-stopped");
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.resume", NULL);
    ok(train_page_running(nw()->train), "runs.resume starts it on the train page");
    ok(!runs_page_action_enabled(nw()->runs, "runs.resume"),
       "and is not offered while a run is in progress");
    want_finished = 5;
    ok(wait_for(enough_finished, 500000), "the resumed run finishes");
    measuring = FALSE;
    ok(max_gap < STALL_US,
       "no main-loop stall over " STALL_MS " ms while resuming (longest %.0f ms)",
       max_gap / 1000.0);
    spin(300);
    screenshot("3-train-resumed");
    rc = nl_store_open(&s, db_path, &err);
    struct nl_run_epoch *rep = NULL;
    int nrep = 0, in_order = 1;
    if (rc == 0)
        rc = nl_run_get(s, "gui-stopped", &info, NULL, NULL, &err);
    if (rc == 0)
        rc = nl_run_epochs(s, info.id, &rep, &nrep, &err);
    for (int i = 0; rc == 0 && i < nrep; i++)
        in_order &= rep[i].epoch == i + 1;
    ok(rc == 0 && strcmp(info.status, "done") == 0 && info.epochs_done == 8 && nrep == 8 &&
           in_order && isfinite(info.test_accuracy),
       "it ends done with its 8 epochs, each recorded once (%s, %d epochs, %d records)",
       rc == 0 ? info.status : err.msg, rc == 0 ? info.epochs_done : -1, nrep);
    nl_free(rep);
    nl_store_close(s);
}

/* A run stopped before its first checkpoint: Resume and Confusion Matrix are disabled, the
 * reason shown beside them, and the run stays as it was. */
static void check_stopped_early(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc;
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-early");
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    wait_for(some_points, 60000);
    gtk_widget_activate_action(train_widget(), "train.stop", NULL);
    want_finished = 6;
    wait_for(enough_finished, 120000);
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-early");
    ok(!runs_page_action_enabled(nw()->runs, "runs.resume") &&
           !runs_page_action_enabled(nw()->runs, "runs.confusion"),
       "Resume and Confusion Matrix are disabled for it");
    const char *why = runs_page_reason(nw()->runs);
    ok(why && strstr(why, "no checkpoint"), "saying why: %s", why ? why : "nothing shown");
    rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_get(s, "gui-early", &info, NULL, NULL, &err);
    ok(rc == 0 && strcmp(info.status, "stopped") == 0 && info.epochs_done == 0,
       "and the run stays stopped (%s)", rc == 0 ? info.status : err.msg);
    if (rc == 0 && nl_run_remove(s, "gui-early", &err) < 0)
        diag("could not remove the run: %s", err.msg);
    nl_store_close(s);
}

/* Runs: the first two overlaid, and the confusion matrix of the test split. */
static void check_runs(void)
{
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.refresh", NULL);
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "gui-lenet");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "gui-mlp");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-lenet");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.confusion", NULL);
    ok(wait_for(confusion_ready, 120000), "the confusion matrix is computed");
    spin(300);
    ok(screenshot("4-runs"), "screenshot of the runs page");
}

/* Export: the selected run's weights as safetensors, which load back into its model. */
static void check_export(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc;
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.export-to", "s", st_path);
    spin(100);
    struct nl_model *em = NULL;
    rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_model(s, "gui-lenet", 1, NULL, NULL, &info, &em, &err);
    nl_store_close(s);
    float *kept = NULL;
    if (rc == 0) {
        kept = g_memdup2(em->params, em->nparams * sizeof(float));
        memset(em->params, 0, em->nparams * sizeof(float));
        rc = nl_safetensors_load(em, st_path, 0, NULL, NULL, NULL, &err);
    }
    ok(rc == 0, "runs.export-to writes a safetensors file that loads: %s", err.msg);
    ok(rc == 0 && memcmp(kept, em->params, em->nparams * sizeof(float)) == 0,
       "with the run's weights");
    g_free(kept);
    nl_model_free(em);
}

/* The store behind the runs page: epochs per run. */
static void check_run_epochs(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc;
    rc = nl_store_open(&s, db_path, &err);
    struct nl_run_epoch *ep = NULL;
    int nep = 0;
    if (rc == 0)
        rc = nl_run_get(s, "gui-mlp", &info, NULL, NULL, &err);
    if (rc == 0)
        rc = nl_run_epochs(s, info.id, &ep, &nep, &err);
    ok(rc == 0 && nep == 3 && ep[2].epoch == 3 && isfinite(ep[2].val_accuracy),
       "three epochs recorded for the second run");
    nl_free(ep);
    nl_store_close(s);
}

/* Predict: the ring is classified. */
static void check_predict(void)
{
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.file", "s", png_path);
    int got = wait_for(predicted, 60000);
    const char *top = predict_page_top(nw()->predict);
    ok(got && strcmp(top, "3") == 0, "the ring is classified as class 3 (%s)", top ? top : "-");
    spin(300);
    ok(screenshot("5-predict"), "screenshot of the predict page");
}

/* Weights from a .safetensors file on the model page: the exported gui-lenet, with its
 * convolutions frozen, so that the run trained from it keeps them as the file has them. */
static void check_from_file(void)
{
    show("model");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "lenet");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.init-file", "s", st_path);
    ok(model_page_init_file(nw()->model) && !model_page_init_run(nw()->model),
       "model.init-file chooses the file");
    ok(wait_for(file_read, 60000), "the file is matched against the model on a worker thread");
    is_int(model_page_init_loaded(nw()->model), 8, "all 8 of lenet's tensors match");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.new-head", "b", TRUE);
    int fresh = model_page_fresh_head(nw()->model) && wait_for(file_read, 60000);
    int loaded = model_page_init_loaded(nw()->model);
    ok(fresh && loaded == 6, "with New head, the head's 2 tensors start fresh (%d load)", loaded);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.new-head", "b", FALSE);
    fresh = wait_for(file_read, 60000);
    loaded = model_page_init_loaded(nw()->model);
    ok(fresh && loaded == 8, "and without, all 8 load again (%d)", loaded);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv1", TRUE);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv2", TRUE);
    spin(300);
    ok(screenshot("2-model-safetensors"), "screenshot of the model page starting from a file");
    show("train");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "batch", "16");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "gui-from-file");
    gtk_widget_activate_action(train_widget(), "train.start", NULL);
    want_finished = 7;
    ok(wait_for(enough_finished, 500000), "a run from the file finishes");
    ok(weights_from_file(db_path, st_path, "gui-from-file"),
       "its frozen layers hold the file's weights and its other layers trained");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.init-file", "s", "");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv1", FALSE);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "conv2", FALSE);
    ok(!model_page_init_file(nw()->model), "an empty path goes back to random weights");
}

/* The smallest size the window promises: every page. */
static void check_sizes(void)
{
    gtk_window_set_default_size(GTK_WINDOW(win), 1024, 700);
    static const char *const pages[] = {"datasets", "model", "train", "runs", "predict"};
    for (size_t i = 0; i < G_N_ELEMENTS(pages); i++) {
        char name[64];
        show(pages[i]);
        snprintf(name, sizeof name, "%zu-%s-1024x700", i + 1, pages[i]);
        screenshot(name);
    }
    /* The window's contents and its header bar, measured without the window's default size. */
    GtkWidget *content = gtk_window_get_child(GTK_WINDOW(win));
    GtkWidget *header = gtk_window_get_titlebar(GTK_WINDOW(win));
    int min_w, min_h, header_h = 0;
    gtk_widget_measure(content, GTK_ORIENTATION_HORIZONTAL, -1, &min_w, NULL, NULL, NULL);
    gtk_widget_measure(content, GTK_ORIENTATION_VERTICAL, 1024, &min_h, NULL, NULL, NULL);
    if (header)
        gtk_widget_measure(header, GTK_ORIENTATION_VERTICAL, 1024, &header_h, NULL, NULL, NULL);
    ok(min_w <= 1024 && min_h + header_h <= 700,
       "every page fits in 1024x700 (the contents need %dx%d, the header bar %d more)", min_w,
       min_h, header_h);
    show("train");
}

/* The train and runs pages in the dark variant of the theme. */
static void check_dark(void)
{
    g_object_set(gtk_settings_get_default(), "gtk-application-prefer-dark-theme", TRUE, NULL);
    spin(400);
    screenshot("3-train-dark");
    show("runs");
    screenshot("4-runs-dark");
}

/* Deleting a run from the runs page. */
static void check_delete(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc;
    GtkWidget *question;
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "gui-mlp");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.delete", NULL);
    spin(200);
    question = find_question();
    ok(question != NULL, "deleting a run asks first");
    if (question)
        gtk_dialog_response(GTK_DIALOG(question), GTK_RESPONSE_ACCEPT);
    spin(100);
    rc = nl_store_open(&s, db_path, &err);
    if (rc == 0)
        rc = nl_run_get(s, "gui-mlp", &info, NULL, NULL, &err);
    is_int(rc, NL_ENOENT, "runs.delete removes the selected run");
    nl_store_close(s);
}

int main(int argc, char **argv)
{
    gui_start(argv, "nnlab-gui", "1280x1024", 0);

    plan(57 + 7 + CLUSTER_TESTS);
    snprintf(data_dir, sizeof data_dir, "%s/shapes", gui_tmp);
    snprintf(db_path, sizeof db_path, "%s/nnlab.db", gui_tmp);
    snprintf(png_path, sizeof png_path, "%s/ring.png", gui_tmp);
    snprintf(st_path, sizeof st_path, "%s/gui-lenet.safetensors", gui_tmp);
    bin = getenv("NNLAB_BIN");
    mkdir(data_dir, 0755);
    write_idx(data_dir, "train", 2400);
    write_idx(data_dir, "t10k", 600);
    ok(write_png(png_path, 3) == 0, "a PNG to classify");
    check_binary();

    GObject *app = nl_app_new(db_path);
    GError *error = NULL;
    ok(g_application_register(G_APPLICATION(app), NULL, &error), "the application registers");
    g_application_activate(G_APPLICATION(app));
    win = GTK_WIDGET(gtk_application_get_active_window(GTK_APPLICATION(app)));
    ok(win != NULL, "activating opens a window");
    if (!win)
        return 1;
    gtk_window_set_default_size(GTK_WINDOW(win), 1240, 860);
    ok(gtk_icon_theme_has_icon(gtk_icon_theme_get_for_display(gtk_widget_get_display(win)),
                               "org.nnlab.Nnlab"),
       "the application icon is found (from the resources)");
    const char *start = window_shortcut("<Control>Return");
    ok(start && strcmp(start, "train.start") == 0, "Ctrl+Return starts training (%s)",
       start ? start : "no shortcut");
    spin(500);
    g_timeout_add(10, beat, NULL);

    check_datasets();
    check_model();
    check_train();
    check_second_run();
    check_finetune();
    check_stop_resume();
    check_stopped_early();
    check_runs();
    check_export();
    check_run_epochs();
    check_predict();
    check_from_file();
    /* Cluster: Check Hosts and a run on node1 and node2 of a private sshd on 127.0.0.1. */
    cluster_checks();
    check_sizes();
    check_dark();
    check_delete();

    gtk_window_destroy(GTK_WINDOW(win));
    spin(200);
    g_object_unref(app);
    return done_testing();
}
#endif
