/* Chart drawing with cairo only (see chart.h). Text uses cairo's toy font API so that these
 * functions need neither Pango nor a display. */
#include "chart.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FONT       "Sans"
#define PAD        8.0
#define TITLE_SIZE 13.0
#define TICK_SIZE  10.5

static void set_rgb(cairo_t *cr, struct chart_rgb c, double alpha)
{
    cairo_set_source_rgba(cr, c.r, c.g, c.b, alpha);
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double size, double align)
{
    cairo_text_extents_t e;
    cairo_set_font_size(cr, size);
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - align * e.x_advance, y);
    cairo_show_text(cr, s);
}

static double text_width(cairo_t *cr, const char *s, double size)
{
    cairo_text_extents_t e;
    cairo_set_font_size(cr, size);
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

/* An empty chart's text centred on (x, y), its words on as many lines (up to 4) as it takes
 * for each to fit within width; a word longer than width has a line of its own. */
static void empty_text(cairo_t *cr, const char *text, double x, double y, double width)
{
    enum { LINES = 4 };
    const double size = TICK_SIZE + 1, lead = size + 4;
    char line[LINES][256];
    int n = 0;
    const char *p = text;

    while (*p && n < LINES) {
        size_t len = 0, fit = 0;
        for (;;) { /* the longest run of whole words from p that fits (at least one word) */
            size_t end = len;
            while (p[end] == ' ')
                end++;
            while (p[end] && p[end] != ' ')
                end++;
            if (end == len || end >= sizeof line[n])
                break;
            memcpy(line[n], p, end);
            line[n][end] = '\0';
            if (fit > 0 && text_width(cr, line[n], size) > width)
                break;
            fit = len = end;
            if (!p[end])
                break;
        }
        if (fit == 0) /* a word past the buffer: the rest on one line, cut */
            fit = strnlen(p, sizeof line[n] - 1);
        memcpy(line[n], p, fit);
        line[n][fit] = '\0';
        n++;
        p += fit;
        while (*p == ' ')
            p++;
    }
    for (int i = 0; i < n; i++)
        text_at(cr, x, y + (i - (n - 1) / 2.0) * lead, line[i], size, 0.5);
}

/* Whether series point i exists and is finite. */
static int finite_at(const struct chart_series *se, int i)
{
    return i >= 0 && i < se->n && isfinite(se->x[i]) && isfinite(se->y[i]);
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about `want` ticks over span. */
static double nice_step(double span, int want)
{
    double raw = span / want, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * p;
}

static void format_tick(char *buf, size_t size, double v, double step, int percent)
{
    if (percent) {
        snprintf(buf, size, "%.0f%%", v * 100.0);
        return;
    }
    double a = fabs(v);
    if (a >= 1e6)
        snprintf(buf, size, "%.1fM", v / 1e6);
    else if (a >= 1e3)
        snprintf(buf, size, step >= 1e3 ? "%.0fk" : "%.1fk", v / 1e3);
    else if (step >= 1.0 || v == 0.0)
        snprintf(buf, size, "%.0f", v);
    else if (step >= 0.1)
        snprintf(buf, size, "%.1f", v);
    else if (step >= 0.01)
        snprintf(buf, size, "%.2f", v);
    else
        snprintf(buf, size, "%.3f", v);
}

int chart_draw(cairo_t *cr, int width, int height, const struct chart *c)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int drawn = 0;

    cairo_save(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (int s = 0; s < c->nseries; s++) {
        const struct chart_series *se = &c->series[s];
        for (int i = 0; i < se->n; i++) {
            if (!isfinite(se->x[i]) || !isfinite(se->y[i]))
                continue;
            x0 = fmin(x0, se->x[i]);
            x1 = fmax(x1, se->x[i]);
            y0 = fmin(y0, se->y[i]);
            y1 = fmax(y1, se->y[i]);
        }
    }
    const int have = isfinite(x0);
    if (!isnan(c->xmin))
        x0 = c->xmin;
    if (!isnan(c->xmax))
        x1 = c->xmax;
    if (!isnan(c->ymin))
        y0 = c->ymin;
    if (!isnan(c->ymax))
        y1 = c->ymax;
    if (!isfinite(x0) || !isfinite(x1)) {
        x0 = 0;
        x1 = 1;
    }
    if (!isfinite(y0) || !isfinite(y1)) {
        y0 = 0;
        y1 = 1;
    }
    if (x1 - x0 < 1e-12)
        x1 = x0 + 1;
    if (y1 - y0 < 1e-12) {
        y0 -= 0.5;
        y1 += 0.5;
    } else if (isnan(c->ymin) || isnan(c->ymax)) {
        double m = 0.05 * (y1 - y0);
        if (isnan(c->ymin))
            y0 = y0 - m < 0 && y0 >= 0 ? 0 : y0 - m;
        if (isnan(c->ymax))
            y1 += m;
    }

    /* Layout: title on top, tick labels left and below, legend in the top right corner. */
    const double ystep = nice_step(y1 - y0, height > 200 ? 5 : 3);
    double label_w = 0;
    char buf[32];
    for (double v = ceil(y0 / ystep) * ystep; v <= y1 + 1e-9 * ystep; v += ystep) {
        format_tick(buf, sizeof buf, v, ystep, c->y_percent);
        label_w = fmax(label_w, text_width(cr, buf, TICK_SIZE));
    }
    /* The legend goes right of the title, or on rows of its own when they do not fit: entries
     * fill a row from the right, and a row that is full starts the next. row[s] is series s's
     * legend row (0: the title's). */
    double legend_w = 0, row_w = 0;
    int row[CHART_MAX_SERIES] = {0}, nrows = 0;
    for (int s = 0; s < c->nseries; s++)
        if (c->series[s].label)
            legend_w += text_width(cr, c->series[s].label, TICK_SIZE) + 30;
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    const double title_w = c->title ? text_width(cr, c->title, TITLE_SIZE) : 0;
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    if (legend_w > 0 && title_w + legend_w + 16 > width - 2 * PAD) {
        nrows = 1;
        for (int s = 0; s < c->nseries; s++) {
            if (!c->series[s].label)
                continue;
            const double w = text_width(cr, c->series[s].label, TICK_SIZE) + 30;
            if (row_w > 0 && row_w + w > width - 2 * PAD) {
                nrows++;
                row_w = 0;
            }
            row_w += w;
            row[s] = nrows;
        }
    }
    const double legend_y = PAD + TITLE_SIZE - 2;
    const double top = PAD + (c->title ? TITLE_SIZE + 8 : 0) + nrows * (TITLE_SIZE + 4);
    const double left = PAD + label_w + 6, right = width - PAD;
    const double bottom = height - PAD - TICK_SIZE - 6 - (c->xlabel ? TICK_SIZE + 4 : 0);
    const double pw = right - left, ph = bottom - top;

    if (c->title) {
        set_rgb(cr, c->fg, 0.9);
        cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
        text_at(cr, PAD, PAD + TITLE_SIZE - 2, c->title, TITLE_SIZE, 0);
        cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    }
    if (pw < 20 || ph < 20) {
        cairo_restore(cr);
        return 0;
    }

    /* Grid and y ticks. */
    cairo_set_line_width(cr, 1.0);
    for (double v = ceil(y0 / ystep) * ystep; v <= y1 + 1e-9 * ystep; v += ystep) {
        double y = round(bottom - (v - y0) / (y1 - y0) * ph) + 0.5;
        set_rgb(cr, c->fg, 0.12);
        cairo_move_to(cr, left, y);
        cairo_line_to(cr, right, y);
        cairo_stroke(cr);
        format_tick(buf, sizeof buf, v, ystep, c->y_percent);
        set_rgb(cr, c->fg, 0.7);
        text_at(cr, left - 6, y + TICK_SIZE / 2 - 1, buf, TICK_SIZE, 1.0);
    }
    const double xstep = nice_step(x1 - x0, width > 400 ? 6 : 3);
    for (double v = ceil(x0 / xstep) * xstep; v <= x1 + 1e-9 * xstep; v += xstep) {
        double x = round(left + (v - x0) / (x1 - x0) * pw) + 0.5;
        set_rgb(cr, c->fg, 0.12);
        cairo_move_to(cr, x, top);
        cairo_line_to(cr, x, bottom);
        cairo_stroke(cr);
        format_tick(buf, sizeof buf, v, xstep, 0);
        set_rgb(cr, c->fg, 0.7);
        text_at(cr, x, bottom + TICK_SIZE + 4, buf, TICK_SIZE, 0.5);
    }
    if (c->xlabel) {
        set_rgb(cr, c->fg, 0.6);
        text_at(cr, left + pw / 2, height - PAD, c->xlabel, TICK_SIZE, 0.5);
    }
    set_rgb(cr, c->fg, 0.35);
    cairo_rectangle(cr, left + 0.5, top + 0.5, pw - 1, ph - 1);
    cairo_stroke(cr);

    /* Series, clipped to the plot. */
    cairo_save(cr);
    cairo_rectangle(cr, left, top, pw, ph);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int s = 0; s < c->nseries; s++) {
        const struct chart_series *se = &c->series[s];
        int pen = 0;
        cairo_set_line_width(cr, se->width > 0 ? se->width : 1.5);
        if (se->dashed) {
            const double dash[] = {5.0, 3.0};
            cairo_set_dash(cr, dash, 2, 0);
        } else {
            cairo_set_dash(cr, NULL, 0, 0);
        }
        set_rgb(cr, se->color, 1.0);
        /* Many points per pixel column: skip those that land on the previous column's x. */
        double last_px = -1e9;
        for (int i = 0; i < se->n; i++) {
            if (!isfinite(se->x[i]) || !isfinite(se->y[i])) {
                pen = 0;
                continue;
            }
            double px = left + (se->x[i] - x0) / (x1 - x0) * pw;
            double py = bottom - (se->y[i] - y0) / (y1 - y0) * ph;
            if (pen && px - last_px < 0.5 && i + 1 < se->n)
                continue;
            if (pen)
                cairo_line_to(cr, px, py);
            else
                cairo_move_to(cr, px, py);
            pen = 1;
            last_px = px;
            drawn++;
        }
        cairo_stroke(cr);
    }
    cairo_restore(cr);

    /* Markers are not clipped: a point on the plot's edge (the last epoch) stays whole. A point
     * with no finite neighbour (a run of one epoch, a point between two gaps) makes no line, so
     * it has a marker in every series. */
    for (int s = 0; s < c->nseries; s++) {
        const struct chart_series *se = &c->series[s];
        set_rgb(cr, se->color, 1.0);
        for (int i = 0; i < se->n; i++) {
            if (!finite_at(se, i) || se->x[i] < x0 || se->x[i] > x1 || se->y[i] < y0 ||
                se->y[i] > y1 || (!se->markers && (finite_at(se, i - 1) || finite_at(se, i + 1))))
                continue;
            double px = left + (se->x[i] - x0) / (x1 - x0) * pw;
            double py = bottom - (se->y[i] - y0) / (y1 - y0) * ph;
            cairo_new_sub_path(cr);
            cairo_arc(cr, px, py, 3.5, 0, 2 * M_PI);
        }
        cairo_fill(cr);
    }

    /* Events: a dashed line across the plot, a triangle on its top edge, a label beside it
     * (right of the line, or left of it near the right edge), in the first row below the top
     * where it meets no label drawn before (up to 4 rows; those past them overlap the last). */
    enum { LABEL_ROWS = 4, LABELS_KEPT = 64 };
    double placed_from[LABELS_KEPT], placed_to[LABELS_KEPT];
    int placed_row[LABELS_KEPT], nplaced = 0;
    for (int k = 0; k < c->nevents; k++) {
        const double ex = c->event_x[k];
        if (!isfinite(ex) || ex < x0 || ex > x1)
            continue;
        const double px = round(left + (ex - x0) / (x1 - x0) * pw) + 0.5;
        set_rgb(cr, c->event_colors ? c->event_colors[k] : c->event_color, 1.0);
        cairo_set_line_width(cr, 1.5);
        const double dash[] = {4.0, 3.0};
        cairo_set_dash(cr, dash, 2, 0);
        cairo_move_to(cr, px, top + 6);
        cairo_line_to(cr, px, bottom);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_move_to(cr, px - 5, top);
        cairo_line_to(cr, px + 5, top);
        cairo_line_to(cr, px, top + 7);
        cairo_close_path(cr);
        cairo_fill(cr);
        const char *label = c->event_labels ? c->event_labels[k] : NULL;
        if (label && pw > 160) {
            const double lw = text_width(cr, label, TICK_SIZE);
            const int before = px + 6 + lw > right - 2;
            const double from = before ? px - 6 - lw : px + 6, to = from + lw;
            int lrow = 0;
            for (int i = 0; i < nplaced; i++)
                if (placed_row[i] == lrow && from < placed_to[i] + 4 && to > placed_from[i] - 4) {
                    lrow++;
                    i = -1; /* check the next row against all of them */
                    if (lrow == LABEL_ROWS - 1)
                        break;
                }
            if (nplaced < LABELS_KEPT) {
                placed_from[nplaced] = from;
                placed_to[nplaced] = to;
                placed_row[nplaced++] = lrow;
            }
            text_at(cr, before ? px - 6 : px + 6, top + TICK_SIZE + 6 + lrow * (TICK_SIZE + 4),
                    label, TICK_SIZE, before ? 1.0 : 0.0);
        }
        drawn++;
    }

    if (!have && c->empty) {
        set_rgb(cr, c->fg, 0.5);
        empty_text(cr, c->empty, left + pw / 2, top + ph / 2, pw - 12);
    }

    /* Legend, right-aligned in the title row or in its own rows. */
    cairo_set_dash(cr, NULL, 0, 0);
    for (int r = 0; r <= nrows; r++) {
        double lx = right;
        const double y = legend_y + r * (TITLE_SIZE + 4);
        for (int s = c->nseries - 1; s >= 0; s--) {
            const struct chart_series *se = &c->series[s];
            if (!se->label || row[s] != r)
                continue;
            double w = text_width(cr, se->label, TICK_SIZE);
            lx -= w;
            set_rgb(cr, c->fg, 0.8);
            text_at(cr, lx, y, se->label, TICK_SIZE, 0);
            lx -= 18;
            set_rgb(cr, se->color, 1.0);
            cairo_rectangle(cr, lx, y - TITLE_SIZE / 2 - 1, 12, 4);
            cairo_fill(cr);
            lx -= 12;
        }
    }
    cairo_restore(cr);
    return drawn;
}

struct chart_rgb chart_worker_color(int i)
{
    /* Distinct from the total's green and from each other, in light and dark themes. */
    static const struct chart_rgb palette[CHART_MAX_WORKERS] = {
        {0.21, 0.52, 0.89}, {0.90, 0.38, 0.00}, {0.57, 0.25, 0.67}, {0.88, 0.11, 0.14},
        {0.00, 0.62, 0.65}, {0.75, 0.55, 0.05}, {0.55, 0.35, 0.20},
    };
    return palette[(i % CHART_MAX_WORKERS + CHART_MAX_WORKERS) % CHART_MAX_WORKERS];
}

int chart_throughput_draw(cairo_t *cr, int width, int height, const struct chart_throughput *t)
{
    struct chart c = {.title = t->title, .xlabel = "epoch", .empty = t->empty, .fg = t->fg};
    const int nw = t->nworkers < 0                   ? 0
                   : t->nworkers > CHART_MAX_WORKERS ? CHART_MAX_WORKERS
                                                     : t->nworkers;

    c.xmin = 0;
    c.xmax = t->xmax;
    c.ymin = 0;
    c.ymax = NAN;
    c.series[0] = (struct chart_series){.label = nw > 0 ? "all workers" : "this computer",
                                        .x = t->x,
                                        .y = t->total,
                                        .n = t->n,
                                        .color = {0.18, 0.63, 0.33},
                                        .width = 2.0};
    for (int i = 0; i < nw; i++)
        c.series[1 + i] = (struct chart_series){.label = t->hosts ? t->hosts[i] : NULL,
                                                .x = t->x,
                                                .y = t->workers[i],
                                                .n = t->n,
                                                .color = chart_worker_color(i),
                                                .width = 1.25};
    c.nseries = 1 + nw;
    return chart_draw(cr, width, height, &c);
}

void chart_smooth(double *out, const double *y, int n, double a)
{
    double acc = 0, w = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            out[i] = NAN;
            continue;
        }
        acc = a * acc + (1 - a) * y[i];
        w = a * w + (1 - a);
        out[i] = acc / w;
    }
}

int chart_bars_draw(cairo_t *cr, int width, int height, const struct chart_bars *b)
{
    if (b->n <= 0)
        return 0;
    cairo_save(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    double label_w = 0;
    for (int i = 0; i < b->n; i++)
        label_w = fmax(label_w, text_width(cr, b->labels[i], 13));
    const double row = fmin(44.0, (height - 2 * PAD) / b->n);
    const double bx = PAD + label_w + 12, bw = width - bx - PAD - 64;
    char buf[32];
    for (int i = 0; i < b->n; i++) {
        double y = PAD + i * row, v = fmax(0.0, fmin(1.0, b->values[i]));
        set_rgb(cr, b->fg, 1.0);
        cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                               i == 0 ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
        text_at(cr, PAD + label_w, y + row / 2 + 4, b->labels[i], 13, 1.0);
        set_rgb(cr, b->fg, 0.1);
        cairo_rectangle(cr, bx, y + row * 0.2, fmax(bw, 0), row * 0.6);
        cairo_fill(cr);
        set_rgb(cr, b->bar, i == 0 ? 1.0 : 0.6);
        cairo_rectangle(cr, bx, y + row * 0.2, fmax(bw, 0) * v, row * 0.6);
        cairo_fill(cr);
        snprintf(buf, sizeof buf, "%.1f%%", 100.0 * b->values[i]);
        set_rgb(cr, b->fg, 0.8);
        text_at(cr, bx + fmax(bw, 0) + 8, y + row / 2 + 4, buf, 12, 0);
    }
    cairo_restore(cr);
    return b->n;
}

static int thumbs_cols(int width, const struct chart_thumbs *t, int *cell, int *pitch_y)
{
    *cell = t->cell > 0 ? t->cell : 64;
    *pitch_y = *cell + (t->captions ? 18 : 6);
    int cols = (width - 4) / (*cell + 8);
    return cols < 1 ? 1 : cols;
}

int chart_thumbs_height(int width, const struct chart_thumbs *t)
{
    int cell, pitch;
    int cols = thumbs_cols(width, t, &cell, &pitch);
    return ((t->n + cols - 1) / cols) * pitch + 4;
}

int chart_thumbs_hit(int width, const struct chart_thumbs *t, double x, double y)
{
    int cell, pitch;
    const int cols = thumbs_cols(width, t, &cell, &pitch);
    if (x < 4 || y < 4)
        return -1;
    const int col = (int)((x - 4) / (cell + 8)), row = (int)((y - 4) / pitch);
    const double cx = x - 4 - col * (cell + 8), cy = y - 4 - row * pitch;
    const int i = row * cols + col;
    if (col >= cols || cx > cell || cy > pitch - 4 || i >= t->n)
        return -1;
    return i;
}

int chart_thumbs_draw(cairo_t *cr, int width, int height, const struct chart_thumbs *t)
{
    int cell, pitch, drawn = 0;
    int cols = thumbs_cols(width, t, &cell, &pitch);
    const int stride = cairo_format_stride_for_width(CAIRO_FORMAT_RGB24, t->w);
    cairo_save(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (int i = 0; i < t->n; i++) {
        const double x = 4 + (i % cols) * (cell + 8), y = 4 + (i / cols) * pitch;
        if (y > height)
            break;
        cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, t->w, t->h);
        if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
            cairo_surface_destroy(img);
            break;
        }
        cairo_surface_flush(img);
        unsigned char *d = cairo_image_surface_get_data(img);
        const uint8_t *px = t->pixels + (size_t)i * t->c * t->h * t->w;
        const size_t plane = (size_t)t->h * t->w;
        for (int r = 0; r < t->h; r++)
            for (int col = 0; col < t->w; col++) {
                size_t o = (size_t)r * t->w + col;
                uint32_t v0 = px[o], v1 = t->c >= 3 ? px[plane + o] : v0,
                         v2 = t->c >= 3 ? px[2 * plane + o] : v0;
                uint32_t *dst = (uint32_t *)(void *)(d + (size_t)r * stride) + col;
                *dst = (v0 << 16) | (v1 << 8) | v2;
            }
        cairo_surface_mark_dirty(img);
        cairo_save(cr);
        cairo_translate(cr, x, y);
        cairo_scale(cr, (double)cell / t->w, (double)cell / t->h);
        cairo_set_source_surface(cr, img, 0, 0);
        cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
        cairo_paint(cr);
        cairo_restore(cr);
        cairo_surface_destroy(img);
        if (t->captions && t->captions[i]) {
            char cap[24];
            snprintf(cap, sizeof cap, "%s", t->captions[i]);
            set_rgb(cr, t->fg, 0.8);
            text_at(cr, x + cell / 2.0, y + cell + 13, cap, 10.5, 0.5);
        }
        drawn++;
    }
    cairo_restore(cr);
    return drawn;
}

/* Room for class names beside and above the matrix: as long as the longest name (at about 6.2
 * pixels a character of the 10-pixel font), from 40 to 140 pixels; longer names are cut with an
 * ellipsis. */
#define CHAR_W 6.2
static double confusion_label_room(const struct chart_confusion *m)
{
    size_t longest = 0;
    for (int i = 0; m->names && i < m->k; i++) {
        size_t chars = 0;
        for (const unsigned char *c = (const unsigned char *)m->names[i]; *c; c++)
            chars += (*c & 0xc0) != 0x80;
        if (chars > longest)
            longest = chars;
    }
    const double room = 16 + CHAR_W * (double)longest;
    return room < 40 ? 40 : room > 140 ? 140 : room;
}

/* name cut to at most chars characters, "…" last when cut, into buf (UTF-8 kept whole). */
static void fit_name(char *buf, size_t size, const char *name, int chars)
{
    size_t at = 0;
    int n = 0;
    const unsigned char *c = (const unsigned char *)name;
    while (c[at] && at + 4 < size) {
        if ((c[at] & 0xc0) != 0x80 && ++n > chars)
            break;
        at++;
    }
    if (c[at] && at + 4 < size && chars > 1) {
        /* Make room for the ellipsis: drop the last character. */
        do
            at--;
        while (at > 0 && (c[at] & 0xc0) == 0x80);
        memcpy(buf, name, at);
        memcpy(buf + at, "\xe2\x80\xa6", 4);
        return;
    }
    memcpy(buf, name, at);
    buf[at] = '\0';
}

/* The confusion matrix's geometry: labels on the left and top, square cells. */
static void confusion_geometry(int width, int height, const struct chart_confusion *m, double *gx,
                               double *gy, double *cs)
{
    const double lab = confusion_label_room(m);
    double avail = fmin(width - lab - PAD, height - lab - PAD);
    *cs = m->k > 0 ? floor(fmax(avail, 0) / m->k) : 0;
    *gx = lab;
    *gy = lab;
}

int chart_confusion_hit(int width, int height, const struct chart_confusion *m, double x, double y,
                        int *row, int *col)
{
    double gx, gy, cs;
    confusion_geometry(width, height, m, &gx, &gy, &cs);
    if (cs <= 0 || x < gx || y < gy)
        return -1;
    int c = (int)((x - gx) / cs), r = (int)((y - gy) / cs);
    if (r >= m->k || c >= m->k)
        return -1;
    *row = r;
    *col = c;
    return 0;
}

int chart_confusion_draw(cairo_t *cr, int width, int height, const struct chart_confusion *m)
{
    double gx, gy, cs;
    char buf[32];
    confusion_geometry(width, height, m, &gx, &gy, &cs);
    if (m->k <= 0 || cs < 4)
        return 0;
    cairo_save(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    set_rgb(cr, m->fg, 0.6);
    text_at(cr, gx + cs * m->k / 2, 12, "predicted", 11, 0.5);
    cairo_save(cr);
    cairo_translate(cr, 12, gy + cs * m->k / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, "true class", 11, 0.5);
    cairo_restore(cr);
    for (int r = 0; r < m->k; r++) {
        long row_total = 0;
        for (int c = 0; c < m->k; c++)
            row_total += m->counts[r * m->k + c];
        for (int c = 0; c < m->k; c++) {
            long n = m->counts[r * m->k + c];
            double f = row_total > 0 ? (double)n / row_total : 0;
            double x = gx + c * cs, y = gy + r * cs;
            /* Correct cells in blue, mistakes in orange, by share of the true class. */
            if (r == c)
                cairo_set_source_rgba(cr, 0.21, 0.52, 0.89, 0.12 + 0.88 * f);
            else
                cairo_set_source_rgba(cr, 0.90, 0.38, 0.0, n ? 0.15 + 0.85 * fmin(1, 4 * f) : 0.0);
            cairo_rectangle(cr, x + 1, y + 1, cs - 2, cs - 2);
            cairo_fill(cr);
            if (r == m->sel_row && c == m->sel_col) {
                set_rgb(cr, m->fg, 1.0);
                cairo_set_line_width(cr, 2.0);
                cairo_rectangle(cr, x + 1, y + 1, cs - 2, cs - 2);
                cairo_stroke(cr);
            }
            if (cs >= 22) {
                snprintf(buf, sizeof buf, "%ld", n);
                if (r == c && f > 0.5)
                    cairo_set_source_rgb(cr, 1, 1, 1);
                else
                    set_rgb(cr, m->fg, n ? 0.9 : 0.35);
                text_at(cr, x + cs / 2, y + cs / 2 + 4, buf, cs >= 36 ? 11 : 9, 0.5);
            }
        }
    }
    set_rgb(cr, m->fg, 0.85);
    for (int i = 0; i < m->k; i++) {
        char name[160];
        fit_name(name, sizeof name, m->names ? m->names[i] : "",
                 (int)((confusion_label_room(m) - 16) / CHAR_W));
        text_at(cr, gx - 4, gy + i * cs + cs / 2 + 4, name, 10, 1.0);
        cairo_save(cr);
        cairo_translate(cr, gx + i * cs + cs / 2 + 4, gy - 4);
        cairo_rotate(cr, -M_PI / 4);
        text_at(cr, 0, 0, name, 10, 0);
        cairo_restore(cr);
    }
    cairo_restore(cr);
    return m->k * m->k;
}

/* ---- Scatter plots of a regression run's predictions ---- */

#define SCATTER_LEFT   54
#define SCATTER_RIGHT  12
#define SCATTER_TOP    24
#define SCATTER_BOTTOM 36

/* Point i's coordinates in data units: (actual, predicted), or (predicted, residual). */
static void scatter_point(const struct chart_scatter *s, int i, double *u, double *v)
{
    if (s->residuals) {
        *u = s->pred[i];
        *v = (double)s->actual[i] - s->pred[i];
    } else {
        *u = s->actual[i];
        *v = s->pred[i];
    }
}

/* The data ranges of both axes: one range for both in the predicted-against-actual plot (so
 * the diagonal is at 45 degrees), a range symmetric about 0 for the residuals. */
static void scatter_range(const struct chart_scatter *s, double *u0, double *u1, double *v0,
                          double *v1)
{
    double a = INFINITY, b = -INFINITY, c = INFINITY, d = -INFINITY;
    for (int i = 0; i < s->n; i++) {
        double u, v;
        scatter_point(s, i, &u, &v);
        if (!isfinite(u) || !isfinite(v))
            continue;
        a = fmin(a, u);
        b = fmax(b, u);
        c = fmin(c, v);
        d = fmax(d, v);
    }
    if (!(a <= b)) {
        a = c = 0;
        b = d = 1;
    }
    if (s->residuals) {
        const double r = fmax(fmax(fabs(c), fabs(d)), 1e-9);
        c = -r;
        d = r;
    } else {
        a = c = fmin(a, c);
        b = d = fmax(b, d);
    }
    const double pu = fmax((b - a) * 0.05, 1e-9), pv = fmax((d - c) * 0.05, 1e-9);
    *u0 = a - pu;
    *u1 = b + pu;
    *v0 = c - pv;
    *v1 = d + pv;
}

void chart_scatter_map(int width, int height, const struct chart_scatter *s, int i, double *x,
                       double *y)
{
    double u0, u1, v0, v1, u, v;
    scatter_range(s, &u0, &u1, &v0, &v1);
    scatter_point(s, i, &u, &v);
    const double pw = width - SCATTER_LEFT - SCATTER_RIGHT,
                 ph = height - SCATTER_TOP - SCATTER_BOTTOM;
    *x = SCATTER_LEFT + (u - u0) / (u1 - u0) * pw;
    *y = SCATTER_TOP + (v1 - v) / (v1 - v0) * ph;
}

int chart_scatter_draw(cairo_t *cr, int width, int height, const struct chart_scatter *s)
{
    double u0, u1, v0, v1;
    const double pw = width - SCATTER_LEFT - SCATTER_RIGHT,
                 ph = height - SCATTER_TOP - SCATTER_BOTTOM;
    if (pw < 20 || ph < 20)
        return 0;
    scatter_range(s, &u0, &u1, &v0, &v1);
    cairo_save(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    char buf[32];
    /* Ticks and grid. */
    const double su = nice_step(u1 - u0, 4), sv = nice_step(v1 - v0, 4);
    cairo_set_line_width(cr, 1);
    for (double t = ceil(u0 / su) * su; t <= u1; t += su) {
        const double x = SCATTER_LEFT + (t - u0) / (u1 - u0) * pw;
        set_rgb(cr, s->fg, 0.12);
        cairo_move_to(cr, floor(x) + 0.5, SCATTER_TOP);
        cairo_line_to(cr, floor(x) + 0.5, SCATTER_TOP + ph);
        cairo_stroke(cr);
        format_tick(buf, sizeof buf, t, su, 0);
        set_rgb(cr, s->fg, 0.6);
        text_at(cr, x, SCATTER_TOP + ph + 14, buf, 10, 0.5);
    }
    for (double t = ceil(v0 / sv) * sv; t <= v1; t += sv) {
        const double y = SCATTER_TOP + (v1 - t) / (v1 - v0) * ph;
        set_rgb(cr, s->fg, 0.12);
        cairo_move_to(cr, SCATTER_LEFT, floor(y) + 0.5);
        cairo_line_to(cr, SCATTER_LEFT + pw, floor(y) + 0.5);
        cairo_stroke(cr);
        format_tick(buf, sizeof buf, t, sv, 0);
        set_rgb(cr, s->fg, 0.6);
        text_at(cr, SCATTER_LEFT - 4, y + 4, buf, 10, 1);
    }
    set_rgb(cr, s->fg, 0.8);
    text_at(cr, SCATTER_LEFT, 14, s->title ? s->title : "", 12, 0);
    set_rgb(cr, s->fg, 0.6);
    text_at(cr, SCATTER_LEFT + pw / 2, height - 6, s->residuals ? "predicted" : "actual", 11, 0.5);
    cairo_save(cr);
    cairo_translate(cr, 12, SCATTER_TOP + ph / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, s->residuals ? "actual − predicted" : "predicted", 11, 0.5);
    cairo_restore(cr);
    /* The reference: y = x, or the zero residual. */
    cairo_rectangle(cr, SCATTER_LEFT, SCATTER_TOP, pw, ph);
    cairo_clip(cr);
    set_rgb(cr, s->fg, 0.45);
    cairo_set_line_width(cr, 1.5);
    if (s->residuals) {
        const double y = SCATTER_TOP + v1 / (v1 - v0) * ph;
        cairo_move_to(cr, SCATTER_LEFT, y);
        cairo_line_to(cr, SCATTER_LEFT + pw, y);
    } else {
        cairo_move_to(cr, SCATTER_LEFT, SCATTER_TOP + ph);
        cairo_line_to(cr, SCATTER_LEFT + pw, SCATTER_TOP);
    }
    cairo_stroke(cr);
    int drawn = 0;
    set_rgb(cr, s->dot, 1);
    for (int i = 0; i < s->n; i++) {
        double x, y;
        chart_scatter_map(width, height, s, i, &x, &y);
        if (!isfinite(x) || !isfinite(y) || x < SCATTER_LEFT || x > SCATTER_LEFT + pw ||
            y < SCATTER_TOP || y > SCATTER_TOP + ph)
            continue;
        cairo_arc(cr, x, y, 3, 0, 2 * M_PI);
        cairo_fill(cr);
        drawn++;
    }
    cairo_restore(cr);
    return drawn;
}
