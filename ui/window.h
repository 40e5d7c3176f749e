/* The main window and what its pages share. Each page lives in its own file (*-page.c) with its
 * layout in a .ui file of the same name: a widget type (G_DEFINE_FINAL_TYPE) whose template is
 * that file and whose actions are its own ("datasets.import", "runs.resume"), reached from inside
 * the page; its class says what it is to the window (nl_page_class_set_info) and which actions
 * have shortcuts from any page (nl_page_class_add_shortcut). The window owns the store connection
 * of the main thread, the selected dataset and the model being edited. Private to ui/. */
#ifndef NNLAB_UI_WINDOW_H
#define NNLAB_UI_WINDOW_H

#include <gtk/gtk.h>

#include "chart.h"
#include "nnlab/dataset.h"
#include "nnlab/store.h"
#include "train-page.h"

G_BEGIN_DECLS

#define NL_TYPE_WINDOW (nl_window_get_type())
G_DECLARE_FINAL_TYPE(NlWindow, nl_window, NL, WINDOW, GtkApplicationWindow)

/* The pages that are widgets of their own: each a template and its actions ("predict.open"). */
#define NL_TYPE_PREDICT_PAGE (nl_predict_page_get_type())
G_DECLARE_FINAL_TYPE(NlPredictPage, nl_predict_page, NL, PREDICT_PAGE, GtkWidget)
#define NL_TYPE_DATASETS_PAGE (nl_datasets_page_get_type())
G_DECLARE_FINAL_TYPE(NlDatasetsPage, nl_datasets_page, NL, DATASETS_PAGE, GtkWidget)
#define NL_TYPE_MODEL_PAGE (nl_model_page_get_type())
G_DECLARE_FINAL_TYPE(NlModelPage, nl_model_page, NL, MODEL_PAGE, GtkWidget)
#define NL_TYPE_RUNS_PAGE (nl_runs_page_get_type())
G_DECLARE_FINAL_TYPE(NlRunsPage, nl_runs_page, NL, RUNS_PAGE, GtkWidget)

struct _NlWindow {
    GtkApplicationWindow parent_instance;

    /* Template children. */
    GtkStack *stack;
    GtkWidget *subtitle;
    GtkWidget *toast;
    GtkWidget *toast_label;

    char *db_path;
    struct nl_store *store;  /* the main thread's connection */
    struct nl_dataset *data; /* the selected dataset, or NULL */
    guint toast_timer;
    GtkEventController *page_keys; /* the shortcuts of the pages' actions (nl_window_add_page) */
    gboolean closed;               /* disposed: callbacks of finished background work do nothing */
    guint load_generation;         /* of the latest dataset selection */
    gboolean loading;              /* a selected dataset is being read */

    NlDatasetsPage *datasets;
    NlModelPage *model;
    NlTrainPage *train;
    NlRunsPage *runs;
    NlPredictPage *predict;
};

NlWindow *nl_window_new(GtkApplication *app, const char *db_path);

/* A short message at the bottom of the window (errors included); it fades after a few
 * seconds. */
void nl_window_notify(NlWindow *w, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* Asks a yes-or-no question in a modal dialog; yes(data) runs when the person accepts. */
void nl_window_confirm(NlWindow *w, const char *question, const char *detail, const char *accept,
                       void (*yes)(gpointer data), gpointer data);
/* Selects a dataset by name (NULL: none): its samples are read on a worker thread, then every
 * page is told. */
void nl_window_select_dataset(NlWindow *w, const char *name);
/* The header's subtitle: dataset and model. */
void nl_window_update_subtitle(NlWindow *w);
/* Whether a training run is in progress. */
gboolean nl_window_training(NlWindow *w);
/* Text, axes and grid colour of the theme, for charts. */
struct chart_rgb nl_window_fg(GtkWidget *widget);
/* What a page type is to the window, said in its class_init: its name in the stack, its title
 * and icon in the sidebar; and the shortcuts of its actions that work from any page ("<Control>o",
 * "predict.open"). The strings are static. */
void nl_page_class_set_info(GtkWidgetClass *wc, const char *name, const char *title,
                            const char *icon);
void nl_page_class_add_shortcut(GtkWidgetClass *wc, const char *accel, const char *action);
/* Adds a page (a widget whose class said what it is) to the window's stack and its shortcuts
 * to the window's. */
void nl_window_add_page(NlWindow *w, GtkWidget *page);
/* Enables or disables a page's own action (and so its buttons), and whether it is enabled (an
 * action never disabled is). */
void nl_page_set_enabled(GtkWidget *page, const char *action, gboolean enabled);
gboolean nl_page_action_enabled(GtkWidget *page, const char *action);
/* Loads a page's GtkBuilder file from the resources. Pages return their root widget with a
 * reference that the window drops once the stack holds it. */
GtkBuilder *nl_page_builder(const char *name);

/* Pages: each builds its widgets and its window actions. */
/* The Datasets page of w, with a reference the caller owns. */
NlDatasetsPage *nl_datasets_page_new(NlWindow *w);
void datasets_page_refresh(NlDatasetsPage *p);
void datasets_page_dataset_changed(NlDatasetsPage *p);
/* Why the Name field's text cannot name a new dataset, as shown under it; NULL when it can. */
const char *datasets_page_name_hint(NlDatasetsPage *p);
/* For tests: the thumbnails shown and their captions (class names); the title above them. */
int datasets_page_thumbs(NlDatasetsPage *p, const char *const **captions);
const char *datasets_page_samples_title(NlDatasetsPage *p);
/* For tests: a CSV dataset's column table (name, kind, statistics, inputs: a line each) and a
 * text dataset's documents shown (class: words, a line each); "" for other kinds. */
const char *datasets_page_columns(NlDatasetsPage *p);
const char *datasets_page_docs(NlDatasetsPage *p);
/* For tests: the line under the dataset's name (kind, source, shape, vocabulary). */
const char *datasets_page_info(NlDatasetsPage *p);

/* The Model page of w, with a reference the caller owns. */
NlModelPage *nl_model_page_new(NlWindow *w);
void model_page_dataset_changed(NlModelPage *p);
/* The spec text being edited, and its name: a shipped model's when it says the same (blank lines
 * aside), "NAME (edited)" when edited from one, or "custom". */
const char *model_page_spec(NlModelPage *p);
const char *model_page_name(NlModelPage *p);
/* What the model starts from as shown (random weights, a run, a file), with the warning when
 * frozen layers start from random weights. */
const char *model_page_init_text(NlModelPage *p);
/* Whether the spec builds for the selected dataset. */
gboolean model_page_valid(NlModelPage *p);
/* The run whose weights start training (layers matched by name and shapes), or NULL. */
const char *model_page_init_run(NlModelPage *p);
/* The .safetensors file whose tensors start training (matched by name and shape), or NULL. */
const char *model_page_init_file(NlModelPage *p);
/* Tensors of that file that match the model as last built; -1 while it is being read or
 * when it does not load. */
int model_page_init_loaded(NlModelPage *p);
/* Whether the head starts fresh even where the starting weights have a matching one. */
gboolean model_page_fresh_head(NlModelPage *p);
/* The layers to train frozen, NULL-terminated, owned by the page. */
const char *const *model_page_frozen(NlModelPage *p);
/* Runs were added or removed: refreshes the choice of starting weights. */
void model_page_runs_changed(NlModelPage *p);

/* The Train page: train-page.h. */

/* Loads a run's model with its latest checkpoint, and the run's dataset (any thread, with that
 * thread's store). */
struct nl_model;
int nl_ui_load_run(struct nl_store *s, const char *run_name, struct nl_model **m,
                   struct nl_dataset **d, struct nl_error *err);

/* The Runs page of w, with a reference the caller owns. */
NlRunsPage *nl_runs_page_new(NlWindow *w);
void runs_page_refresh(NlRunsPage *p);
/* The selected run's details as shown (settings, recoveries), for tests. */
const char *runs_page_details(NlRunsPage *p);
/* Whether a confusion matrix is shown and none is being computed. */
gboolean runs_page_confusion_ready(NlRunsPage *p);
/* For tests: the run selected; the settings of the runs compared as shown (tab-separated rows,
 * "≠ " before a setting that differs; NULL when fewer than two are ticked); the per-class table
 * (tab-separated rows: class, precision, recall, F1, support); the caption under the i-th
 * sample of the cell shown; the text of the sample opened larger (NULL: none open); why Resume
 * or Confusion Matrix is refused (NULL: nothing is); the store polls finished; the epochs drawn
 * for run (-1: not drawn). */
const char *runs_page_selected(NlRunsPage *p);
/* For tests: whether the page's action ("runs.resume") is enabled. */
gboolean runs_page_action_enabled(NlRunsPage *p, const char *action);
const char *runs_page_comparison(NlRunsPage *p);
const char *runs_page_class_table(NlRunsPage *p);
const char *runs_page_cell_caption(NlRunsPage *p, int i);
const char *runs_page_sample_shown(NlRunsPage *p);
const char *runs_page_reason(NlRunsPage *p);
int runs_page_polls(NlRunsPage *p);
int runs_page_curve_points(NlRunsPage *p, const char *run);

/* The Predict page of w, with a reference the caller owns. */
NlPredictPage *nl_predict_page_new(NlWindow *w);
void predict_page_refresh(NlPredictPage *p);
/* The top class of the last prediction (a regression run: "target ≈ value"), or NULL. */
const char *predict_page_top(NlPredictPage *p);
/* For tests: the last prediction's i-th class, best first (its probability into *prob), or NULL
 * past them and for a regression run. */
const char *predict_page_class(NlPredictPage *p, int i, double *prob);
/* For tests: the line under the verdict (how an image was converted, a warning, an error); the
 * picker's i-th label; the row's fields shown (0: an image run). */
const char *predict_page_note(NlPredictPage *p);
const char *predict_page_run_label(NlPredictPage *p, guint i);
int predict_page_fields(NlPredictPage *p);
/* For tests: the rows of the CSV file predicted last as shown (tab-separated, a header first:
 * line, row, the actual class or value when the file has them, the prediction); NULL when no
 * file's table is shown. */
const char *predict_page_csv_table(NlPredictPage *p);
/* For tests: the page takes a typed text (a text run). */
gboolean predict_page_takes_text(NlPredictPage *p);

G_END_DECLS

#endif
