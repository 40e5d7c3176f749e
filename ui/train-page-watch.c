/* The Train page following a run that another process trains on the same store: `nnlab train`
 * in a terminal, on SSH hosts, or under `mpirun ... --mpi`.
 *
 * While the page is shown, idle and following nothing, it looks every two seconds for a run whose
 * status is running and whose owner lives and is not this process, and offers the newest such
 * run with a Watch button (train.watch RUN). Following a run reads the store every half second
 * while the charts are shown, on a worker thread, never on the main loop: the run's record, its
 * worker steps after the last one drawn (nl_run_worker_steps: the session stores them about once a
 * second, a local run's as one worker's), its epochs and its recoveries. The main loop draws them
 * as for a run of its own: per step the loss (the workers' mean, weighted by their samples),
 * images/s (the last 16 steps' samples over their seconds, a step's seconds being its slowest
 * worker's) and each worker's own rate in the step for a run of several workers; per epoch the
 * train and validation accuracy (the running accuracy of each step is not stored); each recovery as
 * a marker, a line under the hosts and a notice; what --overlap auto chose, once the run records
 * it, as a line under the hosts and a marker. Steps are placed at step / steps per epoch, those
 * being the dataset's train count over the run's batch. Following ends when the run is no longer
 * running (its status then is said) or on train.watch "". */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "nnlab/alloc.h"
#include "nnlab/runs.h"
#include "store-poll.h"
#include "train-page-private.h"

enum { WATCH_MS = 500, OFFER_MS = 2000, MAX_ROWS = 200000 };

/* What a poll read, owned by its GTask. */
struct watch_poll {
    char *db_path, *run;
    guint generation;
    long after; /* the last step drawn */
    int rc;
    struct nl_error err;
    struct nl_run_info info;
    struct nl_train_opts o;
    int cluster;
    uint32_t ntrain;
    struct nl_run_worker_step *rows;
    int nrows;
    struct nl_run_epoch *epochs;
    int nepochs;
    struct nl_run_recovery *rec;
    int nrec;
    struct nl_run_overlap ov; /* what --overlap auto chose, once it has */
};

static void poll_free(gpointer data)
{
    struct watch_poll *w = data;
    g_free(w->db_path);
    g_free(w->run);
    nl_free(w->rows);
    nl_free(w->epochs);
    nl_free(w->rec);
    g_free(w);
}

static void poll_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
    struct watch_poll *w = data;
    struct nl_store *s = NULL;
    char *settings = NULL;
    struct nl_dataset_info d;
    int rc = nl_store_open_read(&s, w->db_path, &w->err);
    if (rc == 0)
        rc = nl_run_get(s, w->run, &w->info, NULL, &settings, &w->err);
    if (rc == 0)
        rc = nl_run_settings_parse(settings, w->info.name, &w->o, NULL, &w->cluster, &w->err);
    if (rc == 0)
        rc = nl_run_overlap_parse(settings, &w->ov, &w->err);
    if (rc == 0 && nl_dataset_info(s, w->info.dataset, &d, &w->err) == 0)
        w->ntrain = d.count[NL_TRAIN];
    if (rc == 0)
        rc = nl_run_worker_steps(s, w->info.id, w->after, MAX_ROWS, &w->rows, &w->nrows, &w->err);
    if (rc == 0)
        rc = nl_run_epochs(s, w->info.id, &w->epochs, &w->nepochs, &w->err);
    if (rc == 0)
        rc = nl_run_recoveries(s, w->info.id, &w->rec, &w->nrec, &w->err);
    nl_free(settings);
    nl_store_close(s);
    w->rc = rc;
    g_task_return_boolean(task, TRUE);
}

/* The workers of a run of several, named by their hosts (a second worker on a host as "#2"). */
static void name_workers(NlTrainPage *p, const struct watch_poll *w)
{
    int n = 0;
    for (int i = 0; i < w->nrows; i++)
        n = MAX(n, w->rows[i].worker + 1);
    if (n < 2 || p->nworkers > 0)
        return;
    p->nworkers = MIN(n, FEED_MAX_WORKERS);
    for (int k = 0; k < p->nworkers; k++)
        for (int i = 0; i < w->nrows; i++)
            if (w->rows[i].worker == k) {
                int same = 0;
                for (int j = 0; j < k; j++)
                    same +=
                        p->worker_names[j] && g_str_has_prefix(p->worker_names[j], w->rows[i].host);
                p->worker_names[k] = same ? g_strdup_printf("%s #%d", w->rows[i].host, same + 1)
                                          : g_strdup(w->rows[i].host);
                break;
            }
}

/* The images/s of the steps followed, as training reports it: the samples of the last steps
 * over their seconds (each step's seconds its slowest worker's). */
static double recent_rate(NlTrainPage *p, double samples, double seconds)
{
    const int cap = (int)G_N_ELEMENTS(p->rate_samples);
    p->rate_samples[p->rate_n % cap] = samples;
    p->rate_seconds[p->rate_n % cap] = seconds;
    p->rate_n++;
    double n = 0, t = 0;
    for (int i = 0; i < MIN(p->rate_n, cap); i++) {
        n += p->rate_samples[i];
        t += p->rate_seconds[i];
    }
    return t > 0 && n > 0 ? n / t : NAN;
}

/* Draws the rows of whole steps: a step's workers are stored together, but the last step read
 * may lack some when the read was cut at MAX_ROWS. */
static void draw_steps(NlTrainPage *p, const struct watch_poll *w)
{
    int end = w->nrows;
    if (w->nrows == MAX_ROWS)
        while (end > 0 && w->rows[end - 1].step == w->rows[w->nrows - 1].step)
            end--;
    struct feed_point last = {0};
    for (int i = 0; i < end;) {
        const long step = w->rows[i].step;
        double worker_ips[FEED_MAX_WORKERS];
        for (int k = 0; k < FEED_MAX_WORKERS; k++)
            worker_ips[k] = NAN;
        double loss = 0, slowest = 0;
        long samples = 0;
        int epoch = w->rows[i].epoch;
        for (; i < end && w->rows[i].step == step; i++) {
            const struct nl_run_worker_step *r = &w->rows[i];
            const double busy = (isfinite(r->compute_seconds) ? r->compute_seconds : 0) +
                                (isfinite(r->comm_seconds) ? r->comm_seconds : 0);
            if (r->samples > 0 && isfinite(r->loss)) {
                loss += r->loss * (double)r->samples;
                samples += r->samples;
            }
            slowest = MAX(slowest, busy);
            if (r->worker >= 0 && r->worker < FEED_MAX_WORKERS && busy > 0 && r->samples > 0)
                worker_ips[r->worker] = (double)r->samples / busy;
        }
        const double mean = samples > 0 ? loss / (double)samples : NAN;
        const double ips = recent_rate(p, (double)samples, slowest);
        train_charts_add_step(p, (double)step / (double)p->watched_iters, mean, NAN, ips,
                              worker_ips);
        p->watched_step = step;
        last = (struct feed_point){.epoch = epoch,
                                   .epochs = w->o.epochs,
                                   .iter = step - (long)(epoch - 1) * p->watched_iters,
                                   .iters = p->watched_iters,
                                   .loss = mean,
                                   .images_per_second = ips,
                                   .eta_seconds = NAN};
    }
    if (last.epoch > 0) {
        p->last = last;
        train_charts_show_point(p, &last);
        char buf[160];
        g_snprintf(buf, sizeof buf, "Epoch %d of %d · step %ld of %ld · followed from the store",
                   last.epoch, last.epochs, last.iter, last.iters);
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), buf);
        train_charts_redraw(p);
    }
}

static void draw_epochs(NlTrainPage *p, const struct watch_poll *w)
{
    double *x = g_new(double, (size_t)MAX(w->nepochs, 1));
    double *acc = g_new(double, (size_t)MAX(w->nepochs, 1));
    double *val = g_new(double, (size_t)MAX(w->nepochs, 1));
    for (int i = 0; i < w->nepochs; i++) {
        x[i] = w->epochs[i].epoch;
        acc[i] = w->epochs[i].train_accuracy;
        val[i] = w->epochs[i].val_accuracy;
    }
    if (w->nepochs != (int)p->ep_x->len)
        train_charts_set_epochs(p, x, acc, val, w->nepochs);
    g_free(x);
    g_free(acc);
    g_free(val);
}

static void draw_recoveries(NlTrainPage *p, const struct watch_poll *w)
{
    for (int i = p->watched_recoveries; i < w->nrec; i++) {
        const struct nl_run_recovery *r = &w->rec[i];
        char *line = g_strdup_printf(
            "%s: %s; %s (restart %d), continuing from step %ld on %d worker%s", r->host, r->what,
            r->action, r->restarts, r->step, r->workers, r->workers == 1 ? "" : "s");
        char *label = g_strdup_printf("%s %s", r->host, r->action);
        train_charts_add_recovery(p, (double)r->step / (double)p->watched_iters, label, line);
        g_free(label);
        g_free(line);
    }
    p->watched_recoveries = MAX(p->watched_recoveries, w->nrec);
}

/* What --overlap auto chose, once the run records it (again, after a resume or a lost worker):
 * the line the command line prints and a marker at the first step of the kept mode. */
static void draw_overlap(NlTrainPage *p, const struct watch_poll *w)
{
    const struct nl_run_overlap *o = &w->ov;
    if (!o->measured)
        return;
    const double x = (double)o->step / (double)p->watched_iters;
    if (isfinite(p->overlap_x) && p->overlap_x == x)
        return;
    char *line = g_strdup_printf(
        "Overlap: measured %.1f ms synchronous, %.1f ms overlapped: %s from step %ld", o->sync_ms,
        o->overlapped_ms, o->overlapped ? "overlapping" : "synchronous", o->step + 1);
    train_charts_set_overlap(p, x, o->overlapped ? "overlapped" : "synchronous", line);
    g_free(line);
}

static gboolean watch_tick(gpointer data);

/* Following ends: the run's status is said, the charts stay. */
static void watch_ended(NlTrainPage *p, const char *status)
{
    char buf[400];
    g_snprintf(buf, sizeof buf, "Run “%s” is %s", p->watched, status);
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), buf);
    if (strcmp(status, "done") == 0)
        gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), 1.0);
    g_free(p->watch_status);
    p->watch_status = g_strdup(status);
    train_watch_stop(p);
    runs_page_refresh(p->win->runs);
}

static void poll_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlTrainPage *p = NL_TRAIN_PAGE(source);
    struct watch_poll *w = g_task_get_task_data(G_TASK(res));
    if (p->disposed || !p->watched || w->generation != p->watch_generation)
        return;
    p->watch_polling = FALSE;
    if (w->rc < 0) {
        nl_window_notify(p->win, "%s", w->err.msg);
        watch_ended(p, "not readable");
        return;
    }
    if (p->watched_iters <= 0) {
        const long batch = w->o.batch > 0 ? w->o.batch : 1;
        p->watched_iters = w->ntrain > 0 ? ((long)w->ntrain + batch - 1) / batch : 1;
        p->watched_id = w->info.id;
        p->watched_cluster = w->cluster;
        char *model = g_path_get_basename(w->info.model);
        char *what = g_strdup_printf("Watching “%s”: %s on %s, trained by process %ld on %s",
                                     w->info.name, model, w->info.dataset, w->info.owner_pid,
                                     w->info.owner_host[0] ? w->info.owner_host : "?");
        gtk_label_set_text(GTK_LABEL(p->what), what);
        g_free(what);
        g_free(model);
    }
    name_workers(p, w);
    draw_steps(p, w);
    draw_epochs(p, w);
    draw_recoveries(p, w);
    draw_overlap(p, w);
    if (strcmp(w->info.status, "running") != 0 || !w->info.owner_lives)
        watch_ended(p, w->info.status);
}

static gboolean watch_tick(gpointer data)
{
    NlTrainPage *p = data;
    /* Hidden charts wait; shown again, they catch up at the next tick. */
    if (p->watch_polling || !p->watched || !p->mapped)
        return G_SOURCE_CONTINUE;
    struct watch_poll *w = g_new0(struct watch_poll, 1);
    w->db_path = g_strdup(p->win->db_path);
    w->run = g_strdup(p->watched);
    w->generation = p->watch_generation;
    w->after = p->watched_step;
    p->watch_polling = TRUE;
    GTask *task = g_task_new(p, NULL, poll_done, NULL);
    g_task_set_task_data(task, w, poll_free);
    g_task_run_in_thread(task, poll_thread);
    g_object_unref(task);
    return G_SOURCE_CONTINUE;
}

void train_watch_stop(NlTrainPage *p)
{
    if (p->watch_timer) {
        g_source_remove(p->watch_timer);
        p->watch_timer = 0;
    }
    p->watch_generation++;
    p->watch_polling = FALSE;
    g_clear_pointer(&p->watched, g_free);
    train_watch_update_offer(p);
}

void train_page_watch(NlTrainPage *p, const char *run)
{
    if (p->job) {
        nl_window_notify(p->win, "A run is in progress here; it is the one the charts show");
        return;
    }
    train_watch_stop(p);
    if (!run || !run[0])
        return;
    train_charts_clear(p);
    train_report_clear(p);
    p->watched = g_strdup(run);
    g_free(p->watched_last);
    p->watched_last = g_strdup(run);
    g_clear_pointer(&p->watch_status, g_free);
    p->watched_step = 0;
    p->watched_iters = 0;
    p->watched_recoveries = 0;
    p->rate_n = 0;
    gtk_label_set_text(GTK_LABEL(p->what), "Watching…");
    train_charts_starting(p, "Reading the run from the store…");
    train_watch_update_offer(p);
    p->watch_timer = g_timeout_add(WATCH_MS, watch_tick, p);
    watch_tick(p);
}

void train_watch_action(GtkWidget *widget, const char *action, GVariant *param)
{
    train_page_watch(NL_TRAIN_PAGE(widget), g_variant_get_string(param, NULL));
}

/* ---- The offer: a run trained elsewhere ---- */

struct offer_poll {
    char *run; /* the newest run trained by another live process, or NULL */
    long pid;
    char host[256];
};

static void offer_free(gpointer data)
{
    struct offer_poll *o = data;
    g_free(o->run);
    g_free(o);
}

/* The newest run training in another live process (in the poll's worker thread). */
static void offer_read(struct nl_store *s, const struct nl_run_info *list, int n, gpointer data)
{
    struct offer_poll *o = data;
    char self[256] = "";
    gethostname(self, sizeof self - 1);
    for (int i = n - 1; i >= 0 && !o->run; i--) {
        const struct nl_run_info *r = &list[i];
        const gboolean mine = r->owner_pid == (long)getpid() && strcmp(r->owner_host, self) == 0;
        if (strcmp(r->status, "running") == 0 && r->owner_lives && !mine) {
            o->run = g_strdup(r->name);
            o->pid = r->owner_pid;
            g_strlcpy(o->host, r->owner_host, sizeof o->host);
        }
    }
}

static gboolean offer_wanted(NlTrainPage *p)
{
    return !p->disposed && !p->job && !p->watched && gtk_widget_get_mapped(GTK_WIDGET(p));
}

static void offer_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlTrainPage *p = NL_TRAIN_PAGE(source);
    struct offer_poll *o = store_poll_job(res);
    if (p->disposed)
        return;
    p->elsewhere_polling = FALSE;
    if (!offer_wanted(p) || !o->run) {
        gtk_widget_set_visible(p->elsewhere, FALSE);
        return;
    }
    char *t = g_strdup_printf("“%s” is training in process %ld on %s.", o->run, o->pid, o->host);
    gtk_label_set_text(GTK_LABEL(p->elsewhere_label), t);
    g_free(t);
    gtk_actionable_set_action_target(GTK_ACTIONABLE(p->watch), "s", o->run);
    gtk_widget_set_visible(p->elsewhere, TRUE);
}

static gboolean offer_tick(gpointer data)
{
    NlTrainPage *p = data;
    if (p->elsewhere_polling)
        return G_SOURCE_CONTINUE;
    p->elsewhere_polling = TRUE;
    store_poll(p, p->win->db_path, offer_read, g_new0(struct offer_poll, 1), offer_free,
               offer_done);
    return G_SOURCE_CONTINUE;
}

void train_watch_update_offer(NlTrainPage *p)
{
    const gboolean want = p->win && offer_wanted(p);
    if (want && !p->elsewhere_timer) {
        p->elsewhere_timer = g_timeout_add(OFFER_MS, offer_tick, p);
        offer_tick(p);
    } else if (!want && p->elsewhere_timer) {
        g_source_remove(p->elsewhere_timer);
        p->elsewhere_timer = 0;
    }
    if (!want)
        gtk_widget_set_visible(p->elsewhere, FALSE);
}

const char *train_page_watching(NlTrainPage *p)
{
    return p->watched;
}

void train_page_watched(NlTrainPage *p, const char **run, const char **ended)
{
    *run = p->watched_last;
    *ended = p->watch_status;
}

const char *train_page_offered(NlTrainPage *p)
{
    if (!gtk_widget_get_visible(p->elsewhere))
        return NULL;
    GVariant *v = gtk_actionable_get_action_target_value(GTK_ACTIONABLE(p->watch));
    return v ? g_variant_get_string(v, NULL) : NULL;
}

void train_watch_release(NlTrainPage *p)
{
    if (p->watch_timer) {
        g_source_remove(p->watch_timer);
        p->watch_timer = 0;
    }
    if (p->elsewhere_timer) {
        g_source_remove(p->elsewhere_timer);
        p->elsewhere_timer = 0;
    }
    g_clear_pointer(&p->watched, g_free);
}
