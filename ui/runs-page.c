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
 * epoch. The main loop never waits on the store for the poll. Such a run, while its owner lives,
 * can be watched (runs.watch): the Train page shows and follows it (train_page_watch). */
#include <unistd.h>

#include "runs-page-private.h"
#include "store-poll.h"

const struct chart_rgb runs_palette[RUNS_PALETTE] = {
    {0.21, 0.52, 0.89}, {0.90, 0.38, 0.0},  {0.18, 0.63, 0.33},
    {0.57, 0.25, 0.66}, {0.75, 0.11, 0.16}, {0.40, 0.40, 0.40},
};

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

/* ---- Curves ---- */

static void load_curves(NlRunsPage *p)
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
        if (!want || p->curves->len >= RUNS_PALETTE)
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
    NlRunsPage *p = data;
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
                      .empty = p->curves->len == 0   ? "Select or tick runs to see their curves"
                               : p->curves->len == 1 ? "This run has no finished epoch"
                                                     : "These runs have no finished epoch"};
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
                                                      .color = runs_palette[i],
                                                      .width = 2.0,
                                                      .markers = 1};
        c.series[c.nseries++] = (struct chart_series){.x = cv->x,
                                                      .y = acc ? cv->train : cv->loss,
                                                      .n = cv->n,
                                                      .color = runs_palette[i],
                                                      .width = 1.5,
                                                      .dashed = 1};
    }
    chart_draw(cr, w, h, &c);
}

gboolean runs_page_action_enabled(NlRunsPage *p, const char *action)
{
    return nl_page_action_enabled(GTK_WIDGET(p), action);
}

/* Whether a run is trained by another live process: running, its owner alive and not this
 * process (a run of this window is shown on the Train page already). */
static gboolean trained_elsewhere(const struct nl_run_info *r)
{
    char self[256] = "";
    gethostname(self, sizeof self - 1);
    const gboolean mine = r->owner_pid == (long)getpid() && strcmp(r->owner_host, self) == 0;
    return strcmp(r->status, "running") == 0 && r->owner_lives && !mine;
}

/* Resume goes with a run, local or on hosts, that stopped, failed or was interrupted (its owner
 * gone), with no run in progress in this window; one without a checkpoint says so when asked.
 * Watch goes with a run another process trains, with no run in progress in this window. */
static void update_resume(NlRunsPage *p)
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
    const gboolean regression = known && info.regression;
    const char *what = regression ? "Predicted vs Actual" : "Confusion Matrix";
    gtk_button_set_label(GTK_BUTTON(p->confusion_button), what);
    gtk_widget_set_tooltip_text(
        p->confusion_button,
        regression ? "Plot the selected run's predictions on the test split against the actual "
                     "values, with their residuals"
                   : "Evaluate the selected run's latest checkpoint on the test split");
    nl_page_set_enabled(GTK_WIDGET(p), "runs.resume", can);
    nl_page_set_enabled(GTK_WIDGET(p), "runs.watch",
                        known && trained_elsewhere(&info) && !nl_window_training(p->win));
    nl_page_set_enabled(GTK_WIDGET(p), "runs.confusion", known && ckpt > 0);
    char *why = NULL;
    if (known && ckpt == 0 && strcmp(info.status, "running") == 0)
        why = g_strdup_printf("“%s” has no checkpoint yet: %s and Export can be used once its "
                              "first epoch ends.",
                              info.name, what);
    else if (known && ckpt == 0)
        why = g_strdup_printf("“%s” has no checkpoint (it %s before its first epoch ended): "
                              "Resume and %s need one. Train it again from the Train page.",
                              info.name, strcmp(info.status, "failed") == 0 ? "failed" : "stopped",
                              what);
    else if (known && ckpt < 0)
        why = g_strdup(err.msg);
    gtk_label_set_text(GTK_LABEL(p->reason), why ? why : "");
    gtk_widget_set_visible(p->reason, why != NULL);
    g_free(why);
}

/* Why Resume or Confusion Matrix is refused for the selected run, or NULL. */
const char *runs_page_reason(NlRunsPage *p)
{
    return gtk_widget_get_visible(p->reason) ? gtk_label_get_text(GTK_LABEL(p->reason)) : NULL;
}

/* runs.resume: continues the selected run from its latest checkpoint on the train page. */
static void resume_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
    if (p->selected)
        train_page_resume(p->win->train, p->selected);
}

/* runs.watch: shows the Train page following the selected run, trained elsewhere. */
static void watch_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
    if (!p->selected)
        return;
    char *run = g_strdup(p->selected); /* the page may refresh while the other is shown */
    gtk_stack_set_visible_child(p->win->stack, GTK_WIDGET(p->win->train));
    train_page_watch(p->win->train, run);
    g_free(run);
}

static void select_run(NlRunsPage *p, const char *name)
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
    runs_update_comparison(p);
    nl_page_set_enabled(GTK_WIDGET(p), "runs.delete", have);
    nl_page_set_enabled(GTK_WIDGET(p), "runs.export", have);
    runs_show_details(p);
    load_curves(p);
    /* A matrix shown is said to be another run's. */
    if (p->cm && !p->computing && p->selected) {
        char *t = strcmp(p->cm->run, p->selected) == 0
                      ? runs_cm_title(p->cm)
                      : g_strdup_printf(
                            "%s of “%s” (another run: press %s for “%s”)",
                            p->cm->regression ? "Predictions" : "Confusion matrix", p->cm->run,
                            gtk_button_get_label(GTK_BUTTON(p->confusion_button)), p->selected);
        gtk_label_set_text(GTK_LABEL(p->confusion_title), t);
        g_free(t);
    }
}

static void row_selected(GtkListBox *box, GtkListBoxRow *row, gpointer data)
{
    NlRunsPage *p = data;
    if (p->refreshing)
        return;
    const char *name = row ? g_object_get_data(G_OBJECT(row), "nl-name") : NULL;
    if (name && (!p->selected || strcmp(name, p->selected) != 0))
        select_run(p, name);
}

static void compare_toggled(GtkCheckButton *b, gpointer data)
{
    NlRunsPage *p = data;
    const char *name = g_object_get_data(G_OBJECT(b), "nl-name");
    if (gtk_check_button_get_active(b))
        g_hash_table_add(p->compare, g_strdup(name));
    else
        g_hash_table_remove(p->compare, name);
    runs_update_comparison(p);
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

static GtkWidget *run_row(NlRunsPage *p, const struct nl_run_info *r)
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
    char *sub =
        g_strdup_printf("%s · %d epoch%s · val %s · test %s%s\n%s on %s · %s", r->status,
                        r->epochs_done, r->epochs_done == 1 ? "" : "s", val, test, errs, r->model,
                        r->dataset, runs_tidy_time(when, sizeof when, r->created));
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

void runs_page_refresh(NlRunsPage *p)
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

static void refresh_action(GtkWidget *widget, const char *action, GVariant *param)
{
    runs_page_refresh(NL_RUNS_PAGE(widget));
}

static void select_action(GtkWidget *widget, const char *action, GVariant *param)
{
    select_run(NL_RUNS_PAGE(widget), g_variant_get_string(param, NULL));
}

/* runs.compare (name): ticks or unticks a run. */
static void compare_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
    const char *name = g_variant_get_string(param, NULL);
    if (!g_hash_table_remove(p->compare, name))
        g_hash_table_add(p->compare, g_strdup(name));
    runs_page_refresh(p);
}

/* Writes the selected run's latest weights to path as safetensors. */
static void export_to(NlRunsPage *p, const char *path)
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

/* runs.export-to (path): exports the selected run without asking. */
static void export_to_action(GtkWidget *widget, const char *action, GVariant *param)
{
    export_to(NL_RUNS_PAGE(widget), g_variant_get_string(param, NULL));
}

static void export_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    NlRunsPage *p = data;
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

/* runs.export: asks where, then writes the selected run's weights as safetensors with
 * PyTorch's tensor names. */
static void export_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
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

/* runs.delete: the selected run, once confirmed. */
static void delete_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlRunsPage *p = NL_RUNS_PAGE(widget);
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
    NlRunsPage *p = data;
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
        runs_confusion_free(p->cm);
        p->cm = NULL;
        runs_show_cell(p, -1, -1);
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
    char *seen; /* each run's name, status, owner and epochs, a line a run */
};

static void poll_job_free(gpointer data)
{
    struct poll_job *j = data;
    g_free(j->seen);
    g_free(j);
}

/* What every run is at (in the poll's worker thread). */
static void poll_read(struct nl_store *s, const struct nl_run_info *list, int n, gpointer data)
{
    struct poll_job *j = data;
    struct nl_error err = {0};
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

static void poll_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlRunsPage *p = NL_RUNS_PAGE(source);
    struct poll_job *j = store_poll_job(res);
    if (runs_gone(p))
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
    NlRunsPage *p = data;
    if (p->polling || runs_gone(p))
        return G_SOURCE_CONTINUE;
    p->polling = TRUE;
    store_poll(p, p->win->db_path, poll_read, g_new0(struct poll_job, 1), poll_job_free, poll_done);
    return G_SOURCE_CONTINUE;
}

/* The page on screen: what changed while it was hidden shows, and the store is followed. */
static void page_mapped(GtkWidget *w, gpointer data)
{
    NlRunsPage *p = data;
    if (!p->poll_timer) {
        runs_page_refresh(p);
        p->poll_timer = g_timeout_add(POLL_MS, poll_tick, p);
        poll_tick(p);
    }
}

static void page_unmapped(GtkWidget *w, gpointer data)
{
    NlRunsPage *p = data;
    if (p->poll_timer) {
        g_source_remove(p->poll_timer);
        p->poll_timer = 0;
    }
}

G_DEFINE_FINAL_TYPE(NlRunsPage, nl_runs_page, GTK_TYPE_WIDGET)

static void nl_runs_page_init(NlRunsPage *p)
{
    gtk_widget_init_template(GTK_WIDGET(p));
    p->compare = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    p->curves = g_ptr_array_new_with_free_func(curve_free);
    p->sel_row = p->sel_col = -1;
    p->sample = -1;
    g_signal_connect(p->list, "row-selected", G_CALLBACK(row_selected), p);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->acc_chart), draw_curves, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->loss_chart), draw_curves, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->confusion), runs_draw_confusion, p, NULL);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->cell_samples), runs_draw_cell_samples, p,
                                   NULL);
    GtkGesture *click = gtk_gesture_click_new();
    g_signal_connect(click, "pressed", G_CALLBACK(runs_confusion_clicked), p);
    gtk_widget_add_controller(p->confusion, GTK_EVENT_CONTROLLER(click));
    click = gtk_gesture_click_new();
    g_signal_connect(click, "pressed", G_CALLBACK(runs_cell_samples_clicked), p);
    gtk_widget_add_controller(p->cell_samples, GTK_EVENT_CONTROLLER(click));
    gtk_widget_set_cursor_from_name(p->cell_samples, "pointer");
    g_signal_connect(p, "map", G_CALLBACK(page_mapped), p);
    g_signal_connect(p, "unmap", G_CALLBACK(page_unmapped), p);
}

static void nl_runs_page_dispose(GObject *obj)
{
    NlRunsPage *p = NL_RUNS_PAGE(obj);
    if (p->poll_timer) {
        g_source_remove(p->poll_timer);
        p->poll_timer = 0;
    }
    if (p->sample_pop)
        gtk_window_destroy(GTK_WINDOW(p->sample_pop));
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(GTK_WIDGET(obj))))
        gtk_widget_unparent(child);
    gtk_widget_dispose_template(GTK_WIDGET(obj), NL_TYPE_RUNS_PAGE);
    G_OBJECT_CLASS(nl_runs_page_parent_class)->dispose(obj);
}

static void nl_runs_page_finalize(GObject *obj)
{
    NlRunsPage *p = NL_RUNS_PAGE(obj);
    g_free(p->selected);
    g_free(p->newest);
    g_free(p->poll_seen);
    g_free(p->comparison);
    g_free(p->class_text);
    g_hash_table_unref(p->compare);
    g_ptr_array_unref(p->curves);
    runs_confusion_free(p->cm);
    runs_free_cell(p);
    G_OBJECT_CLASS(nl_runs_page_parent_class)->finalize(obj);
}

static void nl_runs_page_class_init(NlRunsPageClass *klass)
{
    GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
    G_OBJECT_CLASS(klass)->dispose = nl_runs_page_dispose;
    G_OBJECT_CLASS(klass)->finalize = nl_runs_page_finalize;
    nl_page_class_set_info(wc, "runs", "Runs", "document-open-recent-symbolic");
    nl_page_class_add_shortcut(wc, "F5", "runs.refresh");
    nl_page_class_add_shortcut(wc, "<Control>r", "runs.resume");
    gtk_widget_class_set_layout_manager_type(wc, GTK_TYPE_BIN_LAYOUT);
    gtk_widget_class_set_template_from_resource(wc, "/org/nnlab/Nnlab/runs-page.ui");
#define BIND(x) gtk_widget_class_bind_template_child(wc, NlRunsPage, x)
    BIND(list);
    BIND(details);
    BIND(acc_chart);
    BIND(loss_chart);
    BIND(confusion_title);
    BIND(confusion);
    BIND(cell_title);
    BIND(cell_samples);
    BIND(reason);
    BIND(compare_grid);
    BIND(class_table);
    BIND(confusion_button);
#undef BIND
    gtk_widget_class_install_action(wc, "runs.refresh", NULL, refresh_action);
    gtk_widget_class_install_action(wc, "runs.select", "s", select_action);
    gtk_widget_class_install_action(wc, "runs.compare", "s", compare_action);
    gtk_widget_class_install_action(wc, "runs.delete", NULL, delete_action);
    gtk_widget_class_install_action(wc, "runs.resume", NULL, resume_action);
    gtk_widget_class_install_action(wc, "runs.watch", NULL, watch_action);
    gtk_widget_class_install_action(wc, "runs.export", NULL, export_action);
    gtk_widget_class_install_action(wc, "runs.export-to", "s", export_to_action);
    gtk_widget_class_install_action(wc, "runs.confusion", NULL, runs_confusion_action);
    gtk_widget_class_install_action(wc, "runs.sample", "i", runs_sample_action);
    gtk_widget_class_install_action(wc, "runs.sample-close", NULL, runs_sample_close_action);
}

NlRunsPage *nl_runs_page_new(NlWindow *w)
{
    NlRunsPage *p = g_object_ref_sink(g_object_new(NL_TYPE_RUNS_PAGE, NULL));
    p->win = w;
    runs_show_cell(p, -1, -1);
    gtk_label_set_text(GTK_LABEL(p->cell_title),
                       "Compute the confusion matrix of a finished run, then click a cell to see "
                       "the test samples behind it.");
    runs_page_refresh(p);
    return p;
}

/* The page has left its window (the window closed): work finished since is dropped. Tasks hold
 * the page, not the window, so the page itself is still there. */
gboolean runs_gone(NlRunsPage *p)
{
    return gtk_widget_get_root(GTK_WIDGET(p)) == NULL;
}

const char *runs_page_details(NlRunsPage *p)
{
    return gtk_label_get_text(GTK_LABEL(p->details));
}

gboolean runs_page_confusion_ready(NlRunsPage *p)
{
    return p->cm && !p->computing;
}

const char *runs_page_selected(NlRunsPage *p)
{
    return p->selected;
}

const char *runs_page_comparison(NlRunsPage *p)
{
    return p->comparison;
}

const char *runs_page_class_table(NlRunsPage *p)
{
    return p->class_text;
}

const char *runs_page_cell_caption(NlRunsPage *p, int i)
{
    return i >= 0 && i < p->cell_n ? p->cell_captions[i] : NULL;
}

const char *runs_page_sample_shown(NlRunsPage *p)
{
    return p->sample_pop && gtk_widget_get_visible(p->sample_pop)
               ? gtk_label_get_text(GTK_LABEL(p->sample_label))
               : NULL;
}

int runs_page_polls(NlRunsPage *p)
{
    return p->polls;
}

int runs_page_curve_points(NlRunsPage *p, const char *run)
{
    for (guint i = 0; i < p->curves->len; i++) {
        const struct curve *c = p->curves->pdata[i];
        if (strcmp(c->name, run) == 0)
            return c->n;
    }
    return -1;
}
