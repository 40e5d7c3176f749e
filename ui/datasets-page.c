/* The datasets page: the datasets in the store, importing (IDX files, PNG/JPEG class folders, CSV
 * files) on a worker thread with a progress bar, and the selected dataset's classes per split,
 * sample thumbnails and a preview of augmented training samples (nl_augment_preview, a new
 * draw each time it is asked for). A CSV dataset shows its source columns as the import made them
 * (nl_table_column: kind, statistics, fill) and its first rows; a text dataset its vocabulary's
 * size and coverage and the first few documents of each class as the words of their tokens, the
 * out-of-vocabulary token marked (the word it stood for is not stored).
 *
 * The Name field is checked as it is typed, before any file chooser opens: a name of spaces
 * only, or one the store holds, marks the field, says why under it in the window's terms and
 * offers a free name, and the import buttons wait. A successful import clears the field so the
 * next one takes its own file's name. */
#include <math.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "window.h"

#define THUMBS         96
#define PER_CLASS      8  /* thumbnails of each class, at most */
#define FIRST_ROWS     20 /* rows of a CSV dataset shown */
#define DOCS_PER_CLASS 3  /* documents of each class of a text dataset shown, at most */
#define DOCS           40 /* documents shown in all, at most */
#define AUG_THUMBS     16

struct _NlDatasetsPage {
    GtkWidget parent_instance;

    NlWindow *win; /* the window it is a page of (set once, by nl_datasets_page_new) */
    GtkWidget *list, *name, *name_hint, *skip_bad, *val, *test, *channels, *import, *import_csv;
    GtkWidget *progress;
    GtkWidget *title, *info, *counts, *samples_title, *thumbs, *rows_table;
    GtkWidget *columns_table, *docs_box;
    int ndocs; /* documents shown */
    /* For tests: the column table and the documents shown, as text (a line each). */
    GString *columns_text, *docs_text;
    GtkWidget *augment, *aug_title, *aug_thumbs;
    /* The counts beside the samples (pictures) or above them (rows and texts, which want the
     * pane's width); a table's first rows in a scroller of their own, under its columns. */
    GtkWidget *split, *counts_scroll, *samples_scroll, *rows_scroll, *aug_scroll;
    guint pulse;
    gboolean importing;
    struct import_job *job; /* the import under way (owned by its task), or NULL */
    /* The thumbnails drawn: copies of the first samples of the train split. */
    int nthumbs;
    uint8_t *pixels;
    char **captions;
    /* The augmented preview: AUG_THUMBS or fewer samples, and the draw's seed. */
    int naug;
    uint8_t *aug_pixels;
    guint64 aug_seed;
};

/* What an import thread needs; owned by the GTask. */
struct import_job {
    char *db_path, *name, *path;
    double val, test;
    int channels; /* 0: what most files are, 1 gray, 3 RGB (PNG folders) */
    int skip_bad; /* skip files or rows that do not read, listing them in skipped */
    int nskipped;
    GString *skipped; /* the first few skipped, a line each (the import thread's) */
    gint done, total; /* files or rows so far, written by the import thread (atomic) */
    char *error;      /* NULL on success */
};

/* Runs on the import thread: publishes how far it got for the main loop's timer. */
static int import_progress(void *ud, uint64_t done, uint64_t total)
{
    struct import_job *j = ud;
    g_atomic_int_set(&j->total, (gint)(total > G_MAXINT ? G_MAXINT : total));
    g_atomic_int_set(&j->done, (gint)(done > G_MAXINT ? G_MAXINT : done));
    return 0;
}

static void import_job_free(gpointer data)
{
    struct import_job *j = data;
    g_free(j->db_path);
    g_free(j->name);
    g_free(j->path);
    g_free(j->error);
    if (j->skipped)
        g_string_free(j->skipped, TRUE);
    g_free(j);
}

/* Runs on the import thread: a file or row left out. */
static void import_warn(void *ud, const char *msg)
{
    struct import_job *j = ud;
    if (j->nskipped++ < 3)
        g_string_append_printf(j->skipped, "\n%s", msg);
}

static void import_thread(GTask *task, gpointer source, gpointer data, GCancellable *c)
{
    struct import_job *j = data;
    struct nl_error err = {0};
    struct nl_store *s;
    const char *paths[] = {j->path};
    struct nl_import_opts o = {.val_fraction = (float)j->val,
                               .test_fraction = (float)j->test,
                               .seed = 1,
                               .channels = j->channels,
                               .skip_bad = j->skip_bad,
                               .warn = import_warn,
                               .warn_ud = j,
                               .progress = import_progress,
                               .progress_ud = j};

    /* One connection per thread. */
    int rc = nl_store_open(&s, j->db_path, &err);
    if (rc == 0) {
        rc = nl_import(s, j->name, paths, 1, &o, &err);
        nl_store_close(s);
    }
    if (rc < 0)
        j->error = g_strdup(err.msg);
    g_task_return_boolean(task, TRUE);
}

/* The page has left its window (the window closed): work finished since is dropped. */
static gboolean datasets_gone(NlDatasetsPage *p)
{
    return gtk_widget_get_root(GTK_WIDGET(p)) == NULL;
}

/* The progress bar follows the import thread's count; it pulses until the count is known. */
static gboolean pulse(gpointer data)
{
    NlDatasetsPage *p = data;
    if (datasets_gone(p) || !p->job) {
        p->pulse = 0;
        return G_SOURCE_REMOVE;
    }
    gint done = g_atomic_int_get(&p->job->done), total = g_atomic_int_get(&p->job->total);
    if (total > 0) {
        char *text = g_strdup_printf("Importing %s: %d of %d", p->job->name, done, total);
        gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->progress), (double)done / total);
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), text);
        g_free(text);
    } else {
        gtk_progress_bar_pulse(GTK_PROGRESS_BAR(p->progress));
    }
    return G_SOURCE_CONTINUE;
}

static gboolean check_name(NlDatasetsPage *p);

static void import_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(source);
    struct import_job *j = g_task_get_task_data(G_TASK(res));

    if (datasets_gone(p))
        return;
    if (p->pulse)
        g_source_remove(p->pulse);
    p->pulse = 0;
    p->job = NULL;
    p->importing = FALSE;
    gtk_widget_set_visible(p->progress, FALSE);
    check_name(p);
    if (j->error) {
        nl_window_notify(p->win, "Import failed: %s", j->error);
        return;
    }
    datasets_page_refresh(p);
    nl_window_select_dataset(p->win, j->name);
    if (j->nskipped > 0)
        nl_window_notify(p->win, "Imported “%s”, leaving out %d bad file%s or row%s:%s%s", j->name,
                         j->nskipped, j->nskipped == 1 ? "" : "s", j->nskipped == 1 ? "" : "s",
                         j->skipped->str, j->nskipped > 3 ? "\n…" : "");
    else
        nl_window_notify(p->win, "Imported “%s”", j->name);
    /* The next import takes its own file's name unless one is typed. */
    gtk_editable_set_text(GTK_EDITABLE(p->name), "");
}

/* The first of NAME-2, NAME-3… that the store does not hold (freed with g_free). */
static char *free_name(NlDatasetsPage *p, const char *name)
{
    struct nl_error err = {0};
    for (int i = 2;; i++) {
        char *c = g_strdup_printf("%s-%d", name, i);
        if (nl_dataset_exists(p->win->store, c, &err) != 1)
            return c;
        g_free(c);
    }
}

/* What is wrong with name as the name of a new dataset, in the window's terms, or NULL (freed
 * with g_free). An empty name is fine: the file's own name is taken. */
static char *name_problem(NlDatasetsPage *p, const char *name)
{
    struct nl_error err = {0};
    char *t = g_strstrip(g_strdup(name));
    char *why = NULL;
    if (name[0] && !t[0]) {
        why = g_strdup("A name needs a letter or a digit: this one is only spaces. Clear it to "
                       "use the file's name.");
    } else if (strlen(t) > 100) {
        why = g_strdup("Keep the name under 100 characters.");
    } else if (t[0] && nl_dataset_exists(p->win->store, t, &err) == 1) {
        char *other = free_name(p, t);
        why = g_strdup_printf("“%s” exists: delete it with the bin button beside its title, or "
                              "choose another name, such as “%s”.",
                              t, other);
        g_free(other);
    }
    g_free(t);
    return why;
}

/* Marks the Name field (and holds the import buttons) while its text cannot name a new
 * dataset; returns whether it can. */
static gboolean check_name(NlDatasetsPage *p)
{
    char *why = name_problem(p, gtk_editable_get_text(GTK_EDITABLE(p->name)));
    if (why)
        gtk_widget_add_css_class(p->name, "error");
    else
        gtk_widget_remove_css_class(p->name, "error");
    gtk_label_set_text(GTK_LABEL(p->name_hint), why ? why : "");
    gtk_widget_set_visible(p->name_hint, why != NULL);
    gtk_accessible_update_state(GTK_ACCESSIBLE(p->name), GTK_ACCESSIBLE_STATE_INVALID,
                                why ? GTK_ACCESSIBLE_INVALID_TRUE : GTK_ACCESSIBLE_INVALID_FALSE,
                                -1);
    const gboolean can = why == NULL && !p->importing;
    const gboolean named = why == NULL;
    nl_page_set_enabled(GTK_WIDGET(p), "datasets.import", can);
    nl_page_set_enabled(GTK_WIDGET(p), "datasets.import-csv", can);
    g_free(why);
    return named;
}

static void name_changed(GtkEditable *e, gpointer data)
{
    check_name(data);
}

int datasets_page_thumbs(NlDatasetsPage *p, const char *const **captions)
{
    *captions = (const char *const *)p->captions;
    return p->nthumbs;
}

const char *datasets_page_columns(NlDatasetsPage *p)
{
    return p->columns_text->str;
}

const char *datasets_page_docs(NlDatasetsPage *p)
{
    return p->docs_text->str;
}

const char *datasets_page_info(NlDatasetsPage *p)
{
    return gtk_label_get_text(GTK_LABEL(p->info));
}

const char *datasets_page_samples_title(NlDatasetsPage *p)
{
    return gtk_label_get_text(GTK_LABEL(p->samples_title));
}

const char *datasets_page_name_hint(NlDatasetsPage *p)
{
    return gtk_widget_get_visible(p->name_hint) ? gtk_label_get_text(GTK_LABEL(p->name_hint))
                                                : NULL;
}

static void start_import(NlDatasetsPage *p, const char *given, const char *path)
{
    if (p->importing)
        return;
    char *name = g_strstrip(g_strdup(given));
    char *why = name_problem(p, name);
    if (why || !name[0]) {
        /* Shown at the field, the name there, nothing started. */
        gtk_stack_set_visible_child_name(p->win->stack, "datasets");
        gtk_editable_set_text(GTK_EDITABLE(p->name), given);
        if (!name[0])
            nl_window_notify(p->win, "Type a name for the dataset in Name");
        g_free(why);
        g_free(name);
        return;
    }
    struct import_job *j = g_new0(struct import_job, 1);
    j->db_path = g_strdup(p->win->db_path);
    j->name = name;
    j->skip_bad = gtk_check_button_get_active(GTK_CHECK_BUTTON(p->skip_bad));
    j->skipped = g_string_new(NULL);
    j->path = g_strdup(path);
    j->val = gtk_spin_button_get_value(GTK_SPIN_BUTTON(p->val));
    j->test = gtk_spin_button_get_value(GTK_SPIN_BUTTON(p->test));
    static const int channels[] = {0, 1, 3};
    guint chosen = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->channels));
    j->channels = chosen < 3 ? channels[chosen] : 0;
    p->importing = TRUE;
    p->job = j;
    check_name(p);
    gtk_widget_set_visible(p->progress, TRUE);
    char *text = g_strdup_printf("Importing %s…", j->name);
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->progress), text);
    g_free(text);
    p->pulse = g_timeout_add(100, pulse, p);
    /* The task holds the page until it is done; import_done checks that it is still in its
     * window. */
    GTask *task = g_task_new(p, NULL, import_done, NULL);
    g_task_set_task_data(task, j, import_job_free);
    g_task_run_in_thread(task, import_thread);
    g_object_unref(task);
}

/* datasets.import-source (name, path): imports a folder or a CSV file without asking. */
static void import_source(GtkWidget *widget, const char *action, GVariant *param)
{
    const char *name, *path;
    g_variant_get(param, "(&s&s)", &name, &path);
    start_import(NL_DATASETS_PAGE(widget), name, path);
}

static void chooser_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    NlDatasetsPage *p = data;
    if (response == GTK_RESPONSE_ACCEPT) {
        GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
        char *path = g_file_get_path(f);
        const char *typed = gtk_editable_get_text(GTK_EDITABLE(p->name));
        char *name = typed[0] ? g_strdup(typed) : g_file_get_basename(f);
        /* A file's name without its extension (data.csv: data). */
        char *dot = typed[0] ? NULL : strrchr(name, '.');
        if (dot && dot != name)
            *dot = '\0';
        if (path)
            gtk_widget_activate_action(GTK_WIDGET(p), "datasets.import-source", "(ss)", name, path);
        g_free(name);
        g_free(path);
        g_object_unref(f);
    }
    g_object_unref(dialog);
}

/* datasets.import: asks for a folder (IDX files or PNG/JPEG class folders), then imports it. */
static void import_ask(GtkWidget *widget, const char *action, GVariant *param)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(widget);
    gtk_stack_set_visible_child_name(p->win->stack, "datasets");
    if (!check_name(p))
        return;
    GtkFileChooserNative *d = gtk_file_chooser_native_new(
        "Import a Folder of IDX Files or Image Class Folders", GTK_WINDOW(p->win),
        GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER, "_Import", "_Cancel");
    g_signal_connect(d, "response", G_CALLBACK(chooser_response), p);
    gtk_native_dialog_show(GTK_NATIVE_DIALOG(d));
}

/* datasets.import-csv: asks for a CSV file, then imports it. */
static void import_csv_ask(GtkWidget *widget, const char *action, GVariant *param)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(widget);
    gtk_stack_set_visible_child_name(p->win->stack, "datasets");
    if (!check_name(p))
        return;
    GtkFileChooserNative *d =
        gtk_file_chooser_native_new("Import a CSV File", GTK_WINDOW(p->win),
                                    GTK_FILE_CHOOSER_ACTION_OPEN, "_Import", "_Cancel");
    GtkFileFilter *filter = gtk_file_filter_new();
    gtk_file_filter_set_name(filter, "CSV files");
    gtk_file_filter_add_pattern(filter, "*.csv");
    gtk_file_filter_add_pattern(filter, "*.tsv");
    gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(d), filter);
    g_object_unref(filter);
    g_signal_connect(d, "response", G_CALLBACK(chooser_response), p);
    gtk_native_dialog_show(GTK_NATIVE_DIALOG(d));
}

static void select_dataset(GtkWidget *widget, const char *action, GVariant *param)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(widget);
    nl_window_select_dataset(p->win, g_variant_get_string(param, NULL));
}

static void remove_confirmed(gpointer data)
{
    NlDatasetsPage *p = data;
    struct nl_error err = {0};
    if (!p->win->data)
        return;
    char *name = g_strdup(p->win->data->name);
    nl_window_select_dataset(p->win, NULL);
    if (nl_dataset_remove(p->win->store, name, &err) < 0)
        nl_window_notify(p->win, "%s", err.msg);
    else
        nl_window_notify(p->win, "Removed “%s”", name);
    g_free(name);
    datasets_page_refresh(p);
}

/* datasets.remove: the selected dataset, once confirmed. */
static void remove_dataset(GtkWidget *widget, const char *action, GVariant *param)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(widget);
    if (!p->win->data)
        return;
    char *q = g_strdup_printf("Remove the dataset “%s”?", p->win->data->name);
    nl_window_confirm(p->win, q,
                      "Its samples leave the store. Runs trained on it stay, but cannot be "
                      "evaluated or fine-tuned until it is imported again.",
                      "_Remove", remove_confirmed, p);
    g_free(q);
}

static void row_activated(GtkListBox *box, GtkListBoxRow *row, gpointer data)
{
    NlDatasetsPage *p = data;
    const char *name = g_object_get_data(G_OBJECT(row), "nl-name");
    if (name)
        nl_window_select_dataset(p->win, name);
}

static GtkWidget *dataset_row(const struct nl_dataset_info *d)
{
    GtkWidget *row = gtk_list_box_row_new();
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    gtk_widget_set_margin_start(box, 12);
    gtk_widget_set_margin_end(box, 12);
    gtk_widget_set_margin_top(box, 8);
    gtk_widget_set_margin_bottom(box, 8);
    GtkWidget *name = gtk_label_new(d->name);
    gtk_label_set_xalign(GTK_LABEL(name), 0);
    gtk_widget_add_css_class(name, "heading");
    /* A regression dataset has one "class", its target: name the task instead. */
    char *task = d->regression ? g_strdup_printf("regression of “%s”", d->target)
                               : g_strdup_printf("%d classes", d->nclasses);
    char *text = g_strdup_printf("%s · %d×%d×%d · %s\n%u train · %u val · %u test", d->kind,
                                 d->shape.c, d->shape.h, d->shape.w, task, d->count[NL_TRAIN],
                                 d->count[NL_VAL], d->count[NL_TEST]);
    g_free(task);
    GtkWidget *sub = gtk_label_new(text);
    g_free(text);
    gtk_label_set_xalign(GTK_LABEL(sub), 0);
    gtk_widget_add_css_class(sub, "dim-label");
    gtk_widget_add_css_class(sub, "caption");
    gtk_box_append(GTK_BOX(box), name);
    gtk_box_append(GTK_BOX(box), sub);
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), box);
    g_object_set_data_full(G_OBJECT(row), "nl-name", g_strdup(d->name), g_free);
    return row;
}

static void select_row_of(NlDatasetsPage *p)
{
    const char *cur = p->win->data ? p->win->data->name : NULL;
    for (GtkWidget *r = gtk_widget_get_first_child(p->list); r;
         r = gtk_widget_get_next_sibling(r)) {
        const char *name = g_object_get_data(G_OBJECT(r), "nl-name");
        if (cur && name && strcmp(name, cur) == 0) {
            gtk_list_box_select_row(GTK_LIST_BOX(p->list), GTK_LIST_BOX_ROW(r));
            return;
        }
    }
    gtk_list_box_unselect_all(GTK_LIST_BOX(p->list));
}

void datasets_page_refresh(NlDatasetsPage *p)
{
    struct nl_error err = {0};
    struct nl_dataset_info *list;
    int n;
    GtkWidget *child;

    while ((child = gtk_widget_get_first_child(p->list)))
        gtk_list_box_remove(GTK_LIST_BOX(p->list), child);
    if (nl_dataset_list(p->win->store, &list, &n, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        return;
    }
    for (int i = 0; i < n; i++)
        gtk_list_box_append(GTK_LIST_BOX(p->list), dataset_row(&list[i]));
    /* The first dataset is selected when none is. */
    if (!p->win->data && !p->win->loading && n > 0)
        nl_window_select_dataset(p->win, list[0].name);
    nl_free(list);
    select_row_of(p);
}

static void free_thumbs(NlDatasetsPage *p)
{
    g_free(p->pixels);
    p->pixels = NULL;
    if (p->captions)
        g_strfreev(p->captions);
    p->captions = NULL;
    p->nthumbs = 0;
    g_free(p->aug_pixels);
    p->aug_pixels = NULL;
    p->naug = 0;
}

static void add_cell(GtkWidget *grid, int col, int row, const char *text, gboolean head)
{
    GtkWidget *l = gtk_label_new(text);
    gtk_label_set_xalign(GTK_LABEL(l), col == 0 ? 0.0f : 1.0f);
    if (head)
        gtk_widget_add_css_class(l, "heading");
    else if (col > 0)
        gtk_widget_add_css_class(l, "numeric");
    gtk_grid_attach(GTK_GRID(grid), l, col, row, 1, 1);
}

/* A CSV dataset's source columns as its import made them (nl_table_column): each one's kind
 * (numeric, categorical, the target or label), its train statistics and what fills it. */
static void fill_columns(NlDatasetsPage *p, const struct nl_dataset *d)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->columns_table)))
        gtk_grid_remove(GTK_GRID(p->columns_table), child);
    g_string_truncate(p->columns_text, 0);
    struct nl_table *t = NULL;
    struct nl_error err = {0};
    const gboolean csv = d && strcmp(d->kind, "csv") == 0;
    gtk_widget_set_visible(p->columns_table, csv);
    if (!csv)
        return;
    if (nl_table_open(&t, d, NULL, NULL, &err) < 0) {
        add_cell(p->columns_table, 0, 0, err.msg, FALSE);
        g_string_append(p->columns_text, err.msg);
        return;
    }
    /* A column a line (name, kind), its statistics wrapped under it: narrow panes fit. */
    add_cell(p->columns_table, 0, 0, "Column", TRUE);
    add_cell(p->columns_table, 1, 0, "Kind", TRUE);
    for (int col = 0; col < nl_table_columns(t); col++) {
        struct nl_table_column c;
        nl_table_column(t, col, &c);
        GString *st = g_string_new(NULL);
        if (strcmp(c.kind, "categorical") == 0) {
            g_string_append_printf(st, "%d levels", c.levels);
            for (int k = 0; k < c.kept && k < 5; k++)
                g_string_append_printf(st, "%s%s", k ? ", " : ": ", c.top[k]);
            if (c.kept > 5)
                g_string_append(st, "…");
        } else if (strcmp(c.kind, "label") != 0) {
            g_string_append_printf(st, "mean %.4g, std %.4g, min %.4g, max %.4g", c.mean, c.std,
                                   c.min, c.max);
        }
        if (c.missing > 0)
            g_string_append_printf(st, "%s%ld missing%s%s", st->len ? "; " : "", c.missing,
                                   c.fill ? ", filled with " : "", c.fill ? c.fill : "");
        char inputs[48];
        if (c.embedded)
            g_snprintf(inputs, sizeof inputs, "embedded (%d rows)", c.kept + 1);
        else
            g_snprintf(inputs, sizeof inputs, "%d input%s", c.features, c.features == 1 ? "" : "s");
        GtkWidget *name = gtk_label_new(c.name);
        gtk_label_set_xalign(GTK_LABEL(name), 0);
        gtk_label_set_ellipsize(GTK_LABEL(name), PANGO_ELLIPSIZE_END);
        gtk_label_set_max_width_chars(GTK_LABEL(name), 16);
        gtk_widget_set_tooltip_text(name, c.name);
        gtk_widget_set_margin_top(name, col ? 4 : 0);
        gtk_grid_attach(GTK_GRID(p->columns_table), name, 0, 2 * col + 1, 1, 1);
        GtkWidget *kind = gtk_label_new(c.kind);
        gtk_label_set_xalign(GTK_LABEL(kind), 0);
        gtk_widget_set_margin_top(kind, col ? 4 : 0);
        gtk_widget_add_css_class(kind, strcmp(c.kind, "numeric") == 0 ? "dim-label" : "accent");
        gtk_grid_attach(GTK_GRID(p->columns_table), kind, 1, 2 * col + 1, 1, 1);
        char *line = c.features ? g_strdup_printf("%s%s%s", st->str, st->len ? " · " : "", inputs)
                                : g_strdup(st->str);
        GtkWidget *stats = gtk_label_new(line);
        gtk_label_set_xalign(GTK_LABEL(stats), 0);
        gtk_label_set_wrap(GTK_LABEL(stats), TRUE);
        gtk_label_set_max_width_chars(GTK_LABEL(stats), 56);
        gtk_widget_add_css_class(stats, "caption");
        gtk_widget_add_css_class(stats, "dim-label");
        gtk_grid_attach(GTK_GRID(p->columns_table), stats, 0, 2 * col + 2, 2, 1);
        g_string_append_printf(p->columns_text, "%s\t%s\t%s\n", c.name, c.kind, line);
        g_free(line);
        g_string_free(st, TRUE);
    }
    nl_table_free(t);
}

/* One training document r of text dataset d as its tokens' words with its class, into the page
 * (markup) and its text for tests; a word outside the vocabulary (stored as the
 * out-of-vocabulary token) is marked. */
static void add_doc(NlDatasetsPage *p, const struct nl_dataset *d, uint32_t r)
{
    const int len = (int)nl_shape_size(d->shape);
    const float *x = d->split[NL_TRAIN].x;
    GString *m = g_string_new(NULL);
    char *cls = g_markup_escape_text(d->class_names[d->split[NL_TRAIN].y[r]], -1);
    g_string_append_printf(m, "<b>%s</b>  ", cls);
    g_string_append_printf(p->docs_text, "%s:", d->class_names[d->split[NL_TRAIN].y[r]]);
    g_free(cls);
    int words = 0, unknown = 0;
    for (int i = 0; i < len; i++) {
        const int id = (int)x[(size_t)r * len + i];
        if (id <= 0 || id >= d->nvocab)
            continue; /* padding */
        words++;
        if (id == 1) {
            unknown++;
            g_string_append(m, " <span underline=\"error\" alpha=\"70%\">⟨unknown⟩</span>");
            g_string_append(p->docs_text, " ⟨unknown⟩");
        } else {
            char *w = g_markup_escape_text(d->vocab[id], -1);
            g_string_append_printf(m, " %s", w);
            g_string_append_printf(p->docs_text, " %s", d->vocab[id]);
            g_free(w);
        }
    }
    g_string_append_printf(m, "  <small>(%d words, %d out of the vocabulary)</small>", words,
                           unknown);
    g_string_append_c(p->docs_text, '\n');
    GtkWidget *l = gtk_label_new(NULL);
    gtk_label_set_markup(GTK_LABEL(l), m->str);
    gtk_label_set_xalign(GTK_LABEL(l), 0);
    gtk_label_set_wrap(GTK_LABEL(l), TRUE);
    gtk_label_set_max_width_chars(GTK_LABEL(l), 80);
    gtk_box_append(GTK_BOX(p->docs_box), l);
    g_string_free(m, TRUE);
}

/* A text dataset's first training documents of each class (DOCS_PER_CLASS, DOCS in all at most),
 * class by class: the first documents of a sorted folder are often all of one class. */
static void fill_docs(NlDatasetsPage *p, const struct nl_dataset *d)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->docs_box)))
        gtk_box_remove(GTK_BOX(p->docs_box), child);
    g_string_truncate(p->docs_text, 0);
    p->ndocs = 0;
    const gboolean text = d && d->nvocab > 0;
    gtk_widget_set_visible(p->docs_box, text);
    if (!text)
        return;
    const uint32_t n = d->split[NL_TRAIN].n;
    const int per = MAX(1, MIN(DOCS_PER_CLASS, DOCS / MAX(1, d->nclasses)));
    for (int k = 0; k < d->nclasses && p->ndocs < DOCS; k++) {
        int got = 0;
        for (uint32_t r = 0; r < n && got < per && p->ndocs < DOCS; r++) {
            if (d->split[NL_TRAIN].y[r] != k)
                continue;
            add_doc(p, d, r);
            got++;
            p->ndocs++;
        }
    }
}

/* A CSV dataset's first training rows under its feature names, with their class. */
static void fill_rows_table(NlDatasetsPage *p, const struct nl_dataset *d)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->rows_table)))
        gtk_grid_remove(GTK_GRID(p->rows_table), child);
    fill_columns(p, d);
    fill_docs(p, d);
    const gboolean is_text = d && d->nvocab > 0;
    const gboolean is_rows = d && d->dtype == NL_F32 && !is_text;
    gtk_widget_set_visible(p->rows_scroll, is_rows);
    /* Rows and texts have no pictures: no thumbnails, nothing to augment. Their tables and lines
     * take the pane's width, the counts above them; a table's columns take the height they
     * need (up to a third of the page), its first rows the rest. */
    const gboolean pictures = !is_rows && !is_text;
    gtk_widget_set_visible(p->thumbs, pictures);
    gtk_widget_set_visible(gtk_widget_get_parent(p->augment), pictures);
    gtk_widget_set_visible(p->aug_title, pictures);
    gtk_widget_set_visible(p->aug_thumbs, pictures);
    gtk_widget_set_visible(p->aug_scroll, pictures);
    gtk_orientable_set_orientation(GTK_ORIENTABLE(p->split), pictures ? GTK_ORIENTATION_HORIZONTAL
                                                                      : GTK_ORIENTATION_VERTICAL);
    gtk_widget_set_vexpand(p->samples_scroll, !is_rows);
    gtk_scrolled_window_set_propagate_natural_height(GTK_SCROLLED_WINDOW(p->samples_scroll),
                                                     is_rows);
    gtk_scrolled_window_set_max_content_height(GTK_SCROLLED_WINDOW(p->samples_scroll),
                                               is_rows ? 160 : -1);
    if (!is_rows)
        return;
    const int nf = (int)nl_shape_size(d->shape);
    struct nl_json_doc *doc = NULL;
    struct nl_error err = {0};
    const struct nl_json *names = NULL;
    if (d->preprocessing &&
        nl_json_parse(&doc, d->preprocessing, strlen(d->preprocessing), "preprocessing", &err) == 0)
        names = nl_json_get(nl_json_root(doc), "feature_names");
    for (int f = 0; f <= nf; f++) {
        char fallback[32];
        g_snprintf(fallback, sizeof fallback, "feature %d", f + 1);
        const char *name = f == nf ? (d->regression ? d->class_names[0] : "class")
                           : names && names->type == NL_JSON_ARRAY && (size_t)f < names->count &&
                                   names->items[f].type == NL_JSON_STRING
                               ? names->items[f].string
                               : fallback;
        add_cell(p->rows_table, f, 0, name, TRUE);
    }
    const float *x = d->split[NL_TRAIN].x;
    const uint32_t rows = MIN(d->split[NL_TRAIN].n, FIRST_ROWS);
    for (uint32_t r = 0; r < rows; r++) {
        for (int f = 0; f < nf; f++) {
            char buf[32];
            g_snprintf(buf, sizeof buf, "%g", x[(size_t)r * nf + f]);
            add_cell(p->rows_table, f, (int)r + 1, buf, FALSE);
        }
        char target[32];
        if (d->regression)
            g_snprintf(target, sizeof target, "%.6g",
                       d->split[NL_TRAIN].t[r] * d->target_std + d->target_mean);
        add_cell(p->rows_table, nf, (int)r + 1,
                 d->regression ? target : d->class_names[d->split[NL_TRAIN].y[r]], FALSE);
    }
    nl_json_free(doc);
}

void datasets_page_dataset_changed(NlDatasetsPage *p)
{
    const struct nl_dataset *d = p->win->data;
    GtkWidget *child;

    while ((child = gtk_widget_get_first_child(p->counts)))
        gtk_grid_remove(GTK_GRID(p->counts), child);
    free_thumbs(p);
    gtk_widget_set_sensitive(p->counts, d != NULL);
    gtk_widget_set_visible(p->counts, d != NULL);
    gtk_widget_set_sensitive(p->thumbs, d != NULL);
    nl_page_set_enabled(GTK_WIDGET(p), "datasets.remove", d != NULL);
    if (!d) {
        fill_rows_table(p, NULL);
        gtk_label_set_text(GTK_LABEL(p->title), "No dataset selected");
        gtk_label_set_text(GTK_LABEL(p->info),
                           "No dataset yet: import a folder of IDX files or of image class "
                           "folders with Import a Folder…, or a CSV file with Import a CSV "
                           "File…, on the left.");
        gtk_widget_queue_draw(p->thumbs);
        select_row_of(p);
        return;
    }
    gtk_label_set_text(GTK_LABEL(p->title), d->name);
    GString *info = g_string_new(NULL);
    if (d->nvocab > 0) {
        double coverage = NAN;
        struct nl_json_doc *doc = NULL;
        struct nl_error err = {0};
        if (d->preprocessing && nl_json_parse(&doc, d->preprocessing, strlen(d->preprocessing),
                                              "preprocessing", &err) == 0) {
            const struct nl_json *cov = nl_json_get(nl_json_root(doc), "coverage");
            if (cov && cov->type == NL_JSON_NUMBER)
                coverage = cov->number;
        }
        nl_json_free(doc);
        g_string_append_printf(info,
                               "%s from %s\nDocuments of %d tokens, %d classes · a vocabulary of "
                               "%d words (with padding and out-of-vocabulary)",
                               d->kind, d->source, (int)nl_shape_size(d->shape), d->nclasses,
                               d->nvocab);
        if (isfinite(coverage))
            g_string_append_printf(info, ", covering %.1f%% of the train split's words",
                                   100 * coverage);
    } else if (d->dtype == NL_F32 && d->regression) {
        g_string_append_printf(info,
                               "%s from %s\nRows of %d features, a regression target “%s” (mean "
                               "%.4g, std %.4g) · each feature standardised with the train "
                               "split's mean and deviation",
                               d->kind, d->source, (int)nl_shape_size(d->shape), d->class_names[0],
                               d->target_mean, d->target_std);
    } else if (d->dtype == NL_F32) {
        g_string_append_printf(info,
                               "%s from %s\nRows of %d features, %d classes · each feature "
                               "standardised with the train split's mean and deviation",
                               d->kind, d->source, (int)nl_shape_size(d->shape), d->nclasses);
    } else {
        g_string_append_printf(info,
                               "%s from %s\n%d×%d×%d 8-bit samples, %d classes · normalised with",
                               d->kind, d->source, d->shape.c, d->shape.h, d->shape.w, d->nclasses);
        for (int i = 0; i < d->nnorm; i++)
            g_string_append_printf(info, "%s mean %.3f, std %.3f", i ? ";" : "", d->mean[i],
                                   d->std[i]);
    }
    gtk_label_set_text(GTK_LABEL(p->info), info->str);
    g_string_free(info, TRUE);

    /* Class counts per split. */
    add_cell(p->counts, 0, 0, "Class", TRUE);
    for (int s = 0; s < NL_NSPLITS; s++)
        add_cell(p->counts, s + 1, 0, nl_split_names[s], TRUE);
    uint32_t *counts = g_new0(uint32_t, (size_t)d->nclasses * NL_NSPLITS);
    for (int s = 0; s < NL_NSPLITS; s++)
        for (uint32_t i = 0; i < d->split[s].n; i++)
            counts[d->split[s].y[i] * NL_NSPLITS + s]++;
    for (int k = 0; k < d->nclasses; k++) {
        add_cell(p->counts, 0, k + 1, d->class_names[k], FALSE);
        for (int s = 0; s < NL_NSPLITS; s++) {
            char buf[16];
            g_snprintf(buf, sizeof buf, "%u", counts[k * NL_NSPLITS + s]);
            add_cell(p->counts, s + 1, k + 1, buf, FALSE);
        }
    }
    add_cell(p->counts, 0, d->nclasses + 1, "Total", TRUE);
    for (int s = 0; s < NL_NSPLITS; s++) {
        char buf[16];
        g_snprintf(buf, sizeof buf, "%u", d->split[s].n);
        add_cell(p->counts, s + 1, d->nclasses + 1, buf, TRUE);
    }
    g_free(counts);

    /* Thumbnails: a few training samples of each class, in class order, 8-bit datasets only. */
    const int per = MIN(PER_CLASS, MAX(1, THUMBS / MAX(d->nclasses, 1)));
    if (d->dtype == NL_U8 && d->split[NL_TRAIN].n > 0) {
        const size_t size = nl_shape_size(d->shape);
        const uint32_t n = d->split[NL_TRAIN].n;
        const uint8_t *x = d->split[NL_TRAIN].x;
        const int32_t *y = d->split[NL_TRAIN].y;
        const int cap = MIN(THUMBS, per * d->nclasses);
        p->pixels = g_new(uint8_t, size * (size_t)cap);
        p->captions = g_new0(char *, (size_t)cap + 1);
        for (int k = 0; k < d->nclasses && p->nthumbs < cap; k++) {
            int got = 0;
            for (uint32_t i = 0; i < n && got < per && p->nthumbs < cap; i++) {
                if (y[i] != k)
                    continue;
                memcpy(p->pixels + size * (size_t)p->nthumbs, x + size * i, size);
                p->captions[p->nthumbs++] = g_strdup(d->class_names[k]);
                got++;
            }
        }
    }
    fill_rows_table(p, d);
    char *st =
        d->nvocab > 0 ? g_strdup_printf("Training documents, the first %d of each class, as the "
                                        "words of their tokens; words outside the vocabulary are "
                                        "marked",
                                        MAX(1, MIN(DOCS_PER_CLASS, DOCS / MAX(1, d->nclasses))))
        : d->dtype == NL_F32 ? g_strdup_printf("Its columns, and the first %d training rows",
                                               (int)MIN(d->split[NL_TRAIN].n, FIRST_ROWS))
                             : g_strdup_printf("Training samples, up to %d of each class", per);
    gtk_label_set_text(GTK_LABEL(p->samples_title), st);
    g_free(st);
    gtk_widget_queue_resize(p->thumbs);
    gtk_widget_queue_draw(p->thumbs);
    gtk_label_set_text(GTK_LABEL(p->aug_title),
                       "A training batch as augmentation changes it appears here.");
    gtk_drawing_area_set_content_height(GTK_DRAWING_AREA(p->aug_thumbs), 0);
    select_row_of(p);
}

/* datasets.augment-preview: the first training samples as the augmentation in the entry changes
 * them, a new draw each time. */
static void augment_preview(GtkWidget *widget, const char *action, GVariant *param)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(widget);
    const struct nl_dataset *d = p->win->data;
    struct nl_augment aug;
    struct nl_error err = {0};
    char *msg;

    if (!d || d->dtype != NL_U8 || d->split[NL_TRAIN].n == 0)
        return;
    if (nl_augment_parse(&aug, gtk_editable_get_text(GTK_EDITABLE(p->augment)), &err) < 0) {
        gtk_label_set_text(GTK_LABEL(p->aug_title), err.msg);
        return;
    }
    int n = (int)MIN(d->split[NL_TRAIN].n, AUG_THUMBS);
    g_free(p->aug_pixels);
    p->aug_pixels = g_malloc(nl_shape_size(d->shape) * (size_t)n);
    p->naug = 0;
    if (nl_augment_preview(d, &aug, ++p->aug_seed, n, p->aug_pixels, &err) < 0) {
        gtk_label_set_text(GTK_LABEL(p->aug_title), err.msg);
    } else {
        p->naug = n;
        msg =
            g_strdup_printf("The first %d training samples, augmented (draw %" G_GUINT64_FORMAT ")",
                            n, p->aug_seed);
        gtk_label_set_text(GTK_LABEL(p->aug_title), msg);
        g_free(msg);
    }
    gtk_widget_queue_resize(p->aug_thumbs);
    gtk_widget_queue_draw(p->aug_thumbs);
}

static struct chart_thumbs thumbs_of(NlDatasetsPage *p, int augmented)
{
    const struct nl_dataset *d = p->win->data;
    struct chart_thumbs t = {0};
    if (!d || !(augmented ? p->aug_pixels : p->pixels))
        return t;
    t.n = augmented ? p->naug : p->nthumbs;
    t.c = d->shape.c;
    t.h = d->shape.h;
    t.w = d->shape.w;
    t.pixels = augmented ? p->aug_pixels : p->pixels;
    /* The augmented preview draws the first training samples, whose classes are not those of
     * the thumbnails above it. */
    t.captions = augmented ? NULL : (const char *const *)p->captions;
    t.cell = 52;
    t.fg = nl_window_fg(p->thumbs);
    return t;
}

static void draw_thumbs(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    NlDatasetsPage *p = data;
    struct chart_thumbs t = thumbs_of(p, GTK_WIDGET(area) == p->aug_thumbs);
    if (t.n == 0)
        return;
    chart_thumbs_draw(cr, w, h, &t);
    int need = chart_thumbs_height(w, &t);
    if (gtk_drawing_area_get_content_height(area) != need)
        gtk_drawing_area_set_content_height(area, need);
}

G_DEFINE_FINAL_TYPE(NlDatasetsPage, nl_datasets_page, GTK_TYPE_WIDGET)

static void nl_datasets_page_init(NlDatasetsPage *p)
{
    gtk_widget_init_template(GTK_WIDGET(p));
    p->columns_text = g_string_new(NULL);
    p->docs_text = g_string_new(NULL);
    g_signal_connect(p->list, "row-activated", G_CALLBACK(row_activated), p);
    g_signal_connect(p->name, "changed", G_CALLBACK(name_changed), p);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->thumbs), draw_thumbs, p, NULL);
    gtk_drawing_area_set_content_height(GTK_DRAWING_AREA(p->thumbs), 200);
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->aug_thumbs), draw_thumbs, p, NULL);
}

static void nl_datasets_page_dispose(GObject *obj)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(obj);
    if (p->pulse) {
        g_source_remove(p->pulse);
        p->pulse = 0;
    }
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(GTK_WIDGET(obj))))
        gtk_widget_unparent(child);
    gtk_widget_dispose_template(GTK_WIDGET(obj), NL_TYPE_DATASETS_PAGE);
    G_OBJECT_CLASS(nl_datasets_page_parent_class)->dispose(obj);
}

static void nl_datasets_page_finalize(GObject *obj)
{
    NlDatasetsPage *p = NL_DATASETS_PAGE(obj);
    free_thumbs(p);
    g_string_free(p->columns_text, TRUE);
    g_string_free(p->docs_text, TRUE);
    G_OBJECT_CLASS(nl_datasets_page_parent_class)->finalize(obj);
}

static void nl_datasets_page_class_init(NlDatasetsPageClass *klass)
{
    GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
    G_OBJECT_CLASS(klass)->dispose = nl_datasets_page_dispose;
    G_OBJECT_CLASS(klass)->finalize = nl_datasets_page_finalize;
    nl_page_class_set_info(wc, "datasets", "Datasets", "folder-pictures-symbolic");
    nl_page_class_add_shortcut(wc, "<Control>i", "datasets.import");
    gtk_widget_class_set_layout_manager_type(wc, GTK_TYPE_BIN_LAYOUT);
    gtk_widget_class_set_template_from_resource(wc, "/org/nnlab/Nnlab/datasets-page.ui");
#define BIND(x) gtk_widget_class_bind_template_child(wc, NlDatasetsPage, x)
    BIND(list);
    BIND(name);
    BIND(name_hint);
    BIND(skip_bad);
    BIND(val);
    BIND(test);
    BIND(channels);
    BIND(import);
    BIND(import_csv);
    BIND(progress);
    BIND(title);
    BIND(info);
    BIND(counts);
    BIND(samples_title);
    BIND(thumbs);
    BIND(rows_table);
    BIND(columns_table);
    BIND(docs_box);
    BIND(augment);
    BIND(aug_title);
    BIND(aug_thumbs);
    BIND(split);
    BIND(counts_scroll);
    BIND(samples_scroll);
    BIND(rows_scroll);
    BIND(aug_scroll);
#undef BIND
    gtk_widget_class_install_action(wc, "datasets.import-source", "(ss)", import_source);
    gtk_widget_class_install_action(wc, "datasets.import-csv", NULL, import_csv_ask);
    gtk_widget_class_install_action(wc, "datasets.import", NULL, import_ask);
    gtk_widget_class_install_action(wc, "datasets.select", "s", select_dataset);
    gtk_widget_class_install_action(wc, "datasets.remove", NULL, remove_dataset);
    gtk_widget_class_install_action(wc, "datasets.augment-preview", NULL, augment_preview);
}

NlDatasetsPage *nl_datasets_page_new(NlWindow *w)
{
    NlDatasetsPage *p = g_object_ref_sink(g_object_new(NL_TYPE_DATASETS_PAGE, NULL));
    p->win = w;
    datasets_page_dataset_changed(p);
    return p;
}
