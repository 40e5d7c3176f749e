/* The train page: hyper-parameters, a training run on its own thread, and live charts.
 *
 * The training thread never calls GTK. Per-iteration points go into a locked ring buffer (feed.h)
 * that a 100 ms timeout on the main loop drains while the charts are on screen; epoch ends and
 * the end of the run come through g_idle_add with a payload the callback owns. The thread opens
 * its own store connection and records the run as `nnlab train` does: locally with nl_train, on
 * the hosts of the Hosts field with nl_cluster_train (one worker each, the SSH options of the
 * form), or, for a run resumed from the runs page, from its latest checkpoint as
 * `nnlab train --resume` does (nl_run_resume_open).
 *
 * Check Hosts runs nl_host_check for each host on a worker thread and lists what it found. The
 * images/s chart shows a cluster run's total and each worker's own rate (its samples over its
 * compute and communication seconds in each step, from the ITER events' workers[]).
 *
 * A cluster run's recoveries (NL_EVENT_RECOVERY: a lost worker restarted or dropped) are stored
 * in the run's recoveries table by the thread and pushed as feed events; the main loop pulls
 * them with the points (and at once on a nudge through g_idle_add, should the charts' timer be
 * off) and shows each as a notice, a line under the hosts (as the command line prints it) and a
 * marker on the loss chart at its step. The Heartbeat timeout and Max restarts fields go to
 * nl_cluster_opts.
 *
 * Resume continues a run in its own record with its own settings, which the form then shows; a
 * cluster run goes on on the hosts its settings name (the window records them as "hosts"; a run
 * the command line started, which lacks them, on those of the Hosts field), with the form's SSH
 * options.
 *
 * Start and Stop stay in view under the form. Why Start is refused (no dataset, the model's
 * error, a run name that exists, with the next free one) shows above them, checked before
 * anything of the last run's view is cleared; number fields refuse text that is not a number or
 * is out of range (the field keeps its value, is marked, and the reason shows there too). */
#include <math.h>
#include <signal.h>
#include <string.h>

#include "core/formats/json.h"
#include "feed.h"
#include "finetune.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/safetensors.h"
#include "nnlab/session.h"
#include "nnlab/spec.h"
#include "nnlab/text.h"
#include "nnlab/trainer.h"
#include "window.h"

#define FEED_CAP (1 << 16)
#define PULL_MAX 4096

static const struct chart_rgb BLUE = {0.21, 0.52, 0.89}, ORANGE = {0.90, 0.38, 0.0},
                              LIGHT_BLUE = {0.55, 0.73, 0.95}, RED = {0.88, 0.11, 0.14};

/* Where a run trains beyond this computer (all strings owned; hosts NULL: locally). */
struct cluster_opts {
    char *hosts, *ssh_config, *remote_nnlab;
    gboolean accept_new, bf16;
    int heartbeat_s, max_restarts;
};

struct train_job {
    NlWindow *win; /* a reference, for the idle callbacks */
    char *db_path, *dataset, *model, *spec, *run_name;
    char *init_run;      /* weights to start from, or NULL */
    char *init_file;     /* a .safetensors file to start from, or NULL */
    char **frozen;       /* layers trained frozen, NULL-terminated */
    char *resume;        /* a run to continue instead of a new one, or NULL */
    gboolean fresh_head; /* the head keeps its fresh initialisation (--replace-head) */
    struct cluster_opts cl;
    struct nl_train_opts o;
    struct feed feed;
    gint stop;
    volatile sig_atomic_t cstop; /* the same, for nl_cluster_train while it starts workers */
    struct nl_store *store;      /* the thread's own connection */
    int64_t run_id;
    /* Filled by the thread before the done callback. */
    int rc;
    struct nl_error err;
    struct nl_train_result res;
    char run[128];
    char *workers; /* a cluster run's per-worker totals, one line each, or NULL */
};

struct train_page {
    NlWindow *win;
    GtkWidget *what, *form, *where, *start, *stop, *start_reason, *charts, *progress;
    GtkWidget *stat_epoch, *stat_loss, *stat_acc, *stat_ips, *stat_eta, *stat_ips_title;
    GtkWidget *loss_chart, *acc_chart, *ips_chart;
    GtkAdjustment *epochs, *batch, *lr, *momentum, *threads, *seed;
    GtkWidget *optim, *schedule, *run_name, *momentum_spin;
    GtkWidget *cluster_form, *hosts, *ssh_config, *remote_nnlab, *accept_new, *bf16, *check_hosts;
    GtkAdjustment *heartbeat, *max_restarts;
    GtkWidget *host_report;
    guint check_generation;
    gboolean checking;
    int checks_done;
    GString *report_text; /* the last report, for tests */

    struct train_job *job; /* the running job, or NULL */
    GThread *thread;
    guint tick;
    gboolean mapped;
    struct feed_point *pulled; /* (PULL_MAX) */

    /* Chart data: per step (x in epochs), and per epoch. */
    GArray *step_x, *step_loss, *step_acc, *step_ips;
    GArray *ep_x, *ep_acc, *ep_val;
    int nworkers; /* of the run shown: 0 for a local run */
    char *worker_names[FEED_MAX_WORKERS];
    GArray *step_worker[FEED_MAX_WORKERS]; /* images/s, aligned with step_x; NAN: no report */
    double *smooth;                        /* scratch for the smoothed loss */
    guint smooth_cap;
    long points;
    int finished;
    struct feed_point last;
    /* The run's recoveries: x on the charts' axis, the chart's label and the line under the
     * hosts (both owned), in order. */
    GArray *ev_x;
    GPtrArray *ev_labels, *ev_lines;
    struct feed_event *pulled_events; /* (FEED_EVENTS) */
    int recoveries;                   /* since the window opened, for tests */
    char *resumed_name;               /* the run name the form shows for a resumed run */
    /* The last text a number field refused ("Learning rate: “fast” is not a number"), the
     * field (marked with the error class) and whether an update refused one just now. */
    char *field_error;
    GtkWidget *field_error_spin;
    gboolean field_refused;
    GPtrArray *spins; /* the number fields */
};

/* A one-off event from the training thread, owned by its idle callback. */
struct train_msg {
    struct train_page *page;
    struct train_job *job;
    enum { MSG_STARTED, MSG_EPOCH, MSG_RECOVERY, MSG_DONE } kind;
    struct feed_point point;
    char text[256];
};

static gboolean on_msg(gpointer data);

static void post(struct train_page *p, struct train_job *j, int kind, const struct feed_point *pt,
                 const char *text)
{
    struct train_msg *m = g_new0(struct train_msg, 1);
    m->page = p;
    m->job = j;
    m->kind = kind;
    if (pt)
        m->point = *pt;
    if (text)
        g_strlcpy(m->text, text, sizeof m->text);
    g_idle_add(on_msg, m);
}

static void cluster_opts_clear(struct cluster_opts *c)
{
    g_free(c->hosts);
    g_free(c->ssh_config);
    g_free(c->remote_nnlab);
    memset(c, 0, sizeof *c);
}

static void job_free(struct train_job *j)
{
    if (!j)
        return;
    feed_release(&j->feed);
    cluster_opts_clear(&j->cl);
    g_free(j->init_file);
    g_free(j->resume);
    g_free(j->workers);
    g_free(j->db_path);
    g_free(j->dataset);
    g_free(j->model);
    g_free(j->spec);
    g_free(j->run_name);
    g_free(j->init_run);
    g_strfreev(j->frozen);
    g_object_unref(j->win);
    g_free(j);
}

/* ---- The training thread ---- */

struct hook_ud {
    struct train_page *page;
    struct train_job *job;
};

/* The display of the session's events (core/session.c records them): the charts' feed, and
 * one-off messages to the main loop. */
static int on_event(void *ud, const struct nl_event *ev)
{
    struct hook_ud *h = ud;
    struct train_job *j = h->job;
    struct feed_point pt = {
        .epoch = ev->epoch,
        .epochs = ev->epochs,
        .iter = ev->iter,
        .iters = ev->iters,
        .loss = ev->loss,
        .accuracy = ev->accuracy,
        .val_loss = ev->val_loss,
        .val_accuracy = ev->val_accuracy,
        .images_per_second = ev->images_per_second,
        .eta_seconds = ev->eta_seconds,
        .lr = ev->lr,
        .seconds = ev->seconds,
    };
    if (ev->kind == NL_EVENT_ITER) {
        pt.kind = FEED_ITER;
        pt.nworkers = MIN(ev->nworkers, FEED_MAX_WORKERS);
        for (int i = 0; i < pt.nworkers; i++) {
            const struct nl_worker_metrics *w = &ev->workers[i];
            const double busy = w->compute_seconds + w->comm_seconds;
            /* A step that gave a worker no samples (the last, short one) has no rate. */
            pt.worker_ips[i] = busy > 0 && w->samples > 0 ? (double)w->samples / busy : NAN;
        }
        feed_push(&j->feed, &pt);
    } else if (ev->kind == NL_EVENT_RECOVERY && ev->recovery) {
        const struct nl_recovery *r = ev->recovery;
        struct feed_event e = {
            .x = ev->iters > 0 ? (ev->epoch - 1) + (double)ev->iter / ev->iters : ev->epoch - 1,
            .step = r->step,
            .restarts = r->restarts,
            .max_restarts = r->max_restarts,
            .workers = r->workers,
        };
        g_strlcpy(e.host, r->host ? r->host : "", sizeof e.host);
        g_strlcpy(e.what, r->what ? r->what : "", sizeof e.what);
        g_strlcpy(e.action, r->action ? r->action : "", sizeof e.action);
        feed_push_event(&j->feed, &e);
        /* Shown at once, even while the charts' timer is off (another page on screen). */
        post(h->page, j, MSG_RECOVERY, NULL, NULL);
    } else if (ev->kind == NL_EVENT_EPOCH) {
        pt.kind = FEED_EPOCH;
        post(h->page, j, MSG_EPOCH, &pt, NULL);
    }
    return g_atomic_int_get(&j->stop);
}

static void put_gstring(void *ud, const char *p, size_t n)
{
    g_string_append_len(ud, p, (gssize)n);
}

static void json_string(GString *s, const char *v)
{
    nl_json_write(put_gstring, s, v);
}

/* The optimizer list is in the order of enum nl_optim_kind. */
static enum nl_optim_kind selected_optim(const struct train_page *p)
{
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->optim));
    return i <= NL_OPTIM_ADAGRAD ? (enum nl_optim_kind)i : NL_OPTIM_SGD;
}

static gboolean takes_momentum(enum nl_optim_kind kind)
{
    return kind == NL_OPTIM_SGD || kind == NL_OPTIM_RMSPROP;
}

/* What the window records in a run's settings beside the core's (nl_run_settings_format, so that
 * the command line and the window resume it alike): where its weights started and, for a cluster
 * run, its hosts. A JSON object; NULL when there is nothing to add. */
static char *settings_extra(const struct train_job *j)
{
    if (!j->init_run && !j->init_file && !j->cl.hosts)
        return NULL;
    GString *s = g_string_new("{");
    if (j->init_run || j->init_file) {
        g_string_append(s, "\"init\":");
        json_string(s, j->init_run ? j->init_run : j->init_file);
    }
    if (j->cl.hosts) {
        g_string_append(s, s->len > 1 ? ",\"hosts\":" : "\"hosts\":");
        json_string(s, j->cl.hosts);
    }
    g_string_append_c(s, '}');
    return g_string_free(s, FALSE);
}

/* Starts m from a past run's weights where layers match, or from a safetensors file's tensors
 * where names and shapes match, and freezes the chosen layers. */
static int prepare_model(struct train_job *j, struct nl_model *m, char *note, size_t size)
{
    note[0] = 0;
    if (j->init_run) {
        struct nl_model *src = NULL;
        int rc = finetune_source(j->store, j->init_run, 1, &src, &j->err);
        if (rc < 0)
            return rc;
        int *from = g_new(int, (size_t)m->nlayers);
        int matched = finetune_match(m, src, from);
        const int head = nl_model_head(m);
        if (j->fresh_head && head >= 0 && from[head] >= 0) {
            from[head] = -1;
            matched--;
        }
        finetune_copy(m, src, from);
        g_snprintf(note, size, "; %d layers from “%s”", matched, j->init_run);
        g_free(from);
        nl_model_free(src);
    } else if (j->init_file) {
        struct nl_safetensors_report rep = {0};
        const int head = nl_model_head(m);
        if (j->fresh_head && head >= 0)
            m->layers[head].fresh = 1;
        int rc = nl_safetensors_load(m, j->init_file, 1, NULL, NULL, &rep, &j->err);
        if (head >= 0)
            m->layers[head].fresh = 0;
        if (rc < 0)
            return rc;
        char *base = g_path_get_basename(j->init_file);
        g_snprintf(note, size, "; %d tensors from %s", rep.loaded, base);
        g_free(base);
    }
    /* Freezing lays the flat buffer out again: the trainable layers first, so that only they
     * reach the optimizer. */
    int nfrozen = j->frozen ? (int)g_strv_length(j->frozen) : 0;
    if (nfrozen == 0)
        return 0;
    return nl_model_freeze(m, (const char *const *)j->frozen, nfrozen, NULL, &j->err);
}

#if NNLAB_HAVE_SSH
static void worker_log(void *ud, const char *host, const char *line)
{
    g_message("%s: %s", host, line);
}
#endif

/* Trains the session's run on the job's hosts as `nnlab train --hosts` does. */
static int train_cluster(struct train_job *j, struct nl_session *s,
                         const struct nl_train_hooks *hooks)
{
#if NNLAB_HAVE_SSH
    struct nl_host *hosts = NULL;
    int n = 0;
    struct nl_cluster_opts co = {
        .ssh = {.config = j->cl.ssh_config,
                .accept_new = j->cl.accept_new,
                .remote_nnlab = j->cl.remote_nnlab,
                .version = "nnlab " NNLAB_VERSION,
                .timeout_ms = 30000},
        .bf16 = s->opts.bf16, /* the form's for a new run, the run's own when resumed */
        .stop = &j->cstop,
        .heartbeat_ms = j->cl.heartbeat_s * 1000,
        .max_restarts = j->cl.max_restarts,
        .log = worker_log,
    };
    int rc = nl_hosts_parse(j->cl.hosts, &hosts, &n, &j->err);
    if (rc < 0)
        return rc;
    struct nl_worker_metrics *stats = nl_calloc((size_t)n, sizeof *stats);
    rc = stats ? nl_cluster_train(hosts, n, &co, s->model, s->data, &s->opts, hooks, &s->res, stats,
                                  &j->err)
               : nl_error_set(&j->err, NL_ENOMEM, "out of memory");
    if (rc == 0 && stats) {
        /* Each worker's share of the work, as the command line's done line gives it. */
        GString *w = g_string_new(NULL);
        for (int i = 0; i < n; i++) {
            const double busy = stats[i].compute_seconds + stats[i].comm_seconds;
            g_string_append_printf(
                w, "%s%s: %.0f images/s, %.0f%% communicating, %.1f MB sent", i ? "\n" : "",
                hosts[i].name, busy > 0 ? stats[i].samples / busy : 0.0,
                busy > 0 ? 100.0 * stats[i].comm_seconds / busy : 0.0, stats[i].bytes_sent / 1e6);
        }
        j->workers = g_string_free(w, FALSE);
    }
    nl_free(stats);
    nl_free(hosts);
    return rc;
#else
    (void)s;
    (void)hooks;
    return nl_error_set(&j->err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
#endif
}

/* Trains the session's run, locally or on the job's hosts. */
static int train_run(struct hook_ud *h, struct nl_session *s)
{
    struct nl_train_hooks hooks = nl_session_hooks(s, on_event, h);
    if (s->cluster)
        return train_cluster(h->job, s, &hooks);
    struct nl_error terr = {0};
    int rc = nl_train(s->model, s->data, &s->opts, &hooks, &s->res, &terr);
    h->job->err = terr;
    return rc;
}

/* A new run: the model of the model page on the selected dataset. */
static int train_new(struct hook_ud *h, struct nl_session **out)
{
    struct train_job *j = h->job;
    struct nl_spec *spec = NULL;
    struct nl_dataset *d = NULL;
    struct nl_model *m = NULL;
    char note[192] = "";
    int rc = nl_dataset_load(j->store, j->dataset, &d, &j->err);
    if (rc == 0)
        rc = nl_spec_parse(&spec, j->spec, j->model, NULL, NULL, &j->err);
    if (rc == 0) {
        spec->vocab = d->nvocab;
        rc = nl_model_build(&m, spec, d->shape, d->nclasses, &j->err);
    }
    nl_spec_free(spec);
    if (rc == 0) {
        nl_model_init_params(m, j->o.seed);
        rc = prepare_model(j, m, note, sizeof note);
    }
    if (rc < 0) {
        nl_model_free(m);
        nl_dataset_free(d);
        return rc;
    }
    char *extra = settings_extra(j);
    const struct nl_session_new new = {
        .name = j->run_name,
        .dataset = j->dataset,
        .model = j->model,
        .cluster = j->cl.hosts != NULL,
        .settings_extra = extra,
    };
    rc = nl_session_start(j->store, &new, m, d, &j->o, out, &j->err);
    g_free(extra);
    if (rc < 0)
        return rc;
    struct nl_session *s = *out;
    j->run_id = s->run.id;
    g_strlcpy(j->run, s->run.name, sizeof j->run);
    char text[256];
    int nfrozen = j->frozen ? (int)g_strv_length(j->frozen) : 0;
    g_snprintf(text, sizeof text, "%s: %zu parameters, %u training samples%s%s", s->run.name,
               s->model->nparams, s->data->split[NL_TRAIN].n, note, nfrozen ? "; frozen: " : "");
    if (nfrozen) {
        char *names = g_strjoinv(", ", j->frozen);
        g_strlcat(text, names, sizeof text);
        g_free(names);
    }
    if (j->cl.hosts) {
        g_strlcat(text, "; on ", sizeof text);
        g_strlcat(text, j->cl.hosts, sizeof text);
    }
    post(h->page, j, MSG_STARTED, NULL, text);
    return train_run(h, s);
}

/* A stopped run continued from its latest checkpoint (nl_session_resume): locally, or on the
 * job's hosts for a cluster run. */
static int train_resume(struct hook_ud *h, struct nl_session **out)
{
    struct train_job *j = h->job;
    const struct nl_resume_request req = {
        .epochs = -1, .on_nan = -1, .checkpoint_every = -1, .on_hosts = j->cl.hosts != NULL};
    int rc = nl_session_resume(j->store, j->resume, &req, NULL, NULL, out, &j->err);
    if (rc < 0)
        return rc;
    struct nl_session *s = *out;
    j->run_id = s->run.id;
    g_strlcpy(j->run, s->run.name, sizeof j->run);
    j->o = s->opts;
    char text[256];
    g_snprintf(text, sizeof text, "%s: resumed after epoch %d, step %ld, to epoch %d%s%s",
               s->run.name, s->opts.resume->epoch, s->opts.resume->iteration, s->opts.epochs,
               s->cluster ? "; on " : "", s->cluster ? j->cl.hosts : "");
    post(h->page, j, MSG_STARTED, NULL, text);
    return train_run(h, s);
}

static gpointer train_thread(gpointer data)
{
    struct hook_ud *h = data;
    struct train_job *j = h->job;
    struct nl_session *s = NULL;

    int rc = nl_store_open(&j->store, j->db_path, &j->err);
    if (rc == 0)
        rc = j->resume ? train_resume(h, &s) : train_new(h, &s);
    if (s) {
        rc = nl_session_finish(s, rc, &j->err);
        j->res = s->res;
    }
    j->rc = rc;
    nl_session_free(s);
    nl_store_close(j->store);
    j->store = NULL;
    post(h->page, j, MSG_DONE, NULL, NULL);
    g_free(h);
    return NULL;
}

/* ---- The main loop's side ---- */

static void format_eta(char *buf, size_t size, double s)
{
    if (!isfinite(s) || s < 0)
        g_strlcpy(buf, "–", size);
    else if (s >= 3600)
        g_snprintf(buf, size, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60),
                   (int)fmod(s, 60));
    else
        g_snprintf(buf, size, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
}

static void set_stat(GtkWidget *l, const char *fmt, double v)
{
    char buf[64];
    if (isfinite(v))
        g_snprintf(buf, sizeof buf, fmt, v);
    else
        g_strlcpy(buf, "–", sizeof buf);
    gtk_label_set_text(GTK_LABEL(l), buf);
}

/* What a dataset's samples are called in rates: images, or samples for a CSV's rows. */
static const char *unit(struct train_page *p)
{
    const struct nl_dataset *d = p->win->data;
    return d && d->dtype == NL_F32 ? "samples" : "images";
}

/* The rate's caption; its tooltip says over what it is measured (the caption stays short: the
 * figures above the charts share their width). */
static void set_rate_title(struct train_page *p, gboolean whole_run)
{
    gtk_label_set_text(GTK_LABEL(p->stat_ips_title),
                       strcmp(unit(p), "samples") == 0 ? "Samples/s" : "Images/s");
    gtk_widget_set_tooltip_text(p->stat_ips_title, whole_run
                                                       ? "Over the whole run, as the Done line says"
                                                       : "Over the last steps");
    gtk_widget_set_tooltip_text(p->stat_ips, gtk_widget_get_tooltip_text(p->stat_ips_title));
}

static void show_point(struct train_page *p, const struct feed_point *pt)
{
    char buf[128];
    g_snprintf(buf, sizeof buf, "%d / %d", pt->epoch, pt->epochs);
    gtk_label_set_text(GTK_LABEL(p->stat_epoch), buf);
    set_stat(p->stat_loss, "%.4f", pt->loss);
    set_stat(p->stat_ips, "%.0f", pt->images_per_second);
    set_rate_title(p, FALSE);
    format_eta(buf, sizeof buf, pt->eta_seconds);
    gtk_label_set_text(GTK_LABEL(p->stat_eta), buf);
    if (pt->iters > 0) {
        double done = ((pt->epoch - 1) + (double)pt->iter / pt->iters) / pt->epochs;
        gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), CLAMP(done, 0, 1));
        g_snprintf(buf, sizeof buf, "Epoch %d of %d · step %ld of %ld · learning rate %.4g",
                   pt->epoch, pt->epochs, pt->iter, pt->iters, pt->lr);
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), buf);
    }
}

static void append(GArray *a, double v)
{
    g_array_append_val(a, v);
}

static void report_line(struct train_page *p, const char *text, gboolean error);
static void clear_report(struct train_page *p);

/* The run's recoveries from the feed: each a notice, a line under the hosts and a marker. */
static void pull_events(struct train_page *p)
{
    const int n = feed_pull_events(&p->job->feed, p->pulled_events, FEED_EVENTS);
    for (int i = 0; i < n; i++) {
        const struct feed_event *e = &p->pulled_events[i];
        GString *line = g_string_new(NULL);
        g_string_printf(line, "%s: %s; %s", e->host, e->what, e->action);
        if (strcmp(e->action, "restarted") == 0)
            g_string_append_printf(line, " (%d of %d)", e->restarts, e->max_restarts);
        g_string_append_printf(line, ", continuing from step %ld on %d worker%s", e->step,
                               e->workers, e->workers == 1 ? "" : "s");
        append(p->ev_x, e->x);
        g_ptr_array_add(p->ev_labels, g_strdup_printf("%s %s", e->host, e->action));
        report_line(p, line->str, TRUE);
        nl_window_notify(p->win, "%s", line->str);
        g_ptr_array_add(p->ev_lines, g_string_free(line, FALSE));
        p->recoveries++;
    }
    if (n > 0)
        gtk_widget_queue_draw(p->loss_chart);
}

/* Drains the feed into the chart arrays; returns the number of points taken. */
static int pull(struct train_page *p)
{
    if (!p->job)
        return 0;
    int total = 0, n;
    while ((n = feed_pull(&p->job->feed, p->pulled, PULL_MAX)) > 0) {
        for (int i = 0; i < n; i++) {
            const struct feed_point *pt = &p->pulled[i];
            double x = pt->iters > 0 ? (pt->epoch - 1) + (double)pt->iter / pt->iters : pt->epoch;
            append(p->step_x, x);
            append(p->step_loss, pt->loss);
            append(p->step_acc, pt->accuracy);
            append(p->step_ips, pt->images_per_second);
            for (int w = 0; w < p->nworkers; w++)
                append(p->step_worker[w], w < pt->nworkers ? pt->worker_ips[w] : NAN);
        }
        p->last = p->pulled[n - 1];
        total += n;
    }
    pull_events(p);
    if (total > 0) {
        p->points += total;
        show_point(p, &p->last);
        gtk_widget_queue_draw(p->loss_chart);
        gtk_widget_queue_draw(p->acc_chart);
        gtk_widget_queue_draw(p->ips_chart);
    }
    return total;
}

static gboolean tick(gpointer data)
{
    struct train_page *p = data;
    if (p->win->closed) {
        p->tick = 0;
        return G_SOURCE_REMOVE;
    }
    pull(p);
    return G_SOURCE_CONTINUE;
}

/* The timer runs only while a run is in progress and the charts are on screen. */
static void update_tick(struct train_page *p)
{
    gboolean want = p->job && p->mapped;
    if (want && !p->tick) {
        p->tick = g_timeout_add(100, tick, p);
        pull(p);
    } else if (!want && p->tick) {
        g_source_remove(p->tick);
        p->tick = 0;
    }
}

static void charts_mapped(GtkWidget *w, gpointer data)
{
    struct train_page *p = data;
    p->mapped = TRUE;
    update_tick(p);
}

static void charts_unmapped(GtkWidget *w, gpointer data)
{
    struct train_page *p = data;
    p->mapped = FALSE;
    update_tick(p);
}

/* The next run name after NAME that no run has: NAME-2, NAME-3, … (NAME-7 goes on to NAME-8). */
static char *free_run_name(struct nl_store *s, const char *name)
{
    const char *dash = strrchr(name, '-');
    char *end = NULL;
    long n = dash && dash[1] ? strtol(dash + 1, &end, 10) : 0;
    gboolean numbered = end && !*end && n > 0 && n < 1000000;
    char *base = numbered ? g_strndup(name, (gsize)(dash - name)) : g_strdup(name);
    char *next = NULL;
    for (long i = numbered ? n + 1 : 2;; i++) {
        next = g_strdup_printf("%s-%ld", base, i);
        struct nl_run_info info;
        struct nl_error err = {0};
        if (nl_run_get(s, next, &info, NULL, NULL, &err) < 0)
            break;
        g_free(next);
    }
    g_free(base);
    return next;
}

/* Why Start cannot start a run now (a sentence naming the window's own controls), or NULL. The
 * run name is checked against the store here, before a start clears anything. */
static char *start_refusal(struct train_page *p)
{
    if (p->job)
        return NULL;
    if (!p->win->data)
        return g_strdup("No dataset: import or select one on the Datasets page.");
    if (!p->win->model || !model_page_valid(p->win->model))
        return g_strdup("The model has an error: fix it on the Model page.");
    const char *name = gtk_editable_get_text(GTK_EDITABLE(p->run_name));
    if (name[0] && p->win->store) {
        struct nl_run_info info;
        struct nl_error err = {0};
        if (nl_run_get(p->win->store, name, &info, NULL, NULL, &err) == 0) {
            char *next = free_run_name(p->win->store, name);
            char *t = g_strdup_printf(
                "A run named “%s” exists: choose another name, such as “%s”, or clear the "
                "field for an automatic one.",
                name, next);
            g_free(next);
            return t;
        }
    }
    return NULL;
}

static void update_sensitivity(struct train_page *p)
{
    gboolean running = p->job != NULL;
    char *why = start_refusal(p);
    gboolean can = !running && !why;
    /* A refused number is said until the field takes a number again. */
    const char *said = why ? why : p->field_error;
    gtk_label_set_text(GTK_LABEL(p->start_reason), said ? said : "");
    gtk_widget_set_visible(p->start_reason, said != NULL);
    g_free(why);
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "train-start")), can);
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "train-stop")), running);
    gtk_widget_set_sensitive(p->form, !running);
    gtk_widget_set_sensitive(p->cluster_form, !running);
    if (!running && !p->checking)
        gtk_widget_set_sensitive(p->check_hosts, TRUE);
}

/* A resumed run's epochs before this session, on the accuracy chart. */
static void show_past_epochs(struct train_page *p, int64_t run)
{
    struct nl_run_epoch *ep = NULL;
    struct nl_error err = {0};
    int n = 0;
    if (nl_run_epochs(p->win->store, run, &ep, &n, &err) < 0)
        return;
    for (int i = 0; i < n; i++) {
        append(p->ep_x, ep[i].epoch);
        append(p->ep_acc, ep[i].train_accuracy);
        append(p->ep_val, ep[i].val_accuracy);
    }
    nl_free(ep);
    gtk_widget_queue_draw(p->acc_chart);
}

static gboolean on_msg(gpointer data)
{
    struct train_msg *m = data;
    struct train_page *p = m->page;
    struct train_job *j = m->job;

    if (p->win->closed || p->job != j) {
        /* The window went away and joined the thread: only the job is left to free. */
        if (m->kind == MSG_DONE)
            job_free(j);
        g_free(m);
        return G_SOURCE_REMOVE;
    }
    switch (m->kind) {
    case MSG_STARTED:
        gtk_label_set_text(GTK_LABEL(p->what), m->text);
        if (j->resume)
            show_past_epochs(p, j->run_id);
        runs_page_refresh(p->win->runs);
        break;
    case MSG_EPOCH:
        pull(p);
        append(p->ep_x, m->point.epoch);
        append(p->ep_acc, m->point.accuracy);
        append(p->ep_val, m->point.val_accuracy);
        set_stat(p->stat_acc, "%.2f%%", 100.0 * m->point.val_accuracy);
        gtk_widget_queue_draw(p->acc_chart);
        runs_page_refresh(p->win->runs);
        break;
    case MSG_RECOVERY:
        pull_events(p);
        break;
    case MSG_DONE: {
        g_thread_join(p->thread);
        p->thread = NULL;
        pull(p);
        p->job = NULL;
        update_tick(p);
        p->finished++;
        char buf[512];
        if (j->rc == 0) {
            if (isfinite(j->res.test_accuracy))
                g_snprintf(buf, sizeof buf, "Done: test accuracy %.2f%% · %.1f s · %.0f %s/s",
                           100.0 * j->res.test_accuracy, j->res.seconds, j->res.images_per_second,
                           unit(p));
            /* The figure above the charts agrees with this line: the whole run's. */
            if (isfinite(j->res.images_per_second) && j->res.images_per_second > 0) {
                set_stat(p->stat_ips, "%.0f", j->res.images_per_second);
                set_rate_title(p, TRUE);
            } else
                g_snprintf(buf, sizeof buf, "Done in %.1f s (no test split)", j->res.seconds);
            gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), 1.0);
            gtk_label_set_text(GTK_LABEL(p->stat_eta), "0:00");
            if (j->workers) {
                /* Under the hosts: what each did in this run. */
                clear_report(p);
                char *t = g_strdup_printf("Run “%s”:", j->run);
                report_line(p, t, FALSE);
                g_free(t);
                char **lines = g_strsplit(j->workers, "\n", -1);
                for (int i = 0; lines[i]; i++)
                    report_line(p, lines[i], FALSE);
                g_strfreev(lines);
                for (guint i = 0; i < p->ev_lines->len; i++)
                    report_line(p, g_ptr_array_index(p->ev_lines, i), TRUE);
            }
            nl_window_notify(p->win, "Run “%s” finished", j->run);
        } else if (j->rc == NL_ECANCELED) {
            g_snprintf(buf, sizeof buf, "Stopped; run “%s” keeps the epochs it finished", j->run);
        } else {
            g_snprintf(buf, sizeof buf, "Failed: %s", j->err.msg);
            nl_window_notify(p->win, "Training failed: %s", j->err.msg);
        }
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), buf);
        /* The form showed the resumed run's name; a new run needs another. */
        if (p->resumed_name &&
            strcmp(gtk_editable_get_text(GTK_EDITABLE(p->run_name)), p->resumed_name) == 0)
            gtk_editable_set_text(GTK_EDITABLE(p->run_name), "");
        g_clear_pointer(&p->resumed_name, g_free);
        /* A start that failed before its run existed leaves no "Starting…" behind. */
        if (j->rc < 0 && !j->run[0])
            train_page_dataset_changed(p);
        job_free(j);
        update_sensitivity(p);
        runs_page_refresh(p->win->runs);
        predict_page_refresh(p->win->predict);
        model_page_runs_changed(p->win->model);
        break;
    }
    }
    g_free(m);
    return G_SOURCE_REMOVE;
}

static void clear_charts(struct train_page *p)
{
    GArray *arrays[] = {p->step_x, p->step_loss, p->step_acc, p->step_ips,
                        p->ep_x,   p->ep_acc,    p->ep_val};
    for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++)
        g_array_set_size(arrays[i], 0);
    for (int w = 0; w < FEED_MAX_WORKERS; w++) {
        g_array_set_size(p->step_worker[w], 0);
        g_free(p->worker_names[w]);
        p->worker_names[w] = NULL;
    }
    p->nworkers = 0;
    p->points = 0;
    memset(&p->last, 0, sizeof p->last);
    g_array_set_size(p->ev_x, 0);
    g_ptr_array_set_size(p->ev_labels, 0);
    g_ptr_array_set_size(p->ev_lines, 0);
    gtk_widget_queue_draw(p->loss_chart);
    gtk_widget_queue_draw(p->acc_chart);
    gtk_widget_queue_draw(p->ips_chart);
}

/* The hosts field as a list for nl_hosts_parse ("a,b c" -> "a,b,c"), or NULL when empty. */
static char *hosts_list(struct train_page *p)
{
    const char *t = gtk_editable_get_text(GTK_EDITABLE(p->hosts));
    char **parts = g_strsplit_set(t, ", \t\n", -1);
    GString *s = g_string_new(NULL);
    for (int i = 0; parts[i]; i++) {
        if (!parts[i][0])
            continue;
        if (s->len)
            g_string_append_c(s, ',');
        g_string_append(s, parts[i]);
    }
    g_strfreev(parts);
    if (s->len == 0) {
        g_string_free(s, TRUE);
        return NULL;
    }
    return g_string_free(s, FALSE);
}

static char *entry_or_null(GtkWidget *e)
{
    const char *t = gtk_editable_get_text(GTK_EDITABLE(e));
    char *s = g_strstrip(g_strdup(t));
    if (!s[0]) {
        g_free(s);
        return NULL;
    }
    /* ~/ as a shell would say it. */
    if (s[0] == '~' && s[1] == '/') {
        char *full = g_build_filename(g_get_home_dir(), s + 2, NULL);
        g_free(s);
        return full;
    }
    return s;
}

/* The SSH side of the form. */
static void read_cluster_opts(struct train_page *p, struct cluster_opts *c)
{
    c->hosts = hosts_list(p);
    c->ssh_config = entry_or_null(p->ssh_config);
    c->remote_nnlab = entry_or_null(p->remote_nnlab);
    c->accept_new = gtk_check_button_get_active(GTK_CHECK_BUTTON(p->accept_new));
    c->bf16 = gtk_check_button_get_active(GTK_CHECK_BUTTON(p->bf16));
    c->heartbeat_s = (int)gtk_adjustment_get_value(p->heartbeat);
    c->max_restarts = (int)gtk_adjustment_get_value(p->max_restarts);
}

/* Names the workers of a cluster run for the chart's legend, from its host list. */
static int name_workers(struct train_page *p, const char *hosts, struct nl_error *err)
{
#if NNLAB_HAVE_SSH
    struct nl_host *list = NULL;
    int n = 0;
    if (nl_hosts_parse(hosts, &list, &n, err) < 0)
        return -1;
    p->nworkers = MIN(n, FEED_MAX_WORKERS);
    for (int i = 0; i < p->nworkers; i++) {
        int same = 0;
        for (int k = 0; k < i; k++)
            same += strcmp(list[k].name, list[i].name) == 0;
        p->worker_names[i] =
            same ? g_strdup_printf("%s #%d", list[i].name, same + 1) : g_strdup(list[i].name);
    }
    nl_free(list);
    return 0;
#else
    nl_error_set(err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
    return -1;
#endif
}

/* Starts the job's thread and turns the page to a run in progress. */
static void start_job(struct train_page *p, struct train_job *j)
{
    p->job = j;
    gtk_label_set_text(GTK_LABEL(p->what), "Starting…");
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), 0);
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress),
                              j->resume     ? "Loading the run's checkpoint…"
                              : j->cl.hosts ? "Starting the workers…"
                                            : "Loading the dataset…");
    gtk_label_set_text(GTK_LABEL(p->stat_acc), "–");
    struct hook_ud *h = g_new0(struct hook_ud, 1);
    h->page = p;
    h->job = j;
    p->thread = g_thread_new("nnlab-train", train_thread, h);
    /* Focus goes to Stop, not to a field of the form that turns insensitive. */
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "train-stop")), TRUE);
    gtk_widget_grab_focus(p->stop);
    update_sensitivity(p);
    update_tick(p);
    runs_page_refresh(p->win->runs);
}

static struct train_job *job_new(struct train_page *p)
{
    struct train_job *j = g_new0(struct train_job, 1);
    if (feed_init(&j->feed, FEED_CAP) < 0) {
        g_free(j);
        return NULL;
    }
    j->win = g_object_ref(p->win);
    j->db_path = g_strdup(p->win->db_path);
    return j;
}

static void spin_update(gpointer spin, gpointer data)
{
    gtk_spin_button_update(GTK_SPIN_BUTTON(spin));
}

/* Whether the hosts field parses, said into err when not (nothing of the page changes). */
static int hosts_valid(const char *hosts, struct nl_error *err)
{
#if NNLAB_HAVE_SSH
    struct nl_host *list = NULL;
    int n = 0;
    int rc = nl_hosts_parse(hosts, &list, &n, err);
    nl_free(list);
    return rc;
#else
    (void)hosts;
    return nl_error_set(err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
#endif
}

/* Starts a new run from the form. Everything that can be checked here (the numbers typed but
 * not yet taken, the dataset, the model, the run name, the optimizer, the hosts) is checked
 * before the last run's view is cleared; a refusal is said next to Start. */
static void train_start(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct train_page *p = data;
    if (p->job)
        return;
    /* Text typed into a number field counts only once taken (Ctrl+Return skips the focus-out
     * that takes it); a refused one stops the start. */
    p->field_refused = FALSE;
    g_ptr_array_foreach(p->spins, spin_update, NULL);
    char *why = start_refusal(p);
    if (why || p->field_refused) {
        g_free(why);
        update_sensitivity(p);
        gtk_widget_error_bell(p->start);
        return;
    }
    struct train_job *j = job_new(p);
    if (!j)
        return;
    j->dataset = g_strdup(p->win->data->name);
    j->model = g_strdup(model_page_name(p->win->model));
    j->spec = g_strdup(model_page_spec(p->win->model));
    j->init_run = g_strdup(model_page_init_run(p->win->model));
    j->init_file = g_strdup(model_page_init_file(p->win->model));
    j->frozen = g_strdupv((char **)model_page_frozen(p->win->model));
    j->fresh_head = model_page_fresh_head(p->win->model);
    const char *name = gtk_editable_get_text(GTK_EDITABLE(p->run_name));
    j->run_name = name[0] ? g_strdup(name) : NULL;
    read_cluster_opts(p, &j->cl);
    nl_train_defaults(&j->o);
    j->o.bf16 = j->cl.hosts && j->cl.bf16;
    j->o.epochs = (int)gtk_adjustment_get_value(p->epochs);
    j->o.batch = (int)gtk_adjustment_get_value(p->batch);
    j->o.threads = (int)gtk_adjustment_get_value(p->threads);
    j->o.seed = (uint64_t)gtk_adjustment_get_value(p->seed);
    nl_optim_defaults(&j->o.optim, selected_optim(p));
    j->o.optim.lr = (float)gtk_adjustment_get_value(p->lr);
    if (takes_momentum(j->o.optim.kind))
        j->o.optim.momentum = (float)gtk_adjustment_get_value(p->momentum);
    /* The list reads cosine, constant, plateau: each is a schedule's own text. */
    static const char *const schedules[] = {"cosine", "constant", "plateau"};
    guint sched = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->schedule));
    nl_schedule_parse(&j->o.schedule, schedules[sched < 3 ? sched : 0], NULL);
    struct nl_error err = {0};
    /* A mistake in the form is said before any run is recorded or the view cleared. */
    if (nl_optim_validate(&j->o.optim, &err) < 0 ||
        (j->cl.hosts && hosts_valid(j->cl.hosts, &err) < 0)) {
        nl_window_notify(p->win, "%s", err.msg);
        job_free(j);
        return;
    }
    clear_charts(p);
    if (j->cl.hosts)
        name_workers(p, j->cl.hosts, &err);
    start_job(p, j);
}

/* The "hosts" a run's settings name (the window records them), or NULL. */
static char *settings_hosts(const char *settings)
{
    struct nl_json_doc *doc = NULL;
    struct nl_error err = {0};
    char *hosts = NULL;
    if (nl_json_parse(&doc, settings, strlen(settings), "run settings", &err) == 0) {
        const struct nl_json *v = nl_json_get(nl_json_root(doc), "hosts");
        if (v && v->type == NL_JSON_STRING && v->string[0])
            hosts = g_strdup(v->string);
    }
    nl_json_free(doc);
    return hosts;
}

/* The form shows a resumed run's settings: what it trains with, not what the form last held. */
static void show_settings(struct train_page *p, const struct nl_train_opts *o, const char *name,
                          const char *hosts)
{
    gtk_adjustment_set_value(p->epochs, o->epochs);
    gtk_adjustment_set_value(p->batch, o->batch);
    gtk_adjustment_set_value(p->threads, o->threads > 0 ? o->threads : (int)g_get_num_processors());
    gtk_adjustment_set_value(p->seed, (double)o->seed);
    /* The optimizer first: choosing it sets its default rate. */
    gtk_drop_down_set_selected(GTK_DROP_DOWN(p->optim), (guint)o->optim.kind);
    gtk_adjustment_set_value(p->lr, o->optim.lr);
    gtk_adjustment_set_value(p->momentum, o->optim.momentum);
    const enum nl_schedule_kind k = o->schedule.kind;
    if (k == NL_SCHEDULE_COSINE || k == NL_SCHEDULE_CONSTANT || k == NL_SCHEDULE_PLATEAU)
        gtk_drop_down_set_selected(GTK_DROP_DOWN(p->schedule), k == NL_SCHEDULE_COSINE     ? 0
                                                               : k == NL_SCHEDULE_CONSTANT ? 1
                                                                                           : 2);
    gtk_editable_set_text(GTK_EDITABLE(p->run_name), name);
    if (hosts)
        gtk_editable_set_text(GTK_EDITABLE(p->hosts), hosts);
}

/* Continues a stopped run from its latest checkpoint (the runs page's Resume): a cluster run on
 * the hosts it recorded, with the form's SSH options. */
void train_page_resume(struct train_page *p, const char *run)
{
    if (p->job) {
        nl_window_notify(p->win, "A run is in progress; stop it first");
        return;
    }
    struct nl_run_info info;
    struct nl_train_opts o;
    struct nl_error err = {0};
    char *settings = NULL;
    int cluster = 0;
    if (nl_run_get(p->win->store, run, &info, NULL, &settings, &err) < 0 ||
        nl_run_settings_parse(settings, info.name, &o, NULL, &cluster, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        nl_free(settings);
        return;
    }
    char *hosts = cluster ? settings_hosts(settings) : NULL;
    nl_free(settings);
    /* A cluster run the command line started names no hosts: those of the form, if any. */
    char *field = hosts_list(p);
    if (cluster && !hosts && !field) {
        nl_window_notify(p->win,
                         "“%s” trained on hosts it did not record: name them under Hosts, then "
                         "resume it",
                         info.name);
        return;
    }
    g_free(field);
    struct train_job *j = job_new(p);
    if (!j) {
        g_free(hosts);
        return;
    }
    j->resume = g_strdup(info.name);
    show_settings(p, &o, info.name, cluster ? hosts : "");
    g_free(hosts);
    g_free(p->resumed_name);
    p->resumed_name = g_strdup(info.name);
    read_cluster_opts(p, &j->cl);
    clear_charts(p);
    if (j->cl.hosts && name_workers(p, j->cl.hosts, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        job_free(j);
        return;
    }
    gtk_widget_activate_action(GTK_WIDGET(p->win), "win.show-page", "s", "train");
    start_job(p, j);
}

void train_page_recoveries(struct train_page *p, int *count, int *markers, const char **last)
{
    *count = p->recoveries;
    *markers = (int)p->ev_x->len;
    *last = p->ev_lines->len ? g_ptr_array_index(p->ev_lines, p->ev_lines->len - 1) : NULL;
}

void train_page_form(struct train_page *p, int *epochs, const char **hosts, const char **name)
{
    *epochs = (int)gtk_adjustment_get_value(p->epochs);
    *hosts = gtk_editable_get_text(GTK_EDITABLE(p->hosts));
    *name = gtk_editable_get_text(GTK_EDITABLE(p->run_name));
}

/* ---- Check Hosts: nl_host_check for each host on a worker thread ---- */

struct host_result {
    char name[256];
    int rc;
    char msg[512];
#if NNLAB_HAVE_SSH
    struct nl_host_report r;
#endif
};

/* Owned by its GTask. */
struct check_job {
    struct cluster_opts cl;
    guint generation;
    struct host_result *res;
    int n;
    struct nl_error err; /* the host list's own mistake */
};

static void check_job_free(gpointer data)
{
    struct check_job *c = data;
    cluster_opts_clear(&c->cl);
    g_free(c->res);
    g_free(c);
}

static void check_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
    struct check_job *c = data;
#if NNLAB_HAVE_SSH
    struct nl_host *hosts = NULL;
    if (nl_hosts_parse(c->cl.hosts, &hosts, &c->n, &c->err) == 0) {
        struct nl_ssh_opts so = {.config = c->cl.ssh_config,
                                 .accept_new = c->cl.accept_new,
                                 .remote_nnlab = c->cl.remote_nnlab,
                                 .version = "nnlab " NNLAB_VERSION,
                                 .timeout_ms = 15000};
        c->res = g_new0(struct host_result, (size_t)c->n);
        for (int i = 0; i < c->n; i++) {
            struct nl_error err = {0};
            g_strlcpy(c->res[i].name, hosts[i].name, sizeof c->res[i].name);
            c->res[i].rc = nl_host_check(&hosts[i], &so, &c->res[i].r, &err);
            g_strlcpy(c->res[i].msg, err.msg, sizeof c->res[i].msg);
        }
        nl_free(hosts);
    }
#else
    nl_error_set(&c->err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
#endif
    g_task_return_boolean(task, TRUE);
}

static void report_line(struct train_page *p, const char *text, gboolean error)
{
    GtkWidget *l = gtk_label_new(text);
    gtk_label_set_xalign(GTK_LABEL(l), 0);
    gtk_label_set_wrap(GTK_LABEL(l), TRUE);
    gtk_label_set_selectable(GTK_LABEL(l), TRUE);
    gtk_label_set_max_width_chars(GTK_LABEL(l), 36);
    gtk_widget_add_css_class(l, "caption");
    if (error)
        gtk_widget_add_css_class(l, "nl-error");
    gtk_box_append(GTK_BOX(p->host_report), l);
    g_string_append(p->report_text, text);
    g_string_append_c(p->report_text, '\n');
}

static void clear_report(struct train_page *p)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->host_report)))
        gtk_box_remove(GTK_BOX(p->host_report), child);
    g_string_truncate(p->report_text, 0);
}

static void check_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlWindow *w = NL_WINDOW(source);
    struct check_job *c = g_task_get_task_data(G_TASK(res));
    struct train_page *p = w->train;
    if (w->closed || !p || c->generation != p->check_generation)
        return;
    p->checking = FALSE;
    gtk_widget_set_sensitive(p->check_hosts, TRUE);
    clear_report(p);
    if (!c->res)
        report_line(p, c->err.msg, TRUE);
    for (int i = 0; c->res && i < c->n; i++) {
        const struct host_result *h = &c->res[i];
        char *t;
        if (h->rc < 0) {
            t = g_strdup_printf("✗ %s", h->msg);
        } else {
#if NNLAB_HAVE_SSH
            const struct nl_host_report *r = &h->r;
            t = g_strdup_printf(
                "✓ %s (%s@%s:%d): %s · %d cores · %.1f GiB · %s", h->name, r->user, r->address,
                r->port, r->remote_version[0] ? r->remote_version : "no nnlab", r->cores,
                r->mem_kb / 1048576.0, r->would_upload ? "this nnlab would be uploaded" : "ready");
#else
            t = g_strdup(h->name);
#endif
        }
        report_line(p, t, h->rc < 0);
        g_free(t);
    }
    p->checks_done++;
}

/* win.train-check-hosts */
static void check_hosts(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct train_page *p = data;
    struct check_job *c = g_new0(struct check_job, 1);
    read_cluster_opts(p, &c->cl);
    clear_report(p);
    if (!c->cl.hosts) {
        report_line(p, "Name the hosts first (e.g. node1:4,node2:4); empty trains here.", TRUE);
        check_job_free(c);
        p->checks_done++;
        return;
    }
    c->generation = ++p->check_generation;
    p->checking = TRUE;
    gtk_widget_set_sensitive(p->check_hosts, FALSE);
    char *t = g_strdup_printf("Connecting to %s…", c->cl.hosts);
    report_line(p, t, FALSE);
    g_free(t);
    GTask *task = g_task_new(p->win, NULL, check_done, NULL);
    g_task_set_task_data(task, c, check_job_free);
    g_task_run_in_thread(task, check_thread);
    g_object_unref(task);
}

void train_page_hosts_report(struct train_page *p, int *checks_done, const char **text)
{
    *checks_done = p->checks_done;
    *text = p->report_text->str;
}

/* The place line under the form follows the hosts field. */
static void hosts_changed(GtkEditable *e, gpointer data)
{
    struct train_page *p = data;
    char *hosts = hosts_list(p);
    char *where = hosts ? g_strdup_printf("Trains on %s, one worker each (threads: each host's "
                                          "cores or :CORES); validation and test run here.",
                                          hosts)
                        : g_strdup_printf("Trains on this computer: %d cores. Every epoch is "
                                          "checkpointed and recorded as a run.",
                                          (int)g_get_num_processors());
    gtk_label_set_text(GTK_LABEL(p->where), where);
    g_free(where);
    g_free(hosts);
}

static void train_stop(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct train_page *p = data;
    if (p->job) {
        g_atomic_int_set(&p->job->stop, 1);
        p->job->cstop = 1;
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), "Stopping…");
    }
}

/* win.train-option (key, value): sets a field of the form, for tests and scripts. */
static void train_option(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct train_page *p = data;
    const char *key, *value;
    g_variant_get(param, "(&s&s)", &key, &value);
    GtkAdjustment *adj = strcmp(key, "epochs") == 0     ? p->epochs
                         : strcmp(key, "batch") == 0    ? p->batch
                         : strcmp(key, "lr") == 0       ? p->lr
                         : strcmp(key, "momentum") == 0 ? p->momentum
                         : strcmp(key, "threads") == 0  ? p->threads
                         : strcmp(key, "seed") == 0     ? p->seed
                                                        : NULL;
    if (adj)
        gtk_adjustment_set_value(adj, g_ascii_strtod(value, NULL));
    else if (strcmp(key, "optim") == 0) {
        enum nl_optim_kind kind;
        if (nl_optim_kind_parse(&kind, value, NULL) == 0)
            gtk_drop_down_set_selected(GTK_DROP_DOWN(p->optim), (guint)kind);
    } else if (strcmp(key, "schedule") == 0)
        gtk_drop_down_set_selected(GTK_DROP_DOWN(p->schedule), strcmp(value, "constant") == 0  ? 1
                                                               : strcmp(value, "plateau") == 0 ? 2
                                                                                               : 0);
    else if (strcmp(key, "name") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->run_name), value);
    else if (strcmp(key, "hosts") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->hosts), value);
    else if (strcmp(key, "ssh-config") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->ssh_config), value);
    else if (strcmp(key, "remote-nnlab") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->remote_nnlab), value);
    else if (strcmp(key, "accept-new-host-keys") == 0)
        gtk_check_button_set_active(GTK_CHECK_BUTTON(p->accept_new), strcmp(value, "true") == 0);
    else if (strcmp(key, "heartbeat-timeout") == 0)
        gtk_adjustment_set_value(p->heartbeat, g_ascii_strtod(value, NULL));
    else if (strcmp(key, "max-restarts") == 0)
        gtk_adjustment_set_value(p->max_restarts, g_ascii_strtod(value, NULL));
    else if (strcmp(key, "compress") == 0)
        gtk_check_button_set_active(GTK_CHECK_BUTTON(p->bf16), strcmp(value, "bf16") == 0);
    else
        nl_window_notify(p->win, "No training option “%s”", key);
}

/* A change of optimizer brings its default learning rate, as the command line does when --lr
 * is not given; momentum applies to SGD only. */
static void optim_changed(GObject *dd, GParamSpec *ps, gpointer data)
{
    struct train_page *p = data;
    struct nl_optim o;
    nl_optim_defaults(&o, selected_optim(p));
    gtk_adjustment_set_value(p->lr, o.lr);
    gtk_widget_set_sensitive(p->momentum_spin, takes_momentum(o.kind));
}

/* A number field's text as its value. What is not a number, or is outside the field's range,
 * is refused: the field keeps its value (update-policy if-valid), is marked with the error
 * class, and the reason shows next to Start until the field takes a number again. */
static gint spin_input(GtkSpinButton *spin, double *value, gpointer data)
{
    struct train_page *p = data;
    const char *field = g_object_get_data(G_OBJECT(spin), "nl-field");
    char *text = g_strstrip(g_strdup(gtk_editable_get_text(GTK_EDITABLE(spin))));
    char *end = NULL;
    double v = g_ascii_strtod(text, &end);
    GtkAdjustment *adj = gtk_spin_button_get_adjustment(spin);
    const double lo = gtk_adjustment_get_lower(adj), hi = gtk_adjustment_get_upper(adj);
    char *why = NULL;
    char kept[G_ASCII_DTOSTR_BUF_SIZE], slo[G_ASCII_DTOSTR_BUF_SIZE], shi[G_ASCII_DTOSTR_BUF_SIZE];
    g_ascii_formatd(kept, sizeof kept, "%g", gtk_adjustment_get_value(adj));
    if (!text[0] || end == text || *end || !isfinite(v)) {
        why = g_strdup_printf("%s: “%s” is not a number; it stays %s.", field, text, kept);
    } else if (v < lo || v > hi) {
        g_ascii_formatd(slo, sizeof slo, "%g", lo);
        g_ascii_formatd(shi, sizeof shi, "%g", hi);
        why = g_strdup_printf("%s: %s is outside %s to %s; it stays %s.", field, text, slo, shi,
                              kept);
    }
    g_free(text);
    if (why) {
        g_free(p->field_error);
        p->field_error = why;
        if (p->field_error_spin)
            gtk_widget_remove_css_class(p->field_error_spin, "error");
        p->field_error_spin = GTK_WIDGET(spin);
        gtk_widget_add_css_class(GTK_WIDGET(spin), "error");
        p->field_refused = TRUE;
        update_sensitivity(p);
        return GTK_INPUT_ERROR;
    }
    if (p->field_error_spin == GTK_WIDGET(spin)) {
        gtk_widget_remove_css_class(GTK_WIDGET(spin), "error");
        p->field_error_spin = NULL;
        g_clear_pointer(&p->field_error, g_free);
        update_sensitivity(p);
    }
    *value = v;
    return TRUE;
}

static void run_name_changed(GtkEditable *e, gpointer data)
{
    update_sensitivity(data);
}

const char *train_page_start_reason(struct train_page *p)
{
    return gtk_widget_get_visible(p->start_reason) ? gtk_label_get_text(GTK_LABEL(p->start_reason))
                                                   : NULL;
}

/* ---- Charts ---- */

static struct chart base_chart(GtkWidget *area, const char *title, const char *xlabel)
{
    struct chart c = {.title = title, .xlabel = xlabel, .fg = nl_window_fg(area)};
    c.ymin = c.ymax = c.xmin = c.xmax = NAN;
    c.empty = "Press Start to train";
    return c;
}

static void draw_loss(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct train_page *p = data;
    struct chart c = base_chart(GTK_WIDGET(area), "Loss per step", "epoch");
    const guint n = p->step_x->len;
    if (n > p->smooth_cap) {
        p->smooth_cap = MAX(n, 2 * p->smooth_cap);
        p->smooth = g_renew(double, p->smooth, p->smooth_cap);
    }
    if (n)
        chart_smooth(p->smooth, (double *)(void *)p->step_loss->data, (int)n, 0.95);
    c.nseries = 2;
    c.series[0] = (struct chart_series){.label = "raw",
                                        .x = (double *)(void *)p->step_x->data,
                                        .y = (double *)(void *)p->step_loss->data,
                                        .n = (int)n,
                                        .color = LIGHT_BLUE,
                                        .width = 1.0};
    c.series[1] = (struct chart_series){.label = "smoothed",
                                        .x = (double *)(void *)p->step_x->data,
                                        .y = p->smooth,
                                        .n = (int)n,
                                        .color = BLUE,
                                        .width = 2.0};
    c.nevents = (int)p->ev_x->len;
    c.event_x = (double *)(void *)p->ev_x->data;
    c.event_labels = (const char *const *)p->ev_labels->pdata;
    c.event_color = RED;
    c.xmin = 0;
    if (p->last.epochs > 0)
        c.xmax = p->last.epochs;
    chart_draw(cr, w, h, &c);
}

static void draw_acc(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct train_page *p = data;
    struct chart c = base_chart(GTK_WIDGET(area), "Accuracy", "epoch");
    c.ymin = 0;
    c.ymax = 1;
    c.y_percent = 1;
    c.nseries = 3;
    c.series[0] = (struct chart_series){.label = "train (running)",
                                        .x = (double *)(void *)p->step_x->data,
                                        .y = (double *)(void *)p->step_acc->data,
                                        .n = (int)p->step_x->len,
                                        .color = LIGHT_BLUE,
                                        .width = 1.0};
    c.series[1] = (struct chart_series){.label = "train",
                                        .x = (double *)(void *)p->ep_x->data,
                                        .y = (double *)(void *)p->ep_acc->data,
                                        .n = (int)p->ep_x->len,
                                        .color = BLUE,
                                        .width = 2.0,
                                        .markers = 1};
    c.series[2] = (struct chart_series){.label = "validation",
                                        .x = (double *)(void *)p->ep_x->data,
                                        .y = (double *)(void *)p->ep_val->data,
                                        .n = (int)p->ep_x->len,
                                        .color = ORANGE,
                                        .width = 2.0,
                                        .markers = 1};
    c.xmin = 0;
    if (p->last.epochs > 0)
        c.xmax = p->last.epochs;
    chart_draw(cr, w, h, &c);
}

static void draw_ips(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct train_page *p = data;
    const double *workers[FEED_MAX_WORKERS];
    for (int i = 0; i < p->nworkers; i++)
        workers[i] = (double *)(void *)p->step_worker[i]->data;
    struct chart_throughput t = {
        .title = p->nworkers > 0 ? (strcmp(unit(p), "samples") == 0 ? "Samples/s, per worker"
                                                                    : "Images/s, per worker")
                 : strcmp(unit(p), "samples") == 0 ? "Samples per second"
                                                   : "Images per second",
        .empty = "Press Start to train",
        .x = (double *)(void *)p->step_x->data,
        .total = (double *)(void *)p->step_ips->data,
        .n = (int)p->step_x->len,
        .nworkers = MIN(p->nworkers, CHART_MAX_WORKERS),
        .hosts = (const char *const *)p->worker_names,
        .workers = workers,
        .xmax = p->last.epochs > 0 ? p->last.epochs : NAN,
        .fg = nl_window_fg(GTK_WIDGET(area)),
    };
    chart_throughput_draw(cr, w, h, &t);
}

/* ---- The page ---- */

void train_page_dataset_changed(struct train_page *p)
{
    const struct nl_dataset *d = p->win->data;
    if (!p->job) {
        char *t = d ? g_strdup_printf("%s · %u training samples, %u validation", d->name,
                                      d->split[NL_TRAIN].n, d->split[NL_VAL].n)
                    : g_strdup("Select a dataset on the Datasets page first.");
        gtk_label_set_text(GTK_LABEL(p->what), t);
        g_free(t);
        set_rate_title(p, FALSE);
    }
    update_sensitivity(p);
}

static void page_mapped(GtkWidget *w, gpointer data)
{
    struct train_page *p = data;
    if (!p->job)
        train_page_dataset_changed(p);
}

gboolean train_page_running(struct train_page *p)
{
    return p->job != NULL;
}

void train_page_stop_and_wait(struct train_page *p)
{
    if (!p || !p->thread)
        return;
    g_atomic_int_set(&p->job->stop, 1);
    p->job->cstop = 1;
    g_thread_join(p->thread);
    p->thread = NULL;
    /* The done message is still queued; with the window closed it frees the job. Before then
     * the page forgets it. */
    p->job = NULL;
    if (p->tick) {
        g_source_remove(p->tick);
        p->tick = 0;
    }
}

int train_page_worker_points(struct train_page *p, int worker)
{
    if (worker < 0 || worker >= p->nworkers)
        return 0;
    int n = 0;
    const GArray *a = p->step_worker[worker];
    for (guint i = 0; i < a->len; i++)
        n += isfinite(g_array_index(a, double, i));
    return n;
}

void train_page_stats(struct train_page *p, long *points, int *finished)
{
    *points = p->points;
    *finished = p->finished;
}

gboolean train_page_ticking(struct train_page *p)
{
    return p->tick != 0;
}

struct train_page *train_page_new(NlWindow *w, GtkWidget **root)
{
    struct train_page *p = g_new0(struct train_page, 1);
    GtkBuilder *b = nl_page_builder("train-page");
    p->win = w;
#define GET(x) p->x = GTK_WIDGET(gtk_builder_get_object(b, #x))
    GET(what);
    GET(form);
    GET(where);
    GET(start);
    GET(stop);
    GET(start_reason);
    GET(charts);
    GET(progress);
    GET(stat_epoch);
    GET(stat_loss);
    GET(stat_acc);
    GET(stat_ips);
    GET(stat_ips_title);
    GET(stat_eta);
    GET(loss_chart);
    GET(acc_chart);
    GET(ips_chart);
    GET(optim);
    GET(schedule);
    GET(run_name);
    GET(cluster_form);
    GET(hosts);
    GET(ssh_config);
    GET(remote_nnlab);
    GET(accept_new);
    GET(bf16);
    GET(check_hosts);
    GET(host_report);
#undef GET
    p->momentum_spin = GTK_WIDGET(gtk_builder_get_object(b, "momentum"));
#define ADJ(x) p->x = GTK_ADJUSTMENT(gtk_builder_get_object(b, #x "_adj"))
    ADJ(epochs);
    ADJ(batch);
    ADJ(lr);
    ADJ(momentum);
    ADJ(threads);
    ADJ(seed);
    ADJ(heartbeat);
#undef ADJ
    p->max_restarts = GTK_ADJUSTMENT(gtk_builder_get_object(b, "restarts_adj"));
    *root = g_object_ref(GTK_WIDGET(gtk_builder_get_object(b, "page")));
    static const char *const spins[][2] = {{"epochs", "Epochs"},
                                           {"batch", "Batch"},
                                           {"lr", "Learning rate"},
                                           {"momentum", "Momentum"},
                                           {"threads", "Threads"},
                                           {"seed", "Seed"},
                                           {"heartbeat", "Heartbeat timeout"},
                                           {"max_restarts", "Max restarts"}};
    p->spins = g_ptr_array_new();
    for (size_t i = 0; i < G_N_ELEMENTS(spins); i++) {
        GObject *spin = gtk_builder_get_object(b, spins[i][0]);
        g_object_set_data(spin, "nl-field", (gpointer)spins[i][1]);
        gtk_spin_button_set_update_policy(GTK_SPIN_BUTTON(spin), GTK_UPDATE_IF_VALID);
        g_signal_connect(spin, "input", G_CALLBACK(spin_input), p);
        g_ptr_array_add(p->spins, spin);
    }
    g_signal_connect(p->run_name, "changed", G_CALLBACK(run_name_changed), p);
    g_object_unref(b);

    p->pulled = g_new(struct feed_point, PULL_MAX);
    p->step_x = g_array_new(FALSE, FALSE, sizeof(double));
    p->step_loss = g_array_new(FALSE, FALSE, sizeof(double));
    p->step_acc = g_array_new(FALSE, FALSE, sizeof(double));
    p->step_ips = g_array_new(FALSE, FALSE, sizeof(double));
    p->ep_x = g_array_new(FALSE, FALSE, sizeof(double));
    p->ep_acc = g_array_new(FALSE, FALSE, sizeof(double));
    p->ep_val = g_array_new(FALSE, FALSE, sizeof(double));
    for (int i = 0; i < FEED_MAX_WORKERS; i++)
        p->step_worker[i] = g_array_new(FALSE, FALSE, sizeof(double));
    p->report_text = g_string_new(NULL);
    p->ev_x = g_array_new(FALSE, FALSE, sizeof(double));
    p->ev_labels = g_ptr_array_new_with_free_func(g_free);
    p->ev_lines = g_ptr_array_new_with_free_func(g_free);
    p->pulled_events = g_new(struct feed_event, FEED_EVENTS);

    gtk_adjustment_set_value(p->threads, (int)g_get_num_processors());
    hosts_changed(NULL, p);
    g_signal_connect(p->hosts, "changed", G_CALLBACK(hosts_changed), p);

    static const GActionEntry actions[] = {
        {.name = "train-start", .activate = train_start},
        {.name = "train-stop", .activate = train_stop},
        {.name = "train-option", .activate = train_option, .parameter_type = "(ss)"},
        {.name = "train-check-hosts", .activate = check_hosts},
    };
    g_action_map_add_action_entries(G_ACTION_MAP(w), actions, G_N_ELEMENTS(actions), p);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->loss_chart), draw_loss, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->acc_chart), draw_acc, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->ips_chart), draw_ips, p, NULL);
    g_signal_connect(p->optim, "notify::selected", G_CALLBACK(optim_changed), p);
    g_signal_connect(p->charts, "map", G_CALLBACK(charts_mapped), p);
    g_signal_connect(p->charts, "unmap", G_CALLBACK(charts_unmapped), p);
    g_signal_connect(*root, "map", G_CALLBACK(page_mapped), p);
    train_page_dataset_changed(p);
    return p;
}

void train_page_free(struct train_page *p)
{
    if (!p)
        return;
    train_page_stop_and_wait(p);
    GArray *arrays[] = {p->step_x, p->step_loss, p->step_acc, p->step_ips,
                        p->ep_x,   p->ep_acc,    p->ep_val};
    for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++)
        g_array_unref(arrays[i]);
    for (int i = 0; i < FEED_MAX_WORKERS; i++) {
        g_array_unref(p->step_worker[i]);
        g_free(p->worker_names[i]);
    }
    g_string_free(p->report_text, TRUE);
    g_array_unref(p->ev_x);
    g_ptr_array_unref(p->ev_labels);
    g_ptr_array_unref(p->ev_lines);
    g_free(p->pulled_events);
    g_free(p->resumed_name);
    g_free(p->field_error);
    g_ptr_array_unref(p->spins);
    g_free(p->smooth);
    g_free(p->pulled);
    g_free(p);
}
