/* The predict page: the latest checkpoint of a run classifies a PNG or JPEG that is opened through
 * a file chooser or dropped on the page; for a run on a CSV dataset, a row typed into one field
 * per source column (or pasted whole into the first) goes through nl_table_row_text, so
 * categorical columns and empty fields are preprocessed as the import did, and a CSV file of such
 * rows, opened through a file chooser, goes through nl_table_read_csv on a worker thread (with
 * its own store, model and table) into a table of each row's prediction; a bad row stops it with
 * an error naming the file and line, and nothing of it is shown; for a run on a text
 * dataset, a typed text goes through nl_dataset_sample_from_text. A classification run's top
 * five classes are shown with probability bars; a regression run's prediction is one value in
 * the target's units. Each run in the picker says its dataset and input; an image is described
 * as read and as converted for the run, with a warning when it is far from the kind of image
 * the run trained on (colour against gray, or many times its size). */
#include <math.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "window.h"

#define TOP       5
#define CSV_SHOWN 500 /* rows of a CSV file shown in its table; all are predicted */

/* A run offered in the picker, with what it trained on. */
struct choice {
    char *name, *dataset, *kind; /* kind: the dataset's ("idx", "csv"...), "" when it is gone */
    struct nl_shape shape;
    int nclasses;
    int regression; /* the run predicts a value of its target */
};

struct _NlPredictPage {
    GtkWidget parent_instance;

    NlWindow *win; /* the window it is a page of (set once, by nl_predict_page_new) */
    GtkWidget *runs, *drop_area, *picture, *file, *verdict, *bars;
    GtkWidget *open, *run_info, *row_box, *row_fields, *image_box, *note;
    GtkWidget *text_box, *text_view;
    GtkWidget *csv_scroll, *csv_table; /* a CSV file's rows and their predictions */
    GString *csv_text;                 /* that table as text (tab-separated), for tests */
    char *csv_loading;                 /* the file being predicted, or NULL */
    GtkStringList *names;              /* the picker's labels */
    GPtrArray *choices;                /* struct choice, in the picker's order */
    GPtrArray *fields;   /* GtkEntry, one per feature column of the loaded CSV dataset */
    char *fields_for;    /* the dataset the fields are for */
    gboolean row_wanted; /* a row prediction waits for the model */
    gboolean spreading;  /* a pasted row is being spread over the fields */
    char *pending;       /* a row given before its run's fields were built, or NULL */
    /* The model loaded for the selected run. */
    char *run;
    struct nl_model *m;
    struct nl_dataset *d;
    struct nl_table *table; /* a CSV dataset's columns and their preprocessing, or NULL */
    GString *warnings;      /* what the table said of the last row (unseen levels) */
    /* The last prediction: n classes with their probabilities, or a regression run's value. */
    int n;
    char *value; /* "target ≈ 3.25", or NULL */
    char *labels[TOP];
    double probs[TOP];
    char *path;
    gboolean refreshing; /* the list of runs is being rebuilt */
    char *loading;       /* the run whose model is being loaded, or NULL */
};

/* A run's model and dataset loaded on a worker thread; owned by its GTask. */
struct load_job {
    char *db_path, *run;
    struct nl_model *m;
    struct nl_dataset *d;
    struct nl_error err;
};

static void load_job_free(gpointer data)
{
    struct load_job *j = data;
    g_free(j->db_path);
    g_free(j->run);
    nl_model_free(j->m);
    nl_dataset_free(j->d);
    g_free(j);
}

/* The page has left its window (the window closed): work finished since is dropped. Tasks hold
 * the page, not the window, so the page itself is still there. */
static gboolean gone(NlPredictPage *p)
{
    return gtk_widget_get_root(GTK_WIDGET(p)) == NULL;
}

static void load_thread(GTask *task, gpointer source, gpointer data, GCancellable *c)
{
    struct load_job *j = data;
    struct nl_store *s;
    if (nl_store_open(&s, j->db_path, &j->err) == 0) {
        nl_ui_load_run(s, j->run, &j->m, &j->d, &j->err);
        nl_store_close(s);
    }
    g_task_return_boolean(task, TRUE);
}

static void predict(NlPredictPage *p);
static void set_note(NlPredictPage *p, const char *text, gboolean warn);
static void build_fields(NlPredictPage *p, const struct nl_dataset *d);
static void spread_row(NlPredictPage *p, const char *text, guint from);
static gboolean row_mode(NlPredictPage *p);
static void clear_csv(NlPredictPage *p);

/* The table's warnings (a level the import did not see) for the note under the verdict. */
static void table_warn(void *ud, const char *msg)
{
    NlPredictPage *p = ud;
    g_string_append_printf(p->warnings, "%s%s.", p->warnings->len ? "\n" : "", msg);
}

static void clear_prediction(NlPredictPage *p)
{
    g_free(p->value);
    p->value = NULL;
    for (int i = 0; i < TOP; i++) {
        g_free(p->labels[i]);
        p->labels[i] = NULL;
    }
    p->n = 0;
    gtk_widget_queue_draw(p->bars);
}

static void load_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlPredictPage *p = NL_PREDICT_PAGE(source);
    struct load_job *j = g_task_get_task_data(G_TASK(res));
    if (gone(p) || !p->loading || strcmp(p->loading, j->run) != 0)
        return; /* the window closed, or another run was chosen meanwhile */
    g_free(p->loading);
    p->loading = NULL;
    if (!j->m) {
        gtk_label_set_text(GTK_LABEL(p->verdict), "");
        set_note(p, j->err.msg, TRUE);
        return;
    }
    nl_model_free(p->m);
    nl_dataset_free(p->d);
    g_free(p->run);
    p->m = j->m;
    p->d = j->d;
    p->run = g_strdup(j->run);
    j->m = NULL;
    j->d = NULL;
    nl_table_free(p->table);
    p->table = NULL;
    if (strcmp(p->d->kind, "csv") == 0) {
        struct nl_error err = {0};
        if (nl_table_open(&p->table, p->d, table_warn, p, &err) < 0) {
            set_note(p, err.msg, TRUE);
            return;
        }
        build_fields(p, p->d);
        if (p->pending)
            spread_row(p, p->pending, 0);
    }
    g_free(p->pending);
    p->pending = NULL;
    gtk_label_set_text(GTK_LABEL(p->verdict), "");
    predict(p);
}

/* Loads run's model and dataset on a worker thread, then predicts. */
static void load_model(NlPredictPage *p, const char *run)
{
    if (p->loading && strcmp(p->loading, run) == 0)
        return;
    g_free(p->loading);
    p->loading = g_strdup(run);
    struct load_job *j = g_new0(struct load_job, 1);
    j->db_path = g_strdup(p->win->db_path);
    j->run = g_strdup(run);
    gtk_label_set_text(GTK_LABEL(p->verdict), "Loading the model…");
    set_note(p, NULL, FALSE);
    GTask *task = g_task_new(p, NULL, load_done, NULL);
    g_task_set_task_data(task, j, load_job_free);
    g_task_run_in_thread(task, load_thread);
    g_object_unref(task);
}

static const struct choice *selected_choice(NlPredictPage *p)
{
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->runs));
    return i < p->choices->len ? p->choices->pdata[i] : NULL;
}

static const char *selected_run(NlPredictPage *p)
{
    const struct choice *c = selected_choice(p);
    return c ? c->name : NULL;
}

/* The selected run takes a row of a table (or a text): not an image. */
static gboolean row_mode(NlPredictPage *p)
{
    const struct choice *c = selected_choice(p);
    return c && (strcmp(c->kind, "csv") == 0 || strcmp(c->kind, "text") == 0);
}

static gboolean text_mode(NlPredictPage *p)
{
    const struct choice *c = selected_choice(p);
    return c && strcmp(c->kind, "text") == 0;
}

static void set_note(NlPredictPage *p, const char *text, gboolean warn)
{
    gtk_label_set_text(GTK_LABEL(p->note), text ? text : "");
    if (warn)
        gtk_widget_add_css_class(p->note, "nl-error");
    else
        gtk_widget_remove_css_class(p->note, "nl-error");
}

/* How an image file reads (size, colour or gray) and how it was converted for d, with a warning
 * when it is far from d's images; NULL when the file does not read as an image. */
static char *describe_image(const struct nl_dataset *d, const char *path, gboolean *far)
{
    GError *e = NULL;
    GdkPixbuf *pb = gdk_pixbuf_new_from_file(path, &e);
    *far = FALSE;
    if (!pb) {
        g_error_free(e);
        return NULL;
    }
    const int w = gdk_pixbuf_get_width(pb), h = gdk_pixbuf_get_height(pb);
    const int nc = gdk_pixbuf_get_n_channels(pb), stride = gdk_pixbuf_get_rowstride(pb);
    const guchar *px = gdk_pixbuf_read_pixels(pb);
    gboolean colour = FALSE;
    for (int y = 0; y < h && !colour && nc >= 3; y++)
        for (int x = 0; x < w && !colour; x++) {
            const guchar *q = px + (size_t)y * stride + (size_t)x * nc;
            colour = q[0] != q[1] || q[1] != q[2];
        }
    g_object_unref(pb);
    const gboolean gray_data = d->shape.c == 1;
    GString *t = g_string_new(NULL);
    g_string_append_printf(
        t, "Read as %d×%d %s; converted to %d×%d %s, as the training images of “%s” are.", w, h,
        colour ? "colour" : "gray", d->shape.w, d->shape.h, gray_data ? "gray" : "colour", d->name);
    const double scale = MAX((double)w / d->shape.w, (double)h / d->shape.h);
    if (colour && gray_data) {
        g_string_append_printf(t,
                               "\nThe run trained on %d×%d gray images: a colour picture is "
                               "far from them, so this answer may mean little.",
                               d->shape.w, d->shape.h);
        *far = TRUE;
    } else if (!colour && !gray_data) {
        g_string_append(t, "\nThe run trained on colour images: a gray one is far from them, "
                           "so this answer may mean little.");
        *far = TRUE;
    } else if (scale >= 8) {
        g_string_append_printf(t,
                               "\nThe image is %.0f times the size of the run's %d×%d images: "
                               "shrunk this much, its details are lost.",
                               scale, d->shape.w, d->shape.h);
        *far = TRUE;
    }
    return g_string_free(t, FALSE);
}

/* The top classes of probs (k) into the page's bars and verdict. */
static void show_top(NlPredictPage *p, float *probs, int k)
{
    p->n = MIN(TOP, k);
    for (int t = 0; t < p->n; t++) {
        int best = -1;
        for (int q = 0; q < k; q++)
            if (probs[q] >= 0 && (best < 0 || probs[q] > probs[best]))
                best = q;
        p->labels[t] = g_strdup(p->d->class_names[best]);
        p->probs[t] = probs[best];
        probs[best] = -1;
    }
    char *v = g_strdup_printf("%s (%.1f%%)", p->labels[0], 100.0 * p->probs[0]);
    gtk_label_set_text(GTK_LABEL(p->verdict), v);
    g_free(v);
}

/* Runs one normalised sample through the loaded model and shows its top classes, or a
 * regression run's value: the model's output, standardised as the targets were, put back in
 * the target's units. A forward-only executor, as `nnlab predict` and `nnlab eval` run (the
 * batchnorms folded into their convolutions): the same floats as theirs. */
static int classify(NlPredictPage *p, const float *in, struct nl_error *err)
{
    struct nl_exec *x = NULL;
    int rc = nl_exec_new_forward(&x, p->m, 1, err);
    if (rc == 0) {
        struct nl_rng rng;
        nl_rng_seed(&rng, 1);
        const float *y = nl_exec_forward(x, p->m->params, in, 1, 0, &rng);
        if (p->d->regression) {
            const double v = (double)y[0] * p->d->target_std + p->d->target_mean;
            p->value = g_strdup_printf("%s ≈ %.6g", p->d->class_names[0], v);
            gtk_label_set_text(GTK_LABEL(p->verdict), p->value);
        } else {
            const int k = p->m->nclasses;
            float *probs = g_new(float, (size_t)k);
            nl_softmax(probs, y, 1, k);
            show_top(p, probs, k);
            g_free(probs);
        }
    }
    nl_exec_free(x);
    return rc;
}

static void field_changed(GtkEditable *e, gpointer data)
{
    NlPredictPage *p = data;
    const char *t = gtk_editable_get_text(e);
    gtk_widget_remove_css_class(GTK_WIDGET(e), "error");
    /* A whole row pasted into one field is spread over the fields; a space splits only in a
     * numeric field (a categorical level may hold one). */
    guint at = 0;
    const gboolean cat = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(e), "nl-categorical"));
    if (!p->spreading && p->fields->len > 1 && strpbrk(t, cat ? ",;\t" : ",;\t ") &&
        strlen(t) > 1 && g_ptr_array_find(p->fields, e, &at)) {
        char *row = g_strdup(t);
        spread_row(p, row, at);
        g_free(row);
    }
}

static void field_activated(GtkEntry *e, gpointer data)
{
    gtk_widget_activate_action(GTK_WIDGET(e), "predict.row", NULL);
}

/* One field per feature column of d's table (the target or label column left out), named by the
 * CSV's header when it had one; a categorical column's field shows its most frequent levels, and
 * a column with a fill value says that an empty field is filled. */
static void build_fields(NlPredictPage *p, const struct nl_dataset *d)
{
    GtkWidget *child;
    if (p->fields_for && strcmp(p->fields_for, d->name) == 0)
        return;
    while ((child = gtk_widget_get_first_child(p->row_fields)))
        gtk_flow_box_remove(GTK_FLOW_BOX(p->row_fields), child);
    g_ptr_array_set_size(p->fields, 0);
    g_free(p->fields_for);
    p->fields_for = g_strdup(d->name);
    const int ncols = nl_table_columns(p->table);
    for (int col = 0; col < ncols; col++) {
        struct nl_table_column c;
        nl_table_column(p->table, col, &c);
        if (strcmp(c.kind, "target") == 0 || strcmp(c.kind, "label") == 0)
            continue;
        const gboolean cat = strcmp(c.kind, "categorical") == 0;
        GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
        GtkWidget *l = gtk_label_new(c.name);
        gtk_label_set_xalign(GTK_LABEL(l), 0);
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 12);
        gtk_widget_add_css_class(l, "caption");
        GString *tip = g_string_new(c.name);
        if (cat) {
            g_string_append_printf(tip, ": categorical, %d levels", c.levels);
            for (int k = 0; k < c.kept && k < 6; k++)
                g_string_append_printf(tip, "%s%s", k ? ", " : " (", c.top[k]);
            if (c.kept > 0)
                g_string_append(tip, c.kept > 6 ? "…)" : ")");
        } else {
            g_string_append_printf(tip, ": numeric, %.4g to %.4g in training", c.min, c.max);
        }
        if (c.fill)
            g_string_append_printf(tip, "; left empty, it is %s", c.fill);
        gtk_widget_set_tooltip_text(l, tip->str);
        GtkWidget *e = gtk_entry_new();
        gtk_editable_set_width_chars(GTK_EDITABLE(e), cat ? 10 : 8);
        if (!cat)
            gtk_entry_set_input_purpose(GTK_ENTRY(e), GTK_INPUT_PURPOSE_NUMBER);
        if (cat && c.kept > 0)
            gtk_entry_set_placeholder_text(GTK_ENTRY(e), c.top[0]);
        else if (c.fill)
            gtk_entry_set_placeholder_text(GTK_ENTRY(e), c.fill);
        gtk_widget_set_tooltip_text(e, tip->str);
        g_string_free(tip, TRUE);
        gtk_accessible_update_property(GTK_ACCESSIBLE(e), GTK_ACCESSIBLE_PROPERTY_LABEL, c.name,
                                       -1);
        g_object_set_data_full(G_OBJECT(e), "nl-feature", g_strdup(c.name), g_free);
        g_object_set_data(G_OBJECT(e), "nl-categorical", GINT_TO_POINTER(cat));
        g_object_set_data(G_OBJECT(e), "nl-fill", GINT_TO_POINTER(c.fill != NULL));
        g_signal_connect(e, "changed", G_CALLBACK(field_changed), p);
        g_signal_connect(e, "activate", G_CALLBACK(field_activated), p);
        gtk_box_append(GTK_BOX(box), l);
        gtk_box_append(GTK_BOX(box), e);
        gtk_flow_box_append(GTK_FLOW_BOX(p->row_fields), box);
        g_ptr_array_add(p->fields, e);
    }
}

/* Puts the values of a pasted or given row into the fields, in order from field from. A row
 * with commas, semicolons or tabs is split at them, an empty value kept as an empty field (a
 * missing value); a row with none of them at runs of spaces. */
static void spread_row(NlPredictPage *p, const char *text, guint from)
{
    const gboolean fields = strpbrk(text, ",;\t") != NULL;
    char **v = g_regex_split_simple(fields ? "\\s*[,;\\t]\\s*" : "\\s+", text, 0, 0);
    guint at = from;
    p->spreading = TRUE;
    for (char **q = v; *q && at < p->fields->len; q++) {
        char *t = g_strstrip(g_strdup(*q));
        if (t[0] || fields)
            gtk_editable_set_text(GTK_EDITABLE(p->fields->pdata[at++]), t);
        g_free(t);
    }
    p->spreading = FALSE;
    g_strfreev(v);
}

/* A field's text as one CSV field: quoted when it holds a separator or a quote. */
static void append_field(GString *row, const char *t)
{
    if (!strpbrk(t, ",;\t\"")) {
        g_string_append(row, t);
        return;
    }
    g_string_append_c(row, '"');
    for (const char *q = t; *q; q++) {
        if (*q == '"')
            g_string_append_c(row, '"');
        g_string_append_c(row, *q);
    }
    g_string_append_c(row, '"');
}

/* The typed text of a text run as one sample; *unknown its words outside the vocabulary. */
static int text_sample(NlPredictPage *p, float *in, int *unknown, struct nl_error *err)
{
    GtkTextBuffer *buf = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->text_view));
    GtkTextIter a, b;
    gtk_text_buffer_get_bounds(buf, &a, &b);
    char *text = gtk_text_buffer_get_text(buf, &a, &b, FALSE);
    int rc = 0;
    if (!text[0] || strspn(text, " \t\r\n") == strlen(text))
        rc = nl_error_set(err, NL_EINVAL, "Type a text to classify.");
    else
        rc = nl_dataset_sample_from_text(p->d, text, strlen(text), in, unknown, err);
    g_free(text);
    return rc;
}

/* Predicts with the row in the fields (or the typed text of a text run). A numeric field that
 * is not a number is marked and named; an empty one is filled as the import said, or refused
 * when the import had nothing to fill it with. */
static void predict_row(NlPredictPage *p)
{
    struct nl_error err = {0};
    clear_prediction(p);
    const char *run = selected_run(p);
    if (!run)
        return;
    if (!p->run || strcmp(p->run, run) != 0 || !p->d) {
        p->row_wanted = TRUE;
        load_model(p, run);
        return;
    }
    p->row_wanted = FALSE;
    clear_csv(p);
    float *in = g_new(float, nl_shape_size(p->d->shape));
    gtk_label_set_text(GTK_LABEL(p->verdict), "");
    if (text_mode(p)) {
        int unknown = 0;
        if (text_sample(p, in, &unknown, &err) < 0 || classify(p, in, &err) < 0) {
            set_note(p, err.msg, TRUE);
        } else {
            int words = 0;
            for (int i = 0; i < (int)nl_shape_size(p->d->shape); i++)
                words += in[i] != 0;
            char *t = g_strdup_printf("%d words looked up in the %d-word vocabulary of “%s”; %d of "
                                      "them %s not in it.",
                                      words, p->d->nvocab, p->d->name, unknown,
                                      unknown == 1 ? "is" : "are");
            set_note(p, t, FALSE);
            g_free(t);
        }
        g_free(in);
        gtk_widget_queue_draw(p->bars);
        return;
    }
    if (!p->table) {
        g_free(in);
        return;
    }
    GString *row = g_string_new(NULL);
    char *bad = NULL;
    for (guint f = 0; f < p->fields->len; f++) {
        GtkWidget *e = p->fields->pdata[f];
        const char *t = gtk_editable_get_text(GTK_EDITABLE(e));
        const char *name = g_object_get_data(G_OBJECT(e), "nl-feature");
        const gboolean cat = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(e), "nl-categorical"));
        const gboolean fill = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(e), "nl-fill"));
        char *trimmed = g_strstrip(g_strdup(t));
        if (f)
            g_string_append_c(row, ',');
        append_field(row, trimmed);
        char *end = NULL;
        const double x = trimmed[0] ? g_ascii_strtod(trimmed, &end) : 0;
        if (!trimmed[0] && !fill) {
            gtk_widget_add_css_class(e, "error");
            if (!bad)
                bad = g_strdup_printf("Type a value for %s.", name);
        } else if (trimmed[0] && !cat && (!end || *end || end == trimmed || !isfinite(x))) {
            gtk_widget_add_css_class(e, "error");
            if (!bad)
                bad = g_strdup_printf("“%s” in %s is not a number.", trimmed, name);
        }
        g_free(trimmed);
    }
    g_string_truncate(p->warnings, 0);
    double target = NAN;
    if (bad) {
        set_note(p, bad, TRUE);
    } else if (nl_table_row_text(p->table, row->str, "the row", in, &target, &err) < 0 ||
               classify(p, in, &err) < 0) {
        set_note(p, err.msg, TRUE);
    } else {
        GString *t = g_string_new(NULL);
        g_string_printf(t, "Preprocessed as the import of “%s” did: ", p->d->name);
        g_string_append(t, "numbers standardised with the training mean and deviation, "
                           "categorical columns as their levels, empty fields filled.");
        if (p->warnings->len)
            g_string_append_printf(t, "\n%s", p->warnings->str);
        set_note(p, t->str, p->warnings->len > 0);
        g_string_free(t, TRUE);
    }
    g_string_free(row, TRUE);
    g_free(bad);
    g_free(in);
    gtk_widget_queue_draw(p->bars);
}

/* ---- A CSV file of rows ---- */

/* One row of a CSV file as predicted: its line, the top class and its probability or a
 * regression run's value, and the target the row carried (NAN: none). */
struct csv_result {
    long line;
    int cls;
    float prob;
    double value, actual;
};

/* A CSV file predicted on a worker thread, with the thread's own store, model, dataset and
 * table; owned by its GTask. */
struct csv_job {
    char *db_path, *run, *path;
    struct nl_model *m;
    struct nl_dataset *d;
    struct nl_exec *x;
    float *probs;
    GArray *rows; /* struct csv_result, the first CSV_SHOWN */
    long total;   /* rows predicted */
    char **lines; /* the file's lines, for the table (NULL when it does not read) */
    guint nlines;
    GString *warnings;
    int nwarn;
    struct nl_error err;
};

static void csv_job_free(gpointer data)
{
    struct csv_job *j = data;
    g_free(j->db_path);
    g_free(j->run);
    g_free(j->path);
    nl_exec_free(j->x);
    nl_model_free(j->m);
    nl_dataset_free(j->d);
    g_free(j->probs);
    g_array_unref(j->rows);
    g_strfreev(j->lines);
    g_string_free(j->warnings, TRUE);
    g_free(j);
}

/* The table's warnings (unseen levels), the first few of them word for word. */
static void csv_warn(void *ud, const char *msg)
{
    struct csv_job *j = ud;
    if (j->nwarn++ < 3)
        g_string_append_printf(j->warnings, "%s%s.", j->warnings->len ? "\n" : "", msg);
}

static int csv_row(void *ud, long line, const float *x, double target)
{
    struct csv_job *j = ud;
    struct nl_rng rng;
    nl_rng_seed(&rng, 1);
    const float *y = nl_exec_forward(j->x, j->m->params, x, 1, 0, &rng);
    struct csv_result r = {.line = line, .actual = target, .value = NAN};
    if (j->d->regression) {
        r.value = (double)y[0] * j->d->target_std + j->d->target_mean;
    } else {
        nl_softmax(j->probs, y, 1, j->m->nclasses);
        for (int k = 1; k < j->m->nclasses; k++)
            if (j->probs[k] > j->probs[r.cls])
                r.cls = k;
        r.prob = j->probs[r.cls];
    }
    if (j->rows->len < CSV_SHOWN)
        g_array_append_val(j->rows, r);
    j->total++;
    return 0;
}

static void csv_thread(GTask *task, gpointer source, gpointer data, GCancellable *c)
{
    struct csv_job *j = data;
    struct nl_store *s;
    struct nl_table *t = NULL;
    int rc = nl_store_open(&s, j->db_path, &j->err);
    if (rc == 0) {
        rc = nl_ui_load_run(s, j->run, &j->m, &j->d, &j->err);
        nl_store_close(s);
    }
    if (rc == 0 && strcmp(j->d->kind, "csv") != 0)
        rc = nl_error_set(&j->err, NL_EINVAL,
                          "run “%s” trained on “%s”, which is not a table: a CSV file of rows "
                          "needs a run on a CSV dataset",
                          j->run, j->d->name);
    if (rc == 0)
        rc = nl_table_open(&t, j->d, csv_warn, j, &j->err);
    if (rc == 0)
        rc = nl_exec_new_forward(&j->x, j->m, 1, &j->err);
    if (rc == 0) {
        j->probs = g_new(float, (size_t)j->m->nclasses);
        rc = nl_table_read_csv(t, j->path, csv_row, j, &j->err);
    }
    if (rc == 0 && j->total == 0)
        rc = nl_error_set(&j->err, NL_EINVAL, "%s: no rows to predict", j->path);
    char *text = NULL;
    if (rc == 0 && g_file_get_contents(j->path, &text, NULL, NULL)) {
        j->lines = g_strsplit(text, "\n", -1);
        j->nlines = g_strv_length(j->lines);
        g_free(text);
    }
    nl_table_free(t);
    g_task_return_boolean(task, rc == 0);
}

static void add_csv_cell(NlPredictPage *p, int col, int row, const char *text, float xalign,
                         const char *css)
{
    GtkWidget *l = gtk_label_new(text);
    gtk_label_set_xalign(GTK_LABEL(l), xalign);
    if (col == 1) {
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 40);
        gtk_widget_set_tooltip_text(l, text);
    }
    if (css)
        gtk_widget_add_css_class(l, css);
    gtk_grid_attach(GTK_GRID(p->csv_table), l, col, row, 1, 1);
    g_string_append_printf(p->csv_text, "%s%s", col ? "\t" : "", text);
}

/* The CSV file's table out of the page (a single row's bars come back). */
static void clear_csv(NlPredictPage *p)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->csv_table)))
        gtk_grid_remove(GTK_GRID(p->csv_table), child);
    g_string_truncate(p->csv_text, 0);
    gtk_widget_set_visible(p->csv_scroll, FALSE);
    gtk_widget_set_visible(p->bars, TRUE);
}

static void csv_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlPredictPage *p = NL_PREDICT_PAGE(source);
    struct csv_job *j = g_task_get_task_data(G_TASK(res));
    if (gone(p) || !p->csv_loading || strcmp(p->csv_loading, j->path) != 0 || !selected_run(p) ||
        strcmp(selected_run(p), j->run) != 0)
        return; /* the window closed, or another file or run was chosen meanwhile */
    g_free(p->csv_loading);
    p->csv_loading = NULL;
    clear_csv(p);
    char *base = g_path_get_basename(j->path);
    if (!g_task_propagate_boolean(G_TASK(res), NULL)) {
        gtk_label_set_text(GTK_LABEL(p->verdict), "");
        set_note(p, j->err.msg, TRUE);
        g_free(base);
        return;
    }
    const struct nl_dataset *d = j->d;
    gboolean actual = FALSE;
    for (guint i = 0; i < j->rows->len; i++)
        actual |= isfinite(g_array_index(j->rows, struct csv_result, i).actual);
    int col = 0;
    add_csv_cell(p, col++, 0, "Line", 1, "heading");
    add_csv_cell(p, col++, 0, "Row", 0, "heading");
    if (actual)
        add_csv_cell(p, col++, 0, d->regression ? "Actual" : "Actual class", 0, "heading");
    if (d->regression) {
        char *h = g_strdup_printf("Predicted %s", d->class_names[0]);
        add_csv_cell(p, col++, 0, h, 1, "heading");
        g_free(h);
    } else {
        add_csv_cell(p, col++, 0, "Predicted class", 0, "heading");
        add_csv_cell(p, col++, 0, "Probability", 1, "heading");
    }
    g_string_append_c(p->csv_text, '\n');
    for (guint i = 0; i < j->rows->len; i++) {
        const struct csv_result *r = &g_array_index(j->rows, struct csv_result, i);
        char buf[64];
        const int row = (int)i + 1;
        col = 0;
        g_snprintf(buf, sizeof buf, "%ld", r->line);
        add_csv_cell(p, col++, row, buf, 1, "numeric");
        char *text = r->line >= 1 && (guint)r->line <= j->nlines
                         ? g_strchomp(g_strdup(j->lines[r->line - 1]))
                         : g_strdup("");
        add_csv_cell(p, col++, row, text, 0, "dim-label");
        g_free(text);
        if (actual && d->regression) {
            g_snprintf(buf, sizeof buf, "%.6g", r->actual);
            add_csv_cell(p, col++, row, isfinite(r->actual) ? buf : "", 1, "numeric");
        } else if (actual) {
            add_csv_cell(p, col++, row, isfinite(r->actual) ? d->class_names[(int)r->actual] : "",
                         0, NULL);
        }
        if (d->regression) {
            g_snprintf(buf, sizeof buf, "%.6g", r->value);
            add_csv_cell(p, col++, row, buf, 1, "numeric");
        } else {
            add_csv_cell(p, col++, row, d->class_names[r->cls], 0, NULL);
            g_snprintf(buf, sizeof buf, "%.1f%%", 100.0 * r->prob);
            add_csv_cell(p, col++, row, buf, 1, "numeric");
        }
        g_string_append_c(p->csv_text, '\n');
    }
    gtk_widget_set_visible(p->bars, FALSE);
    gtk_widget_set_visible(p->csv_scroll, TRUE);
    char *v = j->total > (long)j->rows->len
                  ? g_strdup_printf("%ld rows of %s predicted (the first %u shown)", j->total, base,
                                    j->rows->len)
                  : g_strdup_printf("%ld row%s of %s predicted", j->total, j->total == 1 ? "" : "s",
                                    base);
    gtk_label_set_text(GTK_LABEL(p->verdict), v);
    g_free(v);
    GString *t = g_string_new(NULL);
    g_string_printf(t, "Each row preprocessed as the import of “%s” did.", d->name);
    if (j->warnings->len)
        g_string_append_printf(t, "\n%s", j->warnings->str);
    if (j->nwarn > 3)
        g_string_append_printf(t, "\n(%d more such warnings)", j->nwarn - 3);
    set_note(p, t->str, j->nwarn > 0);
    g_string_free(t, TRUE);
    g_free(base);
}

/* Predicts every row of the CSV file at path with the selected run, on a worker thread. */
static void predict_csv(NlPredictPage *p, const char *path)
{
    const char *run = selected_run(p);
    clear_prediction(p);
    clear_csv(p);
    if (!run || !row_mode(p) || text_mode(p)) {
        gtk_label_set_text(GTK_LABEL(p->verdict), "");
        set_note(p, "Choose a run trained on a CSV dataset to predict a file of rows.", TRUE);
        return;
    }
    struct csv_job *j = g_new0(struct csv_job, 1);
    j->db_path = g_strdup(p->win->db_path);
    j->run = g_strdup(run);
    j->path = g_strdup(path);
    j->rows = g_array_new(FALSE, FALSE, sizeof(struct csv_result));
    j->warnings = g_string_new(NULL);
    g_free(p->csv_loading);
    p->csv_loading = g_strdup(path);
    char *base = g_path_get_basename(path);
    char *v = g_strdup_printf("Predicting the rows of %s…", base);
    gtk_label_set_text(GTK_LABEL(p->verdict), v);
    g_free(v);
    g_free(base);
    set_note(p, NULL, FALSE);
    GTask *task = g_task_new(p, NULL, csv_done, NULL);
    g_task_set_task_data(task, j, csv_job_free);
    g_task_run_in_thread(task, csv_thread);
    g_object_unref(task);
}

/* predict.csv (path): predicts every row of a CSV file with the selected run. */
static void predict_csv_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlPredictPage *p = NL_PREDICT_PAGE(widget);
    gtk_stack_set_visible_child_name(p->win->stack, "predict");
    predict_csv(p, g_variant_get_string(param, NULL));
}

static void csv_chooser_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    NlPredictPage *p = data;
    if (response == GTK_RESPONSE_ACCEPT) {
        GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
        char *path = f ? g_file_get_path(f) : NULL;
        if (path)
            predict_csv(p, path);
        g_free(path);
        if (f)
            g_object_unref(f);
    }
    g_object_unref(dialog);
}

/* predict.csv-open: asks for a CSV file of rows, then predicts them. */
static void predict_csv_open(GtkWidget *widget, const char *action, GVariant *param)
{
    NlPredictPage *p = NL_PREDICT_PAGE(widget);
    GtkFileChooserNative *d =
        gtk_file_chooser_native_new("Open a CSV File of Rows", GTK_WINDOW(p->win),
                                    GTK_FILE_CHOOSER_ACTION_OPEN, "_Open", "_Cancel");
    GtkFileFilter *csv = gtk_file_filter_new();
    gtk_file_filter_set_name(csv, "CSV files");
    gtk_file_filter_add_mime_type(csv, "text/csv");
    gtk_file_filter_add_pattern(csv, "*.csv");
    gtk_file_filter_add_pattern(csv, "*.tsv");
    gtk_file_filter_add_pattern(csv, "*.txt");
    gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(d), csv);
    g_object_unref(csv);
    g_signal_connect(d, "response", G_CALLBACK(csv_chooser_response), p);
    gtk_native_dialog_show(GTK_NATIVE_DIALOG(d));
}

const char *predict_page_csv_table(NlPredictPage *p)
{
    return gtk_widget_get_visible(p->csv_scroll) ? p->csv_text->str : NULL;
}

/* What the picker's run trained on, and which input the page offers for it. */
static void update_mode(NlPredictPage *p)
{
    const struct choice *c = selected_choice(p);
    const gboolean row = row_mode(p), text = text_mode(p);
    gtk_widget_set_visible(p->row_box, row && !text);
    gtk_widget_set_visible(p->text_box, text);
    gtk_widget_set_visible(p->image_box, !row);
    gtk_widget_set_visible(p->open, !row);
    char *t;
    if (!c)
        t = g_strdup("No run has a checkpoint yet: train one on the Train page.");
    else if (!c->kind[0])
        t = g_strdup_printf("“%s” trained on “%s”, which is no longer in the store: import it "
                            "again to predict with this run.",
                            c->name, c->dataset);
    else if (text)
        t = g_strdup_printf("“%s” trained on “%s”: texts of up to %d words, %d classes.", c->name,
                            c->dataset, c->shape.w, c->nclasses);
    else if (row && c->regression)
        t = g_strdup_printf("“%s” trained on “%s”: rows of %d features, a regression: its "
                            "target is predicted in the target's units.",
                            c->name, c->dataset, (int)nl_shape_size(c->shape));
    else if (row)
        t = g_strdup_printf("“%s” trained on “%s”: rows of %d features, %d classes.", c->name,
                            c->dataset, (int)nl_shape_size(c->shape), c->nclasses);
    else
        t = g_strdup_printf("“%s” trained on “%s”: %d×%d %s images, %d classes. Other images are "
                            "converted to that.",
                            c->name, c->dataset, c->shape.w, c->shape.h,
                            c->shape.c == 1 ? "gray" : "colour", c->nclasses);
    gtk_label_set_text(GTK_LABEL(p->run_info), t);
    g_free(t);
    /* A CSV run's fields need its dataset's columns: loading the model brings them. */
    if (row && c->kind[0] && (!p->run || strcmp(p->run, c->name) != 0))
        load_model(p, c->name);
}

static void predict(NlPredictPage *p)
{
    struct nl_error err = {0};
    const char *run = selected_run(p);

    if (row_mode(p)) {
        if (p->row_wanted)
            predict_row(p);
        return;
    }
    clear_prediction(p);
    clear_csv(p);
    if (!p->path)
        return;
    if (!run) {
        gtk_label_set_text(GTK_LABEL(p->verdict), "Train a model first: no run has a checkpoint.");
        return;
    }
    if (!p->run || strcmp(p->run, run) != 0) {
        load_model(p, run);
        return;
    }
    float *in = g_new(float, nl_shape_size(p->d->shape));
    gtk_label_set_text(GTK_LABEL(p->verdict), "");
    if (nl_dataset_sample_from_image(p->d, p->path, in, &err) < 0 || classify(p, in, &err) < 0) {
        set_note(p, err.msg, TRUE);
    } else {
        gboolean far = FALSE;
        char *how = describe_image(p->d, p->path, &far);
        set_note(p, how, far);
        g_free(how);
    }
    g_free(in);
    gtk_widget_queue_draw(p->bars);
}

static void set_file(NlPredictPage *p, const char *path)
{
    g_free(p->path);
    p->path = g_strdup(path);
    GFile *f = g_file_new_for_path(path);
    GError *error = NULL;
    GdkTexture *tex = gdk_texture_new_from_file(f, &error);
    g_object_unref(f);
    if (tex) {
        gtk_picture_set_paintable(GTK_PICTURE(p->picture), GDK_PAINTABLE(tex));
        g_object_unref(tex);
    } else {
        gtk_picture_set_paintable(GTK_PICTURE(p->picture), NULL);
        g_error_free(error);
    }
    char *base = g_path_get_basename(path);
    gtk_label_set_text(GTK_LABEL(p->file), base);
    g_free(base);
    predict(p);
}

/* predict.file (path) */
static void predict_file(GtkWidget *widget, const char *action, GVariant *param)
{
    NlPredictPage *p = NL_PREDICT_PAGE(widget);
    gtk_stack_set_visible_child_name(p->win->stack, "predict");
    set_file(p, g_variant_get_string(param, NULL));
}

static void chooser_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    NlPredictPage *p = data;
    if (response == GTK_RESPONSE_ACCEPT) {
        GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
        char *path = g_file_get_path(f);
        if (path)
            set_file(p, path);
        g_free(path);
        g_object_unref(f);
    }
    g_object_unref(dialog);
}

static void predict_open(GtkWidget *widget, const char *action, GVariant *param)
{
    NlPredictPage *p = NL_PREDICT_PAGE(widget);
    gtk_stack_set_visible_child_name(p->win->stack, "predict");
    GtkFileChooserNative *d = gtk_file_chooser_native_new(
        "Open Image", GTK_WINDOW(p->win), GTK_FILE_CHOOSER_ACTION_OPEN, "_Open", "_Cancel");
    GtkFileFilter *images = gtk_file_filter_new();
    gtk_file_filter_set_name(images, "PNG and JPEG images");
    gtk_file_filter_add_mime_type(images, "image/png");
    gtk_file_filter_add_mime_type(images, "image/jpeg");
    gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(d), images);
    g_object_unref(images);
    g_signal_connect(d, "response", G_CALLBACK(chooser_response), p);
    gtk_native_dialog_show(GTK_NATIVE_DIALOG(d));
}

static gboolean on_drop(GtkDropTarget *t, const GValue *value, double x, double y, gpointer data)
{
    NlPredictPage *p = data;
    GFile *f = g_value_get_object(value);
    char *path = f ? g_file_get_path(f) : NULL;
    if (!path)
        return FALSE;
    set_file(p, path);
    g_free(path);
    return TRUE;
}

static void draw_bars(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data)
{
    NlPredictPage *p = data;
    if (p->n == 0)
        return;
    struct chart_bars b = {.n = p->n,
                           .labels = (const char *const *)p->labels,
                           .values = p->probs,
                           .fg = nl_window_fg(GTK_WIDGET(area)),
                           .bar = {0.21, 0.52, 0.89}};
    chart_bars_draw(cr, w, h, &b);
}

static void run_changed(GObject *dd, GParamSpec *ps, gpointer data)
{
    NlPredictPage *p = data;
    if (p->refreshing)
        return;
    clear_csv(p);
    update_mode(p);
    predict(p);
}

/* predict.row: classifies the row typed in the fields. */
static void predict_row_action(GtkWidget *widget, const char *action, GVariant *param)
{
    predict_row(NL_PREDICT_PAGE(widget));
}

/* predict.values (row): puts a row's values (comma-, tab- or space-separated) in the fields
 * and classifies it. */
static void predict_values_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlPredictPage *p = NL_PREDICT_PAGE(widget);
    gtk_stack_set_visible_child_name(p->win->stack, "predict");
    if (text_mode(p))
        gtk_text_buffer_set_text(gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->text_view)),
                                 g_variant_get_string(param, NULL), -1);
    else if (p->run && p->table && selected_run(p) && strcmp(p->run, selected_run(p)) == 0)
        spread_row(p, g_variant_get_string(param, NULL), 0);
    else {
        /* The run's fields come with its dataset: the row waits for them. */
        g_free(p->pending);
        p->pending = g_strdup(g_variant_get_string(param, NULL));
    }
    predict_row(p);
}

const char *predict_page_note(NlPredictPage *p)
{
    return gtk_label_get_text(GTK_LABEL(p->note));
}

const char *predict_page_run_label(NlPredictPage *p, guint i)
{
    return i < g_list_model_get_n_items(G_LIST_MODEL(p->names))
               ? gtk_string_list_get_string(p->names, i)
               : NULL;
}

int predict_page_fields(NlPredictPage *p)
{
    return row_mode(p) && gtk_widget_get_visible(p->row_box) ? (int)p->fields->len : 0;
}

gboolean predict_page_takes_text(NlPredictPage *p)
{
    return text_mode(p) && gtk_widget_get_visible(p->text_box);
}

const char *predict_page_top(NlPredictPage *p)
{
    return p->n > 0 ? p->labels[0] : p->value;
}

const char *predict_page_class(NlPredictPage *p, int i, double *prob)
{
    if (i < 0 || i >= p->n)
        return NULL;
    *prob = p->probs[i];
    return p->labels[i];
}

/* The runs that have a checkpoint, newest first. */
void predict_page_refresh(NlPredictPage *p)
{
    struct nl_run_info *list;
    struct nl_error err = {0};
    int n;
    if (!p || nl_run_list(p->win->store, &list, &n, &err) < 0)
        return;
    struct nl_dataset_info *sets = NULL;
    int nsets = 0;
    if (nl_dataset_list(p->win->store, &sets, &nsets, &err) < 0)
        nsets = 0;
    char *keep = g_strdup(selected_run(p));
    p->refreshing = TRUE;
    gtk_string_list_splice(p->names, 0, g_list_model_get_n_items(G_LIST_MODEL(p->names)), NULL);
    g_ptr_array_set_size(p->choices, 0);
    guint sel = 0, at = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (list[i].epochs_done < 1)
            continue;
        struct choice *c = g_new0(struct choice, 1);
        c->name = g_strdup(list[i].name);
        c->dataset = g_strdup(list[i].dataset);
        c->kind = g_strdup("");
        c->regression = list[i].regression;
        for (int k = 0; k < nsets; k++)
            if (strcmp(sets[k].name, list[i].dataset) == 0) {
                g_free(c->kind);
                c->kind = g_strdup(sets[k].kind);
                c->shape = sets[k].shape;
                c->nclasses = sets[k].nclasses;
            }
        /* "run — dataset, what it takes" */
        char *label = !c->kind[0] ? g_strdup_printf("%s — %s (gone)", c->name, c->dataset)
                      : strcmp(c->kind, "text") == 0
                          ? g_strdup_printf("%s — %s, text", c->name, c->dataset)
                      : strcmp(c->kind, "csv") == 0 && c->regression
                          ? g_strdup_printf("%s — %s, %d features, regression", c->name, c->dataset,
                                            (int)nl_shape_size(c->shape))
                      : strcmp(c->kind, "csv") == 0
                          ? g_strdup_printf("%s — %s, %d features", c->name, c->dataset,
                                            (int)nl_shape_size(c->shape))
                          : g_strdup_printf("%s — %s, %d×%d %s", c->name, c->dataset, c->shape.w,
                                            c->shape.h, c->shape.c == 1 ? "gray" : "colour");
        gtk_string_list_append(p->names, label);
        g_free(label);
        g_ptr_array_add(p->choices, c);
        if (keep && strcmp(keep, list[i].name) == 0)
            sel = at;
        at++;
    }
    gtk_drop_down_set_selected(GTK_DROP_DOWN(p->runs), at ? sel : GTK_INVALID_LIST_POSITION);
    p->refreshing = FALSE;
    nl_free(list);
    nl_free(sets);
    g_free(keep);
    /* A deleted or retrained run: forget the loaded model. */
    g_free(p->run);
    p->run = NULL;
    g_free(p->loading);
    p->loading = NULL;
    update_mode(p);
    if (p->path)
        predict(p);
}

static void choice_free(gpointer data)
{
    struct choice *c = data;
    g_free(c->name);
    g_free(c->dataset);
    g_free(c->kind);
    g_free(c);
}

G_DEFINE_FINAL_TYPE(NlPredictPage, nl_predict_page, GTK_TYPE_WIDGET)

static void nl_predict_page_init(NlPredictPage *p)
{
    gtk_widget_init_template(GTK_WIDGET(p));
    p->warnings = g_string_new(NULL);
    p->csv_text = g_string_new(NULL);
    p->choices = g_ptr_array_new_with_free_func(choice_free);
    p->fields = g_ptr_array_new();
    p->names = gtk_string_list_new(NULL);
    gtk_drop_down_set_model(GTK_DROP_DOWN(p->runs), G_LIST_MODEL(p->names));
    g_object_unref(p->names);
    GtkDropTarget *drop = gtk_drop_target_new(G_TYPE_FILE, GDK_ACTION_COPY);
    g_signal_connect(drop, "drop", G_CALLBACK(on_drop), p);
    gtk_widget_add_controller(p->drop_area, GTK_EVENT_CONTROLLER(drop));
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->bars), draw_bars, p, NULL);
    g_signal_connect(p->runs, "notify::selected", G_CALLBACK(run_changed), p);
}

static void nl_predict_page_dispose(GObject *obj)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(GTK_WIDGET(obj))))
        gtk_widget_unparent(child);
    gtk_widget_dispose_template(GTK_WIDGET(obj), NL_TYPE_PREDICT_PAGE);
    G_OBJECT_CLASS(nl_predict_page_parent_class)->dispose(obj);
}

static void nl_predict_page_finalize(GObject *obj)
{
    NlPredictPage *p = NL_PREDICT_PAGE(obj);
    for (int i = 0; i < TOP; i++)
        g_free(p->labels[i]);
    nl_model_free(p->m);
    nl_dataset_free(p->d);
    nl_table_free(p->table);
    g_string_free(p->warnings, TRUE);
    g_string_free(p->csv_text, TRUE);
    g_free(p->csv_loading);
    g_free(p->value);
    g_free(p->pending);
    g_free(p->run);
    g_free(p->loading);
    g_free(p->path);
    g_free(p->fields_for);
    g_ptr_array_unref(p->fields);
    g_ptr_array_unref(p->choices);
    G_OBJECT_CLASS(nl_predict_page_parent_class)->finalize(obj);
}

static void nl_predict_page_class_init(NlPredictPageClass *klass)
{
    GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
    G_OBJECT_CLASS(klass)->dispose = nl_predict_page_dispose;
    G_OBJECT_CLASS(klass)->finalize = nl_predict_page_finalize;
    nl_page_class_set_info(wc, "predict", "Predict", "image-x-generic-symbolic");
    nl_page_class_add_shortcut(wc, "<Control>o", "predict.open");
    gtk_widget_class_set_layout_manager_type(wc, GTK_TYPE_BIN_LAYOUT);
    gtk_widget_class_set_template_from_resource(wc, "/org/nnlab/Nnlab/predict-page.ui");
#define BIND(x) gtk_widget_class_bind_template_child(wc, NlPredictPage, x)
    BIND(runs);
    BIND(drop_area);
    BIND(picture);
    BIND(file);
    BIND(verdict);
    BIND(bars);
    BIND(open);
    BIND(run_info);
    BIND(row_box);
    BIND(row_fields);
    BIND(image_box);
    BIND(note);
    BIND(text_box);
    BIND(text_view);
    BIND(csv_scroll);
    BIND(csv_table);
#undef BIND
    gtk_widget_class_install_action(wc, "predict.file", "s", predict_file);
    gtk_widget_class_install_action(wc, "predict.open", NULL, predict_open);
    gtk_widget_class_install_action(wc, "predict.row", NULL, predict_row_action);
    gtk_widget_class_install_action(wc, "predict.values", "s", predict_values_action);
    gtk_widget_class_install_action(wc, "predict.csv", "s", predict_csv_action);
    gtk_widget_class_install_action(wc, "predict.csv-open", NULL, predict_csv_open);
}

NlPredictPage *nl_predict_page_new(NlWindow *w)
{
    NlPredictPage *p = g_object_ref_sink(g_object_new(NL_TYPE_PREDICT_PAGE, NULL));
    p->win = w;
    predict_page_refresh(p);
    return p;
}
