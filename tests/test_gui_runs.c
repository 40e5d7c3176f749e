/* The Datasets page's Name field and the Runs page as a person meets them, under Xvfb, on a
 * store filled by the command line (`nnlab import`, `nnlab train`, `nnlab eval`, run as child
 * processes, as a person would in a terminal beside the window). Checks that:
 *  - a name of spaces only, or one the store holds, marks the Name field and says why under it
 *    in the window's terms (the bin button, a free name offered), and no file chooser opens;
 *  - an import under a taken name is refused at the field, nothing started;
 *  - "Skip bad files or rows" imports a CSV with a bad row, saying so, and the field is cleared
 *    for the next import;
 *  - the model's name stays honest: a blank line keeps "lenet", an edit makes "lenet (edited)",
 *    choosing another model in the drop-down asks before the edits are lost (and Cancel keeps
 *    them), and a frozen layer that starts from random weights is warned of;
 *  - the newest run is selected when the page opens, and stays selected as newer ones come;
 *  - a run with no checkpoint has Resume and Confusion Matrix disabled, with the reason shown;
 *  - a stopped run's row shows its last validation accuracy;
 *  - the per-class precision, recall and F1 beside the confusion matrix are those `nnlab eval`
 *    prints for the same run;
 *  - the misclassified samples carry their probabilities, and one opens larger with its
 *    likeliest classes;
 *  - ticking two runs shows their settings side by side, the differing ones marked;
 *  - a cluster run's settings line names what --overlap auto chose, with both step times;
 *  - the Predict page's picker says each run's dataset and input; an image is described as
 *    converted, with a warning when it is far from the run's images (colour for a gray run), and
 *    gets the classes and probabilities `nnlab predict` gives the file;
 *    a CSV run takes a row typed into fields named by the CSV's header, standardised as its
 *    batches were (the same class as the model gives the stored sample), and a field that is
 *    not a number is named; a regression run on a table with a categorical column and empty
 *    fields takes a row through the import's preprocessing and shows the value `nnlab predict
 *    --row` prints, in the target's units, saying when a level is unseen; a text run takes typed
 *    text and gives the class `nnlab predict --text` gives, counting out-of-vocabulary words;
 *  - a regression run's row shows R², MAE and RMSE, and its settings line names the task and
 *    target ("regress cost"), not "classes 1"; its predicted-against-actual and residual plots
 *    come with the R², MAE and RMSE `nnlab eval` prints;
 *  - a CSV dataset lists its columns with their kinds (numeric, categorical, target), statistics
 *    and fills, and its first rows stay readable at 1024x700 (header and 8 rows in view); a text
 *    dataset shows a few documents of each class as words with out-of-vocabulary tokens marked,
 *    and its vocabulary's size and coverage; a column of many levels says "embedded (R rows)";
 *  - the Runs page's button reads Predicted vs Actual on a regression run (and is clicked there),
 *    Confusion Matrix on a classification run;
 *  - a click on Predict's "Open a CSV File of Rows…" opens a chooser, and the file chosen has its
 *    rows predicted in a table as `nnlab predict --csv` predicts them; a bad row is refused,
 *    naming the file and line;
 *  - a run started by `nnlab train` in another process is listed as running, its curve gains
 *    points epoch by epoch while the window follows the store, and it ends as done — with the
 *    main loop never stalled by the following; so is a run of `mpirun -np 2 nnlab train --mpi`
 *    (skipped, saying why, without mpirun).
 * Screenshots of the page go to BUILD/ui-screenshots/.
 *
 * Run by meson directly, it re-executes itself under dbus-run-session and xvfb-run; it skips
 * when those programs or GTK are missing, or NNLAB_BIN is not set. */
#include "nnlab-config.h"
#include "tap.h"

#if !NNLAB_HAVE_GTK
int main(void)
{
    skip_all("built without GTK 4");
}
#else

#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <png.h>

#include "gui_util.h"
#include "nnlab/model.h"
#include "nnlab/runs.h"
#include "png_writer.h"

static char db[700];
static const char *bin;

/* The first mapped button under root bound to action ("runs.confusion"). */
static GtkWidget *action_button(GtkWidget *root, const char *action)
{
    if (GTK_IS_BUTTON(root) && gtk_widget_get_mapped(root)) {
        const char *a = gtk_actionable_get_action_name(GTK_ACTIONABLE(root));
        if (a && strcmp(a, action) == 0)
            return root;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = action_button(c, action);
        if (f)
            return f;
    }
    return NULL;
}

/* Runs nnlab with these arguments on the test's store; its stdout into out (may be NULL). */
static int nnlab(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int nnlab(char **out, const char *fmt, ...)
{
    char args[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *cmd = g_strdup_printf("%s --db %s --quiet %s", bin, db, args);
    char *err = NULL, *text = NULL;
    int status = -1;
    GError *e = NULL;
    gboolean ran = g_spawn_command_line_sync(cmd, &text, &err, &status, &e);
    if (out)
        *out = text;
    else
        g_free(text);
    if (!ran || !g_spawn_check_wait_status(status, NULL))
        diag("%s: %s", cmd, ran ? err : e->message);
    g_free(cmd);
    g_free(err);
    g_clear_error(&e);
    return ran && g_spawn_check_wait_status(status, NULL);
}

/* The Runs page's row of run: the list box row that carries its name. */
static GtkWidget *row_under(GtkWidget *w, const char *run)
{
    const char *name = g_object_get_data(G_OBJECT(w), "nl-name");
    if (GTK_IS_LIST_BOX_ROW(w) && name && strcmp(name, run) == 0)
        return w;
    for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *r = row_under(c, run);
        if (r)
            return r;
    }
    return NULL;
}

static GtkWidget *row_of(const char *run)
{
    return row_under(win, run);
}

static int run_a_selected(void)
{
    const char *sel = runs_page_selected(nw()->runs);
    return sel && strcmp(sel, "run-a") == 0;
}

/* The texts of the labels under w, joined by newlines. */
static void label_texts(GtkWidget *w, GString *out)
{
    if (GTK_IS_LABEL(w))
        g_string_append_printf(out, "%s\n", gtk_label_get_text(GTK_LABEL(w)));
    for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
        label_texts(c, out);
}

static char *row_text(const char *run)
{
    GtkWidget *r = row_of(run);
    if (!r)
        return g_strdup("");
    GString *s = g_string_new(NULL);
    label_texts(r, s);
    return g_string_free(s, FALSE);
}

/* text on one line (newlines as " / "), for a test's description; the last 4 stay valid. */
static const char *oneline(const char *text)
{
    static char buf[4][600];
    static int at;
    char *b = buf[at++ % 4];
    size_t o = 0;
    for (const char *p = text ? text : "(none)"; *p && o + 4 < sizeof buf[0]; p++) {
        if (*p == '\n') {
            memcpy(b + o, " / ", 3);
            o += 3;
        } else {
            b[o++] = *p;
        }
    }
    b[o] = '\0';
    return b;
}

/* The first widget under root of that type whose label (a button's, a check button's) or
 * placeholder (an entry's) is text. */
static GtkWidget *find_text(GtkWidget *root, GType type, const char *text)
{
    if (G_TYPE_CHECK_INSTANCE_TYPE(root, type)) {
        const char *t = GTK_IS_LABEL(root) ? gtk_label_get_text(GTK_LABEL(root))
                        : GTK_IS_CHECK_BUTTON(root)
                            ? gtk_check_button_get_label(GTK_CHECK_BUTTON(root))
                        : GTK_IS_ENTRY(root)  ? gtk_entry_get_placeholder_text(GTK_ENTRY(root))
                        : GTK_IS_BUTTON(root) ? gtk_button_get_label(GTK_BUTTON(root))
                                              : NULL;
        if (t && strcmp(t, text) == 0)
            return root;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find_text(c, type, text);
        if (f)
            return f;
    }
    return NULL;
}

/* The visible message dialog (a question), or NULL. */
static GtkWidget *question(void)
{
    return find_toplevel(GTK_TYPE_MESSAGE_DIALOG);
}

static int asked(void)
{
    return question() != NULL;
}

static int not_asked(void)
{
    return question() == NULL;
}

static const char *question_text(GtkWidget *d)
{
    static char buf[600];
    char *t = NULL;
    g_object_get(d, "text", &t, NULL);
    snprintf(buf, sizeof buf, "%s", t ? t : "");
    g_free(t);
    return buf;
}

/* The first mapped widget of that type under root. */
static GtkWidget *find_mapped(GtkWidget *root, GType type)
{
    if (G_TYPE_CHECK_INSTANCE_TYPE(root, type) && gtk_widget_get_mapped(root))
        return root;
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find_mapped(c, type);
        if (f)
            return f;
    }
    return NULL;
}

/* The drop-down under root that offers item among its choices. */
static GtkWidget *find_choice(GtkWidget *root, const char *item)
{
    if (GTK_IS_DROP_DOWN(root)) {
        GListModel *m = gtk_drop_down_get_model(GTK_DROP_DOWN(root));
        for (guint i = 0; m && GTK_IS_STRING_LIST(m) && i < g_list_model_get_n_items(m); i++)
            if (strcmp(gtk_string_list_get_string(GTK_STRING_LIST(m), i), item) == 0)
                return root;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find_choice(c, item);
        if (f)
            return f;
    }
    return NULL;
}

/* A w x h PNG, RGB with a colour gradient or gray with a band. */
static int write_png(const char *path, int w, int h, int colour)
{
    const int channels = colour ? 3 : 1;
    uint8_t *px = malloc((size_t)w * h * channels);
    if (!px)
        return -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * channels;
            if (colour) {
                p[0] = (uint8_t)(255 * x / w);
                p[1] = (uint8_t)(255 * y / h);
                p[2] = 90;
            } else {
                p[0] = (uint8_t)(y >= 6 && y < 9 ? 220 : 10);
            }
        }
    const int rc = write_png_8bit(path, px, w, h, channels);
    free(px);
    return rc;
}

static int predicted(void)
{
    return predict_page_top(nw()->predict) != NULL;
}

static int row_fields(void)
{
    return predict_page_fields(nw()->predict) == 2;
}

/* The regression table's fields: size and colour, its target left out. */
static int cost_fields(void)
{
    GtkWidget *l = find_text(win, GTK_TYPE_LABEL, "colour");
    return row_fields() && l && gtk_widget_get_mapped(l) && !find_text(win, GTK_TYPE_LABEL, "cost");
}

/* Selects the run in the Predict page's picker; its label, or NULL. */
static const char *pick_run(const char *run)
{
    GtkWidget *dd = NULL;
    const char *label = NULL;
    guint at = 0;
    for (guint i = 0; (label = predict_page_run_label(nw()->predict, i)); i++)
        if (g_str_has_prefix(label, run) && label[strlen(run)] == ' ') {
            at = i;
            break;
        }
    if (label)
        dd = find_choice(win, label);
    if (dd)
        gtk_drop_down_set_selected(GTK_DROP_DOWN(dd), at);
    return dd ? label : NULL;
}

/* The last prediction's classes and probabilities are those `nnlab predict RUN FILE` gives, to
 * the digits it prints. */
static void predicted_as_cli(const char *run, const char *file)
{
    char *cli = NULL;
    const char *label;
    double prob;
    GString *want = g_string_new(NULL), *got = g_string_new(NULL);

    nnlab(&cli, "--json predict %s %s --top 5", run, file);
    for (const char *at = cli; at && (at = strstr(at, "\"class\":\""));) {
        char cls[32] = "", p[32] = "";
        sscanf(at + 9, "%31[^\"]", cls);
        const char *pr = strstr(at, "\"probability\":");
        if (pr)
            sscanf(pr + 14, "%31[^}]", p);
        g_string_append_printf(want, "%s %s; ", cls, p);
        at += 9;
    }
    for (int i = 0; (label = predict_page_class(nw()->predict, i, &prob)); i++)
        g_string_append_printf(got, "%s %.6g; ", label, prob);
    ok(want->len > 0 && strcmp(want->str, got->str) == 0,
       "its top classes and probabilities are those `nnlab predict` gives the file (%s; %s)",
       got->str, want->str);
    g_string_free(want, TRUE);
    g_string_free(got, TRUE);
    g_free(cli);
}

/* The class the run's model gives the stored train sample whose features are v (2 values). */
static char *model_class(const char *run, const float *v)
{
    struct nl_store *s = NULL;
    struct nl_model *m = NULL;
    struct nl_dataset *d = NULL;
    struct nl_exec *x = NULL;
    struct nl_error err = {0};
    char *cls = NULL;
    if (nl_store_open(&s, db, &err) == 0 && nl_ui_load_run(s, run, &m, &d, &err) == 0 &&
        nl_exec_new(&x, m, 1, &err) == 0) {
        const float *xs = d->split[NL_TRAIN].x;
        for (uint32_t i = 0; i < d->split[NL_TRAIN].n && !cls; i++) {
            if (xs[2 * i] != v[0] || xs[2 * i + 1] != v[1])
                continue;
            float in[2];
            struct nl_rng rng;
            nl_rng_seed(&rng, 1);
            nl_dataset_batch(d, NL_TRAIN, &i, 1, in, NULL);
            const float *logits = nl_exec_forward(x, m->params, in, 1, 0, &rng);
            int best = 0;
            for (int k = 1; k < m->nclasses; k++)
                if (logits[k] > logits[best])
                    best = k;
            cls = g_strdup(d->class_names[best]);
        }
    }
    if (err.msg[0])
        diag("%s", err.msg);
    nl_exec_free(x);
    nl_model_free(m);
    nl_dataset_free(d);
    nl_store_close(s);
    return cls;
}

static int cost_columns(void)
{
    return strstr(datasets_page_columns(nw()->datasets), "colour\tcategorical") != NULL;
}

static int shop_columns(void)
{
    return strstr(datasets_page_columns(nw()->datasets), "shop\tcategorical") != NULL;
}

static int docs_shown(void)
{
    return strstr(datasets_page_docs(nw()->datasets), "wonderful") != NULL;
}

static int table_shown(void)
{
    return strstr(datasets_page_samples_title(nw()->datasets), "rows") != NULL;
}

/* Buttons and entries on screen outside any scrolled area that the window cuts: their names
 * appended to out. */
static int cut_controls(GtkWidget *w, GString *out)
{
    if (!gtk_widget_get_mapped(w) || GTK_IS_SCROLLED_WINDOW(w))
        return 0;
    int n = 0;
    if (GTK_IS_BUTTON(w) || GTK_IS_ENTRY(w) || GTK_IS_DROP_DOWN(w) || GTK_IS_SPIN_BUTTON(w)) {
        graphene_rect_t r;
        if (gtk_widget_compute_bounds(w, win, &r) &&
            (r.origin.x < -0.5 || r.origin.y < -0.5 ||
             r.origin.x + r.size.width > gtk_widget_get_width(win) + 0.5 ||
             r.origin.y + r.size.height > gtk_widget_get_height(win) + 0.5)) {
            const char *label = GTK_IS_BUTTON(w) ? gtk_button_get_label(GTK_BUTTON(w)) : NULL;
            g_string_append_printf(out, " %s“%s”", G_OBJECT_TYPE_NAME(w), label ? label : "");
            return 1;
        }
        if (!GTK_IS_DROP_DOWN(w) && !GTK_IS_SPIN_BUTTON(w))
            return 0;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
        n += cut_controls(c, out);
    return n;
}

/* The mapped label whose text starts with prefix. */
static GtkWidget *find_prefix(GtkWidget *root, const char *prefix)
{
    if (GTK_IS_LABEL(root) && gtk_widget_get_mapped(root) &&
        g_str_has_prefix(gtk_label_get_text(GTK_LABEL(root)), prefix))
        return root;
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find_prefix(c, prefix);
        if (f)
            return f;
    }
    return NULL;
}

/* The mapped entries under root, in the widget tree's order. */
static void mapped_entries(GtkWidget *root, GPtrArray *out)
{
    if (GTK_IS_ENTRY(root) && gtk_widget_get_mapped(root))
        g_ptr_array_add(out, root);
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c))
        mapped_entries(c, out);
}

static int importing_done(void)
{
    const char *t = gtk_label_get_text(GTK_LABEL(nw()->toast_label));
    return gtk_widget_get_visible(nw()->toast) && strstr(t, "Imported");
}

/* Whether the Datasets page's action ("import") is enabled. */
static int enabled(const char *action)
{
    char name[64];
    snprintf(name, sizeof name, "datasets.%s", action);
    return nl_page_action_enabled(GTK_WIDGET(nw()->datasets), name);
}

static int confusion_ready(void)
{
    return runs_page_confusion_ready(nw()->runs);
}

/* The class's precision, recall and F1 in `nnlab eval`'s table (text) and in the window's
 * (tab-separated) agree to the window's 3 decimals. */
static int same_metrics(const char *eval, const char *table, const char *cls)
{
    double e[3] = {NAN, NAN, NAN}, t[3] = {NAN, NAN, NAN};
    char **lines = g_strsplit(eval, "\n", -1);
    for (char **l = lines; *l; l++) {
        char name[64];
        if (sscanf(*l, "%63s %lf %lf %lf", name, &e[0], &e[1], &e[2]) == 4 &&
            strcmp(name, cls) == 0)
            break;
        e[0] = NAN;
    }
    g_strfreev(lines);
    lines = g_strsplit(table, "\n", -1);
    for (char **l = lines; *l; l++) {
        char **f = g_strsplit(*l, "\t", -1);
        if (g_strv_length(f) == 5 && strcmp(f[0], cls) == 0)
            for (int i = 0; i < 3; i++)
                t[i] = g_ascii_strtod(f[i + 1], NULL);
        g_strfreev(f);
    }
    g_strfreev(lines);
    for (int i = 0; i < 3; i++)
        if (!(fabs(e[i] - t[i]) < 0.0006)) {
            diag("class %s: eval %.4f, window %.3f", cls, e[i], t[i]);
            return 0;
        }
    return 1;
}

static const char *watched = "live-run"; /* the run followed live */

static int live_listed(void)
{
    char *t = row_text(watched);
    int r = strstr(t, "running") != NULL;
    g_free(t);
    return r;
}

static int live_points_seen;
static int live_gained(void)
{
    return runs_page_curve_points(nw()->runs, watched) > live_points_seen;
}

static int live_done(void)
{
    char *t = row_text(watched);
    int r = strstr(t, "done") != NULL;
    g_free(t);
    return r;
}

/* The CSV dataset "table" at 1024x700: its first rows have a scroller of their own that shows
 * the header and the first 8 rows whole, every column in view. */
static void check_rows_readable(void)
{
    GtkWidget *head = find_text(win, GTK_TYPE_LABEL, "class");
    GtkWidget *sw = head ? gtk_widget_get_ancestor(head, GTK_TYPE_SCROLLED_WINDOW) : NULL;
    GtkWidget *grid = head ? gtk_widget_get_parent(head) : NULL;
    GtkWidget *row8 = GTK_IS_GRID(grid) ? gtk_grid_get_child_at(GTK_GRID(grid), 0, 8) : NULL;
    graphene_rect_t h = {{0, 0}, {0, 0}}, r = {{0, 0}, {0, 0}};
    const int found = sw && row8 && gtk_widget_get_mapped(head) &&
                      gtk_widget_compute_bounds(head, sw, &h) &&
                      gtk_widget_compute_bounds(row8, sw, &r);
    const int sh = sw ? gtk_widget_get_height(sw) : 0, swd = sw ? gtk_widget_get_width(sw) : 0;
    ok(found && h.origin.y >= 0 && h.origin.x >= 0 && h.origin.x + h.size.width <= swd &&
           r.origin.y + r.size.height <= sh,
       "at 1024x700 a CSV dataset's first rows are readable: the header and 8 rows in view, "
       "every column too (header at %.0f,%.0f; row 8 ends at %.0f; view %dx%d)",
       h.origin.x, h.origin.y, r.origin.y + r.size.height, swd, sh);
}

/* The text dataset "reviews" (its train split sorted by class): a few documents of each class
 * are shown, as many of one as of the other. */
static void check_docs_per_class(void)
{
    int pos = 0, neg = 0;
    char **lines = g_strsplit(datasets_page_docs(nw()->datasets), "\n", -1);
    for (char **l = lines; *l; l++) {
        pos += g_str_has_prefix(*l, "pos:");
        neg += g_str_has_prefix(*l, "neg:");
    }
    g_strfreev(lines);
    ok(pos >= 2 && neg >= 2 && abs(pos - neg) <= 1,
       "a text dataset shows a few documents of each class (%d pos, %d neg)", pos, neg);
}

/* The Runs page's button over the matrix, for the selected run: named for what it shows. */
static const char *plots_button(void)
{
    GtkWidget *b = action_button(win, "runs.confusion");
    return b ? gtk_button_get_label(GTK_BUTTON(b)) : "(no button)";
}

/* A regression run selected: the button says it plots predicted against actual values, and a
 * click on it computes them. */
static void click_regression_plots(void)
{
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "run-r");
    spin(200);
    ok(strcmp(plots_button(), "Predicted vs Actual") == 0,
       "on a regression run the button is named for its plots (%s)", plots_button());
    ok(click(action_button(win, "runs.confusion")), "a click on it");
}

static int csv_table_shown(void)
{
    return predict_page_csv_table(nw()->predict) != NULL;
}

static int csv_refused(void)
{
    return strstr(predict_page_note(nw()->predict), "rows-bad.csv:4") != NULL;
}

/* The CSV run "run-t" selected: a click on "Open a CSV File of Rows…" opens a file chooser; the
 * file chosen there has each of its rows predicted, shown as a table with the class and its
 * probability that `nnlab predict --csv` gives; a file with a bad row is refused, naming the
 * file and line, with no table shown. */
static void check_csv_file(void)
{
    /* In the store's folder: the chooser lists it, reading its files (the database's too) to
     * tell their types, which drops this process's locks on them; the runs `nnlab train` adds
     * after that are still seen (core/store.c, "Locks lost"). */
    char path[800], bad[800];
    snprintf(path, sizeof path, "%s/rows.csv", gui_tmp);
    snprintf(bad, sizeof bad, "%s/rows-bad.csv", gui_tmp);
    FILE *f = fopen(path, "w");
    fputs("width,height,kind\n3,4,wide\n0,0,tall\n6,1,wide\n2,3\n", f);
    fclose(f);
    f = fopen(bad, "w");
    fputs("width,height\n3,4\n0,0\n5,abc\n", f);
    fclose(f);
    GtkWidget *b = find_text(win, GTK_TYPE_BUTTON, "Open a CSV _File of Rows…");
    ok(click(b) && wait_for(chooser_open, 10000),
       "a click on Open a CSV File of Rows opens a file chooser");
    GtkWidget *chooser = file_chooser();
    if (chooser) {
        GFile *file = g_file_new_for_path(path);
        gtk_file_chooser_set_file(GTK_FILE_CHOOSER(chooser), file, NULL);
        g_object_unref(file);
        spin(1500);
        gtk_dialog_response(GTK_DIALOG(chooser), GTK_RESPONSE_ACCEPT);
    }
    const int shown = wait_for(csv_table_shown, 30000);
    const char *table = shown ? predict_page_csv_table(nw()->predict) : "";
    char *cli = NULL;
    nnlab(&cli, "--json predict run-t --csv %s --top 1", path);
    /* Each row's class in both, in the file's order. */
    GString *want = g_string_new(NULL), *got = g_string_new(NULL);
    for (const char *at = cli; at && (at = strstr(at, "\"top\":[{\"label\":"));) {
        const char *c = strstr(at, "\"class\":\"");
        char cls[32] = "";
        if (c)
            sscanf(c + 9, "%31[^\"]", cls);
        g_string_append_printf(want, "%s ", cls);
        at += 8;
    }
    char **lines = g_strsplit(table, "\n", -1);
    int rows = 0;
    for (char **l = lines; *l && **l; l++, rows++) {
        char **cells = g_strsplit(*l, "\t", -1);
        const guint n = g_strv_length(cells);
        if (rows > 0 && n >= 3)
            g_string_append_printf(got, "%s ", cells[n - 2]);
        g_strfreev(cells);
    }
    g_strfreev(lines);
    ok(shown && rows == 5 && strstr(table, "Predicted class\tProbability") &&
           strstr(table, "\n2\t3,4,wide\twide\t") && want->len > 0 &&
           strcmp(want->str, got->str) == 0,
       "each row of the file chosen is predicted in a table, its line, row, actual class, "
       "predicted class and probability, as `nnlab predict --csv` predicts them (%s; %s)",
       got->str, want->str);
    ok(screenshot("predict-csv-file-1024x700"), "screenshot of a CSV file's rows predicted");
    g_string_free(want, TRUE);
    g_string_free(got, TRUE);
    g_free(cli);
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.csv", "s", bad);
    const int refused = wait_for(csv_refused, 30000);
    const char *note = predict_page_note(nw()->predict);
    ok(refused && strstr(note, "abc") && !csv_table_shown() && !predicted(),
       "a file with a bad row is refused naming its file and line, nothing shown (%s)",
       oneline(note));
}

/* A run trained by `mpirun -np 2 nnlab train --mpi` on the test's store (rank 0 holds the store)
 * is listed as running, gains points epoch by epoch while it trains, and ends as done. Skipped,
 * saying why, where mpirun is missing or nnlab was built without MPI. */
static void check_mpi_live(const char *spec, const char *data_dir)
{
    enum { CHECKS = 4 };
    char probe[800];
    snprintf(probe, sizeof probe, "'%s' train --help | grep -q -- --mpi", bin);
    const char *why = !in_path("mpirun")   ? "no mpirun (apt-get install openmpi-bin)"
                      : system(probe) != 0 ? "this nnlab was built without MPI"
                                           : NULL;
    if (why) {
        for (int i = 0; i < CHECKS; i++)
            ok(1, "an MPI run followed live # SKIP %s", why);
        return;
    }
    /* Root may run mpirun only when it says so; the ranks' partition cache goes under HOME. A
     * machine loaded by other work may starve a rank's heartbeat thread for seconds: the
     * timeout is generous, this check is about the window. */
    char home[800];
    snprintf(home, sizeof home, "%s/mpi-home", data_dir);
    mkdir(home, 0755);
    char *cmd = g_strdup_printf("env HOME=%s OMPI_ALLOW_RUN_AS_ROOT=1 "
                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
                                "--bind-to none -np 2 %s --db %s --quiet train --data bands "
                                "--model %s --epochs 4 --threads 1 --batch 8 --lr 0.01 --name "
                                "mpi-run --mpi --heartbeat-timeout 60",
                                home, bin, db, spec);
    const int spawned = gui_spawn(cmd);
    g_free(cmd);
    watched = "mpi-run";
    live_points_seen = 0;
    ok(spawned && wait_for(live_listed, 60000),
       "a run started by mpirun -np 2 nnlab train --mpi is listed as running");
    wait_for(live_gained, 90000);
    live_points_seen = runs_page_curve_points(nw()->runs, watched);
    char *rt = row_text(watched);
    ok(live_points_seen >= 1 && strstr(rt, "running"),
       "its curve has a point while it trains (%d: %s)", live_points_seen, oneline(rt));
    g_free(rt);
    ok(screenshot("runs-mpi-live-1024x700"), "screenshot of an MPI run followed live");
    const int ended = wait_for(gui_child_gone, 180000) && wait_for(live_done, 10000);
    ok(ended && runs_page_curve_points(nw()->runs, watched) == 4,
       "it ends as done with its 4 epochs drawn (%d)", runs_page_curve_points(nw()->runs, watched));
    if (gui_child > 0 && !gui_child_gone())
        kill(gui_child, SIGTERM);
}

int main(int argc, char **argv)
{
    gui_start(argv, "nnlab-runs", "1920x1080", 1);
    bin = getenv("NNLAB_BIN");
    if (!bin)
        skip_all("NNLAB_BIN is not set");

    plan(111);
    char data_dir[700], spec[700];
    snprintf(db, sizeof db, "%s/nnlab.db", gui_tmp);
    snprintf(spec, sizeof spec, "%s/small.nn", gui_tmp);
    gui_bands(data_dir, sizeof data_dir, 3000, 300);
    gui_write_file(spec, "fc1: dense 32\nrelu\nfc2: dense N\n");
    /* Wide enough that each epoch of the run followed live lasts about a second on one fast
     * core (1.2 s on a Zen 4 with AVX-512; 512 wide took 0.3 s, and all 5 epochs could end
     * between two of the page's polls), so that the page sees it running with points drawn. */
    char wide[700];
    snprintf(wide, sizeof wide, "%s/wide.nn", gui_tmp);
    gui_write_file(wide, "fc1: dense 1024\nrelu\nfc2: dense 1024\nrelu\nfc3: dense N\n");

    /* The store as the command line leaves it. */
    if (!nnlab(NULL, "import bands %s --val 0.1", data_dir) ||
        !nnlab(NULL, "train --data bands --model %s --epochs 1 --threads 1 --name run-a", spec) ||
        !nnlab(NULL,
               "train --data bands --model %s --epochs 2 --lr 0.01 --batch 32 --threads 1 "
               "--name run-b",
               spec))
        bail_out("the command line could not fill the store");
    /* run-b as a run stopped after its epochs (no final results), a cluster run whose --overlap
     * auto measured and chose (its settings as core/store/session.c records them), then a run
     * stopped before its first checkpoint. */
    static const char overlap_settings[] =
        "{\"epochs\":3,\"batch\":32,\"overlap\":\"auto\",\"cluster\":true,"
        "\"overlap_chosen\":\"overlapped\",\"overlap_sync_ms\":41.2,"
        "\"overlap_overlapped_ms\":35.0,\"overlap_step\":27}";
    struct nl_store *s = NULL;
    struct nl_error err = {0};
    struct nl_run_info info;
    if (nl_store_open(&s, db, &err) < 0 || nl_run_get(s, "run-b", &info, NULL, NULL, &err) < 0 ||
        nl_run_reopen(s, info.id, NULL, &err) < 0 ||
        nl_run_finish(s, info.id, "stopped", NULL, &err) < 0 ||
        nl_run_create(s, "run-cluster", "bands", spec, "fc1: dense 32\nrelu\nfc2: dense N\n",
                      overlap_settings, &info, &err) < 0 ||
        nl_run_finish(s, info.id, "stopped", NULL, &err) < 0 ||
        nl_run_create(s, "no-checkpoint", "bands", spec, "fc1: dense 32\nrelu\nfc2: dense N\n",
                      "{}", &info, &err) < 0 ||
        nl_run_finish(s, info.id, "stopped", NULL, &err) < 0)
        bail_out("%s", err.msg);
    nl_store_close(s);

    GObject *app = gui_open(db);
    resize(1024, 700);

    /* Item 5: the Name field of an import, checked as it is typed. */
    show("datasets");
    GtkWidget *name = find_text(win, GTK_TYPE_ENTRY, "the folder or file name");
    GtkWidget *skip = find_text(win, GTK_TYPE_CHECK_BUTTON, "Skip bad files or rows");
    if (!name || !skip)
        bail_out("no Name field or skip check on the Datasets page");
    gtk_editable_set_text(GTK_EDITABLE(name), "   ");
    const char *hint = datasets_page_name_hint(nw()->datasets);
    ok(hint && strstr(hint, "only spaces") && gtk_widget_has_css_class(name, "error") &&
           !enabled("import") && !enabled("import-csv"),
       "a name of spaces is marked, said under the field, and the import buttons wait (%s)",
       oneline(hint));
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.import", NULL);
    spin(300);
    ok(!chooser_open(), "and no file chooser opens");
    gtk_editable_set_text(GTK_EDITABLE(name), "bands");
    hint = datasets_page_name_hint(nw()->datasets);
    ok(hint && strstr(hint, "“bands” exists") && strstr(hint, "bin button") &&
           strstr(hint, "“bands-2”") && !strstr(hint, "nnlab"),
       "a taken name names the bin button and offers a free name (%s)", oneline(hint));
    ok(screenshot("datasets-name-taken-1024x700"), "screenshot of the taken name");
    gtk_editable_set_text(GTK_EDITABLE(name), "");
    ok(!datasets_page_name_hint(nw()->datasets) && !gtk_widget_has_css_class(name, "error") &&
           enabled("import"),
       "an empty name is fine (the file's own is taken)");
    char csv[700];
    snprintf(csv, sizeof csv, "%s/table.csv", gui_tmp);
    FILE *f = fopen(csv, "w");
    fputs("width,height,kind\n", f);
    for (int i = 0; i < 60; i++)
        fprintf(f, "%d,%d,%s\n", i % 7, i % 5, i % 2 ? "wide" : "tall");
    fputs("many,3,wide\n", f);
    fclose(f);
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.import-source", "(ss)",
                               "bands", csv);
    spin(500);
    hint = datasets_page_name_hint(nw()->datasets);
    ok(hint && strstr(hint, "“bands” exists") &&
           strcmp(gtk_editable_get_text(GTK_EDITABLE(name)), "bands") == 0,
       "an import under a taken name is refused at the field (%s)", oneline(hint));
    gtk_editable_set_text(GTK_EDITABLE(name), "table");
    gtk_check_button_set_active(GTK_CHECK_BUTTON(skip), TRUE);
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.import-source", "(ss)",
                               "table", csv);
    ok(wait_for(importing_done, 30000) &&
           strstr(gtk_label_get_text(GTK_LABEL(nw()->toast_label)), "leaving out 1 bad"),
       "with Skip bad files or rows, a CSV with a bad row imports and says so (%s)",
       oneline(gtk_label_get_text(GTK_LABEL(nw()->toast_label))));
    ok(strcmp(gtk_editable_get_text(GTK_EDITABLE(name)), "") == 0 &&
           !datasets_page_name_hint(nw()->datasets),
       "the Name field is cleared for the next import");
    gtk_check_button_set_active(GTK_CHECK_BUTTON(skip), FALSE);

    /* Item 11: a CSV dataset shows its features and first rows; Train says samples/s. */
    wait_for(table_shown, 30000);
    const char *title = datasets_page_samples_title(nw()->datasets);
    GtkWidget *feature = find_text(win, GTK_TYPE_LABEL, "height");
    ok(strstr(title, "first 20 training rows") && feature && gtk_widget_get_mapped(feature),
       "a CSV dataset shows a table of its first rows under its feature names (%s)", title);
    ok(screenshot("datasets-csv-1024x700"), "screenshot of a CSV dataset");
    check_rows_readable();
    GtkWidget *pane = find_mapped(win, GTK_TYPE_PANED);
    const int divider = pane ? gtk_paned_get_position(GTK_PANED(pane)) : -1;
    show("train");
    GtkWidget *rate = find_text(win, GTK_TYPE_LABEL, "Samples/s");
    ok(rate && gtk_widget_get_mapped(rate), "the Train page counts a CSV's samples/s");
    show("datasets");
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.select", "s", "bands");
    spin(1000);
    ok(pane && gtk_paned_get_position(GTK_PANED(pane)) == divider,
       "the divider stays where it was when another dataset is selected (%d, %d)", divider,
       pane ? gtk_paned_get_position(GTK_PANED(pane)) : -1);
    const char *const *caps = NULL;
    const int nthumbs = datasets_page_thumbs(nw()->datasets, &caps);
    int per[6] = {0};
    for (int i = 0; i < nthumbs; i++)
        if (caps[i] && caps[i][0] >= '0' && caps[i][0] <= '5')
            per[caps[i][0] - '0']++;
    ok(nthumbs == 48 && per[0] == 8 && per[5] == 8,
       "the thumbnails show a few of each class (%d: %d of class 0, %d of class 5)", nthumbs,
       per[0], per[5]);
    show("train");
    rate = find_text(win, GTK_TYPE_LABEL, "Images/s");
    ok(rate && gtk_widget_get_mapped(rate), "and images/s for an image dataset");

    /* Item 7: the model's name. */
    show("model");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "lenet");
    GtkWidget *view = find_mapped(win, GTK_TYPE_TEXT_VIEW);
    GtkWidget *dd = find_choice(win, "mlp");
    if (!view || !dd)
        bail_out("no spec editor or model drop-down on the Model page");
    GtkTextBuffer *buf = gtk_text_view_get_buffer(GTK_TEXT_VIEW(view));
    GtkTextIter end;
    gtk_text_buffer_get_end_iter(buf, &end);
    gtk_text_buffer_insert(buf, &end, "\n\n", -1);
    ok(strcmp(model_page_name(nw()->model), "lenet") == 0, "a blank line keeps the name (%s)",
       model_page_name(nw()->model));
    gtk_text_buffer_get_end_iter(buf, &end);
    gtk_text_buffer_insert(buf, &end, "extra: relu\n", -1);
    spin(400);
    ok(strcmp(model_page_name(nw()->model), "lenet (edited)") == 0,
       "an edit names it after what it was built from (%s)", model_page_name(nw()->model));
    const guint lenet_at = gtk_drop_down_get_selected(GTK_DROP_DOWN(dd));
    gtk_drop_down_set_selected(GTK_DROP_DOWN(dd), lenet_at == 0 ? 1 : 0);
    wait_for(asked, 5000);
    GtkWidget *q = question();
    ok(q && strstr(question_text(q), "lenet (edited)") &&
           gtk_drop_down_get_selected(GTK_DROP_DOWN(dd)) == lenet_at,
       "choosing another model asks first, the drop-down still on lenet (%s)",
       q ? question_text(q) : "no question");
    ok(screenshot("model-switch-question-1024x700"), "screenshot of the question");
    if (q)
        gtk_dialog_response(GTK_DIALOG(q), GTK_RESPONSE_CANCEL);
    spin(300);
    ok(strcmp(model_page_name(nw()->model), "lenet (edited)") == 0, "Cancel keeps the edits (%s)",
       model_page_name(nw()->model));
    wait_for(not_asked, 5000);
    gtk_drop_down_set_selected(GTK_DROP_DOWN(dd), lenet_at == 0 ? 1 : 0);
    wait_for(asked, 5000);
    q = question();
    if (q)
        gtk_dialog_response(GTK_DIALOG(q), GTK_RESPONSE_ACCEPT);
    spin(300);
    ok(q && strcmp(model_page_name(nw()->model), "lenet") != 0 &&
           !strstr(model_page_name(nw()->model), "edited") &&
           gtk_drop_down_get_selected(GTK_DROP_DOWN(dd)) != lenet_at,
       "Replace switches (%s)", model_page_name(nw()->model));
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.shipped", "s", "mlp");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.init", "s", "");
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "fc1", TRUE);
    const char *init = model_page_init_text(nw()->model);
    ok(strstr(init, "fc1") && strstr(init, "random weights"),
       "a frozen layer starting from random weights is warned of (%s)", init);
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.freeze", "(sb)", "fc1", FALSE);
    init = model_page_init_text(nw()->model);
    ok(!strstr(init, "Frozen"), "and unticking it ends the warning (%s)", init);

    show("runs");

    /* Item 9: the newest run, and a run with no checkpoint. */
    const char *sel = runs_page_selected(nw()->runs);
    ok(sel && strcmp(sel, "no-checkpoint") == 0, "the newest run is selected (%s)",
       sel ? sel : "none");
    const char *why = runs_page_reason(nw()->runs);
    ok(!runs_page_action_enabled(nw()->runs, "runs.resume") &&
           !runs_page_action_enabled(nw()->runs, "runs.confusion") && why &&
           strstr(why, "no checkpoint"),
       "with no checkpoint, Resume and Confusion Matrix are disabled and say why (%s)",
       why ? why : "no reason");
    ok(screenshot("runs-no-checkpoint-1024x700"), "screenshot of the refused run");
    GtkWidget *cm_hint = find_prefix(win, "Compute the confusion matrix");
    ok(cm_hint && gtk_widget_get_width(cm_hint) >= 400,
       "the confusion matrix's hint runs the width of the pane at 1024x700 (%d px)",
       cm_hint ? gtk_widget_get_width(cm_hint) : -1);
    char *rt = row_text("run-b");
    ok(strstr(rt, "stopped") && strstr(rt, "val ") && !strstr(rt, "val –"),
       "a stopped run's row shows its validation accuracy (%s)", oneline(rt));
    g_free(rt);

    /* The confusion matrix with its per-class table, as `nnlab eval` computes it. */
    /* A pointer click on run-a's row, the import's toast still up: its one epoch's curves. */
    ok(click(row_of("run-a")) && wait_for(run_a_selected, 5000),
       "a click on run-a's row selects it");
    spin(200);
    ok(screenshot("runs-one-epoch-1024x700"), "screenshot of a run of one epoch's curves");
    ok(runs_page_action_enabled(nw()->runs, "runs.confusion") && !runs_page_reason(nw()->runs),
       "a run with a checkpoint can have its confusion matrix, with no reason shown");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.confusion", NULL);
    ok(wait_for(confusion_ready, 60000), "the confusion matrix is computed");
    char *eval = NULL;
    ok(nnlab(&eval, "eval run-a --threads 1"), "nnlab eval run-a runs");
    const char *table = runs_page_class_table(nw()->runs);
    ok(table && eval, "the per-class table is shown");
    int same = table && eval;
    for (int k = 0; k < 6 && same; k++) {
        char cls[8];
        snprintf(cls, sizeof cls, "%d", k);
        same = same_metrics(eval, table, cls);
    }
    ok(same, "its precision, recall and F1 are those of nnlab eval");
    ok(table && strstr(table, "macro average") && strstr(table, "weighted average"),
       "with the macro and weighted averages");
    g_free(eval);
    const char *cap = runs_page_cell_caption(nw()->runs, 0);
    ok(cap && strchr(cap, '%'), "a misclassified sample's caption gives probabilities (%s)",
       cap ? cap : "no sample");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.sample", "i", 0);
    spin(300);
    const char *big = runs_page_sample_shown(nw()->runs);
    ok(big && strstr(big, "True class") && strstr(big, "1. ") && strstr(big, "%"),
       "a click opens it larger with its likeliest classes (%s)", oneline(big));
    ok(screenshot("runs-confusion-1024x700"), "screenshot of the confusion matrix");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.sample-close", NULL);
    spin(200);
    ok(!runs_page_sample_shown(nw()->runs), "and it closes");

    /* Two runs side by side. */
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-a");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-b");
    spin(200);
    const char *cmp = runs_page_comparison(nw()->runs);
    ok(cmp && strstr(cmp, "\n≠ lr\t") && strstr(cmp, "\n≠ epochs\t") &&
           strstr(cmp, "\n≠ batch\t") && strstr(cmp, "\nseed\t") && !strstr(cmp, "≠ seed"),
       "two runs ticked show their settings side by side, the differences marked");
    ok(screenshot("runs-compare-1024x700"), "screenshot of two runs compared");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-a");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-b");
    ok(runs_page_comparison(nw()->runs) == NULL, "unticking them hides the comparison");

    /* A cluster run's settings line says what --overlap auto chose, with both step times, as
     * `nnlab runs RUN` does, in place of the raw overlap_* keys; a local run's says auto. */
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "run-cluster");
    spin(200);
    const char *ov_details = runs_page_details(nw()->runs);
    ok(strstr(ov_details,
              "overlap auto: overlapped from step 28 (41.2 ms synchronous, 35.0 ms overlapped)") &&
           !strstr(ov_details, "overlap_"),
       "a cluster run's settings line names auto's choice and both times (%s)",
       oneline(ov_details));
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "run-a");
    spin(200);
    const char *local_details = runs_page_details(nw()->runs);
    ok(strstr(local_details, "overlap auto") && !strstr(local_details, "overlap auto:"),
       "a local run's names no choice (%s)", oneline(local_details));

    /* Item 10: a run started in a terminal is followed live; the newest run selected, the
     * selection follows to it. */
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "no-checkpoint");
    char *cmd = g_strdup_printf("%s --db %s --quiet train --data bands --model %s --epochs 5 "
                                "--threads 1 --batch 8 --lr 0.01 --name %s",
                                bin, db, wide, watched);
    const int spawned = gui_spawn(cmd);
    g_free(cmd);
    guint beat_id = g_timeout_add(10, beat, NULL);
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
    ok(spawned && wait_for(live_listed, 30000),
       "a run started by nnlab train in another process is listed as running");
    sel = runs_page_selected(nw()->runs);
    ok(sel && strcmp(sel, watched) == 0, "and selected, as the newest run (%s)", sel ? sel : "");
    wait_for(live_gained, 60000);
    live_points_seen = runs_page_curve_points(nw()->runs, watched);
    rt = row_text(watched);
    ok(live_points_seen >= 1 && strstr(rt, "running"), "its curve has a point while it runs (%d)",
       live_points_seen);
    const char *live_details = runs_page_details(nw()->runs);
    ok(strstr(live_details, "followed live") && strstr(live_details, "samples/s"),
       "its details say which process trains it and how fast (%s)", oneline(live_details));
    g_free(rt);
    measuring = FALSE; /* a screenshot is the test's own work on the main loop */
    ok(screenshot("runs-live-1024x700"), "screenshot of a run followed live");
    last_beat = 0;
    measuring = TRUE;
    const int gained = wait_for(live_gained, 60000);
    ok(gained, "and gains points as epochs end (%d, then %d)", live_points_seen,
       runs_page_curve_points(nw()->runs, watched));
    const int ended = wait_for(gui_child_gone, 120000) && wait_for(live_done, 10000);
    ok(ended && runs_page_curve_points(nw()->runs, watched) == 5,
       "it ends as done with its 5 epochs drawn (%d)", runs_page_curve_points(nw()->runs, watched));
    g_source_remove(beat_id);
    ok(max_gap < STALL_US, "no main-loop stall over " STALL_MS " ms while following (%.0f ms)",
       max_gap / 1000.0);
    if (gui_child > 0 && !gui_child_gone())
        kill(gui_child, SIGTERM);
    check_mpi_live(wide, gui_tmp);

    /* Item 8: Predict for every dataset. */
    char csv_spec[700];
    snprintf(csv_spec, sizeof csv_spec, "%s/csv.nn", gui_tmp);
    f = fopen(csv_spec, "w");
    fputs("fc1: dense 16\nrelu\nfc2: dense N\n", f);
    fclose(f);
    ok(nnlab(NULL, "train --data table --model %s --epochs 3 --threads 1 --name run-t", csv_spec),
       "a run on the CSV dataset trains");
    predict_page_refresh(nw()->predict);
    show("predict");
    const char *label = pick_run("run-a");
    ok(label && strstr(label, "bands, 28×28 gray"),
       "the picker says a run's dataset and input (%s)", label ? label : "run-a not offered");
    char png[700];
    snprintf(png, sizeof png, "%s/photo.png", gui_tmp);
    write_png(png, 320, 240, 1);
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.file", "s", png);
    ok(wait_for(predicted, 30000), "a colour photo is classified");
    const char *note = predict_page_note(nw()->predict);
    ok(strstr(note, "320×240 colour") && strstr(note, "28×28 gray") &&
           strstr(note, "may mean little"),
       "saying how it was converted, and that it is far from the run's images (%s)", oneline(note));
    ok(screenshot("predict-colour-photo-1024x700"), "screenshot of the warning");
    snprintf(png, sizeof png, "%s/band.png", gui_tmp);
    write_png(png, 28, 28, 0);
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.file", "s", png);
    wait_for(predicted, 30000);
    note = predict_page_note(nw()->predict);
    ok(strstr(note, "Read as 28×28 gray") && !strstr(note, "may mean little"),
       "a gray image of the run's size is not warned of (%s)", oneline(note));
    predicted_as_cli("run-a", png);
    label = pick_run("run-t");
    ok(label && strstr(label, "table, 2 features"), "a CSV run is offered with its features (%s)",
       label ? label : "run-t not offered");
    ok(wait_for(row_fields, 30000), "it takes a row: a field per feature");
    GtkWidget *wl = find_text(win, GTK_TYPE_LABEL, "width");
    ok(wl && gtk_widget_get_mapped(wl) && find_text(win, GTK_TYPE_LABEL, "height"),
       "named by the CSV's header");
    const float row[2] = {3, 4};
    char *want = model_class("run-t", row);
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.values", "s", "3, 4");
    ok(wait_for(predicted, 30000) && want && strcmp(predict_page_top(nw()->predict), want) == 0,
       "a typed row gets the class the model gives the stored sample (%s, %s)",
       predicted() ? predict_page_top(nw()->predict) : "none", want ? want : "none");
    g_free(want);
    ok(screenshot("predict-csv-row-1024x700"), "screenshot of a row predicted");
    GPtrArray *entries = g_ptr_array_new();
    mapped_entries(win, entries);
    if (entries->len == 2)
        gtk_editable_set_text(GTK_EDITABLE(entries->pdata[0]), "5,2");
    ok(entries->len == 2 &&
           strcmp(gtk_editable_get_text(GTK_EDITABLE(entries->pdata[0])), "5") == 0 &&
           strcmp(gtk_editable_get_text(GTK_EDITABLE(entries->pdata[1])), "2") == 0,
       "a row pasted into the first field is spread over the fields");
    g_ptr_array_unref(entries);
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.values", "s", "3 abc");
    note = predict_page_note(nw()->predict);
    ok(!predicted() && strstr(note, "“abc” in height is not a number"),
       "a field that is not a number is named (%s)", oneline(note));
    check_csv_file();

    /* Issue 18 item 5: a regression run on a table with a categorical column and missing
     * values predicts a value in the target's units, through the import's preprocessing. */
    char reg_csv[700];
    snprintf(reg_csv, sizeof reg_csv, "%s/cost.csv", gui_tmp);
    f = fopen(reg_csv, "w");
    fputs("size,colour,cost\n", f);
    static const char *const colours[] = {"red", "green", "blue"};
    for (int i = 0; i < 240; i++) {
        const double x = (i * 37) % 50 / 5.0;
        if (i % 17 == 3)
            fprintf(f, ",%s,%.3f\n", colours[i % 3], 10.0 + 5 * (i % 3));
        else
            fprintf(f, "%.1f,%s,%.3f\n", x, colours[i % 3], 2.0 * x + 5 * (i % 3) + 0.1 * (i % 7));
    }
    fclose(f);
    ok(nnlab(NULL, "import cost %s --task regression --missing mean --val 0.1 --test 0.2",
             reg_csv) &&
           nnlab(NULL, "train --data cost --model %s --epochs 3 --threads 1 --name run-r",
                 csv_spec),
       "a regression run on a table with a categorical column and empty fields trains");
    predict_page_refresh(nw()->predict);
    label = pick_run("run-r");
    ok(label && strstr(label, "regression"), "it is offered as a regression (%s)",
       label ? label : "run-r not offered");
    ok(wait_for(cost_fields, 30000),
       "it takes a row: a field per feature column, the target left out (%d)",
       predict_page_fields(nw()->predict));
    static const char *const reg_rows[] = {"4.5, green", ", blue"};
    for (int r = 0; r < 2; r++) {
        char *cli = NULL;
        nnlab(&cli, "--json predict run-r --row \"%s\"", reg_rows[r]);
        const char *at = cli ? strstr(cli, "\"value\":") : NULL;
        const double want_v = at ? g_ascii_strtod(at + 8, NULL) : NAN;
        gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.values", "s", reg_rows[r]);
        const int got = wait_for(predicted, 30000);
        const char *top = got ? predict_page_top(nw()->predict) : "";
        const char *v = strstr(top, "≈ ");
        const double got_v = v ? g_ascii_strtod(v + strlen("≈ "), NULL) : NAN;
        ok(g_str_has_prefix(top, "cost ≈ ") && fabs(got_v - want_v) <= 1e-4 * (1 + fabs(want_v)),
           "the row \"%s\" gets the value `nnlab predict --row` prints, in the target's units "
           "(%s, %g)",
           reg_rows[r], top, want_v);
        g_free(cli);
        if (r == 0)
            ok(screenshot("predict-regression-1024x700"), "screenshot of a value predicted");
    }
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.values", "s", "4.5, purple");
    wait_for(predicted, 30000);
    note = predict_page_note(nw()->predict);
    ok(predicted() && strstr(note, "level 'purple'") && strstr(note, "other level"),
       "a level the import never saw is predicted as the other level, and said (%s)",
       oneline(note));

    /* A text run takes typed text, as `nnlab predict --text` does. */
    for (int i = 0; i < 24; i++) {
        char doc[800];
        for (int k = 0; k < 2; k++) {
            snprintf(doc, sizeof doc, "%s/reviews/%s", gui_tmp, k ? "neg" : "pos");
            g_mkdir_with_parents(doc, 0755);
            snprintf(doc, sizeof doc, "%s/reviews/%s/%d.txt", gui_tmp, k ? "neg" : "pos", i);
            f = fopen(doc, "w");
            fprintf(f,
                    k ? "A boring film, the script was awful (%d). Ужасно.\n"
                      : "A wonderful film, superb acting (%d). Отлично!\n",
                    i);
            fclose(f);
        }
    }
    ok(nnlab(NULL, "import reviews %s/reviews --vocab 13 --max-len 16 --val 0.25", gui_tmp) &&
           nnlab(NULL, "train --data reviews --model embedbag --epochs 4 --batch 8 --threads 1 "
                       "--name run-x"),
       "a text run trains");
    predict_page_refresh(nw()->predict);
    label = pick_run("run-x");
    ok(label && strstr(label, "reviews, text"), "it is offered as taking text (%s)",
       label ? label : "run-x not offered");
    ok(predict_page_takes_text(nw()->predict) && predict_page_fields(nw()->predict) == 0,
       "it shows a text field, not a row of fields");
    static const char *const review = "A superb, wonderful film zyzzyva";
    char *cli = NULL;
    nnlab(&cli, "--json predict run-x --text \"%s\" --top 1", review);
    const char *cls = cli ? strstr(cli, "\"class\":\"") : NULL;
    char want_cls[16] = "";
    if (cls)
        sscanf(cls + 9, "%15[^\"]", want_cls);
    gtk_widget_activate_action(GTK_WIDGET(nw()->predict), "predict.values", "s", review);
    const char *text_top = wait_for(predicted, 30000) ? predict_page_top(nw()->predict) : "none";
    ok(want_cls[0] && strcmp(text_top, want_cls) == 0,
       "typed text gets the class `nnlab predict --text` gives (%s, %s)", text_top, want_cls);
    g_free(cli);
    note = predict_page_note(nw()->predict);
    ok(strstr(note, "5 words") && strstr(note, "; 1 of them"),
       "the note counts the words and those outside the vocabulary (%s)", oneline(note));
    ok(screenshot("predict-text-1024x700"), "screenshot of a text classified");

    /* The Runs page: a regression run shows R², MAE and RMSE where accuracy is, and predicted
     * against actual and residual plots instead of a confusion matrix. */
    show("runs");
    runs_page_refresh(nw()->runs);
    rt = row_text("run-r");
    ok(rt && strstr(rt, "test R² 0.") && strstr(rt, "MAE ") && strstr(rt, "RMSE "),
       "a regression run's row shows its R², MAE and RMSE (%s)", rt ? oneline(rt) : "no row");
    g_free(rt);
    click_regression_plots();
    const char *reg_details = runs_page_details(nw()->runs);
    ok(strstr(reg_details, "regress cost") && !strstr(reg_details, "classes 1"),
       "its settings line names the task and target as `nnlab datasets` does, not a class count "
       "(%s)",
       oneline(reg_details));
    ok(wait_for(confusion_ready, 60000), "its test predictions are computed");
    char *reg_eval = NULL;
    double e_r2 = NAN, e_mae = NAN, e_rmse = NAN, w_r2 = NAN, w_mae = NAN, w_rmse = NAN;
    nnlab(&reg_eval, "eval run-r --threads 1");
    const char *rp = reg_eval ? strstr(reg_eval, "R2 ") : NULL;
    if (rp)
        sscanf(rp, "R2 %lf, MAE %lf, RMSE %lf", &e_r2, &e_mae, &e_rmse);
    const char *reg_table = runs_page_class_table(nw()->runs);
    if (reg_table && strstr(reg_table, "R²\t"))
        sscanf(strstr(reg_table, "R²\t"), "R²\t%lf\nMAE\t%lf\nRMSE\t%lf", &w_r2, &w_mae, &w_rmse);
    ok(fabs(w_r2 - e_r2) < 2e-3 && fabs(w_mae - e_mae) <= 2e-3 * (1 + e_mae) &&
           fabs(w_rmse - e_rmse) <= 2e-3 * (1 + e_rmse),
       "its R², MAE and RMSE are those `nnlab eval` prints (%g %g %g, %g %g %g)", w_r2, w_mae,
       w_rmse, e_r2, e_mae, e_rmse);
    g_free(reg_eval);
    ok(screenshot("runs-regression-1024x700"), "screenshot of the predicted-against-actual plots");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-a");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-r");
    spin(200);
    const char *rcmp = runs_page_comparison(nw()->runs);
    ok(rcmp && strstr(rcmp, "\n≠ classes\t") && strstr(rcmp, "\tregress cost"),
       "beside a classification run, its class count is its task and target too (%s)",
       rcmp ? oneline(rcmp) : "no comparison");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-a");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-r");

    /* The Datasets page: a CSV dataset's columns with their kinds, a text dataset's documents
     * as words with the out-of-vocabulary ones marked, and its vocabulary. */
    show("datasets");
    datasets_page_refresh(nw()->datasets);
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.select", "s", "cost");
    ok(wait_for(cost_columns, 30000), "a CSV dataset lists its columns");
    const char *cols = datasets_page_columns(nw()->datasets);
    ok(strstr(cols, "size\tnumeric\tmean ") && strstr(cols, "missing, filled with") &&
           strstr(cols, "colour\tcategorical\t3 levels") && strstr(cols, "cost\ttarget\t"),
       "each with its kind (numeric, categorical, target), statistics and fill (%s)",
       oneline(cols));
    char *dt = row_text("cost");
    ok(strstr(dt, "regression of “cost”") && !strstr(dt, "classes"),
       "the list names a regression dataset's task and target, not classes (%s)", oneline(dt));
    g_free(dt);
    ok(screenshot("datasets-columns-1024x700"), "screenshot of a CSV dataset's columns");
    ok(click(row_of("reviews")) && wait_for(docs_shown, 30000),
       "a click on a text dataset in the list shows its documents as words");
    const char *docs = datasets_page_docs(nw()->datasets);
    const char *dinfo = datasets_page_info(nw()->datasets);
    ok((strstr(docs, "pos: a wonderful film superb acting ⟨unknown⟩ отлично") ||
        strstr(docs, "neg: a boring film the script was awful ⟨unknown⟩ ужасно")) &&
           strstr(dinfo, "vocabulary of 15 words") && strstr(dinfo, "covering"),
       "its numbers outside the 13-word vocabulary marked, the vocabulary's size and coverage "
       "said (%s; %s)",
       oneline(docs), oneline(dinfo));
    check_docs_per_class();
    ok(screenshot("datasets-text-1024x700"), "screenshot of a text dataset's documents");
    /* A column of more levels than the one-hot slots is embedded by default: said with its rows. */
    char shop_csv[700];
    snprintf(shop_csv, sizeof shop_csv, "%s/shops.csv", gui_tmp);
    f = fopen(shop_csv, "w");
    fputs("x,shop,y\n", f);
    for (int i = 0; i < 200; i++)
        fprintf(f, "%.2f,s%02d,%.3f\n", (i % 9) / 4.0, i % 20, (i % 20) / 5.0 + (i % 9) / 4.0);
    fclose(f);
    ok(nnlab(NULL, "import shops %s --task regression --quiet", shop_csv),
       "a table with a column of 20 levels imports");
    datasets_page_refresh(nw()->datasets);
    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.select", "s", "shops");
    ok(wait_for(shop_columns, 30000), "its columns are listed");
    cols = datasets_page_columns(nw()->datasets);
    ok(strstr(cols, "shop\tcategorical\t20 levels") && strstr(cols, " · embedded (21 rows)\n"),
       "the column of 20 levels says it is embedded, with its rows (%s)", oneline(cols));

    /* With two runs compared and a confusion matrix shown, every page still fits 1024x700. */
    show("runs");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-a");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.compare", "s", "run-t");
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.select", "s", "run-a");
    ok(strcmp(plots_button(), "Confusion Matrix") == 0,
       "on a classification run it is Confusion Matrix again (%s)", plots_button());
    gtk_widget_activate_action(GTK_WIDGET(nw()->runs), "runs.confusion", NULL);
    wait_for(confusion_ready, 60000);
    GString *widths = g_string_new(NULL);
    static const char *const all[] = {"datasets", "model", "train", "runs", "predict"};
    for (size_t i = 0; i < G_N_ELEMENTS(all); i++) {
        int mw = 0;
        gtk_widget_measure(gtk_stack_get_child_by_name(nw()->stack, all[i]),
                           GTK_ORIENTATION_HORIZONTAL, -1, &mw, NULL, NULL, NULL);
        g_string_append_printf(widths, " %s %d", all[i], mw);
    }
    int min_w = 0;
    gtk_widget_measure(gtk_window_get_child(GTK_WINDOW(win)), GTK_ORIENTATION_HORIZONTAL, -1,
                       &min_w, NULL, NULL, NULL);
    ok(min_w <= 1024, "every page fits 1024 wide (%d:%s)", min_w, widths->str);
    g_string_free(widths, TRUE);

    /* Item 11: every page at both sizes, light and dark, into BUILD/ui-screenshots/; no control
     * outside a scrolled area is cut by the window. */
    static const char *const pages[] = {"datasets", "model", "train", "runs", "predict"};
    static const int sizes[][2] = {{1024, 700}, {1920, 1080}};
    GtkSettings *gs = gtk_settings_get_default();
    int shots_ok = 0, cut = 0;
    GString *cuts = g_string_new(NULL);
    for (int dark = 0; dark < 2; dark++) {
        g_object_set(gs, "gtk-application-prefer-dark-theme", dark, NULL);
        for (size_t z = 0; z < G_N_ELEMENTS(sizes); z++) {
            resize(sizes[z][0], sizes[z][1]);
            for (size_t i = 0; i < G_N_ELEMENTS(pages); i++) {
                char shot[64];
                show(pages[i]);
                snprintf(shot, sizeof shot, "page-%s-%dx%d-%s", pages[i], sizes[z][0], sizes[z][1],
                         dark ? "dark" : "light");
                shots_ok += screenshot(shot);
                GString *here = g_string_new(NULL);
                if (cut_controls(win, here) > 0) {
                    cut++;
                    g_string_append_printf(cuts, " %s:%s", shot, here->str);
                }
                g_string_free(here, TRUE);
            }
        }
    }
    g_object_set(gs, "gtk-application-prefer-dark-theme", FALSE, NULL);
    ok(shots_ok == 20, "screenshots of every page at 1024x700 and 1920x1080, light and dark (%d)",
       shots_ok);
    ok(cut == 0, "no control is cut by the window on any page (%s)", cuts->str);
    g_string_free(cuts, TRUE);

    gtk_window_destroy(GTK_WINDOW(win));
    spin(200);
    g_object_unref(app);
    return done_testing();
}
#endif
