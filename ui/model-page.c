/* The model page: a spec edited as text or through its list of layers (add, remove, move), built
 * for the selected dataset after every edit, with each layer's output shape and parameter count,
 * and errors shown on the offending line and layer.
 *
 * Training may start from a past run's latest checkpoint (layers with the same name and
 * parameter shapes are copied) or from a .safetensors file (tensors with the same name and
 * shape are loaded, as `nnlab train --init FILE --init-partial`); the layers that do not match,
 * such as a head for another class count, start fresh; New Head makes the head start fresh even
 * where it matches (as --replace-head). A file is read on a worker thread for
 * each model it is matched against; the result is kept under a key of the file, the spec and the
 * input, so that re-drawing the list does not read it again. */
#include <stdio.h>
#include <string.h>

#include "finetune.h"
#include "nnlab/alloc.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"
#include "window.h"

struct _NlModelPage {
    GtkWidget parent_instance;

    NlWindow *win; /* the window it is a page of (set once, by nl_model_page_new) */
    GtkWidget *shipped, *add, *summary, *text, *layers_title, *error, *layers;
    GtkWidget *init, *init_info;
    GtkStringList *init_names; /* "Random initialisation", then runs with checkpoints */
    GtkTextTag *error_tag;
    char *init_run;     /* the run whose weights start training, or NULL */
    GHashTable *frozen; /* names of the layers ticked frozen */
    char **frozen_now;  /* those of them with parameters in the model as last built */
    gboolean init_refreshing;
    GtkWidget *init_open;
    char *init_file;       /* the .safetensors file that starts training, or NULL */
    guint file_item;       /* its entry in init_names (0: none) */
    char *file_key;        /* of the read started last */
    char *file_result_key; /* of the read whose result is below */
    int file_loaded;       /* tensors that matched; -1: not known (yet) */
    int file_tensors;      /* of the model */
    char *file_error;      /* why the file did not load, or NULL */
    GHashTable *file_new;  /* layers with a tensor that did not match */
    GtkWidget *new_head;   /* the check button */
    gboolean fresh_head;   /* the head starts fresh even where it matches */
    char *name;            /* a shipped model's name, "NAME (edited)", or "custom" */
    char *base;            /* the shipped model the text was built from, or NULL */
    guint shown;           /* the drop-down's choice last applied */
    guint pending;         /* the choice waiting for the person's answer */
    gboolean reverting;    /* the drop-down is being set back: not the person's choice */
    guint asking;          /* the question about edits is about to be asked */
    int name_chars;        /* width of the layers' name column */
    char *spec;            /* the text last validated */
    gboolean valid, setting;
    guint timer;
};

static const char *const layer_choices[][2] = {
    {"Convolution 32 3×3", "conv 32 3x3 pad=1"},
    {"Dense 128", "dense 128"},
    {"ReLU", "relu"},
    {"Tanh", "tanh"},
    {"Max pooling 2", "maxpool 2"},
    {"Average pooling 2", "avgpool 2"},
    {"Dropout 0.5", "dropout 0.5"},
    {"Flatten", "flatten"},
};

static char *buffer_text(NlModelPage *p)
{
    GtkTextBuffer *b = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->text));
    GtkTextIter s, e;
    gtk_text_buffer_get_bounds(b, &s, &e);
    return gtk_text_buffer_get_text(b, &s, &e, FALSE);
}

static void set_text(NlModelPage *p, const char *text)
{
    GtkTextBuffer *b = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->text));
    gtk_text_buffer_set_text(b, text, -1);
}

/* The spec line that an error message names: "spec:LINE: ..." or "... (line LINE): ...". */
static int error_line(const char *msg)
{
    int line = 0;
    const char *l = strstr(msg, "(line ");
    if (l && sscanf(l, "(line %d)", &line) == 1)
        return line;
    if (strncmp(msg, "spec:", 5) == 0 && sscanf(msg + 5, "%d:", &line) == 1)
        return line;
    return 0;
}

static void edit_lines(NlModelPage *p, int line, int op, const char *insert);

static void row_button(GtkWidget *box, const char *icon, const char *tip, int line, int op,
                       NlModelPage *p, gboolean sensitive);

static void move_clicked(GtkButton *b, gpointer data)
{
    NlModelPage *p = data;
    int line = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(b), "nl-line"));
    int op = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(b), "nl-op"));
    int other = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(b), "nl-other"));
    if (op == 0)
        edit_lines(p, line, 0, NULL);
    else
        edit_lines(p, line, other, NULL);
}

static void row_button(GtkWidget *box, const char *icon, const char *tip, int line, int other,
                       NlModelPage *p, gboolean sensitive)
{
    GtkWidget *b = gtk_button_new_from_icon_name(icon);
    gtk_widget_set_tooltip_text(b, tip);
    gtk_widget_add_css_class(b, "flat");
    gtk_widget_set_sensitive(b, sensitive);
    g_object_set_data(G_OBJECT(b), "nl-line", GINT_TO_POINTER(line));
    g_object_set_data(G_OBJECT(b), "nl-op", GINT_TO_POINTER(other != 0));
    g_object_set_data(G_OBJECT(b), "nl-other", GINT_TO_POINTER(other));
    g_signal_connect(b, "clicked", G_CALLBACK(move_clicked), p);
    gtk_box_append(GTK_BOX(box), b);
}

static GtkWidget *cell(const char *text, int chars, float xalign, const char *css)
{
    GtkWidget *l = gtk_label_new(text);
    gtk_label_set_xalign(GTK_LABEL(l), xalign);
    gtk_label_set_width_chars(GTK_LABEL(l), chars);
    gtk_label_set_max_width_chars(GTK_LABEL(l), chars);
    gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
    if (css)
        gtk_widget_add_css_class(l, css);
    return l;
}

/* One row: name, the spec line's text, output shape, parameters, and the editing buttons. */
static void freeze_toggled(GtkCheckButton *b, gpointer data)
{
    NlModelPage *p = data;
    const char *name = g_object_get_data(G_OBJECT(b), "nl-name");
    gtk_widget_activate_action(GTK_WIDGET(p), "model.freeze", "(sb)", name,
                               gtk_check_button_get_active(b));
}

static GtkWidget *layer_row(NlModelPage *p, const struct nl_layer *l, const char *line_text,
                            const char *shape, const char *params, const char *source,
                            const char *error, int prev_line, int next_line)
{
    GtkWidget *row = gtk_list_box_row_new();
    GtkWidget *v = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    GtkWidget *h = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
    gtk_widget_set_margin_start(v, 10);
    gtk_widget_set_margin_end(v, 4);
    gtk_widget_set_margin_top(v, 4);
    gtk_widget_set_margin_bottom(v, 4);
    GtkWidget *name = cell(l->name, p->name_chars, 0, "heading");
    gtk_widget_set_tooltip_text(name, l->name);
    gtk_box_append(GTK_BOX(h), name);
    GtkWidget *desc = cell(line_text, 8, 0, "nl-mono");
    gtk_widget_set_hexpand(desc, TRUE);
    gtk_box_append(GTK_BOX(h), desc);
    gtk_box_append(GTK_BOX(h), cell(shape, 9, 1, "numeric"));
    gtk_box_append(GTK_BOX(h), cell(params, 8, 1, "numeric"));
    gtk_box_append(GTK_BOX(h), cell(source, 7, 0.5f, "dim-label"));
    GtkWidget *freeze = gtk_check_button_new();
    gtk_widget_set_tooltip_text(freeze, "Freeze: train without updating this layer's weights");
    /* Layers without weights have nothing to freeze: the box keeps its column, unseen. */
    gtk_widget_set_sensitive(freeze, l->param_count > 0);
    gtk_widget_set_opacity(freeze, l->param_count > 0 ? 1.0 : 0.0);
    gtk_check_button_set_active(GTK_CHECK_BUTTON(freeze),
                                g_hash_table_contains(p->frozen, l->name));
    g_object_set_data_full(G_OBJECT(freeze), "nl-name", g_strdup(l->name), g_free);
    g_signal_connect(freeze, "toggled", G_CALLBACK(freeze_toggled), p);
    gtk_box_append(GTK_BOX(h), freeze);
    GtkWidget *btns = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 0);
    row_button(btns, "go-up-symbolic", "Move up", l->line, prev_line, p, prev_line > 0);
    row_button(btns, "go-down-symbolic", "Move down", l->line, next_line, p, next_line > 0);
    row_button(btns, "list-remove-symbolic", "Remove", l->line, 0, p, TRUE);
    gtk_box_append(GTK_BOX(h), btns);
    gtk_box_append(GTK_BOX(v), h);
    if (error) {
        GtkWidget *e = gtk_label_new(error);
        gtk_label_set_wrap(GTK_LABEL(e), TRUE);
        gtk_label_set_xalign(GTK_LABEL(e), 0);
        gtk_widget_add_css_class(e, "nl-error");
        gtk_box_append(GTK_BOX(v), e);
        gtk_widget_add_css_class(row, "nl-error-row");
    }
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), v);
    return row;
}

static GtkWidget *header_row(int name_chars)
{
    GtkWidget *row = gtk_list_box_row_new();
    GtkWidget *h = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
    gtk_widget_set_margin_start(h, 10);
    gtk_widget_set_margin_end(h, 4);
    gtk_widget_set_margin_top(h, 6);
    gtk_widget_set_margin_bottom(h, 6);
    gtk_box_append(GTK_BOX(h), cell("Layer", name_chars, 0, "dim-label"));
    GtkWidget *d = cell("Definition", 8, 0, "dim-label");
    gtk_widget_set_hexpand(d, TRUE);
    gtk_box_append(GTK_BOX(h), d);
    gtk_box_append(GTK_BOX(h), cell("Output", 9, 1, "dim-label"));
    gtk_box_append(GTK_BOX(h), cell("Params", 8, 1, "dim-label"));
    gtk_box_append(GTK_BOX(h), cell("Weights", 7, 0.5f, "dim-label"));
    gtk_box_append(GTK_BOX(h), cell("Frozen", 6, 0.5f, "dim-label"));
    GtkWidget *pad = gtk_label_new("");
    gtk_widget_set_size_request(pad, 3 * 34, -1);
    gtk_box_append(GTK_BOX(h), pad);
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), h);
    gtk_list_box_row_set_activatable(GTK_LIST_BOX_ROW(row), FALSE);
    return row;
}

static void format_count(char *buf, size_t size, size_t n)
{
    if (n >= 1000000)
        snprintf(buf, size, "%.2f M", n / 1e6);
    else if (n >= 10000)
        snprintf(buf, size, "%.1f k", n / 1e3);
    else
        snprintf(buf, size, "%zu", n);
}

/* ---- Weights from a .safetensors file, matched on a worker thread ---- */

/* Owned by its GTask. */
struct file_job {
    char *key, *path, *spec;
    struct nl_shape in;
    int nclasses, fresh_head;
    int rc, tensors;
    struct nl_safetensors_report rep;
    GHashTable *bad; /* layer names */
    struct nl_error err;
};

static void file_job_free(gpointer data)
{
    struct file_job *j = data;
    g_free(j->key);
    g_free(j->path);
    g_free(j->spec);
    if (j->bad)
        g_hash_table_unref(j->bad);
    g_free(j);
}

/* "PATH: skipped LAYER.TENSOR: why": the layer starts fresh. */
static void file_warn(void *ud, const char *msg)
{
    struct file_job *j = ud;
    const char *s = strstr(msg, ": skipped ");
    if (!s)
        return;
    s += strlen(": skipped ");
    const char *dot = strchr(s, '.');
    if (dot)
        g_hash_table_add(j->bad, g_strndup(s, (gsize)(dot - s)));
}

static void file_thread(GTask *task, gpointer source, gpointer data, GCancellable *c)
{
    struct file_job *j = data;
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    j->rc = nl_spec_parse(&spec, j->spec, "spec", NULL, NULL, &j->err);
    if (j->rc == 0)
        j->rc = nl_model_build(&m, spec, j->in, j->nclasses, &j->err);
    if (j->rc == 0) {
        for (int i = 0; i < m->nlayers; i++)
            j->tensors += m->layers[i].nparams;
        if (j->fresh_head && nl_model_head(m) >= 0)
            m->layers[nl_model_head(m)].fresh = 1;
        j->rc = nl_safetensors_load(m, j->path, 1, file_warn, j, &j->rep, &j->err);
    }
    nl_model_free(m);
    nl_spec_free(spec);
    g_task_return_boolean(task, TRUE);
}

static void validate(NlModelPage *p);

/* The page has left its window (the window closed): work finished since is dropped. Tasks hold
 * the page, not the window. */
static gboolean model_gone(NlModelPage *p)
{
    return gtk_widget_get_root(GTK_WIDGET(p)) == NULL;
}

static void file_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlModelPage *p = NL_MODEL_PAGE(source);
    struct file_job *j = g_task_get_task_data(G_TASK(res));
    if (model_gone(p) || !p->file_key || strcmp(j->key, p->file_key) != 0)
        return;
    g_free(p->file_result_key);
    p->file_result_key = g_strdup(j->key);
    g_free(p->file_error);
    p->file_error = j->rc < 0 ? g_strdup(j->err.msg) : NULL;
    p->file_loaded = j->rc < 0 ? -1 : j->rep.loaded;
    p->file_tensors = j->tensors;
    if (p->file_new)
        g_hash_table_unref(p->file_new);
    p->file_new = g_hash_table_ref(j->bad);
    validate(p);
}

static char *file_key(NlModelPage *p, struct nl_shape in, int nclasses)
{
    return g_strdup_printf("%s\n%d %d %d %d %d\n%s", p->init_file, in.c, in.h, in.w, nclasses,
                           p->fresh_head, p->spec);
}

/* Whether the result for the model as it is now is there; starts reading the file if not. */
static gboolean file_result(NlModelPage *p, struct nl_shape in, int nclasses)
{
    char *key = file_key(p, in, nclasses);
    if (p->file_result_key && strcmp(key, p->file_result_key) == 0) {
        g_free(key);
        return TRUE;
    }
    if (p->file_key && strcmp(key, p->file_key) == 0) {
        g_free(key);
        return FALSE; /* being read */
    }
    g_free(p->file_key);
    p->file_key = key;
    p->file_loaded = -1;
    struct file_job *j = g_new0(struct file_job, 1);
    j->key = g_strdup(key);
    j->path = g_strdup(p->init_file);
    j->spec = g_strdup(p->spec);
    j->in = in;
    j->nclasses = nclasses;
    j->fresh_head = p->fresh_head;
    j->bad = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    GTask *task = g_task_new(p, NULL, file_done, NULL);
    g_task_set_task_data(task, j, file_job_free);
    g_task_run_in_thread(task, file_thread);
    g_object_unref(task);
    return FALSE;
}

/* Parses and builds the text for the selected dataset (or 1×28×28 with 10 classes when none is
 * selected) and redraws the list of layers. */
static void validate(NlModelPage *p)
{
    struct nl_error err = {0};
    struct nl_spec *spec = NULL;
    struct nl_model *m = NULL;
    GtkTextBuffer *buf = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->text));
    GtkTextIter s, e;
    GtkWidget *child;
    const struct nl_dataset *d = p->win->data;
    struct nl_shape in = d ? d->shape : (struct nl_shape){1, 28, 28};
    int nclasses = d ? d->nclasses : 10;

    if (p->timer) {
        g_source_remove(p->timer);
        p->timer = 0;
    }
    g_free(p->spec);
    p->spec = buffer_text(p);
    gtk_text_buffer_get_bounds(buf, &s, &e);
    gtk_text_buffer_remove_tag(buf, p->error_tag, &s, &e);
    while ((child = gtk_widget_get_first_child(p->layers)))
        gtk_list_box_remove(GTK_LIST_BOX(p->layers), child);

    int rc = nl_spec_parse(&spec, p->spec, "spec", NULL, NULL, &err);
    if (rc == 0 && d)
        nl_spec_use(spec, d);
    if (rc == 0)
        rc = nl_model_build(&m, spec, in, nclasses, &err);

    /* Which layers a past run's weights would start, and which are frozen. */
    int *from = NULL, matched = 0, with_params = 0;
    g_strfreev(p->frozen_now);
    p->frozen_now = NULL;
    if (m) {
        GPtrArray *fz = g_ptr_array_new();
        for (int i = 0; i < m->nlayers; i++) {
            with_params += m->layers[i].param_count > 0;
            if (m->layers[i].param_count > 0 && g_hash_table_contains(p->frozen, m->layers[i].name))
                g_ptr_array_add(fz, g_strdup(m->layers[i].name));
        }
        g_ptr_array_add(fz, NULL);
        p->frozen_now = (char **)g_ptr_array_free(fz, FALSE);
    }
    gtk_widget_remove_css_class(p->init_info, "nl-error");
    if (m && p->init_run) {
        struct nl_model *src = NULL;
        struct nl_error ierr = {0};
        if (finetune_source(p->win->store, p->init_run, 0, &src, &ierr) == 0) {
            from = g_new(int, (size_t)m->nlayers);
            matched = finetune_match(m, src, from);
            const int head = nl_model_head(m);
            if (p->fresh_head && head >= 0 && from[head] >= 0) {
                from[head] = -1;
                matched--;
            }
            char *t = g_strdup_printf("%d of %d layers with weights start from “%s”; the "
                                      "others start fresh.",
                                      matched, with_params, p->init_run);
            gtk_label_set_text(GTK_LABEL(p->init_info), t);
            g_free(t);
            if (matched == 0)
                gtk_widget_add_css_class(p->init_info, "nl-error");
        } else {
            gtk_label_set_text(GTK_LABEL(p->init_info), ierr.msg);
            gtk_widget_add_css_class(p->init_info, "nl-error");
        }
        nl_model_free(src);
    } else if (m && p->init_file) {
        char *base = g_path_get_basename(p->init_file);
        char *t;
        if (!file_result(p, in, nclasses)) {
            t = g_strdup_printf("Reading %s…", base);
        } else if (p->file_error) {
            t = g_strdup(p->file_error);
            gtk_widget_add_css_class(p->init_info, "nl-error");
        } else {
            t = g_strdup_printf("%d of %d tensors start from %s; the others start fresh.",
                                p->file_loaded, p->file_tensors, base);
            from = g_new(int, (size_t)m->nlayers);
            for (int i = 0; i < m->nlayers; i++)
                from[i] =
                    p->file_new && g_hash_table_contains(p->file_new, m->layers[i].name) ? -1 : i;
            if (p->fresh_head && nl_model_head(m) >= 0)
                from[nl_model_head(m)] = -1;
            if (p->file_loaded == 0)
                gtk_widget_add_css_class(p->init_info, "nl-error");
        }
        gtk_label_set_text(GTK_LABEL(p->init_info), t);
        g_free(t);
        g_free(base);
    } else if (p->frozen_now && p->frozen_now[0]) {
        /* Frozen layers that start from random weights learn nothing and keep no weights. */
        char *list = g_strjoinv(", ", p->frozen_now);
        char *t = g_strdup_printf("Frozen layers %s start from random weights and stay so: "
                                  "choose a run or a file to start from above, or untick "
                                  "Frozen.",
                                  list);
        gtk_label_set_text(GTK_LABEL(p->init_info), t);
        gtk_widget_add_css_class(p->init_info, "nl-error");
        g_free(t);
        g_free(list);
    } else {
        gtk_label_set_text(GTK_LABEL(p->init_info), "Seeded random weights (Xavier unless the "
                                                    "spec says init=he or init=zero).");
    }
    p->valid = rc == 0;
    const int bad_line = rc < 0 ? error_line(err.msg) : 0;
    if (bad_line > 0) {
        GtkTextIter ls, le;
        gtk_text_buffer_get_iter_at_line(buf, &ls, bad_line - 1);
        le = ls;
        gtk_text_iter_forward_to_line_end(&le);
        gtk_text_buffer_apply_tag(buf, p->error_tag, &ls, &le);
    }
    gtk_label_set_text(GTK_LABEL(p->error), rc < 0 ? err.msg : "");
    gboolean attached = FALSE; /* the error shows on its layer's row rather than on top */

    if (spec) {
        char **lines = g_strsplit(p->spec, "\n", -1);
        const guint nlines = g_strv_length(lines);
        /* The name column as wide as the longest name, within reason (a tooltip says more). */
        p->name_chars = 7;
        for (int i = 0; i < spec->nlayers; i++)
            p->name_chars = MAX(p->name_chars, (int)MIN(strlen(spec->layers[i].name), 14));
        gtk_list_box_append(GTK_LIST_BOX(p->layers), header_row(p->name_chars));
        for (int i = 0; i < spec->nlayers; i++) {
            const struct nl_layer *l = m ? &m->layers[i] : &spec->layers[i];
            char shape[48] = "—", params[32] = "—", text[160] = "";
            if (m) {
                snprintf(shape, sizeof shape, "%d×%d×%d", l->out.c, l->out.h, l->out.w);
                format_count(params, sizeof params, l->param_count);
            }
            if (l->line > 0 && (guint)l->line <= nlines) {
                /* The definition without the name and the comment. */
                char *t = g_strdup(lines[l->line - 1]);
                char *hash = strchr(t, '#');
                if (hash)
                    *hash = 0;
                char *colon = strchr(t, ':');
                snprintf(text, sizeof text, "%s", g_strstrip(colon ? colon + 1 : t));
                g_free(t);
            }
            int prev = i > 0 ? spec->layers[i - 1].line : 0;
            int next = i + 1 < spec->nlayers ? spec->layers[i + 1].line : 0;
            attached |= bad_line > 0 && l->line == bad_line;
            const char *source = !m || l->param_count == 0 ? ""
                                 : !from                   ? "random"
                                 : from[i] >= 0 ? (p->init_file ? "from file" : "from run")
                                                : "new";
            gtk_list_box_append(GTK_LIST_BOX(p->layers),
                                layer_row(p, l, text, shape, params, source,
                                          bad_line > 0 && l->line == bad_line ? err.msg : NULL,
                                          prev, next));
        }
        g_strfreev(lines);
    }
    gtk_widget_set_visible(p->error, rc < 0 && !attached);
    char sum[160];
    if (m) {
        char n[32];
        format_count(n, sizeof n, m->nparams);
        snprintf(sum, sizeof sum, "%d layers · %s parameters · input %d×%d×%d, %d classes%s",
                 m->nlayers, n, in.c, in.h, in.w, nclasses, d ? "" : " (no dataset selected)");
    } else {
        snprintf(sum, sizeof sum, "does not build for input %d×%d×%d", in.c, in.h, in.w);
    }
    gtk_label_set_text(GTK_LABEL(p->summary), sum);
    g_free(from);
    nl_model_free(m);
    nl_spec_free(spec);
    nl_window_update_subtitle(p->win);
    if (p->win->train)
        train_page_dataset_changed(p->win->train); /* whether Start can start */
}

static gboolean validate_later(gpointer data)
{
    NlModelPage *p = data;
    p->timer = 0;
    if (!model_gone(p))
        validate(p);
    return G_SOURCE_REMOVE;
}

/* Whether two specs say the same, line by line, blank lines and spaces at line ends aside. */
static gboolean same_spec(const char *a, const char *b)
{
    char **la = g_strsplit(a, "\n", -1), **lb = g_strsplit(b, "\n", -1);
    char **x = la, **y = lb;
    gboolean same = TRUE;
    for (;;) {
        while (*x && !g_strchomp(*x)[0])
            x++;
        while (*y && !g_strchomp(*y)[0])
            y++;
        if (!*x || !*y) {
            same = !*x && !*y;
            break;
        }
        if (strcmp(*x++, *y++) != 0) {
            same = FALSE;
            break;
        }
    }
    g_strfreev(la);
    g_strfreev(lb);
    return same;
}

/* The model's name from its text: a shipped model's that it says the same as, else "BASE
 * (edited)" when it was built from one, else "custom". */
static void name_from_text(NlModelPage *p)
{
    char *t = buffer_text(p);
    g_free(p->name);
    p->name = NULL;
    for (const char *const *n = nl_spec_shipped_names(); *n && !p->name; n++)
        if (same_spec(t, nl_spec_shipped_text(*n)))
            p->name = g_strdup(*n);
    if (!p->name)
        p->name = p->base ? g_strdup_printf("%s (edited)", p->base) : g_strdup("custom");
    g_free(t);
}

static void text_changed(GtkTextBuffer *b, gpointer data)
{
    NlModelPage *p = data;
    if (!p->setting)
        name_from_text(p);
    if (p->timer)
        g_source_remove(p->timer);
    p->timer = g_timeout_add(200, validate_later, p);
}

/* Edits the text: op 0 removes line `line`; otherwise swaps it with line `op`; insert (with op
 * -1) adds a line before `line`. Lines are 1-based. */
static void edit_lines(NlModelPage *p, int line, int op, const char *insert)
{
    char *text = buffer_text(p);
    char **lines = g_strsplit(text, "\n", -1);
    const int n = (int)g_strv_length(lines);
    GPtrArray *out = g_ptr_array_new();
    for (int i = 0; i < n; i++) {
        if (insert && i == line - 1)
            g_ptr_array_add(out, (gpointer)insert);
        if (!insert && op == 0 && i == line - 1)
            continue;
        if (!insert && op > 0 && i == line - 1)
            g_ptr_array_add(out, lines[op - 1]);
        else if (!insert && op > 0 && i == op - 1)
            g_ptr_array_add(out, lines[line - 1]);
        else
            g_ptr_array_add(out, lines[i]);
    }
    if (insert && line > n)
        g_ptr_array_add(out, (gpointer)insert);
    g_ptr_array_add(out, NULL);
    char *joined = g_strjoinv("\n", (char **)out->pdata);
    set_text(p, joined);
    g_free(joined);
    g_ptr_array_free(out, TRUE);
    g_strfreev(lines);
    g_free(text);
    validate(p);
}

/* model.add-layer (definition): inserts a layer before the last one (the classifier). */
static void add_layer(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    struct nl_spec *spec;
    struct nl_error err = {0};
    int line = 1 << 20;
    char *text = buffer_text(p);
    if (nl_spec_parse(&spec, text, "spec", NULL, NULL, &err) == 0) {
        line = spec->layers[spec->nlayers - 1].line;
        nl_spec_free(spec);
    }
    g_free(text);
    edit_lines(p, line, -1, g_variant_get_string(param, NULL));
}

static void use_shipped(NlModelPage *p, const char *name)
{
    const char *text = nl_spec_shipped_text(name);
    if (!text) {
        nl_window_notify(p->win, "No shipped model named “%s”", name);
        return;
    }
    p->setting = TRUE;
    set_text(p, text);
    p->setting = FALSE;
    g_free(p->name);
    p->name = g_strdup(name);
    g_free(p->base);
    p->base = g_strdup(name);
    validate(p);
}

/* Whether the editor holds text that no shipped model says: edits that a switch would lose. */
static gboolean unsaved_edits(NlModelPage *p)
{
    for (const char *const *n = nl_spec_shipped_names(); *n; n++)
        if (p->name && strcmp(p->name, *n) == 0)
            return FALSE;
    return TRUE;
}

static void set_shown(NlModelPage *p, guint i)
{
    p->reverting = TRUE;
    gtk_drop_down_set_selected(GTK_DROP_DOWN(p->shipped), i);
    p->reverting = FALSE;
    p->shown = i;
}

static void switch_confirmed(gpointer data)
{
    NlModelPage *p = data;
    const char *const *names = nl_spec_shipped_names();
    set_shown(p, p->pending);
    use_shipped(p, names[p->pending]);
}

/* model.shipped (name) */
static void shipped_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    const char *name = g_variant_get_string(param, NULL);
    const char *const *names = nl_spec_shipped_names();
    for (guint i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0)
            set_shown(p, i);
    use_shipped(p, name);
}

/* model.spec (text): a spec of one's own. */
static void spec_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    g_free(p->base);
    p->base = NULL;
    set_text(p, g_variant_get_string(param, NULL));
    validate(p);
}

/* Asks whether the pending choice may replace the edited text; the drop-down meanwhile keeps
 * saying what the text is (set back here, out of its own signal). */
static gboolean ask_switch(gpointer data)
{
    NlModelPage *p = data;
    const char *const *names = nl_spec_shipped_names();
    p->asking = 0;
    if (model_gone(p))
        return G_SOURCE_REMOVE;
    set_shown(p, p->shown);
    char *q = g_strdup_printf("Replace “%s” with %s?", p->name, names[p->pending]);
    char *detail = g_strdup_printf("The spec in the editor is not saved anywhere: its edits are "
                                   "lost when %s's spec replaces it. Copy it out first to keep "
                                   "it.",
                                   names[p->pending]);
    nl_window_confirm(p->win, q, detail, "_Replace", switch_confirmed, p);
    g_free(q);
    g_free(detail);
    return G_SOURCE_REMOVE;
}

/* A shipped model chosen in the drop-down replaces the text; edits are not lost without a
 * question. */
static void shipped_selected(GObject *dd, GParamSpec *ps, gpointer data)
{
    NlModelPage *p = data;
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(dd));
    const char *const *names = nl_spec_shipped_names();
    if (p->reverting || i >= g_strv_length((char **)names) || i == p->shown)
        return;
    if (!unsaved_edits(p)) {
        p->shown = i;
        use_shipped(p, names[i]);
        return;
    }
    p->pending = i;
    if (!p->asking)
        p->asking = g_idle_add(ask_switch, p);
}

const char *model_page_spec(NlModelPage *p)
{
    if (p->timer)
        validate(p);
    return p->spec;
}

const char *model_page_name(NlModelPage *p)
{
    return p->name ? p->name : "-";
}

const char *model_page_init_text(NlModelPage *p)
{
    if (p->timer)
        validate(p);
    return gtk_label_get_text(GTK_LABEL(p->init_info));
}

gboolean model_page_valid(NlModelPage *p)
{
    if (p->timer)
        validate(p);
    return p->valid;
}

const char *model_page_init_run(NlModelPage *p)
{
    return p->init_run;
}

const char *const *model_page_frozen(NlModelPage *p)
{
    if (p->timer)
        validate(p);
    static const char *const none[] = {NULL};
    return p->frozen_now ? (const char *const *)p->frozen_now : none;
}

const char *model_page_init_file(NlModelPage *p)
{
    return p->init_file;
}

int model_page_init_loaded(NlModelPage *p)
{
    if (p->timer)
        validate(p);
    return p->init_file && p->file_result_key && p->file_key &&
                   strcmp(p->file_key, p->file_result_key) == 0
               ? p->file_loaded
               : -1;
}

static void set_init_run(NlModelPage *p, const char *run)
{
    g_free(p->init_run);
    p->init_run = run && run[0] ? g_strdup(run) : NULL;
    validate(p);
}

/* The choices: random weights, the runs with a checkpoint (newest first), and the file when one
 * was opened; the current one selected. */
static void fill_init_choices(NlModelPage *p)
{
    struct nl_run_info *list = NULL;
    struct nl_error err = {0};
    int n = 0;
    if (nl_run_list(p->win->store, &list, &n, &err) < 0)
        n = 0;
    p->init_refreshing = TRUE;
    gtk_string_list_splice(p->init_names, 0, g_list_model_get_n_items(G_LIST_MODEL(p->init_names)),
                           NULL);
    gtk_string_list_append(p->init_names, "Random initialisation");
    guint sel = 0, at = 1;
    gboolean found = FALSE;
    for (int i = n - 1; i >= 0; i--) {
        if (list[i].epochs_done < 1)
            continue;
        gtk_string_list_append(p->init_names, list[i].name);
        if (p->init_run && strcmp(p->init_run, list[i].name) == 0) {
            sel = at;
            found = TRUE;
        }
        at++;
    }
    nl_free(list);
    p->file_item = 0;
    if (p->init_file) {
        char *base = g_path_get_basename(p->init_file);
        gtk_string_list_append(p->init_names, base);
        g_free(base);
        sel = p->file_item = at;
    }
    gtk_drop_down_set_selected(GTK_DROP_DOWN(p->init), sel);
    p->init_refreshing = FALSE;
    if (!found && p->init_run)
        set_init_run(p, NULL); /* the run was deleted */
}

/* Starts training from a file's tensors (NULL or "": not from a file). */
static void set_init_file(NlModelPage *p, const char *path)
{
    g_free(p->init_file);
    p->init_file = path && path[0] ? g_strdup(path) : NULL;
    g_free(p->file_key);
    g_free(p->file_result_key);
    p->file_key = p->file_result_key = NULL;
    p->file_loaded = -1;
    if (p->init_file) {
        g_free(p->init_run);
        p->init_run = NULL;
    }
    fill_init_choices(p);
    validate(p);
}

/* model.init (run): the run whose weights start training; "" for random weights. */
static void init_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    const char *run = g_variant_get_string(param, NULL);
    if (p->init_file)
        set_init_file(p, NULL);
    guint n = g_list_model_get_n_items(G_LIST_MODEL(p->init_names));
    for (guint i = 1; i < n; i++)
        if (i != p->file_item && strcmp(gtk_string_list_get_string(p->init_names, i), run) == 0) {
            p->init_refreshing = TRUE;
            gtk_drop_down_set_selected(GTK_DROP_DOWN(p->init), i);
            p->init_refreshing = FALSE;
        }
    if (!run[0]) {
        p->init_refreshing = TRUE;
        gtk_drop_down_set_selected(GTK_DROP_DOWN(p->init), 0);
        p->init_refreshing = FALSE;
    }
    set_init_run(p, run);
}

gboolean model_page_fresh_head(NlModelPage *p)
{
    return p->fresh_head;
}

static void new_head_toggled(GtkCheckButton *b, gpointer data)
{
    NlModelPage *p = data;
    p->fresh_head = gtk_check_button_get_active(b);
    validate(p);
}

/* model.new-head (bool): the head starts fresh even where the weights have a matching one
 * (a dataset with as many classes, but other ones), as --replace-head. */
static void new_head_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    gtk_check_button_set_active(GTK_CHECK_BUTTON(p->new_head), g_variant_get_boolean(param));
}

/* model.init-file (path): a .safetensors file whose tensors start training; "" for none. */
static void init_file_action(GtkWidget *widget, const char *action, GVariant *param)
{
    set_init_file(NL_MODEL_PAGE(widget), g_variant_get_string(param, NULL));
}

static void open_response(GtkNativeDialog *dialog, int response, gpointer data)
{
    NlModelPage *p = data;
    if (response == GTK_RESPONSE_ACCEPT && !model_gone(p)) {
        GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
        char *path = f ? g_file_get_path(f) : NULL;
        if (path)
            set_init_file(p, path);
        g_free(path);
        if (f)
            g_object_unref(f);
    }
    g_object_unref(dialog);
}

/* model.init-open: chooses a .safetensors file. */
static void init_open_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    GtkFileChooserNative *d = gtk_file_chooser_native_new(
        "Start from Weights", GTK_WINDOW(p->win), GTK_FILE_CHOOSER_ACTION_OPEN, "_Open", "_Cancel");
    GtkFileFilter *f = gtk_file_filter_new();
    gtk_file_filter_set_name(f, "Weights (.safetensors)");
    gtk_file_filter_add_pattern(f, "*.safetensors");
    gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(d), f);
    g_object_unref(f);
    g_signal_connect(d, "response", G_CALLBACK(open_response), p);
    gtk_native_dialog_show(GTK_NATIVE_DIALOG(d));
}

/* model.freeze (layer, frozen) */
static void freeze_action(GtkWidget *widget, const char *action, GVariant *param)
{
    NlModelPage *p = NL_MODEL_PAGE(widget);
    const char *name;
    gboolean on;
    g_variant_get(param, "(&sb)", &name, &on);
    if (on == g_hash_table_contains(p->frozen, name))
        return;
    if (on)
        g_hash_table_add(p->frozen, g_strdup(name));
    else
        g_hash_table_remove(p->frozen, name);
    if (p->timer)
        g_source_remove(p->timer);
    /* Later, so that the check button that was clicked is not destroyed in its own handler. */
    p->timer = g_timeout_add(50, validate_later, p);
}

static void init_selected(GObject *dd, GParamSpec *ps, gpointer data)
{
    NlModelPage *p = data;
    if (p->init_refreshing)
        return;
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(dd));
    if (p->file_item && i == p->file_item)
        return;
    char *run = i == 0 || i == GTK_INVALID_LIST_POSITION
                    ? NULL
                    : g_strdup(gtk_string_list_get_string(p->init_names, i));
    if (p->init_file) {
        /* Dropping the file's entry from the list: the run is chosen after. */
        g_free(p->init_run);
        p->init_run = g_strdup(run);
        set_init_file(p, NULL);
    } else {
        set_init_run(p, run);
    }
    g_free(run);
}

/* The runs that have a checkpoint, newest first, as starting points. */
void model_page_runs_changed(NlModelPage *p)
{
    if (!p)
        return;
    if (p)
        fill_init_choices(p);
}

void model_page_dataset_changed(NlModelPage *p)
{
    validate(p);
}

G_DEFINE_FINAL_TYPE(NlModelPage, nl_model_page, GTK_TYPE_WIDGET)

static void nl_model_page_init(NlModelPage *p)
{
    gtk_widget_init_template(GTK_WIDGET(p));
    p->file_loaded = -1;
}

static void nl_model_page_dispose(GObject *obj)
{
    NlModelPage *p = NL_MODEL_PAGE(obj);
    if (p->asking) {
        g_source_remove(p->asking);
        p->asking = 0;
    }
    if (p->timer) {
        g_source_remove(p->timer);
        p->timer = 0;
    }
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(GTK_WIDGET(obj))))
        gtk_widget_unparent(child);
    gtk_widget_dispose_template(GTK_WIDGET(obj), NL_TYPE_MODEL_PAGE);
    G_OBJECT_CLASS(nl_model_page_parent_class)->dispose(obj);
}

static void nl_model_page_finalize(GObject *obj)
{
    NlModelPage *p = NL_MODEL_PAGE(obj);
    g_free(p->name);
    g_free(p->base);
    g_free(p->spec);
    g_free(p->init_run);
    g_free(p->init_file);
    g_free(p->file_key);
    g_free(p->file_result_key);
    g_free(p->file_error);
    if (p->file_new)
        g_hash_table_unref(p->file_new);
    g_strfreev(p->frozen_now);
    if (p->frozen)
        g_hash_table_unref(p->frozen);
    G_OBJECT_CLASS(nl_model_page_parent_class)->finalize(obj);
}

static void nl_model_page_class_init(NlModelPageClass *klass)
{
    GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
    G_OBJECT_CLASS(klass)->dispose = nl_model_page_dispose;
    G_OBJECT_CLASS(klass)->finalize = nl_model_page_finalize;
    nl_page_class_set_info(wc, "model", "Model", "view-list-symbolic");
    nl_page_class_add_shortcut(wc, "<Control><Shift>o", "model.init-open");
    gtk_widget_class_set_layout_manager_type(wc, GTK_TYPE_BIN_LAYOUT);
    gtk_widget_class_set_template_from_resource(wc, "/org/nnlab/Nnlab/model-page.ui");
#define BIND(x) gtk_widget_class_bind_template_child(wc, NlModelPage, x)
    BIND(shipped);
    BIND(add);
    BIND(summary);
    BIND(text);
    BIND(layers_title);
    BIND(error);
    BIND(layers);
    BIND(init);
    BIND(init_info);
    BIND(init_open);
    BIND(new_head);
#undef BIND
    gtk_widget_class_install_action(wc, "model.add-layer", "s", add_layer);
    gtk_widget_class_install_action(wc, "model.shipped", "s", shipped_action);
    gtk_widget_class_install_action(wc, "model.spec", "s", spec_action);
    gtk_widget_class_install_action(wc, "model.init", "s", init_action);
    gtk_widget_class_install_action(wc, "model.freeze", "(sb)", freeze_action);
    gtk_widget_class_install_action(wc, "model.init-file", "s", init_file_action);
    gtk_widget_class_install_action(wc, "model.init-open", NULL, init_open_action);
    gtk_widget_class_install_action(wc, "model.new-head", "b", new_head_action);
}

NlModelPage *nl_model_page_new(NlWindow *w)
{
    NlModelPage *p = g_object_ref_sink(g_object_new(NL_TYPE_MODEL_PAGE, NULL));
    p->win = w;
    p->frozen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    p->init_names = gtk_string_list_new(NULL);
    gtk_drop_down_set_model(GTK_DROP_DOWN(p->init), G_LIST_MODEL(p->init_names));
    g_object_unref(p->init_names);
    model_page_runs_changed(p);
    g_signal_connect(p->init, "notify::selected", G_CALLBACK(init_selected), p);
    g_signal_connect(p->new_head, "toggled", G_CALLBACK(new_head_toggled), p);

    GMenu *menu = g_menu_new();
    for (size_t i = 0; i < G_N_ELEMENTS(layer_choices); i++) {
        GMenuItem *it = g_menu_item_new(layer_choices[i][0], NULL);
        g_menu_item_set_action_and_target(it, "model.add-layer", "s", layer_choices[i][1]);
        g_menu_append_item(menu, it);
        g_object_unref(it);
    }
    gtk_menu_button_set_menu_model(GTK_MENU_BUTTON(p->add), G_MENU_MODEL(menu));
    g_object_unref(menu);

    GtkStringList *names = gtk_string_list_new((const char *const *)nl_spec_shipped_names());
    gtk_drop_down_set_model(GTK_DROP_DOWN(p->shipped), G_LIST_MODEL(names));
    g_object_unref(names);

    GtkTextBuffer *buf = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->text));
    p->error_tag = gtk_text_buffer_create_tag(buf, "error", "underline", PANGO_UNDERLINE_ERROR,
                                              "background", "rgba(224,27,36,0.18)", NULL);
    g_signal_connect(buf, "changed", G_CALLBACK(text_changed), p);
    use_shipped(p, nl_spec_shipped_names()[0]);
    g_signal_connect(p->shipped, "notify::selected", G_CALLBACK(shipped_selected), p);
    return p;
}
