/* The Runs page's confusion matrix of a run on the test split, computed on a worker thread, with
 * the per-class precision, recall and F1 beside it and the misclassified samples behind a cell,
 * each opened larger on a click; a regression run's predicted-against-actual and residual plots
 * in its place. */
#include "runs-page-private.h"

void runs_confusion_free(struct confusion *c)
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
    runs_confusion_free(j->cm);
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
    struct nl_prep *prep = NULL; /* the filters transformed once for every batch: the same floats */
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
            runs_confusion_free(c);
        }
    } else if (rc == 0) {
        rc = nl_exec_new_forward(&x, m, EVAL_BATCH, &err);
        if (rc == 0 && (rc = nl_prep_new(&prep, m, m->params, 0, &err)) == 0)
            nl_exec_use_prep(x, prep);
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
            runs_confusion_free(c);
            j->cm = NULL;
        }
    }
    if (rc < 0)
        j->error = g_strdup(err.msg);
    g_free(in);
    g_free(probs);
    g_free(idx);
    nl_exec_free(x);
    nl_prep_free(prep);
    nl_model_free(m);
    nl_dataset_free(d);
    g_task_return_boolean(task, TRUE);
}

void runs_show_cell(NlRunsPage *p, int row, int col);
static struct chart_thumbs cell_thumbs(NlRunsPage *p, GtkWidget *area);

GtkWidget *runs_cell_label(const char *text, gboolean numeric, gboolean bold)
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
static void fill_class_table(NlRunsPage *p)
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
        gtk_grid_attach(GTK_GRID(p->class_table), runs_cell_label("Metric", FALSE, TRUE), 0, 0, 1,
                        1);
        gtk_grid_attach(GTK_GRID(p->class_table), runs_cell_label("Value", TRUE, TRUE), 1, 0, 1, 1);
        for (int r = 0; r < 4; r++) {
            gtk_grid_attach(GTK_GRID(p->class_table), runs_cell_label(names[r], FALSE, FALSE), 0,
                            r + 1, 1, 1);
            gtk_grid_attach(GTK_GRID(p->class_table), runs_cell_label(v[r], TRUE, FALSE), 1, r + 1,
                            1, 1);
            g_string_append_printf(text, "%s\t%s\n", names[r], v[r]);
        }
        p->class_text = g_string_free(text, FALSE);
        return;
    }
    const struct nl_metrics *mt = &p->cm->mt;
    static const char *const head[] = {"Class", "Precision", "Recall", "F1", "Support"};
    GString *text = g_string_new(NULL);
    for (int c = 0; c < 5; c++) {
        gtk_grid_attach(GTK_GRID(p->class_table), runs_cell_label(head[c], c > 0, TRUE), c, 0, 1,
                        1);
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
        GtkWidget *l = runs_cell_label(name, FALSE, r >= mt->nclasses);
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 18);
        gtk_widget_set_tooltip_text(l, name);
        gtk_grid_attach(GTK_GRID(p->class_table), l, 0, r + 1, 1, 1);
        g_string_append(text, name);
        for (int c = 0; c < 4; c++) {
            gtk_grid_attach(GTK_GRID(p->class_table), runs_cell_label(v[c], TRUE, FALSE), c + 1,
                            r + 1, 1, 1);
            g_string_append_printf(text, "\t%s", v[c]);
        }
        g_string_append_c(text, '\n');
    }
    p->class_text = g_string_free(text, FALSE);
}

/* The title over the matrix (or a regression run's plots) of c. */
char *runs_cm_title(const struct confusion *c)
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
    NlRunsPage *p = NL_RUNS_PAGE(source);
    struct cm_job *j = g_task_get_task_data(G_TASK(res));
    if (runs_gone(p))
        return;
    p->computing = FALSE;
    if (j->error) {
        nl_window_notify(p->win, "Confusion matrix: %s", j->error);
        gtk_label_set_text(GTK_LABEL(p->confusion_title), "Confusion matrix");
        return;
    }
    runs_confusion_free(p->cm);
    p->cm = j->cm;
    j->cm = NULL;
    fill_class_table(p);
    char *t = runs_cm_title(p->cm);
    gtk_label_set_text(GTK_LABEL(p->confusion_title), t);
    g_free(t);
    if (p->cm->regression) {
        runs_show_cell(p, -1, -1);
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
    runs_show_cell(p, br, bc);
}

/* runs.confusion: for the selected run. */
void runs_confusion_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
    if (!p->selected || p->computing)
        return;
    struct cm_job *j = g_new0(struct cm_job, 1);
    j->db_path = g_strdup(p->win->db_path);
    j->run = g_strdup(p->selected);
    p->computing = TRUE;
    char *t = g_strdup_printf("Evaluating “%s” on the test split…", p->selected);
    gtk_label_set_text(GTK_LABEL(p->confusion_title), t);
    g_free(t);
    GTask *task = g_task_new(p, NULL, cm_done, NULL);
    g_task_set_task_data(task, j, cm_job_free);
    g_task_run_in_thread(task, cm_thread);
    g_object_unref(task);
}

void runs_free_cell(NlRunsPage *p)
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
void runs_show_cell(NlRunsPage *p, int row, int col)
{
    runs_free_cell(p);
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

static struct chart_confusion confusion_of(NlRunsPage *p, GtkWidget *area)
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

void runs_draw_confusion(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    NlRunsPage *p = data;
    if (p->cm && p->cm->regression) {
        /* Predicted against actual on the left, residuals on the right. */
        struct chart_scatter sc = {.n = (int)p->cm->n,
                                   .pred = p->cm->vpred,
                                   .actual = p->cm->vactual,
                                   .title = "predicted against actual",
                                   .fg = nl_window_fg(GTK_WIDGET(area)),
                                   .dot = runs_palette[0]};
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

void runs_confusion_clicked(GtkGestureClick *g, int n, double x, double y, gpointer data)
{
    NlRunsPage *p = data;
    struct chart_confusion m = confusion_of(p, p->confusion);
    int row, col;
    if (m.k > 0 &&
        chart_confusion_hit(gtk_widget_get_width(p->confusion), gtk_widget_get_height(p->confusion),
                            &m, x, y, &row, &col) == 0)
        runs_show_cell(p, row, col);
}

void runs_draw_cell_samples(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    NlRunsPage *p = data;
    if (!p->cm || !p->cell_px || p->cell_n == 0)
        return;
    struct chart_thumbs t = cell_thumbs(p, GTK_WIDGET(area));
    chart_thumbs_draw(cr, w, h, &t);
}

static struct chart_thumbs cell_thumbs(NlRunsPage *p, GtkWidget *area)
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
    NlRunsPage *p = data;
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
    NlRunsPage *p = data;
    p->sample_pop = NULL;
}

/* Opens test sample i larger, in a window of its own, with the likeliest classes. */
static void show_sample(NlRunsPage *p, uint32_t i)
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

void runs_cell_samples_clicked(GtkGestureClick *g, int n, double x, double y, gpointer data)
{
    NlRunsPage *p = data;
    if (!p->cm || !p->cell_px || p->cell_n == 0)
        return;
    struct chart_thumbs t = cell_thumbs(p, p->cell_samples);
    const int i = chart_thumbs_hit(gtk_widget_get_width(p->cell_samples), &t, x, y);
    if (i >= 0)
        show_sample(p, p->cell_idx[i]);
}

/* runs.sample-close: closes the sample shown larger. */
void runs_sample_close_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
    if (p->sample_pop)
        gtk_widget_set_visible(p->sample_pop, FALSE);
}

/* runs.sample (i): opens the cell's i-th sample larger, as a click on it does. */
void runs_sample_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
    const int i = g_variant_get_int32(param);
    if (i >= 0 && i < p->cell_n)
        show_sample(p, p->cell_idx[i]);
}
