/* The Train page's live charts and the figures above them: loss per step (raw and smoothed, with
 * a marker at each recovery), accuracy (the running train accuracy per step, train and validation
 * per epoch) and images/s (a cluster run's total and each worker's own rate).
 *
 * The training thread never calls GTK. Per-step points go into the job's locked ring buffer
 * (feed.h) that a 100 ms timeout on the main loop drains while the charts are on screen (the
 * timer stops while they are hidden and catches up when they show again); epoch ends come
 * through g_idle_add. A cluster run's recoveries are pushed as feed events and pulled with the
 * points (and at once on a nudge, should the timer be off): each shows as a notice, a line under
 * the hosts (as the command line prints it) and a marker on the loss chart at its step. What
 * --overlap auto measured and chose comes through g_idle_add: a line under the hosts and a blue
 * marker on the loss chart at the step the kept mode starts from. Each chart is a
 * GtkDrawingArea whose draw function calls chart.c. */
#include <math.h>
#include <string.h>

#include "chart.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif
#include "nnlab/runs.h"
#include "train-page-private.h"

static const struct chart_rgb BLUE = {0.21, 0.52, 0.89}, ORANGE = {0.90, 0.38, 0.0},
                              LIGHT_BLUE = {0.55, 0.73, 0.95}, RED = {0.88, 0.11, 0.14};

static void append(GArray *a, double v)
{
    g_array_append_val(a, v);
}

void train_charts_redraw(NlTrainPage *p)
{
    gtk_widget_queue_draw(p->loss_chart);
    gtk_widget_queue_draw(p->acc_chart);
    gtk_widget_queue_draw(p->ips_chart);
}

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

const char *train_unit(NlTrainPage *p)
{
    const struct nl_dataset *d = p->win->data;
    return d && d->dtype == NL_F32 ? "samples" : "images";
}

/* The caption stays short (the figures above the charts share their width); its tooltip says
 * over what the rate is measured. */
void train_charts_rate_title(NlTrainPage *p, gboolean whole_run)
{
    gtk_label_set_text(GTK_LABEL(p->stat_ips_title),
                       strcmp(train_unit(p), "samples") == 0 ? "Samples/s" : "Images/s");
    gtk_widget_set_tooltip_text(p->stat_ips_title, whole_run
                                                       ? "Over the whole run, as the Done line says"
                                                       : "Over the last steps");
    gtk_widget_set_tooltip_text(p->stat_ips, gtk_widget_get_tooltip_text(p->stat_ips_title));
}

void train_charts_show_point(NlTrainPage *p, const struct feed_point *pt)
{
    char buf[128];
    g_snprintf(buf, sizeof buf, "%d / %d", pt->epoch, pt->epochs);
    gtk_label_set_text(GTK_LABEL(p->stat_epoch), buf);
    set_stat(p->stat_loss, "%.4f", pt->loss);
    set_stat(p->stat_ips, "%.0f", pt->images_per_second);
    train_charts_rate_title(p, FALSE);
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

void train_charts_starting(NlTrainPage *p, const char *progress_text)
{
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), 0);
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), progress_text);
    gtk_label_set_text(GTK_LABEL(p->stat_acc), "–");
}

void train_charts_done(NlTrainPage *p, const struct nl_train_result *res, char *line, size_t size)
{
    if (isfinite(res->test_accuracy))
        g_snprintf(line, size, "Done: test accuracy %.2f%% · %.1f s · %.0f %s/s",
                   100.0 * res->test_accuracy, res->seconds, res->images_per_second, train_unit(p));
    /* The figure above the charts agrees with this line: the whole run's. */
    if (isfinite(res->images_per_second) && res->images_per_second > 0) {
        set_stat(p->stat_ips, "%.0f", res->images_per_second);
        train_charts_rate_title(p, TRUE);
    } else
        g_snprintf(line, size, "Done in %.1f s (no test split)", res->seconds);
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), 1.0);
    gtk_label_set_text(GTK_LABEL(p->stat_eta), "0:00");
}

void train_charts_pull_events(NlTrainPage *p)
{
    if (!p->job)
        return;
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
        train_report_line(p, line->str, TRUE);
        nl_window_notify(p->win, "%s", line->str);
        g_ptr_array_add(p->ev_lines, g_string_free(line, FALSE));
        p->recoveries++;
    }
    if (n > 0)
        gtk_widget_queue_draw(p->loss_chart);
}

int train_charts_pull(NlTrainPage *p)
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
    train_charts_pull_events(p);
    if (total > 0) {
        p->points += total;
        train_charts_show_point(p, &p->last);
        train_charts_redraw(p);
    }
    return total;
}

void train_charts_add_step(NlTrainPage *p, double x, double loss, double accuracy, double ips,
                           const double *worker_ips)
{
    append(p->step_x, x);
    append(p->step_loss, loss);
    append(p->step_acc, accuracy);
    append(p->step_ips, ips);
    for (int w = 0; w < p->nworkers; w++)
        append(p->step_worker[w], worker_ips ? worker_ips[w] : NAN);
    p->points++;
}

void train_charts_set_epochs(NlTrainPage *p, const double *epoch, const double *train_acc,
                             const double *val_acc, int n)
{
    g_array_set_size(p->ep_x, 0);
    g_array_set_size(p->ep_acc, 0);
    g_array_set_size(p->ep_val, 0);
    for (int i = 0; i < n; i++) {
        append(p->ep_x, epoch[i]);
        append(p->ep_acc, train_acc[i]);
        append(p->ep_val, val_acc[i]);
    }
    if (n > 0)
        set_stat(p->stat_acc, "%.2f%%", 100.0 * val_acc[n - 1]);
    gtk_widget_queue_draw(p->acc_chart);
}

void train_charts_set_overlap(NlTrainPage *p, double x, const char *label, const char *line)
{
    p->overlap_x = x;
    g_free(p->overlap_label);
    p->overlap_label = g_strdup(label);
    g_free(p->overlap_line);
    p->overlap_line = g_strdup(line);
    train_report_line(p, line, FALSE);
    gtk_widget_queue_draw(p->loss_chart);
}

const char *train_page_overlap(NlTrainPage *p, int *marker)
{
    *marker = isfinite(p->overlap_x) && p->overlap_label;
    return p->overlap_line;
}

void train_charts_add_recovery(NlTrainPage *p, double x, const char *label, const char *line)
{
    append(p->ev_x, x);
    g_ptr_array_add(p->ev_labels, g_strdup(label));
    g_ptr_array_add(p->ev_lines, g_strdup(line));
    train_report_line(p, line, TRUE);
    nl_window_notify(p->win, "%s", line);
    p->recoveries++;
    gtk_widget_queue_draw(p->loss_chart);
}

int train_page_epochs_drawn(NlTrainPage *p)
{
    return (int)p->ep_x->len;
}

void train_charts_epoch(NlTrainPage *p, const struct feed_point *pt)
{
    train_charts_pull(p);
    append(p->ep_x, pt->epoch);
    append(p->ep_acc, pt->accuracy);
    append(p->ep_val, pt->val_accuracy);
    set_stat(p->stat_acc, "%.2f%%", 100.0 * pt->val_accuracy);
    gtk_widget_queue_draw(p->acc_chart);
}

void train_charts_past_epochs(NlTrainPage *p, int64_t run)
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

static gboolean tick(gpointer data)
{
    NlTrainPage *p = data;
    train_charts_pull(p);
    return G_SOURCE_CONTINUE;
}

void train_charts_update_tick(NlTrainPage *p)
{
    gboolean want = p->job && p->mapped && !p->disposed;
    if (want && !p->tick) {
        p->tick = g_timeout_add(100, tick, p);
        train_charts_pull(p);
    } else if (!want && p->tick) {
        g_source_remove(p->tick);
        p->tick = 0;
    }
}

static void charts_mapped(GtkWidget *w, gpointer data)
{
    NlTrainPage *p = data;
    p->mapped = TRUE;
    train_charts_update_tick(p);
}

static void charts_unmapped(GtkWidget *w, gpointer data)
{
    NlTrainPage *p = data;
    p->mapped = FALSE;
    train_charts_update_tick(p);
}

void train_charts_clear(NlTrainPage *p)
{
    GArray *arrays[] = {p->step_x, p->step_loss, p->step_acc, p->step_ips,
                        p->ep_x,   p->ep_acc,    p->ep_val};
    for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++)
        g_array_set_size(arrays[i], 0);
    for (int w = 0; w < FEED_MAX_WORKERS; w++) {
        g_array_set_size(p->step_worker[w], 0);
        g_clear_pointer(&p->worker_names[w], g_free);
    }
    p->nworkers = 0;
    p->points = 0;
    memset(&p->last, 0, sizeof p->last);
    g_array_set_size(p->ev_x, 0);
    g_ptr_array_set_size(p->ev_labels, 0);
    g_ptr_array_set_size(p->ev_lines, 0);
    p->overlap_x = NAN;
    g_clear_pointer(&p->overlap_label, g_free);
    g_clear_pointer(&p->overlap_line, g_free);
    train_charts_redraw(p);
}

int train_charts_name_workers(NlTrainPage *p, const char *hosts, struct nl_error *err)
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
    (void)hosts;
    nl_error_set(err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
    return -1;
#endif
}

/* What an empty chart says: how it fills. */
static const char *empty_text(NlTrainPage *p)
{
    return p->watched ? "Shown as the run stores it" : "Press Start to train";
}

static struct chart base_chart(NlTrainPage *p, GtkWidget *area, const char *title,
                               const char *xlabel)
{
    struct chart c = {.title = title, .xlabel = xlabel, .fg = nl_window_fg(area)};
    c.ymin = c.ymax = c.xmin = c.xmax = NAN;
    c.empty = empty_text(p);
    return c;
}

static double *data_of(GArray *a)
{
    return (double *)(void *)a->data;
}

static void draw_loss(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    NlTrainPage *p = data;
    struct chart c = base_chart(p, GTK_WIDGET(area), "Loss per step", "epoch");
    const guint n = p->step_x->len;
    if (n > p->smooth_cap) {
        p->smooth_cap = MAX(n, 2 * p->smooth_cap);
        p->smooth = g_renew(double, p->smooth, p->smooth_cap);
    }
    if (n)
        chart_smooth(p->smooth, data_of(p->step_loss), (int)n, 0.95);
    c.nseries = 2;
    c.series[0] = (struct chart_series){.label = "raw",
                                        .x = data_of(p->step_x),
                                        .y = data_of(p->step_loss),
                                        .n = (int)n,
                                        .color = LIGHT_BLUE,
                                        .width = 1.0};
    c.series[1] = (struct chart_series){.label = "smoothed",
                                        .x = data_of(p->step_x),
                                        .y = p->smooth,
                                        .n = (int)n,
                                        .color = BLUE,
                                        .width = 2.0};
    /* The recoveries in red, then auto's choice of overlap in the series' blue. */
    const guint nev = p->ev_x->len + (isfinite(p->overlap_x) ? 1 : 0);
    double *ev_x = g_newa(double, nev + 1);
    const char **ev_labels = g_newa(const char *, nev + 1);
    struct chart_rgb *ev_colors = g_newa(struct chart_rgb, nev + 1);
    for (guint i = 0; i < p->ev_x->len; i++) {
        ev_x[i] = g_array_index(p->ev_x, double, i);
        ev_labels[i] = g_ptr_array_index(p->ev_labels, i);
        ev_colors[i] = RED;
    }
    if (nev > p->ev_x->len) {
        ev_x[nev - 1] = p->overlap_x;
        ev_labels[nev - 1] = p->overlap_label;
        ev_colors[nev - 1] = BLUE;
    }
    c.nevents = (int)nev;
    c.event_x = ev_x;
    c.event_labels = ev_labels;
    c.event_color = RED;
    c.event_colors = ev_colors;
    c.xmin = 0;
    if (p->last.epochs > 0)
        c.xmax = p->last.epochs;
    chart_draw(cr, w, h, &c);
}

static void draw_acc(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    NlTrainPage *p = data;
    struct chart c = base_chart(p, GTK_WIDGET(area), "Accuracy", "epoch");
    c.ymin = 0;
    c.ymax = 1;
    c.y_percent = 1;
    c.nseries = 3;
    c.series[0] = (struct chart_series){.label = "train (running)",
                                        .x = data_of(p->step_x),
                                        .y = data_of(p->step_acc),
                                        .n = (int)p->step_x->len,
                                        .color = LIGHT_BLUE,
                                        .width = 1.0};
    c.series[1] = (struct chart_series){.label = "train",
                                        .x = data_of(p->ep_x),
                                        .y = data_of(p->ep_acc),
                                        .n = (int)p->ep_x->len,
                                        .color = BLUE,
                                        .width = 2.0,
                                        .markers = 1};
    c.series[2] = (struct chart_series){.label = "validation",
                                        .x = data_of(p->ep_x),
                                        .y = data_of(p->ep_val),
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
    NlTrainPage *p = data;
    const double *workers[FEED_MAX_WORKERS];
    for (int i = 0; i < p->nworkers; i++)
        workers[i] = data_of(p->step_worker[i]);
    const gboolean samples = strcmp(train_unit(p), "samples") == 0;
    struct chart_throughput t = {
        .title = p->nworkers > 0 ? (samples ? "Samples/s, per worker" : "Images/s, per worker")
                 : samples       ? "Samples per second"
                                 : "Images per second",
        .empty = empty_text(p),
        .x = data_of(p->step_x),
        .total = data_of(p->step_ips),
        .n = (int)p->step_x->len,
        .nworkers = MIN(p->nworkers, CHART_MAX_WORKERS),
        .hosts = (const char *const *)p->worker_names,
        .workers = workers,
        .xmax = p->last.epochs > 0 ? p->last.epochs : NAN,
        .fg = nl_window_fg(GTK_WIDGET(area)),
    };
    chart_throughput_draw(cr, w, h, &t);
}

int train_page_worker_points(NlTrainPage *p, int worker)
{
    if (worker < 0 || worker >= p->nworkers)
        return 0;
    int n = 0;
    const GArray *a = p->step_worker[worker];
    for (guint i = 0; i < a->len; i++)
        n += isfinite(g_array_index(a, double, i));
    return n;
}

void train_page_recoveries(NlTrainPage *p, int *count, int *markers, const char **last)
{
    *count = p->recoveries;
    *markers = (int)p->ev_x->len;
    *last = p->ev_lines->len ? g_ptr_array_index(p->ev_lines, p->ev_lines->len - 1) : NULL;
}

gboolean train_page_ticking(NlTrainPage *p)
{
    return p->tick != 0;
}

static GArray *doubles(void)
{
    return g_array_new(FALSE, FALSE, sizeof(double));
}

void train_charts_init(NlTrainPage *p)
{
    p->pulled = g_new(struct feed_point, PULL_MAX);
    p->pulled_events = g_new(struct feed_event, FEED_EVENTS);
    p->step_x = doubles();
    p->step_loss = doubles();
    p->step_acc = doubles();
    p->step_ips = doubles();
    p->ep_x = doubles();
    p->ep_acc = doubles();
    p->ep_val = doubles();
    for (int i = 0; i < FEED_MAX_WORKERS; i++)
        p->step_worker[i] = doubles();
    p->ev_x = doubles();
    p->ev_labels = g_ptr_array_new_with_free_func(g_free);
    p->ev_lines = g_ptr_array_new_with_free_func(g_free);
    p->overlap_x = NAN;
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->loss_chart), draw_loss, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->acc_chart), draw_acc, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->ips_chart), draw_ips, p, NULL);
    g_signal_connect(p->charts, "map", G_CALLBACK(charts_mapped), p);
    g_signal_connect(p->charts, "unmap", G_CALLBACK(charts_unmapped), p);
}

void train_charts_release(NlTrainPage *p)
{
    GArray *arrays[] = {p->step_x, p->step_loss, p->step_acc, p->step_ips,
                        p->ep_x,   p->ep_acc,    p->ep_val,   p->ev_x};
    for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++)
        if (arrays[i])
            g_array_unref(arrays[i]);
    for (int i = 0; i < FEED_MAX_WORKERS; i++) {
        if (p->step_worker[i])
            g_array_unref(p->step_worker[i]);
        g_free(p->worker_names[i]);
    }
    if (p->ev_labels)
        g_ptr_array_unref(p->ev_labels);
    if (p->ev_lines)
        g_ptr_array_unref(p->ev_lines);
    g_free(p->pulled_events);
    g_free(p->overlap_label);
    g_free(p->overlap_line);
    g_free(p->smooth);
    g_free(p->pulled);
}
