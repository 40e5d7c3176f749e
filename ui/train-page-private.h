/* What the Train page's files (ui/train-page*.c) share: the widget's instance, the job of a run in
 * progress, and what each concern offers the others. Private to the page.
 *
 * Ownership: the page owns its job while it runs (NULL otherwise). The job holds a reference on
 * the window and on the page, so that the idle callbacks the training thread queues find both
 * alive; once the page is disposed, those callbacks only free what they carry. */
#ifndef NNLAB_UI_TRAIN_PAGE_PRIVATE_H
#define NNLAB_UI_TRAIN_PAGE_PRIVATE_H

#include <signal.h>

#include "feed.h"
#include "nnlab/trainer.h"
#include "train-page.h"
#include "window.h"

G_BEGIN_DECLS

#define FEED_CAP (1 << 16)
#define PULL_MAX 4096

/* The number fields, in the order of NlTrainPage.spins. */
enum {
    SPIN_EPOCHS,
    SPIN_BATCH,
    SPIN_LR,
    SPIN_MOMENTUM,
    SPIN_THREADS,
    SPIN_SEED,
    SPIN_HEARTBEAT,
    SPIN_RESTARTS,
    NSPINS
};

/* Where a run trains beyond this computer (all strings owned; hosts NULL: locally). */
struct cluster_opts {
    char *hosts, *ssh_config, *remote_nnlab;
    gboolean accept_new, bf16;
    int heartbeat_s, max_restarts;
};

struct train_job {
    NlWindow *win;     /* a reference, for the idle callbacks */
    NlTrainPage *page; /* a reference, likewise */
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

struct _NlTrainPage {
    GtkWidget parent_instance;

    NlWindow *win; /* the window the page is in; it outlives the page's use of it */
    gboolean disposed;

    /* Template children. */
    GtkWidget *page;
    GtkWidget *what, *form, *where, *start, *stop, *start_reason, *charts, *progress;
    GtkWidget *stat_epoch, *stat_loss, *stat_acc, *stat_ips, *stat_eta, *stat_ips_title;
    GtkWidget *loss_chart, *acc_chart, *ips_chart;
    GtkWidget *optim, *schedule, *run_name;
    GtkWidget *cluster_form, *hosts, *ssh_config, *remote_nnlab, *accept_new, *bf16, *check_hosts;
    GtkWidget *host_report;
    GtkWidget *elsewhere, *elsewhere_label, *watch;
    GtkWidget *spins[NSPINS];   /* the number fields */
    GtkAdjustment *adj[NSPINS]; /* their values */

    /* The form. The last text a number field refused ("Learning rate: “fast” is not a number"),
     * the field (marked with the error class) and whether an update refused one just now. */
    char *field_error;
    GtkWidget *field_error_spin;
    gboolean field_refused;
    char *resumed_name; /* the run name the form shows for a resumed run */

    /* Check Hosts. */
    guint check_generation;
    gboolean checking;
    int checks_done;
    GString *report_text; /* the last report, for tests */

    /* The run in progress. */
    struct train_job *job; /* NULL when none */
    GThread *thread;
    int finished; /* runs finished since the window opened, for tests */

    /* A run another process trains, followed from the store (train-page-watch.c). */
    char *watched;      /* its name while it is followed, or NULL */
    char *watched_last; /* the last one followed, for tests */
    int64_t watched_id;
    long watched_step;      /* the last step drawn */
    long watched_iters;     /* its steps per epoch */
    int watched_recoveries; /* its recoveries drawn */
    gboolean watched_cluster;
    /* The last 16 steps' samples and seconds (a ring), for its rate. */
    double rate_samples[16], rate_seconds[16];
    int rate_n;
    guint watch_timer, watch_generation;
    gboolean watch_polling;
    char *watch_status; /* the run's status when following ended, for tests */
    guint elsewhere_timer;
    gboolean elsewhere_polling;

    /* The charts: per step (x in epochs), and per epoch. */
    guint tick;
    gboolean mapped;
    struct feed_point *pulled; /* (PULL_MAX) */
    GArray *step_x, *step_loss, *step_acc, *step_ips;
    GArray *ep_x, *ep_acc, *ep_val;
    int nworkers; /* of the run shown: 0 for a local run */
    char *worker_names[FEED_MAX_WORKERS];
    GArray *step_worker[FEED_MAX_WORKERS]; /* images/s, aligned with step_x; NAN: no report */
    double *smooth;                        /* scratch for the smoothed loss */
    guint smooth_cap;
    long points;
    struct feed_point last;
    /* The run's recoveries: x on the charts' axis, the chart's label and the line under the
     * hosts (both owned), in order. */
    GArray *ev_x;
    GPtrArray *ev_labels, *ev_lines;
    struct feed_event *pulled_events; /* (FEED_EVENTS) */
    int recoveries;                   /* since the window opened, for tests */
    /* What --overlap auto chose in the run shown: the step it keeps its mode from, on the
     * charts' axis (NAN: no choice yet), the loss chart's label and the line under the hosts. */
    double overlap_x;
    char *overlap_label, *overlap_line;
};

/* ---- The form (train-page-form.c) ---- */

void train_form_init(NlTrainPage *p);
void train_form_release(NlTrainPage *p);
/* Whether Start can start and why not, said beside it; Start, Stop and the form's sensitivity. */
void train_form_update(NlTrainPage *p);
/* Why Start cannot start a run now (a sentence naming the window's own controls), or NULL; the
 * run name is checked against the store. */
char *train_form_refusal(NlTrainPage *p);
/* Takes the text typed into the number fields; FALSE when one was refused. */
gboolean train_form_take_numbers(NlTrainPage *p);
/* The form's options for a new run (the numbers, optimizer and schedule). */
void train_form_options(NlTrainPage *p, struct nl_train_opts *o);
/* The SSH side of the form (c is filled; its strings are owned by it). */
void train_form_cluster(NlTrainPage *p, struct cluster_opts *c);
void cluster_opts_clear(struct cluster_opts *c);
/* The Hosts field as a list for nl_hosts_parse ("a,b c" -> "a,b,c"), or NULL when empty. */
char *train_form_hosts(NlTrainPage *p);
/* Whether a host list parses, said into err when not. */
int train_hosts_valid(const char *hosts, struct nl_error *err);
/* The form shows a resumed run's settings. */
void train_form_show(NlTrainPage *p, const struct nl_train_opts *o, const char *name,
                     const char *hosts);
/* Shows a stopped run's settings in the form before it resumes (its hosts, or the Hosts field's
 * for a cluster run that recorded none); FALSE, said in a notice, when it cannot resume. */
gboolean train_form_resumed(NlTrainPage *p, const char *run);
/* After a run: the form's name of a resumed run is cleared for the next. */
void train_form_run_ended(NlTrainPage *p);
void train_form_option(GtkWidget *widget, const char *action, GVariant *param);

/* ---- Check Hosts (train-page-hosts.c) ---- */

void train_hosts_check(GtkWidget *widget, const char *action, GVariant *param);
/* A line under the hosts (error: in the error colour), and clearing them. */
void train_report_line(NlTrainPage *p, const char *text, gboolean error);
void train_report_clear(NlTrainPage *p);

/* ---- The run in progress (train-page-job.c) ---- */

void train_job_start(GtkWidget *widget, const char *action, GVariant *param);
void train_job_stop(GtkWidget *widget, const char *action, GVariant *param);

/* ---- Following a run trained elsewhere (train-page-watch.c) ---- */

void train_watch_action(GtkWidget *widget, const char *action, GVariant *param);
/* Stops following (the charts stay as they are). */
void train_watch_stop(NlTrainPage *p);
/* Looks for runs trained elsewhere while the page is shown, idle and follows none. */
void train_watch_update_offer(NlTrainPage *p);
void train_watch_release(NlTrainPage *p);

/* ---- The live charts (train-page-charts.c) ---- */

void train_charts_init(NlTrainPage *p);
void train_charts_release(NlTrainPage *p);
/* Empties the charts for a new run. */
void train_charts_clear(NlTrainPage *p);
/* Names the workers of a cluster run for the images/s legend, from its host list. */
int train_charts_name_workers(NlTrainPage *p, const char *hosts, struct nl_error *err);
/* The figures above the charts and the progress bar for a point. */
void train_charts_show_point(NlTrainPage *p, const struct feed_point *pt);
/* Appends a step (x in epochs) or an epoch to the charts' series; redraws them. */
void train_charts_add_step(NlTrainPage *p, double x, double loss, double accuracy, double ips,
                           const double *worker_ips);
void train_charts_set_epochs(NlTrainPage *p, const double *epoch, const double *train_acc,
                             const double *val_acc, int n);
/* A recovery: a marker on the loss chart at x, a line under the hosts and a notice. */
void train_charts_add_recovery(NlTrainPage *p, double x, const char *label, const char *line);
/* What --overlap auto chose: a marker on the loss chart at x (the step it keeps the mode from)
 * and a line under the hosts. */
void train_charts_set_overlap(NlTrainPage *p, double x, const char *label, const char *line);
void train_charts_redraw(NlTrainPage *p);
/* Drains the job's feed into the charts; returns the points taken. */
int train_charts_pull(NlTrainPage *p);
/* The job's recoveries from its feed: each a notice, a line under the hosts and a marker. */
void train_charts_pull_events(NlTrainPage *p);
/* An epoch's end: its accuracies on the accuracy chart. */
void train_charts_epoch(NlTrainPage *p, const struct feed_point *pt);
/* A resumed run's epochs before this session, on the accuracy chart. */
void train_charts_past_epochs(NlTrainPage *p, int64_t run);
/* Starts or stops the charts' timer: it runs while a run is in progress and they are shown. */
void train_charts_update_tick(NlTrainPage *p);
/* The figures above the charts at a run's start and end. */
void train_charts_starting(NlTrainPage *p, const char *progress_text);
void train_charts_done(NlTrainPage *p, const struct nl_train_result *res, char *line, size_t size);
/* What a dataset's samples are called in rates: images, or samples for a CSV's rows; and the
 * rate's caption (whole_run: the figure is the whole run's). */
const char *train_unit(NlTrainPage *p);
void train_charts_rate_title(NlTrainPage *p, gboolean whole_run);

G_END_DECLS

#endif
