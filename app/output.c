/* Output for people and for scripts: JSON escaping, and training progress as a terminal bar, one
 * plain line per epoch, or JSON lines. The store's record of it is the session's
 * (core/store/session.c). */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "nnlab/alloc.h"
#include "nnlab/clock.h"
#include "nnlab/runs.h"
#include "nnlab/text.h"

void json_str(FILE *f, const char *s)
{
    nl_json_fputs(f, s);
}

void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

static void format_duration(char *buf, size_t size, double s)
{
    long t = isfinite(s) && s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, size, "%ld:%02ld", t / 60, t % 60);
}

static void draw_bar(const struct nl_event *ev)
{
    char eta[32];
    const int width = 24;
    int filled = (int)((double)ev->iter / (double)ev->iters * width + 0.5);

    format_duration(eta, sizeof eta, ev->eta_seconds);
    fprintf(stdout, "\r\033[Kepoch %d/%d [", ev->epoch, ev->epochs);
    for (int i = 0; i < width; i++)
        fputc(i < filled ? '#' : '.', stdout);
    fprintf(stdout, "] %3d%% loss %.4f %s %.4f %.0f img/s ETA %s",
            (int)(100.0 * (double)ev->iter / (double)ev->iters), ev->loss,
            ev->regression ? "R2" : "acc", ev->accuracy, ev->images_per_second, eta);
    if (ev->nworkers > 0) {
        /* A cluster run: the share of this step the workers spent communicating. */
        double comm = 0.0, busy = 0.0;
        for (int i = 0; i < ev->nworkers; i++) {
            comm += ev->workers[i].comm_seconds;
            busy += ev->workers[i].compute_seconds + ev->workers[i].comm_seconds;
        }
        fprintf(stdout, " %d workers, comm %.0f%%", ev->nworkers,
                busy > 0 ? 100.0 * comm / busy : 0.0);
    }
    fflush(stdout);
}

/* An epoch as one JSON line: its metrics and, for a cluster run, each worker's totals so far. */
static void print_epoch_json(const struct nl_event *ev)
{
    printf("{\"event\":\"epoch\",\"epoch\":%d,\"train_loss\":", ev->epoch);
    json_num(stdout, ev->loss);
    printf(",\"train_accuracy\":");
    json_num(stdout, ev->accuracy);
    printf(",\"val_accuracy\":");
    json_num(stdout, ev->val_accuracy);
    if (ev->regression) {
        /* R^2 where a classification run has accuracy, and the errors in target units. */
        printf(",\"train_r2\":");
        json_num(stdout, ev->accuracy);
        printf(",\"train_mae\":");
        json_num(stdout, ev->mae);
        printf(",\"train_rmse\":");
        json_num(stdout, ev->rmse);
        printf(",\"val_r2\":");
        json_num(stdout, ev->val_accuracy);
        printf(",\"val_mae\":");
        json_num(stdout, ev->val_mae);
        printf(",\"val_rmse\":");
        json_num(stdout, ev->val_rmse);
    }
    printf(",\"train_seconds\":");
    json_num(stdout, ev->seconds);
    printf(",\"images_per_second\":");
    json_num(stdout, ev->images_per_second);
    printf(",\"skipped_batches\":%ld", ev->skipped_batches);
    if (ev->nworkers > 0) {
        printf(",\"workers\":[");
        for (int i = 0; i < ev->nworkers; i++) {
            const struct nl_worker_metrics *w = &ev->workers[i];
            printf("%s{\"host\":", i ? "," : "");
            json_str(stdout, w->host);
            printf(",\"samples\":%ld,\"loss\":", w->samples);
            json_num(stdout, w->loss);
            printf(",\"compute_seconds\":");
            json_num(stdout, w->compute_seconds);
            printf(",\"comm_seconds\":");
            json_num(stdout, w->comm_seconds);
            printf(",\"bytes_sent\":%llu}", w->bytes_sent);
        }
        printf("]");
    }
    printf("}\n");
}

/* An epoch as one line for people, over the progress bar on a terminal. */
static void print_epoch_text(const struct nl_event *ev, int tty)
{
    if (tty)
        fputs("\r\033[K", stdout);
    if (ev->regression) {
        printf("epoch %d/%d  loss %.4f  R2 %.4f  MAE %.4g  RMSE %.4g", ev->epoch, ev->epochs,
               ev->loss, ev->accuracy, ev->mae, ev->rmse);
        if (isfinite(ev->val_accuracy))
            printf("  val_R2 %.4f  val_MAE %.4g  val_RMSE %.4g", ev->val_accuracy, ev->val_mae,
                   ev->val_rmse);
    } else {
        printf("epoch %d/%d  loss %.4f  acc %.4f", ev->epoch, ev->epochs, ev->loss, ev->accuracy);
        if (isfinite(ev->val_accuracy))
            printf("  val_acc %.4f", ev->val_accuracy);
    }
    printf("  %.1f s  %.0f img/s", ev->seconds, ev->images_per_second);
    if (ev->skipped_batches > 0)
        printf("  skipped %ld batches", ev->skipped_batches);
    printf("\n");
}

static void print_epoch(const struct nl_event *ev, int tty)
{
    if (g.json)
        print_epoch_json(ev);
    else if (!g.quiet)
        print_epoch_text(ev, tty);
    fflush(stdout);
}

/* A cluster run lost a worker: "node2: worker died (...); restarted (1 of 3), continuing from
 * step 36 on 2 workers", or a JSON line. */
static void print_recovery(const struct nl_recovery *r, int tty)
{
    if (g.json) {
        printf("{\"event\":\"recovery\",\"host\":");
        json_str(stdout, r->host);
        printf(",\"what\":");
        json_str(stdout, r->what);
        printf(",\"action\":");
        json_str(stdout, r->action);
        printf(",\"restarts\":%d,\"max_restarts\":%d,\"step\":%ld,\"workers\":%d}\n", r->restarts,
               r->max_restarts, r->step, r->workers);
    } else if (!g.quiet) {
        if (tty)
            fputs("\r\033[K", stdout);
        printf("%s: %s; %s", r->host, r->what, r->action);
        if (strcmp(r->action, "restarted") == 0)
            printf(" (%d of %d)", r->restarts, r->max_restarts);
        printf(", continuing from step %ld on %d worker%s\n", r->step, r->workers,
               r->workers == 1 ? "" : "s");
    }
    fflush(stdout);
}

/* What --overlap auto measured and chose: "overlap: measured 41.2 ms synchronous, 35.0 ms
 * overlapped: overlapping from step 28", or a JSON line. */
static void print_overlap(const struct nl_overlap_choice *c, int tty)
{
    if (g.json) {
        printf("{\"event\":\"overlap\",\"step\":%ld,\"sync_ms\":", c->step);
        json_num(stdout, 1e3 * c->sync_seconds);
        printf(",\"overlapped_ms\":");
        json_num(stdout, 1e3 * c->overlap_seconds);
        printf(",\"overlapped\":%s}\n", c->overlapped ? "true" : "false");
    } else if (!g.quiet) {
        if (tty)
            fputs("\r\033[K", stdout);
        printf("overlap: measured %.1f ms synchronous, %.1f ms overlapped: %s from step %ld\n",
               1e3 * c->sync_seconds, 1e3 * c->overlap_seconds,
               c->overlapped ? "overlapping" : "synchronous", c->step + 1);
    }
    fflush(stdout);
}

int progress_event(void *ud, const struct nl_event *ev)
{
    struct progress *p = ud;

    if (ev->kind == NL_EVENT_ITER) {
        /* Redraw at most ten times a second, and on the last step. */
        if (p->tty && !g.json && !g.quiet) {
            double t = nl_now();
            if (t - p->last_draw >= 0.1 || ev->iter == ev->iters) {
                p->last_draw = t;
                draw_bar(ev);
            }
        }
    } else if (ev->kind == NL_EVENT_RECOVERY && ev->recovery) {
        print_recovery(ev->recovery, p->tty);
    } else if (ev->kind == NL_EVENT_OVERLAP && ev->overlap) {
        print_overlap(ev->overlap, p->tty);
    } else if (ev->kind == NL_EVENT_EPOCH) {
        print_epoch(ev, p->tty);
    }
    return interrupted ? 1 : 0;
}
