/* The predict page: the latest checkpoint of a run classifies a PNG or JPEG that is opened through
 * a file chooser or dropped on the page, or — for a run on a CSV dataset — a row of feature
 * values typed into a row of fields (or pasted whole into the first); the top five classes are
 * shown with probability bars. Each run in the picker says its dataset and input; an image is
 * described as read and as converted for the run, with a warning when it is far from the kind
 * of image the run trained on (colour against gray, or many times its size). */
#include <math.h>
#include <string.h>

#include "../core/json.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "window.h"

#define TOP 5

/* A run offered in the picker, with what it trained on. */
struct choice {
    char *name, *dataset, *kind; /* kind: the dataset's ("idx", "csv"...), "" when it is gone */
    struct nl_shape shape;
    int nclasses;
};

struct predict_page {
    NlWindow *win;
    GtkWidget *runs, *drop_area, *picture, *file, *verdict, *bars;
    GtkWidget *open, *run_info, *row_box, *row_fields, *image_box, *note;
    GtkStringList *names; /* the picker's labels */
    GPtrArray *choices;   /* struct choice, in the picker's order */
    GPtrArray *fields;    /* GtkEntry, one per feature of the loaded CSV dataset */
    char *fields_for;     /* the dataset the fields are for */
    gboolean row_wanted;  /* a row prediction waits for the model */
    gboolean spreading;   /* a pasted row is being spread over the fields */
    /* The model loaded for the selected run. */
    char *run;
    struct nl_model *m;
    struct nl_dataset *d;
    /* The last prediction. */
    int n;
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

static void predict(struct predict_page *p);
static void set_note(struct predict_page *p, const char *text, gboolean warn);
static void build_fields(struct predict_page *p, const struct nl_dataset *d);
static gboolean row_mode(struct predict_page *p);

static void clear_prediction(struct predict_page *p)
{
    for (int i = 0; i < TOP; i++) {
        g_free(p->labels[i]);
        p->labels[i] = NULL;
    }
    p->n = 0;
    gtk_widget_queue_draw(p->bars);
}

static void load_done(GObject *source, GAsyncResult *res, gpointer data)
{
    struct predict_page *p = data;
    struct load_job *j = g_task_get_task_data(G_TASK(res));
    if (p->win->closed || !p->loading || strcmp(p->loading, j->run) != 0)
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
    if (p->d->dtype == NL_F32)
        build_fields(p, p->d);
    gtk_label_set_text(GTK_LABEL(p->verdict), "");
    predict(p);
}

/* Loads run's model and dataset on a worker thread, then predicts. */
static void load_model(struct predict_page *p, const char *run)
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
    GTask *task = g_task_new(p->win, NULL, load_done, p);
    g_task_set_task_data(task, j, load_job_free);
    g_task_run_in_thread(task, load_thread);
    g_object_unref(task);
}

static const struct choice *selected_choice(struct predict_page *p)
{
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->runs));
    return i < p->choices->len ? p->choices->pdata[i] : NULL;
}

static const char *selected_run(struct predict_page *p)
{
    const struct choice *c = selected_choice(p);
    return c ? c->name : NULL;
}

static gboolean row_mode(struct predict_page *p)
{
    const struct choice *c = selected_choice(p);
    return c && strcmp(c->kind, "csv") == 0;
}

static void set_note(struct predict_page *p, const char *text, gboolean warn)
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
static void show_top(struct predict_page *p, float *probs, int k)
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

/* Runs one normalised sample through the loaded model and shows its top classes. */
static int classify(struct predict_page *p, const float *in, struct nl_error *err)
{
    struct nl_exec *x = NULL;
    int rc = nl_exec_new(&x, p->m, 1, err);
    if (rc == 0) {
        struct nl_rng rng;
        nl_rng_seed(&rng, 1);
        const int k = p->m->nclasses;
        float *probs = g_new(float, (size_t)k);
        nl_softmax(probs, nl_exec_forward(x, p->m->params, in, 1, 0, &rng), 1, k);
        show_top(p, probs, k);
        g_free(probs);
    }
    nl_exec_free(x);
    return rc;
}

static void spread_row(struct predict_page *p, const char *text, guint from);

static void field_changed(GtkEditable *e, gpointer data)
{
    struct predict_page *p = data;
    const char *t = gtk_editable_get_text(e);
    gtk_widget_remove_css_class(GTK_WIDGET(e), "error");
    /* A whole row pasted into one field is spread over the fields. */
    guint at = 0;
    if (!p->spreading && p->fields->len > 1 && strpbrk(t, ",;\t ") && strlen(t) > 1 &&
        g_ptr_array_find(p->fields, e, &at)) {
        char *row = g_strdup(t);
        spread_row(p, row, at);
        g_free(row);
    }
}

static void field_activated(GtkEntry *e, gpointer data)
{
    gtk_widget_activate_action(GTK_WIDGET(e), "win.predict-row", NULL);
}

/* One field per feature of d, named by the CSV's header when it had one. */
static void build_fields(struct predict_page *p, const struct nl_dataset *d)
{
    GtkWidget *child;
    if (p->fields_for && strcmp(p->fields_for, d->name) == 0)
        return;
    while ((child = gtk_widget_get_first_child(p->row_fields)))
        gtk_flow_box_remove(GTK_FLOW_BOX(p->row_fields), child);
    g_ptr_array_set_size(p->fields, 0);
    g_free(p->fields_for);
    p->fields_for = g_strdup(d->name);
    struct nl_json_doc *doc = NULL;
    struct nl_error err = {0};
    const struct nl_json *names = NULL;
    if (d->preprocessing &&
        nl_json_parse(&doc, d->preprocessing, strlen(d->preprocessing), "preprocessing", &err) == 0)
        names = nl_json_get(nl_json_root(doc), "feature_names");
    const int nf = (int)nl_shape_size(d->shape);
    for (int f = 0; f < nf; f++) {
        char fallback[32];
        g_snprintf(fallback, sizeof fallback, "feature %d", f + 1);
        const char *name = names && names->type == NL_JSON_ARRAY && (size_t)f < names->count &&
                                   names->items[f].type == NL_JSON_STRING
                               ? names->items[f].string
                               : fallback;
        GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
        GtkWidget *l = gtk_label_new(name);
        gtk_label_set_xalign(GTK_LABEL(l), 0);
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 12);
        gtk_widget_set_tooltip_text(l, name);
        gtk_widget_add_css_class(l, "caption");
        GtkWidget *e = gtk_entry_new();
        gtk_editable_set_width_chars(GTK_EDITABLE(e), 8);
        gtk_entry_set_input_purpose(GTK_ENTRY(e), GTK_INPUT_PURPOSE_NUMBER);
        gtk_accessible_update_property(GTK_ACCESSIBLE(e), GTK_ACCESSIBLE_PROPERTY_LABEL, name, -1);
        g_object_set_data_full(G_OBJECT(e), "nl-feature", g_strdup(name), g_free);
        g_signal_connect(e, "changed", G_CALLBACK(field_changed), p);
        g_signal_connect(e, "activate", G_CALLBACK(field_activated), p);
        gtk_box_append(GTK_BOX(box), l);
        gtk_box_append(GTK_BOX(box), e);
        gtk_flow_box_append(GTK_FLOW_BOX(p->row_fields), box);
        g_ptr_array_add(p->fields, e);
    }
    nl_json_free(doc);
}

/* Puts the values of a pasted or given row into the fields, in order from field from. */
static void spread_row(struct predict_page *p, const char *text, guint from)
{
    char **v = g_regex_split_simple("[,;\\t ]+", text, 0, 0);
    guint at = from;
    p->spreading = TRUE;
    for (char **q = v; *q && at < p->fields->len; q++)
        if ((*q)[0])
            gtk_editable_set_text(GTK_EDITABLE(p->fields->pdata[at++]), *q);
    p->spreading = FALSE;
    g_strfreev(v);
}

/* Classifies the row in the fields; a field that is not a number is marked and named. */
static void predict_row(struct predict_page *p)
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
    const guint nf = p->fields->len;
    float *v = g_new(float, MAX(nf, 1u)), *in = g_new(float, MAX(nf, 1u));
    char *bad = NULL;
    for (guint f = 0; f < nf; f++) {
        GtkWidget *e = p->fields->pdata[f];
        const char *t = gtk_editable_get_text(GTK_EDITABLE(e));
        char *end = NULL;
        const double x = g_ascii_strtod(t, &end);
        while (end && g_ascii_isspace(*end))
            end++;
        if (!t[0] || !end || *end || end == t || !isfinite(x)) {
            gtk_widget_add_css_class(e, "error");
            if (!bad)
                bad = t[0]
                          ? g_strdup_printf(
                                "“%s” in %s is not a number.", t,
                                (const char *)g_object_get_data(G_OBJECT(e), "nl-feature"))
                          : g_strdup_printf("Type a value for %s.", (const char *)g_object_get_data(
                                                                        G_OBJECT(e), "nl-feature"));
            continue;
        }
        v[f] = (float)x;
    }
    gtk_label_set_text(GTK_LABEL(p->verdict), "");
    if (bad) {
        set_note(p, bad, TRUE);
    } else if (nl_dataset_sample_from_values(p->d, v, (int)nf, in, &err) < 0 ||
               classify(p, in, &err) < 0) {
        set_note(p, err.msg, TRUE);
    } else {
        char *t = g_strdup_printf("Standardised with the training mean and deviation of each "
                                  "feature of “%s”.",
                                  p->d->name);
        set_note(p, t, FALSE);
        g_free(t);
    }
    g_free(bad);
    g_free(v);
    g_free(in);
    gtk_widget_queue_draw(p->bars);
}

/* What the picker's run trained on, and which input the page offers for it. */
static void update_mode(struct predict_page *p)
{
    const struct choice *c = selected_choice(p);
    const gboolean row = row_mode(p);
    gtk_widget_set_visible(p->row_box, row);
    gtk_widget_set_visible(p->image_box, !row);
    gtk_widget_set_visible(p->open, !row);
    char *t;
    if (!c)
        t = g_strdup("No run has a checkpoint yet: train one on the Train page.");
    else if (!c->kind[0])
        t = g_strdup_printf("“%s” trained on “%s”, which is no longer in the store: import it "
                            "again to predict with this run.",
                            c->name, c->dataset);
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
    /* A CSV run's fields need its dataset's feature names: loading the model brings them. */
    if (row && c->kind[0] && (!p->run || strcmp(p->run, c->name) != 0))
        load_model(p, c->name);
}

static void predict(struct predict_page *p)
{
    struct nl_error err = {0};
    const char *run = selected_run(p);

    if (row_mode(p)) {
        if (p->row_wanted)
            predict_row(p);
        return;
    }
    clear_prediction(p);
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

static void set_file(struct predict_page *p, const char *path)
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

/* win.predict-file (path) */
static void predict_file(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct predict_page *p = data;
    gtk_stack_set_visible_child_name(p->win->stack, "predict");
    set_file(p, g_variant_get_string(param, NULL));
}

static void chooser_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    struct predict_page *p = data;
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

static void predict_open(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct predict_page *p = data;
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
    struct predict_page *p = data;
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
    struct predict_page *p = data;
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
    struct predict_page *p = data;
    if (p->refreshing)
        return;
    update_mode(p);
    predict(p);
}

/* win.predict-row: classifies the row typed in the fields. */
static void predict_row_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    predict_row(data);
}

/* win.predict-values (row): puts a row's values (comma-, tab- or space-separated) in the fields
 * and classifies it. */
static void predict_values_action(GSimpleAction *a, GVariant *param, gpointer data)
{
    struct predict_page *p = data;
    gtk_stack_set_visible_child_name(p->win->stack, "predict");
    if (p->fields->len)
        spread_row(p, g_variant_get_string(param, NULL), 0);
    predict_row(p);
}

const char *predict_page_note(struct predict_page *p)
{
    return gtk_label_get_text(GTK_LABEL(p->note));
}

const char *predict_page_run_label(struct predict_page *p, guint i)
{
    return i < g_list_model_get_n_items(G_LIST_MODEL(p->names))
               ? gtk_string_list_get_string(p->names, i)
               : NULL;
}

int predict_page_fields(struct predict_page *p)
{
    return row_mode(p) && gtk_widget_get_visible(p->row_box) ? (int)p->fields->len : 0;
}

/* The runs that have a checkpoint, newest first. */
const char *predict_page_top(struct predict_page *p)
{
    return p->n > 0 ? p->labels[0] : NULL;
}

void predict_page_refresh(struct predict_page *p)
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
        for (int k = 0; k < nsets; k++)
            if (strcmp(sets[k].name, list[i].dataset) == 0) {
                g_free(c->kind);
                c->kind = g_strdup(sets[k].kind);
                c->shape = sets[k].shape;
                c->nclasses = sets[k].nclasses;
            }
        /* "run — dataset, what it takes" */
        char *label = !c->kind[0] ? g_strdup_printf("%s — %s (gone)", c->name, c->dataset)
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

struct predict_page *predict_page_new(NlWindow *w, GtkWidget **root)
{
    struct predict_page *p = g_new0(struct predict_page, 1);
    GtkBuilder *b = nl_page_builder("predict-page");
    p->win = w;
#define GET(x) p->x = GTK_WIDGET(gtk_builder_get_object(b, #x))
    GET(runs);
    GET(drop_area);
    GET(picture);
    GET(file);
    GET(verdict);
    GET(bars);
    GET(open);
    GET(run_info);
    GET(row_box);
    GET(row_fields);
    GET(image_box);
    GET(note);
#undef GET
    p->choices = g_ptr_array_new_with_free_func(choice_free);
    p->fields = g_ptr_array_new();
    *root = g_object_ref(GTK_WIDGET(gtk_builder_get_object(b, "page")));
    g_object_unref(b);
    p->names = gtk_string_list_new(NULL);
    gtk_drop_down_set_model(GTK_DROP_DOWN(p->runs), G_LIST_MODEL(p->names));
    g_object_unref(p->names);

    static const GActionEntry actions[] = {
        {.name = "predict-file", .activate = predict_file, .parameter_type = "s"},
        {.name = "predict-open", .activate = predict_open},
        {.name = "predict-row", .activate = predict_row_action},
        {.name = "predict-values", .activate = predict_values_action, .parameter_type = "s"},
    };
    g_action_map_add_action_entries(G_ACTION_MAP(w), actions, G_N_ELEMENTS(actions), p);
    GtkDropTarget *drop = gtk_drop_target_new(G_TYPE_FILE, GDK_ACTION_COPY);
    g_signal_connect(drop, "drop", G_CALLBACK(on_drop), p);
    gtk_widget_add_controller(p->drop_area, GTK_EVENT_CONTROLLER(drop));
    gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(p->bars), draw_bars, p, NULL);
    g_signal_connect(p->runs, "notify::selected", G_CALLBACK(run_changed), p);
    predict_page_refresh(p);
    return p;
}

void predict_page_free(struct predict_page *p)
{
    if (!p)
        return;
    for (int i = 0; i < TOP; i++)
        g_free(p->labels[i]);
    nl_model_free(p->m);
    nl_dataset_free(p->d);
    g_free(p->run);
    g_free(p->loading);
    g_free(p->path);
    g_free(p->fields_for);
    g_ptr_array_unref(p->fields);
    g_ptr_array_unref(p->choices);
    g_free(p);
}
