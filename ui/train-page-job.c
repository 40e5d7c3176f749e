/* The Train page's run in progress: train.start and train.stop, Resume from the Runs page, and the
 * training thread.
 *
 * The thread opens its own store connection and drives core's training session
 * (include/nnlab/session.h) as `nnlab train` does: a new run locally with nl_train, on the hosts
 * of the Hosts field with nl_cluster_train (one worker each, the form's SSH options, heartbeat
 * timeout and max restarts), or a stopped run continued from its latest checkpoint
 * (nl_session_resume). It never calls GTK: per-step points and recoveries go into the job's feed
 * (train-page-charts.c drains it), and the run's start, each epoch's end, a recovery's nudge,
 * what --overlap auto chose and the end of the run reach the main loop through g_idle_add with a
 * payload the callback owns.
 *
 * Resume continues a run in its own record with its own settings, which the form then shows; a
 * cluster run goes on on the hosts its settings name (the window records them as "hosts"; a run
 * the command line started, which lacks them, on those of the Hosts field). */
#include <math.h>
#include <string.h>

#include "core/formats/json.h"
#include "finetune.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif
#include "nnlab/model.h"
#include "nnlab/safetensors.h"
#include "nnlab/session.h"
#include "nnlab/spec.h"
#include "nnlab/text.h"
#include "train-page-private.h"

/* A one-off event from the training thread, owned by its idle callback. */
struct train_msg {
    struct train_job *job;
    enum { MSG_STARTED, MSG_EPOCH, MSG_RECOVERY, MSG_OVERLAP, MSG_DONE } kind;
    struct feed_point point;
    char text[256];
    int overlapped; /* MSG_OVERLAP: the mode auto chose */
};

static gboolean on_msg(gpointer data);

static void post_msg(struct train_job *j, int kind, const struct feed_point *pt, const char *text,
                     int overlapped)
{
    struct train_msg *m = g_new0(struct train_msg, 1);
    m->job = j;
    m->kind = kind;
    if (pt)
        m->point = *pt;
    if (text)
        g_strlcpy(m->text, text, sizeof m->text);
    m->overlapped = overlapped;
    g_idle_add(on_msg, m);
}

static void post(struct train_job *j, int kind, const struct feed_point *pt, const char *text)
{
    post_msg(j, kind, pt, text, 0);
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
    g_object_unref(j->page);
    g_object_unref(j->win);
    g_free(j);
}

/* ---- The training thread ---- */

/* The display of the session's events (core/store/session.c records them): the charts' feed, and
 * one-off messages to the main loop. */
static int on_event(void *ud, const struct nl_event *ev)
{
    struct train_job *j = ud;
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
        post(j, MSG_RECOVERY, NULL, NULL);
    } else if (ev->kind == NL_EVENT_OVERLAP && ev->overlap) {
        /* As the command line prints it; the marker at the first step of the kept mode. */
        const struct nl_overlap_choice *c = ev->overlap;
        char line[256];
        g_snprintf(line, sizeof line,
                   "Overlap: measured %.1f ms synchronous, %.1f ms overlapped: %s from step %ld",
                   1e3 * c->sync_seconds, 1e3 * c->overlap_seconds,
                   c->overlapped ? "overlapping" : "synchronous", c->step + 1);
        post_msg(j, MSG_OVERLAP, &pt, line, c->overlapped);
    } else if (ev->kind == NL_EVENT_EPOCH) {
        pt.kind = FEED_EPOCH;
        post(j, MSG_EPOCH, &pt, NULL);
    }
    return g_atomic_int_get(&j->stop);
}

static void put_gstring(void *ud, const char *p, size_t n)
{
    g_string_append_len(ud, p, (gssize)n);
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
        nl_json_write(put_gstring, s, j->init_run ? j->init_run : j->init_file);
    }
    if (j->cl.hosts) {
        g_string_append(s, s->len > 1 ? ",\"hosts\":" : "\"hosts\":");
        nl_json_write(put_gstring, s, j->cl.hosts);
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
static int train_run(struct train_job *j, struct nl_session *s)
{
    struct nl_train_hooks hooks = nl_session_hooks(s, on_event, j);
    if (s->cluster)
        return train_cluster(j, s, &hooks);
    struct nl_error terr = {0};
    int rc = nl_train(s->model, s->data, &s->opts, &hooks, &s->res, &terr);
    j->err = terr;
    return rc;
}

/* A new run: the model of the model page on the selected dataset. */
static int train_new(struct train_job *j, struct nl_session **out)
{
    struct nl_spec *spec = NULL;
    struct nl_dataset *d = NULL;
    struct nl_model *m = NULL;
    char note[192] = "";
    int rc = nl_dataset_load(j->store, j->dataset, &d, &j->err);
    if (rc == 0)
        rc = nl_spec_parse(&spec, j->spec, j->model, NULL, NULL, &j->err);
    if (rc == 0) {
        nl_spec_use(spec, d);
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
    post(j, MSG_STARTED, NULL, text);
    return train_run(j, s);
}

/* A stopped run continued from its latest checkpoint (nl_session_resume): locally, or on the
 * job's hosts for a cluster run. */
static int train_resume(struct train_job *j, struct nl_session **out)
{
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
    post(j, MSG_STARTED, NULL, text);
    return train_run(j, s);
}

static gpointer train_thread(gpointer data)
{
    struct train_job *j = data;
    struct nl_session *s = NULL;

    int rc = nl_store_open(&j->store, j->db_path, &j->err);
    if (rc == 0)
        rc = j->resume ? train_resume(j, &s) : train_new(j, &s);
    if (s) {
        rc = nl_session_finish(s, rc, &j->err);
        j->res = s->res;
    }
    j->rc = rc;
    nl_session_free(s);
    nl_store_close(j->store);
    j->store = NULL;
    post(j, MSG_DONE, NULL, NULL);
    return NULL;
}

/* ---- The main loop's side ---- */

/* The end of the run: the line under the progress bar, the workers' totals, the other pages. */
static void run_done(NlTrainPage *p, struct train_job *j)
{
    g_thread_join(p->thread);
    p->thread = NULL;
    train_charts_pull(p);
    p->job = NULL;
    train_charts_update_tick(p);
    train_watch_update_offer(p);
    p->finished++;
    char buf[512] = "";
    if (j->rc == 0) {
        train_charts_done(p, &j->res, buf, sizeof buf);
        if (j->workers) {
            /* Under the hosts: what each did in this run. */
            train_report_clear(p);
            char *t = g_strdup_printf("Run “%s”:", j->run);
            train_report_line(p, t, FALSE);
            g_free(t);
            char **lines = g_strsplit(j->workers, "\n", -1);
            for (int i = 0; lines[i]; i++)
                train_report_line(p, lines[i], FALSE);
            g_strfreev(lines);
            if (p->overlap_line)
                train_report_line(p, p->overlap_line, FALSE);
            for (guint i = 0; i < p->ev_lines->len; i++)
                train_report_line(p, g_ptr_array_index(p->ev_lines, i), TRUE);
        }
        nl_window_notify(p->win, "Run “%s” finished", j->run);
    } else if (j->rc == NL_ECANCELED) {
        g_snprintf(buf, sizeof buf, "Stopped; run “%s” keeps the epochs it finished", j->run);
    } else {
        g_snprintf(buf, sizeof buf, "Failed: %s", j->err.msg);
        nl_window_notify(p->win, "Training failed: %s", j->err.msg);
    }
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), buf);
    train_form_run_ended(p);
    /* A start that failed before its run existed leaves no "Starting…" behind. */
    if (j->rc < 0 && !j->run[0])
        train_page_dataset_changed(p);
    train_form_update(p);
    runs_page_refresh(p->win->runs);
    predict_page_refresh(p->win->predict);
    model_page_runs_changed(p->win->model);
}

static gboolean on_msg(gpointer data)
{
    struct train_msg *m = data;
    struct train_job *j = m->job;
    NlTrainPage *p = j->page;

    if (p->disposed || j->win->closed || p->job != j) {
        /* The page went away and joined the thread: only the job is left to free. */
        if (m->kind == MSG_DONE)
            job_free(j);
        g_free(m);
        return G_SOURCE_REMOVE;
    }
    switch (m->kind) {
    case MSG_STARTED:
        gtk_label_set_text(GTK_LABEL(p->what), m->text);
        if (j->resume)
            train_charts_past_epochs(p, j->run_id);
        runs_page_refresh(p->win->runs);
        break;
    case MSG_EPOCH:
        train_charts_epoch(p, &m->point);
        runs_page_refresh(p->win->runs);
        break;
    case MSG_RECOVERY:
        train_charts_pull_events(p);
        break;
    case MSG_OVERLAP: {
        const struct feed_point *pt = &m->point;
        const double x = pt->iters > 0 ? (pt->epoch - 1) + (double)pt->iter / pt->iters : NAN;
        train_charts_set_overlap(p, x, m->overlapped ? "overlapped" : "synchronous", m->text);
        break;
    }
    case MSG_DONE:
        run_done(p, j);
        job_free(j);
        break;
    }
    g_free(m);
    return G_SOURCE_REMOVE;
}

/* Starts the job's thread and turns the page to a run in progress. */
static void start_job(NlTrainPage *p, struct train_job *j)
{
    p->job = j;
    train_watch_update_offer(p);
    gtk_label_set_text(GTK_LABEL(p->what), "Starting…");
    train_charts_starting(p, j->resume     ? "Loading the run's checkpoint…"
                             : j->cl.hosts ? "Starting the workers…"
                                           : "Loading the dataset…");
    p->thread = g_thread_new("nnlab-train", train_thread, j);
    /* Focus goes to Stop, not to a field of the form that turns insensitive. */
    nl_page_set_enabled(GTK_WIDGET(p), "train.stop", TRUE);
    gtk_widget_grab_focus(p->stop);
    train_form_update(p);
    train_charts_update_tick(p);
    runs_page_refresh(p->win->runs);
}

static struct train_job *job_new(NlTrainPage *p)
{
    struct train_job *j = g_new0(struct train_job, 1);
    if (feed_init(&j->feed, FEED_CAP) < 0) {
        g_free(j);
        return NULL;
    }
    j->win = g_object_ref(p->win);
    j->page = g_object_ref(p);
    j->db_path = g_strdup(p->win->db_path);
    return j;
}

/* train.start: a new run from the form. Everything that can be checked here (the numbers typed
 * but not yet taken, the dataset, the model, the run name, the optimizer, the hosts) is checked
 * before the last run's view is cleared; a refusal is said next to Start. */
void train_job_start(GtkWidget *widget, const char *action, GVariant *param)
{
    NlTrainPage *p = NL_TRAIN_PAGE(widget);
    if (p->job)
        return;
    gboolean taken = train_form_take_numbers(p);
    char *why = train_form_refusal(p);
    if (why || !taken) {
        g_free(why);
        train_form_update(p);
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
    train_form_cluster(p, &j->cl);
    train_form_options(p, &j->o);
    j->o.bf16 = j->cl.hosts && j->cl.bf16;
    struct nl_error err = {0};
    /* A mistake in the form is said before any run is recorded or the view cleared. */
    if (nl_optim_validate(&j->o.optim, &err) < 0 ||
        (j->cl.hosts && train_hosts_valid(j->cl.hosts, &err) < 0)) {
        nl_window_notify(p->win, "%s", err.msg);
        job_free(j);
        return;
    }
    train_watch_stop(p);
    g_clear_pointer(&p->watched_last, g_free);
    train_charts_clear(p);
    if (j->cl.hosts)
        train_charts_name_workers(p, j->cl.hosts, &err);
    start_job(p, j);
}

void train_page_resume(NlTrainPage *p, const char *run)
{
    if (p->job) {
        nl_window_notify(p->win, "A run is in progress; stop it first");
        return;
    }
    if (!train_form_resumed(p, run))
        return;
    struct train_job *j = job_new(p);
    if (!j)
        return;
    j->resume = g_strdup(p->resumed_name);
    train_form_cluster(p, &j->cl);
    train_watch_stop(p);
    g_clear_pointer(&p->watched_last, g_free);
    train_charts_clear(p);
    struct nl_error err = {0};
    if (j->cl.hosts && train_charts_name_workers(p, j->cl.hosts, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        job_free(j);
        return;
    }
    gtk_widget_activate_action(GTK_WIDGET(p->win), "win.show-page", "s", "train");
    start_job(p, j);
}

void train_job_stop(GtkWidget *widget, const char *action, GVariant *param)
{
    NlTrainPage *p = NL_TRAIN_PAGE(widget);
    if (p->job) {
        g_atomic_int_set(&p->job->stop, 1);
        p->job->cstop = 1;
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), "Stopping…");
    }
}

void train_page_stop_and_wait(NlTrainPage *p)
{
    if (!p || !p->thread)
        return;
    g_atomic_int_set(&p->job->stop, 1);
    p->job->cstop = 1;
    g_thread_join(p->thread);
    p->thread = NULL;
    /* The done message is still queued; it frees the job, which the page forgets now. */
    p->job = NULL;
    train_charts_update_tick(p);
}

gboolean train_page_running(NlTrainPage *p)
{
    return p->job != NULL;
}

void train_page_stats(NlTrainPage *p, long *points, int *finished)
{
    *points = p->points;
    *finished = p->finished;
}
