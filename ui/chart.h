/* Drawing for the window's charts and pictures, as pure functions of a cairo context, a size and
 * a plain struct: no GTK here, so tests draw them into image surfaces without a display. The
 * caller owns every array a struct points to; nothing is kept between calls. */
#ifndef NNLAB_UI_CHART_H
#define NNLAB_UI_CHART_H

#include <cairo.h>
#include <stdint.h>

struct chart_rgb {
    double r, g, b;
};

#define CHART_MAX_SERIES 8

struct chart_series {
    const char *label;   /* in the legend; NULL: not listed */
    const double *x, *y; /* (n) points; x ascending; NAN y values are gaps */
    int n;
    struct chart_rgb color;
    double width; /* line width in pixels; 0: 1.5 */
    int dashed;   /* drawn dashed */
    int markers;  /* a dot at each point (for few points, such as one per epoch) */
};

struct chart {
    const char *title;
    const char *xlabel;
    const char *empty;   /* shown when no series has a point; NULL: nothing */
    struct chart_rgb fg; /* text, axes and grid, from the theme */
    double ymin, ymax;   /* fixed range; NAN: from the data */
    double xmin, xmax;   /* fixed range; NAN: from the data */
    int y_percent;       /* y tick labels as percentages of 1 */
    int nseries;
    struct chart_series series[CHART_MAX_SERIES];
    /* Events at points of the x axis (a cluster run's recoveries, at their step; the step from
     * which --overlap auto keeps the mode it chose): a dashed vertical line across the plot at
     * each, in its colour, with a triangle on the plot's top edge and, where the plot is wide
     * enough, the label beside it. */
    int nevents;
    const double *event_x;           /* (nevents) */
    const char *const *event_labels; /* (nevents), NULL or NULL entries: no label */
    struct chart_rgb event_color;
    const struct chart_rgb *event_colors; /* (nevents), or NULL: all in event_color */
};

/* Draws a line chart filling width x height: title, axes with ticks, a grid, each series, the
 * events and a legend. Returns the number of points drawn (tests check it); events inside the
 * x range add one each. */
int chart_draw(cairo_t *cr, int width, int height, const struct chart *c);

/* Images per second over a run: the whole run's (this computer's, or all workers' together)
 * and, for a cluster run, each worker's own (its samples over its compute and communication
 * seconds, per step), each worker in a colour of its own (chart_worker_color). */
#define CHART_MAX_WORKERS (CHART_MAX_SERIES - 1)
struct chart_throughput {
    const char *title, *empty;
    const double *x;     /* (n) in epochs */
    const double *total; /* (n) */
    int n;
    int nworkers;                 /* 0 (a local run) to CHART_MAX_WORKERS */
    const char *const *hosts;     /* (nworkers) legend labels */
    const double *const *workers; /* (nworkers) arrays of (n); NAN: no report for that step */
    double xmax;                  /* NAN: from the data */
    struct chart_rgb fg;
};
struct chart_rgb chart_worker_color(int i);
/* Returns the number of points drawn, as chart_draw. */
int chart_throughput_draw(cairo_t *cr, int width, int height, const struct chart_throughput *t);

/* Horizontal probability bars, best first (the predict page's top-k). */
struct chart_bars {
    int n;
    const char *const *labels; /* (n) */
    const double *values;      /* (n) in [0, 1] */
    struct chart_rgb fg, bar;
};
int chart_bars_draw(cairo_t *cr, int width, int height, const struct chart_bars *b);

/* A grid of 8-bit sample images with a caption under each (dataset thumbnails, misclassified
 * samples). Images are (c, h, w) planes, c 1 or 3. */
struct chart_thumbs {
    int n;
    int c, h, w;
    const uint8_t *pixels;       /* (n, c, h, w) */
    const char *const *captions; /* (n), may be NULL */
    int cell;                    /* image side in pixels; 0: 64 */
    struct chart_rgb fg;
};
int chart_thumbs_draw(cairo_t *cr, int width, int height, const struct chart_thumbs *t);
/* The height the grid needs at this width, for a scrolled area. */
int chart_thumbs_height(int width, const struct chart_thumbs *t);
/* The image under point (x, y), as drawn at this width, or -1. */
int chart_thumbs_hit(int width, const struct chart_thumbs *t, double x, double y);

/* A confusion matrix: counts[true * k + predicted], rows are true classes. */
struct chart_confusion {
    int k;
    const long *counts;
    const char *const *names; /* (k) */
    int sel_row, sel_col;     /* a highlighted cell, or -1 */
    struct chart_rgb fg;
};
int chart_confusion_draw(cairo_t *cr, int width, int height, const struct chart_confusion *m);
/* The cell under point (x, y), as drawn at this size: 0 and row/col set, or -1 outside. */
int chart_confusion_hit(int width, int height, const struct chart_confusion *m, double x, double y,
                        int *row, int *col);

/* A regression run's predictions: predicted against actual values (the diagonal y = x drawn:
 * a perfect model's points lie on it), or with residuals set, the residual actual - predicted
 * against the predicted value (the zero line drawn). Values in the target's units. */
struct chart_scatter {
    int n;
    const float *pred, *actual; /* (n) */
    int residuals;
    const char *title;
    struct chart_rgb fg, dot;
};
/* Draws the points (n) and the reference line; returns how many points fell inside the plot. */
int chart_scatter_draw(cairo_t *cr, int width, int height, const struct chart_scatter *s);
/* Where point i of s is drawn at this size. */
void chart_scatter_map(int width, int height, const struct chart_scatter *s, int i, double *x,
                       double *y);

/* Exponential moving average of y into out (n): out[i] = a * out[i-1] + (1 - a) * y[i], with
 * bias correction so the first points are not pulled towards 0. */
void chart_smooth(double *out, const double *y, int n, double a);

#endif
