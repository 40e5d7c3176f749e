/* The runs page: every run in the store with its settings and results, epoch curves of the runs
 * ticked for comparison with their settings side by side, deleting, and a run's confusion matrix
 * on the test split (computed on a worker thread) with the per-class precision, recall and F1
 * beside it and the misclassified samples behind a cell, each with its probabilities and opened
 * larger on a click. A regression run shows R² where accuracy stands, and in the matrix's place
 * its test predictions (nl_evaluate_values) against the actual values and as residuals, drawn
 * by chart_scatter_draw, with R², MAE and RMSE in the target's units beside them.
 *
 * Runs started anywhere else on the same store — `nnlab train` in a terminal, over SSH, under
 * MPI — are followed: while the page is on screen a timer (POLL_MS) asks a worker thread, with
 * its own read-only connection, for each run's status and epoch count; when that changes the
 * list, the details and the curves are read again, so a running run's curves gain a point each
 * epoch. The main loop never waits on the store for the poll. */
#include <math.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "nnlab/layer.h"
#include "nnlab/metrics.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "window.h"

#define EVAL_BATCH 256
#define CELL_MAX   60
#define TOP        3    /* probabilities kept per test sample */
#define POLL_MS    1000 /* how often the store is asked for other processes' progress */

static const struct chart_rgb palette[] = {
    {0.21, 0.52, 0.89}, {0.90, 0.38, 0.0},  {0.18, 0.63, 0.33},
    {0.57, 0.25, 0.66}, {0.75, 0.11, 0.16}, {0.40, 0.40, 0.40},
};

struct curve {
    char *name;
    int n;
    double *x, *val, *train, *loss, *val_loss;
    int regression; /* val and train are R² */
};

/* A confusion matrix and what is needed to show the samples behind a cell. */
struct confusion {
    char *run;
    int k, c, h, w;
    long *counts;  /* (k, k) */
    char **names;  /* (k + 1), NULL-terminated */
    uint32_t n;    /* test samples */
    int32_t *y;    /* (n) */
    int32_t *pred; /* (n) */
    uint8_t *px;   /* (n, c, h, w), or NULL for float datasets */
    int32_t *top;  /* (n, TOP) the likeliest classes, best first */
    float *ptop;   /* (n, TOP) their probabilities */
    float *ptrue;  /* (n) the probability of the true class */
    double accuracy;
    struct nl_metrics mt; /* per-class precision, recall and F1 */
    /* A regression run (k 0: no matrix): its predictions and their metrics, in the target's
     * units, drawn as predicted against actual and as residuals in the matrix's place. */
    int regression;
    float *vpred, *vactual; /* (n) */
    double r2, mae, rmse;
    char *target;
};

struct runs_page {
    NlWindow *win;
    GtkWidget *list, *details, *acc_chart, *loss_chart, *confusion_title, *confusion;
    GtkWidget *cell_title, *cell_samples;
    char *selected;
    GHashTable *compare; /* run names ticked */
    GPtrArray *curves;   /* struct curve, the runs drawn */
    struct confusion *cm;
    int sel_row, sel_col;
    uint8_t *cell_px;
    char **cell_captions;
    uint32_t *cell_idx; /* (cell_n) test sample of each thumbnail */
    int cell_n;
    GtkWidget *reason, *compare_grid, *class_table;
    GtkWidget *sample_pop, *sample_area, *sample_label;
    int sample;       /* the test sample shown larger, or -1 */
    char *comparison; /* the settings compared, as text, for tests */
    char *class_text; /* the per-class table, as text, for tests */
    guint poll_timer;
    gboolean polling; /* a poll is under way */
    char *poll_seen;  /* what the last poll found */
    int polls;        /* finished, for tests */
    char *newest;     /* the newest run at the last refresh */
    gboolean computing;
    gboolean refreshing; /* the list is being rebuilt: selections are not the user's */
};

static void confusion_free(struct confusion *c)
{
    if (!c)
        return;
    g_free(c->run);
    g_free(c->counts);
    g_strfreev(c->names);
    g_free(c->y);
    g_free(c->pred);
    g_free(c->px);
    g_free(c->top);
    g_free(c->ptop);
    g_free(c->ptrue);
    nl_metrics_release(&c->mt);
    g_free(c->vpred);
    g_free(c->vactual);
    g_free(c->target);
    g_free(c);
}

static void curve_free(gpointer data)
{
    struct curve *c = data;
    g_free(c->name);
    g_free(c->x);
    g_free(c->val);
    g_free(c->train);
    g_free(c->loss);
    g_free(c->val_loss);
    g_free(c);
}

/* Loads a run's model with its latest weights and its dataset. */
int nl_ui_load_run(struct nl_store *s, const char *run_name, struct nl_model **m,
                   struct nl_dataset **d, struct nl_error *err)
{
    struct nl_run_info run;
    int rc = nl_run_model(s, run_name, 1, NULL, NULL, &run, m, err);

    *d = NULL;
    if (rc == 0)
        rc = nl_dataset_load(s, run.dataset, d, err);
    if (rc < 0) {
        nl_model_free(*m);
        *m = NULL;
    }
    return rc;
}

/* ---- The confusion matrix, on a worker thread ---- */

struct cm_job {
    char *db_path, *run;
    struct confusion *cm;
    char *error;
};

static void cm_job_free(gpointer data)
{
    struct cm_job *j = data;
    g_free(j->db_path);
    g_free(j->run);
    confusion_free(j->cm);
    g_free(j->error);
    g_free(j);
}

static void cm_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
    struct cm_job *j = data;
    struct nl_error err = {0};
    struct nl_store *s = NULL;
    struct nl_model *m = NULL;
    struct nl_dataset *d = NULL;
    struct nl_exec *x = NULL;
    float *in = NULL, *probs = NULL;
    uint32_t *idx = NULL;

    int rc = nl_store_open(&s, j->db_path, &err);
    if (rc == 0)
        rc = nl_ui_load_run(s, j->run, &m, &d, &err);
    nl_store_close(s);
    if (rc == 0 && d->split[NL_TEST].n == 0)
        rc = nl_error_set(&err, NL_EINVAL, "dataset '%s' has no test split", d->name);
    if (rc == 0 && d->regression) {
        /* Predicted and actual values in the target's units, and their R², MAE and RMSE. */
        struct confusion *c = g_new0(struct confusion, 1);
        c->run = g_strdup(j->run);
        c->regression = 1;
        c->n = d->split[NL_TEST].n;
        c->target = g_strdup(d->class_names[0]);
        c->vpred = g_new(float, c->n);
        c->vactual = g_new(float, c->n);
        rc = nl_evaluate_values(m, d, NL_TEST, 0, c->vpred, c->vactual, &err);
        if (rc == 0) {
            struct nl_reg_sums sums = {0};
            nl_reg_add(&sums, c->vpred, c->vactual, (int)c->n);
            nl_reg_finish(&sums, 1.0, &c->mae, &c->rmse, &c->r2);
            c->accuracy = c->r2;
            j->cm = c;
        } else {
            confusion_free(c);
        }
    } else if (rc == 0) {
        rc = nl_exec_new(&x, m, EVAL_BATCH, &err);
    }
    if (rc == 0 && !d->regression) {
        const uint32_t n = d->split[NL_TEST].n;
        const int k = d->nclasses;
        struct confusion *c = g_new0(struct confusion, 1);
        struct nl_rng rng;
        nl_rng_seed(&rng, 1);
        c->run = g_strdup(j->run);
        c->k = k;
        c->c = d->shape.c;
        c->h = d->shape.h;
        c->w = d->shape.w;
        c->n = n;
        c->counts = g_new0(long, (size_t)k *k);
        c->names = g_new0(char *, (size_t)k + 1);
        for (int i = 0; i < k; i++)
            c->names[i] = g_strdup(d->class_names[i]);
        c->y = g_memdup2(d->split[NL_TEST].y, n * sizeof(int32_t));
        c->pred = g_new(int32_t, n);
        c->top = g_new0(int32_t, (size_t)n * TOP);
        c->ptop = g_new0(float, (size_t)n *TOP);
        c->ptrue = g_new0(float, n);
        rc = nl_metrics_init(&c->mt, k, &err);
        if (d->dtype == NL_U8)
            c->px = g_memdup2(d->split[NL_TEST].x, n * nl_shape_size(d->shape));
        in = g_new(float, (size_t)EVAL_BATCH *nl_shape_size(d->shape));
        probs = g_new(float, (size_t)EVAL_BATCH *k);
        idx = g_new(uint32_t, EVAL_BATCH);
        long correct = 0;
        for (uint32_t at = 0; rc == 0 && at < n; at += EVAL_BATCH) {
            int b = (int)MIN((uint32_t)EVAL_BATCH, n - at);
            for (int i = 0; i < b; i++)
                idx[i] = at + (uint32_t)i;
            nl_dataset_batch(d, NL_TEST, idx, b, in, NULL);
            const float *logits = nl_exec_forward(x, m->params, in, b, 0, &rng);
            nl_metrics_add(&c->mt, logits, c->y + at, b);
            nl_softmax(probs, logits, b, k);
            for (int i = 0; i < b; i++) {
                const float *pr = probs + (size_t)i * k;
                int32_t *top = c->top + (size_t)(at + i) * TOP;
                float *pt = c->ptop + (size_t)(at + i) * TOP;
                for (int t = 0; t < TOP; t++)
                    top[t] = -1;
                for (int q = 0; q < k; q++)
                    for (int t = 0; t < TOP; t++)
                        if (top[t] < 0 || pr[q] > pt[t]) {
                            memmove(top + t + 1, top + t, (TOP - 1 - t) * sizeof *top);
                            memmove(pt + t + 1, pt + t, (TOP - 1 - t) * sizeof *pt);
                            top[t] = q;
                            pt[t] = pr[q];
                            break;
                        }
                c->ptrue[at + i] = pr[c->y[at + i]];
            }
            for (int i = 0; i < b; i++) {
                int best = 0;
                for (int q = 1; q < k; q++)
                    if (logits[i * k + q] > logits[i * k + best])
                        best = q;
                c->pred[at + i] = best;
                c->counts[c->y[at + i] * k + best]++;
                correct += best == c->y[at + i];
            }
        }
        c->accuracy = (double)correct / n;
        if (rc == 0)
            nl_metrics_finish(&c->mt);
        j->cm = c;
        if (rc < 0) {
            confusion_free(c);
            j->cm = NULL;
        }
    }
    if (rc < 0)
        j->error = g_strdup(err.msg);
    g_free(in);
    g_free(probs);
    g_free(idx);
    nl_exec_free(x);
    nl_model_free(m);
    nl_dataset_free(d);
    g_task_return_boolean(task, TRUE);
}

static void show_cell(struct runs_page *p, int row, int col);
static struct chart_thumbs cell_thumbs(struct runs_page *p, GtkWidget *area);

static GtkWidget *cell_label(const char *text, gboolean numeric, gboolean bold)
{
    GtkWidget *l = gtk_label_new(text);
    gtk_label_set_xalign(GTK_LABEL(l), numeric ? 1 : 0);
    if (numeric)
        gtk_widget_add_css_class(l, "numeric");
    if (bold)
        gtk_widget_add_css_class(l, "heading");
    return l;
}

/* The per-class precision, recall, F1 and support of the matrix shown (nl_metrics, as `nnlab
 * eval` prints them), with the macro and weighted averages. */
static void fill_class_table(struct runs_page *p)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->class_table)))
        gtk_grid_remove(GTK_GRID(p->class_table), child);
    g_free(p->class_text);
    p->class_text = NULL;
    if (!p->cm)
        return;
    if (p->cm->regression) {
        /* The regression metrics, in the target's units, where the per-class table stands. */
        char v[4][48];
        g_snprintf(v[0], sizeof v[0], "%.4f", p->cm->r2);
        g_snprintf(v[1], sizeof v[1], "%.4g", p->cm->mae);
        g_snprintf(v[2], sizeof v[2], "%.4g", p->cm->rmse);
        g_snprintf(v[3], sizeof v[3], "%u", p->cm->n);
        static const char *const names[] = {"R²", "MAE", "RMSE", "Samples"};
        GString *text = g_string_new("Metric\tValue\n");
        gtk_grid_attach(GTK_GRID(p->class_table), cell_label("Metric", FALSE, TRUE), 0, 0, 1, 1);
        gtk_grid_attach(GTK_GRID(p->class_table), cell_label("Value", TRUE, TRUE), 1, 0, 1, 1);
        for (int r = 0; r < 4; r++) {
            gtk_grid_attach(GTK_GRID(p->class_table), cell_label(names[r], FALSE, FALSE), 0, r + 1,
                            1, 1);
            gtk_grid_attach(GTK_GRID(p->class_table), cell_label(v[r], TRUE, FALSE), 1, r + 1, 1,
                            1);
            g_string_append_printf(text, "%s\t%s\n", names[r], v[r]);
        }
        p->class_text = g_string_free(text, FALSE);
        return;
    }
    const struct nl_metrics *mt = &p->cm->mt;
    static const char *const head[] = {"Class", "Precision", "Recall", "F1", "Support"};
    GString *text = g_string_new(NULL);
    for (int c = 0; c < 5; c++) {
        gtk_grid_attach(GTK_GRID(p->class_table), cell_label(head[c], c > 0, TRUE), c, 0, 1, 1);
        g_string_append_printf(text, "%s%s", c ? "\t" : "", head[c]);
    }
    g_string_append_c(text, '\n');
    for (int r = 0; r <= mt->nclasses + 1; r++) {
        const struct nl_class_metrics *cm = r < mt->nclasses    ? &mt->classes[r]
                                            : r == mt->nclasses ? &mt->macro
                                                                : &mt->weighted;
        const char *name = r < mt->nclasses    ? p->cm->names[r]
                           : r == mt->nclasses ? "macro average"
                                               : "weighted average";
        char v[4][32];
        g_snprintf(v[0], sizeof v[0], "%.3f", cm->precision);
        g_snprintf(v[1], sizeof v[1], "%.3f", cm->recall);
        g_snprintf(v[2], sizeof v[2], "%.3f", cm->f1);
        g_snprintf(v[3], sizeof v[3], "%ld", cm->support);
        GtkWidget *l = cell_label(name, FALSE, r >= mt->nclasses);
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 18);
        gtk_widget_set_tooltip_text(l, name);
        gtk_grid_attach(GTK_GRID(p->class_table), l, 0, r + 1, 1, 1);
        g_string_append(text, name);
        for (int c = 0; c < 4; c++) {
            gtk_grid_attach(GTK_GRID(p->class_table), cell_label(v[c], TRUE, FALSE), c + 1, r + 1,
                            1, 1);
            g_string_append_printf(text, "\t%s", v[c]);
        }
        g_string_append_c(text, '\n');
    }
    p->class_text = g_string_free(text, FALSE);
}

/* The title over the matrix (or a regression run's plots) of c. */
static char *cm_title(const struct confusion *c)
{
    if (c->regression)
        return g_strdup_printf("Predictions of “%s” on the test split (%u samples): R² %.4f, "
                               "MAE %.4g, RMSE %.4g %s",
                               c->run, c->n, c->r2, c->mae, c->rmse, c->target);
    return g_strdup_printf("Confusion matrix of “%s” on the test split: %.2f%% of %u correct",
                           c->run, 100.0 * c->accuracy, c->n);
}

static void cm_done(GObject *source, GAsyncResult *res, gpointer data)
{
    struct runs_page *p = data;
    struct cm_job *j = g_task_get_task_data(G_TASK(res));
    if (p->win->closed)
        return;
    p->computing = FALSE;
    if (j->error) {
        nl_window_notify(p->win, "Confusion matrix: %s", j->error);
        gtk_label_set_text(GTK_LABEL(p->confusion_title), "Confusion matrix");
        return;
    }
    confusion_free(p->cm);
    p->cm = j->cm;
    j->cm = NULL;
    fill_class_table(p);
    char *t = cm_title(p->cm);
    gtk_label_set_text(GTK_LABEL(p->confusion_title), t);
    g_free(t);
    if (p->cm->regression) {
        show_cell(p, -1, -1);
        gtk_label_set_text(GTK_LABEL(p->cell_title),
                           "Left: each test sample's predicted value against its actual one (on "
                           "the diagonal when exact). Right: the residual, actual − predicted.");
        return;
    }
    /* The largest mistake is shown first. */
    int br = -1, bc = -1;
    long best = 0;
    for (int r = 0; r < p->cm->k; r++)
        for (int c = 0; c < p->cm->k; c++)
            if (r != c && p->cm->counts[r * p->cm->k + c] > best) {
                best = p->cm->counts[r * p->cm->k + c];
                br = r;
                bc = c;
            }
    show_cell(p, br, bc);
}

/* win.run-confusion: for the selected run. */
static void run_confusion(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    if (!p->selected || p->computing)
        return;
    struct cm_job *j = g_new0(struct cm_job, 1);
    j->db_path = g_strdup(p->win->db_path);
    j->run = g_strdup(p->selected);
    p->computing = TRUE;
    char *t = g_strdup_printf("Evaluating “%s” on the test split…", p->selected);
    gtk_label_set_text(GTK_LABEL(p->confusion_title), t);
    g_free(t);
    GTask *task = g_task_new(p->win, NULL, cm_done, p);
    g_task_set_task_data(task, j, cm_job_free);
    g_task_run_in_thread(task, cm_thread);
    g_object_unref(task);
}

static void free_cell(struct runs_page *p)
{
    g_free(p->cell_px);
    p->cell_px = NULL;
    g_strfreev(p->cell_captions);
    p->cell_captions = NULL;
    g_free(p->cell_idx);
    p->cell_idx = NULL;
    p->cell_n = 0;
}

/* The samples of true class row predicted as col. */
static void show_cell(struct runs_page *p, int row, int col)
{
    free_cell(p);
    p->sel_row = row;
    p->sel_col = col;
    gtk_widget_queue_draw(p->confusion);
    gtk_widget_queue_draw(p->cell_samples);
    const struct confusion *c = p->cm;
    if (!c || row < 0) {
        gtk_label_set_text(GTK_LABEL(p->cell_title),
                           c ? "No mistakes to show." : "Click a cell to see its samples.");
        return;
    }
    const size_t size = (size_t)c->c * c->h * c->w;
    long total = c->counts[row * c->k + col];
    int n = (int)MIN(total, CELL_MAX);
    p->cell_px = c->px ? g_new(uint8_t, size * (size_t)MAX(n, 1)) : NULL;
    p->cell_captions = g_new0(char *, (size_t)n + 1);
    p->cell_idx = g_new0(uint32_t, (size_t)MAX(n, 1));
    int got = 0;
    for (uint32_t i = 0; i < c->n && got < n; i++) {
        if (c->y[i] != row || c->pred[i] != col)
            continue;
        if (p->cell_px)
            memcpy(p->cell_px + (size_t)got * size, c->px + (size_t)i * size, size);
        /* The probability given to the prediction, then to the true class. */
        p->cell_captions[got] =
            row == col ? g_strdup_printf("%.0f%%", 100.0 * c->ptrue[i])
                       : g_strdup_printf("%.0f%% · %.0f%%", 100.0 * c->ptop[(size_t)i * TOP],
                                         100.0 * c->ptrue[i]);
        p->cell_idx[got++] = i;
    }
    p->cell_n = got;
    char *t = g_strdup_printf(
        "%ld test samples of class “%s” predicted as “%s”%s. Under each: %s; click one to see it "
        "larger.",
        total, c->names[row], c->names[col], total > got ? " (the first shown)" : "",
        row == col ? "the probability of its class"
                   : "the probability of the prediction · of the true class");
    gtk_label_set_text(GTK_LABEL(p->cell_title), t);
    g_free(t);
}

static struct chart_confusion confusion_of(struct runs_page *p, GtkWidget *area)
{
    struct chart_confusion m = {0};
    if (!p->cm)
        return m;
    m.k = p->cm->k;
    m.counts = p->cm->counts;
    m.names = (const char *const *)p->cm->names;
    m.sel_row = p->sel_row;
    m.sel_col = p->sel_col;
    m.fg = nl_window_fg(area);
    return m;
}

static void draw_confusion(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct runs_page *p = data;
    if (p->cm && p->cm->regression) {
        /* Predicted against actual on the left, residuals on the right. */
        struct chart_scatter sc = {.n = (int)p->cm->n,
                                   .pred = p->cm->vpred,
                                   .actual = p->cm->vactual,
                                   .title = "predicted against actual",
                                   .fg = nl_window_fg(GTK_WIDGET(area)),
                                   .dot = palette[0]};
        chart_scatter_draw(cr, w / 2, h, &sc);
        sc.residuals = 1;
        sc.title = "residuals";
        cairo_save(cr);
        cairo_translate(cr, w / 2, 0);
        chart_scatter_draw(cr, w - w / 2, h, &sc);
        cairo_restore(cr);
        return;
    }
    struct chart_confusion m = confusion_of(p, GTK_WIDGET(area));
    if (m.k > 0)
        chart_confusion_draw(cr, w, h, &m);
}

static void confusion_clicked(GtkGestureClick *g, int n, double x, double y, gpointer data)
{
    struct runs_page *p = data;
    struct chart_confusion m = confusion_of(p, p->confusion);
    int row, col;
    if (m.k > 0 &&
        chart_confusion_hit(gtk_widget_get_width(p->confusion), gtk_widget_get_height(p->confusion),
                            &m, x, y, &row, &col) == 0)
        show_cell(p, row, col);
}

static void draw_cell_samples(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct runs_page *p = data;
    if (!p->cm || !p->cell_px || p->cell_n == 0)
        return;
    struct chart_thumbs t = cell_thumbs(p, GTK_WIDGET(area));
    chart_thumbs_draw(cr, w, h, &t);
}

static struct chart_thumbs cell_thumbs(struct runs_page *p, GtkWidget *area)
{
    return (struct chart_thumbs){.n = p->cell_n,
                                 .c = p->cm->c,
                                 .h = p->cm->h,
                                 .w = p->cm->w,
                                 .pixels = p->cell_px,
                                 .captions = (const char *const *)p->cell_captions,
                                 .cell = 56,
                                 .fg = nl_window_fg(area)};
}

/* The sample shown larger: its image filling the area. */
static void draw_sample(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct runs_page *p = data;
    if (!p->cm || !p->cm->px || p->sample < 0 || (uint32_t)p->sample >= p->cm->n)
        return;
    const size_t size = (size_t)p->cm->c * p->cm->h * p->cm->w;
    struct chart_thumbs t = {.n = 1,
                             .c = p->cm->c,
                             .h = p->cm->h,
                             .w = p->cm->w,
                             .pixels = p->cm->px + (size_t)p->sample * size,
                             .cell = MIN(w, h) - 12,
                             .fg = nl_window_fg(GTK_WIDGET(area))};
    chart_thumbs_draw(cr, w, h, &t);
}

static void sample_close(GtkWidget *b, gpointer data)
{
    gtk_widget_set_visible(GTK_WIDGET(data), FALSE);
}

/* The sample's window went with the main window. */
static void sample_destroyed(GtkWidget *w, gpointer data)
{
    struct runs_page *p = data;
    p->sample_pop = NULL;
}

/* Opens test sample i larger, in a window of its own, with the likeliest classes. */
static void show_sample(struct runs_page *p, uint32_t i)
{
    const struct confusion *c = p->cm;
    if (!c || i >= c->n)
        return;
    if (!p->sample_pop) {
        GtkWidget *win = gtk_window_new();
        gtk_window_set_transient_for(GTK_WINDOW(win), GTK_WINDOW(p->win));
        gtk_window_set_destroy_with_parent(GTK_WINDOW(win), TRUE);
        gtk_window_set_hide_on_close(GTK_WINDOW(win), TRUE);
        gtk_window_set_resizable(GTK_WINDOW(win), FALSE);
        GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 12);
        gtk_widget_set_margin_start(box, 18);
        gtk_widget_set_margin_end(box, 18);
        gtk_widget_set_margin_top(box, 18);
        gtk_widget_set_margin_bottom(box, 18);
        p->sample_area = gtk_drawing_area_new();
        gtk_drawing_area_set_content_width(GTK_DRAWING_AREA(p->sample_area), 236);
        gtk_drawing_area_set_content_height(GTK_DRAWING_AREA(p->sample_area), 236);
        gtk_widget_set_halign(p->sample_area, GTK_ALIGN_CENTER);
        gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->sample_area), draw_sample, p, NULL);
        p->sample_label = gtk_label_new(NULL);
        gtk_label_set_xalign(GTK_LABEL(p->sample_label), 0);
        gtk_label_set_selectable(GTK_LABEL(p->sample_label), TRUE);
        GtkWidget *close = gtk_button_new_with_mnemonic("_Close");
        gtk_widget_set_halign(close, GTK_ALIGN_END);
        g_signal_connect(close, "clicked", G_CALLBACK(sample_close), win);
        gtk_box_append(GTK_BOX(box), p->sample_area);
        gtk_box_append(GTK_BOX(box), p->sample_label);
        gtk_box_append(GTK_BOX(box), close);
        gtk_window_set_child(GTK_WINDOW(win), box);
        p->sample_pop = win;
        g_signal_connect(win, "destroy", G_CALLBACK(sample_destroyed), p);
    }
    p->sample = (int)i;
    GString *t = g_string_new(NULL);
    g_string_append_printf(t, "Test sample #%u of “%s”\nTrue class: %s (%.1f%%)\n", i, c->run,
                           c->names[c->y[i]], 100.0 * c->ptrue[i]);
    for (int q = 0; q < TOP && c->top[(size_t)i * TOP + q] >= 0; q++)
        g_string_append_printf(t, "\n%d. %s  %.1f%%", q + 1, c->names[c->top[(size_t)i * TOP + q]],
                               100.0 * c->ptop[(size_t)i * TOP + q]);
    gtk_label_set_text(GTK_LABEL(p->sample_label), t->str);
    g_string_free(t, TRUE);
    char *title = g_strdup_printf("Test sample #%u", i);
    gtk_window_set_title(GTK_WINDOW(p->sample_pop), title);
    g_free(title);
    gtk_widget_set_visible(p->sample_area, c->px != NULL);
    gtk_widget_queue_draw(p->sample_area);
    gtk_window_present(GTK_WINDOW(p->sample_pop));
}

static void cell_samples_clicked(GtkGestureClick *g, int n, double x, double y, gpointer data)
{
    struct runs_page *p = data;
    if (!p->cm || !p->cell_px || p->cell_n == 0)
        return;
    struct chart_thumbs t = cell_thumbs(p, p->cell_samples);
    const int i = chart_thumbs_hit(gtk_widget_get_width(p->cell_samples), &t, x, y);
    if (i >= 0)
        show_sample(p, p->cell_idx[i]);
}

/* win.run-sample-close: closes the sample shown larger. */
static void sample_close_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    if (p->sample_pop)
        gtk_widget_set_visible(p->sample_pop, FALSE);
}

/* win.run-sample (i): opens the cell's i-th sample larger, as a click on it does. */
static void sample_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    const int i = g_variant_get_int32(param);
    if (i >= 0 && i < p->cell_n)
        show_sample(p, p->cell_idx[i]);
}

/* ---- Curves ---- */

static void load_curves(struct runs_page *p)
{
    g_ptr_array_set_size(p->curves, 0);
    struct nl_run_info *list;
    int n;
    struct nl_error err = {0};
    if (nl_run_list(p->win->store, &list, &n, &err) < 0)
        return;
    for (int i = 0; i < n; i++) {
        gboolean want = g_hash_table_contains(p->compare, list[i].name) ||
                        (g_hash_table_size(p->compare) == 0 && p->selected &&
                         strcmp(p->selected, list[i].name) == 0);
        if (!want || p->curves->len >= G_N_ELEMENTS(palette))
            continue;
        struct nl_run_epoch *ep;
        int ne;
        if (nl_run_epochs(p->win->store, list[i].id, &ep, &ne, &err) < 0)
            continue;
        struct curve *c = g_new0(struct curve, 1);
        c->name = g_strdup(list[i].name);
        c->regression = list[i].regression;
        c->n = ne;
        c->x = g_new(double, (size_t)MAX(ne, 1));
        c->val = g_new(double, (size_t)MAX(ne, 1));
        c->train = g_new(double, (size_t)MAX(ne, 1));
        c->loss = g_new(double, (size_t)MAX(ne, 1));
        c->val_loss = g_new(double, (size_t)MAX(ne, 1));
        for (int e = 0; e < ne; e++) {
            c->x[e] = ep[e].epoch;
            c->val[e] = ep[e].val_accuracy;
            c->train[e] = ep[e].train_accuracy;
            c->loss[e] = ep[e].train_loss;
            c->val_loss[e] = ep[e].val_loss;
        }
        nl_free(ep);
        g_ptr_array_add(p->curves, c);
    }
    nl_free(list);
    gtk_widget_queue_draw(p->acc_chart);
    gtk_widget_queue_draw(p->loss_chart);
}

static void draw_curves(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    struct runs_page *p = data;
    const gboolean acc = GTK_WIDGET(area) == p->acc_chart;
    /* Regression runs' curves are R², not a percentage. */
    int nreg = 0;
    for (guint i = 0; i < p->curves->len; i++)
        nreg += ((const struct curve *)p->curves->pdata[i])->regression;
    const gboolean all_reg = nreg > 0 && (guint)nreg == p->curves->len;
    struct chart c = {.title = !acc      ? "Loss per epoch"
                               : all_reg ? "R² per epoch"
                               : nreg    ? "Accuracy (R² for regression runs) per epoch"
                                         : "Accuracy per epoch",
                      .xlabel = "epoch",
                      .fg = nl_window_fg(GTK_WIDGET(area)),
                      .empty = "Select or tick runs to see their curves"};
    c.ymin = acc ? NAN : 0;
    c.ymax = c.xmax = NAN;
    c.xmin = 0;
    c.y_percent = acc && !nreg;
    for (guint i = 0; i < p->curves->len && c.nseries + 2 <= CHART_MAX_SERIES; i++) {
        const struct curve *cv = p->curves->pdata[i];
        c.series[c.nseries++] = (struct chart_series){.label = cv->name,
                                                      .x = cv->x,
                                                      .y = acc ? cv->val : cv->val_loss,
                                                      .n = cv->n,
                                                      .color = palette[i],
                                                      .width = 2.0,
                                                      .markers = 1};
        c.series[c.nseries++] = (struct chart_series){.x = cv->x,
                                                      .y = acc ? cv->train : cv->loss,
                                                      .n = cv->n,
                                                      .color = palette[i],
                                                      .width = 1.5,
                                                      .dashed = 1};
    }
    chart_draw(cr, w, h, &c);
}

/* ---- The list ---- */

/* "2026-11-21T11:04:20Z" as "2026-11-21 11:04:20 UTC" in buf. */
static const char *tidy_time(char *buf, size_t size, const char *iso)
{
    if (!iso[0])
        return "";
    char t[32];
    g_strlcpy(t, iso, sizeof t);
    g_strdelimit(t, "TZ", ' ');
    g_snprintf(buf, size, "%s UTC", g_strstrip(t));
    return buf;
}

/* A value of the settings as people read it: numbers with 6 significant digits (the stored
 * floats carry 9), arrays joined. */
static void json_value(GString *s, const struct nl_json *v, const char *sep)
{
    switch (v->type) {
    case NL_JSON_NUMBER:
        g_string_append_printf(s, "%g", v->number);
        break;
    case NL_JSON_STRING:
        g_string_append(s, v->string);
        break;
    case NL_JSON_BOOL:
        g_string_append(s, v->boolean ? "yes" : "no");
        break;
    case NL_JSON_ARRAY:
        for (size_t i = 0; i < v->count; i++) {
            if (i)
                g_string_append(s, sep);
            json_value(s, &v->items[i], sep);
        }
        break;
    default:
        break;
    }
}

/* Whether a setting holds its "off" value (0, false, an empty list), which is not shown. */
static gboolean setting_off(const struct nl_json *v)
{
    return (v->type == NL_JSON_NUMBER && v->number == 0) ||
           (v->type == NL_JSON_BOOL && !v->boolean) || (v->type == NL_JSON_ARRAY && !v->count) ||
           v->type == NL_JSON_NULL;
}

/* A run's settings as "key value · key value", leaving out those that are off. */
static GString *settings_text(const char *settings)
{
    GString *s = g_string_new(NULL);
    struct nl_json_doc *doc = NULL;
    struct nl_error err = {0};
    if (nl_json_parse(&doc, settings, strlen(settings), "run settings", &err) < 0) {
        g_string_append(s, settings);
        return s;
    }
    const struct nl_json *root = nl_json_root(doc);
    for (size_t i = 0; root->type == NL_JSON_OBJECT && i < root->count; i++) {
        const struct nl_json *v = &root->items[i];
        const gboolean always = strcmp(v->key, "seed") == 0 || strcmp(v->key, "momentum") == 0;
        if (!always && (setting_off(v) || v->type == NL_JSON_OBJECT))
            continue;
        if (s->len)
            g_string_append(s, " · ");
        g_string_append_printf(s, "%s ", v->key);
        json_value(s, v, strcmp(v->key, "input") == 0 ? "×" : ", ");
    }
    const struct nl_json *aug = nl_json_get(root, "augment");
    for (size_t i = 0; aug && aug->type == NL_JSON_OBJECT && i < aug->count; i++)
        if (!setting_off(&aug->items[i])) {
            g_string_append_printf(s, " · augment %s ", aug->items[i].key);
            json_value(s, &aug->items[i], ", ");
        }
    nl_json_free(doc);
    return s;
}

/* Adds the settings under v to keys (in order of first appearance) and to vals (key to text),
 * nested objects as "outer.inner". */
static void flatten(const struct nl_json *v, const char *prefix, GPtrArray *keys, GHashTable *vals)
{
    for (size_t i = 0; v->type == NL_JSON_OBJECT && i < v->count; i++) {
        const struct nl_json *m = &v->items[i];
        char *key = prefix ? g_strdup_printf("%s.%s", prefix, m->key) : g_strdup(m->key);
        if (m->type == NL_JSON_OBJECT) {
            flatten(m, key, keys, vals);
            g_free(key);
            continue;
        }
        GString *t = g_string_new(NULL);
        json_value(t, m, ", ");
        if (!g_ptr_array_find_with_equal_func(keys, key, g_str_equal, NULL))
            g_ptr_array_add(keys, g_strdup(key));
        g_hash_table_replace(vals, key, g_string_free(t, FALSE));
    }
}

/* The settings of the runs ticked for comparison (two or more) side by side, a row a setting,
 * the rows where they differ marked with ≠ and the accent colour. */
static void update_comparison(struct runs_page *p)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->compare_grid)))
        gtk_grid_remove(GTK_GRID(p->compare_grid), child);
    g_free(p->comparison);
    p->comparison = NULL;
    gtk_widget_set_visible(p->compare_grid, FALSE);
    if (g_hash_table_size(p->compare) < 2)
        return;
    struct nl_run_info *list;
    int n;
    struct nl_error err = {0};
    if (nl_run_list(p->win->store, &list, &n, &err) < 0)
        return;
    GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);
    GPtrArray *runs = g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    static const char *const fixed[] = {"model", "dataset", "status", "epochs done"};
    for (size_t i = 0; i < G_N_ELEMENTS(fixed); i++)
        g_ptr_array_add(keys, g_strdup(fixed[i]));
    for (int i = 0; i < n; i++) {
        char *settings = NULL;
        struct nl_run_info info;
        if (!g_hash_table_contains(p->compare, list[i].name) ||
            nl_run_get(p->win->store, list[i].name, &info, NULL, &settings, &err) < 0)
            continue;
        GHashTable *vals = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        g_hash_table_replace(vals, g_strdup("model"), g_strdup(info.model));
        g_hash_table_replace(vals, g_strdup("dataset"), g_strdup(info.dataset));
        g_hash_table_replace(vals, g_strdup("status"), g_strdup(info.status));
        g_hash_table_replace(vals, g_strdup("epochs done"),
                             g_strdup_printf("%d", info.epochs_done));
        struct nl_json_doc *doc = NULL;
        if (nl_json_parse(&doc, settings, strlen(settings), "run settings", &err) == 0)
            flatten(nl_json_root(doc), NULL, keys, vals);
        nl_json_free(doc);
        nl_free(settings);
        g_ptr_array_add(runs, vals);
        g_ptr_array_add(names, g_strdup(info.name));
    }
    nl_free(list);
    GString *text = g_string_new("setting");
    GtkGrid *g = GTK_GRID(p->compare_grid);
    gtk_grid_attach(g, cell_label("Setting", FALSE, TRUE), 0, 0, 1, 1);
    for (guint r = 0; r < runs->len; r++) {
        GtkWidget *l = cell_label(names->pdata[r], FALSE, TRUE);
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_MIDDLE);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 16);
        gtk_widget_set_tooltip_text(l, names->pdata[r]);
        gtk_grid_attach(g, l, (int)r + 1, 0, 1, 1);
        g_string_append_printf(text, "\t%s", (const char *)names->pdata[r]);
    }
    g_string_append_c(text, '\n');
    int differ = 0;
    for (guint k = 0; k < keys->len; k++) {
        const char *key = keys->pdata[k];
        const char *first = g_hash_table_lookup(runs->pdata[0], key);
        gboolean same = TRUE;
        for (guint r = 1; r < runs->len; r++)
            same &= g_strcmp0(first, g_hash_table_lookup(runs->pdata[r], key)) == 0;
        differ += !same;
        char *kl = g_strdup_printf("%s%s", same ? "" : "≠ ", key);
        GtkWidget *l = cell_label(kl, FALSE, FALSE);
        g_string_append(text, kl);
        g_free(kl);
        if (!same)
            gtk_widget_add_css_class(l, "nl-diff");
        else
            gtk_widget_add_css_class(l, "dim-label");
        gtk_grid_attach(g, l, 0, (int)k + 1, 1, 1);
        for (guint r = 0; r < runs->len; r++) {
            const char *v = g_hash_table_lookup(runs->pdata[r], key);
            GtkWidget *vl = cell_label(v ? v : "–", FALSE, FALSE);
            gtk_label_set_ellipsize(GTK_LABEL(vl), PANGO_ELLIPSIZE_END);
            gtk_label_set_max_width_chars(GTK_LABEL(vl), 16);
            gtk_widget_set_tooltip_text(vl, v ? v : "not set");
            if (!same)
                gtk_widget_add_css_class(vl, "nl-diff");
            gtk_grid_attach(g, vl, (int)r + 1, (int)k + 1, 1, 1);
            g_string_append_printf(text, "\t%s", v ? v : "–");
        }
        g_string_append_c(text, '\n');
    }
    char *head = g_strdup_printf("%d of %u settings differ (marked ≠)", differ, keys->len);
    GtkWidget *hl = cell_label(head, FALSE, FALSE);
    gtk_widget_add_css_class(hl, "caption");
    gtk_grid_attach(g, hl, 0, (int)keys->len + 1, (int)runs->len + 1, 1);
    g_free(head);
    p->comparison = g_string_free(text, FALSE);
    gtk_widget_set_visible(p->compare_grid, runs->len >= 2);
    g_ptr_array_unref(keys);
    g_ptr_array_unref(runs);
    g_ptr_array_unref(names);
}

static void show_details(struct runs_page *p)
{
    struct nl_run_info info;
    struct nl_error err = {0};
    char *settings = NULL;
    if (!p->selected || nl_run_get(p->win->store, p->selected, &info, NULL, &settings, &err) < 0) {
        gtk_label_set_text(GTK_LABEL(p->details), "Select a run to see its settings.");
        return;
    }
    GString *set = settings_text(settings);
    /* A cluster run's lost workers, as the train page showed them. */
    struct nl_run_recovery *rec = NULL;
    int nrec = 0;
    if (nl_run_recoveries(p->win->store, info.id, &rec, &nrec, &err) < 0)
        nrec = 0;
    for (int i = 0; i < nrec; i++) {
        const struct nl_run_recovery *r = &rec[i];
        if (i == 0)
            g_string_append(set, "\nRecoveries:");
        g_string_append_printf(set, "\n• step %ld · %s: %s; %s", r->step, r->host, r->what,
                               r->action);
        if (strcmp(r->action, "restarted") == 0)
            g_string_append_printf(set, " (restart %d)", r->restarts);
        g_string_append_printf(set, ", on %d worker%s", r->workers, r->workers == 1 ? "" : "s");
    }
    nl_free(rec);
    /* A run another process trains: who, and how far it has got, from the store. */
    if (strcmp(info.status, "running") == 0 && info.owner_host[0] && !nl_window_training(p->win)) {
        struct nl_run_epoch *ep = NULL;
        int ne = 0;
        if (nl_run_epochs(p->win->store, info.id, &ep, &ne, &err) < 0)
            ne = 0;
        g_string_append_printf(set, "\nTraining in process %ld on %s, followed live from the store",
                               info.owner_pid, info.owner_host);
        if (ne > 0 && isfinite(ep[ne - 1].images_per_second))
            g_string_append_printf(set, ": epoch %d done, %.0f samples/s", ep[ne - 1].epoch,
                                   ep[ne - 1].images_per_second);
        nl_free(ep);
    }
    /* Names come from people: escape everything but the markup added here. */
    char created[48], finished[48];
    char *esc = g_markup_printf_escaped(
        "<b>%s</b>  %s on %s · %s · started %s%s%s\n%s", info.name, info.model, info.dataset,
        info.status, tidy_time(created, sizeof created, info.created),
        info.finished[0] ? ", finished " : "", tidy_time(finished, sizeof finished, info.finished),
        set->str);
    g_string_free(set, TRUE);
    gtk_label_set_markup(GTK_LABEL(p->details), esc);
    g_free(esc);
    nl_free(settings);
}

/* Resume goes with a run, local or on hosts, that stopped, failed or was interrupted (its owner
 * gone), with no run in progress in this window; one without a checkpoint says so when asked. */
static void update_resume(struct runs_page *p)
{
    struct nl_run_info info;
    struct nl_train_opts o;
    struct nl_error err = {0};
    char *settings = NULL;
    int cluster = 0, epoch = 0;
    const gboolean known =
        p->selected && nl_run_get(p->win->store, p->selected, &info, NULL, &settings, &err) == 0;
    /* Resume and Confusion Matrix both start from the latest checkpoint. */
    const int ckpt = known ? nl_run_checkpoint_epoch(p->win->store, info.id, &epoch, &err) : 0;
    gboolean can = known && ckpt > 0 && !nl_window_training(p->win) &&
                   strcmp(info.status, "done") != 0 && strcmp(info.status, "running") != 0 &&
                   nl_run_settings_parse(settings, info.name, &o, NULL, &cluster, &err) == 0;
    nl_free(settings);
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "run-resume")), can);
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "run-confusion")),
        known && ckpt > 0);
    char *why = NULL;
    if (known && ckpt == 0 && strcmp(info.status, "running") == 0)
        why = g_strdup_printf("“%s” has no checkpoint yet: Confusion Matrix and Export can be "
                              "used once its first epoch ends.",
                              info.name);
    else if (known && ckpt == 0)
        why = g_strdup_printf("“%s” has no checkpoint (it %s before its first epoch ended): "
                              "Resume and Confusion Matrix need one. Train it again from the "
                              "Train page.",
                              info.name, strcmp(info.status, "failed") == 0 ? "failed" : "stopped");
    else if (known && ckpt < 0)
        why = g_strdup(err.msg);
    gtk_label_set_text(GTK_LABEL(p->reason), why ? why : "");
    gtk_widget_set_visible(p->reason, why != NULL);
    g_free(why);
}

/* Why Resume or Confusion Matrix is refused for the selected run, or NULL. */
const char *runs_page_reason(struct runs_page *p)
{
    return gtk_widget_get_visible(p->reason) ? gtk_label_get_text(GTK_LABEL(p->reason)) : NULL;
}

/* win.run-resume: continues the selected run from its latest checkpoint on the train page. */
static void resume_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    if (p->selected)
        train_page_resume(p->win->train, p->selected);
}

static void select_run(struct runs_page *p, const char *name)
{
    g_free(p->selected);
    p->selected = name ? g_strdup(name) : NULL;
    for (GtkWidget *r = gtk_widget_get_first_child(p->list); r;
         r = gtk_widget_get_next_sibling(r)) {
        const char *rn = g_object_get_data(G_OBJECT(r), "nl-name");
        if (rn && name && strcmp(rn, name) == 0)
            gtk_list_box_select_row(GTK_LIST_BOX(p->list), GTK_LIST_BOX_ROW(r));
    }
    gboolean have = p->selected != NULL;
    update_resume(p);
    update_comparison(p);
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "run-delete")), have);
    g_simple_action_set_enabled(
        G_SIMPLE_ACTION(g_action_map_lookup_action(G_ACTION_MAP(p->win), "run-export")), have);
    show_details(p);
    load_curves(p);
    /* A matrix shown is said to be another run's. */
    if (p->cm && !p->computing && p->selected) {
        char *t = strcmp(p->cm->run, p->selected) == 0
                      ? cm_title(p->cm)
                      : g_strdup_printf("Confusion matrix of “%s” (another run: press Confusion "
                                        "Matrix for “%s”)",
                                        p->cm->run, p->selected);
        gtk_label_set_text(GTK_LABEL(p->confusion_title), t);
        g_free(t);
    }
}

static void row_selected(GtkListBox *box, GtkListBoxRow *row, gpointer data)
{
    struct runs_page *p = data;
    if (p->refreshing)
        return;
    const char *name = row ? g_object_get_data(G_OBJECT(row), "nl-name") : NULL;
    if (name && (!p->selected || strcmp(name, p->selected) != 0))
        select_run(p, name);
}

static void compare_toggled(GtkCheckButton *b, gpointer data)
{
    struct runs_page *p = data;
    const char *name = g_object_get_data(G_OBJECT(b), "nl-name");
    if (gtk_check_button_get_active(b))
        g_hash_table_add(p->compare, g_strdup(name));
    else
        g_hash_table_remove(p->compare, name);
    update_comparison(p);
    load_curves(p);
}

/* An accuracy as a percentage, or a regression run's R². */
static void fmt_acc(char *buf, size_t size, double v, int regression)
{
    if (isfinite(v) && regression)
        g_snprintf(buf, size, "R² %.3f", v);
    else if (isfinite(v))
        g_snprintf(buf, size, "%.2f%%", 100.0 * v);
    else
        g_strlcpy(buf, "–", size);
}

static GtkWidget *run_row(struct runs_page *p, const struct nl_run_info *r)
{
    GtkWidget *row = gtk_list_box_row_new();
    GtkWidget *h = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 10);
    gtk_widget_set_margin_start(h, 8);
    gtk_widget_set_margin_end(h, 10);
    gtk_widget_set_margin_top(h, 6);
    gtk_widget_set_margin_bottom(h, 6);
    GtkWidget *check = gtk_check_button_new();
    gtk_widget_set_tooltip_text(check, "Overlay this run's curves");
    gtk_check_button_set_active(GTK_CHECK_BUTTON(check),
                                g_hash_table_contains(p->compare, r->name));
    g_object_set_data_full(G_OBJECT(check), "nl-name", g_strdup(r->name), g_free);
    g_signal_connect(check, "toggled", G_CALLBACK(compare_toggled), p);
    gtk_box_append(GTK_BOX(h), check);
    GtkWidget *v = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    gtk_widget_set_hexpand(v, TRUE);
    GtkWidget *name = gtk_label_new(r->name);
    gtk_label_set_xalign(GTK_LABEL(name), 0);
    gtk_label_set_ellipsize(GTK_LABEL(name), PANGO_ELLIPSIZE_END);
    gtk_widget_add_css_class(name, "heading");
    char val[16], test[16];
    double va = r->val_accuracy;
    if (!isfinite(va)) {
        /* A run that stopped, failed or is still training: its last epoch's. */
        struct nl_run_epoch *ep;
        int ne;
        struct nl_error err = {0};
        if (nl_run_epochs(p->win->store, r->id, &ep, &ne, &err) == 0) {
            for (int e = ne - 1; e >= 0 && !isfinite(va); e--)
                va = ep[e].val_accuracy;
            nl_free(ep);
        }
    }
    fmt_acc(val, sizeof val, va, r->regression);
    fmt_acc(test, sizeof test, r->test_accuracy, r->regression);
    char when[48], errs[96] = "";
    /* A regression run's errors in the target's units: the test split's, else validation's. */
    if (r->regression && isfinite(r->test_mae))
        g_snprintf(errs, sizeof errs, " · MAE %.4g · RMSE %.4g", r->test_mae, r->test_rmse);
    else if (r->regression && isfinite(r->val_mae))
        g_snprintf(errs, sizeof errs, " · val MAE %.4g · RMSE %.4g", r->val_mae, r->val_rmse);
    char *sub = g_strdup_printf("%s · %d epoch%s · val %s · test %s%s\n%s on %s · %s", r->status,
                                r->epochs_done, r->epochs_done == 1 ? "" : "s", val, test, errs,
                                r->model, r->dataset, tidy_time(when, sizeof when, r->created));
    GtkWidget *s = gtk_label_new(sub);
    g_free(sub);
    gtk_label_set_xalign(GTK_LABEL(s), 0);
    gtk_label_set_ellipsize(GTK_LABEL(s), PANGO_ELLIPSIZE_END);
    gtk_widget_add_css_class(s, "dim-label");
    gtk_widget_add_css_class(s, "caption");
    gtk_box_append(GTK_BOX(v), name);
    gtk_box_append(GTK_BOX(v), s);
    gtk_box_append(GTK_BOX(h), v);
    GtkWidget *big = gtk_label_new(test);
    gtk_widget_add_css_class(big, "numeric");
    gtk_widget_set_tooltip_text(big, r->regression ? "Test R²" : "Test accuracy");
    gtk_box_append(GTK_BOX(h), big);
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), h);
    g_object_set_data_full(G_OBJECT(row), "nl-name", g_strdup(r->name), g_free);
    return row;
}

void runs_page_refresh(struct runs_page *p)
{
    struct nl_run_info *list;
    struct nl_error err = {0};
    GtkWidget *child;
    int n;
    if (!p)
        return;
    if (nl_run_list(p->win->store, &list, &n, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        return;
    }
    p->refreshing = TRUE;
    while ((child = gtk_widget_get_first_child(p->list)))
        gtk_list_box_remove(GTK_LIST_BOX(p->list), child);
    gboolean found = FALSE;
    /* Newest first. */
    for (int i = n - 1; i >= 0; i--) {
        gtk_list_box_append(GTK_LIST_BOX(p->list), run_row(p, &list[i]));
        found |= p->selected && strcmp(p->selected, list[i].name) == 0;
    }
    p->refreshing = FALSE;
    /* The newest run is selected, and stays so as newer ones come. */
    const gboolean on_newest = !p->selected || (p->newest && strcmp(p->selected, p->newest) == 0);
    char *sel = found && !on_newest ? g_strdup(p->selected)
                : n > 0             ? g_strdup(list[n - 1].name)
                                    : NULL;
    g_free(p->newest);
    p->newest = n > 0 ? g_strdup(list[n - 1].name) : NULL;
    nl_free(list);
    select_run(p, sel);
    g_free(sel);
}

static void refresh_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    runs_page_refresh(data);
}

static void select_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    select_run(data, g_variant_get_string(param, NULL));
}

/* win.run-compare (name): ticks or unticks a run. */
static void compare_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    const char *name = g_variant_get_string(param, NULL);
    if (!g_hash_table_remove(p->compare, name))
        g_hash_table_add(p->compare, g_strdup(name));
    runs_page_refresh(p);
}

/* Writes the selected run's latest weights to path as safetensors. */
static void export_to(struct runs_page *p, const char *path)
{
    struct nl_run_info info;
    struct nl_model *m = NULL;
    struct nl_error err = {0};

    if (!p->selected)
        return;
    if (nl_run_model(p->win->store, p->selected, 1, NULL, NULL, &info, &m, &err) < 0 ||
        nl_safetensors_save(m, path, &err) < 0)
        nl_window_notify(p->win, "Export failed: %s", err.msg);
    else
        nl_window_notify(p->win, "Wrote “%s” to %s", p->selected, path);
    nl_model_free(m);
}

/* win.run-export-to (path): exports the selected run without asking. */
static void export_to_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    export_to(data, g_variant_get_string(param, NULL));
}

static void export_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    struct runs_page *p = data;
    if (response == GTK_RESPONSE_ACCEPT) {
        GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
        char *path = g_file_get_path(f);
        if (path)
            export_to(p, path);
        g_free(path);
        g_object_unref(f);
    }
    g_object_unref(dialog);
}

/* win.run-export: asks where, then writes the selected run's weights as safetensors with
 * PyTorch's tensor names. */
static void export_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    if (!p->selected)
        return;
    GtkFileChooserNative *d = gtk_file_chooser_native_new(
        "Export Weights", GTK_WINDOW(p->win), GTK_FILE_CHOOSER_ACTION_SAVE, "_Export", "_Cancel");
    char *name = g_strdup_printf("%s.safetensors", p->selected);
    gtk_file_chooser_set_current_name(GTK_FILE_CHOOSER(d), name);
    g_free(name);
    g_signal_connect(d, "response", G_CALLBACK(export_response), p);
    gtk_native_dialog_show(GTK_NATIVE_DIALOG(d));
}

static void delete_confirmed(gpointer data);

/* win.run-delete: the selected run, once confirmed. */
static void delete_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct runs_page *p = data;
    struct nl_run_info info;
    struct nl_error err = {0};
    if (!p->selected)
        return;
    if (nl_run_get(p->win->store, p->selected, &info, NULL, NULL, &err) == 0 &&
        strcmp(info.status, "running") == 0 && nl_window_training(p->win)) {
        nl_window_notify(p->win, "“%s” is training: stop it first", p->selected);
        return;
    }
    char *q = g_strdup_printf("Delete the run “%s”?", p->selected);
    nl_window_confirm(p->win, q, "Its metrics and checkpoints are removed from the store.",
                      "_Delete", delete_confirmed, p);
    g_free(q);
}

static void delete_confirmed(gpointer data)
{
    struct runs_page *p = data;
    struct nl_error err = {0};
    if (!p->selected)
        return;
    if (nl_run_remove(p->win->store, p->selected, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        return;
    }
    nl_window_notify(p->win, "Deleted run “%s”", p->selected);
    g_hash_table_remove(p->compare, p->selected);
    if (p->cm && strcmp(p->cm->run, p->selected) == 0) {
        confusion_free(p->cm);
        p->cm = NULL;
        show_cell(p, -1, -1);
        gtk_label_set_text(GTK_LABEL(p->confusion_title), "Confusion matrix");
    }
    g_free(p->selected);
    p->selected = NULL;
    runs_page_refresh(p);
    predict_page_refresh(p->win->predict);
    model_page_runs_changed(p->win->model);
}

/* ---- Following the store ---- */

struct poll_job {
    char *db_path;
    char *seen; /* each run's name, status, owner and epochs, a line a run */
};

static void poll_job_free(gpointer data)
{
    struct poll_job *j = data;
    g_free(j->db_path);
    g_free(j->seen);
    g_free(j);
}

/* Reads what every run is at, on its own read-only connection. */
static void poll_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
    struct poll_job *j = data;
    struct nl_store *s = NULL;
    struct nl_run_info *list = NULL;
    struct nl_error err = {0};
    int n = 0;
    if (nl_store_open_read(&s, j->db_path, &err) == 0 && nl_run_list(s, &list, &n, &err) == 0) {
        GString *t = g_string_new(NULL);
        for (int i = 0; i < n; i++) {
            struct nl_run_epoch *ep = NULL;
            struct nl_run_recovery *rec = NULL;
            int ne = 0, nrec = 0;
            /* A running run records epochs before its checkpoint counts them, and a cluster
             * run its recoveries as they happen. */
            if (strcmp(list[i].status, "running") == 0) {
                if (nl_run_epochs(s, list[i].id, &ep, &ne, &err) < 0)
                    ne = -1;
                if (nl_run_recoveries(s, list[i].id, &rec, &nrec, &err) < 0)
                    nrec = -1;
            }
            nl_free(ep);
            nl_free(rec);
            g_string_append_printf(t, "%s|%s|%d|%d|%d|%d\n", list[i].name, list[i].status,
                                   list[i].epochs_done, list[i].owner_lives, ne, nrec);
        }
        j->seen = g_string_free(t, FALSE);
    }
    nl_free(list);
    nl_store_close(s);
    g_task_return_boolean(task, TRUE);
}

static void poll_done(GObject *source, GAsyncResult *res, gpointer data)
{
    struct runs_page *p = data;
    struct poll_job *j = g_task_get_task_data(G_TASK(res));
    if (p->win->closed)
        return;
    p->polling = FALSE;
    p->polls++;
    if (!j->seen)
        return;
    const gboolean changed = p->poll_seen && strcmp(p->poll_seen, j->seen) != 0;
    g_free(p->poll_seen);
    p->poll_seen = g_steal_pointer(&j->seen);
    if (changed) {
        runs_page_refresh(p);
        predict_page_refresh(p->win->predict);
        model_page_runs_changed(p->win->model);
    }
}

static gboolean poll_tick(gpointer data)
{
    struct runs_page *p = data;
    if (p->polling || p->win->closed)
        return G_SOURCE_CONTINUE;
    struct poll_job *j = g_new0(struct poll_job, 1);
    j->db_path = g_strdup(p->win->db_path);
    p->polling = TRUE;
    GTask *task = g_task_new(p->win, NULL, poll_done, p);
    g_task_set_task_data(task, j, poll_job_free);
    g_task_run_in_thread(task, poll_thread);
    g_object_unref(task);
    return G_SOURCE_CONTINUE;
}

/* The page on screen: what changed while it was hidden shows, and the store is followed. */
static void page_mapped(GtkWidget *w, gpointer data)
{
    struct runs_page *p = data;
    if (!p->poll_timer) {
        runs_page_refresh(p);
        p->poll_timer = g_timeout_add(POLL_MS, poll_tick, p);
        poll_tick(p);
    }
}

static void page_unmapped(GtkWidget *w, gpointer data)
{
    struct runs_page *p = data;
    if (p->poll_timer) {
        g_source_remove(p->poll_timer);
        p->poll_timer = 0;
    }
}

struct runs_page *runs_page_new(NlWindow *w, GtkWidget **root)
{
    struct runs_page *p = g_new0(struct runs_page, 1);
    GtkBuilder *b = nl_page_builder("runs-page");
    p->win = w;
#define GET(x) p->x = GTK_WIDGET(gtk_builder_get_object(b, #x))
    GET(list);
    GET(details);
    GET(acc_chart);
    GET(loss_chart);
    GET(confusion_title);
    GET(confusion);
    GET(cell_title);
    GET(cell_samples);
    GET(reason);
    GET(compare_grid);
    GET(class_table);
#undef GET
    *root = g_object_ref(GTK_WIDGET(gtk_builder_get_object(b, "page")));
    g_object_unref(b);
    p->compare = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    p->curves = g_ptr_array_new_with_free_func(curve_free);
    p->sel_row = p->sel_col = -1;
    p->sample = -1;

    static const GActionEntry actions[] = {
        {.name = "runs-refresh", .activate = refresh_action},
        {.name = "run-select", .activate = select_action, .parameter_type = "s"},
        {.name = "run-compare", .activate = compare_action, .parameter_type = "s"},
        {.name = "run-delete", .activate = delete_action},
        {.name = "run-resume", .activate = resume_action},
        {.name = "run-export", .activate = export_action},
        {.name = "run-export-to", .activate = export_to_action, .parameter_type = "s"},
        {.name = "run-confusion", .activate = run_confusion},
        {.name = "run-sample", .activate = sample_action, .parameter_type = "i"},
        {.name = "run-sample-close", .activate = sample_close_action},
    };
    g_action_map_add_action_entries(G_ACTION_MAP(w), actions, G_N_ELEMENTS(actions), p);
    g_signal_connect(p->list, "row-selected", G_CALLBACK(row_selected), p);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->acc_chart), draw_curves, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->loss_chart), draw_curves, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->confusion), draw_confusion, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->cell_samples), draw_cell_samples, p, NULL);
    GtkGesture *click = gtk_gesture_click_new();
    g_signal_connect(click, "pressed", G_CALLBACK(confusion_clicked), p);
    gtk_widget_add_controller(p->confusion, GTK_EVENT_CONTROLLER(click));
    click = gtk_gesture_click_new();
    g_signal_connect(click, "pressed", G_CALLBACK(cell_samples_clicked), p);
    gtk_widget_add_controller(p->cell_samples, GTK_EVENT_CONTROLLER(click));
    gtk_widget_set_cursor_from_name(p->cell_samples, "pointer");
    g_signal_connect(*root, "map", G_CALLBACK(page_mapped), p);
    g_signal_connect(*root, "unmap", G_CALLBACK(page_unmapped), p);
    show_cell(p, -1, -1);
    gtk_label_set_text(GTK_LABEL(p->cell_title),
                       "Compute the confusion matrix of a finished run, then click a cell to see "
                       "the test samples behind it.");
    runs_page_refresh(p);
    return p;
}

const char *runs_page_details(struct runs_page *p)
{
    return gtk_label_get_text(GTK_LABEL(p->details));
}

gboolean runs_page_confusion_ready(struct runs_page *p)
{
    return p->cm && !p->computing;
}

const char *runs_page_selected(struct runs_page *p)
{
    return p->selected;
}

const char *runs_page_comparison(struct runs_page *p)
{
    return p->comparison;
}

const char *runs_page_class_table(struct runs_page *p)
{
    return p->class_text;
}

const char *runs_page_cell_caption(struct runs_page *p, int i)
{
    return i >= 0 && i < p->cell_n ? p->cell_captions[i] : NULL;
}

const char *runs_page_sample_shown(struct runs_page *p)
{
    return p->sample_pop && gtk_widget_get_visible(p->sample_pop)
               ? gtk_label_get_text(GTK_LABEL(p->sample_label))
               : NULL;
}

int runs_page_polls(struct runs_page *p)
{
    return p->polls;
}

int runs_page_curve_points(struct runs_page *p, const char *run)
{
    for (guint i = 0; i < p->curves->len; i++) {
        const struct curve *c = p->curves->pdata[i];
        if (strcmp(c->name, run) == 0)
            return c->n;
    }
    return -1;
}

void runs_page_free(struct runs_page *p)
{
    if (!p)
        return;
    if (p->poll_timer)
        g_source_remove(p->poll_timer);
    if (p->sample_pop)
        gtk_window_destroy(GTK_WINDOW(p->sample_pop));
    g_free(p->selected);
    g_free(p->newest);
    g_free(p->poll_seen);
    g_free(p->comparison);
    g_free(p->class_text);
    g_hash_table_unref(p->compare);
    g_ptr_array_unref(p->curves);
    confusion_free(p->cm);
    free_cell(p);
    g_free(p);
}
