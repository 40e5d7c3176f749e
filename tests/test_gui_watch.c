/* The Train page following a run that another process trains on the same store, under Xvfb with
 * real input: `nnlab train` started as a child process (as in a terminal beside the window), and
 * `nnlab train --mpi` under mpirun -np 2 when mpirun and an MPI build are there (skipped, saying
 * why, otherwise). Checks that:
 *  - the Runs page offers Watch for the run trained elsewhere: a click on it shows the Train page
 *    following the run; once the run is done, Watch is refused there;
 *  - the shown Train page offers the run trained elsewhere, and a click on Watch follows it;
 *  - its loss and images/s charts gain points step by step from the store while it trains (more
 *    points than epochs ended, and more at each look), its accuracy chart its epochs;
 *  - following ends when the run does, saying it is done, with every epoch drawn;
 *  - the MPI run's images/s chart has each worker's own series;
 *  - with openssh-server, a run of `nnlab train --hosts node1:1,node2:1` on a private sshd on
 *    127.0.0.1 (tests/sshd.h), one of whose workers is killed (SIGKILL): its recovery shows as
 *    a marker on the loss chart, a line under the hosts and a notice, and the run ends done;
 *    what its --overlap auto chose, as the run records it, shows as a line and a marker;
 *  - the main loop never stalls while following.
 * A screenshot of the page following each run goes to BUILD/ui-screenshots/.
 *
 * Run by meson directly, it re-executes itself under dbus-run-session and xvfb-run; it skips
 * when those programs, xdotool or GTK are missing, or NNLAB_BIN is not set. */
#include "nnlab-config.h"
#include "tap.h"

#if !NNLAB_HAVE_GTK
int main(void)
{
    skip_all("built without GTK 4");
}
#else

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gui_util.h"
#include "nnlab/alloc.h"
#include "nnlab/runs.h"
#include "sshd.h"

static char db[700], spec[700];
static const char *bin;
static const char *run_name; /* the run followed */

/* Starts `[prefix] nnlab --db DB --quiet train ARGS` as a child process, at a lower priority:
 * the stalls measured are the window's own, not a loaded machine's. */
static int start_training(const char *prefix, const char *args)
{
    char *cmd = g_strdup_printf("nice -n 10 %s %s --db %s --quiet train %s", prefix, bin, db, args);
    const int ok = gui_spawn(cmd);
    g_free(cmd);
    return ok;
}

static NlTrainPage *page(void)
{
    return nw()->train;
}

static int offered(void)
{
    const char *r = train_page_offered(page());
    return r && strcmp(r, run_name) == 0;
}

static long points(void)
{
    long n;
    int finished;
    train_page_stats(page(), &n, &finished);
    return n;
}

static long seen;
static int more_points(void)
{
    return points() > seen;
}

/* The run's epochs ended, from the store. */
static int epochs_done(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int n = -1;
    if (nl_store_open_read(&s, db, &err) < 0)
        return -1;
    if (nl_run_get(s, run_name, &info, NULL, NULL, &err) == 0)
        n = info.epochs_done;
    nl_store_close(s);
    return n;
}

#if NNLAB_HAVE_SSH
/* What --overlap auto chose, as the run records it and as the page shows it: the page's line
 * and marker from the recorded step + 1. */
static void check_overlap_shown(void)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    struct nl_run_overlap ov = {0};
    char *settings = NULL;
    int rc = nl_store_open_read(&s, db, &err);
    if (rc == 0) {
        rc = nl_run_get(s, run_name, &info, NULL, &settings, &err);
        if (rc == 0)
            rc = nl_run_overlap_parse(settings, &ov, &err);
        nl_free(settings);
        nl_store_close(s);
    }
    char want[96];
    snprintf(want, sizeof want, ": %s from step %ld", ov.overlapped ? "overlapping" : "synchronous",
             ov.step + 1);
    int marker = 0;
    const char *line = train_page_overlap(page(), &marker);
    int done;
    const char *report;
    train_page_hosts_report(page(), &done, &report);
    ok(rc == 0 && ov.measured && line && strstr(line, want) && marker && strstr(report, line),
       "auto's recorded choice (%s) shows as a line under the hosts and a marker: %s",
       rc < 0        ? err.msg
       : ov.measured ? want
                     : "none recorded",
       line ? line : "(none)");
}
#endif

static int following_ended(void)
{
    const char *run, *ended;
    train_page_watched(page(), &run, &ended);
    return ended != NULL;
}

static int runs_selected(void)
{
    const char *r = runs_page_selected(nw()->runs);
    return r && strcmp(r, run_name) == 0;
}

static int runs_can_watch(void)
{
    return runs_selected() && runs_page_action_enabled(nw()->runs, "runs.watch");
}

static int watching_run(void)
{
    const char *r = train_page_watching(page());
    return r && strcmp(r, run_name) == 0;
}

/* The Runs page's Watch on run_name, trained by the child: a click shows the Train page following
 * it; following then stops, for the Train page's own offer. */
#define RUNS_WATCH_TESTS 2
static void watch_from_runs(void)
{
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", run_name);
    const int can = wait_for(runs_can_watch, 60000);
    ok(can, "the Runs page offers Watch for the run trained by another process");
    GtkWidget *watch = find(win, GTK_TYPE_BUTTON, "runs.watch");
    const int following = can && click(watch) && wait_for(watching_run, 10000);
    const char *shown = gtk_stack_get_visible_child_name(nw()->stack);
    ok(following && shown && strcmp(shown, "train") == 0,
       "a click on it shows the Train page (%s) following the run (%s)", shown ? shown : "none",
       train_page_watching(page()) ? train_page_watching(page()) : "none");
    gtk_widget_activate_action(train_widget(), "train.watch", "s", "");
}

/* Follows run_name, trained by the child, from the offer to its end: n_epochs epochs; workers > 0:
 * the images/s chart has that many workers' series. tests: the number of checks made. */
#define FOLLOW_TESTS     7
static void follow(const char *what, int n_epochs, int workers)
{
    show("train");
    const int shown = wait_for(offered, 60000);
    ok(shown, "the Train page offers %s, trained by another process", what);
    if (workers == 0)
        screenshot("train-watch-offer-1024x700");
    GtkWidget *watch = find(win, GTK_TYPE_BUTTON, "train.watch");
    seen = 0;
    const int clicked = click(watch);
    /* The click itself waits for xdotool on the main loop: the stalls are measured after it. */
    measure_stalls();
    const int following = clicked && wait_for(more_points, 60000) && train_page_watching(page()) &&
                          strcmp(train_page_watching(page()), run_name) == 0;
    ok(following, "a click on Watch follows it: its charts get points (%ld)", points());
    /* Steps, not epochs: more at the next look, and more points than epochs ended. */
    seen = points();
    const int gained = wait_for(more_points, 30000);
    const long now = points();
    measuring = FALSE; /* the test's own read of the store */
    const int ended = epochs_done();
    measuring = TRUE;
    ok(gained && now > 3 * (ended + 1),
       "its steps arrive while it trains: %ld points, then %ld, after %d epochs", seen, now, ended);
    spin(300);
    char name[64];
    snprintf(name, sizeof name, "train-watch-%s-1024x700", workers > 0 ? "mpi" : "cli");
    measuring = FALSE; /* a screenshot is the test's own work on the main loop */
    screenshot(name);
    measuring = TRUE;
    if (workers > 0) {
        int w0 = train_page_worker_points(page(), 0), w1 = train_page_worker_points(page(), 1);
        ok(w0 > 0 && w1 > 0, "the images/s chart has each worker's series (%d and %d points)", w0,
           w1);
    } else {
        ok(train_page_worker_points(page(), 0) == 0,
           "a local run's images/s chart is the one series of this computer");
    }
    const int done = wait_for(gui_child_gone, 300000) && wait_for(following_ended, 10000);
    const char *run, *how;
    train_page_watched(page(), &run, &how);
    ok(done && how && strcmp(how, "done") == 0 && !train_page_watching(page()),
       "following ends with the run, which is done (%s)", how ? how : "still following");
    ok(train_page_epochs_drawn(page()) == n_epochs, "its %d epochs are on the accuracy chart (%d)",
       n_epochs, train_page_epochs_drawn(page()));
    measuring = FALSE;
    ok(max_gap < STALL_US, "no main-loop stall over " STALL_MS " ms while following (%.0f ms)",
       max_gap / 1000.0);
}

static int some_points(void)
{
    return points() >= 10;
}

static int recovered(void)
{
    int count, markers;
    const char *last;
    train_page_recoveries(page(), &count, &markers, &last);
    return count > 0;
}

/* A cluster run of the command line on node1 and node2 of a private sshd, one worker killed. */
#define CLUSTER_TESTS    5
static void follow_cluster(void)
{
#if NNLAB_HAVE_SSH
    struct sshd sd;
    const char *why = sshd_start(&sd);
    if (why) {
        sshd_stop(&sd);
        for (int i = 0; i < CLUSTER_TESTS; i++)
            ok(1, "ssh # SKIP %s", why);
        return;
    }
    unsetenv("SSH_AUTH_SOCK"); /* the sshd's own key, not an agent's */
    run_name = "ssh-run";
    char args[1600];
    snprintf(args, sizeof args,
             "--hosts node1:1,node2:1 --ssh-config %s/ssh_config --remote-nnlab %s "
             "--heartbeat-timeout 4 --max-restarts 2 --data bands --model %s --epochs 2 "
             "--batch 8 --threads 1 --lr 0.01 --name %s",
             sd.dir, bin, spec, run_name);
    int started = start_training("", args);
    show("train");
    int followed = started && wait_for(offered, 60000) &&
                   click(find(win, GTK_TYPE_BUTTON, "train.watch")) &&
                   wait_for(some_points, 120000);
    long pids[8];
    const int n = followed ? sshd_worker_pids(&sd, pids, 8) : 0;
    ok(n == 2 && kill((pid_t)pids[1], SIGKILL) == 0,
       "a cluster run of the command line is followed, and one of its two workers killed after "
       "%ld steps (%d workers found)",
       points(), n);
    ok(wait_for(recovered, 120000), "the Train page hears of the recovery from the store");
    int count = 0, markers = 0, done;
    const char *last = NULL, *report;
    train_page_recoveries(page(), &count, &markers, &last);
    train_page_hosts_report(page(), &done, &report);
    ok(count == 1 && markers == 1 && last && strstr(last, "restarted") && strstr(report, last),
       "a marker on the loss chart and a line under the hosts: %s", last ? last : "(none)");
    spin(300);
    screenshot("train-watch-ssh-1024x700");
    const int ended = wait_for(gui_child_gone, 300000) && wait_for(following_ended, 10000);
    const char *run, *how;
    train_page_watched(page(), &run, &how);
    ok(ended && how && strcmp(how, "done") == 0, "the run goes on and ends done (%s)",
       how ? how : "still following");
    check_overlap_shown();
    if (gui_child > 0 && !gui_child_gone())
        kill(gui_child, SIGTERM);
    sshd_stop(&sd);
#else
    for (int i = 0; i < CLUSTER_TESTS; i++)
        ok(1, "ssh # SKIP built without libssh");
#endif
}

int main(int argc, char **argv)
{
    gui_start(argv, "nnlab-watch", "1920x1080", 1);
    bin = getenv("NNLAB_BIN");
    if (!bin)
        skip_all("NNLAB_BIN is not set");

    plan(1 + RUNS_WATCH_TESTS + 1 + 2 * FOLLOW_TESTS + CLUSTER_TESTS);
    char data_dir[600];
    snprintf(db, sizeof db, "%s/nnlab.db", gui_tmp);
    snprintf(spec, sizeof spec, "%s/wide.nn", gui_tmp);
    gui_bands(data_dir, sizeof data_dir, 1500, 150);
    /* Wide enough that an epoch lasts a few seconds: the run is followed while it trains. */
    gui_write_file(spec, "fc1: dense 1024\nrelu\nfc2: dense 1024\nrelu\nfc3: dense N\n");
    char *cmd = g_strdup_printf("%s --db %s --quiet import bands %s --val 0.1", bin, db, data_dir);
    ok(system(cmd) == 0, "nnlab import fills the store");
    g_free(cmd);

    GObject *app = gui_open(db);
    resize(1024, 700);
    g_timeout_add(10, beat, NULL);

    /* A run of the command line, in a terminal beside the window. */
    run_name = "cli-run";
    char args[1200];
    snprintf(args, sizeof args,
             "--data bands --model %s --epochs 6 --threads 1 --batch 4 --lr 0.01 --name %s", spec,
             run_name);
    /* Six epochs: on an idle machine two end before the window has looked twice. */
    if (start_training("", args)) {
        watch_from_runs();
        follow("the command line's run", 6, 0);
        /* Done: the Runs page has nothing to watch. */
        show("runs");
        gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.refresh", NULL);
        gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", run_name);
        ok(runs_selected() && !runs_page_action_enabled(nw()->runs, "runs.watch"),
           "once the run is done the Runs page refuses Watch for it");
    } else {
        for (int i = 0; i < RUNS_WATCH_TESTS + FOLLOW_TESTS + 1; i++)
            ok(0, "nnlab train could not start");
    }

    /* The same under mpirun, two ranks. */
    const char *why = !NNLAB_HAVE_MPI      ? "built without MPI"
                      : !in_path("mpirun") ? "no mpirun (apt-get install openmpi-bin)"
                                           : NULL;
    if (!why) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        run_name = "mpi-run";
        snprintf(args, sizeof args,
                 "--mpi --data bands --model %s --epochs 2 --threads 1 --batch 8 --lr 0.01 "
                 "--heartbeat-timeout 60 "
                 "--name %s",
                 spec, run_name);
        if (start_training("mpirun --oversubscribe --bind-to none -np 2", args))
            follow("the run under mpirun", 2, 2);
        else
            why = "mpirun could not start";
    }
    if (why)
        for (int i = 0; i < FOLLOW_TESTS; i++)
            ok(1, "mpirun # SKIP %s", why);

    if (gui_child > 0 && !gui_child_gone())
        kill(gui_child, SIGTERM);
    follow_cluster();
    gtk_window_destroy(GTK_WINDOW(win));
    spin(200);
    g_object_unref(app);
    return done_testing();
}
#endif
