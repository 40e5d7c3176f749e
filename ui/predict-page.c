/* The predict page: the latest checkpoint of a run classifies a PNG or JPEG that is opened through
 * a file chooser or dropped on the page; the top five classes are shown with probability bars. */
#include <string.h>

#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "window.h"

#define TOP 5

struct predict_page {
    NlWindow *win;
    GtkWidget *runs, *drop_area, *picture, *file, *verdict, *bars;
    GtkStringList *names;
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
        gtk_label_set_text(GTK_LABEL(p->verdict), j->err.msg);
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
    GTask *task = g_task_new(p->win, NULL, load_done, p);
    g_task_set_task_data(task, j, load_job_free);
    g_task_run_in_thread(task, load_thread);
    g_object_unref(task);
}

static const char *selected_run(struct predict_page *p)
{
    GObject *item = gtk_drop_down_get_selected_item(GTK_DROP_DOWN(p->runs));
    return item ? gtk_string_object_get_string(GTK_STRING_OBJECT(item)) : NULL;
}

static void predict(struct predict_page *p)
{
    struct nl_error err = {0};
    struct nl_exec *x = NULL;
    const char *run = selected_run(p);

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
    float *probs = g_new(float, (size_t)p->m->nclasses);
    int rc = nl_dataset_sample_from_image(p->d, p->path, in, &err);
    if (rc == 0)
        rc = nl_exec_new(&x, p->m, 1, &err);
    if (rc == 0) {
        struct nl_rng rng;
        nl_rng_seed(&rng, 1);
        const int k = p->m->nclasses;
        nl_softmax(probs, nl_exec_forward(x, p->m->params, in, 1, 0, &rng), 1, k);
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
    } else {
        gtk_label_set_text(GTK_LABEL(p->verdict), err.msg);
    }
    nl_exec_free(x);
    g_free(in);
    g_free(probs);
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
    if (!p->refreshing)
        predict(p);
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
    char *keep = g_strdup(selected_run(p));
    p->refreshing = TRUE;
    gtk_string_list_splice(p->names, 0, g_list_model_get_n_items(G_LIST_MODEL(p->names)), NULL);
    guint sel = 0, at = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (list[i].epochs_done < 1)
            continue;
        gtk_string_list_append(p->names, list[i].name);
        if (keep && strcmp(keep, list[i].name) == 0)
            sel = at;
        at++;
    }
    gtk_drop_down_set_selected(GTK_DROP_DOWN(p->runs), at ? sel : GTK_INVALID_LIST_POSITION);
    p->refreshing = FALSE;
    nl_free(list);
    g_free(keep);
    /* A deleted or retrained run: forget the loaded model. */
    g_free(p->run);
    p->run = NULL;
    g_free(p->loading);
    p->loading = NULL;
    if (p->path)
        predict(p);
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
#undef GET
    *root = g_object_ref(GTK_WIDGET(gtk_builder_get_object(b, "page")));
    g_object_unref(b);
    p->names = gtk_string_list_new(NULL);
    gtk_drop_down_set_model(GTK_DROP_DOWN(p->runs), G_LIST_MODEL(p->names));
    g_object_unref(p->names);

    static const GActionEntry actions[] = {
        {.name = "predict-file", .activate = predict_file, .parameter_type = "s"},
        {.name = "predict-open", .activate = predict_open},
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
    g_free(p);
}
