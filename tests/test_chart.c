/* The window's drawing functions and the training feed, without a display: charts are drawn into
 * cairo image surfaces and checked for the pixels of their series. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "feed.h"
#include "tap.h"

static cairo_surface_t *surface;
static cairo_t *cr;

static void canvas(int w, int h)
{
    if (cr) {
        cairo_destroy(cr);
        cairo_surface_destroy(surface);
    }
    surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
}

/* Pixels close to colour c. */
static long count_color(struct chart_rgb c)
{
    cairo_surface_flush(surface);
    const unsigned char *d = cairo_image_surface_get_data(surface);
    const int w = cairo_image_surface_get_width(surface),
              h = cairo_image_surface_get_height(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    long n = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint32_t p = *(const uint32_t *)(const void *)(d + (size_t)y * stride + 4 * (size_t)x);
            int r = (p >> 16) & 255, g = (p >> 8) & 255, b = p & 255;
            if (abs(r - (int)(c.r * 255)) < 12 && abs(g - (int)(c.g * 255)) < 12 &&
                abs(b - (int)(c.b * 255)) < 12)
                n++;
        }
    return n;
}

/* The box of the pixels where chart c drawn on a w x h canvas differs from it drawn without its
 * empty text: that text's. */
static void empty_box(struct chart c, int w, int h, int *x_lo, int *x_hi, int *y_lo, int *y_hi)
{
    const char *text = c.empty;
    c.empty = NULL;
    canvas(w, h);
    chart_draw(cr, w, h, &c);
    cairo_surface_flush(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    unsigned char *plain = malloc((size_t)stride * h);
    memcpy(plain, cairo_image_surface_get_data(surface), (size_t)stride * h);
    c.empty = text;
    canvas(w, h);
    chart_draw(cr, w, h, &c);
    cairo_surface_flush(surface);
    const unsigned char *d = cairo_image_surface_get_data(surface);
    *x_lo = *y_lo = 1 << 30;
    *x_hi = *y_hi = -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (memcmp(d + (size_t)y * stride + 4 * (size_t)x,
                       plain + (size_t)y * stride + 4 * (size_t)x, 3) != 0) {
                *x_lo = x < *x_lo ? x : *x_lo;
                *x_hi = x > *x_hi ? x : *x_hi;
                *y_lo = y < *y_lo ? y : *y_lo;
                *y_hi = y > *y_hi ? y : *y_hi;
            }
    free(plain);
}

static void test_line_chart(void)
{
    const struct chart_rgb red = {0.9, 0.1, 0.1}, green = {0.1, 0.7, 0.2};
    double x[200], y[200], y2[200];
    for (int i = 0; i < 200; i++) {
        x[i] = i;
        y[i] = 2.0 * exp(-i / 50.0);
        y2[i] = i == 100 ? NAN : 1.0;
    }
    struct chart c = {.title = "Loss", .xlabel = "step", .fg = {0, 0, 0}, .nseries = 2};
    c.ymin = c.ymax = c.xmin = c.xmax = NAN;
    c.series[0] = (struct chart_series){.label = "raw", .x = x, .y = y, .n = 200, .color = red};
    c.series[1] = (struct chart_series){
        .label = "flat", .x = x, .y = y2, .n = 200, .color = green, .width = 3};
    canvas(640, 300);
    int drawn = chart_draw(cr, 640, 300, &c);
    ok(drawn > 100 && drawn <= 400, "points are drawn, thinned per pixel column (%d)", drawn);
    ok(count_color(red) > 300, "the first series is visible (%ld pixels)", count_color(red));
    ok(count_color(green) > 300, "the second series is visible");

    /* Nothing to draw: no crash, nothing drawn, the empty text instead. */
    struct chart e = {.title = "Empty",
                      .fg = {0, 0, 0},
                      .empty = "Select or tick runs to see their curves",
                      .nseries = 1};
    e.ymin = e.ymax = e.xmin = e.xmax = NAN;
    e.series[0] = (struct chart_series){.x = x, .y = y, .n = 0, .color = red};
    canvas(300, 200);
    is_int(chart_draw(cr, 300, 200, &e), 0, "an empty chart draws no points");
    is_int(count_color(red), 0, "and no series pixels");

    /* The empty text on a plot too narrow for it: its words on lines within the plot, right of
     * the tick labels and left of the frame's edge. */
    int x_lo, x_hi, y_lo, y_hi;
    empty_box(e, 260, 220, &x_lo, &x_hi, &y_lo, &y_hi);
    ok(x_lo > 30 && x_hi < 260 - 8, "its text stays within the plot (columns %d to %d)", x_lo,
       x_hi);
    ok(y_hi - y_lo > 20, "on more than one line (rows %d to %d)", y_lo, y_hi);
    empty_box(e, 640, 300, &x_lo, &x_hi, &y_lo, &y_hi);
    ok(y_hi - y_lo < 16 && x_hi - x_lo > 150, "and on one line where it fits (%dx%d)", x_hi - x_lo,
       y_hi - y_lo);

    /* A constant series and fixed ranges; too small a surface draws nothing and survives. */
    c.ymin = 0;
    c.ymax = 1;
    c.y_percent = 1;
    canvas(640, 300);
    ok(chart_draw(cr, 640, 300, &c) > 0, "fixed ranges draw");
    canvas(30, 20);
    is_int(chart_draw(cr, 30, 20, &c), 0, "a tiny surface draws no points");

    /* A run of one epoch: each series one point, the dashed one without markers, and a point
     * between two gaps; each is a dot of its own colour rather than nothing. */
    const double one_x[1] = {1}, one_y[1] = {0.5}, gap_x[3] = {0, 1, 2}, gap_y[3] = {NAN, 0.8, NAN};
    struct chart o = {.title = "Accuracy per epoch", .fg = {0, 0, 0}, .nseries = 2};
    o.ymin = 0;
    o.ymax = 1;
    o.xmin = 0;
    o.xmax = 2;
    o.series[0] = (struct chart_series){
        .x = one_x, .y = one_y, .n = 1, .color = red, .width = 1.5, .dashed = 1};
    o.series[1] = (struct chart_series){.x = gap_x, .y = gap_y, .n = 3, .color = green};
    canvas(400, 250);
    is_int(chart_draw(cr, 400, 250, &o), 2, "two lone points are drawn");
    ok(count_color(red) >= 16, "a series of one point is a dot (%ld pixels)", count_color(red));
    ok(count_color(green) >= 16, "and a point between gaps (%ld pixels)", count_color(green));
}

/* Events on the x axis (a cluster run's recoveries): a line at each x inside the range, in the
 * events' colour, in the pixel column that x maps to. */
static void test_events(void)
{
    const struct chart_rgb blue = {0.1, 0.3, 0.9}, magenta = {0.85, 0.1, 0.75};
    double x[100], y[100];
    for (int i = 0; i < 100; i++) {
        x[i] = i / 50.0; /* two epochs */
        y[i] = 1.0 - i / 200.0;
    }
    const double at[3] = {0.5, 1.5, 7.0}; /* the last is outside the range */
    const char *const labels[3] = {"node2 restarted", NULL, "never"};
    struct chart c = {.title = "Loss per step", .fg = {0, 0, 0}, .nseries = 1};
    c.ymin = c.ymax = NAN;
    c.xmin = 0;
    c.xmax = 2;
    c.series[0] = (struct chart_series){.x = x, .y = y, .n = 100, .color = blue};
    canvas(600, 300);
    const int plain = chart_draw(cr, 600, 300, &c);
    is_int(count_color(magenta), 0, "without events, no event colour");
    c.nevents = 3;
    c.event_x = at;
    c.event_labels = labels;
    c.event_color = magenta;
    canvas(600, 300);
    is_int(chart_draw(cr, 600, 300, &c), plain + 2, "the two events inside the range are drawn");
    /* The plot spans the columns between the first and last series pixels. */
    cairo_surface_flush(surface);
    const unsigned char *d = cairo_image_surface_get_data(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    int cols[600] = {0}, lo = 600, hi = -1;
    for (int yy = 0; yy < 300; yy++)
        for (int xx = 0; xx < 600; xx++) {
            uint32_t p =
                *(const uint32_t *)(const void *)(d + (size_t)yy * stride + 4 * (size_t)xx);
            int r = (p >> 16) & 255, g = (p >> 8) & 255, b = p & 255;
            if (abs(r - 217) < 12 && abs(g - 25) < 12 && abs(b - 191) < 12)
                cols[xx]++;
            if (abs(r - 25) < 12 && abs(g - 76) < 12 && abs(b - 229) < 12) {
                lo = xx < lo ? xx : lo;
                hi = xx > hi ? xx : hi;
            }
        }
    /* The series runs from x 0 to 1.98 over columns lo to hi. */
    const int quarter = lo + (int)lround(0.5 / 1.98 * (hi - lo)),
              three = lo + (int)lround(1.5 / 1.98 * (hi - lo));
    int near_q = 0, near_t = 0, tall = 0;
    for (int xx = quarter - 2; xx <= quarter + 2; xx++)
        near_q = cols[xx] > near_q ? cols[xx] : near_q;
    for (int xx = three - 2; xx <= three + 2; xx++)
        near_t = cols[xx] > near_t ? cols[xx] : near_t;
    for (int xx = 0; xx < 600; xx++)
        tall += cols[xx] > 100;
    ok(near_q > 100 && near_t > 100,
       "a line at epoch 0.5 (column %d: %d pixels) and at 1.5 (column %d: %d pixels)", quarter,
       near_q, three, near_t);
    ok(tall <= 4, "and nowhere else (%d tall columns)", tall);
}

/* The topmost pixel of colour c more than 8 columns from where it runs tall (an event's line
 * and the triangle atop it): where its label starts; -1 when it has none. */
static int label_top(struct chart_rgb c, int w, int h)
{
    cairo_surface_flush(surface);
    const unsigned char *d = cairo_image_surface_get_data(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    static int n[4096], first[4096];
    for (int xx = 0; xx < w; xx++) {
        n[xx] = 0;
        first[xx] = -1;
        for (int yy = 0; yy < h; yy++) {
            uint32_t p =
                *(const uint32_t *)(const void *)(d + (size_t)yy * stride + 4 * (size_t)xx);
            int r = (p >> 16) & 255, g = (p >> 8) & 255, b = p & 255;
            if (abs(r - (int)(c.r * 255)) < 12 && abs(g - (int)(c.g * 255)) < 12 &&
                abs(b - (int)(c.b * 255)) < 12) {
                n[xx]++;
                first[xx] = first[xx] < 0 ? yy : first[xx];
            }
        }
    }
    int top = -1;
    for (int xx = 0; xx < w; xx++) {
        int near_line = 0;
        for (int k = xx - 8; k <= xx + 8; k++)
            near_line |= k >= 0 && k < w && n[k] >= 40;
        if (n[xx] > 0 && !near_line && (top < 0 || first[xx] < top))
            top = first[xx];
    }
    return top;
}

/* Events of their own colours (a recovery, and the step from which --overlap auto keeps its
 * mode) a few pixels apart: each drawn in its colour, the second label in a row below the
 * first instead of over it. */
static void test_event_colours(void)
{
    const struct chart_rgb blue = {0.1, 0.3, 0.9}, magenta = {0.85, 0.1, 0.75},
                           green = {0.1, 0.7, 0.2};
    double x[100], y[100];
    for (int i = 0; i < 100; i++) {
        x[i] = i / 50.0;
        y[i] = 1.0 - i / 200.0;
    }
    const double at[2] = {1.0, 1.02};
    const char *const labels[2] = {"node2 restarted", "synchronous"};
    const struct chart_rgb colours[2] = {magenta, green};
    struct chart c = {.title = "Loss per step", .fg = {0, 0, 0}, .nseries = 1};
    c.ymin = c.ymax = NAN;
    c.xmin = 0;
    c.xmax = 2;
    c.series[0] = (struct chart_series){.x = x, .y = y, .n = 100, .color = blue};
    c.nevents = 2;
    c.event_x = at;
    c.event_labels = labels;
    c.event_color = magenta;
    c.event_colors = colours;
    canvas(600, 300);
    chart_draw(cr, 600, 300, &c);
    ok(count_color(green) > 100 && count_color(magenta) > 100,
       "each event in its own colour (%ld green, %ld magenta pixels)", count_color(green),
       count_color(magenta));
    const int first = label_top(magenta, 600, 300), second = label_top(green, 600, 300);
    ok(first >= 0 && second >= first + 8,
       "the second label sits a row below the first, not over it (tops at %d and %d)", first,
       second);
}

/* Images per second of a cluster run: the total and one line per worker, each in its colour. */
static void test_throughput(void)
{
    double x[120], total[120], w0[120], w1[120], w2[120];
    for (int i = 0; i < 120; i++) {
        x[i] = i / 60.0;
        w0[i] = 400 + 20 * sin(i / 7.0);
        w1[i] = 250 + 15 * cos(i / 5.0);
        w2[i] = NAN; /* a worker that has not reported */
        total[i] = w0[i] + w1[i];
    }
    const char *hosts[] = {"node1", "node2", "node3"};
    const double *workers[] = {w0, w1, w2};
    struct chart_throughput t = {.title = "Images per second",
                                 .x = x,
                                 .total = total,
                                 .n = 120,
                                 .nworkers = 3,
                                 .hosts = hosts,
                                 .workers = workers,
                                 .xmax = 2,
                                 .fg = {0, 0, 0}};
    const struct chart_rgb green = {0.18, 0.63, 0.33};
    canvas(640, 300);
    int drawn = chart_throughput_draw(cr, 640, 300, &t);
    ok(drawn >= 3 * 100, "the total and two workers' series are drawn (%d points)", drawn);
    ok(count_color(green) > 300, "the total is visible (%ld pixels)", count_color(green));
    long c0 = count_color(chart_worker_color(0)), c1 = count_color(chart_worker_color(1));
    ok(c0 > 150 && c1 > 150, "each worker's line in its own colour (%ld, %ld pixels)", c0, c1);
    /* Only its legend swatch (12x4 pixels) shows the third worker's colour. */
    long c2 = count_color(chart_worker_color(2));
    ok(c2 > 0 && c2 < 100, "a worker without reports has a legend entry and no line (%ld)", c2);
    ok(chart_worker_color(0).r != chart_worker_color(1).r, "workers' colours differ");
    /* Narrow and without points: the legend wraps onto rows of its own and keeps every entry,
     * the first (leftmost) included. */
    t.n = 0;
    canvas(200, 220);
    is_int(chart_throughput_draw(cr, 200, 220, &t), 0, "a narrow chart without points");
    ok(count_color(green) > 20 && count_color(chart_worker_color(0)) > 20 &&
           count_color(chart_worker_color(2)) > 20,
       "shows every legend entry, the first one included (%ld pixels)", count_color(green));
    t.n = 120;

    /* A local run: the total alone. */
    t.nworkers = 0;
    canvas(640, 300);
    int alone = chart_throughput_draw(cr, 640, 300, &t);
    ok(alone >= 100 && alone < drawn, "a local run draws the total only (%d points)", alone);
    is_int(count_color(chart_worker_color(0)), 0, "and no worker colour");
}

static void test_smooth(void)
{
    double y[5] = {1, 1, 1, 1, 1}, out[5];
    chart_smooth(out, y, 5, 0.9);
    is_float(out[0], 1.0, 1e-12, "the first smoothed point is not pulled towards 0");
    is_float(out[4], 1.0, 1e-12, "a constant stays constant");
    double z[3] = {0, NAN, 2};
    chart_smooth(out, z, 3, 0.5);
    ok(isnan(out[1]) && out[2] > 0 && out[2] < 2, "NaN points are gaps, skipped");
}

static void test_bars_thumbs_confusion(void)
{
    const char *labels[] = {"cat", "dog", "bird"};
    double v[] = {0.7, 0.2, 0.1};
    struct chart_bars b = {
        .n = 3, .labels = labels, .values = v, .fg = {0, 0, 0}, .bar = {0.2, 0.4, 0.9}};
    canvas(500, 200);
    is_int(chart_bars_draw(cr, 500, 200, &b), 3, "three bars");
    ok(count_color(b.bar) > 1000, "the top bar is drawn in full colour");

    uint8_t px[4 * 8 * 8];
    for (int i = 0; i < 4 * 64; i++)
        px[i] = (uint8_t)(i % 64 < 32 ? 255 : 0);
    const char *caps[] = {"a", "b", "c", "d"};
    struct chart_thumbs t = {.n = 4,
                             .c = 1,
                             .h = 8,
                             .w = 8,
                             .pixels = px,
                             .captions = caps,
                             .cell = 32,
                             .fg = {0, 0, 0}};
    canvas(100, 300);
    is_int(chart_thumbs_draw(cr, 100, 300, &t), 4, "four thumbnails");
    is_int(chart_thumbs_height(100, &t), 2 * (32 + 18) + 4, "two rows of two at width 100");
    /* Cells start at 4 and are 40 apart across, 50 down (32 + 18 for the caption). */
    is_int(chart_thumbs_hit(100, &t, 20, 20), 0, "a click on the first thumbnail finds it");
    is_int(chart_thumbs_hit(100, &t, 4 + 40 + 16, 4 + 50 + 16), 3, "and on the fourth");
    is_int(chart_thumbs_hit(100, &t, 40, 20), -1, "the gap between two finds none");
    is_int(chart_thumbs_hit(100, &t, 20, 4 + 100 + 16), -1, "nor a row past the last");

    long counts[9] = {50, 3, 0, 2, 40, 8, 0, 0, 47};
    struct chart_confusion m = {
        .k = 3, .counts = counts, .names = labels, .sel_row = 1, .sel_col = 2, .fg = {0, 0, 0}};
    canvas(400, 400);
    is_int(chart_confusion_draw(cr, 400, 400, &m), 9, "nine cells");
    int row = -1, col = -1;
    ok(chart_confusion_hit(400, 400, &m, 84 + 1.5 * 105, 84 + 0.5 * 105, &row, &col) == 0 &&
           row == 0 && col == 1,
       "a click finds its cell (%d, %d)", row, col);
    ok(chart_confusion_hit(400, 400, &m, 10, 10, &row, &col) < 0, "labels are no cell");
}

static void test_scatter(void)
{
    const float pred[4] = {1, 2, 3, 9}, actual[4] = {1, 2.5, 2, 10};
    struct chart_scatter sc = {.n = 4,
                               .pred = pred,
                               .actual = actual,
                               .title = "predicted against actual",
                               .fg = {0, 0, 0},
                               .dot = {0.9, 0.1, 0.1}};
    canvas(300, 240);
    is_int(chart_scatter_draw(cr, 300, 240, &sc), 4, "four points drawn");
    double x0, y0, x1, y1, x3, y3;
    chart_scatter_map(300, 240, &sc, 0, &x0, &y0);
    chart_scatter_map(300, 240, &sc, 1, &x1, &y1);
    chart_scatter_map(300, 240, &sc, 3, &x3, &y3);
    ok(x1 > x0 && y1 < y0 && x3 > x1 && y3 < y1, "larger values go right and up");
    /* Point 0 (1, 1) lies on the diagonal; one range on both axes puts it on the plot's. */
    const double fx = (x0 - 54) / (300 - 66), fy = (240 - 36 - y0) / (240 - 60);
    ok(fabs(fx - fy) < 1e-9, "a perfect prediction lies on the plot's diagonal (%.3f, %.3f)", fx,
       fy);
    ok(count_color(sc.dot) > 10, "the points are drawn in their colour");
    sc.residuals = 1;
    canvas(300, 240);
    is_int(chart_scatter_draw(cr, 300, 240, &sc), 4, "four residuals drawn");
    chart_scatter_map(300, 240, &sc, 0, &x0, &y0);
    chart_scatter_map(300, 240, &sc, 1, &x1, &y1);
    chart_scatter_map(300, 240, &sc, 2, &x3, &y3);
    ok(fabs(y0 - (24 + (240 - 60) / 2.0)) < 1 && y1 < y0 && y3 > y0,
       "a zero residual sits on the middle line, a positive one above, a negative one below "
       "(%.1f, %.1f, %.1f)",
       y0, y1, y3);
    is_int(chart_scatter_draw(cr, 30, 30, &sc), 0, "nothing in too small a space");
}

static struct feed feed;

static void *producer(void *arg)
{
    for (int i = 0; i < 100000; i++) {
        struct feed_point p = {.kind = FEED_ITER, .iter = i};
        feed_push(&feed, &p);
    }
    return NULL;
}

static void test_feed(void)
{
    struct feed_point out[64];
    ok(feed_init(&feed, 16) == 0, "a feed of 16");
    for (int i = 0; i < 20; i++) {
        struct feed_point p = {.iter = i};
        feed_push(&feed, &p);
    }
    int n = feed_pull(&feed, out, 64);
    is_int(n, 16, "the ring keeps the newest 16");
    is_int((int)out[0].iter, 4, "the oldest four were overwritten");
    is_int((int)feed.dropped, 4, "and counted as dropped");
    is_int(feed_pull(&feed, out, 64), 0, "pulling empties it");
    feed_release(&feed);

    /* A producer thread against a pulling consumer: points arrive in order, none invented. */
    feed_init(&feed, 1024);
    pthread_t th;
    pthread_create(&th, NULL, producer, NULL);
    long got = 0, last = -1, in_order = 1, done = 0;
    while (!done) {
        n = feed_pull(&feed, out, 64);
        for (int i = 0; i < n; i++) {
            in_order &= out[i].iter > last;
            last = out[i].iter;
        }
        got += n;
        done = last == 99999;
    }
    pthread_join(th, NULL);
    ok(in_order, "points come out in order");
    is_int(got + feed.dropped, 100000, "every point is pulled or counted as dropped");
    feed_release(&feed);

    /* Events: kept in order beside the points, the newest dropped when the queue is full. */
    static struct feed_event ev[FEED_EVENTS + 8];
    feed_init(&feed, 4);
    for (int i = 0; i < FEED_EVENTS + 5; i++) {
        struct feed_event e = {.step = i, .workers = 2};
        snprintf(e.host, sizeof e.host, "node%d", i);
        feed_push_event(&feed, &e);
        struct feed_point p = {.iter = i};
        feed_push(&feed, &p);
    }
    is_int(feed_pull_events(&feed, ev, 3), 3, "three events pulled");
    ok(ev[0].step == 0 && ev[2].step == 2 && strcmp(ev[1].host, "node1") == 0,
       "the oldest first, whole");
    n = feed_pull_events(&feed, ev, FEED_EVENTS + 8);
    is_int(n, FEED_EVENTS - 3, "then the rest of those that fitted");
    ok(n > 0 && ev[n - 1].step == FEED_EVENTS - 1, "in order, up to the last that fitted");
    is_int((int)feed.events_dropped, 5, "the newer ones counted as dropped");
    is_int(feed_pull(&feed, out, 64), 4, "points are unaffected");
    feed_release(&feed);
}

int main(void)
{
    plan(62);
    test_line_chart();
    test_events();
    test_event_colours();
    test_throughput();
    test_smooth();
    test_bars_thumbs_confusion();
    test_scatter();
    test_feed();
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    return done_testing();
}
