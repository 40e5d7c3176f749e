/* What the parts of the Runs page share (runs-page.c: the list, the curves, the actions and the
 * following of the store; runs-page-details.c: a run's settings and the comparison of runs;
 * runs-page-confusion.c: the confusion matrix, a regression run's plots and the samples behind a
 * cell). Private to ui/. */
#ifndef NNLAB_UI_RUNS_PAGE_PRIVATE_H
#define NNLAB_UI_RUNS_PAGE_PRIVATE_H

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

struct _NlRunsPage {
    GtkWidget parent_instance;

    NlWindow *win; /* the window it is a page of (set once, by nl_runs_page_new) */
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
    GtkWidget *confusion_button; /* named for what it shows: a matrix, or a regression's plots */
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

/* runs-page.c */
#define RUNS_PALETTE 6
extern const struct chart_rgb runs_palette[RUNS_PALETTE]; /* the runs' colours, in turn */
gboolean runs_gone(NlRunsPage *p);

/* runs-page-details.c */
const char *runs_tidy_time(char *buf, size_t size, const char *iso);
void runs_update_comparison(NlRunsPage *p);
void runs_show_details(NlRunsPage *p);

/* runs-page-confusion.c */
GtkWidget *runs_cell_label(const char *text, gboolean numeric, gboolean bold);
void runs_confusion_free(struct confusion *c);
char *runs_cm_title(const struct confusion *c);
void runs_show_cell(NlRunsPage *p, int row, int col);
void runs_free_cell(NlRunsPage *p);
void runs_draw_confusion(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data);
void runs_confusion_clicked(GtkGestureClick *g, int n, double x, double y, gpointer data);
void runs_draw_cell_samples(GtkDrawingArea *area, cairo_t *cr, int w, int h, gpointer data);
void runs_cell_samples_clicked(GtkGestureClick *g, int n, double x, double y, gpointer data);
void runs_confusion_action(GtkWidget *widget, const char *action, GVariant *param);
void runs_sample_action(GtkWidget *widget, const char *action, GVariant *param);
void runs_sample_close_action(GtkWidget *widget, const char *action, GVariant *param);

#endif
